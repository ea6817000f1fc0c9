//! The tier trees of the policy chosen for them (B, the candidate, by default), over
//! `kvscope-tiers`: one [`Forest`] fed with that policy's verdicts.
//!
//! The forest is indexed by the normalizer's source ids; this wrapper maps the model's source
//! indices onto them, so views ask by model source index and tier.

use kvscope_normalize::{SourceId, StorageTier};
use kvscope_tiers::{BlockInfo, Forest, ForestConfig, IcicleNode, TreeSummary};
use kvscope_wire::KvEvent;

use super::policy_run::Classified;

/// Every tree of the page.
#[derive(Debug)]
pub struct Trees {
    forest: Forest,
    ids: Vec<Option<SourceId>>,
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
        Trees { forest: Forest::new(ForestConfig::with_max_bytes(bound_bytes)), ids: Vec::new() }
    }

    /// Applies one verdict of the tree policy to its event.
    pub fn apply(&mut self, source: u32, event: &KvEvent, outcome: &Classified, time_s: f64) {
        let i = source as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        self.ids[i] = Some(outcome.verdict.source);
        self.forest.apply(&outcome.verdict, event, time_s);
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
