//! A lower tier of Dynamo 1.6.1's index (`host_pinned`, `disk`, `external`): not a tree but a
//! set of continuation edges `(parent block_hash | none, tokens_hash) -> child block_hash`,
//! each with its owners, and per owner `block_hash -> edge` (`LowerTierIndexer`, dynamo-kv-router
//! 1.6.1 `indexer/lower_tier.rs`).
//!
//! - A store walks its blocks from the event's parent, which need not be held anywhere (lower
//!   tiers never drop a store for its parent). It stops at the first block the owner already
//!   holds under another edge, or whose edge already leads to another child (the first writer
//!   of an edge wins, across workers).
//! - A removal drops the owner from each named block's edge; children stay (they become
//!   unreachable from the device match, not removed).
//! - A clear drops every block of the owner.

use std::collections::BTreeMap;

use crate::FastMap;

use super::WorkerKey;
use super::device::Block;

type EdgeKey = (Option<u64>, u64);

#[derive(Clone, Debug)]
struct Edge {
    child: u64,
    owners: Vec<WorkerKey>,
}

/// One lower tier.
#[derive(Clone, Debug, Default)]
pub struct LowerTier {
    edges: FastMap<EdgeKey, Edge>,
    owners: FastMap<WorkerKey, FastMap<u64, EdgeKey>>,
}

impl LowerTier {
    pub fn store(&mut self, w: WorkerKey, parent: Option<u64>, blocks: &[Block]) {
        let mut parent = parent;
        let map = self.owners.entry(w).or_default();
        for b in blocks {
            let key = (parent, b.tokens_hash);
            if map.get(&b.block_hash).is_some_and(|k| *k != key) {
                break;
            }
            let inserted = match self.edges.get_mut(&key) {
                Some(e) if e.child != b.block_hash => false,
                Some(e) => {
                    if !e.owners.contains(&w) {
                        e.owners.push(w);
                    }
                    true
                }
                None => {
                    self.edges.insert(key, Edge { child: b.block_hash, owners: vec![w] });
                    true
                }
            };
            if !inserted {
                break;
            }
            map.insert(b.block_hash, key);
            parent = Some(b.block_hash);
        }
    }

    /// The child the edge for `tokens_hash` below `parent` leads to, when it is another hash
    /// than `block_hash`: its first writer's, which stopped this store there.
    pub fn taken_by(&self, parent: Option<u64>, tokens_hash: u64, block_hash: u64) -> Option<u64> {
        self.edges.get(&(parent, tokens_hash)).map(|e| e.child).filter(|&c| c != block_hash)
    }

    pub fn remove(&mut self, w: WorkerKey, hashes: &[u64]) {
        let Some(map) = self.owners.get_mut(&w) else { return };
        for h in hashes {
            if let Some(key) = map.remove(h) {
                Self::unown(&mut self.edges, key, w);
            }
        }
        if map.is_empty() {
            self.owners.remove(&w);
        }
    }

    fn unown(edges: &mut FastMap<EdgeKey, Edge>, key: EdgeKey, w: WorkerKey) {
        if let Some(e) = edges.get_mut(&key) {
            e.owners.retain(|&o| o != w);
            if e.owners.is_empty() {
                edges.remove(&key);
            }
        }
    }

    /// Drops every block of each owner `matches` accepts.
    pub fn erase(&mut self, matches: impl Fn(WorkerKey) -> bool) {
        let gone: Vec<WorkerKey> = self.owners.keys().copied().filter(|&w| matches(w)).collect();
        for w in gone {
            if let Some(map) = self.owners.remove(&w) {
                for key in map.into_values() {
                    Self::unown(&mut self.edges, key, w);
                }
            }
        }
    }

    /// Per owner, the blocks it holds with the parent of their edge (what `/dump` lists).
    pub fn dump(&self) -> BTreeMap<WorkerKey, Vec<(Option<u64>, Block)>> {
        self.owners
            .iter()
            .map(|(&w, map)| {
                (w, map.iter().map(|(&hash, &(parent, tokens))| (parent, Block { tokens_hash: tokens, block_hash: hash })).collect())
            })
            .collect()
    }

    pub fn holds(&self, w: WorkerKey, hash: u64) -> bool {
        self.owners.get(&w).is_some_and(|m| m.contains_key(&hash))
    }

    /// How far the owner's chain continues from `from` (a device match's last block hash, or
    /// `None` at the root) along `tokens`: the blocks it holds in a row.
    pub fn continue_from(&self, w: WorkerKey, from: Option<u64>, tokens: &[u64]) -> (u32, Option<u64>) {
        let (mut n, mut cur) = (0, from);
        for &t in tokens {
            match self.edges.get(&(cur, t)) {
                Some(e) if e.owners.contains(&w) => {
                    n += 1;
                    cur = Some(e.child);
                }
                _ => break,
            }
        }
        (n, cur)
    }

    pub fn approx_bytes(&self) -> usize {
        self.edges.capacity() * (24 + 8 + 24 + 1) + self.owners.values().map(|m| m.capacity() * (8 + 24 + 1)).sum::<usize>()
    }
}
