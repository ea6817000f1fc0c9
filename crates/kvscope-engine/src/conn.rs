//! The WebSocket to the kvscope server: the only file that touches `web_sys::WebSocket`. It
//! runs in the engine's worker, so the page's main thread never handles a frame.
//!
//! It opens `/ws` (binary type `arraybuffer`), hands every binary message's bytes to one
//! callback, and reconnects with capped exponential backoff when the server goes away. It does
//! not decode anything: the model does ([`crate::model::Model::apply_message_bytes`]). On
//! reconnect the server sends its hello and history again; the model starts over on each hello
//! (see `Model::apply_hello`), so nothing is counted twice.
//!
//! The state is an explicit enum ([`ConnState`], in the engine protocol: the page shows it) with
//! the backoff policy as plain data ([`Backoff`]), so both are tested natively (tokio-console's
//! `conn.rs` keeps the same shape).

use std::cell::RefCell;
use std::rc::Rc;

use kvscope_engine_protocol::view::ConnState;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;

/// Capped exponential backoff: `base_ms * 2^attempt`, at most `cap_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub base_ms: f64,
    pub cap_ms: f64,
}

impl Default for Backoff {
    /// 250 ms doubling to 5 s: a restarted server is picked up within 5 s, and a server that is
    /// gone for good costs one attempt every 5 s.
    fn default() -> Self {
        Backoff { base_ms: 250.0, cap_ms: 5_000.0 }
    }
}

impl Backoff {
    /// The wait before attempt number `attempt + 1` after `attempt` consecutive failures.
    /// `jitter` in `[0, 1)` spreads reconnects of many tabs by up to a fifth of the delay.
    pub fn delay_ms(&self, attempt: u32, jitter: f64) -> f64 {
        let exp = self.base_ms * 2f64.powi(attempt.min(30) as i32);
        let d = exp.min(self.cap_ms);
        d * (1.0 - 0.2 * jitter.clamp(0.0, 1.0))
    }
}

/// What the connection reports to the engine.
pub trait ConnSink: 'static {
    /// One binary message, as received.
    fn message(&self, bytes: Vec<u8>);
    /// A state change.
    fn state(&self, state: ConnState);
}

struct Inner {
    url: String,
    backoff: Backoff,
    attempt: u32,
    ws: Option<web_sys::WebSocket>,
    sink: Rc<dyn ConnSink>,
    stopped: bool,
    // The closures must live as long as the socket that calls them.
    _handlers: Vec<Closure<dyn FnMut(web_sys::Event)>>,
    _on_message: Option<Closure<dyn FnMut(web_sys::MessageEvent)>>,
    _timer: Option<Closure<dyn FnMut()>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("url", &self.url).field("attempt", &self.attempt).finish()
    }
}

/// A live connection; dropping it does not close it, [`Connection::stop`] does.
#[derive(Clone, Debug)]
pub struct Connection {
    inner: Rc<RefCell<Inner>>,
}

impl Connection {
    /// Starts connecting to `url`; every message and state change goes to `sink`.
    pub fn start(url: String, sink: Rc<dyn ConnSink>) -> Connection {
        let inner = Rc::new(RefCell::new(Inner {
            url,
            backoff: Backoff::default(),
            attempt: 0,
            ws: None,
            sink,
            stopped: false,
            _handlers: Vec::new(),
            _on_message: None,
            _timer: None,
        }));
        let conn = Connection { inner };
        conn.open();
        conn
    }

    /// Closes the socket and stops reconnecting (a capture was opened).
    pub fn stop(&self) {
        let sink = {
            let mut inner = self.inner.borrow_mut();
            inner.stopped = true;
            if let Some(ws) = inner.ws.take() {
                ws.set_onclose(None);
                ws.set_onerror(None);
                ws.set_onmessage(None);
                ws.set_onopen(None);
                let _ = ws.close();
            }
            inner.sink.clone()
        };
        sink.state(ConnState::Off);
    }

    fn open(&self) {
        let (url, attempt, sink) = {
            let inner = self.inner.borrow();
            if inner.stopped {
                return;
            }
            (inner.url.clone(), inner.attempt, inner.sink.clone())
        };
        sink.state(ConnState::Connecting { attempt });
        let ws = match web_sys::WebSocket::new(&url) {
            Ok(ws) => ws,
            Err(e) => {
                let reason = e.as_string().unwrap_or_else(|| format!("cannot open {url}"));
                self.schedule_retry(reason);
                return;
            }
        };
        ws.set_binary_type(web_sys::BinaryType::Arraybuffer);

        let on_message = {
            let sink = sink.clone();
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
                if let Ok(buf) = ev.data().dyn_into::<js_sys::ArrayBuffer>() {
                    sink.message(js_sys::Uint8Array::new(&buf).to_vec());
                }
            })
        };
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));

        let on_open = {
            let this = self.clone();
            Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
                let sink = {
                    let mut inner = this.inner.borrow_mut();
                    inner.attempt = 0;
                    inner.sink.clone()
                };
                sink.state(ConnState::Open);
            })
        };
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));

        let on_close = {
            let this = self.clone();
            Closure::<dyn FnMut(web_sys::Event)>::new(move |ev: web_sys::Event| {
                let reason = match ev.dyn_ref::<web_sys::CloseEvent>() {
                    Some(c) if !c.reason().is_empty() => format!("closed ({}): {}", c.code(), c.reason()),
                    Some(c) => format!("closed (code {})", c.code()),
                    None => "closed".to_owned(),
                };
                this.schedule_retry(reason);
            })
        };
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));

        let mut inner = self.inner.borrow_mut();
        inner.ws = Some(ws);
        inner._handlers = vec![on_open, on_close];
        inner._on_message = Some(on_message);
    }

    fn schedule_retry(&self, reason: String) {
        let (delay_ms, attempt, sink) = {
            let mut inner = self.inner.borrow_mut();
            if inner.stopped {
                return;
            }
            if let Some(ws) = inner.ws.take() {
                ws.set_onclose(None);
                ws.set_onmessage(None);
                ws.set_onopen(None);
            }
            let attempt = inner.attempt;
            let delay = inner.backoff.delay_ms(attempt, js_sys::Math::random());
            inner.attempt = attempt.saturating_add(1);
            (delay, attempt, inner.sink.clone())
        };
        sink.state(ConnState::Waiting { attempt, delay_ms, reason });
        let this = self.clone();
        let timer = Closure::<dyn FnMut()>::new(move || this.open());
        crate::scope::set_timeout(timer.as_ref().unchecked_ref(), delay_ms as i32);
        self.inner.borrow_mut()._timer = Some(timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay_ms(0, 0.0), 250.0);
        assert_eq!(b.delay_ms(1, 0.0), 500.0);
        assert_eq!(b.delay_ms(4, 0.0), 4_000.0);
        assert_eq!(b.delay_ms(5, 0.0), 5_000.0);
        assert_eq!(b.delay_ms(1_000, 0.0), 5_000.0);
        assert_eq!(b.delay_ms(10, 1.0), 4_000.0, "jitter shortens by at most a fifth");
    }
}
