//! One policy's normalizer over every source of the page, and the translation of its verdicts
//! into the dashboard's classes.
//!
//! The verdict a normalizer returns is kept only for the duration of a frame: the model stores a
//! one-byte class per event and asks a fresh run for the sentence when the inspector opens an
//! event (see `Model::event_detail`). The normalizer's own per-source counters (warning budgets
//! and their log lines, the first fatal) are read directly for the indexer log view.

use std::borrow::Cow;

use kvscope_normalize::{Normalizer, Policy, SourceId, StorageTier, Verdict, VerdictFlags, VerdictKind as NKind};
use kvscope_wire::EventBatch;

use super::classes::VerdictKind;

/// What the model keeps of one verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub kind: VerdictKind,
    /// `data-reason`: the tier label for applied events (`all_tiers` for a clear), the skip
    /// reason, or the fatal error kind.
    pub reason: &'static str,
    /// The tier the event concerned, if any, as shown: `device (medium "cpu" fell back)` when
    /// the medium matched no tier, because that fallback is what hid the host tier before.
    pub tier: Option<Cow<'static, str>>,
    /// The tier label alone.
    pub tier_label: Option<&'static str>,
    /// Blocks applied (stores and removes).
    pub blocks: u32,
    /// The full verdict, for the tier trees and the sentence.
    pub verdict: Verdict,
}

impl Outcome {
    fn from_verdict(v: Verdict) -> Outcome {
        let tier_label = v.tier.map(StorageTier::label);
        let (kind, reason) = match v.kind {
            NKind::Apply(_) => (VerdictKind::Applied, tier_label.unwrap_or("all_tiers")),
            NKind::Skip(_) => (VerdictKind::Skipped, v.label().as_str()),
            _ => (VerdictKind::Fatal, v.label().as_str()),
        };
        let tier = tier_label.map(|t| {
            if v.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK) {
                let medium = v.facts.medium;
                Cow::Owned(format!("{t} (medium {:?} fell back)", medium.as_str()))
            } else {
                Cow::Borrowed(t)
            }
        });
        Outcome { kind, reason, tier, tier_label, blocks: v.blocks_applied(), verdict: v }
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
        Ok(PolicyRun { normalizer: Normalizer::new(block_size, policy), ids: Vec::new(), verdicts: Vec::new() })
    }

    /// A run with the same policy and block size and no state.
    pub fn fresh(&self) -> PolicyRun {
        PolicyRun { normalizer: Normalizer::new(self.normalizer.block_size(), *self.normalizer.policy()), ids: Vec::new(), verdicts: Vec::new() }
    }

    pub fn name(&self) -> &'static str {
        self.normalizer.policy().name
    }

    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    fn id(&mut self, source: u32, worker_id: &str, dp_rank: u32) -> SourceId {
        let i = source as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        *self.ids[i].get_or_insert_with(|| self.normalizer.source(worker_id, dp_rank))
    }

    /// The normalizer's id of a model source, if it has seen a frame.
    pub fn source_id(&self, source: u32) -> Option<SourceId> {
        self.ids.get(source as usize).copied().flatten()
    }

    /// Classifies every event of a batch, appending one outcome per event to `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn classify(&mut self, source: u32, worker_id: &str, dp_rank: u32, seq: u64, batch: &EventBatch, out: &mut Vec<Outcome>) {
        let id = self.id(source, worker_id, dp_rank);
        self.verdicts.clear();
        self.normalizer.normalize_batch(id, seq, batch, &mut self.verdicts);
        out.extend(self.verdicts.iter().copied().map(Outcome::from_verdict));
    }
}
