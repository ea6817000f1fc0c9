//! The normalizer: one per configuration (block size, policy), state per source.
//!
//! A source is one `(worker_id, dp_rank)`: each data-parallel rank publishes on its own port with
//! its own sequence counter, and a router keeps its trees per rank. Per source the normalizer
//! keeps the learned group kinds (step 2 of the rules), the cache namespaces (rule P7, only under
//! `dynamo-1.6.1`) and the [`SourceCounters`]. It keeps no trees: `kvscope-tiers` applies the
//! verdicts this produces. A source is what one Dynamo listener is: one normalizer state and
//! one warning budget for the life of the connection.
//!
//! Hot path: [`Normalizer::normalize_batch`] appends one `Copy` verdict per event to a
//! caller-owned vector and allocates nothing per event; a warning line is formatted only while
//! its budget has room (three per budget per source), and the first fatal once.
//!
//! Streaming: [`Normalizer::push_payload_with`] classifies a payload's events as the decoder
//! hands them over ([`kvscope_wire::decode_each`]) and gives each verdict to a callback, so a
//! batch of millions of events costs no vector of events or verdicts; under `dynamo-1.6.1` the
//! whole-batch rejection is gathered while the payload is checked ([`RejectionScan`]).

use std::fmt;

use kvscope_wire::{BatchHeader, DecodeError, EventBatch, EventSink, KvEvent, decode_batch, decode_each};

use crate::batch::{BatchRejection, RejectionScan};
use crate::counters::{LogLevel, LogLine, SourceCounters};
use crate::groups::GroupTable;
use crate::kind::{KindClass, classify_kind};
use crate::label::VerdictLabel;
use crate::namespaces::NamespaceTable;
use crate::policy::{BatchCheck, LogStyle, Policy};
use crate::rules::{
    EventCtx, Rejected, RuleSet, apply, batch_decode_rejected, block_size_mismatch, evaluate_in, offload_block_size_mismatch,
    self_referencing_store, unknown_kind, verdict_tier,
};
use crate::verdict::{Apply, SourceId, Verdict, VerdictFlags, VerdictKind};

/// A source's name: which worker, which data-parallel rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceKey {
    pub worker_id: String,
    pub dp_rank: u32,
}

impl SourceKey {
    pub fn new(worker_id: impl Into<String>, dp_rank: u32) -> Self {
        SourceKey { worker_id: worker_id.into(), dp_rank }
    }
}

/// `w0:1`, the form the command line's `--workers "id[:dp]=..."` uses.
impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.worker_id, self.dp_rank)
    }
}

#[derive(Clone, Debug)]
struct SourceState {
    key: SourceKey,
    /// The source's own block size (its model's), over the normalizer's.
    block_size: Option<u32>,
    groups: GroupTable,
    namespaces: NamespaceTable,
    counters: SourceCounters,
}

/// Turns decoded events into verdicts under one block size and one policy.
#[derive(Clone, Debug)]
pub struct Normalizer {
    block_size: u32,
    policy: Policy,
    /// The rules `policy` runs, in order.
    rules: RuleSet,
    sources: Vec<SourceState>,
}

impl Normalizer {
    /// A normalizer for `--block-size block_size --policy policy`.
    pub fn new(block_size: u32, policy: Policy) -> Self {
        Normalizer { block_size, policy, rules: RuleSet::for_policy(&policy), sources: Vec::new() }
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The id of a source, registering it on first use. Look it up once per connection, not per
    /// batch: the lookup is a linear scan (a fleet has tens of sources, not thousands).
    /// Classifies `id` at its own block size (a fleet of two models: each at its own), or at
    /// the normalizer's again with `None`.
    pub fn set_block_size(&mut self, id: SourceId, block_size: Option<u32>) {
        if let Some(state) = self.sources.get_mut(id.index()) {
            state.block_size = block_size;
        }
    }

    /// The block size `id` is classified at.
    pub fn block_size_of(&self, id: SourceId) -> u32 {
        self.sources.get(id.index()).and_then(|s| s.block_size).unwrap_or(self.block_size)
    }

    pub fn source(&mut self, worker_id: &str, dp_rank: u32) -> SourceId {
        if let Some(i) = self.sources.iter().position(|s| s.key.dp_rank == dp_rank && s.key.worker_id == worker_id) {
            return SourceId(i as u32);
        }
        self.sources.push(SourceState {
            key: SourceKey::new(worker_id, dp_rank),
            block_size: None,
            groups: GroupTable::default(),
            namespaces: NamespaceTable::default(),
            counters: SourceCounters::default(),
        });
        SourceId(self.sources.len() as u32 - 1)
    }

    /// The id of a known source, without registering.
    pub fn find_source(&self, worker_id: &str, dp_rank: u32) -> Option<SourceId> {
        self.sources.iter().position(|s| s.key.dp_rank == dp_rank && s.key.worker_id == worker_id).map(|i| SourceId(i as u32))
    }

    /// Every registered source, in registration order.
    pub fn sources(&self) -> impl Iterator<Item = (SourceId, &SourceKey)> {
        self.sources.iter().enumerate().map(|(i, s)| (SourceId(i as u32), &s.key))
    }

    /// # Panics
    /// If `id` did not come from this normalizer.
    pub fn source_key(&self, id: SourceId) -> &SourceKey {
        &self.state(id).key
    }

    pub fn counters(&self, id: SourceId) -> &SourceCounters {
        &self.state(id).counters
    }

    /// The group kinds a source's stores have declared.
    pub fn groups(&self, id: SourceId) -> &GroupTable {
        &self.state(id).groups
    }

    /// The cache namespaces a source's stores have recorded (`dynamo-1.6.1` only).
    pub fn namespaces(&self, id: SourceId) -> &NamespaceTable {
        &self.state(id).namespaces
    }

    /// Forgets what a source taught (groups, namespaces) and counted, as after an engine
    /// restart (a new Dynamo listener starts a new normalizer too).
    pub fn reset_source(&mut self, id: SourceId) {
        let state = self.state_mut(id);
        state.groups = GroupTable::default();
        state.namespaces = NamespaceTable::default();
        state.counters = SourceCounters::default();
    }

    fn state(&self, id: SourceId) -> &SourceState {
        self.sources.get(id.index()).unwrap_or_else(|| panic!("source {id:?} is not registered in this normalizer"))
    }

    fn state_mut(&mut self, id: SourceId) -> &mut SourceState {
        self.sources.get_mut(id.index()).unwrap_or_else(|| panic!("source {id:?} is not registered in this normalizer"))
    }

    /// Decodes one payload and normalizes its events, appending one verdict per event to `out`.
    /// A payload that does not decode is counted on the source (`decode_errors`, first one kept
    /// with its context) and returned as the error; `out` is then unchanged.
    pub fn push_payload(&mut self, id: SourceId, seq: u64, payload: &[u8], out: &mut Vec<Verdict>) -> Result<EventBatch, DecodeError> {
        match decode_batch(payload) {
            Ok(batch) => {
                self.normalize_batch(id, seq, &batch, out);
                Ok(batch)
            }
            Err(err) => {
                self.count_decode_error(id, seq, &err);
                Err(err)
            }
        }
    }

    /// Decodes one payload and classifies each event as it is decoded, calling `each` with the
    /// event and its verdict in batch order; no event or verdict outlives its call. The same
    /// verdicts as [`Normalizer::push_payload`], in memory that does not grow with the batch.
    /// A payload that does not decode calls `each` for no event, is counted on the source like
    /// `push_payload` counts it, and is returned as the error.
    pub fn push_payload_with<F: FnMut(&KvEvent, Verdict)>(
        &mut self,
        id: SourceId,
        seq: u64,
        payload: &[u8],
        each: F,
    ) -> Result<BatchHeader, DecodeError> {
        let result = decode_each(payload, &mut self.payload_sink(id, seq, each));
        if let Err(err) = &result {
            self.count_decode_error(id, seq, err);
        }
        result
    }

    /// An [`EventSink`] that classifies one payload's events for source `id` as
    /// [`kvscope_wire::decode_each`] hands them over, calling `each` per event. For feeding one
    /// decode to several normalizers (the server's policies); [`Normalizer::push_payload_with`]
    /// is the one-normalizer form. A failed decode is not counted here (the caller knows).
    pub fn payload_sink<F: FnMut(&KvEvent, Verdict)>(&mut self, id: SourceId, seq: u64, each: F) -> PayloadSink<'_, F> {
        let state = self.payload_state(id, seq);
        PayloadSink { normalizer: self, state, each }
    }

    /// One payload's classification for source `id`, for a caller that drives the decoder
    /// itself and cannot keep the normalizer borrowed between events (a relay's prediction,
    /// which needs its publisher stage too): [`PayloadState::inspect`] each event while the
    /// payload is checked, [`Normalizer::begin_payload`] once it decoded, then
    /// [`Normalizer::classify`] each event. [`PayloadSink`] is the same, borrowing the
    /// normalizer.
    pub fn payload_state(&self, id: SourceId, seq: u64) -> PayloadState {
        self.state(id);
        let scan = (self.policy.batch_check == BatchCheck::Dynamo161).then(RejectionScan::default);
        PayloadState { id, seq, scan, rejection: None, dp_rank: None }
    }

    /// The payload of `state` decoded whole: its batch is counted (and its rejection found).
    pub fn begin_payload(&mut self, state: &mut PayloadState, header: &BatchHeader) {
        state.rejection = state.scan.as_ref().and_then(|scan| rejected(scan, header));
        state.dp_rank = header.dp_rank;
        self.begin_batch(state.id, state.seq, state.rejection.as_ref());
    }

    /// One event of the payload of `state`, after [`Normalizer::begin_payload`].
    #[inline]
    pub fn classify(&mut self, state: &PayloadState, index: u32, event: &KvEvent) -> Verdict {
        self.normalize_one(state.id, state.seq, index, state.dp_rank, event, state.rejection.as_ref())
    }

    /// Counts a payload of source `id` that did not decode (`decode_errors`, the first one kept
    /// with its context), as [`Normalizer::push_payload`] does; for callers that decode
    /// themselves.
    pub fn count_decode_error(&mut self, id: SourceId, seq: u64, err: &DecodeError) {
        let state = self.state_mut(id);
        state.counters.decode_errors += 1;
        if state.counters.first_decode_error.is_none() {
            let text = format!("{} seq {seq}: {err}", state.key);
            state.counters.first_decode_error = Some(LogLine { level: LogLevel::Error, seq, event_index: 0, text });
        }
    }

    /// Normalizes every event of a decoded batch, appending one verdict per event to `out`.
    ///
    /// Under a policy with a batch-level check (`dynamo-1.6.1`), a batch that policy's decoder
    /// rejects gives every event the verdict `batch_decode_rejected` and teaches nothing.
    pub fn normalize_batch(&mut self, id: SourceId, seq: u64, batch: &EventBatch, out: &mut Vec<Verdict>) {
        let rejection = match self.policy.batch_check {
            BatchCheck::None => None,
            BatchCheck::Dynamo161 => {
                let mut scan = RejectionScan::default();
                for (i, event) in batch.events.iter().enumerate() {
                    scan.observe(i as u32, event);
                }
                rejected(&scan, &batch.header())
            }
        };
        self.begin_batch(id, seq, rejection.as_ref());
        out.reserve(batch.events.len());
        for (i, event) in batch.events.iter().enumerate() {
            out.push(self.normalize_one(id, seq, i as u32, batch.dp_rank, event, rejection.as_ref()));
        }
    }

    /// Counts a batch about to be normalized, and logs its rejection.
    fn begin_batch(&mut self, id: SourceId, seq: u64, rejection: Option<&Rejected>) {
        let SourceState { key, counters, .. } = self.state_mut(id);
        counters.batches += 1;
        if let Some(r) = rejection {
            counters.batches_rejected += 1;
            counters.notices.push(LogLevel::Warn, seq, 0, || batch_decode_rejected::notice(&*key, seq, r));
        }
    }

    /// Normalizes one event. `batch_dp_rank` is the batch's own rank field; groups are learned
    /// per `(rank, group_idx)` with the source's rank used when the batch names none.
    ///
    /// Batch-level checks need the whole batch: under `dynamo-1.6.1` call
    /// [`Normalizer::normalize_batch`], or this event is judged as if its batch decoded.
    #[inline]
    pub fn normalize_event(&mut self, id: SourceId, seq: u64, event_index: u32, batch_dp_rank: Option<u32>, event: &KvEvent) -> Verdict {
        self.normalize_one(id, seq, event_index, batch_dp_rank, event, None)
    }

    #[inline]
    fn normalize_one(
        &mut self,
        id: SourceId,
        seq: u64,
        event_index: u32,
        batch_dp_rank: Option<u32>,
        event: &KvEvent,
        rejection: Option<&Rejected>,
    ) -> Verdict {
        let policy = self.policy;
        let state = self.sources.get_mut(id.index()).unwrap_or_else(|| panic!("source {id:?} is not registered"));
        let block_size = state.block_size.unwrap_or(self.block_size);
        let dp_rank = batch_dp_rank.unwrap_or(state.key.dp_rank);

        let mut cx = EventCtx::new(event, &policy, block_size, dp_rank, &mut state.groups, &mut state.namespaces);
        cx.rejection = rejection;
        let (rule, kind) = evaluate_in(&self.rules, &mut cx);
        let mut verdict = Verdict {
            source: id,
            seq,
            event_index,
            event_type: event.event_type(),
            tier: verdict_tier(&policy, &kind, cx.tier),
            kind,
            rule,
            flags: cx.flags,
            facts: cx.facts,
        };

        let counters = &mut state.counters;
        let key = &state.key;
        if policy.log_style == LogStyle::Dynamo161 {
            dynamo_notices(counters, key, &verdict, event, rejection.map(|r| r.rejection));
        }
        counters.count_event(verdict.event_type);
        counters.count_verdict(verdict.tier, verdict.label(), verdict.blocks_applied());
        if verdict.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK) {
            counters.unknown_medium_fallbacks += 1;
        }

        match verdict.kind {
            VerdictKind::Skip(VerdictLabel::OffloadBlockSizeMismatch) => {
                let budget = &mut counters.offload;
                verdict.facts.warning_limit = budget.limit.min(255) as u8;
                let v = &verdict;
                if let Some(n) =
                    budget.charge(LogLevel::Warn, seq, event_index, |last| offload_block_size_mismatch::warning_line(key, v, last))
                {
                    verdict.facts.warning_ordinal = n.min(255) as u8;
                    verdict.flags.insert(VerdictFlags::WARNING_LOGGED);
                }
            }
            VerdictKind::Fatal(_) => {
                counters.fatal_count += 1;
                if counters.first_fatal.is_none() {
                    let text = block_size_mismatch::fatal_line(key, &verdict);
                    counters.first_fatal = Some(LogLine { level: LogLevel::Error, seq, event_index, text });
                }
            }
            _ if verdict.flags.has_conversion_warning() => {
                let budget = &mut counters.conversion;
                verdict.facts.warning_limit = budget.limit.min(255) as u8;
                let v = &verdict;
                let line = |last| match policy.log_style {
                    LogStyle::Kvscope => apply::conversion_line(key, v, last),
                    LogStyle::Dynamo161 => apply::dynamo_conversion_line(key, v),
                };
                if let Some(n) = budget.charge(LogLevel::Warn, seq, event_index, line) {
                    verdict.facts.warning_ordinal = n.min(255) as u8;
                    verdict.flags.insert(VerdictFlags::WARNING_LOGGED);
                }
            }
            _ => {}
        }
        verdict
    }
}

/// The rejection every event of a batch sees, from a finished scan.
fn rejected(scan: &RejectionScan, header: &BatchHeader) -> Option<Rejected> {
    scan.finish(header).map(|(rejection, value, tag)| Rejected { rejection, tag, value })
}

/// Classifies one payload's events for one source as the streaming decoder hands them over
/// (made by [`Normalizer::payload_sink`]). Under `dynamo-1.6.1` it gathers the batch's
/// rejection while the payload is checked, before the first event is judged.
#[derive(Debug)]
pub struct PayloadSink<'n, F> {
    normalizer: &'n mut Normalizer,
    state: PayloadState,
    each: F,
}

/// One payload's classification in progress ([`Normalizer::payload_state`]).
#[derive(Debug)]
pub struct PayloadState {
    id: SourceId,
    seq: u64,
    /// `Some` under a policy with a batch-level check.
    scan: Option<RejectionScan>,
    rejection: Option<Rejected>,
    dp_rank: Option<u32>,
}

impl PayloadState {
    /// One event while the payload is checked, before it is classified: a batch-level check
    /// gathers what it needs here.
    #[inline]
    pub fn inspect(&mut self, index: u32, event: &KvEvent) {
        if let Some(scan) = &mut self.scan {
            scan.observe(index, event);
        }
    }
}

impl<F: FnMut(&KvEvent, Verdict)> EventSink for PayloadSink<'_, F> {
    #[inline]
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.state.inspect(index, event);
    }

    fn begin(&mut self, header: &BatchHeader) {
        self.normalizer.begin_payload(&mut self.state, header);
    }

    #[inline]
    fn event(&mut self, index: u32, event: &KvEvent) {
        let verdict = self.normalizer.classify(&self.state, index, event);
        (self.each)(event, verdict);
    }
}

/// The lines Dynamo 1.6.1 prints every time for this event: an unknown cache kind (at decode,
/// for every event its decoder read before any failure) and a self-referencing store.
fn dynamo_notices(counters: &mut SourceCounters, key: &SourceKey, v: &Verdict, event: &KvEvent, rejection: Option<BatchRejection>) {
    let (seq, i) = (v.seq, v.event_index);
    if let Some(kind) = event.kv_cache_spec_kind()
        && classify_kind(kind) == KindClass::Unknown
        && rejection.is_none_or(|r| r.decoded_before_failure(i))
    {
        counters.notices.push(LogLevel::Warn, seq, i, || unknown_kind::dynamo_notice(key, seq, i, kind));
    }
    if v.kind == VerdictKind::Apply(Apply::NoOpRemove) {
        counters.notices.push(LogLevel::Warn, seq, i, || self_referencing_store::dynamo_notice(key, seq, i));
    }
}
