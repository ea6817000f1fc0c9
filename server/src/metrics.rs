//! `/metrics`: Prometheus families, built with `prometheus-client` (no global registry, no
//! hand-formatted text).
//!
//! The intake caches its per-source counter handles ([`SourceMetrics`]) so that the hot path
//! does one atomic add per counter, not a label lookup. The relay updates the client gauges;
//! `http` renders the registry.

use std::fmt::Write as _;
use std::sync::Mutex;

use kvscope_normalize::VerdictLabel;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub source: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub source: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub source: String,
    pub policy: String,
    /// `device`, `host_pinned`, `disk`, `external`, or `none` (events with no tier).
    pub tier: String,
    /// The verdict label (`store`, `offload_block_size_mismatch`, ...), spelled by
    /// [`VerdictLabel::as_str`].
    pub verdict: LabelValue,
}

/// A [`VerdictLabel`] as a Prometheus label value. A newtype because both the trait and the
/// enum live in other crates.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct LabelValue(pub VerdictLabel);

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

/// Every family the server exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    pub frames: Family<SourceLabels, Counter>,
    pub payload_bytes: Family<SourceLabels, Counter>,
    pub replayed_frames: Family<SourceLabels, Counter>,
    pub events: Family<EventLabels, Counter>,
    pub verdicts: Family<VerdictLabels, Counter>,
    pub frame_errors: Family<KindLabels, Counter>,
    pub decode_errors: Family<KindLabels, Counter>,
    pub gaps: Family<SourceLabels, Counter>,
    pub lost_frames: Family<SourceLabels, Counter>,
    pub restarts: Family<SourceLabels, Counter>,
    pub reconnects: Family<SourceLabels, Counter>,
    pub connected: Family<SourceLabels, Gauge>,
    pub clients: Gauge,
    pub clients_total: Counter,
    pub lagged_frames: Counter,
    pub lag_notices: Counter,
    pub client_queued_bytes: Gauge,
    pub client_ws_messages: Counter,
    pub client_protocol_messages: Counter,
    /// Bytes copied into live batches: once per batch, whatever the number of clients.
    pub ws_live_bytes_copied: Counter,
    /// Bytes copied into history batches: per newcomer.
    pub ws_history_bytes_copied: Counter,
    /// Bytes copied into a client's socket buffer: messages under `ws::WRITE_SHARED_FROM`, per
    /// client (larger ones are written from the shared bytes).
    pub ws_socket_bytes_copied: Counter,
    pub history_bytes: Gauge,
    pub history_frames: Gauge,
    pub history_evicted_frames: Counter,
    pub ws_rejected: Family<KindLabels, Counter>,
    pub http_rejected: Family<KindLabels, Counter>,
    pub recording: Family<StateLabels, Gauge>,
    pub recording_records: Gauge,
    pub recording_dropped_records: Gauge,
    pub router_events: Family<RouterCountLabels, Counter>,
    pub router_dropped: Family<RouterDroppedLabels, Counter>,
    pub router_unknown_worker_events: Counter,
    pub router_dropped_inputs: Counter,
    pub index_blocks: Family<IndexBlockLabels, Gauge>,
    pub index_missing: Family<IndexCauseLabels, Gauge>,
    pub index_stale: Family<IndexCauseLabels, Gauge>,
    pub index_prefix_tokens: Family<IndexTokenLabels, Gauge>,
    pub index_exits: Family<PolicyLabels, Gauge>,
    pub index_refused: Family<PolicyLabels, Gauge>,
    pub router_index_polls: Family<PollLabels, Counter>,
    pub router_index_bytes: Family<UrlLabels, Counter>,
    pub router_index_real_blocks: Family<IndexBlockLabels, Gauge>,
    pub router_index_differences: Family<PolicyLabels, Gauge>,
    /// `--discover`: per backend, whether its last read succeeded, its failed reads, and the
    /// records its last read could not use.
    pub discovery_up: Family<UrlLabels, Gauge>,
    pub discovery_failures: Family<UrlLabels, Gauge>,
    pub discovery_bad_records: Family<UrlLabels, Gauge>,
    /// Sources found through discovery, and those of them that left.
    pub discovered_sources: Gauge,
    pub discovered_left: Gauge,
    /// RouterEvents of workers another shard reads (`--shard`).
    pub router_other_shard_events: Counter,
    /// Engine sources the router files under a key it shares with another engine source.
    pub router_shared_key_sources: Gauge,
}

/// `kvscope_index_blocks{source, policy, tier, side="engine|router|both"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IndexBlockLabels {
    pub source: String,
    pub policy: String,
    pub tier: String,
    pub side: String,
}

/// `kvscope_index_engine_only_blocks{source, policy, cause}` and `..._router_only_blocks`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IndexCauseLabels {
    pub source: String,
    pub policy: String,
    pub cause: String,
}

/// `kvscope_index_prefix_tokens{source, policy, kind="engine|visible|phantom"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IndexTokenLabels {
    pub source: String,
    pub policy: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// `kvscope_router_index_polls_total{url, what="workers|dump", result="ok|error kind"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PollLabels {
    pub url: String,
    pub what: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UrlLabels {
    pub url: String,
}

/// `kvscope_router_events_total{source="worker:rank", count="expected|received|..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouterCountLabels {
    pub source: String,
    pub count: String,
}

/// `kvscope_router_dropped_total{source, label}`: engine events the relay drops by policy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouterDroppedLabels {
    pub source: String,
    pub label: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Shows a recording's status.
    pub fn recording_status(&self, status: &kvscope_protocol::RecordingStatus) {
        use kvscope_protocol::RecordingState as S;
        for (state, name) in [(S::Recording, "recording"), (S::Failed, "failed"), (S::Finished, "finished")] {
            self.recording.get_or_create(&StateLabels { state: name.to_owned() }).set((status.state == state) as i64);
        }
        self.recording_records.set(status.records as i64);
        self.recording_dropped_records.set(status.dropped_records as i64);
    }

    pub fn new() -> Self {
        let m = Metrics {
            registry: Mutex::new(Registry::with_prefix("kvscope")),
            frames: Family::default(),
            payload_bytes: Family::default(),
            replayed_frames: Family::default(),
            events: Family::default(),
            verdicts: Family::default(),
            frame_errors: Family::default(),
            decode_errors: Family::default(),
            gaps: Family::default(),
            lost_frames: Family::default(),
            restarts: Family::default(),
            reconnects: Family::default(),
            connected: Family::default(),
            clients: Gauge::default(),
            clients_total: Counter::default(),
            lagged_frames: Counter::default(),
            lag_notices: Counter::default(),
            client_queued_bytes: Gauge::default(),
            client_ws_messages: Counter::default(),
            client_protocol_messages: Counter::default(),
            ws_live_bytes_copied: Counter::default(),
            ws_history_bytes_copied: Counter::default(),
            ws_socket_bytes_copied: Counter::default(),
            history_bytes: Gauge::default(),
            history_frames: Gauge::default(),
            history_evicted_frames: Counter::default(),
            ws_rejected: Family::default(),
            http_rejected: Family::default(),
            recording: Family::default(),
            recording_records: Gauge::default(),
            recording_dropped_records: Gauge::default(),
            router_events: Family::default(),
            router_dropped: Family::default(),
            router_unknown_worker_events: Counter::default(),
            router_dropped_inputs: Counter::default(),
            index_blocks: Family::default(),
            index_missing: Family::default(),
            index_stale: Family::default(),
            index_prefix_tokens: Family::default(),
            index_exits: Family::default(),
            index_refused: Family::default(),
            router_index_polls: Family::default(),
            router_index_bytes: Family::default(),
            router_index_real_blocks: Family::default(),
            router_index_differences: Family::default(),
            discovery_up: Family::default(),
            discovery_failures: Family::default(),
            discovery_bad_records: Family::default(),
            discovered_sources: Gauge::default(),
            discovered_left: Gauge::default(),
            router_other_shard_events: Counter::default(),
            router_shared_key_sources: Gauge::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            m.register_relay(&mut r);
            m.register_router(&mut r);
        }
        m
    }

    /// The relay's own series: sources, clients, history, recording.
    fn register_relay(&self, r: &mut Registry) {
        let m = self;
        r.register("frames", "Engine frames relayed, live and replayed", m.frames.clone());
        r.register("payload_bytes", "Engine payload bytes relayed", m.payload_bytes.clone());
        r.register("replayed_frames", "Frames recovered from an engine's replay socket", m.replayed_frames.clone());
        r.register("events", "Decoded KV events by type", m.events.clone());
        r.register("verdicts", "Normalizer verdicts (one per event) by policy, storage tier and verdict label", m.verdicts.clone());
        r.register("frame_errors", "Messages with a wrong frame count or sequence-number size", m.frame_errors.clone());
        r.register("decode_errors", "Payloads that did not decode, by error group", m.decode_errors.clone());
        r.register("gaps", "Jumps forward in an engine's sequence numbers", m.gaps.clone());
        r.register("lost_frames", "Frames missing in gaps that replay did not recover", m.lost_frames.clone());
        r.register("restarts", "Engine restarts (sequence number went back)", m.restarts.clone());
        r.register("reconnects", "Connections re-established after being up", m.reconnects.clone());
        r.register("source_connected", "1 while the source's socket is connected", m.connected.clone());
        r.register("clients", "WebSocket clients connected now", m.clients.clone());
        r.register("clients_accepted", "WebSocket clients accepted since start", m.clients_total.clone());
        r.register("client_lagged_frames", "Frames lost by slow WebSocket clients", m.lagged_frames.clone());
        r.register("client_lag_notices", "Lag notices sent to slow WebSocket clients", m.lag_notices.clone());
        r.register("client_queued_bytes", "Bytes waiting in all WebSocket client queues", m.client_queued_bytes.clone());
        r.register(
            "client_ws_messages",
            "WebSocket messages sent to clients (a batch counts once; a browser pays per message)",
            m.client_ws_messages.clone(),
        );
        r.register(
            "client_protocol_messages",
            "Protocol messages sent to clients (frames, statuses, notices), alone or in a batch",
            m.client_protocol_messages.clone(),
        );
        r.register(
            "ws_live_bytes_copied",
            "Bytes copied into live batch messages, once per batch: every client is sent the same bytes",
            m.ws_live_bytes_copied.clone(),
        );
        r.register(
            "ws_history_bytes_copied",
            "Bytes copied into the history batches each newcomer is sent",
            m.ws_history_bytes_copied.clone(),
        );
        r.register(
            "ws_socket_bytes_copied",
            "Bytes copied into a client's socket buffer, per client: messages under 8 KiB; larger ones go out from the shared bytes",
            m.ws_socket_bytes_copied.clone(),
        );
        r.register("history_bytes", "Bytes held by the history ring", m.history_bytes.clone());
        r.register("history_frames", "Frames held by the history ring", m.history_frames.clone());
        r.register("history_evicted_frames", "Frames evicted from the history ring", m.history_evicted_frames.clone());
        r.register("ws_rejected", "WebSocket upgrades refused, by reason", m.ws_rejected.clone());
        r.register(
            "http_rejected",
            "Requests refused on any route because their Host is not a loopback name or an allowed origin",
            m.http_rejected.clone(),
        );
        r.register(
            "recording",
            "1 for the capture's current state (recording, failed, finished); absent without --record",
            m.recording.clone(),
        );
        r.register("recording_records", "Complete records in the capture file", m.recording_records.clone());
        r.register(
            "recording_dropped_records",
            "Records not in the capture because writing had stopped (see the failed state's log line)",
            m.recording_dropped_records.clone(),
        );
    }

    /// The router's side: the reconciliation with the event plane and the router's index.
    fn register_router(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "router_events",
            "Reconciliation with Dynamo's event plane per engine source (worker:rank): RouterEvents its relay should \
                 have published (expected), that arrived (received), matched, missing, unexpected, mismatched",
            m.router_events.clone(),
        );
        r.register(
            "router_dropped",
            "Engine events the relay publishes nothing for under the relay policy, by the rule's label",
            m.router_dropped.clone(),
        );
        r.register(
            "router_unknown_worker_events",
            "RouterEvents on the event plane for a (worker_id, dp_rank) no engine source has",
            m.router_unknown_worker_events.clone(),
        );
        r.register(
            "router_dropped_inputs",
            "Engine batches and envelopes the router task (index model, reconciler) had no room for: its queue held --router-queue-bytes (its figures then undercount)",
            m.router_dropped_inputs.clone(),
        );
        r.register(
            "index_blocks",
            "The router's index (Dynamo 1.6.1's, modelled under a policy) against the engine, per source and tier: \
                 blocks the engine holds, blocks the index holds, blocks both hold",
            m.index_blocks.clone(),
        );
        r.register(
            "index_engine_only_blocks",
            "Blocks the engine holds that the router's index lacks (it cannot score them), by cause",
            m.index_missing.clone(),
        );
        r.register(
            "index_router_only_blocks",
            "Blocks the router's index holds that the engine evicted (phantom hits), by cause",
            m.index_stale.clone(),
        );
        r.register(
            "index_prefix_tokens",
            "Device-tier prefix tokens: cached by the engine, visible to the router's find_matches, phantom",
            m.index_prefix_tokens.clone(),
        );
        r.register(
            "index_indexer_exits",
            "Times the modelled indexer exited on a fatal verdict and restarted empty",
            m.index_exits.clone(),
        );
        r.register(
            "index_refused",
            "Stores the modelled index did not model, and engine blocks it did not keep, past its bound (--index-max-nodes)",
            m.index_refused.clone(),
        );
        r.register(
            "router_index_polls",
            "Reads of a real index (--router-index): /workers and /dump, by result (ok, or why not)",
            m.router_index_polls.clone(),
        );
        r.register(
            "discovery_up",
            "1 when the last read of a --discover backend succeeded, 0 while it fails (retried with backoff)",
            m.discovery_up.clone(),
        );
        r.register(
            "discovery_failures",
            "Reads of a --discover backend that failed since the start (a gauge of a running total)",
            m.discovery_failures.clone(),
        );
        r.register(
            "discovery_bad_records",
            "Records the last read of a --discover backend could not use (the log names each key)",
            m.discovery_bad_records.clone(),
        );
        r.register(
            "router_other_shard_events",
            "RouterEvents on the event plane for workers another kvscope shard reads (--shard); not unknown workers",
            m.router_other_shard_events.clone(),
        );
        r.register(
            "router_shared_key_sources",
            "Engine sources the router files under one (worker_id, dp_rank) with another (DP ranks whose batches name no rank all land on rank 0)",
            m.router_shared_key_sources.clone(),
        );
        r.register("discovered_sources", "Sources found through --discover, live or left", m.discovered_sources.clone());
        r.register(
            "discovered_left",
            "Sources found through --discover whose registration expired (kept with their history)",
            m.discovered_left.clone(),
        );
        r.register("router_index_bytes", "Bytes read from a real index's /workers and /dump", m.router_index_bytes.clone());
        r.register(
            "router_index_real_blocks",
            "Blocks the real index (--router-index, its last /dump) holds per source and tier",
            m.router_index_real_blocks.clone(),
        );
        r.register(
            "router_index_differences",
            "Blocks on which the real index's last /dump and the model of Dynamo 1.6.1's index disagree",
            m.router_index_differences.clone(),
        );
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // fmt::Write for String never fails; an error could only come from an encoder, and would
        // leave a truncated exposition that Prometheus rejects, naming the line.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::error!("rendering /metrics failed: {e}");
        }
        out
    }

    /// Counter handles for one source, looked up once.
    pub fn source(self: &std::sync::Arc<Self>, key: &str) -> SourceMetrics {
        let l = SourceLabels { source: key.to_owned() };
        SourceMetrics {
            key: key.to_owned(),
            frames: self.frames.get_or_create(&l).clone(),
            payload_bytes: self.payload_bytes.get_or_create(&l).clone(),
            replayed_frames: self.replayed_frames.get_or_create(&l).clone(),
            gaps: self.gaps.get_or_create(&l).clone(),
            lost_frames: self.lost_frames.get_or_create(&l).clone(),
            restarts: self.restarts.get_or_create(&l).clone(),
            reconnects: self.reconnects.get_or_create(&l).clone(),
            connected: self.connected.get_or_create(&l).clone(),
            events: std::array::from_fn(|i| {
                self.events.get_or_create(&EventLabels { source: key.to_owned(), r#type: EVENT_TYPES[i].to_owned() }).clone()
            }),
            all: self.clone(),
        }
    }
}

/// Event type labels, in [`kvscope_wire::EventType::ALL`] order.
pub const EVENT_TYPES: [&str; 4] = ["BlockStored", "BlockRemoved", "AllBlocksCleared", "unknown"];

/// One source's counter handles.
#[derive(Clone, Debug)]
pub struct SourceMetrics {
    pub key: String,
    pub frames: Counter,
    pub payload_bytes: Counter,
    pub replayed_frames: Counter,
    pub gaps: Counter,
    pub lost_frames: Counter,
    pub restarts: Counter,
    pub reconnects: Counter,
    pub connected: Gauge,
    pub events: [Counter; 4],
    /// For the rare families labelled by kind (frame and decode errors).
    pub all: std::sync::Arc<Metrics>,
}

impl SourceMetrics {
    pub fn frame_error(&self, kind: &str) {
        self.all.frame_errors.get_or_create(&KindLabels { source: self.key.clone(), kind: kind.to_owned() }).inc();
    }

    pub fn decode_error(&self, kind: &str) {
        self.all.decode_errors.get_or_create(&KindLabels { source: self.key.clone(), kind: kind.to_owned() }).inc();
    }
}

/// The content type `prometheus-client`'s text encoder produces.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `Content-Type` of [`to_text_format`]'s output.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scraper's `Accept` header asks for OpenMetrics (Prometheus does; curl does not).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The same families in the Prometheus text format (0.0.4), for clients that did not ask for
/// OpenMetrics (`curl .../metrics | promtool check metrics`, older scrapers): a counter family's
/// HELP and TYPE name its `_total` series, and OpenMetrics' `# UNIT` and `# EOF` lines go.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len() + counters.len() * 16);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}
