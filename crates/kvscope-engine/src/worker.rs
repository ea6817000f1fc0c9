//! The engine in the dashboard's Web Workers: the bin's `main` calls [`run`].
//!
//! The page starts one engine worker, named for how many to run
//! (`kvscope_engine_protocol::engine_worker_name`); that one coordinates and starts the others
//! from the same script ([`start_shard`]), each named for its shard. Messages both ways are a
//! two-element array: the encoded message's `ArrayBuffer`, and what rides beside it (a
//! capture's `File`, the timeline's pixels) or `null`. Buffers are transferred, never copied
//! across.

use std::cell::RefCell;
use std::rc::Rc;

use kvscope_engine_protocol::FromEngine;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::coordinator::protocol::{self, FromShardWorker, ToShardWorker};
use crate::host::{Host, Remote};

/// A shard's worker is named this, then its number.
const SHARD_NAME: &str = "kvscope-engine shard ";

/// Starts the engine in this worker: the page's (the coordinator and shard 0), or a shard's.
pub fn run() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        web_sys::console::error_1(&"kvscope-engine runs in a dedicated worker, and this is none".into());
        return;
    };
    let name = scope.name();
    let shard = name.strip_prefix(SHARD_NAME).is_some();
    install_panic_hook(shard);
    if shard {
        return run_shard(scope);
    }
    let out = scope.clone();
    let engines = kvscope_engine_protocol::engines_of_worker_name(&name);
    let host = Host::start(Box::new(move |bytes: Vec<u8>, extra: Option<JsValue>| post(&out, &bytes, extra)), engines);
    listen(&scope, move |bytes, extra| host.handle(&bytes, extra));
}

/// A shard's worker: its host starts with the coordinator's first message, which says which
/// shard it is.
fn run_shard(scope: web_sys::DedicatedWorkerGlobalScope) {
    let out = scope.clone();
    let host: RefCell<Option<Rc<Host>>> = RefCell::new(None);
    listen(&scope, move |bytes, extra| {
        if let Some(h) = host.borrow().as_ref() {
            return h.handle(&bytes, extra);
        }
        if let Ok(ToShardWorker::Start { index, count }) = protocol::decode::<ToShardWorker>(&bytes) {
            let out = out.clone();
            let post = Box::new(move |bytes: Vec<u8>, extra: Option<JsValue>| post(&out, &bytes, extra));
            *host.borrow_mut() = Some(Host::start_shard(index, count, post));
        }
    });
    post(&scope, &protocol::encode(&FromShardWorker::Ready), None);
}

fn listen(scope: &web_sys::DedicatedWorkerGlobalScope, on: impl Fn(Vec<u8>, JsValue) + 'static) {
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
        let (bytes, extra) = unpack(&ev.data());
        on(bytes, extra);
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page: so does its handler.
    on_message.forget();
}

/// Starts engine worker `index` of `count` from this worker's own script; its messages go to
/// `on_message`. What is sent to it before it said it is ready waits here: a worker's script
/// starts its wasm asynchronously, and a message that comes before its handler is lost.
pub fn start_shard(index: u32, count: u32, on_message: Box<dyn Fn(Vec<u8>)>) -> Result<Remote, String> {
    let options = web_sys::WorkerOptions::new();
    options.set_name(&format!("{SHARD_NAME}{index}"));
    let worker =
        web_sys::Worker::new_with_options(kvscope_engine_protocol::ENGINE_WORKER_URL, &options).map_err(|e| crate::scope::js_text(&e))?;
    let post = {
        let worker = worker.clone();
        move |bytes: &[u8], extra: Option<JsValue>| {
            let (data, transfer) = pack(bytes, extra);
            if let Err(e) = worker.post_message_with_transfer(&data, &transfer) {
                web_sys::console::error_1(&e);
            }
        }
    };
    // Until the worker is ready, what is sent waits here.
    type Waiting = Option<Vec<(Vec<u8>, Option<JsValue>)>>;
    let waiting: Rc<RefCell<Waiting>> = Rc::new(RefCell::new(Some(Vec::new())));
    let on_message = Rc::new(on_message);
    let on_answer = {
        let (on_message, waiting, post) = (on_message.clone(), waiting.clone(), post.clone());
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let bytes = unpack(&ev.data()).0;
            if waiting.borrow().is_some() && matches!(protocol::decode::<FromShardWorker>(&bytes), Ok(FromShardWorker::Ready)) {
                let queued = waiting.borrow_mut().take().unwrap_or_default();
                for (bytes, extra) in queued {
                    post(&bytes, extra);
                }
            }
            on_message(bytes);
        })
    };
    worker.set_onmessage(Some(on_answer.as_ref().unchecked_ref()));
    // A script that fails to load, a trap: its shard is gone, and the page must say so.
    let on_error = Closure::<dyn FnMut(web_sys::ErrorEvent)>::new(move |ev: web_sys::ErrorEvent| {
        ev.prevent_default();
        on_message(protocol::encode(&FromShardWorker::Crashed(format!("it stopped: {}", ev.message()))));
    });
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    // The workers live as long as the page: so do their handlers.
    on_answer.forget();
    on_error.forget();
    let send = move |bytes: Vec<u8>, extra: Option<JsValue>| match waiting.borrow_mut().as_mut() {
        Some(queue) => queue.push((bytes, extra)),
        None => post(&bytes, extra),
    };
    send(protocol::encode(&ToShardWorker::Start { index, count }), None);
    Ok(Box::new(send))
}

/// `[message, extra]` into the message's bytes and the extra value.
pub fn unpack(data: &JsValue) -> (Vec<u8>, JsValue) {
    let array: js_sys::Array = data.clone().unchecked_into();
    let bytes = array.get(0).dyn_into::<js_sys::ArrayBuffer>().map(|b| js_sys::Uint8Array::new(&b).to_vec()).unwrap_or_default();
    (bytes, array.get(1))
}

/// `[message, extra]`, with the buffers to transfer.
pub fn pack(bytes: &[u8], extra: Option<JsValue>) -> (js_sys::Array, js_sys::Array) {
    let buffer = js_sys::Uint8Array::from(bytes).buffer();
    let transfer = js_sys::Array::of1(&buffer);
    let extra = extra.unwrap_or(JsValue::NULL);
    if extra.is_instance_of::<js_sys::ArrayBuffer>() {
        transfer.push(&extra);
    }
    (js_sys::Array::of2(&buffer, &extra), transfer)
}

fn post(scope: &web_sys::DedicatedWorkerGlobalScope, bytes: &[u8], extra: Option<JsValue>) {
    let (data, transfer) = pack(bytes, extra);
    if let Err(e) = scope.post_message_with_transfer(&data, &transfer) {
        web_sys::console::error_1(&e);
    }
}

/// Tells the page (or, in a shard's worker, the coordinator) when the engine panicked: the wasm
/// instance is dead after it, and a page still showing "connected" would lie.
fn install_panic_hook(shard: bool) {
    std::panic::set_hook(Box::new(move |info| {
        let text = format!("kvscope's engine panicked: {info}");
        web_sys::console::error_1(&text.clone().into());
        if let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() {
            let bytes = if shard {
                protocol::encode(&FromShardWorker::Crashed(text))
            } else {
                kvscope_engine_protocol::encode(&FromEngine::Crashed(text))
            };
            post(&scope, &bytes, None);
        }
    }));
}
