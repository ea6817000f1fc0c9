//! The page's side of the engine worker: starts it and carries messages both ways.
//!
//! Trunk builds the engine as a worker (`kvscope-engine` in index.html, `data-type="worker"`)
//! and writes a loader beside the page that runs it. A message is a two-element array: the
//! encoded message's `ArrayBuffer` (transferred) and what rides beside it, or `null`.

use std::rc::Rc;

use leptos::prelude::WithUntracked;

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::contexts::{EngineLink, Fleet, crashed};

/// The engine in a dedicated Web Worker.
pub struct WorkerLink {
    worker: web_sys::Worker,
    // The handlers live as long as the worker.
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::ErrorEvent)>,
}

impl std::fmt::Debug for WorkerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLink").finish_non_exhaustive()
    }
}

impl WorkerLink {
    /// Starts the worker; its messages go to `fleet`. `None` (and the page says why) when the
    /// browser cannot start it.
    pub fn start(fleet: Fleet) -> Option<Rc<WorkerLink>> {
        // The worker reads how many engine workers to run from its name, before any message.
        let options = web_sys::WorkerOptions::new();
        options.set_name(&kvscope_engine_protocol::engine_worker_name(fleet.settings.with_untracked(|s| s.engines())));
        let worker = match web_sys::Worker::new_with_options(kvscope_engine_protocol::ENGINE_WORKER_URL, &options) {
            Ok(w) => w,
            Err(e) => {
                crashed(&format!("the engine worker could not start: {}", text(&e)));
                return None;
            }
        };
        let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let array: js_sys::Array = ev.data().unchecked_into();
            let bytes = array.get(0).dyn_into::<js_sys::ArrayBuffer>().map(|b| js_sys::Uint8Array::new(&b).to_vec()).unwrap_or_default();
            fleet.receive(&bytes, array.get(1));
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        // A script that fails to load, a trap or an allocation failure in the worker: its wasm
        // is dead, and the page must not go on looking live.
        let on_error = Closure::<dyn FnMut(web_sys::ErrorEvent)>::new(move |ev: web_sys::ErrorEvent| {
            ev.prevent_default();
            crashed(&format!("the engine worker stopped: {}", ev.message()));
        });
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Some(Rc::new(WorkerLink { worker, _on_message: on_message, _on_error: on_error }))
    }
}

impl EngineLink for WorkerLink {
    fn send(&self, bytes: Vec<u8>, extra: JsValue) {
        let buffer = js_sys::Uint8Array::from(&bytes[..]).buffer();
        let transfer = js_sys::Array::of1(&buffer);
        if let Err(e) = self.worker.post_message_with_transfer(&js_sys::Array::of2(&buffer, &extra), &transfer) {
            crashed(&format!("a message to the engine worker failed: {}", text(&e)));
        }
    }
}

fn text(v: &JsValue) -> String {
    v.as_string().or_else(|| v.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message()))).unwrap_or_else(|| format!("{v:?}"))
}
