//! A router's index under each of some policies, fed as that router's indexer is fed, beside
//! what the engines hold, with the cause of every difference.
//!
//! Per engine source, predictions of each batch ([`kvscope_router::Predictor`] with the
//! standalone indexer's listener feed):
//!
//! - under [`Policy::ENGINE`], what the engine itself holds: applied to the one [`Truth`] every
//!   policy is compared with;
//! - under each policy, what that indexer applies: fed to its own [`DynamoIndex`], through the
//!   listener's own rules. It never gets frames only kvscope's replay recovered (an indexer
//!   reading `--workers` has no replay); it drops a batch whose seq is at or below the last one
//!   it applied (an engine restart restarts the count, the index keeps its blocks); and under a
//!   policy with fatal verdicts it exits on the first one and restarts empty, its listeners
//!   joining late.
//!
//! As each event is applied, a block the engine holds and an index does not gets its
//! [`Missing`] cause, and one an index holds after the engine evicted it its [`Stale`] cause;
//! [`IndexModel::report`] compares the block sets per worker, rank and tier and scores every
//! chain the engine holds from its root as Dynamo's `find_matches` does.

use std::cell::Cell;
use std::collections::BTreeMap;

use crate::FastMap;

use kvscope_normalize::{Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_router::{EventData, PredictPass, Predicted, Prediction, Predictor, RelayConfig, RouterEvent, TokensHashes};
use kvscope_wire::{BatchHeader, DecodeError, Decoded, EventSink, KvEvent};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::cause::{Missing, OrphanRoot, Stale};
use crate::dynamo::{Block, BlockSets, DynamoIndex, StoreError, WorkerKey, blocks, storage_tier};
use crate::truth::Truth;

/// What an [`IndexModel`] models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexConfig {
    /// The indexers' `--block-size`.
    pub block_size: u32,
    /// The normalizer each modelled indexer runs: one index per policy ([`IndexSide`]).
    pub policies: Vec<Policy>,
    /// Blocks the engines' truth may hold, and nodes an index may keep, before either stops
    /// growing (and the report says so). An index keeps what Dynamo's would: live nodes, and
    /// emptied leaves until its sweep (docs/dynamo-1.6.1-index.md, 1.3a).
    pub max_blocks: usize,
}

impl IndexConfig {
    /// Blocks kept by default: a few hundred MB at most.
    pub const DEFAULT_MAX_BLOCKS: usize = 2_000_000;

    /// One indexer, running `policy`.
    pub fn new(block_size: u32, policy: Policy) -> IndexConfig {
        IndexConfig::sides(block_size, &[policy])
    }

    /// One indexer per policy (a policy named twice is modelled once).
    pub fn sides(block_size: u32, policies: &[Policy]) -> IndexConfig {
        let mut unique: Vec<Policy> = Vec::new();
        for p in policies {
            if !unique.contains(p) {
                unique.push(*p);
            }
        }
        IndexConfig { block_size, policies: unique, max_blocks: IndexConfig::DEFAULT_MAX_BLOCKS }
    }
}

/// Index of a source in an [`IndexModel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexSourceId(pub u32);

/// Index of a policy's index in an [`IndexModel`] (its place in [`IndexConfig::policies`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexSide(pub usize);

/// One source as one indexer's listener has it.
#[derive(Clone, Debug)]
struct Listener {
    /// Its normalizer (fresh when the indexer restarts).
    predictor: Predictor,
    watermark: Option<u64>,
    listened: bool,
    joined_late: bool,
    lost_frames: bool,
}

#[derive(Clone, Debug)]
struct Source {
    key: String,
    worker_id: u64,
    dp_rank: u32,
    /// Its model's block size: what its listeners judge its stores at.
    block_size: u32,
    /// What the engine holds.
    engine: Predictor,
    last_seq: Option<u64>,
    restarted: bool,
    /// Batches of this source kvscope itself did not model ([`IndexModel::note_unseen`]).
    unseen_batches: u64,
    /// Every rank this source's batches named.
    ranks: Vec<u32>,
}

impl Source {
    fn keys(&self) -> impl Iterator<Item = WorkerKey> + '_ {
        self.ranks.iter().map(|&r| (self.worker_id, r))
    }
}

type BlockKey = (WorkerKey, StorageTier, u64);

/// One policy's indexer: its listeners (one per source) and the causes of what its index
/// ([`IndexModel::indexes`]) lacks or keeps.
#[derive(Clone, Debug)]
struct Side {
    policy: Policy,
    /// An earlier side whose index this one reads, while every event and sweep either applied
    /// was the same for both: policies that agree keep one tree, and fork it where they part.
    shares_with: Option<usize>,
    /// What the last event did to this side's index, for the sides that share it.
    applied: Applied,
    listeners: Vec<Listener>,
    missing: FastMap<BlockKey, Missing>,
    stale: FastMap<BlockKey, Stale>,
    /// Why a worker's remaining router-only blocks are stale, when no event said more.
    stale_fallback: FastMap<WorkerKey, Stale>,
    exits: u64,
    first_exit: Option<(String, u64)>,
    refused_blocks: u64,
}

/// What applying an event did to an index.
#[derive(Clone, Copy, Debug)]
enum Applied {
    Nothing,
    /// The index keeps [`IndexConfig::max_blocks`] nodes: the store was not modelled.
    Refused,
    Done(Result<(), StoreError>),
}

fn holds_in(index: &DynamoIndex, w: WorkerKey, tier: StorageTier, h: u64) -> bool {
    match tier {
        StorageTier::Device => index.device().holds(w, h),
        _ => index.lower(tier).is_some_and(|t| t.holds(w, h)),
    }
}

/// Whether a block the index does not hold for the worker has its tokens there under another
/// hash, and the hash the index lists for the worker instead, if any (the device tier's; a
/// lower tier lists nothing).
fn tokens_under_other_hash(index: &DynamoIndex, w: WorkerKey, tier: StorageTier, parent: Option<u64>, b: Block) -> Option<Option<u64>> {
    match tier {
        StorageTier::Device => index.device().listed_instead(w, b).map(Some),
        _ => index.lower(tier)?.taken_by(parent, b.tokens_hash, b.block_hash).map(|_| None),
    }
}

/// The engines' truth and one modelled index per policy.
#[derive(Clone, Debug)]
pub struct IndexModel {
    config: IndexConfig,
    /// Each side's own index (a side that shares another's keeps an empty one here).
    indexes: Vec<DynamoIndex>,
    /// Indexes copied where sharing sides' policies parted.
    forks: u64,
    truth: Truth,
    sources: Vec<Source>,
    sides: Vec<Side>,
    truth_refused: u64,
    decode_errors: u64,
    scratch: Scratch,
}

/// A Dynamo worker id for a kvscope worker id: the number itself when it is one (as Dynamo
/// names workers), otherwise a stable hash of the name (only this model uses it).
pub fn worker_number(worker_id: &str) -> u64 {
    worker_id
        .parse()
        .unwrap_or_else(|_| worker_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)))
}

/// Removes a key from a map of causes that is most often empty (a fleet whose index keeps
/// up), without hashing the key then.
fn remove_if_any<V>(causes: &mut FastMap<BlockKey, V>, key: &BlockKey) {
    if !causes.is_empty() {
        causes.remove(key);
    }
}

/// One value per side: a model has one or two, and a frame should not allocate for them.
type PerSide<T> = SmallVec<[T; 4]>;

/// The prediction lists of a batch, kept between batches so that their buffers are reused.
#[derive(Clone, Debug, Default)]
struct Scratch {
    /// The engine's truth's.
    engine: Vec<Prediction>,
    /// Each side's listener's.
    lists: Vec<Vec<Prediction>>,
}

impl Scratch {
    /// Empty again, keeping what the lists reserved.
    fn emptied(mut self) -> Scratch {
        self.engine.clear();
        self.lists.iter_mut().for_each(Vec::clear);
        self
    }
}

impl IndexModel {
    pub fn new(config: IndexConfig) -> IndexModel {
        let sides = config
            .policies
            .iter()
            .enumerate()
            .map(|(k, &policy)| Side {
                policy,
                shares_with: (k > 0).then_some(0),
                applied: Applied::Nothing,
                listeners: Vec::new(),
                missing: FastMap::default(),
                stale: FastMap::default(),
                stale_fallback: FastMap::default(),
                exits: 0,
                first_exit: None,
                refused_blocks: 0,
            })
            .collect();
        IndexModel {
            indexes: vec![DynamoIndex::new(); config.policies.len()],
            forks: 0,
            config,
            truth: Truth::default(),
            sources: Vec::new(),
            sides,
            truth_refused: 0,
            decode_errors: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// The side modelling `policy`, if it is one of the model's.
    pub fn side(&self, policy: Policy) -> Option<IndexSide> {
        self.sides.iter().position(|s| s.policy == policy).map(IndexSide)
    }

    /// The index of the first (or only) policy.
    pub fn index(&self) -> &DynamoIndex {
        self.index_of(IndexSide(0))
    }

    /// # Panics
    /// If `side` did not come from this model.
    pub fn index_of(&self, side: IndexSide) -> &DynamoIndex {
        self.index_for(side.0)
    }

    fn index_for(&self, k: usize) -> &DynamoIndex {
        &self.indexes[self.sides[k].shares_with.unwrap_or(k)]
    }

    /// Nodes the modelled indexes keep, all sides (a shared index once): what
    /// [`IndexConfig::max_blocks`] bounds, per index.
    pub fn kept_nodes(&self) -> usize {
        self.sides.iter().enumerate().filter(|(_, s)| s.shares_with.is_none()).map(|(k, _)| self.indexes[k].device().nodes()).sum()
    }

    /// What the bound kept out: stores no index modelled (summed over the sides), and blocks the
    /// engines' truth did not keep.
    pub fn refused(&self) -> (u64, u64) {
        (self.sides.iter().map(|s| s.refused_blocks).sum(), self.truth_refused)
    }

    /// Indexes copied where policies that had applied the same events so far parted (a
    /// measure of the sharing, for benchmarks and tests).
    pub fn forks(&self) -> u64 {
        self.forks
    }

    /// Side `k` reads its own index from now on: a copy of the one it shared.
    fn fork(&mut self, k: usize) {
        if let Some(owner) = self.sides[k].shares_with.take() {
            self.indexes[k] = self.indexes[owner].clone();
            self.forks += 1;
        }
    }

    pub fn truth(&self) -> &Truth {
        &self.truth
    }

    fn listener(policy: Policy, worker_id: u64, dp_rank: u32, block_size: u32) -> Listener {
        Listener {
            predictor: Predictor::new(RelayConfig::listener(worker_id, dp_rank, block_size, policy)),
            watermark: None,
            listened: false,
            joined_late: false,
            lost_frames: false,
        }
    }

    /// Adds an engine source (`key` as kvscope names it, `worker_id` as `--workers` does), at
    /// the model's block size.
    pub fn add_source(&mut self, key: &str, worker_id: &str, dp_rank: u32) -> IndexSourceId {
        self.add_source_at(key, worker_id, dp_rank, self.config.block_size)
    }

    /// Adds an engine source whose model has its own block size (a discovered engine's): its
    /// indexer reads it at that size, as Dynamo runs a router per model.
    pub fn add_source_at(&mut self, key: &str, worker_id: &str, dp_rank: u32, block_size: u32) -> IndexSourceId {
        let worker = worker_number(worker_id);
        let engine = Predictor::new(RelayConfig::listener(worker, dp_rank, block_size, Policy::ENGINE));
        self.sources.push(Source {
            key: key.to_owned(),
            worker_id: worker,
            dp_rank,
            block_size,
            engine,
            last_seq: None,
            restarted: false,
            unseen_batches: 0,
            ranks: vec![dp_rank],
        });
        for i in 0..self.sides.len() {
            let l = Self::listener(self.sides[i].policy, worker, dp_rank, block_size);
            self.sides[i].listeners.push(l);
        }
        IndexSourceId(self.sources.len() as u32 - 1)
    }

    /// kvscope itself did not model `batches` batches of `id`, the last of them at `last_seq`:
    /// its own queue dropped them (the server's `--router-queue-bytes`, or a page's share of the
    /// relay that a lag notice names). The indexer very likely heard them, so its listeners move
    /// past them without noting a gap, and a store whose chain began there is kvscope's blind
    /// spot ([`OrphanRoot::KvscopeDropped`]), not frames the indexer lost.
    ///
    /// # Panics
    /// If `id` did not come from this model.
    pub fn note_unseen(&mut self, id: IndexSourceId, last_seq: u64, batches: u64, replayed: bool) {
        let i = id.0 as usize;
        self.sources[i].unseen_batches += batches;
        for side in &mut self.sides {
            let l = &mut side.listeners[i];
            if hears(l, last_seq, replayed).is_ok() {
                note_heard(l, last_seq);
                l.watermark = Some(last_seq);
            }
        }
    }

    /// Batches kvscope did not model, over every source ([`IndexModel::note_unseen`]).
    pub fn unseen_batches(&self) -> u64 {
        self.sources.iter().map(|s| s.unseen_batches).sum()
    }

    /// One engine batch of a source, in relay order (`replayed`: it came from the engine's
    /// replay socket). A payload that does not decode is counted and returned.
    ///
    /// # Panics
    /// If `id` did not come from this model.
    pub fn push(&mut self, id: IndexSourceId, seq: u64, payload: &[u8], replayed: bool) -> Result<(), DecodeError> {
        self.push_decoded(id, seq, payload, &Decoded::with_token_bytes(payload), &mut TokensHashes::default(), replayed)
    }

    /// As [`IndexModel::push`], with the payload decoded once, and its stores' tokens hashes
    /// computed once, for other consumers too (the reconciler's relay).
    ///
    /// # Panics
    /// If `id` did not come from this model.
    pub fn push_decoded(
        &mut self,
        id: IndexSourceId,
        seq: u64,
        payload: &[u8],
        decoded: &Decoded,
        hashes: &mut TokensHashes,
        replayed: bool,
    ) -> Result<(), DecodeError> {
        let i = id.0 as usize;
        // Which sides' listeners hear this batch, decided by their cursors before it decodes.
        let hears: PerSide<Result<(), Missing>> = self.sides.iter().map(|side| hears(&side.listeners[i], seq, replayed)).collect();
        // One decode for the engine's truth and every listening side. Only the events the
        // engine keeps, and those the indexes act on, are kept: a batch of millions of skipped
        // events costs no memory per event (Predictor::predict_sparse). A side's drop matters
        // where the engine keeps the event (it names why a block is missing). The lists are
        // the model's own, emptied after each batch: a frame allocates none of them.
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.lists.resize_with(self.sides.len(), Vec::new);
        let engine_keeps = Cell::new(false);
        let never: fn(u32, VerdictLabel) -> bool = |_, _| false;
        let (truth_batch, taken, published_at) = {
            let IndexModel { sources, sides, .. } = self;
            let Scratch { engine, lists } = &mut scratch;
            let truth = sources[i].engine.pass(decoded, seq, never, engine);
            let passes = sides
                .iter_mut()
                .zip(lists.iter_mut())
                .zip(&hears)
                .filter(|(_, h)| h.is_ok())
                .map(|((side, list), _)| side.listeners[i].predictor.pass(decoded, seq, |_, _| engine_keeps.get(), list))
                .collect();
            let mut fanout = Fanout { truth, sides: passes, engine_keeps: &engine_keeps };
            let decoded = decoded.feed(payload, &mut fanout);
            let published_at = decoded.as_ref().map_or(f64::NAN, |h| h.ts);
            let Fanout { truth, sides: passes, .. } = fanout;
            let truth_batch = truth.finish_sharing(payload, &decoded, hashes);
            // The listeners' normalizers count nothing of a payload that does not decode.
            let taken: PerSide<bool> = match truth_batch {
                Ok(_) => passes.into_iter().map(|p| p.finish_sharing(payload, &decoded, hashes).is_ok_and(|b| b.taken())).collect(),
                Err(_) => PerSide::new(),
            };
            (truth_batch, taken, published_at)
        };
        if let Err(e) = truth_batch {
            self.decode_errors += 1;
            self.scratch = scratch.emptied();
            return Err(e);
        }
        let mut taken = taken.into_iter();
        let mut sweep_clock: PerSide<bool> = PerSide::new();
        for (side, h) in self.sides.iter_mut().zip(&hears) {
            let mut took = false;
            if h.is_ok() {
                let l = &mut side.listeners[i];
                note_heard(l, seq);
                // A batch the indexer's decoder rejects does not move its cursor.
                if taken.next() == Some(true) {
                    l.watermark = Some(seq);
                    took = true;
                }
            }
            sweep_clock.push(took);
        }
        let s = &mut self.sources[i];
        if s.last_seq.is_some_and(|l| seq < l) && !replayed {
            s.restarted = true;
            let keys: Vec<WorkerKey> = s.keys().collect();
            for w in keys {
                self.truth.clear(w);
                for side in &mut self.sides {
                    side.missing.retain(|k, _| k.0 != w);
                    side.stale_fallback.insert(w, Stale::EngineRestarted);
                }
            }
        }
        self.sources[i].last_seq = Some(seq);
        let heard: PerSide<Result<&[Prediction], Missing>> =
            hears.iter().zip(&scratch.lists).map(|(h, list)| h.map(|()| list.as_slice())).collect();
        let mut exited: PerSide<bool> = heard.iter().map(|_| false).collect();
        // The lists are sparse and in batch order: walk them together by event index.
        let engine = &scratch.engine;
        let mut next_truth = 0;
        let mut next: PerSide<usize> = heard.iter().map(|_| 0).collect();
        loop {
            let heads = heard.iter().zip(&next).filter_map(|(h, &c)| h.as_ref().ok()?.get(c));
            let Some(n) = engine.get(next_truth).into_iter().chain(heads).map(|p| p.origin.event_index).min() else { break };
            let truth = engine.get(next_truth).filter(|p| p.origin.event_index == n);
            next_truth += usize::from(truth.is_some());
            let mut policies: PerSide<Result<&Prediction, Missing>> = PerSide::new();
            for (k, h) in heard.iter().enumerate() {
                let p = match h {
                    Ok(list) => match list.get(next[k]).filter(|p| p.origin.event_index == n) {
                        Some(p) => {
                            next[k] += 1;
                            if exited[k] { Err(Missing::IndexerExited) } else { Ok(p) }
                        }
                        None if exited[k] => Err(Missing::IndexerExited),
                        None => Err(Missing::NotReceived),
                    },
                    Err(m) => Err(*m),
                };
                if let Ok(Prediction { outcome: Predicted::Dropped { label, .. }, .. }) = p
                    && label.outcome() == Outcome::Fatal
                {
                    self.exit(k, i, seq);
                    exited[k] = true;
                }
                policies.push(p);
            }
            self.apply_event(i, truth, &policies);
        }
        drop(heard);
        // The indexer's sweep is due by its clock as it queues events: after a batch it took.
        // A side that shares an index with an owner that took the batch when it did not, or
        // the other way round, parts here if the clock would change the index.
        for k in 0..self.sides.len() {
            if let Some(owner) = self.sides[k].shares_with
                && sweep_clock[owner] != sweep_clock[k]
                && self.indexes[owner].tick_changes(published_at)
            {
                self.fork(k);
            }
        }
        for (k, took) in sweep_clock.into_iter().enumerate() {
            if took && self.sides[k].shares_with.is_none() {
                self.indexes[k].tick(published_at);
            }
        }
        self.scratch = scratch.emptied();
        Ok(())
    }

    /// An indexer exits on a fatal verdict and restarts with nothing: an empty index, fresh
    /// normalizers, listeners that join late.
    fn exit(&mut self, side: usize, source: usize, seq: u64) {
        let key = self.sources[source].key.clone();
        let policy = self.sides[side].policy;
        let fresh: Vec<Listener> = self.sources.iter().map(|s| Self::listener(policy, s.worker_id, s.dp_rank, s.block_size)).collect();
        // The sides that read this side's index keep it: the first of them owns it now.
        if self.sides[side].shares_with.take().is_none()
            && let Some(heir) = self.sides.iter().position(|s| s.shares_with == Some(side))
        {
            self.indexes.swap(side, heir);
            self.sides[heir].shares_with = None;
            for s in &mut self.sides {
                if s.shares_with == Some(side) {
                    s.shares_with = Some(heir);
                }
            }
        }
        self.indexes[side] = DynamoIndex::new();
        let s = &mut self.sides[side];
        s.exits += 1;
        s.first_exit.get_or_insert((key, seq));
        s.stale.clear();
        s.stale_fallback.clear();
        for ((w, tier), set) in self.truth.sets() {
            for &h in set.keys() {
                s.missing.insert((*w, *tier, h), Missing::IndexerExited);
            }
        }
        s.listeners = fresh;
    }

    /// Where the chain of a store whose parent an index lacks first broke.
    fn orphan_root(&self, side: usize, source: usize, w: WorkerKey, tier: StorageTier, parent: u64) -> OrphanRoot {
        let s = &self.sides[side];
        if let Some(m) = s.missing.get(&(w, tier, parent)) {
            return m.as_orphan_root();
        }
        if self.truth.holds(w, tier, parent) {
            return OrphanRoot::AfterCutOff;
        }
        let l = &s.listeners[source];
        if self.sources[source].unseen_batches > 0 {
            OrphanRoot::KvscopeDropped
        } else if l.lost_frames {
            OrphanRoot::LostFrames
        } else if self.sources[source].restarted {
            OrphanRoot::EngineRestarted
        } else if l.joined_late {
            OrphanRoot::LateJoin
        } else if s.exits > 0 {
            OrphanRoot::IndexerExited
        } else {
            OrphanRoot::NeverAnnounced
        }
    }

    /// One engine event: the truth's change, each index's, and the causes of what now differs.
    fn apply_event(&mut self, source: usize, truth: Option<&Prediction>, policies: &[Result<&Prediction, Missing>]) {
        // Sides that share an index part where their indexers get different events.
        let event = |k: usize| policies[k].ok().and_then(Prediction::router_event);
        for k in 0..self.sides.len() {
            if let Some(owner) = self.sides[k].shares_with
                && event(owner) != event(k)
            {
                self.fork(k);
            }
        }
        let Some(t) = truth.and_then(Prediction::router_event) else {
            // The engine's own filter (a non-main group, an ignored event): no prefix block.
            for (k, p) in policies.iter().enumerate() {
                self.apply_index(k, *p);
            }
            return;
        };
        let w = (t.worker_id, t.event.dp_rank);
        if !self.sources[source].ranks.contains(&w.1) {
            self.sources[source].ranks.push(w.1);
        }
        let Some(tier) = storage_tier(&t.storage_tier) else { return };
        match &t.event.data {
            EventData::Stored(s) => {
                if self.truth.len() + s.blocks.len() > self.config.max_blocks {
                    self.truth_refused += s.blocks.len() as u64;
                    return;
                }
                let blocks = blocks(s);
                self.truth.store(w, tier, s.parent_hash, &blocks);
                let mut held: PerSide<SmallVec<[bool; 8]>> = PerSide::new();
                for (k, policy) in policies.iter().enumerate() {
                    let applied = self.apply_index(k, *policy);
                    let side_held = self.holds_each(k, w, tier, blocks.iter().map(|b| (b.block_hash, true)), &held);
                    let mut under_other_hash = false;
                    for (n, b) in blocks.iter().enumerate() {
                        let key = (w, tier, b.block_hash);
                        if side_held[n] {
                            remove_if_any(&mut self.sides[k].missing, &key);
                            continue;
                        }
                        let mut cause = match (&applied, policy) {
                            (_, Err(m)) => *m,
                            (_, Ok(Prediction { outcome: Predicted::Dropped { label, .. }, .. })) => Missing::Dropped(*label),
                            (Some((_, Err(StoreError::ParentNotFound | StoreError::ParentNotCovered))), _) => match s.parent_hash {
                                Some(p) if n == 0 => Missing::Orphan(self.orphan_root(k, source, w, tier, p)),
                                // A later block of a dropped store: an orphan of the same break.
                                _ => self.sides[k]
                                    .missing
                                    .get(&(w, tier, blocks[0].block_hash))
                                    .copied()
                                    .unwrap_or(Missing::Orphan(OrphanRoot::NeverAnnounced)),
                            },
                            (Some((_, Err(StoreError::StaleParent))), _) => Missing::ForeignEdge,
                            (Some((e, Ok(()))), _) if !published(e, b.block_hash) => Missing::NotPublished,
                            _ => Missing::CutOff,
                        };
                        // A store that ran into the first writer's blocks for the same tokens
                        // took them under its hashes first (the device tier), or stopped there
                        // (a lower tier, whose walk loses the rest with it).
                        if matches!(cause, Missing::CutOff | Missing::ForeignEdge) {
                            let parent = if n == 0 { s.parent_hash } else { Some(blocks[n - 1].block_hash) };
                            let other = tokens_under_other_hash(self.index_for(k), w, tier, parent, *b);
                            if other.is_some() || (under_other_hash && cause == Missing::CutOff) {
                                cause = Missing::UnderOtherHash;
                                under_other_hash = true;
                            }
                            if let Some(Some(listed)) = other
                                && !self.truth.holds(w, tier, listed)
                            {
                                self.sides[k].stale.insert((w, tier, listed), Stale::ListedForOtherHash);
                            }
                        }
                        self.sides[k].missing.insert(key, cause);
                    }
                    held.push(side_held);
                }
            }
            EventData::Removed(r) => {
                // The truth first (it reads no index): whether each index held a block before
                // the removal matters only for a block other copies still hold, so only those
                // are asked (`holds` walks up the tree).
                let removed = self.truth.remove(w, tier, &r.block_hashes);
                let mut held_before: PerSide<SmallVec<[bool; 8]>> = PerSide::new();
                for k in 0..self.sides.len() {
                    let side_held = self.holds_each(k, w, tier, removed.iter().copied(), &held_before);
                    held_before.push(side_held);
                }
                for (k, policy) in policies.iter().enumerate() {
                    self.apply_index(k, *policy);
                }
                let mut held_after: PerSide<SmallVec<[bool; 8]>> = PerSide::new();
                for (k, policy) in policies.iter().enumerate() {
                    let side_held = self.holds_each(k, w, tier, removed.iter().map(|&(h, _)| (h, true)), &held_after);
                    let side = &mut self.sides[k];
                    for ((&(h, still_held), &was_held), &now_held) in removed.iter().zip(&held_before[k]).zip(&side_held) {
                        let key = (w, tier, h);
                        if still_held {
                            if was_held && !now_held {
                                side.missing.insert(key, Missing::RemovedWhileHeld);
                            }
                            continue;
                        }
                        remove_if_any(&mut side.missing, &key);
                        if now_held {
                            let cause = match policy {
                                Err(_) => Stale::RemovalStaleSeq,
                                Ok(Prediction { outcome: Predicted::Dropped { label, .. }, .. }) => Stale::RemovalDropped(*label),
                                Ok(Prediction { outcome: Predicted::HeldBack, .. }) => Stale::RemovalHeldBack,
                                Ok(_) => Stale::Unremovable,
                            };
                            side.stale.insert(key, cause);
                        }
                    }
                    held_after.push(side_held);
                }
            }
            EventData::Cleared => {
                self.truth.clear(w);
                for (k, policy) in policies.iter().enumerate() {
                    self.sides[k].missing.retain(|key, _| key.0 != w);
                    let cleared = matches!(self.apply_index(k, *policy), Some((_, Ok(()))));
                    let side = &mut self.sides[k];
                    if cleared {
                        side.stale_fallback.remove(&w);
                    } else {
                        let cause = match policy {
                            Ok(Prediction { outcome: Predicted::Dropped { label, .. }, .. }) => Stale::RemovalDropped(*label),
                            _ => Stale::RemovalStaleSeq,
                        };
                        side.stale_fallback.insert(w, cause);
                    }
                }
            }
        }
        // A block the engine holds again is no longer stale anywhere; only a store makes the
        // engine hold a block, so only its blocks need looking up (not the whole map per event).
        if let EventData::Stored(s) = &t.event.data {
            for side in &mut self.sides {
                for b in &s.blocks {
                    remove_if_any(&mut side.stale, &(w, tier, b.block_hash));
                }
            }
        }
    }

    /// Whether side `k`'s index holds each hash it is asked of (`(hash, ask)`; not asked: false).
    /// A side that shares its owner's index takes the owner's answers, in `asked` already: one
    /// walk up the tree per index, not per side.
    fn holds_each(
        &self,
        k: usize,
        w: WorkerKey,
        tier: StorageTier,
        hashes: impl Iterator<Item = (u64, bool)>,
        asked: &[SmallVec<[bool; 8]>],
    ) -> SmallVec<[bool; 8]> {
        match self.sides[k].shares_with {
            Some(owner) => asked[owner].clone(),
            None => hashes.map(|(h, ask)| ask && holds_in(&self.indexes[k], w, tier, h)).collect(),
        }
    }

    /// Applies an indexer's event, if it has one; returns it with the index's answer.
    fn apply_index<'a>(
        &mut self,
        side: usize,
        policy: Result<&'a Prediction, Missing>,
    ) -> Option<(&'a RouterEvent, Result<(), StoreError>)> {
        let e = policy.ok()?.router_event()?;
        // A side that shares an index gets the same event as its owner, which applied it first.
        let applied = match self.sides[side].shares_with {
            Some(owner) => self.sides[owner].applied,
            None if matches!(e.event.data, EventData::Stored(_)) && self.indexes[side].device().nodes() >= self.config.max_blocks => {
                Applied::Refused
            }
            None => Applied::Done(self.indexes[side].apply(e)),
        };
        let s = &mut self.sides[side];
        s.applied = applied;
        match applied {
            Applied::Done(r) => Some((e, r)),
            Applied::Refused => {
                s.refused_blocks += 1;
                None
            }
            Applied::Nothing => None,
        }
    }

    /// Every source's and tier's comparison, and the fleet's, for the first (or only) policy.
    pub fn report(&self) -> IndexReport {
        self.report_of(IndexSide(0))
    }

    /// The comparison for one policy's index.
    pub fn report_of(&self, side: IndexSide) -> IndexReport {
        let index = self.index_for(side.0);
        self.report_for(side, &index.block_sets(), index)
    }

    /// The same comparison for another index of the same fleet (a real one, read from its
    /// `/dump`): its blocks against the engines', with `side`'s causes where it knows them,
    /// scored with `scorer`.
    pub fn report_for(&self, side: IndexSide, index: &BlockSets, scorer: &DynamoIndex) -> IndexReport {
        let s = &self.sides[side.0];
        let owner = self.owners();
        let mut per_source: Vec<IndexCounts> = vec![IndexCounts::default(); self.sources.len()];
        let mut keys: Vec<(WorkerKey, StorageTier)> = self.truth.sets().map(|(k, _)| *k).chain(index.keys().copied()).collect();
        keys.sort();
        keys.dedup();
        let empty = Default::default();
        for (w, tier) in keys {
            let Some(&src) = owner.get(&w) else { continue };
            let truth = self.truth.set(w, tier);
            let held = index.get(&(w, tier)).unwrap_or(&empty);
            let mut t = TierCounts { engine_blocks: truth.len() as u64, router_blocks: held.len() as u64, ..TierCounts::default() };
            for h in truth.keys() {
                if held.contains(h) {
                    t.both += 1;
                } else {
                    let cause = s.missing.get(&(w, tier, *h)).copied().unwrap_or(Missing::CutOff);
                    *t.engine_only.entry(cause.label()).or_default() += 1;
                }
            }
            for h in held.iter().filter(|h| !truth.contains_key(h)) {
                let cause = s.stale.get(&(w, tier, *h)).or(s.stale_fallback.get(&w)).copied().unwrap_or(Stale::NeverAnnounced);
                *t.router_only.entry(cause.label()).or_default() += 1;
            }
            let c = &mut per_source[src];
            // A block holds its own model's block size of tokens.
            let bs = u64::from(self.sources[src].block_size);
            if tier == StorageTier::Device {
                c.engine_prefix_tokens += truth.len() as u64 * bs;
                c.visible_prefix_tokens += visible_blocks(scorer, w, &truth) * bs;
                c.phantom_tokens += held.iter().filter(|h| !truth.contains_key(h)).count() as u64 * bs;
            }
            c.add_tier(tier, &t);
        }
        let mut totals = IndexCounts::default();
        let sources = self
            .sources
            .iter()
            .zip(per_source)
            .map(|(src, counts)| {
                totals.merge(&counts);
                SourceIndex { key: src.key.clone(), counts }
            })
            .collect();
        IndexReport {
            policy: s.policy.name,
            block_size: self.config.block_size,
            sources,
            totals,
            indexer_exits: s.exits,
            first_exit: s.first_exit.clone().map(|(source, seq)| ExitAt { source, seq }),
            refused_blocks: s.refused_blocks + self.truth_refused,
            decode_errors: self.decode_errors,
        }
    }

    /// Which source each worker and rank belongs to: the source at that key, or else the first
    /// source whose batches named the rank.
    fn owners(&self) -> FastMap<WorkerKey, usize> {
        let mut owner: FastMap<WorkerKey, usize> = FastMap::default();
        for (i, s) in self.sources.iter().enumerate() {
            owner.insert((s.worker_id, s.dp_rank), i);
        }
        for (i, s) in self.sources.iter().enumerate() {
            for k in s.keys() {
                owner.entry(k).or_insert(i);
            }
        }
        owner
    }

    /// Where `side`'s index and another index of the fleet (a real one) disagree, block by
    /// block: how many, and the first `max` with what the model says of each.
    pub fn differences(&self, side: IndexSide, real: &BlockSets, max: usize) -> (u64, Vec<IndexDifference>) {
        let s = &self.sides[side.0];
        let model = self.index_for(side.0).block_sets();
        let empty = Default::default();
        let mut keys: Vec<&(WorkerKey, StorageTier)> = model.keys().chain(real.keys()).collect();
        keys.sort();
        keys.dedup();
        let owner = self.owners();
        let (mut count, mut out) = (0u64, Vec::new());
        for &(w, tier) in keys {
            let (m, r) = (model.get(&(w, tier)).unwrap_or(&empty), real.get(&(w, tier)).unwrap_or(&empty));
            for &h in m.symmetric_difference(r) {
                count += 1;
                if out.len() >= max {
                    continue;
                }
                let model_holds = m.contains(&h);
                let model_says = if model_holds {
                    "the model holds it".to_owned()
                } else if let Some(c) = s.missing.get(&(w, tier, h)) {
                    format!("the model lacks it: {}", c.sentence())
                } else if self.truth.holds(w, tier, h) {
                    "the model lacks it (the engine holds it)".to_owned()
                } else {
                    "the model lacks it (the engine does not hold it either)".to_owned()
                };
                out.push(IndexDifference {
                    source: owner.get(&w).map(|&i| self.sources[i].key.clone()),
                    worker_id: w.0,
                    dp_rank: w.1,
                    tier: tier.label(),
                    block_hash: h,
                    model_holds,
                    real_holds: !model_holds,
                    model_says,
                });
            }
        }
        (count, out)
    }

    pub fn approx_bytes(&self) -> usize {
        self.truth.approx_bytes()
            + self.indexes.iter().map(DynamoIndex::approx_bytes).sum::<usize>()
            + self.sides.iter().map(|s| (s.missing.capacity() + s.stale.capacity()) * 40).sum::<usize>()
    }

    /// Why `side`'s index lacks a block the engine holds, when it does (the inspector's
    /// question); `None` when the engine does not hold it or the index does.
    pub fn why_missing(&self, side: IndexSide, w: WorkerKey, tier: StorageTier, h: u64) -> Option<Missing> {
        let s = &self.sides[side.0];
        if !self.truth.holds(w, tier, h) || holds_in(self.index_for(side.0), w, tier, h) {
            return None;
        }
        Some(s.missing.get(&(w, tier, h)).copied().unwrap_or(Missing::CutOff))
    }

    /// Whether `side`'s index holds the block for this worker.
    pub fn holds(&self, side: IndexSide, w: WorkerKey, tier: StorageTier, h: u64) -> bool {
        holds_in(self.index_for(side.0), w, tier, h)
    }
}

/// What a listener does with a frame: never gets a replayed one, drops a stale seq, else
/// predicts the batch (a gap or a late first frame is noted).
/// Whether a listener hears a batch: not one from the replay socket (the indexer reads the
/// live one), nor one at or below its cursor.
fn hears(l: &Listener, seq: u64, replayed: bool) -> Result<(), Missing> {
    if replayed {
        return Err(Missing::NotReceived);
    }
    if l.watermark.is_some_and(|w| seq <= w) {
        return Err(Missing::StaleSeq);
    }
    Ok(())
}

/// What hearing a batch tells a listener about its stream: it joined late, or lost frames.
fn note_heard(l: &mut Listener, seq: u64) {
    if !l.listened && seq > 0 {
        l.joined_late = true;
    }
    if l.watermark.is_some_and(|w| seq > w + 1) {
        l.lost_frames = true;
    }
    l.listened = true;
}

/// One decode for the engine's truth and the listening sides, in that order per event, so a
/// side asks whether the engine kept the event it is judging.
struct Fanout<'a, K> {
    truth: PredictPass<'a, fn(u32, VerdictLabel) -> bool>,
    sides: PerSide<PredictPass<'a, K>>,
    engine_keeps: &'a Cell<bool>,
}

impl<K: FnMut(u32, VerdictLabel) -> bool> EventSink for Fanout<'_, K> {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.truth.inspect(index, event);
        self.sides.iter_mut().for_each(|s| s.inspect(index, event));
    }

    fn begin(&mut self, header: &BatchHeader) {
        self.truth.begin(header);
        self.sides.iter_mut().for_each(|s| s.begin(header));
    }

    fn event(&mut self, index: u32, event: &KvEvent) {
        self.truth.event(index, event);
        self.engine_keeps.set(self.truth.kept(index));
        self.sides.iter_mut().for_each(|s| s.event(index, event));
    }
}

/// One block on which the model and a real index disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexDifference {
    /// The kvscope source of the worker and rank, when one has it.
    pub source: Option<String>,
    pub worker_id: u64,
    pub dp_rank: u32,
    pub tier: &'static str,
    pub block_hash: u64,
    pub model_holds: bool,
    pub real_holds: bool,
    /// What the model predicted, and why.
    pub model_says: String,
}

/// Of the worker's device blocks, those a request for their chain would be scored for by
/// `index`: the chains from the engine's roots, walked as Dynamo's `find_matches` walks them (a
/// chain that starts below a block the engine never announced scores nothing).
fn visible_blocks(index: &DynamoIndex, w: WorkerKey, truth: &BTreeMap<u64, crate::truth::TruthBlock>) -> u64 {
    let mut children: FastMap<u64, Vec<u64>> = FastMap::default();
    let mut roots = Vec::new();
    for (&h, b) in truth {
        match b.parent {
            None => roots.push(h),
            Some(p) if truth.contains_key(&p) => children.entry(p).or_default().push(h),
            Some(_) => {}
        }
    }
    // Depth-first, one find_matches per leaf; a block is visible when some chain through it
    // scores past it.
    let mut scored: FastMap<u64, bool> = FastMap::default();
    let mut stack: Vec<(u64, Vec<u64>, Vec<u64>)> = roots.into_iter().map(|r| (r, Vec::new(), Vec::new())).collect();
    while let Some((h, mut hashes, mut tokens)) = stack.pop() {
        hashes.push(h);
        tokens.push(truth[&h].tokens_hash);
        match children.get(&h) {
            Some(kids) => {
                for &k in kids {
                    stack.push((k, hashes.clone(), tokens.clone()));
                }
            }
            None => {
                let depth = index.find_matches(&tokens).get(&w).copied().unwrap_or(0) as usize;
                for (i, b) in hashes.iter().enumerate() {
                    *scored.entry(*b).or_insert(false) |= i < depth;
                }
            }
        }
    }
    scored.values().filter(|v| **v).count() as u64
}

fn published(e: &RouterEvent, h: u64) -> bool {
    matches!(&e.event.data, EventData::Stored(s) if s.blocks.iter().any(|b| b.block_hash == h))
}

/// One tier's comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierCounts {
    /// Blocks the engine holds.
    pub engine_blocks: u64,
    /// Blocks the router's index holds (what its `/dump` lists).
    pub router_blocks: u64,
    pub both: u64,
    /// Blocks the engine holds that the router cannot score, by cause ([`Missing::label`]).
    pub engine_only: BTreeMap<String, u64>,
    /// Blocks the router scores that the engine no longer holds, by cause ([`Stale::label`]).
    pub router_only: BTreeMap<String, u64>,
}

impl TierCounts {
    fn merge(&mut self, o: &TierCounts) {
        self.engine_blocks += o.engine_blocks;
        self.router_blocks += o.router_blocks;
        self.both += o.both;
        for (k, n) in &o.engine_only {
            *self.engine_only.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.router_only {
            *self.router_only.entry(k.clone()).or_default() += n;
        }
    }
}

/// A source's (or the fleet's) index against its engine: `check --json`'s `"index"` object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexCounts {
    #[serde(flatten)]
    pub blocks: TierCounts,
    /// Device-tier tokens the engine holds in its prefix cache.
    pub engine_prefix_tokens: u64,
    /// Of those, the tokens a router's `find_matches` would score: the blocks of the engine's
    /// chains, from their roots, that the index holds without a break above them.
    pub visible_prefix_tokens: u64,
    /// Device-tier tokens the router would score that the engine no longer holds.
    pub phantom_tokens: u64,
    /// The same counts per tier (`device`, `host_pinned`, `disk`, `external`).
    #[serde(deserialize_with = "tiers_by_label")]
    pub tiers: BTreeMap<&'static str, TierCounts>,
}

/// Tiers keyed by their [`StorageTier::label`]; a name that is no tier is an error.
fn tiers_by_label<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<&'static str, TierCounts>, D::Error> {
    let by_name: BTreeMap<String, TierCounts> = Deserialize::deserialize(d)?;
    by_name
        .into_iter()
        .map(|(name, counts)| match StorageTier::from_label(&name) {
            Some(tier) => Ok((tier.label(), counts)),
            None => Err(serde::de::Error::custom(format!("{name:?} is no storage tier (device, host_pinned, disk, external)"))),
        })
        .collect()
}

impl IndexCounts {
    fn add_tier(&mut self, tier: StorageTier, t: &TierCounts) {
        self.blocks.merge(t);
        self.tiers.entry(tier.label()).or_default().merge(t);
    }

    pub fn merge(&mut self, o: &IndexCounts) {
        self.blocks.merge(&o.blocks);
        self.engine_prefix_tokens += o.engine_prefix_tokens;
        self.visible_prefix_tokens += o.visible_prefix_tokens;
        self.phantom_tokens += o.phantom_tokens;
        for (k, t) in &o.tiers {
            self.tiers.entry(k).or_default().merge(t);
        }
    }

    /// The share of the engine's cached prefix tokens the router sees (1 when it holds none).
    pub fn visible_share(&self) -> f64 {
        if self.engine_prefix_tokens == 0 { 1.0 } else { self.visible_prefix_tokens as f64 / self.engine_prefix_tokens as f64 }
    }

    /// The index and the engine hold the same blocks everywhere.
    pub fn is_aligned(&self) -> bool {
        self.blocks.engine_only.is_empty() && self.blocks.router_only.is_empty()
    }

    /// "the router sees 1,024 of 2,048 cached prefix tokens (50%), 0 phantom": the cost, in
    /// the router's terms. `number` formats a count (the page groups digits).
    pub fn cost_words(&self, number: impl Fn(u64) -> String) -> String {
        format!(
            "the router sees {} of {} cached prefix tokens ({}), {} phantom",
            number(self.visible_prefix_tokens),
            number(self.engine_prefix_tokens),
            percent(self.visible_share()),
            number(self.phantom_tokens)
        )
    }

    /// "engine 23 blocks, router 16, both 16; engine only: orphan:late_join 7; router only:
    /// removal_dropped:unknown_medium 2": the blocks, by cause.
    pub fn blocks_words(&self, number: impl Fn(u64) -> String) -> String {
        let b = &self.blocks;
        let mut out = format!("engine {} blocks, router {}, both {}", number(b.engine_blocks), number(b.router_blocks), number(b.both));
        for (name, causes) in [("engine only", &b.engine_only), ("router only", &b.router_only)] {
            if !causes.is_empty() {
                let parts: Vec<String> = causes.iter().map(|(c, n)| format!("{c} {}", number(*n))).collect();
                out.push_str(&format!("; {name}: {}", parts.join(", ")));
            }
        }
        out
    }
}

/// "50%", "3%", "0.4%": a share as the page and the CLI print it.
pub fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p > 0.0 && p < 1.0 { format!("{p:.1}%") } else { format!("{p:.0}%") }
}

/// One engine source's comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceIndex {
    pub key: String,
    pub counts: IndexCounts,
}

/// Where the indexer first exited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExitAt {
    pub source: String,
    pub seq: u64,
}

/// Everything an [`IndexModel`] compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexReport {
    pub policy: &'static str,
    /// The indexers' `--block-size`: the default. A source of another model is read, and its
    /// prefix tokens counted, at its own ([`IndexModel::add_source_at`]).
    pub block_size: u32,
    pub sources: Vec<SourceIndex>,
    pub totals: IndexCounts,
    /// Times the indexer exited on a fatal verdict (and restarted empty).
    pub indexer_exits: u64,
    pub first_exit: Option<ExitAt>,
    /// Blocks not modelled because [`IndexConfig::max_blocks`] was reached.
    pub refused_blocks: u64,
    /// Engine payloads that did not decode (nothing modelled for them).
    pub decode_errors: u64,
}
