//! The dashboard's state, in plain Rust: everything the views show, none of how.
//!
//! [`Model`] applies protocol messages (a hello, frames, frame errors, source status, lag
//! notices) and capture records. For each frame it decodes the payload with `kvscope-wire`,
//! classifies every event under policy A and policy B (one normalizer each, [`policy_run`]),
//! feeds the tier trees of one of them ([`trees`]), counts verdicts per source, appends a mark to
//! the source's timeline lane and keeps the indexer log lines. Each event keeps a compact
//! record ([`EventRecord`], bounded in count) and each frame its raw bytes for a while
//! (bounded in bytes); past either bound the oldest go and [`Model::memory`] says so.
//!
//! This file holds the state and applies messages; the rest of `Model` is split by job:
//! `classify.rs` (each frame through both policies, re-classification), `retention.rs`
//! (retained frames, their cost and eviction), `inspector.rs` (an event's detail, event
//! references, the log) and `export.rs` (the `.kvcap` and JSON-lines downloads).
//!
//! It is tested natively (`cargo test -p kvscope-engine`). It runs in the engine's worker; the
//! page never sees it, only what `crate::summarize` makes of it.

pub mod chunked;
pub mod classes;
mod classify;
pub mod completeness;
pub mod export;
pub mod fleet;
pub mod index;
mod inspector;
pub mod intake;
pub mod live;
pub mod overview;
pub mod policy_run;
pub mod rate;
mod retention;
pub mod router;
pub mod shard;
pub mod summary;
pub mod timeline;
pub mod trees;

use std::collections::{BTreeMap, VecDeque};

use kvscope_normalize::Outcome;
use kvscope_protocol as proto;

/// The page's settings (owned by the page, sent with every view query).
pub use kvscope_engine_protocol::settings;

use classes::{ClassCode, ClassTable, Reason, TierShown};
use classify::make_runs;
use policy_run::PolicyRun;
use rate::RateMeter;
use settings::Side;
use timeline::Lane;
use trees::Trees;

pub use inspector::{BytesFrom, EventDetail, FetchState, FrameKey, LogLine, StreamOrder};
pub use retention::{CaptureSpan, EventRecord, FrameBody, MIN_BYTES_PER_EVENT, MediumTable, MemoryUse, RetainedFrame};

/// The settings the classification depends on; changing any re-classifies retained history.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub policy_a: String,
    pub policy_b: String,
    pub block_size: u32,
    /// The policy the relays are predicted to run (the server's `--relay-policy`), by name.
    pub relay_policy: String,
    /// Whose verdicts build the tier trees.
    pub trees: Side,
    /// Bound on retained frames (their raw bytes), in bytes.
    pub retain_bytes: usize,
    /// Bound on retained event records, in events.
    pub retain_events: usize,
    /// Bound on the nodes each modelled router index keeps, and the engines' blocks beside them.
    pub index_nodes: usize,
    /// Larger payloads are refused before decoding, as a frame error.
    pub max_frame_bytes: usize,
    /// This engine's part of the fleet ([`shard`]): the whole fleet unless the page runs
    /// several engine workers.
    pub shard: shard::Shard,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy_a: settings::DEFAULT_POLICY_A.to_owned(),
            policy_b: settings::DEFAULT_POLICY_B.to_owned(),
            block_size: 16,
            relay_policy: kvscope_router::RelayConfig::DEFAULT_POLICY.name.to_owned(),
            trees: Side::B,
            retain_bytes: settings::DEFAULT_RETAIN_MIB as usize * 1024 * 1024,
            retain_events: settings::DEFAULT_RETAIN_EVENTS,
            index_nodes: kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS,
            max_frame_bytes: settings::DEFAULT_MAX_FRAME_MIB as usize * 1024 * 1024,
            shard: shard::Shard::ALL,
        }
    }
}

/// (kind, reason) -> (events, events per tier).
pub type Rows = BTreeMap<(Outcome, Reason), (u64, BTreeMap<TierShown, u64>)>;

/// Verdict counts of one source under one policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Events classified (one verdict each).
    pub events: u64,
    /// Events per class code.
    pub by_class: BTreeMap<ClassCode, u64>,
    /// The first fatal verdict: its seq and its sentence.
    pub first_fatal: Option<(u64, String)>,
    /// Blocks applied per tier label (stores and removes).
    pub blocks_applied: BTreeMap<&'static str, u64>,
    /// Events of this source that arrived after the fleet's indexer exited under this policy
    /// ([`Model::indexer_exit`]): a router indexer that stopped never sees them.
    pub after_exit: u64,
    /// Of those, the fatal ones: each would stop a restarted indexer again (the crashloop).
    pub fatal_after_exit: u64,
}

impl Counts {
    /// Events whose verdict has this kind and `data-reason`, across tiers.
    pub fn get(&self, classes: &ClassTable, kind: Outcome, reason: Reason) -> u64 {
        self.by_class
            .iter()
            .filter(|(code, _)| classes.get(**code).is_some_and(|c| c.kind == kind && c.reason == reason))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every (kind, reason) with a non-zero count, with the tiers involved.
    pub fn rows(&self, classes: &ClassTable) -> Rows {
        let mut out: Rows = BTreeMap::new();
        for (code, n) in &self.by_class {
            let Some(c) = classes.get(*code) else { continue };
            let row = out.entry((c.kind, c.reason)).or_default();
            row.0 += n;
            if let Some(t) = c.tier {
                *row.1.entry(t).or_default() += n;
            }
        }
        out
    }

    pub fn total(&self, classes: &ClassTable, kind: Outcome) -> u64 {
        self.by_class.iter().filter(|(code, _)| classes.get(**code).is_some_and(|c| c.kind == kind)).map(|(_, n)| n).sum()
    }
}

/// One kind of disagreement between the policies: how many events, and the first of them (for
/// the inspector's link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Difference {
    pub events: u64,
    pub first_event: u64,
    /// The first event's frame's place in the stream.
    pub first_position: u64,
}

/// Where one router indexer, consuming every source's stream, stops under a fatal policy: the
/// first fatal event fleet-wide, in arrival order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndexerExit {
    /// The exit's frame's place in the stream ([`Model::position`]): the same in every shard,
    /// so the earliest of the shards' exits is the fleet's.
    pub position: u64,
    pub event_id: u64,
    pub source: u32,
    pub seq: u64,
    pub recv_time_nanos: u64,
    pub label: kvscope_normalize::VerdictLabel,
    /// The verdict's sentence.
    pub sentence: String,
}

/// Sequence-number bookkeeping of one source, computed from the frames themselves so that a
/// capture opened without a server shows gaps and restarts too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqTrack {
    pub last_seq: Option<u64>,
    pub gaps: u64,
    pub missing_frames: u64,
    pub restarts: u64,
    /// Frames that came from the replay socket (they fill gaps counted in `missing_frames`).
    pub replayed: u64,
}

impl SeqTrack {
    fn see(&mut self, seq: u64, replayed: bool) {
        if replayed {
            // Replayed frames fill a gap that was already counted.
            self.replayed += 1;
            return;
        }
        match self.last_seq {
            Some(last) if seq == last.wrapping_add(1) => {}
            Some(last) if seq > last => {
                self.gaps += 1;
                self.missing_frames += seq - last - 1;
            }
            Some(_) => self.restarts += 1,
            None => {}
        }
        self.last_seq = Some(seq);
    }
}

/// One source: a worker's data-parallel rank.
#[derive(Clone, Debug)]
pub struct Source {
    pub index: u32,
    pub key: String,
    /// An engine, or Dynamo's event plane (what the router receives).
    pub kind: proto::SourceKind,
    pub event_plane: Option<proto::EventPlaneInfo>,
    pub worker_id: String,
    pub dp_rank: u32,
    pub endpoint: String,
    /// Its own block size, when its model says (`SourceInfo::block_size`); else the page's.
    pub block_size: Option<u32>,
    /// This engine's shard reads it ([`shard::reads`]): another shard's engine source is only
    /// counted past, and shown by that shard.
    pub own: bool,
    /// The server's latest status for it (live only).
    pub status: Option<proto::SourceStatus>,
    pub frames: u64,
    pub payload_bytes: u64,
    pub frame_errors: u64,
    pub decode_errors: u64,
    /// Frames of this source the server dropped for this page (its lag notices).
    pub lagged_frames: u64,
    /// The latest decode or frame error, in words.
    pub last_error: Option<String>,
    pub seq: SeqTrack,
    pub counts: [Counts; 2],
    /// Its events per second (the overview's rate column).
    pub rate: RateMeter,
    /// How its events are laid out (tagged arrays up to vLLM 0.23, maps after): a source on
    /// another release than the rest of the fleet stands out in the overview.
    pub wire: overview::WireLayout,
    /// Set when something shown on its card changed since the last flush.
    pub dirty: bool,
}

impl Source {
    /// The source as a capture header lists it (a page's export or re-classification keeps no
    /// replay endpoint: it cannot replay).
    pub fn info(&self) -> proto::SourceInfo {
        proto::SourceInfo {
            index: self.index,
            key: self.key.clone(),
            kind: self.kind,
            event_plane: self.event_plane.clone(),
            block_size: None,
            worker_id: self.worker_id.clone(),
            dp_rank: self.dp_rank,
            endpoint: self.endpoint.clone(),
            replay_endpoint: None,
        }
    }

    fn new(info: &proto::SourceInfo, shard: shard::Shard) -> Source {
        Source {
            own: shard::reads(shard, info),
            index: info.index,
            key: info.key.clone(),
            kind: info.kind,
            event_plane: info.event_plane.clone(),
            worker_id: info.worker_id.clone(),
            dp_rank: info.dp_rank,
            endpoint: info.endpoint.clone(),
            block_size: info.block_size,
            status: None,
            frames: 0,
            payload_bytes: 0,
            frame_errors: 0,
            decode_errors: 0,
            lagged_frames: 0,
            last_error: None,
            seq: SeqTrack::default(),
            counts: Default::default(),
            rate: RateMeter::default(),
            wire: overview::WireLayout::default(),
            dirty: true,
        }
    }

    pub fn counts(&self, side: Side) -> &Counts {
        &self.counts[side as usize]
    }

    /// Gaps: the server's count when live, else the one computed from the frames.
    pub fn gaps(&self) -> u64 {
        self.status.as_ref().map_or(self.seq.gaps, |s| s.counters.gaps.max(self.seq.gaps))
    }

    pub fn restarts(&self) -> u64 {
        self.status.as_ref().map_or(self.seq.restarts, |s| s.counters.restarts.max(self.seq.restarts))
    }

    /// True when the two policies decided differently for some event kind on this source
    /// (for instance fatal under A, skipped under B).
    pub fn policies_disagree(&self, classes: &ClassTable) -> bool {
        let a = self.counts[0].rows(classes);
        let b = self.counts[1].rows(classes);
        a.keys().chain(b.keys()).any(|k| a.get(k).map(|r| r.0) != b.get(k).map(|r| r.0))
    }
}

/// Where the frames come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// Nothing yet.
    Empty,
    /// A server (`serve`, `demo` or `replay`).
    Server { mode: String, detail: String, version: String },
    /// A capture file opened in the page.
    Capture { name: String, truncated: Option<String> },
}

/// Frames of a source the server's queue for this page dropped, as a lag notice named them, and
/// the stream position of the frame after them.
#[derive(Clone, Debug)]
struct LagLoss {
    position: u64,
    source: u32,
    last_seq: u64,
    frames: u64,
}

/// Lag losses remembered for a re-classification; past it the oldest are forgotten (their gaps
/// then read as the indexer's loss again, after a re-classification only).
const LAG_LOSSES_KEPT: usize = 4096;

/// The dashboard's state.
#[derive(Debug)]
pub struct Model {
    config: Config,
    /// Set when a policy name was not known; the run falls back to the default.
    pub config_error: Option<String>,
    pub origin: Origin,
    /// Block size and policies the server suggested in its hello (for a capture: inferred).
    pub server_defaults: Option<proto::Defaults>,
    /// Where the defaults came from, when not from a server.
    pub defaults_note: Option<String>,
    sources: Vec<Source>,
    /// The server finds its fleet in a discovery store (its hello said so): sources, relays
    /// among them, arrive after the hello.
    discovers: bool,
    runs: [PolicyRun; 2],
    /// Each policy's tier trees, indexed by [`Side`].
    trees: [Trees; 2],
    /// The router's index under each policy, beside what the engines hold.
    index: index::RouterIndexes,
    classes: ClassTable,
    lanes: Vec<Lane>,
    frames: VecDeque<RetainedFrame>,
    events: chunked::Chunked<EventRecord>,
    media: MediumTable,
    /// (source, seq) -> the newest retained frame with them.
    frame_index: std::collections::HashMap<(u32, u64), u64>,
    /// Frames fetched from the server's history for the inspector, and the last request.
    fetched: VecDeque<RetainedFrame>,
    /// Where each record of the opened capture sits in its file, in file order: the inspector
    /// reads a frame's raw bytes again from there once this page dropped them (24 bytes a
    /// record, kept for the whole file: it is the only way back to those bytes).
    capture_spans: chunked::Chunked<CaptureSpan>,
    /// False once a record's receive time went back (the spans are then searched in order).
    capture_spans_sorted: bool,
    /// The page still holds the opened capture's `File`, so its records can be read again.
    pub capture_file_kept: bool,
    fetch: Option<(FrameKey, FetchState)>,
    first_event_id: u64,
    next_event_id: u64,
    next_frame_id: u64,
    /// Frames seen, this shard's and the others' ([`Model::position`]).
    next_position: u64,
    retained_bytes: usize,
    evicted_frames: u64,
    bound_reached: bool,
    t0_nanos: Option<u64>,
    last_nanos: u64,
    rate: RateMeter,
    /// Frames the server said this page lost (lag notices).
    pub lagged_frames: u64,
    /// What each lag notice said a source lost, where in the stream: a re-classification tells
    /// the rebuilt router index again ([`LagLoss`]).
    lag_losses: std::collections::VecDeque<LagLoss>,
    /// Frames seen but not in the counts: evicted by retention before a re-classification
    /// rebuilt the counts from the retained frames.
    pub uncounted_frames: u64,
    /// The history the server sent had evicted this many older frames.
    pub history_evicted_frames: u64,
    /// WebSocket messages the page's intake bound dropped unread (`model::intake`): their
    /// frames are missing from every count, and which sources they were for is not known.
    pub intake_dropped_messages: u64,
    pub history_complete: bool,
    /// The server's history about to arrive ([`proto::HistoryStart`]), and how much of it has.
    history_expected: Option<u64>,
    history_received: u64,
    /// The server's capture file, when it records.
    pub recording: Option<proto::RecordingStatus>,
    /// The server's discovery (`--discover`): its stores and what it found.
    pub discovery: Option<proto::DiscoveryStatus>,
    /// Messages that were not kvscope messages (wrong magic or version), with the last error.
    pub protocol_errors: u64,
    pub last_protocol_error: Option<String>,
    /// Something global (sources, policies, timeline) changed since the last flush.
    pub dirty: bool,
    /// Where the two policies decide an event differently: per (class under A, class under B),
    /// the events and the first one's id.
    differences: BTreeMap<(ClassCode, ClassCode), Difference>,
    /// Per policy, where the fleet's indexer stops ([`IndexerExit`]).
    exits: [Option<IndexerExit>; 2],
    /// The router's side, when some source is Dynamo's event plane.
    router: Option<router::RouterSide>,
    /// How far behind live the applied frames are.
    pub live: live::LiveLag,
    /// Unix ms minus the page's clock (`Date.now() - performance.now()`), set by the host; live
    /// lag is measured only with it.
    pub wall_offset_ms: Option<f64>,
}

impl Model {
    pub fn new(config: Config) -> Model {
        let (runs, config_error) = make_runs(&config);
        let policies = [runs[0].policy(), runs[1].policy()];
        let index = index::RouterIndexes::new(&[], policies, config.block_size, config.index_nodes, shard::index_sides(config.shard));
        let first_event_id = shard::first_event_id(config.shard);
        Model {
            index,
            trees: [Trees::new(config.retain_bytes / 4), Trees::new(config.retain_bytes / 4)],
            config,
            config_error,
            origin: Origin::Empty,
            server_defaults: None,
            defaults_note: None,
            sources: Vec::new(),
            discovers: false,
            runs,
            classes: ClassTable::default(),
            lanes: Vec::new(),
            frames: VecDeque::new(),
            events: chunked::Chunked::default(),
            media: MediumTable::default(),
            frame_index: std::collections::HashMap::new(),
            fetched: VecDeque::new(),
            capture_spans: chunked::Chunked::default(),
            capture_spans_sorted: true,
            capture_file_kept: false,
            fetch: None,
            first_event_id,
            next_event_id: first_event_id,
            next_frame_id: 0,
            next_position: 0,
            retained_bytes: 0,
            evicted_frames: 0,
            bound_reached: false,
            t0_nanos: None,
            last_nanos: 0,
            rate: RateMeter::default(),
            lagged_frames: 0,
            lag_losses: std::collections::VecDeque::new(),
            uncounted_frames: 0,
            history_evicted_frames: 0,
            intake_dropped_messages: 0,
            recording: None,
            discovery: None,
            history_complete: false,
            history_expected: None,
            history_received: 0,
            protocol_errors: 0,
            last_protocol_error: None,
            dirty: true,
            differences: BTreeMap::new(),
            exits: [None, None],
            router: None,
            live: live::LiveLag::default(),
            wall_offset_ms: None,
        }
    }

    /// The router's side (reconciliation with Dynamo's event plane), when there is one.
    pub fn router(&self) -> Option<&router::RouterSide> {
        self.router.as_ref()
    }

    /// The router's index under each policy (reports as of the last flush).
    pub fn index(&self) -> &index::RouterIndexes {
        &self.index
    }

    /// Rebuilds the index reports now (tests, and a summary that must be current).
    pub fn refresh_index(&mut self) {
        self.index.refresh_now();
    }

    /// The engine sources this shard reads (event-plane sources are the router's side, not
    /// workers).
    pub fn engine_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| s.own && s.kind == proto::SourceKind::Engine)
    }

    /// Every shard's engine sources: the hello names them all to each shard.
    pub fn fleet_engine_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| s.kind == proto::SourceKind::Engine)
    }

    /// The event-plane sources this shard shows.
    pub fn plane_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| s.own && s.kind == proto::SourceKind::EventPlane)
    }

    /// Frames seen so far, of every shard's sources: the next frame's place in the stream.
    pub fn position(&self) -> u64 {
        self.next_position
    }

    /// This engine's part of the fleet.
    pub fn shard(&self) -> shard::Shard {
        self.config.shard
    }

    /// Whether this shard models a policy's index of the router, of every engine source
    /// ([`shard::index_sides`]).
    pub fn models_index(&self) -> bool {
        self.index.models_any()
    }

    /// True when `source` is another shard's engine source: its frames are counted past.
    fn foreign_engine(&self, source: u32) -> bool {
        self.source(source).is_some_and(|s| !s.own && s.kind == proto::SourceKind::Engine)
    }

    /// When the fleet's indexer exits under `side`, in the timeline's milliseconds.
    pub fn exit_time_ms(&self, side: Side) -> Option<f64> {
        let e = self.indexer_exit(side)?;
        Some(e.recv_time_nanos.saturating_sub(self.t0_nanos?) as f64 / 1e6)
    }

    /// Where one indexer consuming the whole fleet stops under `side`'s policy, if it does.
    pub fn indexer_exit(&self, side: Side) -> Option<&IndexerExit> {
        self.exits[side as usize].as_ref()
    }

    /// Takes the fleet's exit under `side` when another shard's comes first: this shard's
    /// events after it are then after the exit too (never indexed, and its fatal ones each a
    /// crashloop), counted again from the retained frames (those evicted stay uncounted, as
    /// the data-quality strip already says).
    pub fn adopt_exit(&mut self, side: Side, exit: &IndexerExit) {
        let s = side as usize;
        let own = self.exits[s].as_ref().map(|e| (e.position, e.event_id));
        if own.is_some_and(|(position, _)| position <= exit.position) {
            return;
        }
        let Model { frames, sources, events, classes, first_event_id, .. } = self;
        for frame in frames.iter().rev().take_while(|f| f.position > exit.position) {
            let Some(src) = sources.get_mut(frame.source as usize) else { continue };
            let ids = frame.first_event..frame.first_event + u64::from(frame.num_events);
            for id in ids {
                // Already after this shard's own exit.
                if own.is_some_and(|(position, first)| frame.position > position || (frame.position == position && id > first)) {
                    continue;
                }
                let record = id.checked_sub(*first_event_id).and_then(|i| events.get(i as usize));
                let fatal = record.and_then(|r| classes.get(r.class[s])).is_some_and(|c| c.kind == Outcome::Fatal);
                let counts = &mut src.counts[s];
                counts.after_exit += 1;
                counts.fatal_after_exit += u64::from(fatal);
                src.dirty = true;
            }
        }
        self.exits[s] = Some(exit.clone());
        self.dirty = true;
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Tells the router index what kvscope lost before this page read it: what those frames hid
    /// is kvscope's blind spot, not the indexer's lost frames.
    fn note_lag_loss(&mut self, loss: &LagLoss) {
        self.index.note_unseen(loss.source, loss.last_seq, loss.frames);
    }

    pub fn policy_name(&self, side: Side) -> &str {
        self.runs[side as usize].name()
    }

    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    pub fn source(&self, index: u32) -> Option<&Source> {
        self.sources.get(index as usize)
    }

    pub fn source_by_key(&self, key: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.key == key)
    }

    pub fn classes(&self) -> &ClassTable {
        &self.classes
    }

    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The trees of the side chosen for them (`?trees=`, B by default).
    pub fn trees(&self) -> &Trees {
        &self.trees[self.config.trees as usize]
    }

    /// One policy's trees.
    pub fn trees_of(&self, side: Side) -> &Trees {
        &self.trees[side as usize]
    }

    /// Time span of the timeline (retained marks, and the buckets of evicted ones), in ms since
    /// the first frame.
    pub fn time_span_ms(&self) -> (f64, f64) {
        timeline_span(self.marked_span_ms())
    }

    /// The first and last mark's times (retained, or in the buckets of evicted ones), in ms
    /// since the first frame; `None` before any. Shards' spans merge by min and max.
    pub fn marked_span_ms(&self) -> Option<(f64, f64)> {
        let start = self.lanes.iter().filter_map(Lane::first_time_ms).fold(f64::INFINITY, f64::min);
        let end = self.lanes.iter().filter_map(|l| l.time_ms.last().copied()).fold(0.0, f64::max);
        start.is_finite().then_some((start, end))
    }

    /// Unix time in nanoseconds of the timeline's origin.
    pub fn t0_nanos(&self) -> Option<u64> {
        self.t0_nanos
    }

    pub fn events_per_second(&self, now_ms: f64) -> f64 {
        self.rate.per_second(now_ms)
    }

    /// The policy the relays are predicted under (the page's setting, or Dynamo 1.6.1's when
    /// that does not parse, said once in the fleet bar).
    fn relay_policy(&mut self) -> kvscope_normalize::Policy {
        match self.config.relay_policy.parse::<kvscope_normalize::Policy>() {
            Ok(p) => p,
            Err(e) => {
                let fallback = kvscope_router::RelayConfig::DEFAULT_POLICY;
                self.config_error.get_or_insert(format!("relay policy: {e}; predicting {}", fallback.name));
                fallback
            }
        }
    }

    /// Resets everything and sets the sources (a server hello, or a capture header).
    fn reset_with_sources(&mut self, sources: &[proto::SourceInfo]) {
        let config = self.config.clone();
        let keep_errors = (self.protocol_errors, self.last_protocol_error.take());
        let defaults = (self.server_defaults.take(), self.defaults_note.take());
        let (wall_offset_ms, discovers) = (self.wall_offset_ms, self.discovers);
        *self = Model::new(config);
        (self.wall_offset_ms, self.discovers) = (wall_offset_ms, discovers);
        (self.protocol_errors, self.last_protocol_error) = keep_errors;
        (self.server_defaults, self.defaults_note) = defaults;
        for info in sources {
            self.ensure_source(info.index);
            self.sources[info.index as usize] = Source::new(info, self.config.shard);
        }
        let relay_policy = self.relay_policy();
        let (block_size, shard) = (self.config.block_size, self.config.shard);
        self.router = match self.discovers {
            true => Some(router::RouterSide::with_sources(sources, relay_policy, block_size, shard)),
            false => router::RouterSide::for_sources(sources, relay_policy, block_size, shard),
        };
        let policies = [self.runs[0].policy(), self.runs[1].policy()];
        self.index = index::RouterIndexes::new(
            sources,
            policies,
            self.config.block_size,
            self.config.index_nodes,
            shard::index_sides(self.config.shard),
        );
    }

    /// A source the server found after its hello (`--discover`), or one that now reads
    /// elsewhere: a new index joins every view and the router's side; a known one keeps what it
    /// holds and takes the new address.
    fn apply_source_changed(&mut self, info: &proto::SourceInfo) {
        let known = self.sources.get(info.index as usize).is_some_and(|s| s.key == info.key && s.kind == info.kind);
        self.ensure_source(info.index);
        let src = &mut self.sources[info.index as usize];
        if known {
            src.endpoint = info.endpoint.clone();
            src.event_plane = info.event_plane.clone();
        } else {
            let status = src.status.take();
            *src = Source::new(info, self.config.shard);
            src.status = status;
            self.index.add_source(info);
            match self.router.as_mut() {
                Some(router) => router.add_source(info, self.config.block_size),
                None if info.kind == proto::SourceKind::EventPlane => {
                    let policy = self.relay_policy();
                    let infos: Vec<proto::SourceInfo> = self.sources.iter().map(Source::info).collect();
                    self.router = Some(router::RouterSide::with_sources(&infos, policy, self.config.block_size, self.config.shard));
                }
                None => {}
            }
        }
        self.sources[info.index as usize].dirty = true;
        self.dirty = true;
    }

    fn ensure_source(&mut self, index: u32) {
        while self.sources.len() <= index as usize {
            let i = self.sources.len() as u32;
            self.sources.push(Source::new(
                &proto::SourceInfo {
                    index: i,
                    key: format!("source {i}"),
                    kind: proto::SourceKind::Engine,
                    event_plane: None,
                    block_size: None,
                    worker_id: i.to_string(),
                    dp_rank: 0,
                    endpoint: String::new(),
                    replay_endpoint: None,
                },
                self.config.shard,
            ));
            self.lanes.push(Lane::default());
            self.dirty = true;
        }
        while self.lanes.len() < self.sources.len() {
            self.lanes.push(Lane::default());
        }
    }

    /// Applies one WebSocket message as received (magic, version, msgpack body). Returns true
    /// for a hello (the caller then re-configures with the server's defaults).
    pub fn apply_message_bytes(&mut self, bytes: &[u8], now_ms: f64) -> bool {
        match proto::decode(bytes) {
            Ok(message) => {
                let hello = matches!(message, proto::Message::Hello(_));
                self.apply_message(message, now_ms);
                hello
            }
            Err(e) => {
                self.note_protocol_error(&e);
                false
            }
        }
    }

    /// Counts bytes from the server that were not a message of this build, and keeps the last
    /// error's words for the fleet bar.
    pub fn note_protocol_error(&mut self, e: &proto::ProtocolError) {
        self.protocol_errors += 1;
        self.last_protocol_error = Some(e.to_string());
        self.dirty = true;
    }

    /// The server's announced history is still arriving.
    fn in_history(&self) -> bool {
        self.history_expected.is_some() && !self.history_complete
    }

    fn count_history(&mut self) {
        if self.in_history() {
            self.history_received += 1;
        }
    }

    /// While the server's history is arriving: `(frames received, frames it said it sends)`, for
    /// "catching up: 12,000 of 40,000 frames".
    pub fn catching_up(&self) -> Option<(u64, u64)> {
        let total = self.history_expected.filter(|_| !self.history_complete)?;
        Some((self.history_received.min(total), total))
    }

    /// Applies one protocol message.
    pub fn apply_message(&mut self, message: proto::Message, now_ms: f64) {
        match message {
            proto::Message::Hello(hello) => self.apply_hello(&hello),
            proto::Message::Frame(f) => {
                self.count_history();
                if let Some(offset) = self.wall_offset_ms.filter(|_| !self.in_history()) {
                    self.live.frame(f.recv_time_nanos, now_ms + offset, now_ms);
                }
                self.apply_frame(f.source, f.seq, f.recv_time_nanos, f.replayed, f.topic, f.payload, now_ms)
            }
            proto::Message::FrameError(e) => {
                self.count_history();
                self.apply_frame_error(e)
            }
            proto::Message::HistoryStart(h) => {
                self.history_expected = Some(h.frames);
                self.history_received = 0;
                self.dirty = true;
            }
            proto::Message::SourceStatus(s) => {
                self.ensure_source(s.source);
                let src = &mut self.sources[s.source as usize];
                src.status = Some(s);
                src.dirty = true;
                self.dirty = true;
            }
            proto::Message::LagNotice(n) => {
                self.lagged_frames += n.frames_lost;
                for loss in &n.sources {
                    self.ensure_source(loss.source);
                    let src = &mut self.sources[loss.source as usize];
                    src.lagged_frames += loss.frames;
                    src.dirty = true;
                    let loss = LagLoss { position: self.next_position, source: loss.source, last_seq: loss.last_seq, frames: loss.frames };
                    self.note_lag_loss(&loss);
                    if self.lag_losses.len() == LAG_LOSSES_KEPT {
                        self.lag_losses.pop_front();
                    }
                    self.lag_losses.push_back(loss);
                }
                self.dirty = true;
            }
            proto::Message::HistoryComplete(h) => {
                self.history_complete = true;
                self.history_evicted_frames = h.evicted_frames;
                self.dirty = true;
            }
            proto::Message::RecordingStatus(r) => {
                self.recording = Some(r);
                self.dirty = true;
            }
            proto::Message::SourceChanged(info) => self.apply_source_changed(&info),
            proto::Message::DiscoveryStatus(d) => {
                self.discovery = Some(d);
                self.dirty = true;
            }
            // The page splits batches before they get here (`Fleet::ingest`, so that a hello
            // inside one re-configures before the frames after it); this is for other callers.
            proto::Message::Batch(batch) => {
                for (index, bytes) in batch.messages.iter().enumerate() {
                    match proto::decode(bytes) {
                        Ok(proto::Message::Batch(_)) => self.note_protocol_error(&proto::ProtocolError::NestedBatch { index }),
                        Ok(message) => self.apply_message(message, now_ms),
                        Err(e) => self.note_protocol_error(&e),
                    }
                }
            }
        }
    }

    /// A hello starts a fresh view: the server resends its history after it, so counting on
    /// from the old state would count every retained frame twice. (The rejected alternative,
    /// de-duplicating by (source, seq), breaks when the engine restarted and seq began again at
    /// 0 while the page was away.) The block size follows the server's default unless the page
    /// set its own.
    pub fn apply_hello(&mut self, hello: &proto::Hello) {
        self.discovers = !hello.discovery.is_empty();
        self.reset_with_sources(&hello.sources);
        self.server_defaults = Some(hello.defaults.clone());
        self.defaults_note = None;
        self.origin = Origin::Server {
            mode: format!("{:?}", hello.mode).to_lowercase(),
            detail: hello.mode_detail.clone(),
            version: hello.server_version.clone(),
        };
    }

    /// Starts a capture: like a hello, from the capture's header.
    pub fn begin_capture(&mut self, name: &str, header: &proto::capture::CaptureHeader) {
        self.discovers = false;
        self.reset_with_sources(&header.sources);
        self.origin = Origin::Capture { name: name.to_owned(), truncated: None };
    }

    /// Applies one record of a capture opened from a file, noting where it sits in the file
    /// (`offset` and `len` as the reader reported them) so its bytes can be read again later.
    pub fn apply_capture_record(&mut self, record: proto::capture::CaptureRecord, offset: u64, len: u32, now_ms: f64) {
        if self.capture_spans.last().is_some_and(|last| last.recv_time_nanos > record.recv_time_nanos) {
            self.capture_spans_sorted = false;
        }
        self.capture_spans.push(CaptureSpan { recv_time_nanos: record.recv_time_nanos, offset, len, source: record.source });
        self.apply_record(record, now_ms);
    }

    /// Applies one capture record (raw ZMQ frames).
    pub fn apply_record(&mut self, record: proto::capture::CaptureRecord, now_ms: f64) {
        // A read of a router index (a capture's `--router-index` records) is for `check`; the
        // page shows the streams.
        if self.source(record.source).is_some_and(|s| s.kind == proto::SourceKind::RouterIndex) {
            return;
        }
        // A discovering recorder's events: the sources it found join at the indexes their
        // records use, and a source that left says so.
        if self.source(record.source).is_some_and(|s| s.kind == proto::SourceKind::Discovery) {
            return self.apply_discovery_record(&record);
        }
        // Another shard's frame is only counted past, unless this shard models an index.
        if self.foreign_engine(record.source) && !self.models_index() {
            let payload_len = record.frames.get(2).map(|p| p.len());
            return self.count_foreign(record.recv_time_nanos, payload_len);
        }
        let mut frames: Vec<Vec<u8>> = record.frames.into_iter().map(|b| b.into_vec()).collect();
        if self.source(record.source).is_some_and(|s| s.kind == proto::SourceKind::EventPlane) {
            return self.apply_plane_frames(record.source, record.recv_time_nanos, frames);
        }
        match kvscope_wire::frame::parse_live(&frames) {
            Ok(msg) => {
                let (topic, seq) = (msg.topic.to_vec(), msg.seq);
                // A live message is exactly [topic, seq, payload]: the payload frame itself moves
                // on, not a copy of it (a capture's bytes are mostly payloads).
                let payload = frames.pop().unwrap_or_default();
                self.apply_frame(record.source, seq, record.recv_time_nanos, record.replayed, topic, payload, now_ms)
            }
            Err(e) => self.apply_malformed(record.source, record.recv_time_nanos, record.replayed, frames, e.to_string()),
        }
    }

    fn apply_discovery_record(&mut self, record: &proto::capture::CaptureRecord) {
        match proto::capture::DiscoveryEvent::parse(&record.frames) {
            Ok(proto::capture::DiscoveryEvent::Source(info)) => self.apply_source_changed(&info),
            Ok(proto::capture::DiscoveryEvent::Left { source }) => {
                self.ensure_source(source);
                let src = &mut self.sources[source as usize];
                let mut status = src.status.clone().unwrap_or_else(|| proto::SourceStatus {
                    source,
                    state: proto::ConnState::Live,
                    error: None,
                    since_unix_nanos: 0,
                    last_seq: None,
                    last_recv_unix_nanos: None,
                    counters: proto::SourceCounters::default(),
                    gaps: Vec::new(),
                });
                (status.state, status.since_unix_nanos) = (proto::ConnState::Left, record.recv_time_nanos);
                src.status = Some(status);
                src.dirty = true;
                self.dirty = true;
            }
            Err(e) => {
                let frames = record.frames.iter().map(|b| b.to_vec()).collect();
                self.apply_malformed(record.source, record.recv_time_nanos, record.replayed, frames, e);
            }
        }
    }

    fn apply_frame_error(&mut self, e: proto::FrameError) {
        if e.kind == "decode" {
            // The payload comes as a Frame too and is decoded (and counted) here.
            return;
        }
        let frames = e.frames.into_iter().map(|b| b.into_vec()).collect();
        self.apply_malformed(e.source, e.recv_time_nanos, e.replayed, frames, e.text);
    }

    /// Another shard's frame: only its place in the stream is kept (and the timeline's origin,
    /// when it is the first frame that decodes there: `payload_len` is its payload's, `None`
    /// for a frame that is not one).
    fn count_foreign(&mut self, recv_time_nanos: u64, payload_len: Option<usize>) {
        self.next_position += 1;
        if payload_len.is_some_and(|n| n <= self.config.max_frame_bytes) {
            self.t0_nanos.get_or_insert(recv_time_nanos);
        }
    }

    /// Another shard's engine frame. A shard that models an index of the router indexes it
    /// (one indexer holds the whole fleet: see [`shard::index_sides`]) and keeps its bytes,
    /// under the retention bound, for a re-classification; any other only counts it past.
    fn index_foreign(&mut self, source: u32, seq: u64, recv_time_nanos: u64, replayed: bool, payload: Vec<u8>) {
        // A payload past the bound is refused before decoding by the source's own shard, and so
        // by the index too.
        if !self.models_index() || payload.len() > self.config.max_frame_bytes {
            return self.count_foreign(recv_time_nanos, Some(payload.len()));
        }
        self.t0_nanos.get_or_insert(recv_time_nanos);
        let decoded = kvscope_wire::Decoded::with_token_bytes(&payload);
        self.index.push(source, seq, &payload, &decoded, &mut kvscope_router::TokensHashes::default(), replayed);
        let frame = self.new_frame(source, seq, recv_time_nanos, replayed, FrameBody::IndexOnly { payload });
        self.retain(frame);
    }

    fn apply_malformed(&mut self, source: u32, recv_time_nanos: u64, replayed: bool, frames: Vec<Vec<u8>>, error: String) {
        if self.foreign_engine(source) {
            return self.count_foreign(recv_time_nanos, None);
        }
        self.ensure_source(source);
        let src = &mut self.sources[source as usize];
        src.frame_errors += 1;
        src.last_error = Some(error.clone());
        src.dirty = true;
        let frame = self.new_frame(source, 0, recv_time_nanos, replayed, FrameBody::Malformed { frames, error });
        self.retain(frame);
    }

    /// Decodes and classifies one frame.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_frame(
        &mut self,
        source: u32,
        seq: u64,
        recv_time_nanos: u64,
        replayed: bool,
        topic: Vec<u8>,
        payload: Vec<u8>,
        now_ms: f64,
    ) {
        if self.foreign_engine(source) {
            return self.index_foreign(source, seq, recv_time_nanos, replayed, payload);
        }
        self.ensure_source(source);
        if self.sources[source as usize].kind == proto::SourceKind::EventPlane {
            return self.apply_plane_frames(source, recv_time_nanos, vec![topic, payload]);
        }
        if payload.len() > self.config.max_frame_bytes {
            // Refused before decoding (the server does the same with --max-frame-bytes); only
            // the frame's topic and seq are kept, not its bytes.
            let key = &self.sources[source as usize].key;
            let text = format!(
                "{key} seq {seq}: payload of {} bytes is larger than this page's bound of {} bytes ({}); \
                 refused before decoding (raise it with ?maxframe=MiB)",
                payload.len(),
                self.config.max_frame_bytes,
                proto::FRAME_TOO_LARGE
            );
            self.sources[source as usize].seq.see(seq, replayed);
            self.apply_malformed(source, recv_time_nanos, replayed, vec![topic, seq.to_be_bytes().to_vec()], text);
            self.dirty = true;
            return;
        }
        let mut frame = self.new_frame(source, seq, recv_time_nanos, replayed, FrameBody::Message { topic, payload });
        {
            let src = &mut self.sources[source as usize];
            src.frames += 1;
            src.payload_bytes += frame.payload().map_or(0, |p| p.len() as u64);
            src.seq.see(seq, replayed);
            src.dirty = true;
        }
        // One decode for the classification, the index and the relay's prediction, and one
        // tokens hash per stored block for the index's relays and the reconciler's, whose token
        // ids the decode writes out as it counts them when something will hash them.
        let hashes_tokens = self.models_index() || self.router.is_some();
        let decoded = frame.payload().map(|p| match hashes_tokens {
            true => kvscope_wire::Decoded::with_token_bytes(p),
            false => kvscope_wire::Decoded::new(p),
        });
        let n = decoded.as_ref().map_or(0, |d| self.classify_frame(&mut frame, d));
        if let (Some(payload), Some(decoded)) = (frame.payload(), &decoded) {
            let mut hashes = kvscope_router::TokensHashes::default();
            self.index.push(source, seq, payload, decoded, &mut hashes, replayed);
            if let Some(router) = &mut self.router {
                let t0 = self.t0_nanos.unwrap_or(recv_time_nanos);
                let time_ms = recv_time_nanos.saturating_sub(t0) as f64 / 1e6;
                router.push_engine(source, seq, payload, (decoded, &mut hashes), time_ms, frame.first_event);
            }
        }
        self.rate.add(now_ms, n as u64);
        self.sources[source as usize].rate.add(now_ms, n as u64);
        self.retain(frame);
        self.dirty = true;
    }

    /// One event-plane message (`[subject, envelope]` live, or the frames as recorded): counted
    /// on its source, retained (so a re-classification reconciles it again) and handed to the
    /// router's side.
    pub(super) fn apply_plane_frames(&mut self, source: u32, recv_time_nanos: u64, frames: Vec<Vec<u8>>) {
        let src = &mut self.sources[source as usize];
        src.frames += 1;
        src.payload_bytes += frames.iter().map(|f| f.len() as u64).sum::<u64>();
        src.dirty = true;
        if let Some(router) = &mut self.router {
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            router.push_plane(&refs);
            if let Some(e) = &router.last_plane_error {
                src.last_error = Some(e.clone());
            }
        }
        let frame = self.new_frame(source, 0, recv_time_nanos, false, FrameBody::Plane { frames });
        self.retain(frame);
        self.dirty = true;
    }

    /// A frame as it arrives, with the next frame id; its events are numbered from the next
    /// event id once classified.
    fn new_frame(&mut self, source: u32, seq: u64, recv_time_nanos: u64, replayed: bool, body: FrameBody) -> RetainedFrame {
        let id = self.next_frame_id;
        self.next_frame_id += 1;
        let position = self.next_position;
        self.next_position += 1;
        RetainedFrame {
            id,
            position,
            source,
            seq,
            recv_time_nanos,
            replayed,
            body,
            first_event: self.next_event_id,
            num_events: 0,
            decode_error: None,
        }
    }

    /// Ids of sources whose cards changed since the last call; clears the flags.
    pub fn take_dirty(&mut self) -> (bool, Vec<u32>) {
        if let Some(r) = &mut self.router {
            r.refresh();
        }
        let index_behind = self.index.refresh();
        let global = std::mem::take(&mut self.dirty) || index_behind;
        let changed = self.sources.iter_mut().filter_map(|s| std::mem::take(&mut s.dirty).then_some(s.index)).collect();
        (global, changed)
    }
}

/// The stretch the marks of several shards cover together ([`Model::marked_span_ms`] each).
pub fn marked_union(spans: impl IntoIterator<Item = (f64, f64)>) -> Option<(f64, f64)> {
    spans.into_iter().reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
}

/// The timeline's span from its marks' ([`Model::marked_span_ms`]): at least a millisecond
/// wide, and the first second before any mark.
pub fn timeline_span(marked: Option<(f64, f64)>) -> (f64, f64) {
    match marked {
        Some((start, end)) => (start, end.max(start + 1.0)),
        None => (0.0, 1_000.0),
    }
}

#[cfg(test)]
pub(crate) mod shard_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod truth_tests;
