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
//! The live task never blocks an intake: inputs go through a channel bounded in bytes
//! (`--router-queue-bytes`: payloads and the decodes handed on with them) with `try_send`, and
//! what does not fit is counted (`kvscope_router_dropped_inputs_total`) and logged once, so a
//! reconciler that falls behind shows up as such rather than as back-pressure on the engines or
//! as memory that grows with the backlog. The index model is told which engine batches it never
//! saw (`IndexModel::note_unseen`), so what they hid reads as kvscope's blind spot
//! (`orphan:kvscope_dropped`), not as frames the router's indexer lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kvscope_index::{IndexConfig, IndexModel, IndexSourceId};
use kvscope_normalize::Policy;
use kvscope_router::{Reconciler, ReconcilerConfig, RelayConfig, RouterCounts, RouterReport, RouterSourceId, TokensHashes};
use kvscope_wire::Decoded;
use tokio::sync::{mpsc, watch};

use crate::metrics::Metrics;

/// `--relay-policy`'s default, by name ([`RelayConfig::DEFAULT_POLICY`]: Dynamo 1.6.1's relay).
pub const DEFAULT_RELAY_POLICY: &str = RelayConfig::DEFAULT_POLICY.name;

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

/// One engine batch to the reconciler (for a reconciled source) and the index model (for an
/// indexed one), from one decode and one tokens hash per stored block: on Kimi-K3's batches
/// walking the token ids is most of a decode, and the relay and the index both hash them.
/// Decode errors are counted where they are kept (the reconciler's `engine_decode_errors`, the
/// model's), as each would count them alone. `decoded` is the payload's decode when the intake
/// handed one on.
pub fn push_engine_batch(
    reconciler: Option<(&mut Reconciler, RouterSourceId)>,
    index: Option<(&mut IndexModel, IndexSourceId)>,
    (seq, payload, replayed): (u64, &[u8], bool),
    decoded: Option<&Decoded>,
) {
    if reconciler.is_none() && index.is_none() {
        return;
    }
    let decoded_here;
    let decoded = match decoded {
        Some(d) => d,
        None => {
            decoded_here = Decoded::with_token_bytes(payload);
            &decoded_here
        }
    };
    let mut hashes = TokensHashes::default();
    if let Some((r, id)) = reconciler {
        let _ = r.push_engine_decoded(id, seq, payload, decoded, &mut hashes, |_, _| {});
    }
    if let Some((model, id)) = index {
        let _ = model.push_decoded(id, seq, payload, decoded, &mut hashes, replayed);
    }
}

/// One line of `check`'s table: `router: expected N, received N, matched N, ...`.
pub fn table_line(key: &str, c: &RouterCounts) -> String {
    let mut line = format!(
        "  {key}: router: expected {}, received {}, matched {}, missing {}, unexpected {}, mismatched {}",
        c.expected, c.received, c.matched, c.missing, c.unexpected, c.mismatched
    );
    if c.before_window > 0 {
        line.push_str(&format!(" ({} received for batches before the engine stream's window, not compared)", c.before_window));
    }
    if c.before_plane_window > 0 {
        line.push_str(&format!(
            " ({} expected for messages the relay sent before kvscope subscribed to the plane, not compared)",
            c.before_plane_window
        ));
    }
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

/// What the live task is fed.
#[derive(Debug)]
pub enum Input {
    /// An engine batch of a source (by its index among the engine sources), as relayed, and
    /// decoded when the intake's decode was worth handing on ([`Decoded::worth_handing_on`]).
    Engine { source: usize, seq: u64, payload: Bytes, replayed: bool, decoded: Option<Decoded> },
    /// A decoded event-plane envelope.
    Plane(kvscope_router::Envelope),
    /// An engine source found after the start (`--discover`). Sent before its first batch.
    AddEngine(NewEngine),
}

/// An engine source the live task reconciles and indexes.
#[derive(Debug)]
pub struct NewEngine {
    /// What its [`Input::Engine`]s carry: its index among the engine sources given at the start,
    /// or its server index for one found later (static engines come first, so the two agree).
    pub source: usize,
    pub key: String,
    pub worker_id: String,
    pub dp_rank: u32,
    /// The relay's `kv_block_size`.
    pub block_size: u32,
}

impl Input {
    /// The bytes it holds while queued: the payload and the decode handed on with it.
    fn held_bytes(&self) -> usize {
        match self {
            Input::Engine { payload, decoded, .. } => payload.len() + decoded.as_ref().map_or(0, Decoded::held_bytes),
            Input::Plane(env) => env.payload.len() + env.topic.len(),
            Input::AddEngine(_) => 0,
        }
    }
}

/// What the live task has queued, in bytes, against its bound.
#[derive(Debug)]
struct Queued {
    bytes: AtomicUsize,
    max_bytes: usize,
    /// Whether the bound was ever reached (logged once).
    reached: AtomicBool,
}

/// Engine batches the queue dropped, per source, until the task meets that source's next batch:
/// the index model is told of them there ([`IndexModel::note_unseen`]), in the source's order,
/// so a chain that began in one reads as kvscope's blind spot, not as frames the indexer lost.
#[derive(Debug, Default)]
struct Unseen {
    by_source: std::sync::Mutex<HashMap<usize, Vec<(u64, bool)>>>,
    noted: AtomicUsize,
}

/// Dropped batches noted at most (16 bytes each); past it a gap reads as the indexer's loss
/// again, unless an earlier note already marked its source.
const UNSEEN_NOTED: usize = 64 * 1024;

impl Unseen {
    fn note(&self, source: usize, seq: u64, replayed: bool) {
        if self.noted.fetch_add(1, Ordering::Relaxed) >= UNSEEN_NOTED {
            self.noted.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let mut by_source = self.by_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        by_source.entry(source).or_default().push((seq, replayed));
    }

    /// The notes of `source`'s batches before `seq`, in order: the intake sends a source's
    /// batches in seq order, so they were all dropped before this one was sent.
    fn take_before(&self, source: usize, seq: u64) -> Vec<(u64, bool)> {
        // Every batch asks: without drops, an atomic read and no lock.
        if self.noted.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut by_source = self.by_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(notes) = by_source.get_mut(&source) else { return Vec::new() };
        let (before, after): (Vec<_>, Vec<_>) = notes.iter().partition(|(s, _)| *s < seq);
        *notes = after;
        if notes.is_empty() {
            by_source.remove(&source);
        }
        self.noted.fetch_sub(before.len(), Ordering::Relaxed);
        before
    }
}

/// Where intakes send their inputs: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct Tap {
    tx: mpsc::Sender<Input>,
    queued: Arc<Queued>,
    unseen: Arc<Unseen>,
    metrics: Arc<Metrics>,
}

impl Tap {
    /// Queues `input`, or drops and counts it when the queue holds `--router-queue-bytes`.
    pub fn send(&self, input: Input) {
        let n = input.held_bytes();
        let q = &self.queued;
        let fits = q.bytes.fetch_add(n, Ordering::Relaxed) + n <= q.max_bytes;
        let input = if fits {
            match self.tx.try_send(input) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            }
        } else {
            input
        };
        q.bytes.fetch_sub(n, Ordering::Relaxed);
        if let Input::Engine { source, seq, replayed, .. } = input {
            self.unseen.note(source, seq, replayed);
        }
        self.metrics.router_dropped_inputs.inc();
        if !q.reached.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                bound = q.max_bytes,
                "the router task is behind: its queue reached --router-queue-bytes, and the batches it has no room for are \
                 dropped (kvscope_router_dropped_inputs_total): /metrics' kvscope_index_* undercount (the index names what \
                 a dropped batch hid as orphan:kvscope_dropped), and kvscope_router_* may count a relay's messages for a \
                 dropped batch as unexpected"
            );
        }
    }

    /// Registers an engine found after the start; waits for room (it is rare, and an engine
    /// the task does not know is never reconciled).
    pub async fn add_engine(&self, input: Input) {
        let _ = self.tx.send(input).await;
    }
}

/// An engine source's handle on the live task.
#[derive(Clone, Debug)]
pub struct EngineTap {
    pub tap: Tap,
    /// The source's index among the engine sources.
    pub source: usize,
}

/// Inputs queued for the live task before they are counted as dropped, whatever their bytes.
const QUEUE: usize = 64 * 1024;

/// The default of `--router-queue-bytes`: some 5,000 Kimi-K3 batches (43-64 KB) with their decodes.
pub const DEFAULT_QUEUE_BYTES: usize = 512 << 20;

/// How often the live reconciler's counts are exported to /metrics.
const EXPORT_EVERY: Duration = Duration::from_millis(100);

/// How often the index models' comparison is exported: a report walks every block.
const INDEX_EXPORT_EVERY: Duration = Duration::from_secs(1);

/// The live router side: its tap and its task.
#[derive(Debug)]
pub struct Live {
    pub tap: Tap,
    pub task: tokio::task::JoinHandle<()>,
}

/// What the live task runs: the reconciliation with the event plane (with one), the router's
/// index modelled under each policy, and real dumps to compare with the Dynamo 1.6.1 model.
#[derive(Debug)]
pub struct LiveConfig {
    /// `(key, worker_id, dp_rank)` of every engine source, in order.
    pub engines: Vec<(String, String, u32)>,
    pub block_size: u32,
    /// The index model's bound (`--index-max-nodes`).
    pub index_max_nodes: usize,
    /// The queue's bound (`--router-queue-bytes`).
    pub queue_max_bytes: usize,
    /// With an event plane: the relay policy to reconcile under.
    pub reconcile: Option<Policy>,
    /// This server's part of the fleet: other shards' RouterEvents are counted apart.
    pub shard: kvscope_router::Shard,
    /// The policies whose index is modelled (policy A and B, and Dynamo 1.6.1's with a real
    /// index to compare).
    pub index_policies: Vec<Policy>,
    /// `/dump` bodies of `--router-index` reads.
    pub dumps: Option<mpsc::Receiver<Vec<u8>>>,
}

struct Models {
    /// One model, an index per policy.
    model: IndexModel,
    /// By the source's tap index.
    ids: HashMap<usize, IndexSourceId>,
}

/// Starts the live task.
pub fn start_live(config: LiveConfig, metrics: Arc<Metrics>, mut shutdown: watch::Receiver<bool>) -> Live {
    let mut reconciler = config.reconcile.map(|_| Reconciler::new(ReconcilerConfig { shard: config.shard, ..ReconcilerConfig::default() }));
    let mut reconciled: HashMap<usize, RouterSourceId> = HashMap::new();
    let model = IndexModel::new(IndexConfig {
        max_blocks: config.index_max_nodes,
        ..IndexConfig::sides(config.block_size, &config.index_policies)
    });
    let mut models = Models { model, ids: HashMap::new() };
    let policy = config.reconcile;
    let add_engine =
        move |reconciler: &mut Option<Reconciler>, reconciled: &mut HashMap<usize, RouterSourceId>, models: &mut Models, e: NewEngine| {
            if let (Some(r), Some(policy)) = (reconciler.as_mut(), policy) {
                match relay_config(&e.worker_id, e.dp_rank, e.block_size, policy) {
                    Some(relay) => {
                        reconciled.insert(e.source, r.add_source(&e.key, relay));
                    }
                    None => tracing::info!(
                        source = %e.key,
                        "not reconciled with the event plane: worker id {:?} is not Dynamo's decimal worker_id",
                        e.worker_id
                    ),
                }
            }
            models.ids.insert(e.source, models.model.add_source_at(&e.key, &e.worker_id, e.dp_rank, e.block_size));
        };
    for (source, (key, worker_id, dp_rank)) in config.engines.iter().enumerate() {
        let e = NewEngine { source, key: key.clone(), worker_id: worker_id.clone(), dp_rank: *dp_rank, block_size: config.block_size };
        add_engine(&mut reconciler, &mut reconciled, &mut models, e);
    }
    let (tx, mut rx) = mpsc::channel::<Input>(QUEUE);
    let queued = Arc::new(Queued { bytes: AtomicUsize::new(0), max_bytes: config.queue_max_bytes, reached: AtomicBool::new(false) });
    let unseen = Arc::new(Unseen::default());
    let tap = Tap { tx, queued: queued.clone(), unseen: unseen.clone(), metrics: metrics.clone() };
    let mut dumps = config.dumps;
    let task = tokio::spawn(async move {
        let mut exported = Exported::default();
        let mut tick = tokio::time::interval(EXPORT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut index_tick = tokio::time::interval(INDEX_EXPORT_EVERY);
        index_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut buf = Vec::with_capacity(256);
        let (mut dirty, mut index_dirty) = (false, false);
        let mut last_dump: Option<Vec<u8>> = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                n = rx.recv_many(&mut buf, 256) => {
                    if n == 0 {
                        break;
                    }
                    for input in buf.drain(..) {
                        let held = input.held_bytes();
                        // Errors are counted where they are kept (engine decode errors by the
                        // reconciler and the models, plane payload errors per publisher).
                        match input {
                            Input::Engine { source, seq, payload, replayed, decoded } => {
                                let router = reconciler.as_mut().zip(reconciled.get(&source).copied());
                                if let Some(&id) = models.ids.get(&source) {
                                    for (dropped, replayed) in unseen.take_before(source, seq) {
                                        models.model.note_unseen(id, dropped, 1, replayed);
                                    }
                                }
                                let index = models.ids.get(&source).map(|&id| (&mut models.model, id));
                                push_engine_batch(router, index, (seq, &payload, replayed), decoded.as_ref());
                                index_dirty = true;
                            }
                            Input::Plane(env) => {
                                if let Some(r) = reconciler.as_mut() {
                                    let _ = r.push_envelope(&env);
                                }
                            }
                            Input::AddEngine(e) => add_engine(&mut reconciler, &mut reconciled, &mut models, e),
                        }
                        queued.bytes.fetch_sub(held, Ordering::Relaxed);
                    }
                    dirty = true;
                }
                Some(dump) = async { match dumps.as_mut() { Some(d) => d.recv().await, None => std::future::pending().await } } => {
                    last_dump = Some(dump);
                    index_dirty = true;
                }
                _ = tick.tick() => if dirty {
                    if let Some(r) = &reconciler {
                        exported.export(&r.report(), &metrics);
                    }
                    dirty = false;
                },
                _ = index_tick.tick() => if index_dirty {
                    models.export(last_dump.as_deref(), &metrics);
                    index_dirty = false;
                },
            }
        }
        if let Some(r) = &reconciler {
            exported.export(&r.report(), &metrics);
        }
        models.export(last_dump.as_deref(), &metrics);
    });
    Live { tap, task }
}

impl Models {
    /// Sets every index gauge from the models' reports, and compares the last real dump with
    /// the Dynamo 1.6.1 model.
    fn export(&self, dump: Option<&[u8]>, metrics: &Metrics) {
        use crate::metrics::{IndexBlockLabels, IndexCauseLabels, IndexTokenLabels, PolicyLabels};
        let real = dump.map(kvscope_index::parse_dump);
        let m = &self.model;
        for (k, modelled) in m.config().policies.iter().enumerate() {
            let side = kvscope_index::IndexSide(k);
            let report = m.report_of(side);
            let policy = report.policy.to_owned();
            for s in &report.sources {
                let c = &s.counts;
                for (tier, t) in &c.tiers {
                    for (side, n) in [("engine", t.engine_blocks), ("router", t.router_blocks), ("both", t.both)] {
                        let l =
                            IndexBlockLabels { source: s.key.clone(), policy: policy.clone(), tier: (*tier).to_owned(), side: side.into() };
                        metrics.index_blocks.get_or_create(&l).set(n as i64);
                    }
                }
                // Causes that went to zero keep their last value unless set again: set every
                // cause the source ever had.
                for (family, causes) in [(&metrics.index_missing, &c.blocks.engine_only), (&metrics.index_stale, &c.blocks.router_only)] {
                    for (cause, n) in causes {
                        family
                            .get_or_create(&IndexCauseLabels { source: s.key.clone(), policy: policy.clone(), cause: cause.clone() })
                            .set(*n as i64);
                    }
                }
                for (kind, n) in [("engine", c.engine_prefix_tokens), ("visible", c.visible_prefix_tokens), ("phantom", c.phantom_tokens)] {
                    let l = IndexTokenLabels { source: s.key.clone(), policy: policy.clone(), kind: kind.into() };
                    metrics.index_prefix_tokens.get_or_create(&l).set(n as i64);
                }
            }
            metrics.index_exits.get_or_create(&PolicyLabels { policy: policy.clone() }).set(report.indexer_exits as i64);
            metrics.index_refused.get_or_create(&PolicyLabels { policy: policy.clone() }).set(report.refused_blocks as i64);
            if *modelled == Policy::DYNAMO_1_6_1
                && let Some(Ok(parts)) = &real
            {
                let sets = kvscope_index::dump_block_sets(parts);
                let (differences, _) = m.differences(side, &sets, 0);
                metrics.router_index_differences.get_or_create(&PolicyLabels { policy: modelled.name.to_owned() }).set(differences as i64);
                let real_report = m.report_for(side, &sets, &kvscope_index::DynamoIndex::from_dump(parts));
                for s in &real_report.sources {
                    for (tier, t) in &s.counts.tiers {
                        let l = IndexBlockLabels {
                            source: s.key.clone(),
                            policy: "real".into(),
                            tier: (*tier).to_owned(),
                            side: "router".into(),
                        };
                        metrics.router_index_real_blocks.get_or_create(&l).set(t.router_blocks as i64);
                    }
                }
            }
        }
        if let Some(Err(e)) = real {
            tracing::warn!("router index: the last /dump did not parse: {e}");
        }
    }
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
        let delta = self.bump((String::new(), "other_shard".to_owned()), report.other_shard_events);
        metrics.router_other_shard_events.inc_by(delta);
        let shared: usize = report.shared_keys.iter().map(|k| k.sources.len()).sum();
        metrics.router_shared_key_sources.set(shared as i64);
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

    fn engine(source: usize, seq: u64, bytes: usize) -> Input {
        Input::Engine { source, seq, payload: Bytes::from(vec![0u8; bytes]), replayed: false, decoded: None }
    }

    /// A batch the full queue drops is noted, and the task hands the note to the index model
    /// when it meets the source's next batch, not before the batches queued ahead of it.
    #[test]
    fn a_batch_the_queue_drops_is_noted_for_its_source_s_next_batch() {
        let (tx, mut rx) = mpsc::channel(8);
        let queued = Arc::new(Queued { bytes: AtomicUsize::new(0), max_bytes: 150, reached: AtomicBool::new(false) });
        let unseen = Arc::new(Unseen::default());
        let metrics = Arc::new(Metrics::new());
        let tap = Tap { tx, queued: queued.clone(), unseen: unseen.clone(), metrics: metrics.clone() };
        tap.send(engine(0, 0, 100));
        tap.send(engine(0, 1, 100)); // 200 bytes > 150: dropped
        tap.send(engine(1, 0, 10));
        assert_eq!(metrics.router_dropped_inputs.get(), 1);
        let seqs = |rx: &mut mpsc::Receiver<Input>| match rx.try_recv() {
            Ok(Input::Engine { source, seq, .. }) => (source, seq),
            other => panic!("an engine batch, not {other:?}"),
        };
        assert_eq!(seqs(&mut rx), (0, 0));
        assert_eq!(unseen.take_before(0, 0), vec![], "batch 1 was dropped after batch 0");
        assert_eq!(seqs(&mut rx), (1, 0));
        assert_eq!(unseen.take_before(1, 0), vec![], "another source's drop");
        queued.bytes.fetch_sub(110, Ordering::Relaxed);
        tap.send(engine(0, 2, 100));
        assert_eq!(seqs(&mut rx), (0, 2));
        assert_eq!(unseen.take_before(0, 2), vec![(1, false)]);
        assert_eq!(unseen.take_before(0, 3), vec![], "a note is handed on once");
        assert_eq!(unseen.noted.load(Ordering::Relaxed), 0);
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
