//! The dashboard's state, in plain Rust: everything the views show, none of how.
//!
//! [`Model`] applies protocol messages (a hello, frames, frame errors, source status, lag
//! notices) and capture records. For each frame it decodes the payload with `kvscope-wire`,
//! classifies every event under policy A and policy B (one normalizer each, [`policy_run`]),
//! feeds the tier trees of one of them ([`trees`]), counts verdicts per source, appends a mark to
//! the source's timeline lane and keeps the indexer log lines. Retained frames are bounded in
//! bytes ([`Model::retain_bytes`]); past the bound the oldest are evicted and
//! [`Model::bound_reached`] says so.
//!
//! It is tested natively (`cargo test -p kvscope-web`). The views read it through
//! `contexts::Fleet`; the only things that notify them are generation counters the Fleet bumps
//! after the model marked a source dirty (a signal never holds a frame).

pub mod classes;
pub mod policy_run;
pub mod rate;
pub mod settings;
pub mod timeline;
pub mod trees;

use std::collections::{BTreeMap, VecDeque};

use kvscope_protocol as proto;
use kvscope_normalize::{Outcome, Policy, StorageTier};
use kvscope_wire::KvEvent;

use classes::{ClassCode, ClassTable, Reason, TierShown};
use policy_run::{BothPolicies, Classified, PolicyRun};
use rate::RateMeter;
use settings::{EventRef, Side};
use timeline::Lane;
use trees::Trees;

/// Bytes a retained event costs besides its frame (index entry and timeline mark).
const EVENT_OVERHEAD_BYTES: usize = 48;
/// Bytes a retained frame costs besides its payload and topic.
const FRAME_OVERHEAD_BYTES: usize = 96;

/// The settings the classification depends on; changing any re-classifies retained history.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub policy_a: String,
    pub policy_b: String,
    pub block_size: u32,
    /// Whose verdicts build the tier trees.
    pub trees: Side,
    /// Bound on retained frames and events, in bytes.
    pub retain_bytes: usize,
    /// Larger payloads are refused before decoding, as a frame error.
    pub max_frame_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy_a: settings::DEFAULT_POLICY_A.to_owned(),
            policy_b: settings::DEFAULT_POLICY_B.to_owned(),
            block_size: 16,
            trees: Side::B,
            retain_bytes: settings::DEFAULT_RETAIN_MIB as usize * 1024 * 1024,
            max_frame_bytes: settings::DEFAULT_MAX_FRAME_MIB as usize * 1024 * 1024,
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
        self.by_class
            .iter()
            .filter(|(code, _)| classes.get(**code).is_some_and(|c| c.kind == kind))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Sequence-number bookkeeping of one source, computed from the frames themselves so that a
/// capture opened without a server shows gaps and restarts too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqTrack {
    pub last_seq: Option<u64>,
    pub gaps: u64,
    pub missing_frames: u64,
    pub restarts: u64,
}

impl SeqTrack {
    fn see(&mut self, seq: u64, replayed: bool) {
        if replayed {
            // Replayed frames fill a gap that was already counted.
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
    pub worker_id: String,
    pub dp_rank: u32,
    pub endpoint: String,
    /// The server's latest status for it (live only).
    pub status: Option<proto::SourceStatus>,
    pub frames: u64,
    pub payload_bytes: u64,
    pub frame_errors: u64,
    pub decode_errors: u64,
    /// The latest decode or frame error, in words.
    pub last_error: Option<String>,
    pub seq: SeqTrack,
    pub counts: [Counts; 2],
    /// Set when something shown on its card changed since the last flush.
    pub dirty: bool,
}

impl Source {
    fn new(info: &proto::SourceInfo) -> Source {
        Source {
            index: info.index,
            key: info.key.clone(),
            worker_id: info.worker_id.clone(),
            dp_rank: info.dp_rank,
            endpoint: info.endpoint.clone(),
            status: None,
            frames: 0,
            payload_bytes: 0,
            frame_errors: 0,
            decode_errors: 0,
            last_error: None,
            seq: SeqTrack::default(),
            counts: Default::default(),
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

/// What a retained frame holds.
#[derive(Clone, Debug)]
pub enum FrameBody {
    /// A well-formed `[topic, seq, payload]` message.
    Message { topic: Vec<u8>, payload: Vec<u8> },
    /// A message that was not shaped like an engine's; its frames as received.
    Malformed { frames: Vec<Vec<u8>>, error: String },
}

/// A frame kept for the inspector, for re-classification and for download.
#[derive(Clone, Debug)]
pub struct RetainedFrame {
    pub id: u64,
    pub source: u32,
    pub seq: u64,
    pub recv_time_nanos: u64,
    pub replayed: bool,
    pub body: FrameBody,
    /// Id of its first event; its events are `first_event..first_event + num_events`.
    pub first_event: u64,
    pub num_events: u32,
    /// The decode error, when the payload did not decode.
    pub decode_error: Option<String>,
}

impl RetainedFrame {
    fn cost_bytes(&self) -> usize {
        let body = match &self.body {
            FrameBody::Message { topic, payload } => topic.len() + payload.len(),
            FrameBody::Malformed { frames, error } => frames.iter().map(Vec::len).sum::<usize>() + error.len(),
        };
        FRAME_OVERHEAD_BYTES + body + self.num_events as usize * EVENT_OVERHEAD_BYTES
    }

    pub fn payload(&self) -> Option<&[u8]> {
        match &self.body {
            FrameBody::Message { payload, .. } => Some(payload),
            FrameBody::Malformed { .. } => None,
        }
    }
}

/// Where an event id points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLoc {
    pub frame: u64,
    pub index: u32,
    pub source: u32,
    pub class: [ClassCode; 2],
}

/// One indexer log line.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    pub source: u32,
    /// `u64::MAX` for the "counted, not logged" summary lines.
    pub seq: u64,
    pub event_index: u32,
    /// `WARN w0:0 seq 8 event 4: ...`.
    pub text: String,
    /// The line of the first fatal verdict: a real indexer exits after printing it.
    pub fatal: bool,
    /// A line after that fatal one, which a real indexer would never have printed.
    pub after_exit: bool,
}

/// An event opened in the inspector.
#[derive(Clone, Debug)]
pub struct EventDetail {
    pub id: u64,
    pub source_key: String,
    pub seq: u64,
    pub index: u32,
    pub recv_time_nanos: u64,
    pub replayed: bool,
    pub topic: Vec<u8>,
    pub payload: Vec<u8>,
    pub event: Option<KvEvent>,
    pub batch_ts: Option<f64>,
    pub batch_dp_rank: Option<u32>,
    /// Per policy: policy name, class, and the rule sentence.
    pub verdicts: [(String, Option<classes::Class>, String); 2],
}

/// Memory and bound figures for the fleet bar.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryUse {
    pub retained_bytes: usize,
    pub bound_bytes: usize,
    pub retained_frames: usize,
    pub retained_events: usize,
    pub evicted_frames: u64,
    pub bound_reached: bool,
    pub tree_blocks: u64,
    pub tree_bytes: usize,
    pub tree_bound_reached: bool,
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
    runs: [PolicyRun; 2],
    trees: Trees,
    classes: ClassTable,
    lanes: Vec<Lane>,
    frames: VecDeque<RetainedFrame>,
    events: VecDeque<EventLoc>,
    first_event_id: u64,
    next_event_id: u64,
    next_frame_id: u64,
    retained_bytes: usize,
    evicted_frames: u64,
    bound_reached: bool,
    t0_nanos: Option<u64>,
    last_nanos: u64,
    rate: RateMeter,
    /// Frames the server said this page lost (lag notices).
    pub lagged_frames: u64,
    /// The history the server sent had evicted this many older frames.
    pub history_evicted_frames: u64,
    pub history_complete: bool,
    /// The server's capture file, when it records.
    pub recording: Option<proto::RecordingStatus>,
    /// Messages that were not kvscope messages (wrong magic or version), with the last error.
    pub protocol_errors: u64,
    pub last_protocol_error: Option<String>,
    /// Something global (sources, policies, timeline) changed since the last flush.
    pub dirty: bool,
    /// Events per (class under A, class under B) where the two differ, over every event seen.
    differences: BTreeMap<(ClassCode, ClassCode), u64>,
}

impl Model {
    pub fn new(config: Config) -> Model {
        let (runs, config_error) = make_runs(&config);
        Model {
            trees: Trees::new(config.retain_bytes / 2),
            config,
            config_error,
            origin: Origin::Empty,
            server_defaults: None,
            defaults_note: None,
            sources: Vec::new(),
            runs,
            classes: ClassTable::default(),
            lanes: Vec::new(),
            frames: VecDeque::new(),
            events: VecDeque::new(),
            first_event_id: 0,
            next_event_id: 0,
            next_frame_id: 0,
            retained_bytes: 0,
            evicted_frames: 0,
            bound_reached: false,
            t0_nanos: None,
            last_nanos: 0,
            rate: RateMeter::default(),
            lagged_frames: 0,
            history_evicted_frames: 0,
            recording: None,
            history_complete: false,
            protocol_errors: 0,
            last_protocol_error: None,
            dirty: true,
            differences: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
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

    pub fn trees(&self) -> &Trees {
        &self.trees
    }

    /// Where the policies decided differently: (class under A, class under B, events), most
    /// events first.
    pub fn differences(&self) -> Vec<(Option<&classes::Class>, Option<&classes::Class>, u64)> {
        let mut v: Vec<_> =
            self.differences.iter().map(|((a, b), n)| (self.classes.get(*a), self.classes.get(*b), *n)).collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.2));
        v
    }

    /// Time span of the retained marks, in ms since the first frame.
    pub fn time_span_ms(&self) -> (f64, f64) {
        let start = self.lanes.iter().filter_map(|l| l.time_ms.first().copied()).fold(f64::INFINITY, f64::min);
        let end = self.lanes.iter().filter_map(|l| l.time_ms.last().copied()).fold(0.0, f64::max);
        if start.is_finite() { (start, end.max(start + 1.0)) } else { (0.0, 1_000.0) }
    }

    /// Unix time in nanoseconds of the timeline's origin.
    pub fn t0_nanos(&self) -> Option<u64> {
        self.t0_nanos
    }

    pub fn events_per_second(&self, now_ms: f64) -> f64 {
        self.rate.per_second(now_ms)
    }

    pub fn memory(&self) -> MemoryUse {
        MemoryUse {
            retained_bytes: self.retained_bytes,
            bound_bytes: self.config.retain_bytes,
            retained_frames: self.frames.len(),
            retained_events: self.events.len(),
            evicted_frames: self.evicted_frames,
            bound_reached: self.bound_reached,
            tree_blocks: self.trees.total_blocks(),
            tree_bytes: self.trees.approx_bytes(),
            tree_bound_reached: self.trees.bound_reached(),
        }
    }

    pub fn bound_reached(&self) -> bool {
        self.bound_reached
    }

    /// The lines an indexer following `side`'s policy would print, per source in source order,
    /// each source's lines in (seq, event) order, with the warnings each budget counted
    /// silently after its limit.
    pub fn log(&self, side: Side) -> Vec<LogLine> {
        let run = &self.runs[side as usize];
        let mut out = Vec::new();
        for src in &self.sources {
            let Some(id) = run.source_id(src.index) else { continue };
            let counters = run.normalizer().counters(id);
            let fatal_seq = counters.first_fatal.as_ref().map(|l| (l.seq, l.event_index));
            for line in counters.log() {
                let after_exit = fatal_seq.is_some_and(|f| (line.seq, line.event_index) > f);
                out.push(LogLine {
                    source: src.index,
                    seq: line.seq,
                    event_index: line.event_index,
                    text: line.to_string(),
                    fatal: counters.first_fatal.as_ref() == Some(line),
                    after_exit,
                });
            }
            for (budget, name) in [(&counters.conversion, "conversion"), (&counters.offload, "offload")] {
                if budget.suppressed > 0 {
                    out.push(LogLine {
                        source: src.index,
                        seq: u64::MAX,
                        event_index: 0,
                        text: format!(
                            "({} more {name} warnings on {} counted, not logged: the budget of {} is spent)",
                            budget.suppressed, src.key, budget.limit
                        ),
                        fatal: false,
                        after_exit: false,
                    });
                }
            }
        }
        out
    }

    pub fn retained_frames(&self) -> impl Iterator<Item = &RetainedFrame> {
        self.frames.iter()
    }

    /// Total events retained.
    pub fn retained_events(&self) -> usize {
        self.events.len()
    }

    /// Resets everything and sets the sources (a server hello, or a capture header).
    fn reset_with_sources(&mut self, sources: &[proto::SourceInfo]) {
        let config = self.config.clone();
        let keep_errors = (self.protocol_errors, self.last_protocol_error.take());
        let defaults = (self.server_defaults.take(), self.defaults_note.take());
        *self = Model::new(config);
        (self.protocol_errors, self.last_protocol_error) = keep_errors;
        (self.server_defaults, self.defaults_note) = defaults;
        for info in sources {
            self.ensure_source(info.index);
            self.sources[info.index as usize] = Source::new(info);
        }
    }

    fn ensure_source(&mut self, index: u32) {
        while self.sources.len() <= index as usize {
            let i = self.sources.len() as u32;
            self.sources.push(Source::new(&proto::SourceInfo {
                index: i,
                key: format!("source {i}"),
                worker_id: i.to_string(),
                dp_rank: 0,
                endpoint: String::new(),
                replay_endpoint: None,
            }));
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
                self.protocol_errors += 1;
                self.last_protocol_error = Some(e.to_string());
                self.dirty = true;
                false
            }
        }
    }

    /// Applies one protocol message.
    pub fn apply_message(&mut self, message: proto::Message, now_ms: f64) {
        match message {
            proto::Message::Hello(hello) => self.apply_hello(&hello),
            proto::Message::Frame(f) => {
                self.apply_frame(f.source, f.seq, f.recv_time_nanos, f.replayed, f.topic, f.payload, now_ms)
            }
            proto::Message::FrameError(e) => self.apply_frame_error(e),
            proto::Message::SourceStatus(s) => {
                self.ensure_source(s.source);
                let src = &mut self.sources[s.source as usize];
                src.status = Some(s);
                src.dirty = true;
                self.dirty = true;
            }
            proto::Message::LagNotice(n) => {
                self.lagged_frames += n.frames_lost;
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
        }
    }

    /// A hello starts a fresh view: the server resends its history after it, so counting on
    /// from the old state would count every retained frame twice. (The rejected alternative,
    /// de-duplicating by (source, seq), breaks when the engine restarted and seq began again at
    /// 0 while the page was away.) The block size follows the server's default unless the page
    /// set its own.
    pub fn apply_hello(&mut self, hello: &proto::Hello) {
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
        self.reset_with_sources(&header.sources);
        self.origin = Origin::Capture { name: name.to_owned(), truncated: None };
    }

    /// Applies one capture record (raw ZMQ frames).
    pub fn apply_record(&mut self, record: proto::capture::CaptureRecord, now_ms: f64) {
        let frames: Vec<Vec<u8>> = record.frames.into_iter().map(|b| b.into_vec()).collect();
        match kvscope_wire::frame::parse_live(&frames) {
            Ok(msg) => {
                let (topic, seq, payload) = (msg.topic.to_vec(), msg.seq, msg.payload.to_vec());
                self.apply_frame(record.source, seq, record.recv_time_nanos, record.replayed, topic, payload, now_ms)
            }
            Err(e) => self.apply_malformed(record.source, record.recv_time_nanos, record.replayed, frames, e.to_string()),
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

    fn apply_malformed(&mut self, source: u32, recv_time_nanos: u64, replayed: bool, frames: Vec<Vec<u8>>, error: String) {
        self.ensure_source(source);
        let src = &mut self.sources[source as usize];
        src.frame_errors += 1;
        src.last_error = Some(error.clone());
        src.dirty = true;
        let id = self.next_frame_id;
        self.next_frame_id += 1;
        let frame = RetainedFrame {
            id,
            source,
            seq: 0,
            recv_time_nanos,
            replayed,
            body: FrameBody::Malformed { frames, error },
            first_event: self.next_event_id,
            num_events: 0,
            decode_error: None,
        };
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
        self.ensure_source(source);
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
        let id = self.next_frame_id;
        self.next_frame_id += 1;
        let mut frame = RetainedFrame {
            id,
            source,
            seq,
            recv_time_nanos,
            replayed,
            body: FrameBody::Message { topic, payload },
            first_event: self.next_event_id,
            num_events: 0,
            decode_error: None,
        };
        {
            let src = &mut self.sources[source as usize];
            src.frames += 1;
            src.payload_bytes += frame.payload().map_or(0, |p| p.len() as u64);
            src.seq.see(seq, replayed);
            src.dirty = true;
        }
        let n = self.classify_frame(&mut frame);
        self.rate.add(now_ms, n as u64);
        self.retain(frame);
        self.dirty = true;
    }

    /// Decodes a frame and runs both policies over it; records verdicts, marks and log lines.
    /// Returns the number of events.
    ///
    /// Events are classified as the decoder hands them over (`decode_each`), so a frame costs
    /// O(1) memory beyond what is retained per event: a hostile batch of millions of tiny
    /// events never builds a `Vec` of decoded events or of verdicts.
    fn classify_frame(&mut self, frame: &mut RetainedFrame) -> usize {
        let Some(payload) = frame.payload() else { return 0 };
        let source = frame.source;
        let t0 = self.t0_nanos.unwrap_or(frame.recv_time_nanos);
        let time_ms = frame.recv_time_nanos.saturating_sub(t0) as f64 / 1e6;
        let (worker_id, dp_rank) = {
            let s = &self.sources[source as usize];
            (s.worker_id.clone(), s.dp_rank)
        };
        let verdicts = [std::cell::Cell::new(None), std::cell::Cell::new(None)];
        let Model { runs, classes, sources, trees, events, lanes, differences, next_event_id, config, .. } = self;
        let [run_a, run_b] = runs;
        let tree_side = config.trees as usize;
        let (frame_id, seq) = (frame.id, frame.seq);
        let mut n = 0usize;
        let mut sink = BothPolicies {
            a: run_a.sink(source, &worker_id, dp_rank, seq, &verdicts[0]),
            b: run_b.sink(source, &worker_id, dp_rank, seq, &verdicts[1]),
            ts: 0.0,
            each: |i: u32, event: &KvEvent, ts: f64| {
                n += 1;
                let mut codes = [0 as ClassCode; 2];
                for side in 0..2 {
                    let Some(verdict) = verdicts[side].take() else { continue };
                    let outcome = Classified::from_verdict(verdict);
                    let code = classes.intern(outcome.class);
                    codes[side] = code;
                    let counts = &mut sources[source as usize].counts[side];
                    counts.events += 1;
                    *counts.by_class.entry(code).or_default() += 1;
                    if outcome.class.kind == Outcome::Fatal && counts.first_fatal.is_none() {
                        counts.first_fatal = Some((seq, outcome.rule()));
                    }
                    if outcome.blocks > 0
                        && let Some(t) = outcome.verdict.tier.map(StorageTier::label)
                    {
                        *counts.blocks_applied.entry(t).or_default() += u64::from(outcome.blocks);
                    }
                    if side == tree_side {
                        trees.apply(source, event, &outcome, ts);
                    }
                }
                if codes[0] != codes[1] {
                    *differences.entry((codes[0], codes[1])).or_default() += 1;
                }
                let event_id = *next_event_id;
                *next_event_id += 1;
                events.push_back(EventLoc { frame: frame_id, index: i, source, class: codes });
                lanes[source as usize].push(time_ms, codes[0], codes[1], event_id);
            },
        };
        if let Err(e) = kvscope_wire::decode_each(payload, &mut sink) {
            let src = &mut self.sources[source as usize];
            src.decode_errors += 1;
            let text = format!("{} seq {}: {e}", src.key, frame.seq);
            src.last_error = Some(text.clone());
            frame.decode_error = Some(text);
            return 0;
        }
        self.t0_nanos = Some(t0);
        self.last_nanos = self.last_nanos.max(frame.recv_time_nanos);
        frame.num_events = n as u32;
        n
    }

    fn retain(&mut self, frame: RetainedFrame) {
        self.retained_bytes += frame.cost_bytes();
        self.frames.push_back(frame);
        if self.retained_bytes > self.config.retain_bytes {
            self.bound_reached = true;
            // Evict down to 95% so that eviction (and the lane drains it causes) runs once per
            // twentieth of the bound, not on every frame, and each run stays short.
            let target = self.config.retain_bytes / 20 * 19;
            let mut first_kept_event = self.first_event_id;
            while self.retained_bytes > target && self.frames.len() > 1 {
                let Some(old) = self.frames.pop_front() else { break };
                self.retained_bytes -= old.cost_bytes();
                self.evicted_frames += 1;
                first_kept_event = old.first_event + u64::from(old.num_events);
            }
            let drop_events = (first_kept_event - self.first_event_id) as usize;
            self.events.drain(..drop_events.min(self.events.len()));
            self.first_event_id = first_kept_event;
            for lane in &mut self.lanes {
                lane.evict_below(first_kept_event);
            }
        }
    }

    /// Changes what classification depends on and re-classifies every retained frame.
    /// Counters then cover the retained frames only ([`Model::bound_reached`] says whether
    /// that is all of them).
    pub fn reconfigure(&mut self, config: Config) {
        if config == self.config {
            return;
        }
        let frames = std::mem::take(&mut self.frames);
        let sources: Vec<proto::SourceInfo> = self
            .sources
            .iter()
            .map(|s| proto::SourceInfo {
                index: s.index,
                key: s.key.clone(),
                worker_id: s.worker_id.clone(),
                dp_rank: s.dp_rank,
                endpoint: s.endpoint.clone(),
                replay_endpoint: None,
            })
            .collect();
        let statuses: Vec<Option<proto::SourceStatus>> = self.sources.iter().map(|s| s.status.clone()).collect();
        let origin = self.origin.clone();
        let (evicted, bound, lagged, hist_evicted, hist_complete) = (
            self.evicted_frames,
            self.bound_reached,
            self.lagged_frames,
            self.history_evicted_frames,
            self.history_complete,
        );
        self.config = config;
        self.reset_with_sources(&sources);
        self.origin = origin;
        for (src, status) in self.sources.iter_mut().zip(statuses) {
            src.status = status;
        }
        for f in frames {
            match f.body {
                FrameBody::Message { topic, payload } => {
                    self.apply_frame(f.source, f.seq, f.recv_time_nanos, f.replayed, topic, payload, 0.0)
                }
                FrameBody::Malformed { frames, error } => {
                    self.apply_malformed(f.source, f.recv_time_nanos, f.replayed, frames, error)
                }
            }
        }
        self.rate = RateMeter::default();
        self.evicted_frames += evicted;
        self.bound_reached |= bound;
        self.lagged_frames = lagged;
        self.history_evicted_frames = hist_evicted;
        self.history_complete = hist_complete;
    }

    /// Ids of sources whose cards changed since the last call; clears the flags.
    pub fn take_dirty(&mut self) -> (bool, Vec<u32>) {
        let global = std::mem::take(&mut self.dirty);
        let changed = self
            .sources
            .iter_mut()
            .filter_map(|s| std::mem::take(&mut s.dirty).then_some(s.index))
            .collect();
        (global, changed)
    }

    pub fn event_loc(&self, id: u64) -> Option<EventLoc> {
        if id < self.first_event_id {
            return None;
        }
        self.events.get((id - self.first_event_id) as usize).copied()
    }

    fn frame_by_id(&self, id: u64) -> Option<&RetainedFrame> {
        let first = self.frames.front()?.id;
        let f = self.frames.get(id.checked_sub(first)? as usize)?;
        (f.id == id).then_some(f)
    }

    /// The event an [`EventRef`] names, if retained (the latest frame with that source and seq).
    pub fn find_event(&self, r: &EventRef) -> Option<u64> {
        let src = self.source_by_key(&r.source)?.index;
        let f = self.frames.iter().rev().find(|f| f.source == src && f.seq == r.seq)?;
        (r.index < f.num_events).then(|| f.first_event + u64::from(r.index))
    }

    pub fn event_ref(&self, id: u64) -> Option<EventRef> {
        let loc = self.event_loc(id)?;
        let f = self.frame_by_id(loc.frame)?;
        Some(EventRef { source: self.sources[f.source as usize].key.clone(), seq: f.seq, index: loc.index })
    }

    /// The first retained event of the given class severity or above under `side`, after
    /// `after` (exclusive), optionally on one source.
    pub fn next_marked(&self, side: Side, after: Option<u64>, min_severity: u8) -> Option<u64> {
        let start = after.map_or(self.first_event_id, |a| a + 1).max(self.first_event_id);
        let skip = (start - self.first_event_id) as usize;
        self.events
            .iter()
            .skip(skip)
            .position(|l| self.classes.severity(l.class[side as usize]) >= min_severity)
            .map(|p| start + p as u64)
    }

    /// Everything the inspector shows for one event. The rule sentences come from running
    /// fresh normalizers over this source's retained frames up to the event: a verdict is
    /// about 120 bytes, too much to keep for a million events, and the run is the same code
    /// that decided. If older frames of the source were evicted, the sentence may differ from
    /// the live verdict (the group metadata learned from them is gone); the stored class is
    /// shown next to it, so a difference is visible.
    pub fn event_detail(&self, id: u64) -> Option<EventDetail> {
        let loc = self.event_loc(id)?;
        let frame = self.frame_by_id(loc.frame)?;
        let FrameBody::Message { topic, payload } = &frame.body else { return None };
        let batch = kvscope_wire::decode_batch(payload).ok();
        let src = &self.sources[frame.source as usize];
        let mut verdicts: [(String, Option<classes::Class>, String); 2] = Default::default();
        for side in [Side::A, Side::B] {
            let i = side as usize;
            let mut run = PolicyRun::new(self.runs[i].name(), self.config.block_size).unwrap_or_else(|_| self.runs[i].fresh());
            let mut out = Vec::new();
            let mut rule = String::new();
            for f in self.frames.iter().filter(|f| f.source == frame.source && f.id <= frame.id) {
                let Some(p) = f.payload() else { continue };
                let Ok(b) = kvscope_wire::decode_batch(p) else { continue };
                out.clear();
                run.classify(f.source, &src.worker_id, src.dp_rank, f.seq, &b, &mut out);
                if f.id == frame.id {
                    rule = out.get(loc.index as usize).map(Classified::rule).unwrap_or_default();
                }
            }
            verdicts[i] = (self.runs[i].name().to_owned(), self.classes.get(loc.class[i]).cloned(), rule);
        }
        Some(EventDetail {
            id,
            source_key: src.key.clone(),
            seq: frame.seq,
            index: loc.index,
            recv_time_nanos: frame.recv_time_nanos,
            replayed: frame.replayed,
            topic: topic.clone(),
            payload: payload.clone(),
            event: batch.as_ref().and_then(|b| b.events.get(loc.index as usize).cloned()),
            batch_ts: batch.as_ref().map(|b| b.ts),
            batch_dp_rank: batch.as_ref().and_then(|b| b.dp_rank),
            verdicts,
        })
    }

    /// The block size of the store that put `hash` in a tree: found in the retained frame with
    /// that source and seq (the trees keep no block size). `None` when evicted.
    pub fn block_size_of(&self, source: u32, seq: u64, hash: u64) -> Option<u32> {
        let f = self.frames.iter().rev().find(|f| f.source == source && f.seq == seq)?;
        let batch = kvscope_wire::decode_batch(f.payload()?).ok()?;
        batch.events.iter().find_map(|e| match e {
            KvEvent::BlockStored(s) if s.block_hashes.iter().any(|h| h.0 == hash) => s.block_size,
            _ => None,
        })
    }

    /// The retained frames as a `.kvcap` file: frames exactly as received.
    pub fn to_kvcap(&self, created_unix_nanos: u64) -> Vec<u8> {
        let header = proto::capture::CaptureHeader {
            created_unix_nanos,
            kvscope_version: env!("CARGO_PKG_VERSION").to_owned(),
            sources: self
                .sources
                .iter()
                .map(|s| proto::SourceInfo {
                    index: s.index,
                    key: s.key.clone(),
                    worker_id: s.worker_id.clone(),
                    dp_rank: s.dp_rank,
                    endpoint: s.endpoint.clone(),
                    replay_endpoint: None,
                })
                .collect(),
            note: Some("downloaded from the kvscope dashboard".to_owned()),
        };
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = proto::capture::write_header(&mut out, &header);
        for f in &self.frames {
            let rec = match &f.body {
                FrameBody::Message { topic, payload } => proto::capture::encode_record_parts(
                    f.source,
                    f.recv_time_nanos,
                    f.replayed,
                    &[topic.as_slice(), &f.seq.to_be_bytes(), payload.as_slice()],
                ),
                FrameBody::Malformed { frames, .. } => {
                    proto::capture::encode_record_parts(f.source, f.recv_time_nanos, f.replayed, frames)
                }
            };
            out.extend_from_slice(&rec);
        }
        out
    }

    /// One JSON object per retained event: where it came from, what it was and what each
    /// policy decided.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for f in &self.frames {
            let Some(payload) = f.payload() else { continue };
            let Ok(batch) = kvscope_wire::decode_batch(payload) else { continue };
            let src = &self.sources[f.source as usize];
            for (i, ev) in batch.events.iter().enumerate() {
                let Some(loc) = self.event_loc(f.first_event + i as u64) else { continue };
                let verdict = |side: usize| {
                    let c = self.classes.get(loc.class[side]);
                    serde_json::json!({
                        "policy": self.runs[side].name(),
                        "kind": c.map(|c| c.kind.past_tense()),
                        "reason": c.map(|c| c.reason.as_str()),
                        "tier": c.and_then(|c| c.tier.map(|t| t.to_string())),
                    })
                };
                let line = serde_json::json!({
                    "source": src.key,
                    "worker_id": src.worker_id,
                    "dp_rank": src.dp_rank,
                    "seq": f.seq,
                    "index": i,
                    "recv_time_nanos": f.recv_time_nanos,
                    "type": ev.event_type().as_str(),
                    "medium": ev.medium(),
                    "group_idx": ev.group_idx(),
                    "block_size": match ev { KvEvent::BlockStored(s) => s.block_size, _ => None },
                    "blocks": ev.block_hashes().len(),
                    "a": verdict(0),
                    "b": verdict(1),
                });
                out.push_str(&line.to_string());
                out.push('\n');
            }
        }
        out
    }
}

fn make_runs(config: &Config) -> ([PolicyRun; 2], Option<String>) {
    let mut error = None;
    let mut make = |name: &str, fallback: Policy| match PolicyRun::new(name, config.block_size) {
        Ok(r) => r,
        Err(e) => {
            error = Some(e);
            PolicyRun::of(fallback, config.block_size)
        }
    };
    // The presets settings::DEFAULT_POLICY_A and _B name (a test checks they agree).
    let a = make(&config.policy_a, Policy::LEGACY);
    let b = make(&config.policy_b, Policy::FIXED);
    ([a, b], error)
}

#[cfg(test)]
mod tests;
