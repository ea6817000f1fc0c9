//! [`Host`]: the engine's I/O. It takes the page's messages, owns the WebSocket and the opened
//! capture file, applies what the socket delivers a slice of time at a time, and sends the
//! page a summary at most every [`crate::pace::FLUSH_MS`], one at a time: the next only after
//! the page said it applied the last ([`ToEngine::Ack`]), so a busy page never has summaries
//! piling up, and no sooner than what the last ones cost the page allows ([`Pace`]).
//!
//! The same host runs in the dashboard's worker (`crate::worker`) and, for the component tests,
//! on the page's own thread (`crate::local`); only how a message reaches the page differs.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use kvscope_engine_protocol::view::{CaptureProgress, ConnState};
use kvscope_engine_protocol::{ENGINE_PROTOCOL_VERSION, FromEngine, Settings, ToEngine};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::conn::{ConnSink, Connection};
use crate::engine::Engine;
use crate::model::intake::{IntakeQueue, Next};
use crate::pace::Pace;
use crate::scope;

/// How long the engine applies received messages before it yields to the page's requests and
/// the socket: well under what a person notices on a hover.
pub const INTAKE_SLICE_MS: f64 = 10.0;

/// How a message reaches the page: the message, and what rides beside it (the timeline's
/// pixels as an `ArrayBuffer`, to be transferred).
pub type Post = Box<dyn Fn(&FromEngine, Option<JsValue>)>;

/// The channel the intake yields through, and the callback that takes its turn.
type YieldChannel = (web_sys::MessageChannel, Closure<dyn FnMut()>);

#[derive(Debug, Default)]
struct Flush {
    /// A timed flush is pending.
    timer: bool,
    /// A summary was sent and not acknowledged yet.
    awaiting_ack: bool,
    /// A flush came due while waiting for the acknowledgement.
    wanted: bool,
    /// `Sync` ids the next summary answers.
    answers: Vec<u64>,
    /// What summaries cost the page, so how often they go.
    pace: Pace,
    /// When the last summary went (`scope::now_ms`).
    posted_ms: f64,
}

/// The engine with its edges.
pub struct Host {
    engine: RefCell<Engine>,
    intake: RefCell<IntakeQueue>,
    intake_scheduled: Cell<bool>,
    channel: RefCell<Option<YieldChannel>>,
    connection: RefCell<Option<Connection>>,
    /// The server's WebSocket URL (its `/frame` answers the inspector's requests).
    server_url: RefCell<Option<String>>,
    /// The file the open capture came from (its records are read again on request).
    capture_file: RefCell<Option<web_sys::File>>,
    flush: RefCell<Flush>,
    post: Post,
    me: Weak<Host>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("flush", &self.flush).finish_non_exhaustive()
    }
}

impl Host {
    /// A host whose messages to the page go through `post`; it says it is ready at once.
    pub fn start(post: Post) -> Rc<Host> {
        let host = Rc::new_cyclic(|me| Host {
            engine: RefCell::new(Engine::new(Settings::default())),
            intake: RefCell::new(IntakeQueue::default()),
            intake_scheduled: Cell::new(false),
            channel: RefCell::new(None),
            connection: RefCell::new(None),
            server_url: RefCell::new(None),
            capture_file: RefCell::new(None),
            flush: RefCell::new(Flush::default()),
            post,
            me: me.clone(),
        });
        (host.post)(&FromEngine::Ready { version: ENGINE_PROTOCOL_VERSION }, None);
        host
    }

    fn rc(&self) -> Option<Rc<Host>> {
        self.me.upgrade()
    }

    /// Runs `f` on the engine.
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut self.engine.borrow_mut())
    }

    /// One message from the page, and what rode beside it (a capture's `File`).
    pub fn handle(&self, bytes: &[u8], extra: JsValue) {
        let message = match kvscope_engine_protocol::decode::<ToEngine>(bytes) {
            Ok(m) => m,
            Err(e) => {
                // The page and the engine disagree on what a message is: nothing can work.
                (self.post)(&FromEngine::Crashed(e.to_string()), None);
                return;
            }
        };
        match message {
            ToEngine::View(q) => {
                self.with_engine(|e| e.set_view(*q));
                self.flush_soon();
            }
            ToEngine::Connect { url } => self.connect(url),
            #[cfg(feature = "test-hooks")]
            ToEngine::Ingest(bytes) => {
                self.intake.borrow_mut().push(bytes);
                self.apply_queued(f64::INFINITY);
            }
            ToEngine::OpenCapture { name } => match extra.dyn_into::<web_sys::File>() {
                Ok(file) => self.spawn_capture(file),
                Err(_) => self.capture_progress(CaptureProgress::Failed { name, error: "no file came with the request".to_owned() }),
            },
            ToEngine::Select(id) => {
                self.with_engine(|e| e.select(id));
                self.flush_soon();
            }
            ToEngine::SelectNext { min_severity } => {
                self.with_engine(|e| e.select_next(min_severity));
                self.flush_soon();
            }
            ToEngine::SelectAt { source, side, time_ms, tolerance_ms } => {
                self.with_engine(|e| e.select_at(source, side, time_ms, tolerance_ms));
                self.flush_soon();
            }
            ToEngine::Hover { source, side, from_ms, to_ms } => {
                let text = self.with_engine(|e| e.hover(source, side, from_ms, to_ms));
                (self.post)(&FromEngine::Hover(text), None);
            }
            ToEngine::FetchBytes(id) => self.fetch_bytes(id),
            ToEngine::Export(kind) => {
                let now = (js_sys::Date::now() * 1e6) as u64;
                let (name, mime, bytes) = self.with_engine(|e| e.export(kind, now));
                (self.post)(&FromEngine::Download { name, mime, bytes }, None);
            }
            ToEngine::Ack { page_ms, .. } => {
                let (wanted, asked) = {
                    let mut f = self.flush.borrow_mut();
                    f.awaiting_ack = false;
                    f.pace.took(page_ms);
                    (std::mem::take(&mut f.wanted), !f.answers.is_empty())
                };
                // What the page asked for goes at once; what the data changed waits its pace.
                if asked {
                    self.flush_now();
                } else if wanted {
                    self.schedule_flush();
                }
            }
            #[cfg(feature = "test-hooks")]
            ToEngine::Sync { id } => {
                self.flush.borrow_mut().answers.push(id);
                self.flush_soon();
            }
        }
    }

    // --- The server's socket -------------------------------------------------------------

    fn connect(&self, url: String) {
        self.disconnect();
        let Some(me) = self.rc() else { return };
        *self.server_url.borrow_mut() = Some(url.clone());
        let conn = Connection::start(url, Rc::new(Sink { host: Rc::downgrade(&me) }));
        *self.connection.borrow_mut() = Some(conn);
    }

    /// Closes the WebSocket for good (a capture was opened).
    pub fn disconnect(&self) {
        let conn = self.connection.borrow_mut().take();
        if let Some(c) = conn {
            c.stop();
        }
        self.set_conn(ConnState::Off);
    }

    fn set_conn(&self, state: ConnState) {
        self.with_engine(|e| e.set_conn(state));
        self.schedule_flush();
    }

    /// Queues one WebSocket message as it arrived and applies what is queued a time slice at a
    /// time ([`INTAKE_SLICE_MS`]).
    fn receive(&self, bytes: Vec<u8>) {
        let bound = self.with_engine(|e| e.settings().intake_bytes());
        let dropped_now = {
            let mut queue = self.intake.borrow_mut();
            queue.set_bound(bound);
            let before = queue.status().dropped_messages;
            queue.push(bytes);
            let now = queue.status().dropped_messages;
            (now != before).then_some(now)
        };
        if let Some(n) = dropped_now {
            // Every count now misses those frames: the data-quality strip and the fleet bar say so.
            self.with_engine(|e| {
                let m = e.model_mut();
                m.intake_dropped_messages = n;
                m.dirty = true;
            });
        }
        self.schedule_intake();
    }

    /// Applies queued messages in order for up to `budget_ms`; true when some are left.
    fn apply_queued(&self, budget_ms: f64) -> bool {
        let start = scope::now_ms();
        let mut left = false;
        let mut engine = self.engine.borrow_mut();
        let mut queue = self.intake.borrow_mut();
        // The wall clock against the page's, for how far behind live the applied frames are.
        engine.model_mut().wall_offset_ms = Some(js_sys::Date::now() - start);
        loop {
            // One clock read a message, for the budget and the message alike.
            let now = scope::now_ms();
            if now - start >= budget_ms {
                left = !queue.is_empty();
                break;
            }
            match queue.pop() {
                None => break,
                Some(Next::Message(message)) => engine.apply_server_message(message, now),
                Some(Next::Error(e)) => engine.model_mut().note_protocol_error(&e),
            }
        }
        drop((engine, queue));
        self.schedule_flush();
        left
    }

    fn schedule_intake(&self) {
        if self.intake_scheduled.replace(true) {
            return;
        }
        let mut channel = self.channel.borrow_mut();
        if channel.is_none() {
            let me = self.me.clone();
            let on_turn = Closure::<dyn FnMut()>::new(move || {
                let Some(host) = me.upgrade() else { return };
                host.intake_scheduled.set(false);
                if host.apply_queued(INTAKE_SLICE_MS) {
                    host.schedule_intake();
                }
            });
            let Ok(ch) = web_sys::MessageChannel::new() else {
                // No channel (not a browser): apply everything now, in order.
                drop(channel);
                self.intake_scheduled.set(false);
                self.apply_queued(f64::INFINITY);
                return;
            };
            ch.port1().set_onmessage(Some(on_turn.as_ref().unchecked_ref()));
            *channel = Some((ch, on_turn));
        }
        // A MessageChannel message runs at once; nested `setTimeout(0)`s wait 4 ms each.
        if let Some((ch, _)) = channel.as_ref() {
            let _ = ch.port2().post_message(&JsValue::NULL);
        }
    }

    // --- Summaries -----------------------------------------------------------------------

    /// A summary when the page's pace allows: [`crate::pace::FLUSH_MS`] or more after the last
    /// one went ([`Pace::interval_ms`]). The data changed.
    pub fn schedule_flush(&self) {
        let delay_ms = {
            let mut f = self.flush.borrow_mut();
            if f.timer {
                return;
            }
            f.timer = true;
            f.pace.wait_ms(scope::now_ms() - f.posted_ms)
        };
        let me = self.me.clone();
        scope::after_ms(delay_ms.ceil() as i32, move || {
            if let Some(host) = me.upgrade() {
                host.flush.borrow_mut().timer = false;
                host.flush_now();
            }
        });
    }

    /// A summary as soon as the page took the last one: the page asked for something.
    pub fn flush_soon(&self) {
        self.flush_now();
    }

    fn flush_now(&self) {
        let answers = {
            let mut f = self.flush.borrow_mut();
            if f.awaiting_ack {
                f.wanted = true;
                return;
            }
            std::mem::take(&mut f.answers)
        };
        let status = self.intake.borrow().status();
        let pace = self.flush.borrow().pace;
        let made = self.with_engine(|e| {
            if e.paused() && answers.is_empty() {
                return None;
            }
            e.note_resources(status, scope::wasm_memory_bytes());
            e.note_pace(&pace);
            e.summarize(scope::now_ms(), !answers.is_empty())
        });
        let Some((mut summary, image)) = made else { return };
        summary.answers = answers;
        let dims = image.as_ref().map(|i| (i.width, i.height));
        let pixels = image.map(|i| JsValue::from(js_sys::Uint8Array::from(&i.rgba[..]).buffer()));
        {
            let mut f = self.flush.borrow_mut();
            f.awaiting_ack = true;
            f.posted_ms = scope::now_ms();
        }
        (self.post)(&FromEngine::Summary { summary: Box::new(summary), pixels: dims }, pixels);
    }

    // --- Captures and fetched bytes ------------------------------------------------------

    /// Says how opening a capture goes.
    pub fn capture_progress(&self, progress: CaptureProgress) {
        self.with_engine(|e| e.set_capture(progress));
        self.schedule_flush();
    }

    fn spawn_capture(&self, file: web_sys::File) {
        let Some(me) = self.rc() else { return };
        wasm_bindgen_futures::spawn_local(crate::capture::open(me, file));
    }

    /// Keeps (or forgets) the file a capture was opened from, so records can be read again.
    pub fn keep_capture_file(&self, file: Option<web_sys::File>) {
        let kept = file.is_some();
        *self.capture_file.borrow_mut() = file;
        self.with_engine(|e| e.model_mut().capture_file_kept = kept);
    }

    /// Asks for event `id`'s raw bytes, which the engine no longer keeps: from the opened
    /// capture file, else from the server's history; the inspector shows them, or why they are
    /// gone, when the answer comes.
    fn fetch_bytes(&self, id: u64) {
        let Some(me) = self.rc() else { return };
        let found = self.with_engine(|e| {
            let m = e.model();
            let key = m.frame_key(id)?;
            Some((key, m.capture_file_kept.then(|| m.capture_span(key)).flatten()))
        });
        let Some((key, span)) = found else { return };
        if let Some(span) = span {
            let Some(file) = self.capture_file.borrow().clone() else {
                self.with_engine(|e| {
                    e.model_mut().fetch_failed(key, "this page no longer holds the capture file; open it again".to_owned())
                });
                return self.flush_soon();
            };
            self.with_engine(|e| e.model_mut().fetch_started(key));
            self.flush_soon();
            wasm_bindgen_futures::spawn_local(async move {
                let answer = crate::capture::read_span(&file, span.offset, span.len).await;
                me.with_engine(|e| match answer {
                    Ok(bytes) => {
                        let _ = e.model_mut().accept_capture_record(key, &bytes);
                    }
                    Err(err) => e.model_mut().fetch_failed(key, format!("the capture file could not be read again: {err}")),
                });
                me.flush_soon();
            });
            return;
        }
        let url = self.server_url.borrow().as_deref().and_then(|ws| crate::history::frame_url(ws, key));
        let Some(url) = url else {
            self.with_engine(|e| e.model_mut().fetch_failed(key, "this page has no server address to ask".to_owned()));
            return self.flush_soon();
        };
        self.with_engine(|e| e.model_mut().fetch_started(key));
        self.flush_soon();
        wasm_bindgen_futures::spawn_local(async move {
            let answer = crate::history::get_bytes(&url).await;
            me.with_engine(|e| match answer {
                Ok(bytes) => {
                    let _ = e.model_mut().accept_fetched(key, &bytes);
                }
                Err(err) => e.model_mut().fetch_failed(key, err),
            });
            me.flush_soon();
        });
    }
}

struct Sink {
    host: Weak<Host>,
}

impl ConnSink for Sink {
    fn message(&self, bytes: Vec<u8>) {
        if let Some(h) = self.host.upgrade() {
            h.receive(bytes);
        }
    }
    fn state(&self, state: ConnState) {
        if let Some(h) = self.host.upgrade() {
            h.set_conn(state);
        }
    }
}
