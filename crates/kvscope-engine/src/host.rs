//! [`Host`]: the engine's I/O. It takes the page's messages, owns the WebSocket and the opened
//! capture file, applies what the socket delivers a slice of time at a time, and sends the
//! page a summary at most every [`crate::pace::FLUSH_MS`], one at a time: the next only after
//! the page said it applied the last ([`ToEngine::Ack`]), so a busy page never has summaries
//! piling up, and no sooner than what the last ones cost the page allows ([`Pace`]).
//!
//! A host has one of two roles. The page's host runs the [`Coordinator`] and shard 0's
//! [`Engine`]; with more than one engine worker (`?engines=`) it starts the others
//! (`crate::worker`), hands each every server message and the capture opened, and runs the
//! coordinator's rounds over them. A shard's host runs one shard's engine: it applies what the
//! coordinator hands it, answers the rounds, and says when its model changed.
//!
//! The same host runs in the dashboard's workers (`crate::worker`) and, for the component tests,
//! on the page's own thread (`crate::local`); only how a message travels differs.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use kvscope_engine_protocol::view::{CaptureProgress, ConnState};
use kvscope_engine_protocol::{ENGINE_PROTOCOL_VERSION, ExportKind, FromEngine, Settings, ToEngine, ViewQuery};
use kvscope_protocol as proto;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::conn::{ConnSink, Connection};
use crate::coordinator::protocol::{self, FromShardWorker, ToShardWorker};
use crate::coordinator::{Coordinator, Out};
use crate::engine::Engine;
use crate::model::export::{ExportPart, download_name, join_export};
use crate::model::intake::{IntakeQueue, Next};
use crate::model::shard::{self, Shard};
use crate::pace::Pace;
use crate::scope;

/// How long the engine applies received messages before it yields to the page's requests and
/// the socket: well under what a person notices on a hover.
pub const INTAKE_SLICE_MS: f64 = 10.0;

/// How a message leaves the host: its bytes, and what rides beside them (the timeline's pixels
/// or a capture's `File`; buffers are transferred).
pub type Post = Box<dyn Fn(Vec<u8>, Option<JsValue>)>;

/// Another engine worker, reached by posting to it.
pub type Remote = Box<dyn Fn(Vec<u8>, Option<JsValue>)>;

/// The channel the intake yields through, and the callback that takes its turn.
type YieldChannel = (web_sys::MessageChannel, Closure<dyn FnMut()>);

#[derive(Debug, Default)]
struct Flush {
    /// A timed flush is pending.
    timer: bool,
    /// A summary was sent and not acknowledged yet.
    awaiting_ack: bool,
    /// A flush came due while waiting for the acknowledgement or a round.
    wanted: bool,
    /// `Sync` ids the next summary answers.
    answers: Vec<u64>,
    /// `Sync` ids of the round under way.
    answering: Vec<u64>,
    /// What summaries cost the page, so how often they go.
    pace: Pace,
    /// When the last summary went (`scope::now_ms`).
    posted_ms: f64,
}

/// A download being put together from every shard's part.
#[derive(Debug)]
struct Export {
    kind: ExportKind,
    header: Vec<u8>,
    parts: Vec<Option<ExportPart>>,
}

/// The page's host: the coordinator, and the other engine workers.
struct PageSide {
    coordinator: RefCell<Coordinator>,
    remotes: RefCell<Vec<Remote>>,
    /// Downloads being put together, in the order asked: every worker answers in that order.
    exports: RefCell<VecDeque<Export>>,
}

/// A shard's host: whether it said its model changed since it last reported.
#[derive(Default)]
struct ShardSide {
    said_changed: Cell<bool>,
}

enum Role {
    Page(Box<PageSide>),
    Shard(ShardSide),
}

/// The engine with its edges.
pub struct Host {
    engine: RefCell<Engine>,
    role: Role,
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
    fn new(engine: Engine, role: Role, post: Post) -> Rc<Host> {
        Rc::new_cyclic(|me| Host {
            engine: RefCell::new(engine),
            role,
            intake: RefCell::new(IntakeQueue::default()),
            intake_scheduled: Cell::new(false),
            channel: RefCell::new(None),
            connection: RefCell::new(None),
            server_url: RefCell::new(None),
            capture_file: RefCell::new(None),
            flush: RefCell::new(Flush::default()),
            post,
            me: me.clone(),
        })
    }

    /// The page's host, whose messages to the page go through `post`, over `engines` engine
    /// workers (this one and `engines - 1` it starts); it says it is ready at once.
    pub fn start(post: Post, engines: u32) -> Rc<Host> {
        let count = engines.max(1);
        let page = PageSide {
            coordinator: RefCell::new(Coordinator::new(count, ViewQuery::default())),
            remotes: RefCell::new(Vec::new()),
            exports: RefCell::new(VecDeque::new()),
        };
        let engine = Engine::shard(Settings::default(), Shard { index: 0, count });
        let host = Host::new(engine, Role::Page(Box::new(page)), post);
        host.start_remotes(count);
        host.post_page(&FromEngine::Ready { version: ENGINE_PROTOCOL_VERSION }, None);
        host
    }

    /// Shard `index` of `count`'s host, whose messages to the coordinator go through `post`
    /// (what the page shows comes in the coordinator's first round).
    pub fn start_shard(index: u32, count: u32, post: Post) -> Rc<Host> {
        Host::new(Engine::shard(Settings::default(), Shard { index, count }), Role::Shard(ShardSide::default()), post)
    }

    fn rc(&self) -> Option<Rc<Host>> {
        self.me.upgrade()
    }

    fn page(&self) -> Option<&PageSide> {
        match &self.role {
            Role::Page(p) => Some(p),
            Role::Shard(_) => None,
        }
    }

    /// Runs `f` on this worker's engine.
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut self.engine.borrow_mut())
    }

    /// Runs `f` on the coordinator (the page's host only).
    fn with_coordinator<R>(&self, f: impl FnOnce(&mut Coordinator) -> R) -> Option<R> {
        self.page().map(|p| f(&mut p.coordinator.borrow_mut()))
    }

    fn post_page(&self, message: &FromEngine, extra: Option<JsValue>) {
        (self.post)(kvscope_engine_protocol::encode(message), extra);
    }

    fn post_coordinator(&self, message: &FromShardWorker) {
        (self.post)(protocol::encode(message), None);
    }

    /// One message from the page (or, in a shard's host, from the coordinator), and what rode
    /// beside it (a capture's `File`).
    pub fn handle(&self, bytes: &[u8], extra: JsValue) {
        match &self.role {
            Role::Page(_) => self.handle_page(bytes, extra),
            Role::Shard(_) => self.handle_coordinator(bytes, extra),
        }
    }

    fn handle_page(&self, bytes: &[u8], extra: JsValue) {
        let message = match kvscope_engine_protocol::decode::<ToEngine>(bytes) {
            Ok(m) => m,
            Err(e) => {
                // The page and the engine disagree on what a message is: nothing can work.
                self.post_page(&FromEngine::Crashed(e.to_string()), None);
                return;
            }
        };
        match message {
            ToEngine::View(q) => {
                let outs = self.with_coordinator(|c| c.set_view(*q)).unwrap_or_default();
                self.deliver(outs);
                self.flush_soon();
            }
            ToEngine::Connect { url } => self.connect(url),
            #[cfg(feature = "test-hooks")]
            ToEngine::Ingest(bytes) => {
                self.to_remotes_with(|| ToShardWorker::Server(bytes.clone()), None);
                self.intake.borrow_mut().push(bytes);
                self.apply_queued(f64::INFINITY);
            }
            ToEngine::OpenCapture { name } => match extra.dyn_into::<web_sys::File>() {
                Ok(file) => {
                    self.to_remotes(&ToShardWorker::OpenCapture { name }, Some(file.clone().into()));
                    self.spawn_capture(file);
                }
                Err(_) => self.capture_progress(CaptureProgress::Failed { name, error: "no file came with the request".to_owned() }),
            },
            ToEngine::Select(id) => {
                self.with_coordinator(|c| c.select(id));
                self.flush_soon();
            }
            ToEngine::SelectNext { min_severity } => {
                let outs = self.with_coordinator(|c| c.select_next(min_severity)).unwrap_or_default();
                self.deliver(outs);
            }
            ToEngine::SelectAt { source, side, time_ms, tolerance_ms } => {
                let outs = self.with_coordinator(|c| c.select_at(source, side, time_ms, tolerance_ms)).unwrap_or_default();
                self.deliver(outs);
            }
            ToEngine::Hover { source, side, from_ms, to_ms } => {
                let outs = self.with_coordinator(|c| c.hover(source, side, from_ms, to_ms)).unwrap_or_default();
                self.deliver(outs);
            }
            ToEngine::FetchBytes(id) => match shard::of_event_id(id) {
                0 => self.fetch_bytes(id),
                i => self.to_remote(i, &ToShardWorker::FetchBytes(id), None),
            },
            ToEngine::Export(kind) => self.export(kind),
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

    // --- The other engine workers (the page's host) --------------------------------------

    /// Starts the other engine workers (shards 1 to `count - 1`). One that cannot start leaves
    /// the page on one engine, and the console says why.
    fn start_remotes(&self, count: u32) {
        let (Some(page), Some(me)) = (self.page(), self.rc()) else { return };
        let mut remotes = Vec::new();
        for index in 1..count {
            let host = Rc::downgrade(&me);
            let on_message = Box::new(move |bytes: Vec<u8>| {
                if let Some(h) = host.upgrade() {
                    h.on_remote(index, &bytes);
                }
            });
            match crate::worker::start_shard(index, count, on_message) {
                Ok(remote) => remotes.push(remote),
                Err(e) => {
                    web_sys::console::error_1(
                        &format!("engine worker {index} of {count} could not start ({e}): one engine goes on").into(),
                    );
                    *page.coordinator.borrow_mut() = Coordinator::new(1, ViewQuery::default());
                    self.with_engine(|e| *e = Engine::new(Settings::default()));
                    return;
                }
            }
        }
        *page.remotes.borrow_mut() = remotes;
    }

    fn to_remote(&self, index: u32, message: &ToShardWorker, extra: Option<JsValue>) {
        let Some(page) = self.page() else { return };
        if let Some(remote) = page.remotes.borrow().get(index as usize - 1) {
            remote(protocol::encode(message), extra);
        }
    }

    fn to_remotes(&self, message: &ToShardWorker, extra: Option<JsValue>) {
        self.to_remotes_with(|| message.clone(), extra);
    }

    /// Sends every other engine worker the message `make` makes, made only if there are any
    /// (a server message is copied for them, not for one engine).
    fn to_remotes_with(&self, make: impl FnOnce() -> ToShardWorker, extra: Option<JsValue>) {
        let Some(page) = self.page() else { return };
        let remotes = page.remotes.borrow();
        if remotes.is_empty() {
            return;
        }
        let bytes = protocol::encode(&make());
        for remote in remotes.iter() {
            remote(bytes.clone(), extra.clone());
        }
    }

    /// One message from engine worker `index`.
    fn on_remote(&self, index: u32, bytes: &[u8]) {
        let message = match protocol::decode::<FromShardWorker>(bytes) {
            Ok(m) => m,
            Err(e) => return self.post_page(&FromEngine::Crashed(format!("engine worker {index}: {e}")), None),
        };
        match message {
            FromShardWorker::Ready => {}
            FromShardWorker::Round(answer) => {
                let outs = self.with_coordinator(|c| c.on_shard(index, answer)).unwrap_or_default();
                self.deliver(outs);
            }
            FromShardWorker::Changed => self.schedule_flush(),
            FromShardWorker::Exported(bytes) => {
                let part = protocol::decode::<ExportPart>(&bytes).unwrap_or_default();
                self.export_part(index, part);
            }
            FromShardWorker::Crashed(text) => self.post_page(&FromEngine::Crashed(format!("engine worker {index}: {text}")), None),
        }
    }

    /// Hands the coordinator's messages on: shard 0's to this worker's engine, at once, the
    /// others' to their workers; summaries and hovers to the page.
    fn deliver(&self, outs: Vec<Out>) {
        let mut queue: VecDeque<Out> = outs.into();
        while let Some(out) = queue.pop_front() {
            match out {
                Out::Shard(0, message) => {
                    let answer = self.with_engine(|e| e.answer(message, scope::now_ms()));
                    if let Some(answer) = answer {
                        queue.extend(self.with_coordinator(|c| c.on_shard(0, answer)).unwrap_or_default());
                    }
                }
                Out::Shard(i, message) => self.to_remote(i, &ToShardWorker::Round(message), None),
                Out::Summary(summary, image) => self.post_summary(*summary, image),
                Out::Hover(text) => self.post_page(&FromEngine::Hover(text), None),
            }
        }
        let round_over = !self.with_coordinator(|c| c.flushing()).unwrap_or(false);
        let asked = self.with_coordinator(Coordinator::take_flush_wanted).unwrap_or(false);
        if asked {
            self.flush_soon();
        } else if round_over && std::mem::take(&mut self.flush.borrow_mut().wanted) {
            self.schedule_flush();
        }
    }

    // --- The coordinator's messages (a shard's host) --------------------------------------

    fn handle_coordinator(&self, bytes: &[u8], extra: JsValue) {
        let message = match protocol::decode::<ToShardWorker>(bytes) {
            Ok(m) => m,
            Err(e) => return self.post_coordinator(&FromShardWorker::Crashed(e.to_string())),
        };
        match message {
            // The worker was started as this shard (`crate::worker`).
            ToShardWorker::Start { .. } => {}
            ToShardWorker::Round(round) => {
                if let Role::Shard(s) = &self.role {
                    s.said_changed.set(false);
                }
                let waiting = !self.intake.borrow().is_empty();
                let answer = self.with_engine(|e| {
                    e.set_waiting(waiting);
                    e.answer(round, scope::now_ms())
                });
                if let Some(answer) = answer {
                    self.post_coordinator(&FromShardWorker::Round(answer));
                }
            }
            ToShardWorker::Server(bytes) => self.receive(bytes),
            ToShardWorker::ServerUrl(url) => *self.server_url.borrow_mut() = Some(url),
            ToShardWorker::OpenCapture { name } => match extra.dyn_into::<web_sys::File>() {
                Ok(file) => self.spawn_capture(file),
                Err(_) => web_sys::console::error_1(&format!("engine worker: no file came with {name}").into()),
            },
            ToShardWorker::FetchBytes(id) => self.fetch_bytes(id),
            ToShardWorker::Export(kind) => {
                let part = self.with_engine(|e| e.model().export_part(kind));
                self.post_coordinator(&FromShardWorker::Exported(protocol::encode(&part)));
            }
        }
    }

    // --- The server's socket -------------------------------------------------------------

    fn connect(&self, url: String) {
        self.disconnect();
        let Some(me) = self.rc() else { return };
        *self.server_url.borrow_mut() = Some(url.clone());
        self.to_remotes(&ToShardWorker::ServerUrl(url.clone()), None);
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
        self.with_coordinator(|c| c.set_conn(state));
        self.schedule_flush();
    }

    /// Queues one WebSocket message as it arrived (and hands it to the other engine workers)
    /// and applies what is queued a time slice at a time ([`INTAKE_SLICE_MS`]).
    fn receive(&self, bytes: Vec<u8>) {
        self.to_remotes_with(|| ToShardWorker::Server(bytes.clone()), None);
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
        let mut started_over = false;
        {
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
                    Some(Next::Message(message)) => started_over |= engine.apply_server_message(message, now),
                    Some(Next::Error(e)) => engine.model_mut().note_protocol_error(&e),
                }
            }
        }
        if started_over {
            self.with_coordinator(Coordinator::started_over);
        }
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
    /// one went ([`Pace::interval_ms`]). The data changed. A shard's host says so to the
    /// coordinator instead, once until it reports again.
    pub fn schedule_flush(&self) {
        if let Role::Shard(s) = &self.role {
            if !s.said_changed.replace(true) {
                self.post_coordinator(&FromShardWorker::Changed);
            }
            return;
        }
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
        let Some(page) = self.page() else { return };
        let answers = {
            let mut f = self.flush.borrow_mut();
            if f.awaiting_ack || page.coordinator.borrow().flushing() {
                f.wanted = true;
                return;
            }
            std::mem::take(&mut f.answers)
        };
        let status = self.intake.borrow().status();
        let pace = self.flush.borrow().pace;
        let outs = {
            let mut c = page.coordinator.borrow_mut();
            if c.query().paused && answers.is_empty() {
                return;
            }
            c.note_resources(status, scope::wasm_memory_bytes());
            c.note_pace(&pace);
            c.flush(!answers.is_empty())
        };
        self.engine.borrow_mut().set_waiting(status.queued_messages > 0);
        self.flush.borrow_mut().answering = answers;
        self.deliver(outs);
    }

    fn post_summary(&self, mut summary: kvscope_engine_protocol::Summary, image: Option<crate::summarize::TimelineImage>) {
        summary.answers = std::mem::take(&mut self.flush.borrow_mut().answering);
        let dims = image.as_ref().map(|i| (i.width, i.height));
        let pixels = image.map(|i| JsValue::from(js_sys::Uint8Array::from(&i.rgba[..]).buffer()));
        {
            let mut f = self.flush.borrow_mut();
            f.awaiting_ack = true;
            f.posted_ms = scope::now_ms();
        }
        self.post_page(&FromEngine::Summary { summary: Box::new(summary), pixels: dims }, pixels);
    }

    // --- Downloads -----------------------------------------------------------------------

    /// A download: this worker's part and every other engine worker's, in stream order.
    fn export(&self, kind: ExportKind) {
        let Some(page) = self.page() else { return };
        let now = (js_sys::Date::now() * 1e6) as u64;
        let (header, own) = self.with_engine(|e| (e.model().kvcap_header(now), e.model().export_part(kind)));
        let mut parts = vec![None; page.remotes.borrow().len() + 1];
        parts[0] = Some(own);
        page.exports.borrow_mut().push_back(Export { kind, header, parts });
        self.to_remotes(&ToShardWorker::Export(kind), None);
        self.exports_done();
    }

    /// Worker `index`'s part of the oldest download still waiting for it.
    fn export_part(&self, index: u32, part: ExportPart) {
        let Some(page) = self.page() else { return };
        let mut exports = page.exports.borrow_mut();
        if let Some(slot) = exports.iter_mut().find_map(|x| x.parts.get_mut(index as usize).filter(|p| p.is_none())) {
            *slot = Some(part);
        }
        drop(exports);
        self.exports_done();
    }

    /// Sends the downloads every worker's part of has arrived, in the order asked.
    fn exports_done(&self) {
        let Some(page) = self.page() else { return };
        loop {
            let done = {
                let mut exports = page.exports.borrow_mut();
                match exports.front() {
                    Some(x) if x.parts.iter().all(Option::is_some) => exports.pop_front(),
                    _ => None,
                }
            };
            let Some(Export { kind, header, parts }) = done else { return };
            let bytes = join_export(kind, header, parts.into_iter().flatten().collect());
            let (name, mime) = download_name(kind);
            self.post_page(&FromEngine::Download { name: name.into(), mime: mime.into(), bytes }, None);
        }
    }

    // --- Captures and fetched bytes ------------------------------------------------------

    /// Says how opening a capture goes (the page's host: the fleet bar shows its own shard's).
    pub fn capture_progress(&self, progress: CaptureProgress) {
        self.with_coordinator(|c| c.set_capture(progress));
        self.schedule_flush();
    }

    /// Starts a capture opened in the page, in this worker's engine.
    pub fn begin_capture(&self, name: &str, header: &proto::capture::CaptureHeader, inferred_block_size: Option<u32>) {
        self.with_engine(|e| e.begin_capture(name, header, inferred_block_size));
        self.with_coordinator(Coordinator::started_over);
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

    /// Asks for event `id`'s raw bytes, which this engine no longer keeps: from the opened
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
                return self.changed_for_the_page();
            };
            self.with_engine(|e| e.model_mut().fetch_started(key));
            self.changed_for_the_page();
            wasm_bindgen_futures::spawn_local(async move {
                let answer = crate::capture::read_span(&file, span.offset, span.len).await;
                me.with_engine(|e| match answer {
                    Ok(bytes) => {
                        let _ = e.model_mut().accept_capture_record(key, &bytes);
                    }
                    Err(err) => e.model_mut().fetch_failed(key, format!("the capture file could not be read again: {err}")),
                });
                me.changed_for_the_page();
            });
            return;
        }
        let url = self.server_url.borrow().as_deref().and_then(|ws| crate::history::frame_url(ws, key));
        let Some(url) = url else {
            self.with_engine(|e| e.model_mut().fetch_failed(key, "this page has no server address to ask".to_owned()));
            return self.changed_for_the_page();
        };
        self.with_engine(|e| e.model_mut().fetch_started(key));
        self.changed_for_the_page();
        wasm_bindgen_futures::spawn_local(async move {
            let answer = crate::history::get_bytes(&url).await;
            me.with_engine(|e| match answer {
                Ok(bytes) => {
                    let _ = e.model_mut().accept_fetched(key, &bytes);
                }
                Err(err) => e.model_mut().fetch_failed(key, err),
            });
            me.changed_for_the_page();
        });
    }

    /// What the page asked for changed: a summary as soon as it may go (a shard's host tells
    /// the coordinator).
    fn changed_for_the_page(&self) {
        match &self.role {
            Role::Page(_) => self.flush_soon(),
            Role::Shard(_) => self.schedule_flush(),
        }
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
