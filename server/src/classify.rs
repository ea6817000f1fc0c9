//! The native normalizer over one source's payloads: decode once, classify under each policy,
//! count into `/metrics`.
//!
//! Events are classified as the decoder hands them over ([`kvscope_wire::decode_each`]), one
//! decode feeding every policy's normalizer: no vector of events or verdicts is built per
//! frame, so a frame of millions of tiny events costs memory in proportion to its bytes.
//!
//! The server runs the same `kvscope-normalize` the browser runs, so `/metrics` and `check`
//! agree with the dashboard. One [`Classifier`] per source, owned by that source's task: no
//! locks on the hot path, and per-(policy, tier, verdict) counter handles are cached after first
//! use instead of being looked up per event.

use kvscope_normalize::{Normalizer, Policy, SourceId, StorageTier, Verdict, VerdictLabel};
use kvscope_wire::{BatchHeader, DecodeError, Decoded, EventSink, KvEvent, decode_each};

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
        Classifier { runs, metrics }
    }

    /// Decodes `payload` and classifies its events under every policy, one event at a time;
    /// from `decoded` when the payload was decoded already (once for this and the router task).
    /// A payload that does not decode teaches no normalizer anything.
    pub fn classify(&mut self, seq: u64, payload: &[u8], decoded: Option<&Decoded>) -> Result<BatchHeader, DecodeError> {
        let metrics = self.metrics.as_ref();
        let mut sinks: Vec<_> = self
            .runs
            .iter_mut()
            .map(|run| {
                let PolicyRun { normalizer, id, counters } = run;
                let policy = normalizer.policy().name;
                normalizer.payload_sink(*id, seq, move |_: &KvEvent, v: Verdict| {
                    if let Some((source, metrics)) = metrics {
                        count_verdict(counters, source, metrics, policy, &v);
                    }
                })
            })
            .collect();
        let mut frame = FrameSink { policies: &mut sinks[..], events: metrics.map(|(source, _)| source) };
        match decoded {
            Some(decoded) => decoded.feed(payload, &mut frame),
            None => decode_each(payload, &mut frame),
        }
    }

    /// The normalizer of the `i`th policy and this source's id in it (for `check`).
    pub fn normalizer(&self, i: usize) -> (&Normalizer, SourceId) {
        (&self.runs[i].normalizer, self.runs[i].id)
    }
}

/// Counts one verdict of policy `policy` into its cached counter.
fn count_verdict(
    counters: &mut [[Option<Counter>; VerdictLabel::COUNT]],
    source: &SourceMetrics,
    metrics: &Metrics,
    policy: &str,
    v: &Verdict,
) {
    let slot = v.tier.map_or(StorageTier::ALL.len(), StorageTier::index);
    let label = v.label();
    let counter = counters[slot][label.index()].get_or_insert_with(|| {
        metrics
            .verdicts
            .get_or_create(&VerdictLabels {
                source: source.key.clone(),
                policy: policy.to_owned(),
                tier: tier_label(v.tier).to_owned(),
                verdict: LabelValue(label),
            })
            .clone()
    });
    counter.inc();
}

/// One frame's events: counted by type once, then classified by every policy.
struct FrameSink<'a, S> {
    policies: &'a mut [S],
    events: Option<&'a SourceMetrics>,
}

impl<S: EventSink> EventSink for FrameSink<'_, S> {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.policies.inspect(index, event);
    }
    fn begin(&mut self, header: &BatchHeader) {
        self.policies.begin(header);
    }
    fn event(&mut self, index: u32, event: &KvEvent) {
        if let Some(source) = self.events {
            let i = kvscope_wire::EventType::ALL.iter().position(|t| *t == event.event_type()).unwrap_or(3);
            source.events[i].inc();
        }
        self.policies.event(index, event);
    }
}
