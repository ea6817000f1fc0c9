//! The plain objects JavaScript receives: one Rust struct per shape, serialized with
//! serde-wasm-bindgen (maps as plain objects). Field names are snake_case, like the labels they
//! carry (`blocks_applied`, `offload_block_size_mismatch`), so the JS and Rust sides read alike.
//!
//! Block hashes are 16-digit lower-case hex strings (`BlockHash`'s `Display`): a u64 does not fit
//! a JS number, and BigInts do not mix with numbers in arithmetic. Counts and seqs are numbers
//! (they stay far below 2^53).
//!
//! Each type also derives `Deserialize`, so the browser tests can read a `JsValue` back and
//! compare it with the vector table.

use std::collections::BTreeMap;

pub use kvscope_normalize::VerdictLabel;
use serde::{Deserialize, Serialize};

/// A source: which worker and rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsSource {
    pub worker_id: String,
    pub dp_rank: u32,
    /// `worker_id:dp_rank`.
    pub key: String,
}

/// Why a pushed message produced no verdicts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsPushError {
    /// `frame` (not a 3-frame live message) or `decode` (a payload that does not decode).
    pub kind: String,
    /// The counter group: `frame_count`, `seq_length`, `truncated`, `type_mismatch`, ...
    pub class: String,
    /// With position: `byte 17: expected ... (events[3])`.
    pub message: String,
}

/// The batch a payload decoded into.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsBatch {
    pub ts: f64,
    pub dp_rank: Option<u32>,
    pub events: u32,
}

/// What applying a verdict changed in the trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JsChange {
    pub inserted: u32,
    pub removed: u32,
    pub refused: u32,
}

/// One event's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsVerdict {
    pub event_index: u32,
    /// `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `unknown`.
    pub event_type: String,
    /// `apply`, `skip` or `fatal`.
    pub outcome: String,
    /// `store`, `offload_block_size_mismatch`, ...
    pub label: VerdictLabel,
    /// `device`, `host_pinned`, `disk`, `external`; absent for clears and unknown tags.
    pub tier: Option<String>,
    /// Hashes in the event.
    pub blocks: u32,
    /// Blocks the verdict applies (stores and removes).
    pub blocks_applied: u32,
    /// `unknown_medium_fallback`, `short_token_ids`, ...
    pub flags: Vec<String>,
    /// Label and docs/rules.md step of the deciding rule.
    pub rule: String,
    pub rule_step: String,
    /// Compact code: `store device 2 +short_token_ids`.
    pub code: String,
    /// The sentence for the event inspector.
    pub text: String,
    /// What to do, for fatal verdicts.
    pub fatal_hint: Option<String>,
    /// What it did to the trees.
    pub change: JsChange,
}

/// The result of one push.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsPushResult {
    pub source: String,
    /// The message's seq (for frames, read from the seq frame; `null` if that failed).
    pub seq: Option<u64>,
    pub ok: bool,
    pub error: Option<JsPushError>,
    pub batch: Option<JsBatch>,
    pub verdicts: Vec<JsVerdict>,
}

/// One log line an indexer would print.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsLogLine {
    /// `WARN` or `ERROR`.
    pub level: String,
    pub seq: u64,
    pub event_index: u32,
    pub text: String,
}

/// One rate-limited warning budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsBudget {
    pub limit: u32,
    pub emitted: u64,
    pub suppressed: u64,
    pub lines: Vec<JsLogLine>,
}

/// A card fragment: `37 stores skipped on an offload tier at another block size`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsSummaryLine {
    pub label: VerdictLabel,
    pub count: u64,
    pub text: String,
}

/// Everything counted for one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsCounters {
    pub source: JsSource,
    pub batches: u64,
    /// By event type (`BlockStored`, ...).
    pub events: BTreeMap<String, u64>,
    pub total_events: u64,
    /// Non-zero counts by label.
    pub verdicts_by_label: BTreeMap<String, u64>,
    /// Non-zero counts by tier label; `none` for clears and unknown tags.
    pub verdicts_by_tier: BTreeMap<String, u64>,
    /// Non-zero counts, tier -> label -> count.
    pub verdicts: BTreeMap<String, BTreeMap<String, u64>>,
    pub blocks_applied: u64,
    pub blocks_applied_by_tier: BTreeMap<String, u64>,
    pub unknown_medium_fallbacks: u64,
    pub fatal_count: u64,
    pub first_fatal: Option<JsLogLine>,
    /// `conversion` and `offload`.
    pub warnings: BTreeMap<String, JsBudget>,
    /// Every line the indexer would print, in order.
    pub log: Vec<JsLogLine>,
    pub summaries: Vec<JsSummaryLine>,
    pub decode_errors: u64,
    pub first_decode_error: Option<JsLogLine>,
    pub frame_errors: u64,
    /// Batches the policy's decoder rejects whole (`dynamo-1.6.1`); their events are counted
    /// under `batch_decode_rejected`.
    pub batches_rejected: u64,
    /// Lines the indexer prints every time, with no budget (`dynamo-1.6.1`: rejected batches,
    /// self-referencing stores, unknown kinds). The first of them are in `log`; this counts all.
    pub notices: u64,
    /// Live blocks per tier label.
    pub trees: BTreeMap<String, u64>,
}

/// A root subtree's size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsSubtreeSize {
    pub root: String,
    pub blocks: u64,
    pub depth: u32,
}

/// What a tier view needs without walking the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsTreeSummary {
    pub source: String,
    pub tier: String,
    pub blocks: u64,
    pub roots: u64,
    pub max_depth: u32,
    pub largest: Vec<JsSubtreeSize>,
    /// The tree's consistency counters (`parent_block_not_found`, `block_not_found`,
    /// `duplicate_store`, ...).
    pub counters: BTreeMap<String, u64>,
    /// True once the memory bound refused a store anywhere: the trees are incomplete.
    pub limit_hit: bool,
    pub limit_first_hit_seq: Option<u64>,
    pub refused_blocks: u64,
}

/// One node of an icicle drill-down.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsIcicleNode {
    /// `null` for the virtual root of a whole-tier view.
    pub hash: Option<String>,
    pub parent: Option<u32>,
    pub depth: u32,
    pub blocks: u64,
    pub seq: u64,
    pub time: f64,
    pub children: u32,
    pub hidden_children: u32,
    pub hidden_blocks: u64,
}

/// One block, for a hover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsBlock {
    pub hash: String,
    pub parent_hash: Option<String>,
    pub parent_present: bool,
    pub children: u32,
    pub seq: u64,
    pub time: f64,
}

/// A policy preset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsPolicy {
    pub name: String,
    pub about: String,
}

/// A normalizer rule, in evaluation order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsRule {
    pub step: String,
    /// The rule's name (the label its verdicts carry, `apply`, or a preparatory step's name).
    pub label: String,
    pub sentence: String,
    /// What it looks at, in a few words (as `kvscope rules` prints it).
    pub checks: String,
    /// What it decides (as `kvscope rules` prints it).
    pub decides: String,
    /// The labels its verdicts carry.
    pub labels: Vec<VerdictLabel>,
}

/// A verdict label, in `VerdictLabel::ALL` order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsLabel {
    pub label: VerdictLabel,
    /// `apply`, `skip` or `fatal`.
    pub outcome: String,
    /// The rule whose verdicts carry it.
    pub rule: String,
}
