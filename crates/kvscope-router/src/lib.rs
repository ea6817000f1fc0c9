//! Reads Dynamo's event plane (envelopes, RouterEvents) and reconciles what a KV router received
//! with what its relay should have published from the engine streams.
//!
//! In a Dynamo deployment the router never reads engine bytes: each worker's relay subscribes
//! to the engine's ZMQ stream, runs Dynamo's normalizer and republishes `RouterEvent`s on NATS
//! core or Dynamo's ZMQ plane. This crate lets kvscope check that relay from outside:
//!
//! - [`plane`]: the envelope ([`decode_envelope`], msgpack or older Dynamo's JSON) and the ZMQ
//!   plane's four frames ([`split_zmq_plane`]);
//! - [`event`]: the `RouterEvent` array inside an envelope ([`decode_router_events`]);
//! - [`predict`]: what the relay publishes for an engine batch under a kvscope-normalize
//!   [`kvscope_normalize::Policy`] ([`Predictor`], one per source), through the relay's
//!   publisher stage ([`outbox`]) or as the standalone indexer's listener applies it ([`Feed`]);
//! - [`reconcile`]: predictions against receptions, per `(worker_id, dp_rank)`, with bounded
//!   queues and serializable counts ([`Reconciler`], [`RouterReport`], [`RouterCounts`]).
//!
//! What it is not: a normalizer (the verdicts are kvscope-normalize's, never re-decided here),
//! a NATS or ZMQ client (it does no I/O: callers hand it message bodies and frames; it compiles
//! for `wasm32-unknown-unknown`), or an encoder (`kvscope-encode`'s `router` module writes
//! these messages for tests and the demo). Decode errors are kvscope-wire's, with byte offset
//! and path, and no input panics.

pub mod error;
pub mod event;
pub mod outbox;
pub mod plane;
pub mod predict;
pub mod reconcile;
pub mod shard;

pub use error::{PlaneError, ZmqFrameError};
pub use event::{
    EventData, KvCacheEvent, PlaneTier, RESIDENCY_WORKER, RemovedData, RouterEvent, StoredBlock, StoredData, decode_router_events,
    residency_domain,
};
pub use plane::{Envelope, EnvelopeForm, KV_EVENTS_TOPIC, ZMQ_ENVELOPE_VERSION, ZmqPlaneMessage, decode_envelope, split_zmq_plane};
pub use predict::{
    BatchPredicted, EngineEventRef, Feed, PredictPass, Predicted, Prediction, Predictor, RelayConfig, RelayMark, TokensHashes, predict,
    tokens_hash, tokens_hash_seed,
};
pub use reconcile::{
    Difference, DifferenceKind, MismatchCounts, MismatchField, PlaneEventRef, PublisherCounts, Reconciler, ReconcilerConfig, RouterCounts,
    RouterReport, RouterSourceId, SharedKey, SourceReport, UnknownWorker, differing_fields, subscribed_late,
};
pub use shard::Shard;
