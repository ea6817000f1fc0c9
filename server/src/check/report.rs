//! `kvscope check`'s report as types: what `--json` prints (serde, keys sorted as the JSON
//! always was) and what the table is rendered from ([`super::table`]). Every figure is counted
//! once, here; the table and the JSON only lay it out.

use std::collections::BTreeMap;

use kvscope_index::IndexCounts;
use kvscope_normalize::VerdictLabel;
use kvscope_router::{Difference, PublisherCounts, RouterCounts, SharedKey, UnknownWorker};
use serde::Serialize;

use crate::exit::FleetReport;

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub file: String,
    pub block_size: u32,
    pub policy: &'static str,
    pub sources: Vec<SourceReport>,
    pub event_planes: Vec<PlaneReport>,
    /// The reconciliation with the event plane; `None` without an event-plane source.
    pub router: Option<RouterSection>,
    pub totals: Totals,
    pub fleet: FleetReport,
    /// Why the capture ended early, when it did.
    pub truncated: Option<String>,
    /// The router's index under `policy` (kvscope-index): how the model ran.
    pub index: IndexSection,
    /// Real indexes read with the capture (`--router-index`): their reads and the last dump
    /// against the model of Dynamo 1.6.1's index.
    pub router_indexes: Vec<RouterIndexReport>,
}

/// One `--router-index` source of the capture.
#[derive(Clone, Debug, Serialize)]
pub struct RouterIndexReport {
    pub url: String,
    /// Records read (`/workers` and `/dump` answers, and failed reads).
    pub reads: u64,
    /// `/dump` answers that parsed.
    pub dumps: u64,
    /// Failed reads (timeouts, refused connections, answers too large or malformed).
    pub errors: u64,
    pub first_errors: Vec<String>,
    pub last_dump_utc: Option<String>,
    /// Blocks on which the last dump and the model disagree; 0 is the model exact.
    pub differences: u64,
    pub first_differences: Vec<kvscope_index::IndexDifference>,
}

/// A source as the last real dump shows it.
#[derive(Clone, Debug, Serialize)]
pub struct IndexReal {
    #[serde(flatten)]
    pub counts: IndexCounts,
    /// The first blocks of this source on which the real index and the model disagree.
    pub differences: Vec<kvscope_index::IndexDifference>,
}

/// How the index model of the checked policy ran (`"index"` at the top level; the counts are
/// per source and in the totals).
#[derive(Clone, Debug, Serialize)]
pub struct IndexSection {
    /// The indexer modelled: Dynamo's standalone indexer running this policy's normalizer.
    pub policy: &'static str,
    /// Times it exited on a fatal verdict and restarted empty.
    pub indexer_exits: u64,
    pub first_exit: Option<kvscope_index::ExitAt>,
    /// Blocks not modelled: the model's bound was reached.
    pub refused_blocks: u64,
    /// The bound (`--index-max-nodes`), for the table.
    #[serde(skip)]
    pub bound: usize,
}

/// One engine source.
#[derive(Clone, Debug, Serialize)]
pub struct SourceReport {
    pub worker_id: String,
    pub dp_rank: u32,
    pub key: String,
    /// The block size it is read at: its model's own (a discovered engine's), else `--block-size`.
    pub block_size: u32,
    #[serde(flatten)]
    pub counts: SourceCounts,
    pub fatal: FatalSummary,
    /// The source's router counts; `None` when its worker id is not Dynamo's decimal
    /// `worker_id` or there is no event plane.
    pub router: Option<RouterCounts>,
    /// The first differences, when the source was reconciled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_differences: Option<Vec<Difference>>,
    /// What the router's index under `policy` holds against what the engine holds.
    pub index: IndexCounts,
    /// The same, read from the last real dump recorded with the capture (`--router-index`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_real: Option<IndexReal>,
}

/// What a source and the totals count alike.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceCounts {
    pub frames: u64,
    pub events: u64,
    pub frame_errors: u64,
    pub decode_errors: u64,
    pub gaps: u64,
    pub lost_frames: u64,
    pub replayed_frames: u64,
    pub restarts: u64,
    /// Events applied per tier label (`device`, `host_pinned`, `disk`, `external`).
    pub applied: BTreeMap<&'static str, u64>,
    /// Events applied to no one tier (clears).
    pub applied_without_tier: u64,
    /// Skipped events by label (only labels that occurred).
    pub skipped: BTreeMap<VerdictLabel, u64>,
}

impl SourceCounts {
    fn add(&mut self, o: &SourceCounts) {
        self.frames += o.frames;
        self.events += o.events;
        self.frame_errors += o.frame_errors;
        self.decode_errors += o.decode_errors;
        self.gaps += o.gaps;
        self.lost_frames += o.lost_frames;
        self.replayed_frames += o.replayed_frames;
        self.restarts += o.restarts;
        for (k, n) in &o.applied {
            *self.applied.entry(k).or_default() += n;
        }
        self.applied_without_tier += o.applied_without_tier;
        for (k, n) in &o.skipped {
            *self.skipped.entry(*k).or_default() += n;
        }
    }
}

/// A source's fatal verdicts.
#[derive(Clone, Debug, Serialize)]
pub struct FatalSummary {
    pub count: u64,
    pub first_seq: Option<u64>,
    pub first_error: Option<String>,
}

/// The fatal verdicts of every source.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct FatalCount {
    pub count: u64,
}

/// Every source summed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub counts: SourceCounts,
    pub fatal: FatalCount,
    pub router: Option<RouterCounts>,
    pub index: IndexCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_real: Option<IndexCounts>,
}

impl Totals {
    pub fn add(&mut self, s: &SourceReport) {
        self.counts.add(&s.counts);
        self.fatal.count += s.fatal.count;
    }
}

/// One event-plane source.
#[derive(Clone, Debug, Serialize)]
pub struct PlaneReport {
    pub key: String,
    pub url: Option<String>,
    pub subject: Option<String>,
    pub frames: u64,
    pub publishers: usize,
    pub frame_errors: u64,
    pub gaps: u64,
    pub lost_frames: u64,
    pub restarts: u64,
}

/// The fleet's side of the reconciliation.
#[derive(Clone, Debug, Serialize)]
pub struct RouterSection {
    pub relay_policy: &'static str,
    pub kv_block_size: u32,
    pub publishers: Vec<PublisherCounts>,
    pub unknown_workers: Vec<UnknownWorker>,
    pub unattributed_decode_errors: u64,
    pub first_errors: Vec<String>,
    /// Keys under which the router files several engine sources' events.
    pub shared_keys: Vec<SharedKey>,
    /// The one rule ([`kvscope_router::RouterReport::is_clean`]); not printed in the JSON,
    /// whose counts say it.
    #[serde(skip)]
    pub clean: bool,
}

impl CheckReport {
    /// Whether any source had a fatal verdict (exit 3).
    pub fn fatal(&self) -> bool {
        self.totals.fatal.count > 0
    }

    /// Whether the reconciliation found anything but matches (`--fail-on-router-mismatch`).
    pub fn router_mismatch(&self) -> bool {
        self.router.as_ref().is_some_and(|r| !r.clean)
    }

    /// Whether the router's index differs from what the engines hold anywhere
    /// (`--fail-on-index-divergence`).
    pub fn index_divergence(&self) -> bool {
        !self.totals.index.is_aligned() || self.totals.index_real.as_ref().is_some_and(|r| !r.is_aligned())
    }
}
