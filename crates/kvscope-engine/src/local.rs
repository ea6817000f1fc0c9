//! The engine on the page's own thread, for the component tests: the same [`Host`] as in the
//! worker, behind the same bytes, only delivered by a task instead of `postMessage`.
//!
//! Messages to the engine are handled at once; messages to the page arrive in a later task, as
//! from a worker, so neither side ever runs inside the other.

use std::rc::Rc;

use wasm_bindgen::JsValue;

use crate::host::Host;

/// An engine running in this thread (one engine worker's worth: no shards).
#[derive(Clone, Debug)]
pub struct LocalEngine {
    host: Rc<Host>,
}

impl LocalEngine {
    /// Starts an engine whose messages reach `to_page` (the encoded message and what rides
    /// beside it), each in a task of its own.
    pub fn start(to_page: impl Fn(Vec<u8>, JsValue) + 'static) -> LocalEngine {
        let to_page = Rc::new(to_page);
        let host = Host::start(
            Box::new(move |bytes: Vec<u8>, extra: Option<JsValue>| {
                let to_page = to_page.clone();
                let extra = extra.unwrap_or(JsValue::NULL);
                wasm_bindgen_futures::spawn_local(async move { to_page(bytes, extra) });
            }),
            1,
        );
        LocalEngine { host }
    }

    /// One message from the page.
    pub fn send(&self, bytes: &[u8], extra: JsValue) {
        self.host.handle(bytes, extra);
    }
}
