//! What Dynamo's relay publishes for an engine batch, predicted under a kvscope policy.
//!
//! The relay (`KvEventPublisher` of ai-dynamo-runtime 1.6.1) decodes each engine batch, runs
//! Dynamo's normalizer on each event, turns each event it keeps into a `RouterEvent` and passes
//! them through its publisher stage ([`crate::outbox`]: coalescing, removal refcounts, event
//! ids); Dynamo's standalone indexer applies the same RouterEvents one by one, with no publisher
//! stage ([`Feed`]). This module does not model that normalizer a second time: kvscope-normalize's policies already do
//! ([`Policy::DYNAMO_1_6_1`] reproduces 1.6.1: whole-batch rejection, exact mediums with unknown
//! ones skipped, a store at another block size applied with no blocks, ...). A [`Predictor`]
//! runs a [`Normalizer`] per source and turns each verdict into what the relay sends:
//!
//! - a store verdict: `stored` on the verdict's tier, with the first `blocks` hashes the verdict
//!   applies (0 at another block size), each with Dynamo's `tokens_hash` (XXH3-64 of the block's
//!   token ids as little-endian u32, seeded with 1337 plus the LoRA name's and cache namespace's
//!   salts; SGLang bigram pages hash `block_size + 1` tokens per block, as Dynamo's EAGLE window);
//! - a remove verdict: `removed` of every hash on the tier; a self-referencing store: an empty
//!   `removed` on its tier (Dynamo's no-op, which the relay's publisher stage never sends); a
//!   clear: `cleared` (tier `device`);
//! - every other verdict (a skip, or a fatal one under a policy that has them): nothing, noted as
//!   [`Predicted::Dropped`] with the rule's label, so a UI can say "dropped by rule Z".
//!
//! Hashes are u64 bit patterns as kvscope-wire reads them (a negative i64 bit-cast; a bin's last
//! 8 bytes, though under `dynamo-1.6.1` a batch with a bin hash is rejected whole). `event_id`
//! is the relay's counter (1 for the first published event of the predictor's life, +1 per
//! published event), or the batch's seq for the standalone indexer's listener. Multimodal blocks (`block_mm_infos`) are hashed without their mm hashes,
//! since kvscope-wire does not keep them: such a block's predicted `tokens_hash` differs.

use std::borrow::Cow;

use kvscope_normalize::rules::own_namespace;
use kvscope_normalize::{Apply, NamespaceState, Normalizer, Outcome, PayloadState, Policy, SourceId, Verdict, VerdictKind, VerdictLabel};
use kvscope_wire::{BatchHeader, BlockStored, DecodeError, Decoded, EventSink, KvEvent, TokenBytes};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::event::{EventData, KvCacheEvent, PlaneTier, RESIDENCY_WORKER, RemovedData, RouterEvent, StoredBlock, StoredData};
use crate::outbox::{Kept, Outbox, Sent};

/// Dynamo's XXH3 seed for block hashes (`dynamo_tokens::CHAIN_XXH3_SEED`).
pub const TOKENS_HASH_SEED: u64 = 1337;

/// Which of Dynamo's components turns the normalizer's output into `RouterEvent`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feed {
    /// The relay (`KvEventPublisher`, dynamo-llm 1.6.1): a batch with no `dp_rank` is rank 0,
    /// whatever the relay's own rank; then its publisher stage ([`crate::outbox`]): adjacent
    /// compatible events coalesced, removals held back while other copies are stored, ids
    /// counting the events sent from 1. What the event plane carries.
    Relay,
    /// The standalone indexer's ZMQ listener (`services/indexer/listener.rs`): one RouterEvent
    /// per kept event, applied in order, a batch with no `dp_rank` at the listener's rank, the
    /// event id the batch's seq. What `python -m dynamo.indexer` applies to its index.
    Listener,
}

/// How the relay of one engine source was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// `KvEventPublisher(worker_id=...)`: the number RouterEvents carry.
    pub worker_id: u64,
    /// The relay's (or listener's) `dp_rank`: the engine source's rank.
    pub dp_rank: u32,
    /// The relay's `kv_block_size`.
    pub kv_block_size: u32,
    /// Which normalizer the relay runs (`dynamo-1.6.1` for Dynamo 1.6.1's relay).
    pub policy: Policy,
    pub feed: Feed,
}

impl RelayConfig {
    /// The policy a relay is predicted to run unless `--relay-policy` says otherwise: Dynamo
    /// 1.6.1's `KvEventPublisher`. The one default the server, `check` and the page share (the
    /// server sends its choice to the page with its other defaults).
    pub const DEFAULT_POLICY: Policy = Policy::DYNAMO_1_6_1;

    /// A Dynamo 1.6.1 relay.
    pub fn dynamo_1_6_1(worker_id: u64, dp_rank: u32, kv_block_size: u32) -> RelayConfig {
        RelayConfig { worker_id, dp_rank, kv_block_size, policy: Policy::DYNAMO_1_6_1, feed: Feed::Relay }
    }

    /// A relay of `policy` for this engine source (what `--relay-policy` predicts).
    pub fn relay(worker_id: u64, dp_rank: u32, kv_block_size: u32, policy: Policy) -> RelayConfig {
        RelayConfig { worker_id, dp_rank, kv_block_size, policy, feed: Feed::Relay }
    }

    /// The relay of a kvscope engine source, when its worker id is a decimal u64: Dynamo names
    /// a worker by its u64 `worker_id`, so a source named otherwise has no RouterEvents to be
    /// matched with. The one place that rule is written.
    pub fn for_source(worker_id: &str, dp_rank: u32, kv_block_size: u32, policy: Policy) -> Option<RelayConfig> {
        Some(RelayConfig::relay(worker_id.parse().ok()?, dp_rank, kv_block_size, policy))
    }

    /// An indexer's own ZMQ listener running `policy` on this engine source.
    pub fn listener(worker_id: u64, dp_rank: u32, kv_block_size: u32, policy: Policy) -> RelayConfig {
        RelayConfig { worker_id, dp_rank, kv_block_size, policy, feed: Feed::Listener }
    }

    /// The rank a batch's RouterEvents carry.
    pub fn rank_of(&self, batch_rank: Option<u32>) -> u32 {
        match self.feed {
            Feed::Relay => batch_rank.unwrap_or(0),
            Feed::Listener => batch_rank.unwrap_or(self.dp_rank),
        }
    }
}

/// Which engine event a prediction came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct EngineEventRef {
    /// The engine batch's ZMQ sequence number.
    pub seq: u64,
    /// The event's position in its batch.
    pub event_index: u32,
}

/// What the relay does with one engine event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Predicted {
    /// It publishes this RouterEvent (grown by the events coalesced into it).
    Publish(RouterEvent),
    /// Its blocks or removed hashes go into the RouterEvent published for this earlier event of
    /// the batch (the relay coalesces adjacent compatible events).
    Coalesced { into: EngineEventRef },
    /// It publishes nothing: the rule with this label dropped the event.
    Dropped {
        label: VerdictLabel,
        /// The verdict in words ("medium \"cpu\" is in no row (exact match) -> skip unknown_medium").
        sentence: String,
    },
    /// A removal the relay does not send: each hash it names is still stored by other copies
    /// on this tier, as far as the relay counted (or it names none).
    HeldBack,
}

/// What the relay does with one engine event, without the RouterEvent: what a lane draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayMark {
    /// It publishes a RouterEvent for it (alone or coalesced into an earlier one).
    Publishes,
    /// It publishes nothing: this rule drops it.
    Drops(VerdictLabel),
    /// A removal it holds back: other copies of its blocks are still stored.
    HeldBack,
}

impl RelayMark {
    /// Whether the router misses this event (drawn as a drop).
    pub fn is_drop(self) -> bool {
        !matches!(self, RelayMark::Publishes)
    }
}

impl Predicted {
    /// The outcome without its RouterEvent.
    pub fn mark(&self) -> RelayMark {
        match self {
            Predicted::Publish(_) | Predicted::Coalesced { .. } => RelayMark::Publishes,
            Predicted::Dropped { label, .. } => RelayMark::Drops(*label),
            Predicted::HeldBack => RelayMark::HeldBack,
        }
    }

    /// What the relay's publisher stage did, in words, for the outcomes that are its own
    /// (coalescing, a removal held back); `None` for the others, which a verdict explains.
    pub fn relay_note(&self) -> Option<String> {
        match self {
            Predicted::Coalesced { into } => {
                Some(format!("coalesced by the relay into the RouterEvent published for event {} of this batch", into.event_index))
            }
            Predicted::HeldBack => Some(
                "held back by the relay: every block it removes is still stored by another copy on this tier, as the relay \
                 counts stores per block (or it removes none)"
                    .to_owned(),
            ),
            Predicted::Publish(_) | Predicted::Dropped { .. } => None,
        }
    }
}

/// One engine event's prediction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Prediction {
    pub origin: EngineEventRef,
    pub outcome: Predicted,
}

impl Prediction {
    /// The RouterEvent, when the relay publishes one for this event.
    pub fn router_event(&self) -> Option<&RouterEvent> {
        match &self.outcome {
            Predicted::Publish(e) => Some(e),
            _ => None,
        }
    }
}

/// One source's relay, predicted: the normalizer state (learned groups, namespaces, warning
/// budget), the publisher stage's counts and the event-id counter live as long as the relay's
/// listener would.
#[derive(Clone, Debug)]
pub struct Predictor {
    config: RelayConfig,
    normalizer: Normalizer,
    source: SourceId,
    outbox: Outbox,
}

/// What one batch held, beside the predictions a sparse pass kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchPredicted {
    /// Events in the batch.
    pub events: u32,
    /// Events the policy's whole-batch check rejected (`batch_decode_rejected`).
    pub rejected: u32,
}

impl BatchPredicted {
    /// Whether an indexer's decoder took the batch, which moves its cursor: some event was not
    /// rejected with the batch (an empty batch takes nothing).
    pub fn taken(&self) -> bool {
        self.events > self.rejected
    }
}

impl Predictor {
    pub fn new(config: RelayConfig) -> Predictor {
        let mut normalizer = Normalizer::new(config.kv_block_size, config.policy);
        let source = normalizer.source(&config.worker_id.to_string(), config.dp_rank);
        Predictor { config, normalizer, source, outbox: Outbox::default() }
    }

    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// The normalizer the predictions come from (counters, learned groups).
    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    /// Predicts one engine batch (the payload frame, published under `seq`): one prediction per
    /// event, in order. A payload kvscope cannot decode is returned as the error (the relay
    /// loses it too, unless it is one of the gaps docs/dynamo-1.6.1.md lists).
    pub fn predict(&mut self, seq: u64, payload: &[u8]) -> Result<Vec<Prediction>, DecodeError> {
        let mut out = Vec::new();
        self.predict_into(seq, payload, &mut out)?;
        Ok(out)
    }

    /// As [`Predictor::predict`], appending to `out`.
    pub fn predict_into(&mut self, seq: u64, payload: &[u8], out: &mut Vec<Prediction>) -> Result<(), DecodeError> {
        self.predict_sparse(seq, payload, |_, _| true, out).map(|_| ())
    }

    /// Predicts one engine batch keeping only what can reach an index: every event the relay
    /// keeps (published, coalesced or held back), every fatal drop, and the other drops whose
    /// event index and label `keep_dropped` asks for (it sees every skipped event, in batch
    /// order: a caller counts them there). The batch is classified as it
    /// decodes, so a hostile batch of millions of skipped events costs memory for what is kept,
    /// not for the batch: the page's index model must not need gigabytes for a 12 MB frame.
    pub fn predict_sparse(
        &mut self,
        seq: u64,
        payload: &[u8],
        keep_dropped: impl FnMut(u32, VerdictLabel) -> bool,
        out: &mut Vec<Prediction>,
    ) -> Result<BatchPredicted, DecodeError> {
        self.predict_decoded(seq, payload, &Decoded::with_token_bytes(payload), &mut TokensHashes::default(), keep_dropped, out)
    }

    /// As [`Predictor::predict_sparse`], with the payload decoded once, and its stores' tokens
    /// hashes computed once, for other consumers too.
    pub fn predict_decoded(
        &mut self,
        seq: u64,
        payload: &[u8],
        decoded: &Decoded,
        hashes: &mut TokensHashes,
        keep_dropped: impl FnMut(u32, VerdictLabel) -> bool,
        out: &mut Vec<Prediction>,
    ) -> Result<BatchPredicted, DecodeError> {
        let mut pass = self.pass(decoded, seq, keep_dropped, out);
        let result = decoded.feed(payload, &mut pass);
        pass.finish_sharing(payload, &result, hashes)
    }

    /// A prediction of one engine batch fed by `decoded` ([`Decoded::feed`]), keeping what
    /// [`Predictor::predict_sparse`] keeps; [`PredictPass::finish_sharing`] ends it. Several
    /// relays of one source share a decode this way: the index model runs the engine's truth and
    /// each policy's listener over the same bytes. The events the relay keeps are read back from
    /// `decoded` after the batch instead of being cloned as they pass (a batch too big for
    /// `decoded` to keep is cloned event by event).
    pub fn pass<'p, K: FnMut(u32, VerdictLabel) -> bool>(
        &'p mut self,
        decoded: &'p Decoded,
        seq: u64,
        keep_dropped: K,
        out: &'p mut Vec<Prediction>,
    ) -> PredictPass<'p, K> {
        let state = self.normalizer.payload_state(self.source, seq);
        let first = out.len();
        let events = decoded.events();
        PredictPass {
            predictor: self,
            state,
            seq,
            keep_dropped,
            out,
            first,
            batch: BatchPredicted::default(),
            // One allocation of the batch's size rather than growing event by event.
            applied: Vec::with_capacity(events.map_or(0, <[KvEvent]>::len)),
            events,
            tokens: decoded.token_bytes(),
        }
    }

    /// The RouterEvent an applied verdict becomes on its own (Dynamo's `convert_event`), before
    /// the publisher stage; `None` for every other verdict.
    fn kept_event(
        &self,
        ids: StoreIds<'_>,
        batch_rank: Option<u32>,
        event: &KvEvent,
        verdict: &Verdict,
        hashes: &mut TokensHashes,
    ) -> Option<Kept> {
        let VerdictKind::Apply(apply) = verdict.kind else { return None };
        let dp_rank = self.config.rank_of(batch_rank);
        let tier = PlaneTier::from(verdict.tier.unwrap_or(kvscope_normalize::StorageTier::Device));
        let mut session_id = None;
        let data = match (apply, event) {
            (Apply::Store { blocks }, KvEvent::BlockStored(s)) => {
                let namespace = self.namespace(s, dp_rank);
                session_id = s.session_id.as_deref().map(str::to_owned);
                EventData::Stored(StoredData {
                    parent_hash: s.parent_block_hash.map(|h| h.0),
                    start_position: None,
                    blocks: hashes.stored_blocks(ids, verdict.event_index, s, blocks, self.config.kv_block_size, namespace.as_deref()),
                })
            }
            (Apply::Remove { .. }, KvEvent::BlockRemoved(r)) => {
                EventData::Removed(RemovedData { block_hashes: r.block_hashes.iter().map(|h| h.0).collect() })
            }
            (Apply::NoOpRemove, _) => EventData::Removed(RemovedData::default()),
            (Apply::Clear, _) => EventData::Cleared,
            // A verdict that does not fit its event: no preset makes one.
            _ => return None,
        };
        let event = RouterEvent {
            worker_id: self.config.worker_id,
            storage_tier: if matches!(data, EventData::Cleared) { PlaneTier::Device } else { tier },
            residency_domain: Some(Cow::Borrowed(RESIDENCY_WORKER)),
            event: KvCacheEvent { event_id: 0, data, dp_rank },
        };
        Some(Kept { event, session_id })
    }

    /// The store's cache namespace as Dynamo hashes it: its own, or the one it inherited from
    /// its parent (read from the normalizer's table after the batch; a later removal of the
    /// parent in the same batch would hide it).
    fn namespace(&self, s: &BlockStored, dp_rank: u32) -> Option<String> {
        if let Some(own) = own_namespace(s) {
            return Some(own.to_owned());
        }
        let table = self.normalizer.namespaces(self.source);
        match table.get(dp_rank, s.parent_block_hash?.0)? {
            NamespaceState::Namespaced(i) => table.name(i).map(str::to_owned),
            NamespaceState::Ambiguous => None,
        }
    }
}

/// One engine batch being predicted ([`Predictor::pass`]): an [`EventSink`] that classifies
/// each event as the decoder hands it over, and keeps what can reach an index.
pub struct PredictPass<'p, K> {
    predictor: &'p mut Predictor,
    state: PayloadState,
    seq: u64,
    keep_dropped: K,
    out: &'p mut Vec<Prediction>,
    /// Where this batch's predictions start in `out`.
    first: usize,
    batch: BatchPredicted,
    /// Per event the relay keeps: its prediction's slot, the event and its verdict. The
    /// RouterEvents are built after the whole batch is normalized, as the relay reads the
    /// namespace table after the batch.
    applied: Vec<(usize, Cow<'p, KvEvent>, Verdict)>,
    /// The batch's events, when the decode that feeds the pass kept them: borrowed, not cloned.
    events: Option<&'p [KvEvent]>,
    /// The stores' token ids, when the decode kept them ([`Decoded::with_token_bytes`]).
    tokens: Option<&'p TokenBytes>,
}

impl<K> std::fmt::Debug for PredictPass<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictPass").field("seq", &self.seq).field("batch", &self.batch).finish_non_exhaustive()
    }
}

impl<K: FnMut(u32, VerdictLabel) -> bool> EventSink for PredictPass<'_, K> {
    #[inline]
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.state.inspect(index, event);
    }

    fn begin(&mut self, header: &BatchHeader) {
        self.predictor.normalizer.begin_payload(&mut self.state, header);
    }

    fn event(&mut self, index: u32, event: &KvEvent) {
        let verdict = self.predictor.normalizer.classify(&self.state, index, event);
        self.batch.events += 1;
        let label = verdict.label();
        self.batch.rejected += u32::from(label == VerdictLabel::BatchDecodeRejected);
        let origin = EngineEventRef { seq: self.seq, event_index: index };
        if matches!(verdict.kind, VerdictKind::Apply(_)) {
            let event = match self.events.and_then(|all| all.get(index as usize)) {
                Some(kept) => Cow::Borrowed(kept),
                None => Cow::Owned(event.clone()),
            };
            self.applied.push((self.out.len(), event, verdict));
            self.out.push(Prediction { origin, outcome: Predicted::HeldBack });
        } else if label.outcome() == Outcome::Fatal || (self.keep_dropped)(index, label) {
            self.out.push(Prediction { origin, outcome: dropped(&verdict) });
        }
    }
}

impl<K> PredictPass<'_, K> {
    /// Whether the event at `index`, the last one handed over, was kept: applied (the relay
    /// acts on it, or turns it into nothing only after the batch) or fatal.
    pub fn kept(&self, index: u32) -> bool {
        self.out[self.first..].last().is_some_and(|p| p.origin.event_index == index)
    }

    /// Ends the batch with what the decoder returned: builds the RouterEvents of the events the
    /// relay keeps and runs its publisher stage. A payload that did not decode is counted on
    /// the normalizer, leaves `out` as it was and is returned. The tokens hashes of this batch's
    /// stores are shared with the other passes over the same decode (reading a store's token ids
    /// and hashing them is most of what building its RouterEvent costs).
    pub fn finish_sharing(
        self,
        payload: &[u8],
        decoded: &Result<BatchHeader, DecodeError>,
        hashes: &mut TokensHashes,
    ) -> Result<BatchPredicted, DecodeError> {
        let PredictPass { predictor, seq, out, first, batch, applied, tokens, .. } = self;
        let header = match decoded {
            Ok(h) => h,
            Err(e) => {
                out.truncate(first);
                predictor.normalizer.count_decode_error(predictor.source, seq, e);
                return Err(e.clone());
            }
        };
        let mut kept = Vec::with_capacity(applied.len());
        let mut slots = Vec::with_capacity(applied.len());
        for (slot, event, verdict) in &applied {
            match predictor.kept_event(StoreIds { payload, kept: tokens }, header.dp_rank, event, verdict, hashes) {
                Some(k) => {
                    slots.push((*slot, verdict));
                    kept.push(k);
                }
                None => out[*slot].outcome = dropped(verdict),
            }
        }
        match predictor.config.feed {
            Feed::Relay => {
                for (&(slot, verdict), sent) in slots.iter().zip(predictor.outbox.send_batch(kept)) {
                    out[slot].outcome = match sent {
                        Sent::Event(e) => Predicted::Publish(e),
                        Sent::Coalesced { into } => Predicted::Coalesced { into: out[slots[into as usize].0].origin },
                        // The empty removal a self-referencing store becomes is never sent.
                        Sent::RemovalHeldBack if verdict.kind == VerdictKind::Apply(Apply::NoOpRemove) => dropped(verdict),
                        Sent::RemovalHeldBack => Predicted::HeldBack,
                    };
                }
            }
            Feed::Listener => {
                for ((slot, _), mut k) in slots.into_iter().zip(kept) {
                    k.event.event.event_id = seq;
                    out[slot].outcome = Predicted::Publish(k.event);
                }
            }
        }
        debug_assert!(out[first..].iter().all(|p| p.origin.seq == seq));
        Ok(batch)
    }
}

fn dropped(verdict: &Verdict) -> Predicted {
    Predicted::Dropped { label: verdict.label(), sentence: verdict.to_string() }
}

/// Predicts one batch with a fresh relay (no learned state, event ids from 1).
pub fn predict(payload: &[u8], worker_id: u64, dp_rank: u32, kv_block_size: u32, policy: Policy) -> Result<Vec<Prediction>, DecodeError> {
    Predictor::new(RelayConfig::relay(worker_id, dp_rank, kv_block_size, policy)).predict(0, payload)
}

/// Dynamo's block-hash seed: 1337, plus XXH3 of the LoRA name (seed 0) and of the namespace
/// (seed 1), empty strings counting as absent (`dynamo_kv_hashing::compute_salt_hash`).
pub fn tokens_hash_seed(lora_name: Option<&str>, cache_namespace: Option<&str>) -> u64 {
    let mut seed = TOKENS_HASH_SEED;
    if let Some(name) = lora_name.filter(|s| !s.is_empty()) {
        seed = seed.wrapping_add(xxh3_64_with_seed(name.as_bytes(), 0));
    }
    if let Some(ns) = cache_namespace.filter(|s| !s.is_empty()) {
        seed = seed.wrapping_add(xxh3_64_with_seed(ns.as_bytes(), 1));
    }
    seed
}

/// Dynamo's `tokens_hash` of one block's token ids.
pub fn tokens_hash(tokens: &[u32], seed: u64) -> u64 {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    xxh3_64_with_seed(&bytes, seed)
}

/// The tokens hashes of one batch's stores, by event index, hash seed and block size, for the
/// passes that share its decode ([`PredictPass::finish_sharing`]): the index model's relays and
/// the reconciler's. Start a new one for every batch: the key does not name the payload.
///
/// Every hash in one list, not a list per store: a batch of small stores allocates for its
/// hashes once, not once per store. The stores' map stays ordered (no insert costs more than a
/// search when passes with other seeds interleave their stores).
#[derive(Debug, Default)]
pub struct TokensHashes {
    /// Where each store's hashes start in `hashes`, and how many there are.
    stores: std::collections::BTreeMap<StoreKey, (usize, usize)>,
    /// Every store's tokens hashes, block by block.
    hashes: Vec<u64>,
}

/// A store's tokens hashes depend on its event, the hash seed and the block size.
type StoreKey = (u32, u64, u32);

impl TokensHashes {
    fn stored_blocks(
        &mut self,
        ids: StoreIds<'_>,
        event_index: u32,
        s: &BlockStored,
        blocks: u32,
        block_size: u32,
        namespace: Option<&str>,
    ) -> Vec<StoredBlock> {
        if blocks == 0 {
            return Vec::new();
        }
        let seed = tokens_hash_seed(s.lora_name.as_deref(), namespace);
        let key = (event_index, seed, block_size);
        let hashes = &mut self.hashes;
        let &mut (start, len) = self.stores.entry(key).or_insert_with(|| {
            let start = hashes.len();
            push_block_tokens_hashes(hashes, ids, s, block_size, seed);
            (start, hashes.len() - start)
        });
        // One hash per block hash of the store.
        s.block_hashes
            .iter()
            .zip(&self.hashes[start..start + len])
            .take(blocks as usize)
            .map(|(hash, &tokens_hash)| StoredBlock { block_hash: hash.0, tokens_hash })
            .collect()
    }
}

/// Where a batch's stores' token ids are read: the bytes its decode wrote out as it counted them
/// ([`Decoded::with_token_bytes`]), else the payload itself.
#[derive(Clone, Copy)]
struct StoreIds<'a> {
    payload: &'a [u8],
    kept: Option<&'a TokenBytes>,
}

impl<'a> StoreIds<'a> {
    /// The store's ids as little-endian bytes; empty when they are not u32s.
    fn le_bytes(self, s: &BlockStored) -> Cow<'a, [u8]> {
        match self.kept.and_then(|t| t.get(&s.token_ids)) {
            Some(kept) => Cow::Borrowed(kept),
            None => Cow::Owned(s.token_ids.le_bytes(self.payload).unwrap_or_default()),
        }
    }
}

/// The tokens hash of every block of a store (its block hashes' count), as Dynamo computes them:
/// the ids as little-endian bytes once, each block's window hashed in place. A store whose span
/// holds no u32 ids hashes empty windows (no preset publishes such a store with blocks:
/// `dynamo-1.6.1` rejects the batch).
fn push_block_tokens_hashes(out: &mut Vec<u64>, ids: StoreIds<'_>, s: &BlockStored, block_size: u32, seed: u64) {
    let bytes = ids.le_bytes(s);
    let stride = block_size as usize;
    let window = stride + usize::from(s.token_ids.is_bigram);
    out.extend((0..s.block_hashes.len()).map(|i| {
        let start = i * stride;
        let chunk = bytes.get(start * 4..(start + window) * 4).unwrap_or(&[]);
        xxh3_64_with_seed(chunk, seed)
    }));
}
