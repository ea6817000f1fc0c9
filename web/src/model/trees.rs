//! The tier trees of the policy chosen for them (B by default), over `kvscope-tiers`.
//!
//! TODO(web): this is a stand-in that only counts blocks per (source, tier) until
//! `kvscope-tiers` publishes its API; the views use the interface below, which stays.

use std::collections::HashMap;

use kvscope_normalize::{Apply, StorageTier, VerdictKind as NKind};
use kvscope_wire::KvEvent;

use super::policy_run::Outcome;

/// One block node as the views show it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub hash: u64,
    pub parent: Option<u64>,
    pub block_size: Option<u32>,
    pub seq: u64,
    /// Blocks in the subtree rooted here, itself included.
    pub subtree_blocks: u64,
    pub depth: u32,
}

/// Summary of one (source, tier) tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeSummary {
    pub blocks: u64,
    pub roots: u64,
    pub max_depth: u32,
    pub parent_block_not_found: u64,
    pub block_not_found: u64,
    pub duplicate_store: u64,
}

/// Every tree of the page.
#[derive(Debug, Default)]
pub struct Trees {
    bound_bytes: usize,
    blocks: HashMap<(u32, StorageTier), u64>,
    bound_reached: bool,
}

impl Trees {
    pub fn new(bound_bytes: usize) -> Trees {
        Trees { bound_bytes, ..Default::default() }
    }

    pub fn apply(&mut self, source: u32, _event: &KvEvent, outcome: &Outcome, _seq: u64) {
        let _ = self.bound_bytes;
        let v = &outcome.verdict;
        match v.kind {
            NKind::Apply(Apply::Store { blocks }) => {
                *self.blocks.entry((source, v.tier.unwrap_or(StorageTier::Device))).or_default() += u64::from(blocks)
            }
            NKind::Apply(Apply::Remove { blocks }) => {
                let e = self.blocks.entry((source, v.tier.unwrap_or(StorageTier::Device))).or_default();
                *e = e.saturating_sub(u64::from(blocks));
            }
            NKind::Apply(Apply::Clear) => self.blocks.retain(|(s, _), _| *s != source),
            _ => {}
        }
    }

    pub fn total_blocks(&self) -> u64 {
        self.blocks.values().sum()
    }

    pub fn bound_reached(&self) -> bool {
        self.bound_reached
    }

    /// Blocks in one tree.
    pub fn blocks(&self, source: u32, tier: StorageTier) -> u64 {
        self.blocks.get(&(source, tier)).copied().unwrap_or(0)
    }

    pub fn summary(&self, source: u32, tier: StorageTier) -> TreeSummary {
        TreeSummary { blocks: self.blocks(source, tier), ..Default::default() }
    }

    /// Children of `node` (roots when `None`), largest subtree first, at most `limit`, and how
    /// many were left out with their blocks.
    pub fn children(&self, _source: u32, _tier: StorageTier, _node: Option<u64>, _limit: usize) -> (Vec<NodeInfo>, u64, u64) {
        (Vec::new(), 0, 0)
    }

    pub fn node(&self, _source: u32, _tier: StorageTier, _hash: u64) -> Option<NodeInfo> {
        None
    }

    /// Every tree holding `hash`.
    pub fn search(&self, _hash: u64) -> Vec<(u32, StorageTier, NodeInfo)> {
        Vec::new()
    }
}
