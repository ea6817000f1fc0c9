//! [`Engine`]: the model plus what the page shows, the selection, and what was last sent; it
//! answers the page's requests and summarises the model for it. Plain Rust, tested natively: the
//! I/O around it (socket, timers, files, the page's messages) is `crate::host`'s.

use kvscope_engine_protocol::view::{Overview, Selection};
use kvscope_engine_protocol::{ExportKind, Settings, Severity, Side, Summary, ViewQuery};
use kvscope_protocol as proto;

use crate::coordinator::{self, ShardReport};
use crate::model::shard::Shard;
use crate::model::{Config, Model};
use crate::summarize::{self, EdgeState, InspectorCache, Sent, TimelineImage};

/// The model configuration the settings ask for; what they leave open comes from the server's
/// defaults, then from [`Config::default`].
pub fn config_from(settings: &Settings, server: Option<&proto::Defaults>, shard: Shard) -> Config {
    let d = Config::default();
    Config {
        policy_a: settings.policy_a.clone().or_else(|| server.map(|s| s.policy_a.clone())).unwrap_or(d.policy_a),
        policy_b: settings.policy_b.clone().or_else(|| server.map(|s| s.policy_b.clone())).unwrap_or(d.policy_b),
        block_size: settings.block_size.or(server.map(|s| s.block_size)).unwrap_or(d.block_size),
        // Not a page setting: the page predicts the relay the server predicts, so its router
        // rows and /metrics agree.
        relay_policy: server.map(|s| s.relay_policy.clone()).unwrap_or(d.relay_policy),
        trees: settings.trees_side(),
        retain_bytes: settings.retain_bytes(),
        retain_events: settings.retain_events(),
        max_frame_bytes: settings.max_frame_bytes(),
        shard,
    }
}

/// The dashboard's engine state.
#[derive(Debug)]
pub struct Engine {
    model: Model,
    query: ViewQuery,
    /// The event in the inspector (model event id).
    selection: Option<u64>,
    /// The first finding (an exit, else a disagreement) was opened once: never again by itself.
    opened_first: bool,
    /// Bumped by every re-classification and hello: event ids before it mean other events.
    epoch: u64,
    /// The page's query, or the socket's or the capture's state, changed since the last summary.
    query_changed: bool,
    /// What the page was last sent, part by part.
    sent: Sent,
    last_pixels: Option<TimelineImage>,
    inspector: InspectorCache,
    seq: u64,
    /// The socket, the capture being opened, the intake, the memory: set by the host.
    edges: EdgeState,
}

impl Engine {
    pub fn new(settings: Settings) -> Engine {
        Engine::shard(settings, Shard::ALL)
    }

    /// An engine that reads one shard of the fleet ([`crate::model::shard`]).
    pub fn shard(settings: Settings, shard: Shard) -> Engine {
        let model = Model::new(config_from(&settings, None, shard));
        Engine {
            model,
            query: ViewQuery { settings, ..ViewQuery::default() },
            selection: None,
            opened_first: false,
            epoch: 0,
            query_changed: true,
            sent: Sent::default(),
            last_pixels: None,
            inspector: InspectorCache::default(),
            seq: 0,
            edges: EdgeState::default(),
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Changes the model; the next summary will look for what changed.
    pub fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    pub fn query(&self) -> &ViewQuery {
        &self.query
    }

    pub fn settings(&self) -> &Settings {
        &self.query.settings
    }

    pub fn paused(&self) -> bool {
        self.query.paused
    }

    pub fn selection(&self) -> Option<u64> {
        self.selection
    }

    /// What the socket, the capture, the intake and the memory say now.
    pub fn edges(&self) -> &EdgeState {
        &self.edges
    }

    /// The inspector of event `id` as this model builds it (without the index's lines).
    pub fn inspect(&mut self, id: Option<u64>) -> Option<summarize::InspectorPart> {
        self.inspector.get(&self.model, id, self.epoch)
    }

    /// The socket's state changed: the fleet bar says so at the next summary.
    pub fn set_conn(&mut self, state: kvscope_engine_protocol::view::ConnState) {
        self.edges.conn = state;
        self.query_changed = true;
    }

    /// Opening a capture went on: the fleet bar says how far at the next summary.
    pub fn set_capture(&mut self, progress: kvscope_engine_protocol::view::CaptureProgress) {
        self.edges.capture = progress;
        self.query_changed = true;
    }

    /// What the intake holds and the engine's memory: shown with the next summary, not a
    /// reason for one.
    pub fn note_resources(&mut self, intake: crate::model::intake::IntakeStatus, wasm_bytes: u64) {
        self.edges.intake = intake;
        self.edges.wasm_bytes = wasm_bytes;
    }

    /// How often summaries go now, for the fleet bar.
    pub fn note_pace(&mut self, pace: &crate::pace::Pace) {
        self.edges.pace = pace.note();
    }

    /// What the page shows now. Re-classifies retained history when what classification depends
    /// on changed, keeping the selected event selected.
    pub fn set_view(&mut self, query: ViewQuery) {
        if query == self.query {
            return;
        }
        let config = config_from(&query.settings, self.model.server_defaults.as_ref(), self.model.shard());
        self.query = query;
        self.query_changed = true;
        self.configure(config);
    }

    fn configure(&mut self, config: Config) {
        if *self.model.config() == config {
            return;
        }
        let selected = self.selection.and_then(|id| self.model.event_ref(id));
        self.model.reconfigure(config);
        self.selection = selected.and_then(|r| self.model.find_event(&r));
        self.epoch += 1;
        self.model.dirty = true;
    }

    /// Applies one message from the server (magic, version, msgpack body). After a hello the
    /// model is re-configured with the server's defaults wherever the settings leave them open,
    /// before the messages that follow it, and the selection is gone (the history is resent).
    pub fn apply_server_message(&mut self, bytes: &[u8], now_ms: f64) {
        if self.model.apply_message_bytes(bytes, now_ms) {
            self.started_over();
        }
    }

    /// The model started over (a hello, or a capture's header): its event ids are new.
    pub fn started_over(&mut self) {
        let config = config_from(&self.query.settings, self.model.server_defaults.as_ref(), self.model.shard());
        self.model.reconfigure(config);
        self.selection = None;
        self.epoch += 1;
    }

    /// Starts a capture opened in the page: like a hello, from its header, with the block size
    /// of its first Device-tier store where the settings leave it open.
    pub fn begin_capture(&mut self, name: &str, header: &proto::capture::CaptureHeader, inferred_block_size: Option<u32>) {
        self.model.begin_capture(name, header);
        let d = Config::default();
        self.model.server_defaults = Some(proto::Defaults {
            block_size: inferred_block_size.unwrap_or(d.block_size),
            policy_a: d.policy_a,
            policy_b: d.policy_b,
            relay_policy: d.relay_policy,
        });
        self.model.defaults_note =
            inferred_block_size.map(|bs| format!("block size {bs} inferred from the capture's first Device-tier store"));
        self.started_over();
    }

    /// Opens an event in the inspector.
    pub fn select(&mut self, id: Option<u64>) {
        self.selection = id;
        // An explicit choice: nothing opens by itself over it.
        self.opened_first = true;
        self.query_changed = true;
    }

    /// Selects the next event marked under either policy (a fatal under A is the skip under B)
    /// with at least `min_severity`, after the selected one, wrapping around.
    pub fn select_next(&mut self, min_severity: Severity) {
        let m = &self.model;
        let next = |after| [Side::A, Side::B].into_iter().filter_map(|s| m.next_marked(s, after, min_severity)).min();
        let id = next(self.selection).or_else(|| next(None));
        self.select(id);
    }

    /// Selects the marked event a click on a lane hits, if any.
    pub fn select_at(&mut self, source: u32, side: Side, time_ms: f64, tolerance_ms: f64) {
        if let Some(id) = summarize::pick_at(&self.model, source, side, time_ms, tolerance_ms) {
            self.select(Some(id));
        }
    }

    /// What a lane holds between two times, in words.
    pub fn hover(&self, source: u32, side: Side, from_ms: f64, to_ms: f64) -> String {
        summarize::hover_text(&self.model, source, side, from_ms, to_ms)
    }

    /// A download: file name, type and bytes.
    pub fn export(&self, kind: ExportKind, now_unix_nanos: u64) -> (String, String, Vec<u8>) {
        match kind {
            ExportKind::Capture => ("kvscope.kvcap".into(), "application/octet-stream".into(), self.model.to_kvcap(now_unix_nanos)),
            ExportKind::VerdictsJsonl => {
                ("kvscope-verdicts.jsonl".into(), "application/x-ndjson".into(), self.model.to_jsonl().into_bytes())
            }
        }
    }

    /// The page (re)joined: the next summary carries every part.
    pub fn resend_all(&mut self) {
        self.sent.clear();
        self.last_pixels = None;
        self.query_changed = true;
    }

    /// Opens the event the settings name (a shared link's `ev=`) once it has arrived, else, once
    /// per page, the event an operator looks at first: where a policy's indexer exits, else the
    /// first event the policies decide differently.
    fn resolve_selection(&mut self) {
        if self.selection.is_some() {
            return;
        }
        let m = &self.model;
        if let Some(r) = &self.query.settings.selected {
            self.selection = m.find_event(r);
            return;
        }
        if self.opened_first {
            return;
        }
        let first = m
            .indexer_exit(Side::A)
            .or(m.indexer_exit(Side::B))
            .map(|e| e.event_id)
            .or_else(|| m.differences().iter().min_by_key(|d| (d.first_position, d.first_event)).map(|d| d.first_event));
        if first.is_some() {
            self.selection = first;
            self.opened_first = true;
        }
    }

    /// What changed since the last summary, part by part, and the timeline's pixels when they
    /// changed; `None` when nothing did (and `force` is false).
    pub fn summarize(&mut self, now_ms: f64, force: bool) -> Option<(Summary, Option<TimelineImage>)> {
        let (global, changed) = self.model.take_dirty();
        if !(global || !changed.is_empty() || self.query_changed || force) {
            return None;
        }
        self.query_changed = false;
        self.resolve_selection();
        let m = &self.model;
        let q = &self.query;
        // One engine is a fleet of one shard: its report and the merge are the coordinator's.
        let report = ShardReport::of(m, &q.settings, self.edges.intake.queued_messages > 0, now_ms);
        let fleet = coordinator::merge(std::slice::from_ref(&report), &self.edges);
        let reports = std::slice::from_ref(&report);
        let layout = coordinator::timeline_layout(reports, &fleet.rows, q);
        let lanes = summarize::timeline::lanes_part(m, &layout);
        let (timeline, image) = coordinator::timeline(&layout, reports, std::slice::from_ref(&lanes), &fleet.rows, &q.settings);
        let inspector = self.inspector.get(m, self.selection, self.epoch).map(|part| {
            let lines = part.index_query.as_ref().map(|q| summarize::event_index_lines(m, q)).unwrap_or_default();
            part.with_index_lines(lines)
        });
        let selection = Selection { id: self.selection, event: self.selection.and_then(|id| m.event_ref(id)) };
        let sent = &mut self.sent;
        let summary = Summary {
            seq: self.seq + 1,
            meta: sent.changed("meta", summarize::meta(m)),
            bar: sent.changed("bar", fleet.bar),
            quality: sent.changed("quality", fleet.quality),
            headline: sent.changed("headline", fleet.headline),
            overview: sent.changed("overview", Overview { rows: fleet.rows }),
            cards: sent.changed("cards", fleet.cards),
            planes: sent.changed("planes", summarize::planes(m)),
            timeline: sent.changed("timeline", timeline),
            inspector: sent.changed("inspector", inspector),
            logs: sent.changed("logs", fleet.logs),
            trees: sent.changed("trees", summarize::trees(m, &q.settings, q.drill)),
            selection: sent.changed("selection", selection),
            answers: Vec::new(),
        };
        let pixels = image.filter(|image| self.last_pixels.as_ref() != Some(image)).inspect(|image| {
            self.last_pixels = Some(image.clone());
        });
        let empty = summary == Summary { seq: summary.seq, ..Summary::default() };
        if empty && pixels.is_none() && !force {
            return None;
        }
        self.seq = summary.seq;
        Some((summary, pixels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{hello, kimi_frames};

    fn kimi() -> Engine {
        let mut e = Engine::new(Settings::default());
        e.apply_server_message(&proto::encode(&hello(3, 1536)), 0.0);
        for f in kimi_frames() {
            e.apply_server_message(&proto::encode(&f), 0.0);
        }
        e
    }

    #[test]
    fn a_summary_carries_what_changed_and_nothing_when_nothing_did() {
        let mut e = kimi();
        let (first, pixels) = e.summarize(0.0, false).expect("a first summary");
        assert!(first.meta.is_some() && first.bar.is_some() && first.overview.is_some() && first.timeline.is_some());
        assert_eq!(first.meta.as_ref().map(|m| m.block_size), Some(1536), "the server's default block size");
        assert!(pixels.is_none(), "no pixels before the page said how wide its canvas is");
        e.set_view(ViewQuery { canvas_width: 600.0, device_pixel_ratio: 2.0, ..e.query().clone() });
        let pixels = e.summarize(0.0, false).and_then(|s| s.1).expect("pixels at the canvas's width");
        assert_eq!((pixels.width, pixels.rgba.len()), (1200, (pixels.width * pixels.height * 4) as usize), "600 CSS pixels at 2x");
        assert!(e.summarize(0.0, false).is_none(), "nothing changed");
        let forced = e.summarize(0.0, true).expect("forced");
        assert_eq!((forced.0.meta, forced.0.bar, forced.1), (None, None, None), "forced, but still only what changed");
        e.set_view(ViewQuery { settings: Settings { block_size: Some(12288), ..Settings::default() }, ..e.query().clone() });
        let (after, _) = e.summarize(0.0, false).expect("a re-classification changes the page");
        assert_eq!(after.meta.map(|m| m.block_size), Some(12288));
        assert!(after.cards.is_some());
    }

    #[test]
    fn a_socket_going_away_is_summarised_though_no_frame_arrived() {
        use kvscope_engine_protocol::view::{ConnBadge, ConnState, Tone};
        let mut e = kimi();
        assert!(e.summarize(0.0, false).is_some());
        assert!(e.summarize(0.0, false).is_none());
        let away = ConnState::Waiting { attempt: 0, delay_ms: 250.0, reason: "closed (code 1006)".into() };
        e.set_conn(away.clone());
        let (s, _) = e.summarize(0.0, false).expect("the fleet bar must say the server is away");
        assert_eq!(s.bar.map(|b| b.badge), Some(ConnBadge { text: away.label(), tone: Tone::Warn }));
        e.note_resources(Default::default(), 1 << 20);
        assert!(e.summarize(0.0, false).is_none(), "the memory figure alone is no reason for a summary");
    }

    #[test]
    fn an_open_socket_behind_live_says_by_how_much_instead_of_connected() {
        use crate::model::intake::IntakeStatus;
        use kvscope_engine_protocol::view::{ConnState, Tone};
        let mut e = Engine::new(Settings::default());
        e.apply_server_message(&proto::encode(&hello(3, 1536)), 0.0);
        e.set_conn(ConnState::Open);
        // The page's clock 1 h off the server's; the first round applied 5 ms after the server
        // got it, the rest 27 s late.
        e.model_mut().wall_offset_ms = Some(3_600_000.0);
        for (i, f) in kimi_frames().into_iter().enumerate() {
            let proto::Message::Frame(frame) = &f else { unreachable!() };
            let late = if i < 3 { 5.0 } else { 27_005.0 };
            let now = frame.recv_time_nanos as f64 / 1e6 + late;
            e.apply_server_message(&proto::encode(&f), now);
        }
        let now = 1_000.0 + 20.0 * 10.0 + 27_005.0;
        let waiting = IntakeStatus { queued_messages: 40, queued_bytes: 1 << 20, ..IntakeStatus::default() };
        e.note_resources(waiting, 1 << 20);
        let badge = e.summarize(now, false).and_then(|(s, _)| s.bar).map(|b| b.badge).expect("a fleet bar");
        assert_eq!((badge.text.as_str(), badge.tone), ("behind live by 27.0 s, catching up at 228 frames/s", Tone::Warn));
        // Drained, and nothing for over a second: live again, whatever the last frame's delay.
        e.note_resources(IntakeStatus::default(), 1 << 20);
        let badge = e.summarize(now + 1_500.0, true).and_then(|(s, _)| s.bar).map(|b| b.badge).expect("a fleet bar");
        assert_eq!((badge.text.as_str(), badge.tone), ("connected", Tone::Ok));
    }

    #[test]
    fn a_page_that_refreshes_less_often_says_so_in_the_fleet_bar() {
        let mut e = Engine::new(Settings::default());
        e.apply_server_message(&proto::encode(&hello(3, 1536)), 0.0);
        let mut pace = crate::pace::Pace::default();
        e.note_pace(&pace);
        let bar = e.summarize(0.0, false).and_then(|(s, _)| s.bar).expect("a fleet bar");
        assert_eq!(bar.pace, None, "ten summaries a second need no note");
        pace.took(120.0);
        e.note_pace(&pace);
        let bar = e.summarize(10.0, true).and_then(|(s, _)| s.bar).expect("the bar changed: it says the pace");
        assert_eq!(
            bar.pace.as_deref(),
            Some(
                "views refresh every 500 ms (not 100 ms): each refresh costs this page 120 ms of its main thread, held to 25% of its time"
            )
        );
    }

    #[test]
    fn the_first_exit_opens_by_itself_once_and_a_reclassification_keeps_the_selection() {
        let mut e = kimi();
        let (s, _) = e.summarize(0.0, false).unwrap();
        let selected = s.selection.and_then(|s| s.event).expect("the exit under legacy opens by itself");
        let exit = e.model().indexer_exit(Side::A).map(|x| x.event_id);
        assert_eq!(e.selection(), exit);
        // B's trees instead of A's re-classifies nothing; a new block size re-classifies all.
        e.set_view(ViewQuery { settings: Settings { block_size: Some(1536), ..Settings::default() }, ..e.query().clone() });
        e.set_view(ViewQuery { settings: Settings { policy_a: Some("fixed".into()), ..Settings::default() }, ..e.query().clone() });
        assert!(e.summarize(0.0, false).is_some(), "re-classified");
        assert_eq!(e.selection().and_then(|id| e.model().event_ref(id)), Some(selected), "the same event, by name, after re-classifying");
        e.select(None);
        assert!(e.summarize(0.0, false).unwrap().0.selection.is_some_and(|s| s.id.is_none()), "closed stays closed");
    }

    #[test]
    fn next_fatal_walks_the_marked_events_and_wraps() {
        let mut e = kimi();
        e.select(None);
        e.select_next(Severity::Fatal);
        let first = e.selection().expect("a fatal under legacy");
        e.select_next(Severity::Fatal);
        let second = e.selection().expect("a second fatal");
        assert!(second > first);
        let hover = e.hover(0, Side::A, 0.0, 1e9);
        assert!(hover.starts_with("0:0 at ") && hover.contains("events under policy A"), "{hover}");
    }
}
