//! What the page renders: one plain struct per part of the page, computed by the engine from
//! its model and the page's [`crate::ViewQuery`], and sent when it changed ([`Summary`]).
//!
//! Everything here is display-ready: sentences in the engine's words, figures, the keys the
//! `data-*` hooks carry, and the event ids a click sends back. The page decides nothing about
//! the stream; it lays these out.

use serde::{Deserialize, Serialize};

use crate::completeness::Completeness;
use crate::label::{Outcome, Reason, StorageTier};
use crate::overview::Row;
use crate::settings::{EventRef, Side};

/// Where the engine's WebSocket to the server stands.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub enum ConnState {
    /// Not started: the page is showing a capture, or was opened with `?offline=1`.
    #[default]
    Off,
    /// A socket is being opened; `attempt` counts failures since the last success.
    Connecting { attempt: u32 },
    /// Open; messages flow.
    Open,
    /// The last socket closed; the next attempt starts after `delay_ms`.
    Waiting { attempt: u32, delay_ms: f64, reason: String },
}

impl ConnState {
    /// Short label for the fleet bar.
    pub fn label(&self) -> String {
        match self {
            ConnState::Off => "not connected (capture)".to_owned(),
            ConnState::Connecting { attempt: 0 } => "connecting".to_owned(),
            ConnState::Connecting { attempt } => format!("reconnecting (attempt {})", attempt + 1),
            ConnState::Open => "connected".to_owned(),
            ConnState::Waiting { delay_ms, .. } => format!("server away; retry in {:.1} s", delay_ms / 1000.0),
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self, ConnState::Open)
    }
}

/// The fleet bar's connection badge, decided by the engine: the socket's state, or how far
/// behind live the page is while the socket is open.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct ConnBadge {
    /// "connected", "behind live by 27 s, catching up at 1,280 frames/s", "reconnecting…".
    pub text: String,
    pub tone: Tone,
}

/// How a badge reads at a glance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Tone {
    /// Nothing to look at: no socket (a capture).
    #[default]
    Off,
    /// As it should be: connected and live.
    Ok,
    /// Look: behind live, reconnecting, or the server away.
    Warn,
}

/// Progress of opening a capture file.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub enum CaptureProgress {
    #[default]
    Idle,
    /// `done` of `total` bytes read or parsed, in the named phase.
    Running {
        name: String,
        phase: String,
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

/// Where the frames come from, as far as the views care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OriginKind {
    /// Nothing yet.
    #[default]
    Empty,
    /// A kvscope server (`serve`, `demo` or `replay`).
    Server,
    /// A capture file opened in the page.
    Capture,
}

/// One rule of a policy, in evaluation order (the help table).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct RuleRow {
    pub step: String,
    pub name: String,
    pub checks: String,
    pub decides: String,
}

/// What changes rarely and many views read: the policies, the block size, where the frames come
/// from.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Meta {
    /// The policy each side runs, by name.
    pub policies: [String; 2],
    /// Every preset a side can be set to.
    pub presets: Vec<String>,
    /// Per side: the rules its policy runs, in order.
    pub rules: [Vec<RuleRow>; 2],
    pub block_size: u32,
    /// Whose verdicts build the tier trees.
    pub trees_side: Side,
    pub origin: OriginKind,
    /// Some source is Dynamo's event plane: the router's rows and lanes are shown.
    pub has_router: bool,
    /// Where the defaults came from, when not from a server (the block size's tooltip).
    pub defaults_note: String,
    /// A policy name that is no preset, in words; empty when none.
    pub config_error: String,
    /// The bound on retained raw bytes, MiB (the inspector's words).
    pub retain_mib: u64,
    /// Every source's key, in source order (the tree's worker picker).
    pub sources: Vec<String>,
}

impl Meta {
    pub fn policy(&self, side: Side) -> &str {
        &self.policies[side as usize]
    }
}

/// The fleet bar's figures, which change with every flush.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Bar {
    /// The socket's state, or how far behind live the page is.
    pub badge: ConnBadge,
    /// "demo: kimi_k3 …", "capture x.kvcap".
    pub origin: String,
    /// "3 of 3 workers live · 1 event planes".
    pub sources: String,
    /// "12,345 events/s", or a capture's count and span.
    pub rate: String,
    /// Both retention bounds and what reaching each dropped.
    pub memory: String,
    pub memory_bound_reached: bool,
    /// The engine's wasm linear memory, in bytes (the benchmark reads it).
    pub engine_wasm_bytes: u64,
    /// Engine workers the fleet is spread over (`?engines=`).
    pub engines: u32,
    /// While the server's history arrives: frames received of those announced.
    pub catching_up: Option<(u64, u64)>,
    /// How far behind the stream the engine's intake is, and what its bound dropped.
    pub intake: Option<IntakeLine>,
    /// "views refresh every 0.4 s …", when the engine sends summaries less often than every
    /// 100 ms because taking them costs the page more than its share of its main thread.
    pub pace: Option<String>,
    /// "this page lost N frames (…)", when the server dropped frames for this page.
    pub lagged: Option<String>,
    /// The server's recording: its summary, and whether it failed.
    pub recording: Option<(String, bool)>,
    /// The server's discovery (`--discover`): what it found, and whether a store cannot be
    /// read now.
    pub discovery: Option<(String, bool)>,
    pub capture: CaptureProgress,
}

/// The fleet bar's intake line.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct IntakeLine {
    pub text: String,
    pub queued_bytes: u64,
    pub dropped_messages: u64,
}

/// The data-quality strip: what the verdicts cover, fleet-wide.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Quality {
    pub completeness: Completeness,
    /// "covers 1.2 s from 12:00:01.000 UTC".
    pub span: Option<String>,
    /// "sources affected: 0:0, 1:0", or how many.
    pub sources: Option<String>,
}

/// One policy's box in the headline.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct PolicyBox {
    pub side: Side,
    /// `exits`, `clear`, or the completeness key.
    pub state: String,
    pub completeness: Completeness,
    pub all_clear: bool,
    pub verdict_line: String,
    pub about: String,
    pub details: Vec<String>,
    pub exit: Option<ExitMark>,
}

/// Where a policy's indexer exits.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct ExitMark {
    pub event_id: u64,
    pub source: String,
    pub seq: u64,
    /// Events that would stop a restarted indexer again.
    pub crashloop: u64,
    /// Events an indexer that stays down never sees.
    pub never_indexed: u64,
}

/// One kind of disagreement between the policies.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct DifferenceRow {
    pub events: String,
    pub a: String,
    pub b: String,
    pub first_event: u64,
}

/// The answer, first: where the policies disagree, each policy's box, the router's lines.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Headline {
    pub differences: Vec<DifferenceRow>,
    /// Said when there is no difference.
    pub agree_line: String,
    pub policies: [PolicyBox; 2],
    pub router_lines: Vec<String>,
    /// What the router's index sees under each policy, fleet-wide: "since 16:09:26, under
    /// legacy the router sees 12% of the 73,728 cached prefix tokens, 0 phantom; fixed: 12%".
    pub index_lines: Vec<String>,
}

/// The fleet overview: every engine source's row, the odd ones first.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Overview {
    pub rows: Vec<Row>,
}

/// One row of a card's verdict table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CardRow {
    pub kind: Outcome,
    pub reason: Reason,
    /// A skip that is routine filtering, drawn below the reasons that mean "the indexer's view
    /// of a tier is incomplete": decided by the engine from the rule table, which the page does
    /// not consult.
    pub routine: bool,
    /// Per policy: count and the tiers it happened on.
    pub cells: [(u64, String); 2],
}

/// The card's router row.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub enum RouterRow {
    /// No event plane.
    #[default]
    None,
    /// The worker id is not a Dynamo worker id in decimal.
    NotMatched,
    Counts {
        policy: String,
        clean: bool,
        cells: Vec<(String, u64)>,
        dropped: Option<String>,
    },
}

/// One worker card.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Card {
    pub index: u32,
    pub key: String,
    pub worker: String,
    pub dp_rank: u32,
    pub status: String,
    pub completeness: Completeness,
    /// "policies disagree: A fatal · B offload skipped".
    pub disagree: Option<String>,
    /// Per side, where its indexer stops: `(side, "legacy: an indexer stops at seq 8")`.
    pub stop_lines: Vec<(Side, String)>,
    pub router: RouterRow,
    /// Per side, the router's index against this engine: blocks by cause, then the cost.
    pub index_lines: Vec<(Side, String)>,
    pub tree_caption: String,
    /// Blocks held per tier.
    pub tiers: Vec<(StorageTier, u64)>,
    pub rows: Vec<CardRow>,
    pub frames: u64,
    pub events: u64,
    pub last_seq: Option<u64>,
    pub gaps: u64,
    pub restarts: u64,
    pub errors: u64,
    pub last_error: Option<String>,
}

/// The cards shown: the opened sources', or every source of a small fleet.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Cards {
    pub cards: Vec<Card>,
    /// A large fleet with none opened: say how to open one.
    pub hint: bool,
}

/// Dynamo's event-plane sources, when there are any.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Planes {
    /// `(source key, line, last error)`: those that need a look first, at most
    /// [`Planes::LISTED`].
    pub planes: Vec<(String, String, Option<String>)>,
    /// Likewise, at most [`Planes::LISTED`].
    pub publishers: Vec<String>,
    /// What the lists leave out, in words ("and 60 more event-plane sources, all live, no
    /// errors"); empty when they hold everything.
    pub rest: Vec<String>,
}

impl Planes {
    /// Rows each list shows: a fleet of 512 relays is said in one line, not listed.
    pub const LISTED: usize = 8;
}

/// A lane's label beside the canvas.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct LaneLabel {
    pub index: u32,
    pub key: String,
}

/// A shift-drag's verdict counts.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct RangeCounts {
    /// "12:00:01.000 UTC to 12:00:02.000 UTC".
    pub span: String,
    /// Said when the counts are short because the records before a time are gone.
    pub partial: Option<String>,
    /// Per policy: (class in words, events, colour), most severe first.
    pub rows: [Vec<(String, u64, String)>; 2],
}

/// The timeline: everything but its pixels, which come beside the summary.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Timeline {
    pub lanes: Vec<LaneLabel>,
    /// CSS pixels per lane.
    pub lane_px: f64,
    /// A and B, and the router's when there is an event plane.
    pub rows_per_lane: u32,
    /// The window drawn, in ms since the first frame.
    pub window: (f64, f64),
    /// The image's size in CSS pixels.
    pub css_size: (f64, f64),
    /// Axis labels: (x in CSS pixels, wall-clock text).
    pub ticks: Vec<(f64, String)>,
    /// Where a policy's indexer exits: (side, x in CSS pixels).
    pub exits: Vec<(Side, f64)>,
    /// (class in words, colour) of every class some lane marked.
    pub legend: Vec<(String, String)>,
    /// "Each lane: A legacy, B fixed".
    pub heading: String,
    /// Says when the lanes are the first of a large fleet.
    pub lane_note: Option<String>,
    /// Says when older time is drawn from summaries.
    pub bucket_note: Option<String>,
    pub range: Option<RangeCounts>,
}

/// An event's verdict under one policy.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct VerdictBox {
    pub policy: String,
    /// `None`: no verdict (the event's frame did not decode).
    pub kind: Option<Outcome>,
    pub label: String,
    pub rule: String,
}

/// Where the inspector's raw bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum BytesSource {
    /// This page still keeps the frame.
    #[default]
    Page,
    /// Fetched from the server's history on request.
    Server,
    /// Read again from the opened capture file on request.
    Capture,
    /// Not kept here; the server or the capture file may still have them.
    NotKept,
    /// Gone for good.
    Gone,
}

impl BytesSource {
    /// `page`, `server`, `capture`, `not-kept` or `gone` (`data-from`).
    pub fn key(self) -> &'static str {
        match self {
            BytesSource::Page => "page",
            BytesSource::Server => "server",
            BytesSource::Capture => "capture",
            BytesSource::NotKept => "not-kept",
            BytesSource::Gone => "gone",
        }
    }
}

/// Where the inspector's raw bytes came from, in words.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct BytesFromLine {
    pub kind: BytesSource,
    pub sentence: String,
    /// The button that asks for them, when they can still be had.
    pub ask: Option<String>,
}

/// The router's side of an event.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct RouterLines {
    pub policy: String,
    pub became: String,
    pub arrived: String,
    pub received: Option<String>,
}

/// The event shown in the inspector.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Inspector {
    pub id: u64,
    pub verdicts: [VerdictBox; 2],
    pub router: Option<RouterLines>,
    /// Per side, what the router's index holds of the event's blocks, and why not.
    pub index_lines: Vec<(Side, String)>,
    /// Decoded fields as (name, value).
    pub fields: Vec<(String, String)>,
    pub bytes_from: BytesFromLine,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// One indexer log line.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct LogLine {
    pub text: String,
    /// The line of the first fatal verdict: a real indexer exits after printing it.
    pub fatal: bool,
    /// A line after that fatal one, which a real indexer would never have printed.
    pub after_exit: bool,
    /// A "counted, not logged" summary line.
    pub summary: bool,
}

/// The lines an indexer following each policy would print.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Logs {
    pub lines: [Vec<LogLine>; 2],
}

/// One consistency counter of a tree.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct TreeCounter {
    pub key: String,
    pub count: u64,
    /// "parent_block_not_found 3".
    pub title: String,
    pub sentence: String,
    /// The events behind it that are kept: the first's id and how many.
    pub first_event: Option<u64>,
    pub kept: usize,
}

/// A laid-out icicle node: its own box and its children.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct IcicleCell {
    /// `None` for the virtual root of every root.
    pub hash: Option<u64>,
    pub label: String,
    /// Hash, parent, block size, seq and subtree size, one per line.
    pub title: String,
    pub blocks: u64,
    pub hidden_children: usize,
    pub hidden_blocks: u64,
    /// The router's index under the tree's policy lacks this block (the engine holds it).
    pub router_lacks: bool,
    pub kids: Vec<IcicleCell>,
}

/// One tier's row of the A-beside-B table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierSides {
    pub tier: StorageTier,
    pub blocks: [u64; 2],
    /// Where the applied blocks went, per policy (the cells' tooltips).
    pub titles: [String; 2],
    pub difference: String,
}

/// One hit of the block-hash search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HashHit {
    pub side: Side,
    pub source: String,
    pub tier: StorageTier,
    pub text: String,
    /// Drill into its parent when opened.
    pub parent: Option<u64>,
}

/// The hash search's answer.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub enum HashSearch {
    #[default]
    None,
    NotAHash,
    NotFound(String),
    Hits(Vec<HashHit>),
}

/// The tier-tree section.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Trees {
    /// The tree shown: (source key, tier).
    pub shown: Option<(String, StorageTier)>,
    /// "Policy B fixed, device: …", or why there is no tree.
    pub head: String,
    /// False when the tier holds nothing under the tree side's policy.
    pub has_tree: bool,
    pub counters: Vec<TreeCounter>,
    /// The hash drilled into, in hex.
    pub drilled: Option<String>,
    pub icicle: Option<IcicleCell>,
    pub sides: Vec<TierSides>,
    /// Tiers empty under both policies.
    pub empty_tiers: Vec<StorageTier>,
    pub search: HashSearch,
}

/// What the engine has selected for the inspector.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Selection {
    pub id: Option<u64>,
    /// The same event by name, for the URL.
    pub event: Option<EventRef>,
}

/// One flush's changes: each part the engine re-computed and found different from what it last
/// sent (`None`: unchanged). The page applies them at its next animation frame and answers
/// [`crate::ToEngine::Ack`].
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Counts up; the page acknowledges each.
    pub seq: u64,
    pub meta: Option<Meta>,
    pub bar: Option<Bar>,
    pub quality: Option<Quality>,
    pub headline: Option<Headline>,
    pub overview: Option<Overview>,
    pub cards: Option<Cards>,
    pub planes: Option<Option<Planes>>,
    pub timeline: Option<Timeline>,
    pub inspector: Option<Option<Inspector>>,
    pub logs: Option<Logs>,
    pub trees: Option<Trees>,
    pub selection: Option<Selection>,
    /// The [`crate::ToEngine::Sync`] requests this summary answers: everything sent before
    /// them is in it.
    pub answers: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_labels_say_what_is_happening() {
        assert_eq!(ConnState::Connecting { attempt: 0 }.label(), "connecting");
        assert_eq!(ConnState::Connecting { attempt: 2 }.label(), "reconnecting (attempt 3)");
        let w = ConnState::Waiting { attempt: 1, delay_ms: 500.0, reason: "closed".into() };
        assert_eq!(w.label(), "server away; retry in 0.5 s");
    }
}
