//! `provide_fleet()` / `use_fleet()`: the one handle views use to read the model and to be told
//! that it changed.
//!
//! [`Fleet`] is `Copy` (arena handles only). The model lives in a `StoredValue` (plain state,
//! never a signal); what views subscribe to are generation counters: one global (fleet bar,
//! timeline, log) and one per source (its card). The socket callback applies each message to
//! the model and schedules a flush; the flush, at most every [`FLUSH_MS`], bumps the
//! generations of what changed. At ten thousand frames a second a card therefore re-renders ten
//! times a second, and a frame is never dropped because a signal held only the latest one.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;

use crate::conn::{ConnSink, ConnState, Connection};
use crate::model::intake::{IntakeQueue, IntakeStatus, Next};
use crate::model::settings::{EventRef, Settings, Side};
use crate::model::{Config, Model};

/// Coalescing interval for view updates, in milliseconds.
pub const FLUSH_MS: i32 = 100;

/// How long the page applies received messages before it yields to input and drawing: well
/// under the 50 ms of a long task, long enough that yielding costs little.
pub const INTAKE_SLICE_MS: f64 = 10.0;

/// The channel the intake yields through, and the callback that takes its turn.
type YieldChannel = (web_sys::MessageChannel, Closure<dyn FnMut()>);

/// Received messages waiting for their turn, and the one way to yield without a timer's
/// clamping (a `MessageChannel` message runs at once; nested `setTimeout(0)`s wait 4 ms each).
#[derive(Default)]
struct Intake {
    queue: RefCell<IntakeQueue>,
    scheduled: Cell<bool>,
    channel: RefCell<Option<YieldChannel>>,
}

/// Progress of opening a capture file.
#[derive(Clone, Debug, PartialEq)]
pub enum CaptureProgress {
    Idle,
    /// `done` of `total` bytes read or parsed, in the named phase.
    Running {
        name: String,
        phase: &'static str,
        done: f64,
        total: f64,
    },
    Done {
        name: String,
        records: u64,
        note: Option<String>,
    },
    Failed {
        name: String,
        error: String,
    },
}

/// The handle every view uses.
#[derive(Clone, Copy)]
pub struct Fleet {
    model: StoredValue<Model, LocalStorage>,
    /// Bumped when anything global changed.
    pub generation: RwSignal<u64>,
    /// Per source index: bumped when that source's card changed.
    source_gens: RwSignal<Vec<u64>>,
    /// Source indices, in display order; changes on a hello or a capture.
    pub source_list: RwSignal<Vec<u32>>,
    pub settings: RwSignal<Settings>,
    pub conn: RwSignal<ConnState>,
    pub paused: RwSignal<bool>,
    /// The event shown in the inspector (model event id).
    pub selected: RwSignal<Option<u64>>,
    pub capture: RwSignal<CaptureProgress>,
    /// The fleet overview's rows, computed once per flush and read by the overview and the
    /// timeline (which lanes a large fleet shows first).
    pub overview: Memo<Vec<crate::model::overview::Row>>,
    connection: StoredValue<Option<Connection>, LocalStorage>,
    flush_pending: StoredValue<Rc<Cell<bool>>, LocalStorage>,
    intake: StoredValue<Rc<Intake>, LocalStorage>,
    /// The file the open capture came from (its records are read again on request).
    capture_file: StoredValue<Option<web_sys::File>, LocalStorage>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").finish_non_exhaustive()
    }
}

/// Milliseconds since the page loaded (`performance.now()`); 0 outside a browser.
pub fn now_ms() -> f64 {
    // Looked up once: window() and performance() are two calls into JS per message otherwise
    // (6% of the page's time at 512 sources).
    thread_local! {
        static PERFORMANCE: Option<web_sys::Performance> = web_sys::window().and_then(|w| w.performance());
    }
    PERFORMANCE.with(|p| p.as_ref().map_or(0.0, web_sys::Performance::now))
}

/// The model configuration the settings ask for; what they leave open comes from the server's
/// defaults, then from [`Config::default`].
pub fn config_from(settings: &Settings, server: Option<&kvscope_protocol::Defaults>) -> Config {
    let d = Config::default();
    Config {
        policy_a: settings.policy_a.clone().or_else(|| server.map(|s| s.policy_a.clone())).unwrap_or(d.policy_a),
        policy_b: settings.policy_b.clone().or_else(|| server.map(|s| s.policy_b.clone())).unwrap_or(d.policy_b),
        block_size: settings.block_size.or(server.map(|s| s.block_size)).unwrap_or(d.block_size),
        trees: settings.trees_side(),
        retain_bytes: settings.retain_bytes(),
        retain_events: settings.retain_events(),
        max_frame_bytes: settings.max_frame_bytes(),
    }
}

impl Fleet {
    pub fn new(settings: Settings) -> Fleet {
        let config = config_from(&settings, None);
        let model = StoredValue::new_local(Model::new(config));
        let generation = RwSignal::new(0);
        let overview = Memo::new(move |_| {
            generation.track();
            model.with_value(|m| crate::model::overview::rows(m, now_ms()))
        });
        Fleet {
            model,
            generation,
            overview,
            source_gens: RwSignal::new(Vec::new()),
            source_list: RwSignal::new(Vec::new()),
            settings: RwSignal::new(settings),
            conn: RwSignal::new(ConnState::Off),
            paused: RwSignal::new(false),
            selected: RwSignal::new(None),
            capture: RwSignal::new(CaptureProgress::Idle),
            connection: StoredValue::new_local(None),
            flush_pending: StoredValue::new_local(Rc::new(Cell::new(false))),
            intake: StoredValue::new_local(Rc::new(Intake::default())),
            capture_file: StoredValue::new_local(None),
        }
    }

    /// Reads the model. Call inside a reactive closure after tracking a generation.
    pub fn with_model<R>(&self, f: impl FnOnce(&Model) -> R) -> R {
        self.model.with_value(f)
    }

    /// Changes the model, then schedules a flush; `None`, changing nothing, once the app (and
    /// with it the model) is gone.
    pub fn update_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R> {
        let r = self.model.try_update_value(f)?;
        self.schedule_flush();
        Some(r)
    }

    /// Tracks the global generation (use in reactive closures that read the whole model).
    pub fn track(&self) {
        self.generation.track();
    }

    /// Tracks one source's generation.
    pub fn track_source(&self, index: u32) -> u64 {
        self.source_gens.with(|g| g.get(index as usize).copied().unwrap_or(0))
    }

    /// Applies one WebSocket message at once: one protocol message, or a batch of them in
    /// order (protocol 5), after anything still queued by [`Fleet::receive`]. After a hello,
    /// the model is re-configured with the server's defaults (block size, policies) wherever
    /// the page's settings leave them open, before the messages that follow it.
    pub fn ingest(&self, bytes: &[u8]) {
        let Some(intake) = self.intake.try_get_value() else { return };
        intake.queue.borrow_mut().push(bytes.to_vec());
        self.apply_queued(&intake, f64::INFINITY);
    }

    /// Queues one WebSocket message as it arrived and applies what is queued a time slice at
    /// a time ([`INTAKE_SLICE_MS`]), so that a full batch is never one long task.
    pub fn receive(&self, bytes: Vec<u8>) {
        let Some(intake) = self.intake.try_get_value() else { return };
        let bound = self.settings.with_untracked(Settings::intake_bytes);
        let mut queue = intake.queue.borrow_mut();
        queue.set_bound(bound);
        let dropped = queue.status().dropped_messages;
        queue.push(bytes);
        let dropped_now = queue.status().dropped_messages;
        drop(queue);
        if dropped_now != dropped {
            // Every count now misses those frames: the data-quality strip and the fleet bar say so.
            self.update_model(|m| {
                m.intake_dropped_messages = dropped_now;
                m.dirty = true;
            });
        }
        self.schedule_intake(&intake);
    }

    /// What the page received and has not applied yet, and what its bound dropped.
    pub fn intake_status(&self) -> IntakeStatus {
        self.intake.try_get_value().map_or_else(IntakeStatus::default, |i| i.queue.borrow().status())
    }

    /// Applies queued messages in order for up to `budget_ms`; true when some are left.
    fn apply_queued(&self, intake: &Intake, budget_ms: f64) -> bool {
        let start = now_ms();
        let mut left = false;
        loop {
            // One clock read a message, for the budget and the message alike (each is a call
            // into JS).
            let now = now_ms();
            if now - start >= budget_ms {
                left = !intake.queue.borrow().is_empty();
                break;
            }
            // Held while the message is applied: applying never receives (no copy needed).
            let mut queue = intake.queue.borrow_mut();
            match queue.pop() {
                None => break,
                Some(Next::Message(message)) => self.ingest_one(message, now),
                Some(Next::Error(e)) => {
                    self.model.try_update_value(|m| m.note_protocol_error(&e));
                }
            }
        }
        self.schedule_flush();
        left
    }

    fn schedule_intake(&self, intake: &Intake) {
        if intake.scheduled.replace(true) {
            return;
        }
        let mut channel = intake.channel.borrow_mut();
        if channel.is_none() {
            let this = *self;
            let on_turn = Closure::<dyn FnMut()>::new(move || {
                let Some(intake) = this.intake.try_get_value() else { return };
                intake.scheduled.set(false);
                if this.apply_queued(&intake, INTAKE_SLICE_MS) {
                    this.schedule_intake(&intake);
                }
            });
            let Ok(ch) = web_sys::MessageChannel::new() else {
                // No channel (not a browser): apply everything now, in order.
                drop(channel);
                intake.scheduled.set(false);
                self.apply_queued(intake, f64::INFINITY);
                return;
            };
            ch.port1().set_onmessage(Some(on_turn.as_ref().unchecked_ref()));
            *channel = Some((ch, on_turn));
        }
        if let Some((ch, _)) = channel.as_ref() {
            let _ = ch.port2().post_message(&wasm_bindgen::JsValue::NULL);
        }
    }

    fn ingest_one(&self, bytes: &[u8], now: f64) {
        let was_hello = self.model.try_update_value(|m| m.apply_message_bytes(bytes, now)).unwrap_or(false);
        if was_hello {
            let config = self.settings.with_untracked(|s| self.with_model(|m| config_from(s, m.server_defaults.as_ref())));
            self.model.update_value(|m| m.reconfigure(config));
            self.selected.set(None);
        }
    }

    /// Bumps the generations of what changed since the last flush. Called by the timer, and
    /// directly by tests.
    pub fn flush(&self) {
        if let Some(p) = self.flush_pending.try_get_value() {
            p.set(false);
        }
        // A timer may fire after the app is gone (its values disposed): nothing to flush then.
        if self.paused.try_get_untracked().is_none_or(|paused| paused) {
            return;
        }
        let Some((global, changed, num_sources)) = self.model.try_update_value(|m| {
            let (g, c) = m.take_dirty();
            (g, c, m.sources().len())
        }) else {
            return;
        };
        if changed.is_empty() && !global {
            return;
        }
        let list: Vec<u32> = (0..num_sources as u32).collect();
        if self.source_list.with_untracked(|l| *l != list) {
            self.source_list.set(list);
        }
        self.source_gens.update(|g| {
            if g.len() < num_sources {
                g.resize(num_sources, 0);
            }
            for i in changed {
                if let Some(x) = g.get_mut(i as usize) {
                    *x += 1;
                }
            }
        });
        self.generation.update(|g| *g += 1);
    }

    fn schedule_flush(&self) {
        let Some(pending) = self.flush_pending.try_get_value() else { return };
        if pending.get() {
            return;
        }
        pending.set(true);
        let this = *self;
        let cb = Closure::once_into_js(move || this.flush());
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(cb.unchecked_ref(), FLUSH_MS);
        }
    }

    /// Opens the WebSocket (unless the settings say offline).
    pub fn connect(&self) {
        if self.settings.with_untracked(|s| s.offline) {
            return;
        }
        let Some(url) = self.server_ws_url() else { return };
        let sink: Rc<dyn ConnSink> = Rc::new(Sink { fleet: *self });
        let conn = Connection::start(url, sink);
        self.connection.set_value(Some(conn));
    }

    /// The server's WebSocket URL: `?ws=`, else the page's own `/ws`.
    fn server_ws_url(&self) -> Option<String> {
        self.settings.with_untracked(|s| s.ws.clone()).or_else(crate::conn::default_url)
    }

    /// Asks the server's history for the raw bytes of event `id`, which this page no longer
    /// keeps; the inspector shows them, or why they are gone, when the answer comes.
    pub fn fetch_bytes(&self, id: u64) {
        let Some(key) = self.with_model(|m| m.frame_key(id)) else { return };
        if let Some(span) = self.with_model(|m| m.capture_file_kept.then(|| m.capture_span(key)).flatten()) {
            return self.read_capture_record(key, span);
        }
        let Some(url) = self.server_ws_url().and_then(|ws| crate::history::frame_url(&ws, key)) else {
            self.update_model(|m| m.fetch_failed(key, "this page has no server address to ask".to_owned()));
            return;
        };
        self.update_model(|m| m.fetch_started(key));
        let this = *self;
        wasm_bindgen_futures::spawn_local(async move {
            let answer = crate::history::get_bytes(&url).await;
            this.update_model(|m| match answer {
                Ok(bytes) => {
                    let _ = m.accept_fetched(key, &bytes);
                }
                Err(e) => m.fetch_failed(key, e),
            });
        });
    }

    /// Reads frame `key`'s record again from the opened capture file.
    fn read_capture_record(&self, key: crate::model::FrameKey, span: crate::model::CaptureSpan) {
        let Some(file) = self.capture_file.get_value() else {
            self.update_model(|m| m.fetch_failed(key, "this page no longer holds the capture file; open it again".to_owned()));
            return;
        };
        self.update_model(|m| m.fetch_started(key));
        let this = *self;
        wasm_bindgen_futures::spawn_local(async move {
            let answer = crate::capture::read_span(&file, span.offset, span.len).await;
            this.update_model(|m| match answer {
                Ok(bytes) => {
                    let _ = m.accept_capture_record(key, &bytes);
                }
                Err(e) => m.fetch_failed(key, format!("the capture file could not be read again: {e}")),
            });
        });
    }

    /// Keeps the file a capture was opened from, so that records can be read again from it.
    pub fn keep_capture_file(&self, file: Option<web_sys::File>) {
        let kept = file.is_some();
        self.capture_file.set_value(file);
        self.update_model(|m| m.capture_file_kept = kept);
    }

    /// Closes the WebSocket for good (a capture was opened).
    pub fn disconnect(&self) {
        if let Some(c) = self.connection.get_value() {
            c.stop();
        }
        self.connection.set_value(None);
        self.conn.set(ConnState::Off);
    }

    /// Applies new settings: re-classifies if what classification depends on changed.
    pub fn set_settings(&self, settings: Settings) {
        let config = self.with_model(|m| config_from(&settings, m.server_defaults.as_ref()));
        self.settings.set(settings);
        let selected_ref = self.selected.get_untracked().and_then(|id| self.with_model(|m| m.event_ref(id)));
        let changed = self
            .model
            .try_update_value(|m| {
                let changed = *m.config() != config;
                m.reconfigure(config);
                changed
            })
            .unwrap_or(false);
        if changed {
            let id = selected_ref.and_then(|r| self.with_model(|m| m.find_event(&r)));
            self.selected.set(id);
            self.model.update_value(|m| m.dirty = true);
            self.flush();
        }
    }

    pub fn update_settings(&self, f: impl FnOnce(&mut Settings)) {
        let mut s = self.settings.get_untracked();
        f(&mut s);
        self.set_settings(s);
    }

    /// Opens an event in the inspector and records it in the URL.
    pub fn select(&self, id: Option<u64>) {
        self.selected.set(id);
        let r: Option<EventRef> = id.and_then(|id| self.with_model(|m| m.event_ref(id)));
        self.settings.update(|s| s.selected = r);
    }

    pub fn lanes_side(&self) -> Side {
        self.settings.with(|s| s.lanes_side())
    }
}

struct Sink {
    fleet: Fleet,
}

impl ConnSink for Sink {
    fn message(&self, bytes: Vec<u8>) {
        self.fleet.receive(bytes);
    }
    fn state(&self, state: ConnState) {
        self.fleet.conn.set(state);
    }
}

/// Creates the fleet and puts it in context.
pub fn provide_fleet(settings: Settings) -> Fleet {
    let fleet = Fleet::new(settings);
    provide_context(fleet);
    fleet
}

/// The fleet provided by [`provide_fleet`].
pub fn use_fleet() -> Fleet {
    expect_context::<Fleet>()
}
