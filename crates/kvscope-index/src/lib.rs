//! What a KV router's index holds, modelled per router, and how it differs from what the
//! engines hold.
//!
//! - [`dynamo`]: Dynamo 1.6.1's index (its standalone indexer and its router), fed
//!   `RouterEvent`s: the device tier's compressed radix tree and the lower tiers' continuation
//!   edges, with the rules of the real one (a store whose parent it does not hold is dropped
//!   whole; a removal cuts the rest of its edge; scoring walks tokens hashes from the root).
//!
//! - [`model`]: an [`IndexModel`] per policy, fed engine batches as that router's indexer is
//!   fed them, beside the engines' [`truth`]; its [`IndexReport`] gives, per source and tier,
//!   the blocks both hold, those only the engine holds and those only the router scores, each by
//!   [`cause`], and the prefix tokens the router sees.
//!
//! What it is not: a normalizer (which events reach the index is kvscope-normalize's verdict
//! and kvscope-router's prediction of the relay), nor any I/O (it builds for
//! `wasm32-unknown-unknown`; callers bring the events).

pub mod cause;
pub mod dump;
pub mod dynamo;
pub mod model;
pub mod truth;

/// The index's maps, keyed on block hashes and worker keys: a folded multiply, not SipHash, as
/// kvscope's tier trees hash (`kvscope_tiers::BlockHasher`: 20 ns a lookup saved at a million
/// blocks; not DoS-resistant, which a viewer need not be).
pub type FastMap<K, V> = std::collections::HashMap<K, V, kvscope_tiers::BuildBlockHasher>;

pub use cause::{Missing, OrphanRoot, Stale};
pub use dump::{DumpPart, dump_block_sets, parse_dump};
pub use dynamo::{BlockSets, DynamoIndex, SWEEP_INTERVAL_SECS, StoreError, WorkerKey};
pub use model::{
    ExitAt, IndexConfig, IndexCounts, IndexDifference, IndexModel, IndexReport, IndexSide, IndexSourceId, SourceIndex, TierCounts, percent,
    worker_number,
};
pub use truth::{Truth, TruthBlock};
