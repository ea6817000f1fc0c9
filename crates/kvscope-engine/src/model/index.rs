//! The router's index in the page: Dynamo 1.6.1's index modelled under policy A and under
//! policy B (kvscope-index), fed the engine frames the rest of the model sees, beside what the
//! engines hold. Reports are built at most once a flush, and only when a view asks.
//!
//! With several shards, each policy's index is modelled whole by one of them
//! ([`super::shard::index_sides`]): one indexer holds the fleet, so it cannot be split by worker.

use kvscope_index::{IndexConfig, IndexCounts, IndexModel, IndexReport, IndexSide, IndexSourceId, Missing, WorkerKey, worker_number};
use kvscope_normalize::{Policy, StorageTier};
use kvscope_protocol as proto;
use kvscope_router::TokensHashes;
use kvscope_wire::Decoded;

use kvscope_engine_protocol::settings::Side;

/// The indexes of the policies this shard models (both with one shard).
#[derive(Debug)]
pub struct RouterIndexes {
    model: IndexModel,
    /// Model source per page source (engine sources only, every shard's).
    ids: Vec<Option<IndexSourceId>>,
    /// The model's side of each page side this shard models ([`super::shard::index_sides`]).
    sides: [Option<IndexSide>; 2],
    /// The reports as of the last [`RouterIndexes::refresh`], per page side.
    reports: [Option<IndexReport>; 2],
    stale: bool,
    /// Flushes since the reports were built: a report walks every block, so it is rebuilt at
    /// most every [`REFRESH_EVERY`] flushes (about a second at the flush cadence).
    flushes_since: u32,
}

/// Flushes between two rebuilds of the reports.
const REFRESH_EVERY: u32 = 10;

impl RouterIndexes {
    /// The indexes of `policies` this shard models (`modelled`, per side), of every engine
    /// source, each at its own block size or else at `block_size`.
    pub fn new(
        sources: &[proto::SourceInfo],
        policies: [Policy; 2],
        block_size: u32,
        max_nodes: usize,
        modelled: [bool; 2],
    ) -> RouterIndexes {
        let owned: Vec<Policy> = policies.iter().zip(modelled).filter(|(_, m)| *m).map(|(p, _)| *p).collect();
        let model = IndexModel::new(IndexConfig { max_blocks: max_nodes, ..IndexConfig::sides(block_size, &owned) });
        // A policy named twice is one index.
        let sides = [0, 1].map(|i| modelled[i].then(|| model.side(policies[i])).flatten());
        let mut indexes = RouterIndexes { model, ids: Vec::new(), sides, reports: [None, None], stale: true, flushes_since: 0 };
        for s in sources {
            indexes.add_source(s);
        }
        indexes
    }

    /// Whether this shard models any index.
    pub fn models_any(&self) -> bool {
        self.sides.iter().any(Option::is_some)
    }

    /// One more source; an engine's blocks are indexed from its next frame.
    pub fn add_source(&mut self, s: &proto::SourceInfo) {
        let i = s.index as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        if self.models_any() && s.kind == proto::SourceKind::Engine && self.ids[i].is_none() {
            let block_size = s.block_size_or(self.model.config().block_size);
            self.ids[i] = Some(self.model.add_source_at(&s.key, &s.worker_id, s.dp_rank, block_size));
            self.stale = true;
        }
    }

    /// One engine frame of a page source (`decoded` and `hashes`: its payload decoded, and its
    /// stores' tokens hashes computed, once for every part of the model).
    pub fn push(&mut self, source: u32, seq: u64, payload: &[u8], decoded: &Decoded, hashes: &mut TokensHashes, replayed: bool) {
        if let Some(Some(id)) = self.ids.get(source as usize) {
            // A payload that does not decode is counted by the model (and shown by the page).
            let _ = self.model.push_decoded(*id, seq, payload, decoded, hashes, replayed);
            self.stale = true;
        }
    }

    /// `batches` frames of a page source, the last at `last_seq`, that kvscope lost before this
    /// page read them (a lag notice names them): the index blames kvscope for what they hid,
    /// not the router's indexer ([`IndexModel::note_unseen`]).
    pub fn note_unseen(&mut self, source: u32, last_seq: u64, batches: u64) {
        if let Some(Some(id)) = self.ids.get(source as usize) {
            self.model.note_unseen(*id, last_seq, batches, false);
            self.stale = true;
        }
    }

    /// Rebuilds the reports if anything was pushed since and their turn came (a flush calls
    /// it); returns true while they are behind, so that the caller flushes again.
    pub fn refresh(&mut self) -> bool {
        if !self.stale {
            return false;
        }
        self.flushes_since += 1;
        if self.reports.iter().any(Option::is_some) && self.flushes_since < REFRESH_EVERY {
            return true;
        }
        self.refresh_now();
        false
    }

    /// Rebuilds the reports now.
    pub fn refresh_now(&mut self) {
        self.reports = self.sides.map(|side| side.map(|s| self.model.report_of(s)));
        self.stale = false;
        self.flushes_since = 0;
    }

    /// The last refreshed report of a side, if this shard models it.
    pub fn report(&self, side: Side) -> Option<&IndexReport> {
        self.reports[side as usize].as_ref()
    }

    /// A page source's counts under a side, as of the last refresh.
    pub fn counts(&self, side: Side, source: u32) -> Option<&IndexCounts> {
        let id = (*self.ids.get(source as usize)?)?;
        self.report(side)?.sources.get(id.0 as usize).map(|s| &s.counts)
    }

    /// The fleet's counts under a side, as of the last refresh.
    pub fn totals(&self, side: Side) -> Option<&IndexCounts> {
        self.report(side).map(|r| &r.totals)
    }

    /// What the side's router holds of these blocks of an event, in one line: "holds 1 of 2
    /// blocks; 0123456789abcdef: the index dropped its whole store: …" (if this shard models
    /// the side).
    pub fn event_line(&self, side: Side, worker_id: &str, dp_rank: u32, tier: StorageTier, hashes: &[u64]) -> Option<String> {
        self.sides[side as usize]?;
        let held = hashes.iter().filter(|&&h| self.holds(side, worker_id, dp_rank, tier, h)).count();
        let mut line = format!("the router's index holds {held} of the event's {} blocks on {tier}", hashes.len());
        // The first block it lacks that the engine still holds says why (the rest follow it).
        if let Some((h, why)) = hashes.iter().find_map(|&h| Some((h, self.why_missing(side, worker_id, dp_rank, tier, h)?))) {
            line.push_str(&format!("; {h:016x}: {}", why.sentence()));
        }
        Some(line)
    }

    /// Why the side's router lacks this block of a source, when it lacks one the engine holds.
    pub fn why_missing(&self, side: Side, worker_id: &str, dp_rank: u32, tier: StorageTier, hash: u64) -> Option<Missing> {
        let w: WorkerKey = (worker_number(worker_id), dp_rank);
        self.model.why_missing(self.sides[side as usize]?, w, tier, hash)
    }

    /// Whether the side's router holds this block of a source.
    pub fn holds(&self, side: Side, worker_id: &str, dp_rank: u32, tier: StorageTier, hash: u64) -> bool {
        self.sides[side as usize].is_some_and(|s| self.model.holds(s, (worker_number(worker_id), dp_rank), tier, hash))
    }

    pub fn approx_bytes(&self) -> usize {
        self.model.approx_bytes()
    }

    /// Nodes the modelled indexes keep, the bound on each, and what the bound kept out (stores
    /// not modelled, engine blocks not kept), for the memory line.
    pub fn bound_use(&self) -> (u64, usize, (u64, u64)) {
        if !self.models_any() {
            return (0, self.model.config().max_blocks, (0, 0));
        }
        (self.model.kept_nodes() as u64, self.model.config().max_blocks, self.model.refused())
    }
}
