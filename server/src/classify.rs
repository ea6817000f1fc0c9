//! The native normalizer over one source's payloads: decode once, classify under each policy,
//! count into `/metrics`.
//!
//! The server runs the same `kvscope-normalize` the browser runs, so `/metrics` and `check`
//! agree with the dashboard. One [`Classifier`] per source, owned by that source's task: no
//! locks on the hot path, and per-(policy, tier, verdict) counter handles are cached after first
//! use instead of being looked up per event.

use kvscope_normalize::{Normalizer, Policy, SourceId, StorageTier, Verdict, VerdictLabel};
use kvscope_wire::{DecodeError, EventBatch, decode_batch};

use crate::metrics::{LabelValue, Metrics, SourceMetrics, VerdictLabels};
use prometheus_client::metrics::counter::Counter;

const TIER_SLOTS: usize = StorageTier::ALL.len() + 1;

/// `device`, `host_pinned`, `disk`, `external`, or `none`.
pub fn tier_label(tier: Option<StorageTier>) -> &'static str {
    tier.map_or("none", StorageTier::label)
}

#[derive(Debug)]
struct PolicyRun {
    normalizer: Normalizer,
    id: SourceId,
    /// `[tier slot][label]`, filled on first use.
    counters: Vec<[Option<Counter>; VerdictLabel::COUNT]>,
}

/// Decodes and classifies one source's payloads under one or more policies.
#[derive(Debug)]
pub struct Classifier {
    runs: Vec<PolicyRun>,
    verdicts: Vec<Verdict>,
    metrics: Option<(SourceMetrics, std::sync::Arc<Metrics>)>,
}

impl Classifier {
    pub fn new(
        worker_id: &str,
        dp_rank: u32,
        block_size: u32,
        policies: &[Policy],
        metrics: Option<(SourceMetrics, std::sync::Arc<Metrics>)>,
    ) -> Self {
        let runs = policies
            .iter()
            .map(|&policy| {
                let mut normalizer = Normalizer::new(block_size, policy);
                let id = normalizer.source(worker_id, dp_rank);
                PolicyRun { normalizer, id, counters: (0..TIER_SLOTS).map(|_| std::array::from_fn(|_| None)).collect() }
            })
            .collect();
        Classifier { runs, verdicts: Vec::new(), metrics }
    }

    /// Decodes `payload` and classifies its events under every policy.
    pub fn classify(&mut self, seq: u64, payload: &[u8]) -> Result<EventBatch, DecodeError> {
        let batch = decode_batch(payload)?;
        if let Some((source, _)) = &self.metrics {
            for event in &batch.events {
                let i = kvscope_wire::EventType::ALL.iter().position(|t| *t == event.event_type()).unwrap_or(3);
                source.events[i].inc();
            }
        }
        for run in &mut self.runs {
            self.verdicts.clear();
            run.normalizer.normalize_batch(run.id, seq, &batch, &mut self.verdicts);
            if let Some((source, metrics)) = &self.metrics {
                for v in &self.verdicts {
                    let slot = v.tier.map_or(StorageTier::ALL.len(), StorageTier::index);
                    let label = v.label();
                    let counter = run.counters[slot][label.index()].get_or_insert_with(|| {
                        metrics
                            .verdicts
                            .get_or_create(&VerdictLabels {
                                source: source.key.clone(),
                                policy: run.normalizer.policy().name.to_owned(),
                                tier: tier_label(v.tier).to_owned(),
                                verdict: LabelValue(label),
                            })
                            .clone()
                    });
                    counter.inc();
                }
            }
        }
        Ok(batch)
    }

    /// The normalizer of the `i`th policy and this source's id in it (for `check`).
    pub fn normalizer(&self, i: usize) -> (&Normalizer, SourceId) {
        (&self.runs[i].normalizer, self.runs[i].id)
    }
}
