//! Dynamo 1.6.1's discovery records, read into the sources kvscope subscribes to.
//!
//! A relay (`KvEventPublisher`) registers two records under one id: an `EventChannel`
//! (`instance_id`, and where it publishes: a ZMQ endpoint or a NATS subject) and an `EventSource`
//! (`publisher_id`, and the engine it relays for: `metadata.worker.{worker_id, dp_rank}`). Model
//! cards (`v1/mdc/…`) give a model's KV block size. A standalone indexer's `GET /workers` lists
//! the raw engine endpoints it reads, per worker and rank.
//!
//! Everything here is pure: the backends hand over `(key, bytes)` pairs or a body, and get
//! back a [`Fleet`] and the records they could not read, each with its key and why.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Where a fleet member is filed: Dynamo's router files events under `(worker_id, dp_rank)`,
/// which survives a restart (the registration id does not).
pub type WorkerRank = (u64, u32);

/// One relay, joined from its event channel and its event source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    pub worker_id: u64,
    pub dp_rank: u32,
    /// The registration id (`instance_id` = `publisher_id`); new on every restart.
    pub instance_id: u64,
    pub transport: Transport,
    /// `namespace/component/endpoint` of the endpoint it serves: the model it belongs to.
    pub model: String,
}

/// Where a relay publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Dynamo's ZMQ event plane: a PUB at `tcp://HOST:PORT`.
    Zmq { endpoint: String },
    /// Dynamo's NATS event plane: core NATS under this subject.
    Nats { subject: String },
}

/// One engine endpoint (`dynamo-indexer:`): a worker's rank publishing raw engine events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineEndpoint {
    pub worker_id: u64,
    pub dp_rank: u32,
    /// `tcp://HOST:PORT`.
    pub endpoint: String,
    pub block_size: Option<u32>,
    pub model: String,
}

/// What a discovery store holds now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    pub relays: BTreeMap<WorkerRank, Relay>,
    pub engines: BTreeMap<WorkerRank, EngineEndpoint>,
    /// KV block size per model (`namespace/component/endpoint`), from model cards.
    pub block_sizes: BTreeMap<String, u32>,
}

impl Fleet {
    /// Adds what another backend found; a key both hold keeps the first one's.
    pub fn merge(&mut self, other: Fleet) {
        for (k, v) in other.relays {
            self.relays.entry(k).or_insert(v);
        }
        for (k, v) in other.engines {
            self.engines.entry(k).or_insert(v);
        }
        for (k, v) in other.block_sizes {
            self.block_sizes.entry(k).or_insert(v);
        }
    }

    /// The block size of `model`, if its card said.
    pub fn block_size(&self, model: &str) -> Option<u32> {
        self.block_sizes.get(model).copied()
    }
}

/// A record that could not be read: which, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// The key prefixes a Dynamo discovery store files these records under.
pub const EVENT_CHANNELS: &str = "v1/event_channels/";
pub const EVENT_SOURCES: &str = "v1/event_sources/";
pub const MODEL_CARDS: &str = "v1/mdc/";
/// Every prefix kvscope reads.
pub const PREFIXES: [&str; 3] = [EVENT_CHANNELS, EVENT_SOURCES, MODEL_CARDS];

/// The topic of KV events in both event records; other topics are not kvscope's.
const KV_EVENTS: &str = "kv-events";

#[derive(Deserialize)]
struct Scope {
    endpoint: Option<EndpointId>,
}

#[derive(Deserialize)]
struct EndpointId {
    namespace: String,
    component: String,
    name: String,
}

impl EndpointId {
    fn model(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.component, self.name)
    }
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Record {
    EventChannel { scope: Scope, topic: String, instance_id: u64, transport: TransportRecord },
    EventSource { scope: Scope, topic: String, publisher_id: u64, metadata: SourceMetadata },
}

#[derive(Deserialize)]
#[serde(tag = "kind", content = "config")]
enum TransportRecord {
    Zmq { endpoint: String },
    Nats(serde_json::Value),
}

#[derive(Deserialize)]
struct SourceMetadata {
    worker: WorkerRecord,
}

#[derive(Deserialize)]
struct WorkerRecord {
    worker_id: u64,
    #[serde(default)]
    dp_rank: u32,
}

/// The parts of a model card kvscope uses.
#[derive(Deserialize)]
struct ModelCardRecord {
    #[serde(default)]
    card_json: Option<CardJson>,
    #[serde(default)]
    kv_cache_block_size: Option<u32>,
}

#[derive(Deserialize)]
struct CardJson {
    kv_cache_block_size: Option<u32>,
}

/// Reads the records of a store, `(key, value)` in any order, into a fleet. A relay needs both
/// records; one alone is not an error (the other may be a moment away).
pub fn read_store<'a>(records: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> (Fleet, Vec<RecordError>) {
    let mut channels: BTreeMap<u64, (Transport, String)> = BTreeMap::new();
    let mut sources: BTreeMap<u64, (WorkerRank, String)> = BTreeMap::new();
    let mut fleet = Fleet::default();
    let mut errors = Vec::new();
    for (key, value) in records {
        let fail = |reason: String| RecordError { key: key.to_owned(), reason };
        if let Some(rest) = key.strip_prefix(MODEL_CARDS) {
            match serde_json::from_slice::<ModelCardRecord>(value) {
                Ok(card) => {
                    let size = card.card_json.and_then(|c| c.kv_cache_block_size).or(card.kv_cache_block_size);
                    // `v1/mdc/{ns}/{component}/{endpoint}/{instance:x}`: the model is the first three.
                    let model: Vec<&str> = rest.split('/').take(3).collect();
                    if let (Some(size), 3) = (size, model.len()) {
                        fleet.block_sizes.insert(model.join("/"), size);
                    }
                }
                Err(e) => errors.push(fail(format!("not a model card Dynamo 1.6.1 writes: {e}"))),
            }
            continue;
        }
        if !key.starts_with(EVENT_CHANNELS) && !key.starts_with(EVENT_SOURCES) {
            continue;
        }
        match serde_json::from_slice::<Record>(value) {
            Ok(Record::EventChannel { topic, .. } | Record::EventSource { topic, .. }) if topic != KV_EVENTS => {}
            Ok(Record::EventChannel { scope, instance_id, transport, .. }) => {
                let transport = match transport {
                    TransportRecord::Zmq { endpoint } => Transport::Zmq { endpoint },
                    TransportRecord::Nats(config) => Transport::Nats { subject: nats_subject(&config) },
                };
                channels.insert(instance_id, (transport, model_of(&scope)));
            }
            Ok(Record::EventSource { scope, publisher_id, metadata, .. }) => {
                sources.insert(publisher_id, ((metadata.worker.worker_id, metadata.worker.dp_rank), model_of(&scope)));
            }
            Err(e) => errors.push(fail(format!("not an event channel or event source Dynamo 1.6.1 writes: {e}"))),
        }
    }
    for (id, ((worker_id, dp_rank), model)) in sources {
        let Some((transport, _)) = channels.remove(&id) else { continue };
        let relay = Relay { worker_id, dp_rank, instance_id: id, transport, model };
        // Two registrations for one rank: a restart while the old registration has not expired.
        // Ids do not order by time; the supervisor keeps reading the one it reads until that
        // one is gone.
        fleet.relays.entry((worker_id, dp_rank)).or_insert(relay);
    }
    (fleet, errors)
}

fn model_of(scope: &Scope) -> String {
    scope.endpoint.as_ref().map(EndpointId::model).unwrap_or_default()
}

/// The subject a NATS event channel publishes on: its `subject_prefix`, a dot, the topic.
fn nats_subject(config: &serde_json::Value) -> String {
    match config.get("subject_prefix").and_then(|v| v.as_str()) {
        Some(prefix) => format!("{prefix}.{KV_EVENTS}"),
        None => config.to_string(),
    }
}

/// One worker as a standalone indexer's `GET /workers` lists it.
#[derive(Deserialize)]
struct IndexerWorker {
    instance_id: u64,
    #[serde(default)]
    model_name: String,
    #[serde(default)]
    block_size: Option<u32>,
    /// dp rank (as a string) -> `tcp://HOST:PORT`.
    #[serde(default)]
    endpoints: BTreeMap<String, String>,
}

/// The engine endpoints in a standalone indexer's `GET /workers` body.
pub fn read_indexer_workers(body: &[u8]) -> Result<Fleet, String> {
    let workers: Vec<IndexerWorker> =
        serde_json::from_slice(body).map_err(|e| format!("not the worker list Dynamo 1.6.1's standalone indexer serves: {e}"))?;
    let mut fleet = Fleet::default();
    for w in workers {
        for (rank, endpoint) in w.endpoints {
            let dp_rank: u32 = rank.parse().map_err(|_| format!("worker {}: dp rank {rank:?} is not a number", w.instance_id))?;
            let engine =
                EngineEndpoint { worker_id: w.instance_id, dp_rank, endpoint, block_size: w.block_size, model: w.model_name.clone() };
            fleet.engines.insert((w.instance_id, dp_rank), engine);
        }
    }
    Ok(fleet)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The records Dynamo 1.6.1's file discovery wrote for a relay on the ZMQ plane
    // (tests/fixtures/dynamo-event-plane/zmq_file_media_loopback_discovery_*.bin).
    const CHANNEL: &[u8] =
        include_bytes!("../../../tests/fixtures/dynamo-event-plane/zmq_file_media_loopback_discovery_event_channels.bin");
    const SOURCE: &[u8] = include_bytes!("../../../tests/fixtures/dynamo-event-plane/zmq_file_media_loopback_discovery_event_sources.bin");

    #[test]
    fn a_relay_is_its_channel_joined_with_its_source() {
        let (fleet, errors) = read_store([
            ("v1/event_channels/namespace/probe/component/backend/endpoint/generate/topic/kv-events/4351d2e6c859d", CHANNEL),
            ("v1/event_sources/namespace/probe/component/backend/endpoint/generate/topic/kv-events/4351d2e6c859d", SOURCE),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let relay = &fleet.relays[&(42, 0)];
        assert_eq!(relay.transport, Transport::Zmq { endpoint: "tcp://127.0.0.1:39579".into() });
        assert_eq!(relay.instance_id, 1184274430117405);
        assert_eq!(relay.model, "probe/backend/generate");
    }

    #[test]
    fn half_a_registration_is_not_a_relay_yet_and_bad_records_name_their_key() {
        let (fleet, errors) =
            read_store([("v1/event_channels/x/1", CHANNEL), ("v1/event_sources/x/2", b"{\"type\":\"Other\"}".as_slice())]);
        assert!(fleet.relays.is_empty());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].key, "v1/event_sources/x/2");
        assert!(errors[0].reason.contains("not an event channel or event source"), "{}", errors[0]);
    }

    #[test]
    fn a_relay_on_nats_names_its_subject() {
        let channel = br#"{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dyn","component":"backend","name":"generate"}},"topic":"kv-events","instance_id":9,"transport":{"kind":"Nats","config":{"subject_prefix":"namespace.dyn.component.backend.endpoint.generate"}}}"#;
        let source = br#"{"type":"EventSource","scope":{"kind":"endpoint"},"topic":"kv-events","publisher_id":9,"metadata":{"worker":{"worker_id":3,"dp_rank":1}}}"#;
        let (fleet, errors) = read_store([("v1/event_channels/a/9", channel.as_slice()), ("v1/event_sources/a/9", source.as_slice())]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            fleet.relays[&(3, 1)].transport,
            Transport::Nats { subject: "namespace.dyn.component.backend.endpoint.generate.kv-events".into() }
        );
    }

    #[test]
    fn model_cards_give_each_model_its_block_size() {
        let card = br#"{"type":"Model","namespace":"dyn","component":"backend","endpoint":"generate","instance_id":6699,"card_json":{"display_name":"m","kv_cache_block_size":32,"runtime_config":{"data_parallel_size":2}}}"#;
        let (fleet, errors) = read_store([("v1/mdc/dyn/backend/generate/1a2b", card.as_slice())]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(fleet.block_size("dyn/backend/generate"), Some(32));
    }

    #[test]
    fn an_indexer_lists_engine_endpoints_per_rank() {
        let body = include_bytes!("../../../tests/fixtures/dynamo-indexer/four.workers.json");
        let fleet = read_indexer_workers(body).unwrap();
        let engine = &fleet.engines[&(7, 0)];
        assert_eq!(engine.endpoint, "tcp://127.0.0.1:42080");
        assert_eq!(engine.block_size, Some(16));
        assert!(read_indexer_workers(b"{}").unwrap_err().contains("standalone indexer"));
    }
}
