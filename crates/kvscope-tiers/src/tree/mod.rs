//! One tier of one source: block hash -> node {parent, children, seq, time}.
//!
//! Layout, for a million live blocks per worker: nodes live in one `Vec` (a slab with a free
//! list), a hash map indexes them by block hash, and the tree links are slot indices: parent,
//! first child, next and previous sibling. A node therefore costs one slab entry and one map
//! entry, and no heap allocation of its own. Rejected alternative: a `Vec` of children per node,
//! one allocation per block with a child and an O(children) removal.
//!
//! Links only ever point at nodes that existed when the link was made, and an existing node is
//! never re-parented (a duplicate store keeps the first parent; a removal turns the children into
//! roots), so the structure cannot form a cycle whatever the stream says.
//!
//! This module keeps the links (store, remove, clear); `shape.rs` reads them for views (the
//! one-walk summary and the icicle drill-down).

use std::collections::HashMap;

use serde::Serialize;

use crate::hash::BuildBlockHasher;

mod shape;

pub use shape::{IcicleNode, SubtreeSize, TreeSummary};

/// No slot.
const NIL: u32 = u32::MAX;

/// What to do with a store whose parent is not in the tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OrphanPolicy {
    /// Insert its blocks as a new root and count `parent_block_not_found`. The default: a viewer
    /// that connects to a running engine sees every chain start mid-way, and dropping those
    /// stores would leave the trees empty for every request already in flight.
    #[default]
    KeepAsRoot,
    /// Drop the store and count `parent_block_not_found`, as a radix-tree indexer does.
    Refuse,
}

/// Consistency counters of one tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
pub struct TreeCounters {
    /// Stores applied (events).
    pub stores_applied: u64,
    /// Removes applied (events).
    pub removes_applied: u64,
    /// Blocks inserted.
    pub blocks_inserted: u64,
    /// Blocks removed.
    pub blocks_removed: u64,
    /// Stores whose parent hash was not in this tier. Non-zero is normal for a viewer that joined
    /// a running engine; growing steadily means stores are lost or filed on another tier.
    pub parent_block_not_found: u64,
    /// Removed hashes that were not in this tier (per hash). Growing steadily means removals go
    /// to a tier their stores did not, or stores were skipped.
    pub block_not_found: u64,
    /// Stores that changed nothing: every block was already present.
    pub duplicate_store: u64,
    /// Blocks already present when stored (per hash).
    pub duplicate_blocks: u64,
    /// Children turned into roots because their parent was removed.
    pub orphaned_by_remove: u64,
    /// Clears that wiped this tier.
    pub clears: u64,
    /// Stores cut short by the memory bound (events).
    pub refused_stores: u64,
    /// Blocks not inserted because of the memory bound.
    pub refused_blocks: u64,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    hash: u64,
    /// The parent hash the store named, kept when the parent is missing or was removed, so a
    /// hover can still say what the engine claimed.
    parent_hash: u64,
    has_parent_hash: bool,
    parent: u32,
    first_child: u32,
    next_sibling: u32,
    prev_sibling: u32,
    seq: u64,
    time: f64,
}

/// A read-only view of one block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockInfo {
    pub hash: u64,
    /// The parent hash its store named, if any.
    pub parent_hash: Option<u64>,
    /// True when that parent is in the tier (false for roots).
    pub parent_present: bool,
    pub children: usize,
    /// Seq of the batch that stored it.
    pub seq: u64,
    /// Time the caller gave when applying (the batch timestamp, seconds).
    pub time: f64,
}

/// What one store did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StoreResult {
    pub inserted: u32,
    pub already_present: u32,
    /// Blocks not inserted because of the memory bound.
    pub refused: u32,
    pub parent_missing: bool,
    /// The whole store was dropped for its missing parent ([`OrphanPolicy::Refuse`]).
    pub dropped_orphan: bool,
}

/// A block hash as the tree stores it: plain `u64`s and `kvscope_wire::BlockHash`es alike.
pub trait HashValue: Copy {
    fn value(self) -> u64;
}

impl HashValue for u64 {
    fn value(self) -> u64 {
        self
    }
}

impl HashValue for kvscope_wire::BlockHash {
    fn value(self) -> u64 {
        self.0
    }
}

#[derive(Clone, Debug)]
pub struct TierTree {
    index: HashMap<u64, u32, BuildBlockHasher>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    first_root: u32,
    roots: usize,
    counters: TreeCounters,
}

impl Default for TierTree {
    fn default() -> Self {
        TierTree::new()
    }
}

impl TierTree {
    pub fn new() -> Self {
        TierTree {
            index: HashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            first_root: NIL,
            roots: 0,
            counters: TreeCounters::default(),
        }
    }

    /// Live blocks.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn roots(&self) -> usize {
        self.roots
    }

    pub fn counters(&self) -> &TreeCounters {
        &self.counters
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// Heap bytes held (slab, free list and index, by capacity).
    pub fn approx_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.free.capacity() * 4
            // hashbrown: key + value + one control byte per bucket.
            + self.index.capacity() * (8 + 4 + 1)
    }

    /// One block, for a hover.
    pub fn block(&self, hash: u64) -> Option<BlockInfo> {
        self.index.get(&hash).map(|&slot| self.info(slot))
    }

    fn info(&self, slot: u32) -> BlockInfo {
        let n = &self.nodes[slot as usize];
        BlockInfo {
            hash: n.hash,
            parent_hash: n.has_parent_hash.then_some(n.parent_hash),
            parent_present: n.parent != NIL,
            children: self.child_slots(Some(slot)).count(),
            seq: n.seq,
            time: n.time,
        }
    }

    /// The children of a block (or the roots, for `None`), most recent first.
    pub fn children(&self, hash: Option<u64>) -> Vec<BlockInfo> {
        let slot = match hash {
            Some(h) => match self.index.get(&h) {
                Some(&s) => Some(s),
                None => return Vec::new(),
            },
            None => None,
        };
        self.child_slots(slot).map(|s| self.info(s)).collect()
    }

    fn child_slots(&self, parent: Option<u32>) -> impl Iterator<Item = u32> + '_ {
        let mut cur = match parent {
            Some(p) => self.nodes[p as usize].first_child,
            None => self.first_root,
        };
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let s = cur;
                cur = self.nodes[s as usize].next_sibling;
                s
            })
        })
    }

    /// Puts `slot` at the front of `parent`'s children (or of the roots).
    fn link(&mut self, slot: u32, parent: u32) {
        let head = if parent == NIL { self.first_root } else { self.nodes[parent as usize].first_child };
        {
            let n = &mut self.nodes[slot as usize];
            n.parent = parent;
            n.prev_sibling = NIL;
            n.next_sibling = head;
        }
        if head != NIL {
            self.nodes[head as usize].prev_sibling = slot;
        }
        if parent == NIL {
            self.first_root = slot;
            self.roots += 1;
        } else {
            self.nodes[parent as usize].first_child = slot;
        }
    }

    /// Takes `slot` out of its sibling list.
    fn unlink(&mut self, slot: u32) {
        let Node { parent, prev_sibling: prev, next_sibling: next, .. } = self.nodes[slot as usize];
        if prev != NIL {
            self.nodes[prev as usize].next_sibling = next;
        } else if parent == NIL {
            self.first_root = next;
        } else {
            self.nodes[parent as usize].first_child = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev_sibling = prev;
        }
        if parent == NIL {
            self.roots -= 1;
        }
    }

    /// Inserts `hashes` as a chain below `parent`. At most `capacity` new blocks are inserted;
    /// the rest of the chain is refused (and counted) once the bound is reached.
    pub fn store<H: HashValue>(
        &mut self,
        hashes: &[H],
        parent: Option<u64>,
        seq: u64,
        time: f64,
        capacity: usize,
        orphans: OrphanPolicy,
    ) -> StoreResult {
        let mut result = StoreResult::default();
        let mut cur = NIL;
        if let Some(p) = parent {
            match self.index.get(&p) {
                Some(&slot) => cur = slot,
                None => {
                    result.parent_missing = true;
                    self.counters.parent_block_not_found += 1;
                    if orphans == OrphanPolicy::Refuse {
                        result.dropped_orphan = true;
                        return result;
                    }
                }
            }
        }
        let mut declared_parent = parent;
        let mut room = capacity;
        for (i, hash) in hashes.iter().map(|h| h.value()).enumerate() {
            if let Some(&slot) = self.index.get(&hash) {
                result.already_present += 1;
                cur = slot;
                declared_parent = Some(hash);
                continue;
            }
            if room == 0 {
                // Everything after this block would hang below it: refuse the rest of the chain.
                let rest = hashes[i..].iter().filter(|h| !self.index.contains_key(&h.value())).count() as u32;
                result.refused += rest;
                self.counters.refused_stores += 1;
                self.counters.refused_blocks += u64::from(rest);
                break;
            }
            room -= 1;
            let node = Node {
                hash,
                parent_hash: declared_parent.unwrap_or(0),
                has_parent_hash: declared_parent.is_some(),
                parent: NIL,
                first_child: NIL,
                next_sibling: NIL,
                prev_sibling: NIL,
                seq,
                time,
            };
            let slot = match self.free.pop() {
                Some(s) => {
                    self.nodes[s as usize] = node;
                    s
                }
                None => {
                    self.nodes.push(node);
                    self.nodes.len() as u32 - 1
                }
            };
            self.index.insert(hash, slot);
            self.link(slot, cur);
            result.inserted += 1;
            cur = slot;
            declared_parent = Some(hash);
        }
        self.counters.stores_applied += 1;
        self.counters.blocks_inserted += u64::from(result.inserted);
        self.counters.duplicate_blocks += u64::from(result.already_present);
        if result.inserted == 0 && result.refused == 0 && !result.dropped_orphan {
            self.counters.duplicate_store += 1;
        }
        result
    }

    /// Removes blocks; their children become roots. Returns how many were present.
    pub fn remove<H: HashValue>(&mut self, hashes: &[H]) -> u32 {
        let mut removed = 0;
        for hash in hashes.iter().map(|h| h.value()) {
            let Some(slot) = self.index.remove(&hash) else {
                self.counters.block_not_found += 1;
                continue;
            };
            self.unlink(slot);
            let mut child = self.nodes[slot as usize].first_child;
            while child != NIL {
                let next = self.nodes[child as usize].next_sibling;
                self.link(child, NIL);
                self.counters.orphaned_by_remove += 1;
                child = next;
            }
            self.nodes[slot as usize].first_child = NIL;
            self.free.push(slot);
            removed += 1;
        }
        self.counters.removes_applied += 1;
        self.counters.blocks_removed += u64::from(removed);
        removed
    }

    /// Removes every block; keeps the counters and the allocations.
    pub fn clear(&mut self) {
        self.index.clear();
        self.nodes.clear();
        self.free.clear();
        self.first_root = NIL;
        self.roots = 0;
        self.counters.clears += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(t: &mut TierTree, hashes: &[u64], parent: Option<u64>) -> StoreResult {
        t.store(hashes, parent, 0, 0.0, usize::MAX, OrphanPolicy::KeepAsRoot)
    }

    #[test]
    fn chains_link_parents_and_removal_reroots_children() {
        let mut t = TierTree::new();
        assert_eq!(store(&mut t, &[1, 2, 3], None).inserted, 3);
        assert_eq!(store(&mut t, &[4], Some(2)).inserted, 1);
        assert_eq!((t.len(), t.roots()), (4, 1));
        assert_eq!(t.block(4).unwrap().parent_hash, Some(2));
        assert_eq!(t.summary(5).max_depth, 3);
        assert_eq!(t.remove(&[2u64, 99]), 1);
        assert_eq!((t.len(), t.roots()), (3, 3));
        let c = *t.counters();
        assert_eq!((c.block_not_found, c.orphaned_by_remove), (1, 2));
        // The re-rooted block remembers its declared parent.
        let b3 = t.block(3).unwrap();
        assert_eq!((b3.parent_hash, b3.parent_present), (Some(2), false));
    }

    #[test]
    fn duplicates_and_missing_parents_are_counted() {
        let mut t = TierTree::new();
        store(&mut t, &[1, 2], None);
        let r = store(&mut t, &[1, 2], None);
        assert_eq!((r.inserted, r.already_present), (0, 2));
        let r = store(&mut t, &[2, 5], Some(1));
        assert_eq!((r.inserted, r.already_present), (1, 1));
        assert_eq!(t.block(5).unwrap().parent_hash, Some(2));
        let r = store(&mut t, &[7], Some(42));
        assert!(r.parent_missing);
        assert_eq!(t.roots(), 2);
        let c = *t.counters();
        assert_eq!((c.duplicate_store, c.duplicate_blocks, c.parent_block_not_found), (1, 3, 1));

        let r = t.store(&[8u64], Some(43), 0, 0.0, usize::MAX, OrphanPolicy::Refuse);
        assert_eq!((r.inserted, r.refused, r.dropped_orphan), (0, 0, true));
        assert!(!t.contains(8));
    }

    #[test]
    fn capacity_refuses_the_rest_of_a_chain() {
        let mut t = TierTree::new();
        let r = t.store(&[1u64, 2, 3, 4], None, 0, 0.0, 2, OrphanPolicy::KeepAsRoot);
        assert_eq!((r.inserted, r.refused), (2, 2));
        let c = *t.counters();
        assert_eq!((c.refused_stores, c.refused_blocks), (1, 2));
    }

    #[test]
    fn slots_are_reused_after_removal_and_clear_keeps_counters() {
        let mut t = TierTree::new();
        store(&mut t, &[1, 2, 3], None);
        t.remove(&[1u64, 2, 3]);
        store(&mut t, &[4, 5, 6], None);
        assert_eq!(t.nodes.len(), 3);
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.roots(), 0);
        assert_eq!(t.counters().clears, 1);
        assert_eq!(t.counters().stores_applied, 2);
    }
}
