//! One policy's normalizer over every source of the page, and the translation of its verdicts
//! into the dashboard's classes.
//!
//! The verdict a normalizer returns is kept only for the duration of a frame: the model stores a
//! one-byte class per event and asks a fresh run for the sentence when the inspector opens an
//! event (see `Model::event_detail`). The normalizer's own per-source counters (warning budgets
//! and their log lines, the first fatal) are read directly for the indexer log view.

use std::cell::Cell;

use kvscope_normalize::{Normalizer, Policy, SourceId, Verdict};
use kvscope_wire::{BatchHeader, EventBatch, EventSink, KvEvent};

use super::classes::Class;

/// What the model keeps of one verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Classified {
    /// The verdict's class ([`Class::of`]).
    pub class: Class,
    /// Blocks applied (stores and removes).
    pub blocks: u32,
    /// The full verdict, for the tier trees and the sentence.
    pub verdict: Verdict,
}

impl Classified {
    pub(super) fn from_verdict(v: Verdict) -> Classified {
        Classified { class: Class::of(&v), blocks: v.blocks_applied(), verdict: v }
    }

    /// The inspector's sentence.
    pub fn rule(&self) -> String {
        self.verdict.to_string()
    }
}

/// A normalizer for one policy, with the model's source indices mapped to its ids.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    normalizer: Normalizer,
    ids: Vec<Option<SourceId>>,
    verdicts: Vec<Verdict>,
}

/// The policy presets the normalizer knows, for the selectors.
pub fn policy_names() -> Vec<&'static str> {
    Policy::names().collect()
}

impl PolicyRun {
    /// A run of the named preset at `block_size`; the error names the valid presets.
    pub fn new(policy: &str, block_size: u32) -> Result<PolicyRun, String> {
        let policy: Policy = policy.parse().map_err(|e| format!("{e}"))?;
        Ok(PolicyRun::of(policy, block_size))
    }

    /// A run of `policy` at `block_size`.
    pub fn of(policy: Policy, block_size: u32) -> PolicyRun {
        PolicyRun { normalizer: Normalizer::new(block_size, policy), ids: Vec::new(), verdicts: Vec::new() }
    }

    /// A run with the same policy and block size and no state.
    pub fn fresh(&self) -> PolicyRun {
        PolicyRun {
            normalizer: Normalizer::new(self.normalizer.block_size(), *self.normalizer.policy()),
            ids: Vec::new(),
            verdicts: Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.normalizer.policy().name
    }

    pub fn policy(&self) -> kvscope_normalize::Policy {
        *self.normalizer.policy()
    }

    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    fn id(&mut self, source: u32, worker_id: &str, dp_rank: u32, block_size: Option<u32>) -> SourceId {
        let i = source as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        *self.ids[i].get_or_insert_with(|| {
            let id = self.normalizer.source(worker_id, dp_rank);
            self.normalizer.set_block_size(id, block_size);
            id
        })
    }

    /// The normalizer's id of a model source, if it has seen a frame.
    pub fn source_id(&self, source: u32) -> Option<SourceId> {
        self.ids.get(source as usize).copied().flatten()
    }

    /// A sink that classifies a payload's events as they are decoded, leaving each event's
    /// verdict in `verdict` for whoever reads it next (see [`BothPolicies`]).
    pub fn sink<'a>(
        &'a mut self,
        source: u32,
        worker_id: &str,
        dp_rank: u32,
        block_size: Option<u32>,
        seq: u64,
        verdict: &'a Cell<Option<Verdict>>,
    ) -> impl EventSink + 'a {
        let id = self.id(source, worker_id, dp_rank, block_size);
        self.normalizer.payload_sink(id, seq, move |_: &KvEvent, v: Verdict| verdict.set(Some(v)))
    }

    /// Classifies every event of a batch, appending one outcome per event to `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn classify(
        &mut self,
        source: u32,
        worker_id: &str,
        dp_rank: u32,
        block_size: Option<u32>,
        seq: u64,
        batch: &EventBatch,
        out: &mut Vec<Classified>,
    ) {
        let id = self.id(source, worker_id, dp_rank, block_size);
        self.verdicts.clear();
        self.normalizer.normalize_batch(id, seq, batch, &mut self.verdicts);
        out.extend(self.verdicts.iter().copied().map(Classified::from_verdict));
    }
}

/// One decode, both policies: each event goes to policy A's sink and policy B's, then to `each`
/// with the batch's timestamp, once both verdicts are in.
pub struct BothPolicies<A, B, F> {
    pub a: A,
    pub b: B,
    /// The batch's `ts`, known at [`EventSink::begin`].
    pub ts: f64,
    pub each: F,
}

impl<A, B, F> std::fmt::Debug for BothPolicies<A, B, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BothPolicies").field("ts", &self.ts).finish_non_exhaustive()
    }
}

impl<A: EventSink, B: EventSink, F: FnMut(u32, &KvEvent, f64)> EventSink for BothPolicies<A, B, F> {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.a.inspect(index, event);
        self.b.inspect(index, event);
    }

    fn begin(&mut self, header: &BatchHeader) {
        self.ts = header.ts;
        self.a.begin(header);
        self.b.begin(header);
    }

    fn event(&mut self, index: u32, event: &KvEvent) {
        self.a.event(index, event);
        self.b.event(index, event);
        (self.each)(index, event, self.ts);
    }
}
