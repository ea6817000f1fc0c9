//! Every source's trees, the verdicts applied to them, and the memory bound.
//!
//! A [`Forest`] pairs with one [`Normalizer`](kvscope_normalize::Normalizer): it is indexed by
//! the normalizer's [`SourceId`]s, and each verdict says which tier its event goes to. The forest
//! applies `Apply` verdicts and ignores the others; it never looks at a medium, a block size or
//! a policy. Two policies side by side means two normalizers and two forests.

use kvscope_normalize::{Apply, SourceId, StorageTier, Verdict, VerdictKind};
use kvscope_wire::{EventBatch, KvEvent};
use serde::Serialize;

use crate::tree::{OrphanPolicy, TierTree, TreeCounters};

/// Limits and behaviour of a [`Forest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ForestConfig {
    /// Live blocks one tier of one source may hold; `None` for no limit.
    pub max_blocks_per_tier: Option<usize>,
    /// Live blocks the whole forest may hold; `None` for no limit.
    pub max_total_blocks: Option<usize>,
    pub orphans: OrphanPolicy,
}

impl ForestConfig {
    /// Estimated bytes per live block (slab node, index entry, growth slack), for
    /// [`ForestConfig::with_max_bytes`].
    pub const BYTES_PER_BLOCK: usize = 96;

    /// No limits.
    pub fn unbounded() -> Self {
        ForestConfig::default()
    }

    /// Bounds the whole forest to about `bytes` of block storage.
    pub fn with_max_bytes(bytes: usize) -> Self {
        ForestConfig { max_total_blocks: Some(bytes / Self::BYTES_PER_BLOCK), ..Default::default() }
    }
}

/// Whether, when and how much the memory bound refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
pub struct LimitReport {
    /// True once any store was cut short: the trees stopped growing and are incomplete from then
    /// on. Raise the limit (or clear the view) to see the rest.
    pub hit: bool,
    /// The source and seq of the first refused store.
    #[serde(skip)]
    pub first_hit: Option<(SourceId, u64)>,
    pub first_hit_seq: Option<u64>,
    /// Stores cut short (events).
    pub refused_stores: u64,
    /// Blocks not inserted.
    pub refused_blocks: u64,
}

/// The four tier trees of one source.
#[derive(Clone, Debug, Default)]
pub struct SourceTrees {
    tiers: [TierTree; 4],
}

impl SourceTrees {
    pub fn tier(&self, tier: StorageTier) -> &TierTree {
        &self.tiers[tier.index()]
    }

    /// Live blocks per tier, in [`StorageTier::ALL`] order.
    pub fn blocks(&self) -> [usize; 4] {
        [0, 1, 2, 3].map(|i| self.tiers[i].len())
    }
}

/// What applying one verdict changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Change {
    pub inserted: u32,
    pub removed: u32,
    pub refused: u32,
}

/// Per source, per tier block trees.
#[derive(Clone, Debug, Default)]
pub struct Forest {
    config: ForestConfig,
    sources: Vec<SourceTrees>,
    total_blocks: usize,
    limit: LimitReport,
}

impl Forest {
    pub fn new(config: ForestConfig) -> Self {
        Forest { config, ..Default::default() }
    }

    pub fn config(&self) -> &ForestConfig {
        &self.config
    }

    /// Live blocks across every source and tier.
    pub fn total_blocks(&self) -> usize {
        self.total_blocks
    }

    pub fn limit(&self) -> &LimitReport {
        &self.limit
    }

    /// Heap bytes held by every tree.
    pub fn approx_bytes(&self) -> usize {
        self.sources.iter().flat_map(|s| s.tiers.iter()).map(TierTree::approx_bytes).sum()
    }

    /// The trees of a source, if anything was ever applied for it.
    pub fn source(&self, id: SourceId) -> Option<&SourceTrees> {
        self.sources.get(id.index())
    }

    /// One tier of one source (empty if nothing was applied there).
    pub fn tree(&self, id: SourceId, tier: StorageTier) -> Option<&TierTree> {
        self.source(id).map(|s| s.tier(tier))
    }

    /// Live blocks of a source per tier, in [`StorageTier::ALL`] order.
    pub fn blocks(&self, id: SourceId) -> [usize; 4] {
        self.source(id).map_or([0; 4], SourceTrees::blocks)
    }

    /// Counters of one tier of one source.
    pub fn counters(&self, id: SourceId, tier: StorageTier) -> TreeCounters {
        self.tree(id, tier).map(|t| *t.counters()).unwrap_or_default()
    }

    fn source_mut(&mut self, id: SourceId) -> &mut SourceTrees {
        if self.sources.len() <= id.index() {
            self.sources.resize_with(id.index() + 1, SourceTrees::default);
        }
        &mut self.sources[id.index()]
    }

    /// Applies every verdict of a batch to the events it was made for (`verdict.event_index`).
    pub fn apply_batch(&mut self, batch: &EventBatch, verdicts: &[Verdict]) {
        for v in verdicts {
            if let Some(event) = batch.events.get(v.event_index as usize) {
                self.apply(v, event, batch.ts);
            }
        }
    }

    /// Applies one verdict to the event it was made for; skip and fatal verdicts change nothing.
    /// `time` is stored on new blocks (the batch timestamp, seconds).
    pub fn apply(&mut self, verdict: &Verdict, event: &KvEvent, time: f64) -> Change {
        debug_assert_eq!(verdict.event_type, event.event_type(), "a verdict applied to another event");
        let VerdictKind::Apply(action) = verdict.kind else { return Change::default() };
        let tier = verdict.tier.unwrap_or(StorageTier::Device);
        match (action, event) {
            (Apply::Store { blocks }, KvEvent::BlockStored(s)) => {
                let per_tier = self.config.max_blocks_per_tier.unwrap_or(usize::MAX);
                let total_room = self.config.max_total_blocks.map_or(usize::MAX, |m| m.saturating_sub(self.total_blocks));
                let orphans = self.config.orphans;
                let seq = verdict.seq;
                let tree = &mut self.source_mut(verdict.source).tiers[tier.index()];
                let room = per_tier.saturating_sub(tree.len()).min(total_room);
                // The leading blocks the policy published: every hash, except under a policy that
                // publishes only the blocks whose tokens are there (dynamo-1.6.1).
                let published = &s.block_hashes[..(blocks as usize).min(s.block_hashes.len())];
                let r = tree.store(published, s.parent_block_hash.map(|h| h.0), seq, time, room, orphans);
                self.total_blocks += r.inserted as usize;
                if r.refused > 0 {
                    self.limit.refused_stores += 1;
                    self.limit.refused_blocks += u64::from(r.refused);
                    if !self.limit.hit {
                        self.limit.hit = true;
                        self.limit.first_hit = Some((verdict.source, seq));
                        self.limit.first_hit_seq = Some(seq);
                    }
                }
                Change { inserted: r.inserted, removed: 0, refused: r.refused }
            }
            (Apply::Remove { .. }, KvEvent::BlockRemoved(r)) => {
                let tree = &mut self.source_mut(verdict.source).tiers[tier.index()];
                let removed = tree.remove(&r.block_hashes);
                self.total_blocks -= removed as usize;
                Change { removed, ..Default::default() }
            }
            (Apply::Clear, _) => {
                let trees = self.source_mut(verdict.source);
                let removed: usize = trees.tiers.iter().map(TierTree::len).sum();
                trees.tiers.iter_mut().for_each(TierTree::clear);
                self.total_blocks -= removed;
                Change { removed: removed as u32, ..Default::default() }
            }
            // A self-referencing store: a remove of nothing. Any other pairing is a caller bug
            // caught by the debug assertion above.
            _ => Change::default(),
        }
    }
}
