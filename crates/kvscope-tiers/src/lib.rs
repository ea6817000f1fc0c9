//! Per-worker, per-tier block trees built from applied verdicts, with consistency counters and a memory bound.
//!
//! What this crate is not: it never decides anything. Which tier an event goes to, whether it is
//! skipped or fatal, is `kvscope-normalize`'s verdict; this crate applies `Apply` verdicts to the
//! events they were made for and ignores the rest. It decodes nothing and does no I/O.
//!
//! - [`Forest`]: per source ([`kvscope_normalize::SourceId`]), four [`TierTree`]s; a
//!   configurable bound on live blocks ([`ForestConfig`]) that stops growth and reports what it
//!   refused ([`LimitReport`]).
//! - [`TierTree`]: block hash -> node {parent, children, seq, time}, with the counters a router
//!   would log (`parent_block_not_found`, `block_not_found`, `duplicate_store`), a one-walk
//!   [`TreeSummary`] (blocks, roots, max depth, largest subtrees) and an icicle drill-down
//!   ([`TierTree::subtree`]).
//!
//! Sized for a million live blocks per worker: nodes sit in a slab indexed by a hash map with a
//! multiply hasher, tree links are slot indices, and no node allocates.

mod explain;
mod forest;
mod hash;
mod tree;

pub use explain::Consistency;
pub use forest::{Change, Forest, ForestConfig, LimitReport, SourceTrees};
pub use hash::{BlockHasher, BuildBlockHasher};
pub use tree::{BlockInfo, HashValue, IcicleNode, OrphanPolicy, StoreResult, SubtreeSize, TierTree, TreeCounters, TreeSummary};
