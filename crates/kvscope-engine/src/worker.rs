//! The engine in the dashboard's Web Worker: the bin's `main` calls [`run`].
//!
//! Messages both ways are a two-element array: the encoded message's `ArrayBuffer`, and what
//! rides beside it (a capture's `File` from the page, the timeline's pixels to it) or `null`.
//! Buffers are transferred, never copied across.

use kvscope_engine_protocol::FromEngine;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::host::Host;

/// Starts the engine in this worker and tells the page it is ready.
pub fn run() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        web_sys::console::error_1(&"kvscope-engine runs in a dedicated worker, and this is none".into());
        return;
    };
    install_panic_hook();
    let out = scope.clone();
    let host = Host::start(Box::new(move |message: &FromEngine, extra: Option<JsValue>| post(&out, message, extra)));
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
        let (bytes, extra) = unpack(&ev.data());
        host.handle(&bytes, extra);
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page: so does its handler.
    on_message.forget();
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

fn post(scope: &web_sys::DedicatedWorkerGlobalScope, message: &FromEngine, extra: Option<JsValue>) {
    let (data, transfer) = pack(&kvscope_engine_protocol::encode(message), extra);
    if let Err(e) = scope.post_message_with_transfer(&data, &transfer) {
        web_sys::console::error_1(&e);
    }
}

/// Tells the page when the engine panicked: the wasm instance is dead after it, and a page
/// still showing "connected" would lie.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let text = format!("kvscope's engine panicked: {info}");
        web_sys::console::error_1(&text.clone().into());
        if let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() {
            post(&scope, &FromEngine::Crashed(text), None);
        }
    }));
}
