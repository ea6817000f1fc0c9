//! The device tier of Dynamo 1.6.1's index: its compressed radix tree
//! (`ConcurrentRadixTreeCompressed`, dynamo-kv-router 1.6.1), modelled single-threaded.
//!
//! What the real tree does, and so what this one does (docs/dynamo-1.6.1-index.md has each rule
//! with the source lines and the run of the real indexer that confirmed it):
//!
//! - **Shape.** One tree for every worker. A node holds an *edge*, a run of blocks as
//!   `(tokens_hash, block_hash)` pairs, and its children keyed by the first `tokens_hash` of
//!   their edges. Coverage is per worker and rank: *full* (the whole edge) or a *cutoff* `k`
//!   (the edge's first `k` blocks).
//! - **Keys.** Descending (stores and scoring) compares `tokens_hash` only; a store's parent
//!   and a removal's hashes are found through the worker's own `block_hash -> node` lookup. So
//!   a parent held by another worker or rank is unknown, and a second worker storing the same
//!   tokens under other block hashes lands on the first writer's node.
//! - **Stores.** A parent unknown to the worker (or no longer covered by it) drops the whole
//!   store (`ParentBlockNotFound`). A parent at an edge's tail inserts below it, extending the
//!   leaf in place when the node never had children; a parent mid-edge reuses the edge's suffix
//!   when the store repeats it, or splits the edge.
//! - **Removals** cut the worker's coverage at the removed block: the later blocks of the same
//!   edge go with it, and when no worker fully covers the node any more its children are cut
//!   off for everyone (they stay in the workers' lookups, so stores under them are accepted and
//!   never seen).
//! - **Clears** take the worker and rank's coverage off every node, cutting off the children of
//!   nodes left with no full worker.
//! - **Scoring** (`find_matches`) walks the request's `tokens_hash`es from the root; a worker
//!   drops out at the depth where its coverage ends. Where a node has no cutoff workers and as
//!   many full workers as are still active, the walk does not check who they are (an overcount
//!   the real tree has too).
//!
//! - **Memory.** The real nodes are `Arc`s, held by their parent's children and by the
//!   workers' lookups; a node neither holds goes. Here each node counts the same holders, and a
//!   node whose count falls to zero is freed when the operation ends (the real operation holds
//!   the nodes it walks until then). So [`DeviceTree::nodes`] is what the real tree keeps.
//! - **The sweep** ([`DeviceTree::sweep`], `sweep_stale_children`): every 5 minutes the real
//!   tree unlinks leaves with no workers that no lookup holds, deepest first. Until then an
//!   empty leaf stays where a store of the same tokens lands on it (with the first writer's
//!   block hashes), and after it such a store makes a node of its own.
//!
//! Not modelled: the thread pool (the real lookups are per thread lane and repaired lazily,
//! which only matters when a split and a cut-off meet workers of different lanes), anchors,
//! TTLs and approximate LRU (off in the standalone indexer).

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};

use crate::FastMap;

use super::{StoreError, WorkerKey};

type NodeId = u32;
const ROOT: NodeId = 0;

/// One `(tokens_hash, block_hash)` of an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub tokens_hash: u64,
    pub block_hash: u64,
}

#[derive(Clone, Debug, Default)]
struct Node {
    edge: Vec<Block>,
    edge_index: FastMap<u64, usize>,
    full: Vec<WorkerKey>,
    cutoffs: BTreeMap<WorkerKey, usize>,
    children: FastMap<u64, NodeId>,
    /// Set once the node has had a child; never unset (the real tree's "sticky internal").
    internal: bool,
    /// The node it was made under (the real tree keeps no such link; the model uses it to tell
    /// a block's node still reachable from the root from one that was cut off).
    parent: NodeId,
    /// The tree's [`DeviceTree::cuts`] when the node was last found reachable: until a link
    /// is cut again, a walk up from below can stop here.
    reachable_at: Cell<u64>,
}

/// What holds each node, as the real tree's `Arc` counts: the link from its parent and every
/// lookup entry naming it. A node whose count falls to zero waits in `dying` until the
/// operation ends.
#[derive(Clone, Debug)]
struct Holds {
    counts: Vec<u32>,
    dying: Vec<NodeId>,
}

/// A freed slot's count: no holder can release it again.
const FREED: u32 = u32::MAX;

impl Holds {
    fn hold(&mut self, id: NodeId) {
        self.counts[id as usize] += 1;
    }

    fn release(&mut self, id: NodeId) {
        let c = &mut self.counts[id as usize];
        debug_assert!(*c > 0 && *c != FREED, "node {id} released more often than held");
        *c -= 1;
        if *c == 0 {
            self.dying.push(id);
        }
    }

    /// A lookup entry set to `node`, naming `old` before.
    fn retarget(&mut self, old: Option<NodeId>, node: NodeId) {
        if old != Some(node) {
            self.hold(node);
            if let Some(o) = old {
                self.release(o);
            }
        }
    }
}

impl Node {
    fn for_blocks(blocks: &[Block], worker: WorkerKey) -> Node {
        let mut n = Node { edge: blocks.to_vec(), full: vec![worker], ..Node::default() };
        n.reindex();
        n
    }

    fn reindex(&mut self) {
        self.edge_index = self.edge.iter().enumerate().map(|(i, b)| (b.block_hash, i)).collect();
    }

    fn is_full(&self, w: WorkerKey) -> bool {
        self.full.contains(&w)
    }

    fn cutoff(&self, w: WorkerKey) -> usize {
        if self.is_full(w) { self.edge.len() } else { self.cutoffs.get(&w).copied().unwrap_or(0) }
    }

    fn covers_pos(&self, w: WorkerKey, pos: usize) -> bool {
        self.is_full(w) || self.cutoffs.get(&w).is_some_and(|&c| pos < c)
    }

    fn has_workers(&self) -> bool {
        !self.full.is_empty() || !self.cutoffs.is_empty()
    }

    /// A new child. Links are only ever added where none was: replacing one would cut a
    /// subtree off without [`DeviceTree::cuts`] counting it.
    fn link(&mut self, tokens_hash: u64, child: NodeId) {
        let replaced = self.children.insert(tokens_hash, child);
        debug_assert!(replaced.is_none(), "a link was replaced");
    }

    fn tail_is(&self, hash: u64) -> bool {
        self.edge.last().is_some_and(|b| b.block_hash == hash)
    }

    fn promote(&mut self, w: WorkerKey) -> bool {
        if self.is_full(w) {
            return false;
        }
        self.cutoffs.remove(&w);
        self.full.push(w);
        true
    }

    fn cover_prefix(&mut self, w: WorkerKey, cutoff: usize) {
        if cutoff == 0 {
            return;
        }
        if cutoff >= self.edge.len() {
            self.promote(w);
            return;
        }
        if self.is_full(w) {
            return;
        }
        let c = self.cutoffs.entry(w).or_insert(0);
        *c = (*c).max(cutoff);
    }

    /// The store's blocks repeat the edge after `pos` (tokens and block hashes).
    fn suffix_matches(&self, pos: usize, blocks: &[Block]) -> bool {
        let suffix = &self.edge[pos + 1..];
        blocks.len() <= suffix.len() && suffix.iter().zip(blocks).all(|(e, b)| e == b)
    }

    /// The store's blocks start with the whole edge after `pos` and go on: how many repeat it.
    fn store_starts_with_suffix(&self, pos: usize, blocks: &[Block]) -> Option<usize> {
        let suffix = &self.edge[pos + 1..];
        (blocks.len() > suffix.len() && suffix.iter().zip(blocks).all(|(e, b)| e == b)).then_some(suffix.len())
    }

    fn append_to_leaf(&mut self, w: WorkerKey, blocks: &[Block]) {
        let old = self.edge.len();
        // The other full workers cover the edge as it was (in place: a leaf grows per store).
        for &other in self.full.iter().filter(|&&o| o != w) {
            self.cutoffs.insert(other, old);
        }
        self.full.retain(|&o| o == w);
        self.promote(w);
        for (i, b) in blocks.iter().enumerate() {
            self.edge.push(*b);
            self.edge_index.insert(b.block_hash, old + i);
        }
    }
}

/// What a walk of a request's tokens hashes scores, per worker: matched blocks.
pub type Scores = BTreeMap<WorkerKey, u32>;

/// The device tier's tree and every worker's lookup.
#[derive(Clone, Debug)]
pub struct DeviceTree {
    nodes: Vec<Node>,
    holds: Holds,
    /// Slots of freed nodes, for the next ones made.
    free: Vec<NodeId>,
    lookup: FastMap<WorkerKey, FastMap<u64, NodeId>>,
    /// Children links cut so far, plus one: a node's `reachable_at` at this count is still
    /// reachable (a store only adds links, and a split moves a subtree down a link it adds).
    cuts: u64,
}

impl Default for DeviceTree {
    fn default() -> Self {
        DeviceTree {
            nodes: vec![Node::default()],
            // The root is the tree's own.
            holds: Holds { counts: vec![1], dying: Vec::new() },
            free: Vec::new(),
            lookup: FastMap::default(),
            cuts: 1,
        }
    }
}

enum ParentPlan {
    InsertFrom,
    Done,
    /// The parent's edge was split; insert below its (new) tail.
    SplitThenInsert,
}

enum ChildPlan {
    Descend(NodeId),
    Interior,
    Missing,
    Stale(u64),
}

impl DeviceTree {
    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    /// A new node, held by nothing yet (the caller links or maps it in the same operation).
    fn alloc(&mut self, n: Node) -> NodeId {
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = n;
            self.holds.counts[id as usize] = 0;
            return id;
        }
        self.nodes.push(n);
        self.holds.counts.push(0);
        (self.nodes.len() - 1) as NodeId
    }

    /// Frees the nodes nothing holds any more, and what only they held: the end of an
    /// operation, when the real one drops the nodes it walked.
    fn collect(&mut self) {
        while let Some(id) = self.holds.dying.pop() {
            if self.holds.counts[id as usize] != 0 {
                continue;
            }
            self.holds.counts[id as usize] = FREED;
            let node = std::mem::take(&mut self.nodes[id as usize]);
            for &c in node.children.values() {
                self.holds.release(c);
            }
            self.free.push(id);
        }
    }

    /// Nodes the tree keeps: those the root reaches and those a lookup still holds, cut off or
    /// not (the root included).
    pub fn nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Heap bytes, roughly: nodes, their edges and indexes, and the lookups.
    pub fn approx_bytes(&self) -> usize {
        let per_node = std::mem::size_of::<Node>();
        let nodes: usize = self
            .nodes
            .iter()
            .map(|n| per_node + n.edge.capacity() * 16 + n.edge_index.capacity() * 17 + n.children.capacity() * 13 + n.full.capacity() * 16)
            .sum();
        let lookups: usize = self.lookup.values().map(|l| l.capacity() * 13).sum();
        nodes + lookups
    }

    /// `resolve_lookup`: the worker's node for `hash`, searched for below the looked-up node
    /// when a split moved it (and the lookups that pointed there repaired).
    fn resolve(&mut self, w: WorkerKey, hash: u64, toward_tail: bool) -> Option<NodeId> {
        let node = *self.lookup.get(&w)?.get(&hash)?;
        if self.node(node).edge_index.contains_key(&hash) {
            return Some(node);
        }
        let found = self.find_in_subtree(node, hash)?;
        self.repair(hash, found, toward_tail);
        Some(found)
    }

    fn find_in_subtree(&self, start: NodeId, hash: u64) -> Option<NodeId> {
        let mut queue: VecDeque<NodeId> = self.node(start).children.values().copied().collect();
        while let Some(n) = queue.pop_front() {
            if self.node(n).edge_index.contains_key(&hash) {
                return Some(n);
            }
            queue.extend(self.node(n).children.values().copied());
        }
        None
    }

    fn repair(&mut self, hash: u64, node: NodeId, toward_tail: bool) {
        let n = &self.nodes[node as usize];
        let Some(&pos) = n.edge_index.get(&hash) else { return };
        for (&w, lookup) in self.lookup.iter_mut() {
            let cutoff = n.cutoff(w).min(n.edge.len());
            let range = if toward_tail { if pos < cutoff { pos..cutoff } else { 0..0 } } else { 0..pos.min(cutoff) };
            for b in &n.edge[range] {
                if let Some(entry) = lookup.get_mut(&b.block_hash) {
                    self.holds.retarget(Some(*entry), node);
                    *entry = node;
                }
            }
        }
    }

    fn map_blocks(&mut self, w: WorkerKey, blocks: &[Block], node: NodeId) {
        let lookup = self.lookup.entry(w).or_default();
        for b in blocks {
            let old = lookup.insert(b.block_hash, node);
            self.holds.retarget(old, node);
        }
    }

    /// A new child of `parent` (held by the link).
    fn link(&mut self, parent: NodeId, tokens_hash: u64, child: NodeId) {
        let n = &mut self.nodes[parent as usize];
        n.link(tokens_hash, child);
        n.internal = true;
        self.holds.hold(child);
    }

    /// Cuts every child link of `id`, for everyone.
    fn cut_children(&mut self, id: NodeId) {
        let n = &mut self.nodes[id as usize];
        if n.children.is_empty() {
            return;
        }
        for (_, c) in n.children.drain() {
            self.holds.release(c);
        }
        self.cuts += 1;
    }

    /// Splits `id`'s edge before `pos`: the node keeps the prefix, a new child the rest (with
    /// the node's children), and every lookup of a moved block follows it.
    fn split(&mut self, id: NodeId, pos: usize) -> NodeId {
        let n = self.node_mut(id);
        let suffix_edge = n.edge.split_off(pos);
        let first_tokens = suffix_edge[0].tokens_hash;
        for b in &suffix_edge {
            n.edge_index.remove(&b.block_hash);
        }
        let suffix_full = n.full.clone();
        let mut suffix_cutoffs = BTreeMap::new();
        let mut promote = Vec::new();
        for (&w, &c) in &n.cutoffs {
            if c >= pos {
                promote.push(w);
                if c - pos > 0 {
                    suffix_cutoffs.insert(w, c - pos);
                }
            }
        }
        for w in promote {
            n.cutoffs.remove(&w);
            n.full.push(w);
        }
        let children = std::mem::take(&mut n.children);
        let mut suffix = Node {
            edge: suffix_edge,
            full: suffix_full,
            cutoffs: suffix_cutoffs,
            internal: !children.is_empty(),
            children,
            parent: id,
            ..Node::default()
        };
        suffix.reindex();
        let sid = self.alloc(suffix);
        // The children moved down with the suffix: they hang from it now.
        for c in self.nodes[sid as usize].children.values().copied().collect::<Vec<_>>() {
            self.node_mut(c).parent = sid;
        }
        self.link(id, first_tokens, sid);
        // `apply_split_lookup`: every worker covering the suffix finds its blocks there.
        let s = &self.nodes[sid as usize];
        let moved: Vec<(WorkerKey, Vec<u64>)> = s
            .full
            .iter()
            .map(|&w| (w, s.edge.iter().map(|b| b.block_hash).collect()))
            .chain(s.cutoffs.iter().map(|(&w, &c)| (w, s.edge[..c].iter().map(|b| b.block_hash).collect())))
            .collect();
        for (w, hashes) in moved {
            if let Some(lookup) = self.lookup.get_mut(&w) {
                for h in hashes {
                    let old = lookup.insert(h, sid);
                    self.holds.retarget(old, sid);
                }
            }
        }
        sid
    }

    /// `plan_store_parent_edge` + `apply_store_parent_edge_plan` on the node holding `parent`.
    fn at_parent(&mut self, w: WorkerKey, id: NodeId, parent: u64, blocks: &[Block]) -> Option<ParentPlan> {
        let n = self.node(id);
        let &pos = n.edge_index.get(&parent)?;
        if n.tail_is(parent) {
            return Some(ParentPlan::InsertFrom);
        }
        if n.suffix_matches(pos, blocks) {
            self.node_mut(id).cover_prefix(w, pos + 1 + blocks.len());
            self.map_blocks(w, blocks, id);
            return Some(ParentPlan::Done);
        }
        if !n.internal
            && let Some(k) = n.store_starts_with_suffix(pos, blocks)
        {
            self.node_mut(id).append_to_leaf(w, &blocks[k..]);
            self.map_blocks(w, blocks, id);
            return Some(ParentPlan::Done);
        }
        self.split(id, pos + 1);
        Some(ParentPlan::SplitThenInsert)
    }

    /// Applies a store of `blocks` below `parent` (`None`: from the root) for worker `w`.
    pub fn store(&mut self, w: WorkerKey, parent: Option<u64>, blocks: &[Block]) -> Result<(), StoreError> {
        let r = self.apply_store(w, parent, blocks);
        self.collect();
        r
    }

    fn apply_store(&mut self, w: WorkerKey, parent: Option<u64>, blocks: &[Block]) -> Result<(), StoreError> {
        self.lookup.entry(w).or_default();
        let (mut cur, mut last) = (ROOT, None);
        if let Some(p) = parent {
            let Some(node) = self.resolve(w, p, true) else { return Err(StoreError::ParentNotFound) };
            let n = self.node(node);
            if let Some(&pos) = n.edge_index.get(&p)
                && !n.covers_pos(w, pos)
            {
                self.unlook(w, p);
                return Err(StoreError::ParentNotCovered);
            }
            match self.at_parent(w, node, p, blocks) {
                Some(ParentPlan::Done) => return Ok(()),
                Some(ParentPlan::InsertFrom | ParentPlan::SplitThenInsert) | None => {}
            }
            cur = node;
            last = Some(p);
        }
        let mut remaining = blocks;
        while let Some(first) = remaining.first() {
            let plan = {
                let n = self.node(cur);
                match last {
                    Some(h) if !n.tail_is(h) && n.edge_index.contains_key(&h) => ChildPlan::Interior,
                    Some(h) if !n.tail_is(h) => ChildPlan::Stale(h),
                    _ => match n.children.get(&first.tokens_hash) {
                        Some(&c) => ChildPlan::Descend(c),
                        None => ChildPlan::Missing,
                    },
                }
            };
            let child = match plan {
                ChildPlan::Stale(h) => {
                    cur = self.resolve(w, h, true).ok_or(StoreError::StaleParent)?;
                    continue;
                }
                ChildPlan::Descend(c) => c,
                ChildPlan::Interior | ChildPlan::Missing => {
                    if let Some(h) = last {
                        match self.at_parent(w, cur, h, remaining) {
                            Some(ParentPlan::Done) => return Ok(()),
                            Some(ParentPlan::SplitThenInsert) => continue,
                            Some(ParentPlan::InsertFrom) | None => {}
                        }
                        let n = self.node(cur);
                        if !n.internal && !n.edge.is_empty() && n.tail_is(h) && n.covers_pos(w, n.edge.len() - 1) {
                            self.node_mut(cur).append_to_leaf(w, remaining);
                            self.map_blocks(w, remaining, cur);
                            return Ok(());
                        }
                    }
                    let id = self.alloc(Node { parent: cur, ..Node::for_blocks(remaining, w) });
                    self.link(cur, first.tokens_hash, id);
                    self.map_blocks(w, remaining, id);
                    return Ok(());
                }
            };
            // `insert_into_child`.
            let c = self.node(child);
            let match_len = c.edge.iter().zip(remaining).take_while(|(e, b)| e.tokens_hash == b.tokens_hash).count();
            let edge_len = c.edge.len();
            if match_len < edge_len {
                if match_len == remaining.len() {
                    self.node_mut(child).cover_prefix(w, match_len);
                    self.map_blocks(w, remaining, child);
                    return Ok(());
                }
                let tail = &remaining[match_len..];
                self.split(child, match_len);
                let t = self.alloc(Node { parent: child, ..Node::for_blocks(tail, w) });
                self.node_mut(child).promote(w);
                self.link(child, tail[0].tokens_hash, t);
                self.map_blocks(w, &remaining[..match_len], child);
                self.map_blocks(w, tail, t);
                return Ok(());
            }
            self.node_mut(child).promote(w);
            self.map_blocks(w, &remaining[..edge_len], child);
            last = Some(remaining[edge_len - 1].block_hash);
            remaining = &remaining[edge_len..];
            cur = child;
        }
        Ok(())
    }

    /// Applies a removal of `hashes` for worker `w` (unknown hashes are skipped).
    pub fn remove(&mut self, w: WorkerKey, hashes: &[u64]) {
        if !self.lookup.contains_key(&w) {
            return;
        }
        self.apply_remove(w, hashes);
        self.collect();
    }

    fn apply_remove(&mut self, w: WorkerKey, hashes: &[u64]) {
        let mut i = 0;
        while let Some(&h) = hashes.get(i) {
            match self.resolve(w, h, false) {
                Some(node) => {
                    let n = self.node(node);
                    let end = i + 1 + hashes[i + 1..].iter().take_while(|x| n.edge_index.contains_key(x)).count();
                    self.remove_group(w, node, &hashes[i..end]);
                    i = end;
                }
                None => {
                    self.unlook(w, h);
                    i += 1;
                }
            }
        }
    }

    fn unlook(&mut self, w: WorkerKey, h: u64) {
        if let Some(old) = self.lookup.get_mut(&w).and_then(|l| l.remove(&h)) {
            self.holds.release(old);
        }
    }

    /// `remove_worker_for_hashes` on one node: the worker's coverage ends at the earliest of
    /// `hashes`; a node left with no full worker loses its children.
    fn remove_at(&mut self, w: WorkerKey, node: NodeId, hashes: &[u64]) -> Option<(Vec<u64>, Vec<u64>)> {
        let n = &mut self.nodes[node as usize];
        let mut min: Option<usize> = None;
        let mut unmatched = Vec::new();
        for h in hashes {
            match n.edge_index.get(h) {
                Some(&p) => min = Some(min.map_or(p, |m| m.min(p))),
                None => unmatched.push(*h),
            }
        }
        let pos = min?;
        let cutoff = n.cutoff(w);
        let stale = if pos >= cutoff {
            vec![n.edge[pos].block_hash]
        } else {
            let stale = n.edge[pos..cutoff].iter().map(|b| b.block_hash).collect();
            n.full.retain(|&f| f != w);
            if pos == 0 {
                n.cutoffs.remove(&w);
            } else {
                n.cutoffs.insert(w, pos);
            }
            stale
        };
        if n.full.is_empty() {
            self.cut_children(node);
        }
        Some((stale, unmatched))
    }

    fn remove_group(&mut self, w: WorkerKey, node: NodeId, hashes: &[u64]) {
        match self.remove_at(w, node, hashes) {
            Some((stale, unmatched)) => {
                for h in stale {
                    self.unlook(w, h);
                }
                for h in unmatched {
                    self.remove_one(w, h);
                }
            }
            None => {
                for &h in hashes {
                    self.remove_one(w, h);
                }
            }
        }
    }

    fn remove_one(&mut self, w: WorkerKey, h: u64) {
        let Some(mut node) = self.resolve(w, h, false) else {
            self.unlook(w, h);
            return;
        };
        loop {
            if let Some((stale, _)) = self.remove_at(w, node, &[h]) {
                for s in stale {
                    self.unlook(w, s);
                }
                return;
            }
            match self.find_in_subtree(node, h) {
                Some(found) => {
                    self.repair(h, found, false);
                    node = found;
                }
                None => {
                    self.unlook(w, h);
                    return;
                }
            }
        }
    }

    /// Takes every worker `matches` accepts off the tree (a clear of one rank, or a worker's
    /// removal), cutting off the children of nodes left with no full worker.
    ///
    /// It visits every node the root reaches, as the real tree does, so a clear costs the whole
    /// fleet's tree: one flat walk, without allocating per node. (A queue, a hashed set of the
    /// nodes seen and a list of each node's children per node took 9.4% of the engine worker's
    /// time in Chromium at 64 SGLang workers x 300 batches/s, each clearing every 2,000 batches;
    /// this walk takes 3.7%.)
    pub fn erase(&mut self, matches: impl Fn(WorkerKey) -> bool) {
        let holds = &mut self.holds;
        self.lookup.retain(|&w, lookup| {
            let keep = !matches(w);
            if !keep {
                lookup.values().for_each(|&n| holds.release(n));
            }
            keep
        });
        // The children of every node reached go on the stack before any is cut, so the walk
        // covers what the root reached when the erase began, whatever it cuts on the way.
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<NodeId> = self.node(ROOT).children.values().copied().collect();
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id as usize], true) {
                continue;
            }
            let n = &mut self.nodes[id as usize];
            stack.extend(n.children.values().copied());
            let before = n.full.len() + n.cutoffs.len();
            n.full.retain(|&w| !matches(w));
            n.cutoffs.retain(|&w, _| !matches(w));
            let removed = before != n.full.len() + n.cutoffs.len();
            if removed && n.full.is_empty() {
                self.cut_children(id);
            }
        }
        self.collect();
    }

    /// `sweep_stale_children`, which the real tree runs every 5 minutes
    /// ([`crate::dynamo::SWEEP_INTERVAL_SECS`]): from the deepest edge up, unlinks each child
    /// with no workers and no children that nothing but its parent holds (no lookup names it).
    /// A parent left so is unlinked in the same sweep.
    pub fn sweep(&mut self) {
        let mut edges: Vec<(NodeId, u64, NodeId)> = Vec::new();
        let mut queue = VecDeque::from([ROOT]);
        while let Some(p) = queue.pop_front() {
            for (&key, &c) in &self.nodes[p as usize].children {
                queue.push_back(c);
                edges.push((p, key, c));
            }
        }
        for (p, key, c) in edges.into_iter().rev() {
            let child = &self.nodes[c as usize];
            let stale_leaf = !child.has_workers() && child.children.is_empty() && self.holds.counts[c as usize] == 1;
            if stale_leaf && self.nodes[p as usize].children.get(&key) == Some(&c) {
                self.nodes[p as usize].children.remove(&key);
                self.holds.release(c);
                self.cuts += 1;
            }
        }
        self.collect();
    }

    /// The blocks `/dump` lists for each worker: those it covers on nodes still reachable from
    /// the root (through children that have workers or children of their own).
    pub fn dump(&self) -> BTreeMap<WorkerKey, Vec<(Option<u64>, Block)>> {
        let mut out: BTreeMap<WorkerKey, Vec<(Option<u64>, Block)>> = BTreeMap::new();
        let mut queue: VecDeque<(NodeId, Option<u64>)> = VecDeque::from([(ROOT, None)]);
        while let Some((id, parent)) = queue.pop_front() {
            let n = self.node(id);
            for &w in &n.full {
                out.entry(w).or_default().extend(n.edge.iter().scan(parent, |p, b| Some((p.replace(b.block_hash), *b))));
            }
            for (&w, &c) in &n.cutoffs {
                out.entry(w).or_default().extend(n.edge[..c].iter().scan(parent, |p, b| Some((p.replace(b.block_hash), *b))));
            }
            let tail = n.edge.last().map(|b| b.block_hash).or(parent);
            for &c in n.children.values() {
                let child = self.node(c);
                if child.has_workers() || !child.children.is_empty() {
                    queue.push_back((c, tail));
                }
            }
        }
        out
    }

    /// `find_matches`: per worker, the blocks of `tokens` (a request's tokens hashes, from the
    /// root) the index would score.
    pub fn find_matches(&self, tokens: &[u64]) -> Scores {
        let mut scores = Scores::new();
        let Some(mut next) = tokens.first().and_then(|t| self.node(ROOT).children.get(t).copied()) else { return scores };
        let mut active: Vec<WorkerKey> = Vec::new();
        let (mut depth, mut pos, mut first) = (0u32, 0usize, true);
        loop {
            let n = self.node(next);
            let walk = n.edge.len().min(tokens.len() - pos);
            let matched = 1 + (1..walk).take_while(|&i| n.edge[i].tokens_hash == tokens[pos + i]).count();
            if first {
                active = n.full.clone();
                for (&w, &c) in &n.cutoffs {
                    let k = c.min(matched);
                    if k > 0 {
                        scores.insert(w, k as u32);
                    }
                }
                first = false;
            } else if !n.cutoffs.is_empty() {
                active.retain(|w| {
                    if n.full.contains(w) {
                        return true;
                    }
                    let k = n.cutoffs.get(w).map_or(0, |&c| c.min(matched));
                    scores.insert(*w, depth + k as u32);
                    false
                });
            } else if n.full.len() != active.len() {
                active.retain(|w| {
                    let keep = n.full.contains(w);
                    if !keep {
                        scores.insert(*w, depth);
                    }
                    keep
                });
            }
            // (Otherwise the real walk checks nobody: as many full workers as active ones.)
            if active.is_empty() {
                break;
            }
            depth += matched as u32;
            if matched < n.edge.len() || pos + matched >= tokens.len() {
                break;
            }
            pos += matched;
            match n.children.get(&tokens[pos]) {
                Some(&c) => next = c,
                None => break,
            }
        }
        for w in active {
            scores.insert(w, depth);
        }
        scores
    }

    /// The hash `/dump` lists for the worker's block `b` instead of its own: its store landed on
    /// a node that keeps these tokens under another hash (the first writer's), which the worker
    /// now covers. `None` when the worker holds `b` under its own hash, or not at all.
    pub fn listed_instead(&self, w: WorkerKey, b: Block) -> Option<u64> {
        let &node = self.lookup.get(&w)?.get(&b.block_hash)?;
        let n = self.node(node);
        if n.edge_index.contains_key(&b.block_hash) {
            return None;
        }
        let pos = (0..n.edge.len()).find(|&i| n.edge[i].tokens_hash == b.tokens_hash && n.covers_pos(w, i))?;
        self.reachable(node).then_some(n.edge[pos].block_hash)
    }

    /// Whether the worker holds `hash` where the root reaches it: what `/dump` lists for it.
    pub fn holds(&self, w: WorkerKey, hash: u64) -> bool {
        let Some(&node) = self.lookup.get(&w).and_then(|l| l.get(&hash)) else { return false };
        let n = self.node(node);
        let Some(&pos) = n.edge_index.get(&hash) else { return false };
        n.covers_pos(w, pos) && self.reachable(node)
    }

    /// The node hangs from the root through children links, none of them cut. A walk stops at
    /// the first node found reachable since the last cut, and marks the nodes it passed: the
    /// blocks of one store, and the stores of one chain, share their walk up.
    fn reachable(&self, id: NodeId) -> bool {
        let mut passed: smallvec::SmallVec<[NodeId; 16]> = smallvec::SmallVec::new();
        let mut at = id;
        while at != ROOT && self.node(at).reachable_at.get() != self.cuts {
            let n = self.node(at);
            let Some(first) = n.edge.first() else { return false };
            if self.node(n.parent).children.get(&first.tokens_hash) != Some(&at) {
                return false;
            }
            passed.push(at);
            at = n.parent;
        }
        for p in passed {
            self.node(p).reachable_at.set(self.cuts);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn block(tokens: u64, hash: u64) -> Block {
        Block { tokens_hash: tokens, block_hash: hash }
    }

    /// Whether `holds` says what `dump` lists, for every worker and hash in `hashes`.
    fn holds_agrees_with_dump(d: &DeviceTree, workers: &[WorkerKey], hashes: impl Iterator<Item = u64> + Clone) {
        let dump = d.dump();
        for &w in workers {
            let listed: Vec<u64> = dump.get(&w).map(|v| v.iter().map(|(_, b)| b.block_hash).collect()).unwrap_or_default();
            for h in hashes.clone() {
                assert_eq!(d.holds(w, h), listed.contains(&h), "worker {w:?}, block {h}: holds and dump disagree");
            }
        }
    }

    /// The tree keeps exactly the nodes the root or a lookup reaches through children links,
    /// and each one's count is its holders: the links to it and the lookup entries naming it.
    fn keeps_what_is_held(d: &DeviceTree) {
        let mut held = vec![0u32; d.nodes.len()];
        held[ROOT as usize] += 1;
        let mut stack = vec![ROOT];
        for l in d.lookup.values() {
            for &n in l.values() {
                held[n as usize] += 1;
                stack.push(n);
            }
        }
        let mut live = vec![false; d.nodes.len()];
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut live[id as usize], true) {
                continue;
            }
            for &c in d.nodes[id as usize].children.values() {
                held[c as usize] += 1;
                stack.push(c);
            }
        }
        for (id, &is_live) in live.iter().enumerate() {
            let count = d.holds.counts[id];
            if is_live {
                assert_eq!(count, held[id], "node {id}: counted holders against real ones");
            } else {
                assert_eq!(count, FREED, "node {id} is held by nothing and was not freed");
            }
        }
        assert_eq!(d.nodes(), live.iter().filter(|&&l| l).count(), "nodes() counts the nodes kept");
        assert!(d.holds.dying.is_empty(), "an operation ended with nodes waiting to be freed");
    }

    #[test]
    fn cut_off_nodes_go_when_no_lookup_holds_them() {
        let b = (2, 0);
        let mut d = DeviceTree::default();
        d.store(b, None, &[block(1, 11), block(2, 12)]).unwrap();
        // Below 11, mid-edge: the edge splits into [11] and [12], and [13] hangs beside [12].
        d.store(b, Some(11), &[block(3, 13)]).unwrap();
        assert_eq!(d.nodes(), 4, "the root and three nodes");
        // 11 removed: its node has no full worker, its children are cut off, but b's lookup
        // still holds them (its 12 and 13).
        d.remove(b, &[11]);
        assert_eq!(d.nodes(), 4, "cut off, but held by b's lookup");
        assert!(!d.holds(b, 12) && !d.holds(b, 13));
        keeps_what_is_held(&d);
        d.remove(b, &[12, 13]);
        assert_eq!(d.nodes(), 2, "the root and the emptied [11], which the root still links");
        keeps_what_is_held(&d);
        d.sweep();
        assert_eq!(d.nodes(), 1, "the sweep unlinks the empty leaf");
        keeps_what_is_held(&d);
    }

    #[test]
    fn a_sweep_unlinks_only_empty_leaves_no_lookup_holds() {
        let (a, b) = ((1, 0), (2, 0));
        let mut d = DeviceTree::default();
        d.store(a, None, &[block(1, 11), block(2, 12)]).unwrap();
        d.store(a, Some(11), &[block(5, 15)]).unwrap();
        // b's leaf beside a's, emptied: a's nodes keep their workers, b's has none.
        d.store(b, None, &[block(7, 17)]).unwrap();
        d.remove(b, &[17]);
        let before = d.nodes();
        d.sweep();
        assert_eq!(d.nodes(), before - 1, "only b's emptied leaf goes");
        assert!(d.holds(a, 11) && d.holds(a, 12) && d.holds(a, 15));
        // The same tokens under another hash now make a node of their own.
        d.store(b, None, &[block(7, 27)]).unwrap();
        assert_eq!(d.dump()[&b], vec![(None, block(7, 27))]);
        keeps_what_is_held(&d);
    }

    #[test]
    fn an_empty_leaf_before_the_sweep_takes_the_same_tokens_under_its_first_hashes() {
        let b = (2, 0);
        let mut d = DeviceTree::default();
        d.store(b, None, &[block(7, 17)]).unwrap();
        d.remove(b, &[17]);
        d.store(b, None, &[block(7, 27)]).unwrap();
        assert_eq!(d.dump()[&b], vec![(None, block(7, 17))], "the first writer's node and hash");
        keeps_what_is_held(&d);
    }

    #[test]
    fn a_split_edge_s_suffix_and_what_hangs_below_it_stay_held() {
        let w = (1, 0);
        let mut d = DeviceTree::default();
        d.store(w, None, &[block(1, 11), block(2, 12), block(3, 13)]).unwrap();
        // Below the edge's first block: the edge splits after it.
        d.store(w, Some(11), &[block(9, 19)]).unwrap();
        d.store(w, Some(13), &[block(4, 14)]).unwrap();
        for h in [11, 12, 13, 14, 19] {
            assert!(d.holds(w, h), "block {h}");
        }
        // A split of the suffix again: its children move down once more.
        d.store(w, Some(12), &[block(8, 18)]).unwrap();
        for h in [11, 12, 13, 14, 18, 19] {
            assert!(d.holds(w, h), "block {h}");
        }
        holds_agrees_with_dump(&d, &[w], 11..20);
    }

    proptest! {
        /// Stores under any earlier block, removals and clears, in any order, by two workers. A
        /// block's hash covers its parent's and its tokens, as engines hash them, so workers
        /// storing the same tokens under the same parent meet on one node with one hash.
        #[test]
        fn holds_says_what_dump_lists(ops in prop::collection::vec((0usize..2, 0usize..24, 1u64..4, 0u64..3, 0u8..9), 1..40)) {
            let workers = [(1, 0), (2, 0)];
            let mut d = DeviceTree::default();
            let mut stored: Vec<u64> = Vec::new();
            for (worker, pick, len, tokens, action) in ops {
                let w = workers[worker];
                // Four in nine stores, three removals, one clear, one sweep. After every step,
                // `holds` remembers what it found reachable, and the tree keeps what is held.
                if action == 8 {
                    let dump = d.dump();
                    d.sweep();
                    prop_assert_eq!(d.dump(), dump, "a sweep changes nothing /dump lists");
                    holds_agrees_with_dump(&d, &workers, stored.iter().copied());
                    keeps_what_is_held(&d);
                    continue;
                }
                if action == 7 {
                    d.erase(|x| x == w);
                    prop_assert!(d.dump().get(&w).is_none_or(Vec::is_empty), "a cleared worker holds nothing");
                    holds_agrees_with_dump(&d, &workers, stored.iter().copied());
                    keeps_what_is_held(&d);
                    continue;
                }
                if action >= 4 && !stored.is_empty() {
                    d.remove(w, &[stored[pick % stored.len()]]);
                    holds_agrees_with_dump(&d, &workers, stored.iter().copied());
                    keeps_what_is_held(&d);
                    continue;
                }
                let parent = pick.checked_sub(4).and_then(|i| stored.get(i % stored.len().max(1))).copied();
                let mut prev = parent.unwrap_or(0);
                let blocks: Vec<Block> = (0..len)
                    .map(|i| {
                        let t = tokens * 31 + i;
                        let x = (prev ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x632B_E59B_D9B4_E019);
                        prev = (x ^ (x >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                        block(t, prev)
                    })
                    .collect();
                stored.extend(blocks.iter().map(|b| b.block_hash));
                let _ = d.store(w, parent, &blocks);
                holds_agrees_with_dump(&d, &workers, stored.iter().copied());
                keeps_what_is_held(&d);
            }
        }
    }
}
