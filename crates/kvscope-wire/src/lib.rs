//! Turns engine KV-event bytes (ZMQ frames, msgpack batches of every vLLM and SGLang release)
//! into typed events, and nothing more.
//!
//! What this crate is not: it knows nothing of storage tiers, group filters or block sizes.
//! Those decisions belong to `kvscope-normalize`, which reads the [`KvEvent`]s made here.
//! It does no I/O either: callers hand it the frames a ZMQ socket produced.
//!
//! - [`frame`] splits a live message (`[topic, seq, payload]`) and a replay reply.
//! - [`decode_batch`] decodes a payload: tagged arrays (vLLM up to 0.23) and tagged maps
//!   (vLLM 0.24 on, SGLang), 2- and 3-element batches and map-shaped batches.
//! - [`decode_each`] decodes the same payloads but hands the events to an [`EventSink`] one at
//!   a time, in memory that does not grow with the batch.
//! - [`msgpack`] lends the same reader (bounds checks, positioned errors) to other msgpack
//!   formats kvscope reads: Dynamo's event plane, in `kvscope-router`.
//! - Every malformed input yields a [`DecodeError`] naming the byte offset, what was expected
//!   and where in the batch (`events[3].block_hashes[0]`); nothing panics.

mod cursor;
mod decode;
mod error;
mod event;
pub mod frame;
mod hashes;
pub mod msgpack;
mod skip;
mod stream;

pub use decode::{DecodeOptions, decode_batch};
pub use error::{DecodeError, DecodeErrorKind, FrameError};
pub use event::{
    BatchHeader, BatchLayout, BlockHash, BlockRemoved, BlockStored, EventBatch, EventEncoding, EventType, HashReprs, Hashes, KvEvent,
    TokenIds, UnknownEvent, WireStr,
};
pub use frame::{LiveMessage, ReplayReply};
pub use skip::{TokenBytes, skip_value};
pub use stream::{Decoded, EventSink, STREAM_CHUNK, decode_each};
