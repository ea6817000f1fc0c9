//! `provide_fleet()` / `use_fleet()`: the one handle views use to read what the engine
//! summarised, to be told that it changed, and to ask the engine for something.
//!
//! [`Fleet`] is `Copy` (arena handles only). The engine's summary parts live in a
//! `StoredValue` ([`Page`], plain data, never a signal); what views subscribe to are generation
//! counters, one per [`Part`]: a summary that changed the overview re-renders the overview and
//! nothing else. Summaries are applied over the next animation frames (a heavy part, or one
//! warming up, in a frame of its own), then acknowledged; the engine sends the next only after
//! that, so a busy page never has a backlog of them.
//!
//! The page's own state is in signals: the settings (the URL), pause, the tree's drill-down,
//! the timeline's range and width, the hover line. An effect sends them to the engine as a
//! [`ViewQuery`] whenever they change.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use kvscope_engine_protocol::view::{Bar, Cards, Headline, Inspector, Logs, Meta, Overview, Planes, Quality, Selection, Timeline, Trees};
use kvscope_engine_protocol::{ExportKind, FromEngine, Settings, Side, Summary, ToEngine, ViewQuery};
use leptos::prelude::*;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

/// How the page reaches its engine: a Web Worker ([`crate::link::WorkerLink`]), or the engine on
/// this thread (the component tests). Messages are encoded bytes, and what rides beside them.
pub trait EngineLink {
    fn send(&self, bytes: Vec<u8>, extra: JsValue);
}

/// One part of the page, as the engine summarises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    Meta,
    Bar,
    Quality,
    Headline,
    Overview,
    Cards,
    Planes,
    Timeline,
    Inspector,
    Logs,
    Trees,
    Selection,
}

const PARTS: usize = 12;

/// A part's first applications each get an animation frame of their own: the first builds its
/// view, the second is the first rebuild, and both run code the browser compiles on first call.
/// Together in one frame they made the page's longest task (50-130 ms at 64 sources, measured).
const WARM_UP: u8 = 2;

impl Part {
    /// A part whose view costs more than a few elements to update (rows, lanes, an icicle, the
    /// log, the hex view): it gets an animation frame of its own.
    pub fn is_heavy(self) -> bool {
        matches!(self, Part::Overview | Part::Cards | Part::Timeline | Part::Inspector | Part::Logs | Part::Trees)
    }

    /// The order the page reads, and its parts are applied in.
    pub const IN_PAGE_ORDER: [Part; PARTS] = [
        Part::Meta,
        Part::Selection,
        Part::Bar,
        Part::Quality,
        Part::Headline,
        Part::Overview,
        Part::Cards,
        Part::Planes,
        Part::Timeline,
        Part::Inspector,
        Part::Logs,
        Part::Trees,
    ];
}

/// Which of the parts a summary carries (in the page's order) go in this animation frame: light
/// parts together, but a heavy part ([`Part::is_heavy`]) or one still warming up ([`WARM_UP`])
/// alone, first in a frame and nothing after it. `applied` counts each part's applications so
/// far. A summary of the usual parts at fleet rates (the bar and the headline, the overview rows,
/// the timeline, the trees) then takes four frames, none of them long: in one frame they were
/// up to 50 ms while the engine caught up on the history (measured, 64 sources).
pub fn parts_for_frame(carried: &[Part], applied: &[u8; PARTS]) -> Vec<Part> {
    let mut out = Vec::new();
    for &part in carried {
        let alone = part.is_heavy() || applied[part as usize] < WARM_UP;
        if alone && !out.is_empty() {
            break;
        }
        out.push(part);
        if alone {
            break;
        }
    }
    out
}

/// Whether what a frame cost counts toward the pace of summaries ([`ToEngine::Ack`]'s
/// `page_ms`): not when it built a part still warming up. A part's first build and rebuild
/// compile its code in the browser and make its elements, once; counted, the start-up's few
/// 100-200 ms frames slowed a 3-source demo's refreshes, and said so, for seconds after it.
pub fn counts_toward_pace(parts: &[Part], applied: &[u8; PARTS]) -> bool {
    parts.iter().all(|&part| applied[part as usize] >= WARM_UP)
}

/// Whether a summary carries a part.
trait Carries {
    fn carries(&self, part: Part) -> bool;
}

impl Carries for Summary {
    fn carries(&self, part: Part) -> bool {
        match part {
            Part::Meta => self.meta.is_some(),
            Part::Bar => self.bar.is_some(),
            Part::Quality => self.quality.is_some(),
            Part::Headline => self.headline.is_some(),
            Part::Overview => self.overview.is_some(),
            Part::Cards => self.cards.is_some(),
            Part::Planes => self.planes.is_some(),
            Part::Timeline => self.timeline.is_some(),
            Part::Inspector => self.inspector.is_some(),
            Part::Logs => self.logs.is_some(),
            Part::Trees => self.trees.is_some(),
            Part::Selection => self.selection.is_some(),
        }
    }
}

/// What the engine last summarised: the page's copy of every part.
#[derive(Debug, Default)]
pub struct Page {
    pub meta: Meta,
    pub bar: Bar,
    pub quality: Quality,
    pub headline: Headline,
    pub overview: Overview,
    pub cards: Cards,
    pub planes: Option<Planes>,
    pub timeline: Timeline,
    pub inspector: Option<Inspector>,
    pub logs: Logs,
    pub trees: Trees,
    pub selection: Selection,
    /// How often each part was applied, up to [`WARM_UP`] (indexed by [`Part`]).
    pub applied: [u8; PARTS],
}

impl Page {
    /// Moves `part` out of `summary` into the page, if it carries it; the part was shown.
    fn take(&mut self, part: Part, summary: &mut Summary) {
        match part {
            Part::Meta => put(&mut self.meta, summary.meta.take()),
            Part::Bar => put(&mut self.bar, summary.bar.take()),
            Part::Quality => put(&mut self.quality, summary.quality.take()),
            Part::Headline => put(&mut self.headline, summary.headline.take()),
            Part::Overview => put(&mut self.overview, summary.overview.take()),
            Part::Cards => put(&mut self.cards, summary.cards.take()),
            Part::Planes => put(&mut self.planes, summary.planes.take()),
            Part::Timeline => put(&mut self.timeline, summary.timeline.take()),
            Part::Inspector => put(&mut self.inspector, summary.inspector.take()),
            Part::Logs => put(&mut self.logs, summary.logs.take()),
            Part::Trees => put(&mut self.trees, summary.trees.take()),
            Part::Selection => put(&mut self.selection, summary.selection.take()),
        }
        let n = &mut self.applied[part as usize];
        *n = n.saturating_add(1).min(WARM_UP);
    }
}

fn put<T>(into: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *into = v;
    }
}

/// The link's side of the fleet: what is waiting to be sent or applied.
#[derive(Default)]
struct Wire {
    link: Option<Rc<dyn EngineLink>>,
    /// The engine said it is ready: messages go out at once.
    ready: bool,
    /// Messages sent before the engine was ready, in order.
    waiting: Vec<(Vec<u8>, JsValue)>,
    /// A summary (and its pixels) to apply at the next animation frame.
    pending: Option<(Box<Summary>, Option<web_sys::ImageData>)>,
    frame_requested: bool,
    /// `Sync` requests waiting for the summary that answers them.
    syncs: HashMap<u64, js_sys::Function>,
    /// What the summary being applied has cost the page's main thread so far, in milliseconds.
    page_ms: f64,
    #[cfg(feature = "test-hooks")]
    next_sync: u64,
}

/// The handle every view uses.
#[derive(Clone, Copy)]
pub struct Fleet {
    page: StoredValue<Page, LocalStorage>,
    gens: [RwSignal<u64>; PARTS],
    /// The timeline's pixels, as the engine painted them.
    pixels: StoredValue<Option<web_sys::ImageData>, LocalStorage>,
    wire: StoredValue<Rc<RefCell<Wire>>, LocalStorage>,
    pub settings: RwSignal<Settings>,
    pub paused: RwSignal<bool>,
    /// The tier tree's drill-down root.
    pub drill: RwSignal<Option<u64>>,
    /// A shift-drag's time range on the timeline (ms since the first frame).
    pub range: RwSignal<Option<(f64, f64)>>,
    /// The timeline canvas's CSS width.
    pub canvas_width: RwSignal<f64>,
    /// What the pixel under the pointer holds, as the engine answered.
    pub hover: RwSignal<String>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").finish_non_exhaustive()
    }
}

impl Fleet {
    pub fn new(settings: Settings) -> Fleet {
        Fleet {
            page: StoredValue::new_local(Page::default()),
            gens: std::array::from_fn(|_| RwSignal::new(0)),
            pixels: StoredValue::new_local(None),
            wire: StoredValue::new_local(Rc::new(RefCell::new(Wire::default()))),
            settings: RwSignal::new(settings),
            paused: RwSignal::new(false),
            drill: RwSignal::new(None),
            range: RwSignal::new(None),
            canvas_width: RwSignal::new(0.0),
            hover: RwSignal::new(String::new()),
        }
    }

    /// Reads a part of the page, tracking it: the caller re-runs when that part changes.
    pub fn read<R>(&self, part: Part, f: impl FnOnce(&Page) -> R) -> R {
        self.gens[part as usize].track();
        self.page.with_value(f)
    }

    /// Reads without tracking (event handlers).
    pub fn read_untracked<R>(&self, f: impl FnOnce(&Page) -> R) -> R {
        self.page.with_value(f)
    }

    /// Tracks a part without reading it.
    pub fn track(&self, part: Part) {
        self.gens[part as usize].track();
    }

    /// The timeline's latest pixels (read after tracking [`Part::Timeline`]).
    pub fn pixels(&self) -> Option<web_sys::ImageData> {
        self.pixels.try_get_value().flatten()
    }

    /// The event in the inspector (tracked).
    pub fn selected(&self) -> Option<u64> {
        self.read(Part::Selection, |p| p.selection.id)
    }

    pub fn policy_name(&self, side: Side) -> String {
        self.read(Part::Meta, |p| p.meta.policy(side).to_owned())
    }

    // --- Asking the engine --------------------------------------------------------------

    /// Sends a message to the engine, with what rides beside it.
    pub fn send_with(&self, message: &ToEngine, extra: JsValue) {
        let Some(wire) = self.wire.try_get_value() else { return };
        let bytes = kvscope_engine_protocol::encode(message);
        let mut w = wire.borrow_mut();
        match (&w.link, w.ready) {
            (Some(link), true) => {
                let link = link.clone();
                drop(w);
                link.send(bytes, extra);
            }
            _ => w.waiting.push((bytes, extra)),
        }
    }

    pub fn send(&self, message: &ToEngine) {
        self.send_with(message, JsValue::NULL);
    }

    /// Opens an event in the inspector.
    pub fn select(&self, id: Option<u64>) {
        self.send(&ToEngine::Select(id));
    }

    /// Asks for the raw bytes of event `id`, which the engine no longer keeps.
    pub fn fetch_bytes(&self, id: u64) {
        self.send(&ToEngine::FetchBytes(id));
    }

    /// Opens a capture file in the engine (it closes the socket).
    pub fn open_capture(&self, file: web_sys::File) {
        self.send_with(&ToEngine::OpenCapture { name: file.name() }, file.into());
    }

    /// Asks for a download; it starts when the engine answers.
    pub fn export(&self, kind: ExportKind) {
        self.send(&ToEngine::Export(kind));
    }

    /// Feeds one server message to the engine (the component tests; the worker reads its own
    /// socket).
    #[cfg(feature = "test-hooks")]
    pub fn ingest(&self, bytes: &[u8]) {
        self.send(&ToEngine::Ingest(bytes.to_vec()));
    }

    /// Resolves once the page shows everything sent to the engine before it, or fails after
    /// `timeout_ms` naming what it waited for (an engine that never answers does not hang its
    /// caller).
    #[cfg(feature = "test-hooks")]
    pub async fn sync(&self, timeout_ms: i32) -> Result<(), String> {
        let Some(wire) = self.wire.try_get_value() else { return Err("the page is gone".into()) };
        let id = {
            let mut w = wire.borrow_mut();
            w.next_sync += 1;
            w.next_sync
        };
        let promise = js_sys::Promise::new(&mut |resolve, reject| {
            wire.borrow_mut().syncs.insert(id, resolve);
            if let Some(window) = web_sys::window() {
                let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(&reject, timeout_ms);
            }
        });
        self.send(&ToEngine::Sync { id });
        let answered = wasm_bindgen_futures::JsFuture::from(promise).await;
        wire.borrow_mut().syncs.remove(&id);
        answered.map(|_| ()).map_err(|_| format!("the engine did not answer sync {id} within {timeout_ms} ms"))
    }

    pub fn update_settings(&self, f: impl FnOnce(&mut Settings)) {
        self.settings.update(f);
    }

    /// What the page shows, for the engine.
    fn query(&self) -> ViewQuery {
        ViewQuery {
            settings: self.settings.get(),
            drill: self.drill.get(),
            range: self.range.get(),
            canvas_width: self.canvas_width.get(),
            device_pixel_ratio: web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()),
            paused: self.paused.get(),
        }
    }

    // --- The engine's answers -----------------------------------------------------------

    /// Connects the page to its engine: `link` carries messages there; the engine's come back
    /// through [`Fleet::receive`]. Sends what the page shows whenever it changes, and connects
    /// the engine to the server (unless the settings say offline).
    pub fn attach(&self, link: Rc<dyn EngineLink>) {
        if let Some(wire) = self.wire.try_get_value() {
            wire.borrow_mut().link = Some(link);
        }
        let this = *self;
        // Effect at the edge: what the page shows -> the engine.
        Effect::new(move |_| {
            let query = this.query();
            this.send(&ToEngine::View(Box::new(query)));
        });
        if !self.settings.with_untracked(|s| s.offline)
            && let Some(url) = self.settings.with_untracked(|s| s.ws.clone()).or_else(crate::url::default_ws_url)
        {
            self.send(&ToEngine::Connect { url });
        }
    }

    /// One message from the engine, and what rode beside it.
    pub fn receive(&self, bytes: &[u8], extra: JsValue) {
        let message = match kvscope_engine_protocol::decode::<FromEngine>(bytes) {
            Ok(m) => m,
            Err(e) => return crashed(&e.to_string()),
        };
        match message {
            FromEngine::Ready { .. } => self.engine_ready(),
            FromEngine::Summary { summary, pixels } => {
                let image = pixels.and_then(|(w, h)| image_data(&extra, w, h));
                let Some(wire) = self.wire.try_get_value() else { return };
                let mut w = wire.borrow_mut();
                w.pending = Some((summary, image));
                if !w.frame_requested {
                    w.frame_requested = true;
                    let this = *self;
                    request_animation_frame(move || this.apply_pending());
                }
            }
            FromEngine::Hover(text) => {
                let _ = self.hover.try_set(text);
            }
            FromEngine::Download { name, mime, bytes } => {
                if let Err(e) = crate::download::download(&name, &mime, &bytes) {
                    web_sys::console::error_1(&format!("the download of {name} failed: {e}").into());
                }
            }
            FromEngine::Crashed(text) => crashed(&text),
        }
    }

    fn engine_ready(&self) {
        let Some(wire) = self.wire.try_get_value() else { return };
        let (link, waiting) = {
            let mut w = wire.borrow_mut();
            w.ready = true;
            (w.link.clone(), std::mem::take(&mut w.waiting))
        };
        if let Some(link) = link {
            for (bytes, extra) in waiting {
                link.send(bytes, extra);
            }
        }
    }

    /// Applies the pending summary, the parts [`parts_for_frame`] gives this frame: each replaces
    /// the page's copy and bumps that part's generation. The rest wait for the next frame; once
    /// none is left, the engine may send the next summary.
    fn apply_pending(&self) {
        let started = now_ms();
        let Some(wire) = self.wire.try_get_value() else { return };
        let Some((mut summary, mut image)) = ({
            let mut w = wire.borrow_mut();
            w.frame_requested = false;
            w.pending.take()
        }) else {
            return;
        };
        let carried: Vec<Part> =
            Part::IN_PAGE_ORDER.into_iter().filter(|&part| summary.carries(part) || (part == Part::Timeline && image.is_some())).collect();
        let mut changed = Vec::new();
        let mut paced = true;
        let applied = self.page.try_update_value(|p| {
            changed = parts_for_frame(&carried, &p.applied);
            paced = counts_toward_pace(&changed, &p.applied);
            for &part in &changed {
                p.take(part, &mut summary);
            }
        });
        // Whatever waits for a frame of its own is still in `summary` (and the pixels beside it).
        let finished =
            Part::IN_PAGE_ORDER.iter().all(|&part| !summary.carries(part)) && (image.is_none() || changed.contains(&Part::Timeline));
        if applied.is_none() {
            return;
        }
        if changed.contains(&Part::Timeline)
            && let Some(image) = image.take()
        {
            self.pixels.set_value(Some(image));
        }
        for part in &changed {
            self.gens[*part as usize].update(|g| *g += 1);
        }
        if !finished {
            {
                let mut w = wire.borrow_mut();
                w.pending = Some((summary, image));
                w.frame_requested = true;
            }
            self.count_frame(paced.then_some(started), None);
            let this = *self;
            request_animation_frame(move || this.apply_pending());
            return;
        }
        let answered: Vec<js_sys::Function> = {
            let mut w = wire.borrow_mut();
            summary.answers.iter().filter_map(|id| w.syncs.remove(id)).collect()
        };
        self.count_frame(paced.then_some(started), Some(summary.seq));
        for resolve in answered {
            let _ = resolve.call0(&JsValue::NULL);
        }
    }

    /// Counts what this animation frame cost the page, from `started` to the end of its
    /// rendering (a task queued now runs after the frame's effects, style and layout), toward
    /// the summary being applied. With `ack`, that summary is done: the engine hears that it
    /// may send the next, and what this one cost, which paces the next (`kvscope_engine::pace`).
    /// `started` is `None` for a frame that does not count ([`counts_toward_pace`]).
    fn count_frame(&self, started: Option<f64>, ack: Option<u64>) {
        let this = *self;
        let counted = move || {
            let Some(wire) = this.wire.try_get_value() else { return };
            let page_ms = {
                let mut w = wire.borrow_mut();
                w.page_ms += started.map_or(0.0, |t| now_ms() - t);
                if ack.is_some() { std::mem::take(&mut w.page_ms) } else { 0.0 }
            };
            if let Some(seq) = ack {
                this.send(&ToEngine::Ack { seq, page_ms });
            }
        };
        let Some(window) = web_sys::window() else { return counted() };
        let cb = Closure::once_into_js(counted);
        // Without a timer the engine still hears the acknowledgement, with no cost measured.
        if window.set_timeout_with_callback_and_timeout_and_arguments_0(cb.unchecked_ref(), 0).is_err()
            && let Some(seq) = ack
        {
            self.send(&ToEngine::Ack { seq, page_ms: 0.0 });
        }
    }
}

/// Milliseconds since the page started (`performance.now()`).
fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// The pixels beside a summary as an `ImageData` (no copy: it wraps the transferred buffer).
fn image_data(extra: &JsValue, width: u32, height: u32) -> Option<web_sys::ImageData> {
    let buffer = extra.dyn_ref::<js_sys::ArrayBuffer>()?;
    let clamped = js_sys::Uint8ClampedArray::new(buffer);
    web_sys::ImageData::new_with_js_u8_clamped_array_and_sh(&clamped, width, height).ok()
}

/// The engine is gone or speaks another protocol: the page says so plainly and stops looking
/// live (`window.kvscopeCrashed` in `index.html`).
pub fn crashed(what: &str) {
    web_sys::console::error_1(&what.into());
    if let Some(window) = web_sys::window()
        && let Ok(f) = js_sys::Reflect::get(&window, &"kvscopeCrashed".into())
        && let Some(f) = f.dyn_ref::<js_sys::Function>()
    {
        let _ = f.call1(&JsValue::NULL, &what.into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_warming_up_gets_a_frame_of_its_own_and_then_everything_goes_together() {
        let mut applied = [0u8; PARTS];
        let all = Part::IN_PAGE_ORDER.to_vec();
        // The first summary: one part a frame, in the page's order.
        let mut frames = Vec::new();
        for _ in 0..2 {
            let mut left = all.clone();
            while !left.is_empty() {
                let frame = parts_for_frame(&left, &applied);
                assert_eq!(frame.len(), 1, "warming up: {frame:?} alone");
                applied[frame[0] as usize] += 1;
                left.retain(|p| !frame.contains(p));
                frames.push(frame[0]);
            }
        }
        assert_eq!(&frames[..3], &[Part::Meta, Part::Selection, Part::Bar]);
        assert_eq!(frames.len(), 2 * PARTS, "each part's build and first rebuild");
        // Warm: the light parts together, each heavy one alone.
        let usual = [Part::Bar, Part::Quality, Part::Headline, Part::Overview, Part::Timeline, Part::Trees];
        assert_eq!(parts_for_frame(&usual, &applied), [Part::Bar, Part::Quality, Part::Headline]);
        assert_eq!(parts_for_frame(&usual[3..], &applied), [Part::Overview]);
        assert_eq!(parts_for_frame(&usual[4..], &applied), [Part::Timeline]);
        assert_eq!(parts_for_frame(&[Part::Meta, Part::Selection, Part::Bar], &applied), [Part::Meta, Part::Selection, Part::Bar]);
        // A part that was never shown (the event planes appear) goes alone, after the parts
        // before it; the parts after it wait for the next frame.
        applied[Part::Planes as usize] = 0;
        let carried = [Part::Bar, Part::Planes, Part::Timeline];
        assert_eq!(parts_for_frame(&carried, &applied), [Part::Bar]);
        assert_eq!(parts_for_frame(&carried[1..], &applied), [Part::Planes]);
        assert!(parts_for_frame(&[], &applied).is_empty());
    }

    #[test]
    fn only_frames_of_warm_parts_pace_the_summaries() {
        let mut applied = [WARM_UP; PARTS];
        assert!(counts_toward_pace(&[Part::Bar, Part::Quality], &applied));
        applied[Part::Planes as usize] = 1;
        assert!(!counts_toward_pace(&[Part::Planes], &applied), "its first rebuild is start-up");
        assert!(counts_toward_pace(&[Part::Bar], &applied));
        assert!(!counts_toward_pace(&[Part::Meta], &[0; PARTS]), "the first build");
    }
}
