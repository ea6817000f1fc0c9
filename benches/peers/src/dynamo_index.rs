//! Dynamo 1.6.1's own index (`dynamo-kv-router`: `ConcurrentRadixTreeCompressed` for the device
//! tier, `LowerTierIndexer` for the others, each behind a one-lane `ThreadPoolIndexer`), routed
//! the way `Indexer::apply_event_routed` routes (device to the tree, other tiers to theirs, a
//! clear to all), so that kvscope-index's model can be compared with it event by event.
//!
//! One lane: the standalone indexer runs 4 and pins each worker to one; with one lane every
//! worker shares one lookup table, which is what the model keeps.

use std::collections::{BTreeMap, BTreeSet};

use dynamo_kv_router::indexer::concurrent_radix_tree_compressed::ConcurrentRadixTreeCompressed;
use dynamo_kv_router::indexer::{KvIndexerInterface, LowerTierIndexer, SyncIndexer, ThreadPoolIndexer};
use dynamo_kv_router::protocols as dy;
use kvscope_normalize::StorageTier;
use kvscope_router::{EventData, PlaneTier, RouterEvent};

/// The real index, driven synchronously.
pub struct DynamoOracle {
    rt: tokio::runtime::Runtime,
    device: ThreadPoolIndexer<ConcurrentRadixTreeCompressed>,
    lower: BTreeMap<u8, ThreadPoolIndexer<LowerTierIndexer>>,
    block_size: u32,
}

impl std::fmt::Debug for DynamoOracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoOracle").finish_non_exhaustive()
    }
}

fn tier_of(t: &PlaneTier) -> (u8, dy::StorageTier) {
    match t {
        PlaneTier::HostPinned => (1, dy::StorageTier::HostPinned),
        PlaneTier::Disk => (2, dy::StorageTier::Disk),
        PlaneTier::External => (3, dy::StorageTier::External),
        _ => (0, dy::StorageTier::Device),
    }
}

fn storage_tier(slot: u8) -> StorageTier {
    match slot {
        1 => StorageTier::HostPinned,
        2 => StorageTier::Disk,
        3 => StorageTier::External,
        _ => StorageTier::Device,
    }
}

/// kvscope's RouterEvent as Dynamo's.
pub fn to_dynamo(e: &RouterEvent) -> dy::RouterEvent {
    let data = match &e.event.data {
        EventData::Stored(s) => dy::KvCacheEventData::Stored(dy::KvCacheStoreData {
            parent_hash: s.parent_hash.map(dy::ExternalSequenceBlockHash),
            start_position: None,
            blocks: s
                .blocks
                .iter()
                .map(|b| dy::KvCacheStoredBlockData {
                    block_hash: dy::ExternalSequenceBlockHash(b.block_hash),
                    tokens_hash: dy::LocalBlockHash(b.tokens_hash),
                    mm_extra_info: None,
                })
                .collect(),
        }),
        EventData::Removed(r) => dy::KvCacheEventData::Removed(dy::KvCacheRemoveData {
            block_hashes: r.block_hashes.iter().copied().map(dy::ExternalSequenceBlockHash).collect(),
        }),
        EventData::Cleared => dy::KvCacheEventData::Cleared,
    };
    let event = dy::KvCacheEvent { event_id: e.event.event_id, data, dp_rank: e.event.dp_rank };
    dy::RouterEvent::with_storage_tier(e.worker_id, event, tier_of(&e.storage_tier).1)
}

impl DynamoOracle {
    pub fn new(block_size: u32) -> DynamoOracle {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let device = rt.block_on(async { ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), 1, block_size) });
        DynamoOracle { rt, device, lower: BTreeMap::new(), block_size }
    }

    /// Applies one event and waits until it is applied.
    pub fn apply(&mut self, e: &RouterEvent) {
        let event = to_dynamo(e);
        let (slot, _) = tier_of(&e.storage_tier);
        let is_clear = matches!(e.event.data, EventData::Cleared);
        let block_size = self.block_size;
        let rt = &self.rt;
        if is_clear {
            let _ = rt.block_on(self.device.apply_event_and_wait(event.clone()));
            for t in self.lower.values() {
                let _ = rt.block_on(t.apply_event_and_wait(event.clone()));
            }
        } else if slot == 0 {
            let _ = rt.block_on(self.device.apply_event_and_wait(event));
        } else {
            let t = self
                .lower
                .entry(slot)
                .or_insert_with(|| rt.block_on(async { ThreadPoolIndexer::new(LowerTierIndexer::new(), 1, block_size) }));
            let _ = rt.block_on(t.apply_event_and_wait(event));
        }
    }

    /// The device tree's sweep of stale leaves (`sweep_stale_children`), which the real
    /// indexer runs every 5 minutes on the event thread; here between two applied events.
    pub fn sweep(&mut self) {
        self.device.backend().run_cleanup_task();
    }

    /// `GET /dump`'s blocks, per worker and tier.
    pub fn block_sets(&self) -> BTreeMap<((u64, u32), StorageTier), BTreeSet<u64>> {
        let mut out: BTreeMap<((u64, u32), StorageTier), BTreeSet<u64>> = BTreeMap::new();
        let mut add = |tier: StorageTier, events: Vec<dy::RouterEvent>| {
            for e in events {
                if let dy::KvCacheEventData::Stored(s) = e.event.data {
                    out.entry(((e.worker_id, e.event.dp_rank), tier)).or_default().extend(s.blocks.iter().map(|b| b.block_hash.0));
                }
            }
        };
        add(StorageTier::Device, self.rt.block_on(self.device.dump_events()).expect("dump"));
        for (&slot, t) in &self.lower {
            add(storage_tier(slot), self.rt.block_on(t.dump_events()).expect("dump"));
        }
        out.retain(|_, s| !s.is_empty());
        out
    }

    /// Device-tier scores of a request's tokens hashes, per worker, in blocks.
    pub fn find_matches(&self, tokens: &[u64]) -> BTreeMap<(u64, u32), u32> {
        let seq = tokens.iter().copied().map(dy::LocalBlockHash).collect();
        let scores = self.rt.block_on(self.device.find_matches(seq)).expect("find_matches");
        scores.scores.into_iter().map(|(w, n)| ((w.worker_id, w.dp_rank), n)).collect()
    }
}
