//! The router's side of each engine source: kvscope-router's [`Reconciler`] fed by the engine
//! streams and the event-plane sources, for `check` (offline, over a capture) and `/metrics`
//! (live, one task).
//!
//! Which engine source a RouterEvent belongs to: Dynamo's `worker_id` is a u64, kvscope's
//! `--workers` names are strings, so an engine source takes part when its worker id is a
//! decimal number (`42`, as `KvEventPublisher(worker_id=42)`); the relay is predicted at the
//! source's dp_rank, with the block size as its `kv_block_size` and the relay policy
//! (`--relay-policy`, default `dynamo-1.6.1`). Sources with another name get no router counts
//! (and a note saying so); RouterEvents for a worker no source has are counted as unknown
//! workers.
//!
//! The live task never blocks an intake: inputs go through a bounded channel with `try_send`,
//! and what does not fit is counted (`kvscope_router_dropped_inputs_total`), so a reconciler that
//! falls behind shows up as such rather than as back-pressure on the engines.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kvscope_normalize::Policy;
use kvscope_router::{Reconciler, ReconcilerConfig, RelayConfig, RouterCounts, RouterReport, RouterSourceId};
use tokio::sync::{mpsc, watch};

use crate::metrics::Metrics;

/// The relay policy `check` and the live server predict by default: Dynamo 1.6.1's relay.
pub const DEFAULT_RELAY_POLICY: &str = "dynamo-1.6.1";

/// The relay of an engine source, when its worker id is a decimal u64.
pub fn relay_config(worker_id: &str, dp_rank: u32, kv_block_size: u32, policy: Policy) -> Option<RelayConfig> {
    RelayConfig::for_source(worker_id, dp_rank, kv_block_size, policy)
}

/// Why a source has no router counts, for `check`'s notes.
pub fn not_reconciled_note(key: &str, worker_id: &str) -> String {
    format!(
        "  {key}: no router counts: worker id {worker_id:?} is not a decimal number, and Dynamo's RouterEvents name \
         workers by their u64 worker_id (name the source by it, e.g. --workers 42=tcp://...)"
    )
}

/// One line of `check`'s table: `router: expected N, received N, matched N, ...`.
pub fn table_line(key: &str, c: &RouterCounts) -> String {
    let mut line = format!(
        "  {key}: router: expected {}, received {}, matched {}, missing {}, unexpected {}, mismatched {}",
        c.expected, c.received, c.matched, c.missing, c.unexpected, c.mismatched
    );
    if c.mismatched > 0 {
        let f = &c.mismatched_fields;
        line.push_str(&format!(
            " (tier {}, blocks {}, parent {}, tokens_hash {}, other {})",
            f.tier, f.blocks, f.parent, f.tokens_hash, f.other
        ));
    }
    if c.overflowed_expected + c.overflowed_received > 0 {
        line.push_str(&format!(", overflowed {}/{}", c.overflowed_expected, c.overflowed_received));
    }
    if c.engine_decode_errors > 0 {
        line.push_str(&format!(", {} engine payloads not predicted (decode errors)", c.engine_decode_errors));
    }
    if let Some(dropped) = c.dropped_by_relay(|n| n.to_string()) {
        line.push_str(&format!("; {dropped}"));
    }
    line
}

/// What the live reconciler is fed.
#[derive(Debug)]
pub enum Input {
    /// An engine batch of a source, as relayed (seq, payload).
    Engine { source: RouterSourceId, seq: u64, payload: Bytes },
    /// A decoded event-plane envelope.
    Plane(kvscope_router::Envelope),
}

/// Where intakes send their inputs: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct Tap {
    tx: mpsc::Sender<Input>,
    metrics: Arc<Metrics>,
}

impl Tap {
    pub fn send(&self, input: Input) {
        if self.tx.try_send(input).is_err() {
            self.metrics.router_dropped_inputs.inc();
        }
    }
}

/// An engine source's handle on the live reconciler.
#[derive(Clone, Debug)]
pub struct EngineTap {
    pub tap: Tap,
    pub source: RouterSourceId,
}

/// Inputs queued for the live reconciler before they are counted as dropped.
const QUEUE: usize = 64 * 1024;

/// How often the live reconciler's counts are exported to /metrics.
const EXPORT_EVERY: Duration = Duration::from_millis(100);

/// The live reconciler: the engine sources that take part (by index in `sources`), the tap,
/// and its task.
#[derive(Debug)]
pub struct Live {
    pub tap: Tap,
    pub engines: HashMap<usize, RouterSourceId>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the live reconciler over `(key, worker_id, dp_rank)` of every engine source.
pub fn start_live(
    sources: &[(String, String, u32)],
    block_size: u32,
    policy: Policy,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Live {
    let mut reconciler = Reconciler::new(ReconcilerConfig::default());
    let mut engines = HashMap::new();
    for (i, (key, worker, rank)) in sources.iter().enumerate() {
        match relay_config(worker, *rank, block_size, policy) {
            Some(relay) => {
                engines.insert(i, reconciler.add_source(key, relay));
            }
            None => {
                tracing::info!(source = %key, "not reconciled with the event plane: worker id {worker:?} is not Dynamo's decimal worker_id")
            }
        }
    }
    let (tx, mut rx) = mpsc::channel::<Input>(QUEUE);
    let tap = Tap { tx, metrics: metrics.clone() };
    let task = tokio::spawn(async move {
        let mut exported = Exported::default();
        let mut tick = tokio::time::interval(EXPORT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut buf = Vec::with_capacity(256);
        let mut dirty = false;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                n = rx.recv_many(&mut buf, 256) => {
                    if n == 0 {
                        break;
                    }
                    for input in buf.drain(..) {
                        // Errors are counted by the reconciler (engine decode errors, plane
                        // payload errors per publisher).
                        let _ = match input {
                            Input::Engine { source, seq, payload } => reconciler.push_engine(source, seq, &payload).map(|_| ()).map_err(|_| ()),
                            Input::Plane(env) => reconciler.push_envelope(&env).map_err(|_| ()),
                        };
                    }
                    dirty = true;
                }
                _ = tick.tick() => if dirty {
                    exported.export(&reconciler.report(), &metrics);
                    dirty = false;
                },
            }
        }
        exported.export(&reconciler.report(), &metrics);
    });
    Live { tap, engines, task }
}

/// What was exported so far: counters take the increase since.
#[derive(Debug, Default)]
struct Exported {
    values: HashMap<(String, String), u64>,
}

impl Exported {
    fn bump(&mut self, key: (String, String), now: u64) -> u64 {
        let last = self.values.insert(key, now).unwrap_or(0);
        now.saturating_sub(last)
    }

    fn export(&mut self, report: &RouterReport, metrics: &Metrics) {
        use crate::metrics::{RouterCountLabels, RouterDroppedLabels};
        for s in &report.sources {
            let c = &s.router;
            for (count, n) in c.alignment() {
                let delta = self.bump((s.source.clone(), count.to_owned()), n);
                let labels = RouterCountLabels { source: s.source.clone(), count: count.to_owned() };
                let counter = metrics.router_events.get_or_create(&labels);
                counter.inc_by(delta);
            }
            for (label, n) in &c.dropped_by_policy {
                let delta = self.bump((s.source.clone(), format!("dropped:{}", label.as_str())), *n);
                let labels = RouterDroppedLabels { source: s.source.clone(), label: label.as_str().to_owned() };
                metrics.router_dropped.get_or_create(&labels).inc_by(delta);
            }
        }
        let unknown: u64 = report.unknown_workers.iter().map(|u| u.events).sum();
        let delta = self.bump((String::new(), "unknown".to_owned()), unknown);
        metrics.router_unknown_worker_events.inc_by(delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_decimal_worker_ids_are_reconciled() {
        let p = Policy::DYNAMO_1_6_1;
        assert_eq!(relay_config("42", 1, 16, p).map(|r| (r.worker_id, r.dp_rank, r.kv_block_size)), Some((42, 1, 16)));
        assert!(relay_config("w0", 0, 16, p).is_none());
        assert!(relay_config("-1", 0, 16, p).is_none());
    }

    #[test]
    fn the_table_line_names_every_count_and_the_policy_drops() {
        let mut c = RouterCounts { expected: 5, received: 5, matched: 5, ..RouterCounts::default() };
        c.dropped_by_policy.insert(kvscope_normalize::VerdictLabel::UnknownMedium, 2);
        assert_eq!(
            table_line("42:0", &c),
            "  42:0: router: expected 5, received 5, matched 5, missing 0, unexpected 0, mismatched 0; dropped by the relay: unknown_medium 2"
        );
    }
}
