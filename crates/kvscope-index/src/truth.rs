//! What an engine holds, per worker, rank and tier: every block it announced (the stores its
//! main attention groups published, at any block size) and has not evicted since, counting
//! copies (vLLM can hold two blocks with one hash and announces each), with each block's parent
//! and tokens hash, so that chains can be walked from their root as a router scores them.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use crate::FastMap;

use kvscope_normalize::StorageTier;

use crate::dynamo::{Block, WorkerKey};

/// One block the engine holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthBlock {
    /// The parent its first store named (the previous block of the store, or the store's parent).
    pub parent: Option<u64>,
    pub tokens_hash: u64,
    /// Stores minus removals: the engine holds the block while this is above 0.
    pub copies: u32,
}

/// Every engine's blocks.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    tiers: FastMap<(WorkerKey, StorageTier), FastMap<u64, TruthBlock>>,
    blocks: usize,
}

impl Truth {
    /// Blocks held, every worker and tier.
    pub fn len(&self) -> usize {
        self.blocks
    }

    pub fn is_empty(&self) -> bool {
        self.blocks == 0
    }

    pub fn store(&mut self, w: WorkerKey, tier: StorageTier, parent: Option<u64>, blocks: &[Block]) {
        let set = self.tiers.entry((w, tier)).or_default();
        let mut parent = parent;
        for b in blocks {
            let e = set.entry(b.block_hash).or_insert_with(|| {
                self.blocks += 1;
                TruthBlock { parent, tokens_hash: b.tokens_hash, copies: 0 }
            });
            e.copies += 1;
            parent = Some(b.block_hash);
        }
    }

    /// Removes one copy of each hash; returns, per hash the engine held, whether it still holds
    /// another copy.
    pub fn remove(&mut self, w: WorkerKey, tier: StorageTier, hashes: &[u64]) -> SmallVec<[(u64, bool); 8]> {
        let Some(set) = self.tiers.get_mut(&(w, tier)) else { return SmallVec::new() };
        let mut out = SmallVec::new();
        for &h in hashes {
            if let Some(b) = set.get_mut(&h) {
                b.copies -= 1;
                let held = b.copies > 0;
                if !held {
                    set.remove(&h);
                    self.blocks -= 1;
                }
                out.push((h, held));
            }
        }
        out
    }

    /// Empties every tier of the worker and rank (a clear, or a restart).
    pub fn clear(&mut self, w: WorkerKey) {
        for (_, set) in self.tiers.iter_mut().filter(|((k, _), _)| *k == w) {
            self.blocks -= set.len();
            set.clear();
        }
    }

    pub fn get(&self, w: WorkerKey, tier: StorageTier, h: u64) -> Option<&TruthBlock> {
        self.tiers.get(&(w, tier))?.get(&h)
    }

    pub fn holds(&self, w: WorkerKey, tier: StorageTier, h: u64) -> bool {
        self.get(w, tier, h).is_some()
    }

    /// Every (worker, tier) with blocks, and its blocks.
    pub fn sets(&self) -> impl Iterator<Item = (&(WorkerKey, StorageTier), &FastMap<u64, TruthBlock>)> {
        self.tiers.iter().filter(|(_, s)| !s.is_empty())
    }

    /// One worker and tier's blocks, ordered.
    pub fn set(&self, w: WorkerKey, tier: StorageTier) -> BTreeMap<u64, TruthBlock> {
        self.tiers.get(&(w, tier)).map(|s| s.iter().map(|(&h, &b)| (h, b)).collect()).unwrap_or_default()
    }

    pub fn approx_bytes(&self) -> usize {
        self.tiers.values().map(|s| s.capacity() * (8 + std::mem::size_of::<TruthBlock>() + 1)).sum()
    }
}
