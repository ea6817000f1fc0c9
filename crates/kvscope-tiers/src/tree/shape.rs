//! What a view draws of a tier without walking it itself: a one-walk [`TreeSummary`] and an
//! icicle drill-down ([`TierTree::subtree`]). Read-only; the tree's links are `mod.rs`'s.

use serde::Serialize;

use super::{NIL, TierTree, TreeCounters};

/// A root subtree's size, for "largest subtrees".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SubtreeSize {
    pub root: u64,
    pub blocks: usize,
    /// Levels, the root included.
    pub depth: u32,
}

/// What a view needs to draw a tier without walking it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeSummary {
    pub blocks: usize,
    pub roots: usize,
    /// Levels of the deepest chain (0 for an empty tier).
    pub max_depth: u32,
    /// The largest root subtrees, largest first.
    pub largest: Vec<SubtreeSize>,
    pub counters: TreeCounters,
}

/// One node of a drill-down ([`TierTree::subtree`]), in pre-order, children largest first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IcicleNode {
    /// `None` for the virtual root of a whole-tier view.
    pub hash: Option<u64>,
    /// Index of the parent in the returned list (`None` for the first node).
    pub parent: Option<usize>,
    /// 0 for the first node.
    pub depth: u32,
    /// Blocks in this node's subtree, itself included (a virtual root counts 0 for itself).
    pub blocks: usize,
    pub seq: u64,
    pub time: f64,
    pub children: usize,
    /// Children left out (beyond `max_children`, or below `max_depth`), and their blocks.
    pub hidden_children: usize,
    pub hidden_blocks: usize,
}

impl TierTree {
    /// Blocks, roots, max depth and the `top_n` largest root subtrees, in one walk (O(blocks),
    /// no allocation beyond a stack and the result).
    pub fn summary(&self, top_n: usize) -> TreeSummary {
        let mut largest: Vec<SubtreeSize> = Vec::new();
        let mut max_depth = 0;
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for root in self.child_slots(None) {
            let (mut blocks, mut depth) = (0usize, 0u32);
            stack.push((root, 1));
            while let Some((slot, d)) = stack.pop() {
                blocks += 1;
                depth = depth.max(d);
                stack.extend(self.child_slots(Some(slot)).map(|c| (c, d + 1)));
            }
            max_depth = max_depth.max(depth);
            if top_n > 0 {
                let entry = SubtreeSize { root: self.nodes[root as usize].hash, blocks, depth };
                // Keep the top_n sorted by size desc, then hash for a stable order.
                let pos = largest.partition_point(|e| (e.blocks, std::cmp::Reverse(e.root)) > (blocks, std::cmp::Reverse(entry.root)));
                if pos < top_n {
                    largest.insert(pos, entry);
                    largest.truncate(top_n);
                }
            }
        }
        TreeSummary { blocks: self.len(), roots: self.roots, max_depth, largest, counters: self.counters }
    }

    /// A drill-down below `root` (`None`: the whole tier under a virtual root), for an icicle:
    /// nodes in pre-order, each node's children largest first, at most `max_children` per node
    /// and `max_depth` levels below the first node; what is left out is summed in
    /// `hidden_children`/`hidden_blocks`. `None` if `root` is not in the tier.
    pub fn subtree(&self, root: Option<u64>, max_depth: u32, max_children: usize) -> Option<Vec<IcicleNode>> {
        let root_slot = match root {
            Some(h) => Some(*self.index.get(&h)?),
            None => None,
        };
        // Subtree sizes by slot, post-order with an explicit stack (chains can be deep).
        let mut size = vec![0u32; self.nodes.len()];
        let mut stack: Vec<(u32, bool)> = Vec::new();
        let starts: Vec<u32> = match root_slot {
            Some(s) => vec![s],
            None => self.child_slots(None).collect(),
        };
        for &s in &starts {
            stack.push((s, false));
            while let Some((slot, expanded)) = stack.pop() {
                if expanded {
                    size[slot as usize] = 1 + self.child_slots(Some(slot)).map(|c| size[c as usize]).sum::<u32>();
                } else {
                    stack.push((slot, true));
                    stack.extend(self.child_slots(Some(slot)).map(|c| (c, false)));
                }
            }
        }

        let mut out: Vec<IcicleNode> = Vec::new();
        let mut kids: Vec<(u32, u32)> = Vec::new();
        // (slot or NIL for the virtual root, depth, parent index)
        let mut todo: Vec<(u32, u32, Option<usize>)> = vec![(root_slot.unwrap_or(NIL), 0, None)];
        while let Some((slot, depth, parent)) = todo.pop() {
            kids.clear();
            let parent_slot = (slot != NIL).then_some(slot);
            kids.extend(self.child_slots(parent_slot).map(|c| (size[c as usize], c)));
            kids.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(self.nodes[a.1 as usize].hash.cmp(&self.nodes[b.1 as usize].hash)));
            let shown = if depth >= max_depth { 0 } else { kids.len().min(max_children) };
            let hidden_blocks: usize = kids[shown..].iter().map(|k| k.0 as usize).sum();
            let (hash, seq, time, own) = if slot == NIL {
                (None, 0, 0.0, 0)
            } else {
                let n = &self.nodes[slot as usize];
                (Some(n.hash), n.seq, n.time, 1)
            };
            let blocks = own + kids.iter().map(|k| k.0 as usize).sum::<usize>();
            let index = out.len();
            out.push(IcicleNode {
                hash,
                parent,
                depth,
                blocks,
                seq,
                time,
                children: kids.len(),
                hidden_children: kids.len() - shown,
                hidden_blocks,
            });
            // Reverse so the largest child comes out first.
            for &(_, c) in kids[..shown].iter().rev() {
                todo.push((c, depth + 1, Some(index)));
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{OrphanPolicy, StoreResult};

    fn store(t: &mut TierTree, hashes: &[u64], parent: Option<u64>) -> StoreResult {
        t.store(hashes, parent, 0, 0.0, usize::MAX, OrphanPolicy::KeepAsRoot)
    }

    #[test]
    fn summary_and_subtree_describe_the_shape() {
        let mut t = TierTree::new();
        // Root 1 with a chain of 3 and a branch; root 10 alone.
        store(&mut t, &[1, 2, 3], None);
        store(&mut t, &[4], Some(1));
        store(&mut t, &[10], None);
        let s = t.summary(1);
        assert_eq!((s.blocks, s.roots, s.max_depth), (5, 2, 3));
        assert_eq!(s.largest, [SubtreeSize { root: 1, blocks: 4, depth: 3 }]);

        let icicle = t.subtree(Some(1), 8, 8).unwrap();
        let hashes: Vec<_> = icicle.iter().map(|n| (n.hash.unwrap(), n.depth, n.blocks)).collect();
        assert_eq!(hashes, [(1, 0, 4), (2, 1, 2), (3, 2, 1), (4, 1, 1)]);
        assert_eq!(icicle[2].parent, Some(1));

        let whole = t.subtree(None, 1, 1).unwrap();
        assert_eq!(whole.len(), 2);
        assert_eq!((whole[0].hash, whole[0].blocks, whole[0].hidden_children, whole[0].hidden_blocks), (None, 5, 1, 1));
        assert_eq!((whole[1].hash, whole[1].hidden_children, whole[1].hidden_blocks), (Some(1), 2, 3));
        assert!(t.subtree(Some(99), 1, 1).is_none());
    }
}
