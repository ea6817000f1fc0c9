//! The tier trees of one policy, over `kvscope-tiers`: one [`Forest`] fed with that policy's
//! verdicts. The model keeps one per policy, so A's and B's trees sit side by side.
//!
//! The forest is indexed by the normalizer's source ids; this wrapper maps the model's source
//! indices onto them, so views ask by model source index and tier. It also keeps the first
//! events behind each consistency counter ([`Consistency`]), so a counter on the page opens the
//! events that moved it.

use std::collections::BTreeMap;

use kvscope_normalize::{SourceId, StorageTier};
use kvscope_tiers::{BlockInfo, Consistency, Forest, ForestConfig, IcicleNode, TreeCounters, TreeSummary};
use kvscope_wire::KvEvent;

use super::policy_run::Classified;

/// Event ids kept per (source, tier, counter): enough to step through, bounded.
pub const COUNTER_EVENTS_KEPT: usize = 64;

/// Every tree of one policy.
#[derive(Debug)]
pub struct Trees {
    forest: Forest,
    ids: Vec<Option<SourceId>>,
    /// The first events that moved each consistency counter, per (source, tier).
    counter_events: BTreeMap<(u32, StorageTier, Consistency), Vec<u64>>,
}

impl Default for Trees {
    fn default() -> Self {
        Trees::new(usize::MAX)
    }
}

impl Trees {
    /// Trees bounded to about `bound_bytes` of block storage; past it they stop growing and
    /// [`Trees::bound_reached`] says so.
    pub fn new(bound_bytes: usize) -> Trees {
        Trees { forest: Forest::new(ForestConfig::with_max_bytes(bound_bytes)), ids: Vec::new(), counter_events: BTreeMap::new() }
    }

    /// Applies one verdict of this policy to its event (model event id `event_id`).
    pub fn apply(&mut self, source: u32, event: &KvEvent, outcome: &Classified, time_s: f64, event_id: u64) {
        let i = source as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        let id = outcome.verdict.source;
        self.ids[i] = Some(id);
        let Some(tier) = outcome.verdict.tier else {
            self.forest.apply(&outcome.verdict, event, time_s);
            return;
        };
        let before: TreeCounters = self.forest.counters(id, tier);
        self.forest.apply(&outcome.verdict, event, time_s);
        let after = self.forest.counters(id, tier);
        for k in Consistency::ALL {
            if k.of(&after) > k.of(&before) {
                let kept = self.counter_events.entry((source, tier, k)).or_default();
                if kept.len() < COUNTER_EVENTS_KEPT {
                    kept.push(event_id);
                }
            }
        }
    }

    /// The first events (at most [`COUNTER_EVENTS_KEPT`]) that moved `counter` on this tree.
    pub fn counter_events(&self, source: u32, tier: StorageTier, counter: Consistency) -> &[u64] {
        self.counter_events.get(&(source, tier, counter)).map_or(&[], Vec::as_slice)
    }

    /// The consistency and bookkeeping counters of one tree.
    pub fn counters(&self, source: u32, tier: StorageTier) -> TreeCounters {
        self.id(source).map_or_else(TreeCounters::default, |id| self.forest.counters(id, tier))
    }

    fn id(&self, source: u32) -> Option<SourceId> {
        self.ids.get(source as usize).copied().flatten()
    }

    pub fn total_blocks(&self) -> u64 {
        self.forest.total_blocks() as u64
    }

    pub fn approx_bytes(&self) -> usize {
        self.forest.approx_bytes()
    }

    pub fn bound_reached(&self) -> bool {
        self.forest.limit().hit
    }

    /// Blocks refused by the bound.
    pub fn refused_blocks(&self) -> u64 {
        self.forest.limit().refused_blocks
    }

    /// Blocks in one tree.
    pub fn blocks(&self, source: u32, tier: StorageTier) -> u64 {
        self.id(source).map_or(0, |id| self.forest.blocks(id)[tier.index()] as u64)
    }

    /// Blocks, roots, depth, largest subtrees and counters of one tree.
    pub fn summary(&self, source: u32, tier: StorageTier) -> Option<TreeSummary> {
        let id = self.id(source)?;
        Some(self.forest.tree(id, tier)?.summary(8))
    }

    /// An icicle drill-down below `root` (`None`: the whole tier), largest children first.
    pub fn subtree(&self, source: u32, tier: StorageTier, root: Option<u64>, depth: u32, width: usize) -> Option<Vec<IcicleNode>> {
        let id = self.id(source)?;
        self.forest.tree(id, tier)?.subtree(root, depth, width)
    }

    pub fn block(&self, source: u32, tier: StorageTier, hash: u64) -> Option<BlockInfo> {
        self.forest.tree(self.id(source)?, tier)?.block(hash)
    }

    /// Every (source, tier) whose tree holds `hash`.
    pub fn search(&self, hash: u64) -> Vec<(u32, StorageTier, BlockInfo)> {
        let mut out = Vec::new();
        for (i, id) in self.ids.iter().enumerate() {
            let Some(id) = id else { continue };
            for tier in StorageTier::ALL {
                if let Some(b) = self.forest.tree(*id, tier).and_then(|t| t.block(hash)) {
                    out.push((i as u32, tier, b));
                }
            }
        }
        out
    }
}
