//! Dynamo 1.6.1's index, as its standalone indexer (`python -m dynamo.indexer`) and its router
//! hold it: the device tier's compressed radix tree ([`device`]) and one continuation-edge set
//! per lower tier ([`lower`]), fed `RouterEvent`s one at a time (`Indexer::apply_event_routed`,
//! `services/indexer/backend.rs`): a device event goes to the tree, any other tier's to that
//! tier, and a clear to all of them.

pub mod device;
pub mod lower;

use std::collections::{BTreeMap, BTreeSet};

use kvscope_normalize::StorageTier;
use kvscope_router::{EventData, PlaneTier, RouterEvent};

pub use device::{Block, DeviceTree, Scores};
pub use lower::LowerTier;

/// A worker and rank, as the index keys everything: `(worker_id, dp_rank)`.
pub type WorkerKey = (u64, u32);

/// Blocks per worker and tier, as `/dump` lists them.
pub type BlockSets = BTreeMap<(WorkerKey, StorageTier), BTreeSet<u64>>;

/// Why the index dropped a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreError {
    /// The parent is not in the worker's lookup ("Failed to find parent block; skipping store
    /// operation"): the whole store is dropped.
    ParentNotFound,
    /// The parent is in the lookup, but the worker no longer covers it ("Stale parent: worker
    /// no longer covers parent_hash; rejecting store").
    ParentNotCovered,
    /// The walk below a node whose blocks are another worker's could not go on ("Stale parent
    /// hash could not be resolved; rejecting store"): the blocks before it stay applied.
    StaleParent,
}

impl StoreError {
    /// The indexer's own log line.
    pub fn log_line(self) -> &'static str {
        match self {
            StoreError::ParentNotFound => "Failed to find parent block; skipping store operation",
            StoreError::ParentNotCovered => "Stale parent: worker no longer covers parent_hash; rejecting store",
            StoreError::StaleParent => "Stale parent hash could not be resolved; rejecting store",
        }
    }
}

/// How often the real tree sweeps its stale leaves: `CLEANUP_INTERVAL_MS`
/// (dynamo-kv-router 1.6.1, `cleanup.rs`), checked as each event is queued.
pub const SWEEP_INTERVAL_SECS: f64 = 300.0;

/// Dynamo 1.6.1's whole index.
#[derive(Clone, Debug, Default)]
pub struct DynamoIndex {
    device: DeviceTree,
    /// `host_pinned`, `disk`, `external`, allocated on their first event.
    lower: [Option<LowerTier>; 3],
    /// The stream's time of the index's start or last sweep, in seconds.
    swept_at: Option<f64>,
    sweeps: u64,
}

fn lower_slot(tier: StorageTier) -> Option<usize> {
    match tier {
        StorageTier::Device => None,
        StorageTier::HostPinned => Some(0),
        StorageTier::Disk => Some(1),
        StorageTier::External => Some(2),
    }
}

/// The storage tier a plane tier names, if the index knows it.
pub fn storage_tier(t: &PlaneTier) -> Option<StorageTier> {
    match t {
        PlaneTier::Device => Some(StorageTier::Device),
        PlaneTier::HostPinned => Some(StorageTier::HostPinned),
        PlaneTier::Disk => Some(StorageTier::Disk),
        PlaneTier::External => Some(StorageTier::External),
        PlaneTier::Other(_) => None,
    }
}

impl DynamoIndex {
    pub fn new() -> DynamoIndex {
        DynamoIndex::default()
    }

    pub fn device(&self) -> &DeviceTree {
        &self.device
    }

    pub fn lower(&self, tier: StorageTier) -> Option<&LowerTier> {
        lower_slot(tier).and_then(|i| self.lower[i].as_ref())
    }

    /// Applies one RouterEvent. A tier the index does not know (a newer Dynamo's) is ignored,
    /// as Dynamo 1.6.1's decoder would reject it.
    pub fn apply(&mut self, e: &RouterEvent) -> Result<(), StoreError> {
        let w = (e.worker_id, e.event.dp_rank);
        if matches!(e.event.data, EventData::Cleared) {
            self.clear(w);
            return Ok(());
        }
        let Some(tier) = storage_tier(&e.storage_tier) else { return Ok(()) };
        match (lower_slot(tier), &e.event.data) {
            (None, EventData::Stored(s)) => self.device.store(w, s.parent_hash, &blocks(s)),
            (None, EventData::Removed(r)) => {
                self.device.remove(w, &r.block_hashes);
                Ok(())
            }
            (Some(i), EventData::Stored(s)) => {
                self.lower[i].get_or_insert_with(LowerTier::default).store(w, s.parent_hash, &blocks(s));
                Ok(())
            }
            (Some(i), EventData::Removed(r)) => {
                self.lower[i].get_or_insert_with(LowerTier::default).remove(w, &r.block_hashes);
                Ok(())
            }
            (_, EventData::Cleared) => Ok(()),
        }
    }

    /// The stream's clock reached `now` (seconds, the batches' publish times): the device
    /// tree sweeps once [`SWEEP_INTERVAL_SECS`] have passed since the index began or last swept.
    /// The real clock is the indexer's own, started with it, which the model cannot know; the
    /// stream's is the nearest it has, so its sweeps fall within one interval of the real one's,
    /// not on them. A clock that goes back (another engine's) or is not a time is ignored.
    pub fn tick(&mut self, now: f64) {
        if !self.tick_changes(now) {
            return;
        }
        if self.swept_at.is_some() {
            self.sweep();
        }
        self.swept_at = Some(now);
    }

    /// Whether [`DynamoIndex::tick`] at `now` would change the index: start its clock, or sweep.
    pub fn tick_changes(&self, now: f64) -> bool {
        now.is_finite() && self.swept_at.is_none_or(|at| now - at >= SWEEP_INTERVAL_SECS)
    }

    /// The device tree's sweep of stale leaves ([`DeviceTree::sweep`]), now.
    pub fn sweep(&mut self) {
        self.device.sweep();
        self.sweeps += 1;
    }

    /// Sweeps of the device tree so far.
    pub fn sweeps(&self) -> u64 {
        self.sweeps
    }

    /// `AllBlocksCleared` of one worker and rank: every tier.
    pub fn clear(&mut self, w: WorkerKey) {
        self.device.erase(|x| x == w);
        for t in self.lower.iter_mut().flatten() {
            t.erase(|x| x == w);
        }
    }

    /// `POST /unregister` of a worker: every rank, every tier.
    pub fn remove_worker(&mut self, worker_id: u64) {
        self.device.erase(|x| x.0 == worker_id);
        for t in self.lower.iter_mut().flatten() {
            t.erase(|x| x.0 == worker_id);
        }
    }

    /// What `GET /dump` lists, as block sets per worker and tier.
    pub fn block_sets(&self) -> BlockSets {
        let mut out = BlockSets::new();
        for (w, blocks) in self.device.dump() {
            out.entry((w, StorageTier::Device)).or_default().extend(blocks.iter().map(|(_, b)| b.block_hash));
        }
        for tier in [StorageTier::HostPinned, StorageTier::Disk, StorageTier::External] {
            if let Some(t) = self.lower(tier) {
                for (w, blocks) in t.dump() {
                    out.entry((w, tier)).or_default().extend(blocks.iter().map(|(_, b)| b.block_hash));
                }
            }
        }
        out.retain(|_, s| !s.is_empty());
        out
    }

    /// Device-tier scores of a request (its tokens hashes), per worker, in blocks.
    pub fn find_matches(&self, tokens: &[u64]) -> Scores {
        self.device.find_matches(tokens)
    }

    pub fn approx_bytes(&self) -> usize {
        self.device.approx_bytes() + self.lower.iter().flatten().map(LowerTier::approx_bytes).sum::<usize>()
    }
}

/// A store's blocks as the index (and the model's truth) keeps them (a store is a few blocks:
/// no allocation for them).
pub(crate) fn blocks(s: &kvscope_router::StoredData) -> smallvec::SmallVec<[Block; 8]> {
    s.blocks.iter().map(|b| Block { tokens_hash: b.tokens_hash, block_hash: b.block_hash }).collect()
}
