//! Dynamo's event plane, written as Dynamo 1.6.1 writes it: `RouterEvent` arrays, envelopes
//! and the ZMQ plane's four frames, for tests and the demo (which acts as a worker's relay).
//!
//! rmp-serde with named fields, in the field order of Dynamo's structs (`worker_id,
//! storage_tier, residency_domain, event {event_id, data, dp_rank}`; `data` externally tagged,
//! `"cleared"` a bare string; a block's `mm_extra_info` always nil), so a decoded fixture
//! message re-encodes to its exact bytes (`tests/router.rs`). The types are kvscope-router's;
//! the mirror structs here fix the layout, so the report's JSON shape can change without
//! changing what goes on the wire.

use kvscope_router::{Envelope, EventData, KV_EVENTS_TOPIC, Prediction, RouterEvent, ZMQ_ENVELOPE_VERSION};
use serde::Serialize;

pub use rmp_serde::encode::Error;

#[derive(Serialize)]
struct Event<'a> {
    worker_id: u64,
    storage_tier: &'a str,
    residency_domain: Option<&'a str>,
    event: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    event_id: u64,
    data: Data<'a>,
    dp_rank: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Data<'a> {
    Stored(Stored),
    Removed(Removed<'a>),
    Cleared,
}

#[derive(Serialize)]
struct Stored {
    parent_hash: Option<u64>,
    start_position: Option<i64>,
    blocks: Vec<Block>,
}

#[derive(Serialize)]
struct Block {
    block_hash: u64,
    tokens_hash: u64,
    mm_extra_info: Option<()>,
}

#[derive(Serialize)]
struct Removed<'a> {
    block_hashes: &'a [u64],
}

/// Writes bytes as a msgpack bin (serde's `serialize_bytes`), as Dynamo's `bytes_serde` does.
struct Bin<'a>(&'a [u8]);

impl Serialize for Bin<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Serialize)]
struct Env<'a> {
    publisher_id: u64,
    sequence: u64,
    published_at: u64,
    topic: &'a str,
    payload: Bin<'a>,
}

fn mirror(e: &RouterEvent) -> Event<'_> {
    let data = match &e.event.data {
        EventData::Stored(s) => Data::Stored(Stored {
            parent_hash: s.parent_hash,
            start_position: s.start_position,
            blocks: s.blocks.iter().map(|b| Block { block_hash: b.block_hash, tokens_hash: b.tokens_hash, mm_extra_info: None }).collect(),
        }),
        EventData::Removed(r) => Data::Removed(Removed { block_hashes: &r.block_hashes }),
        EventData::Cleared => Data::Cleared,
    };
    Event {
        worker_id: e.worker_id,
        storage_tier: e.storage_tier.as_str(),
        residency_domain: e.residency_domain.as_deref(),
        event: Inner { event_id: e.event.event_id, data, dp_rank: e.event.dp_rank },
    }
}

/// An envelope's payload: the RouterEvent array.
pub fn encode_router_events(events: &[RouterEvent]) -> Result<Vec<u8>, Error> {
    let mirrored: Vec<Event<'_>> = events.iter().map(mirror).collect();
    rmp_serde::to_vec_named(&mirrored)
}

/// An envelope in Dynamo 1.6.1's msgpack form (its `form` is not looked at).
pub fn encode_envelope(env: &Envelope) -> Result<Vec<u8>, Error> {
    rmp_serde::to_vec_named(&Env {
        publisher_id: env.publisher_id,
        sequence: env.sequence,
        published_at: env.published_at,
        topic: &env.topic,
        payload: Bin(&env.payload),
    })
}

/// An envelope in older Dynamo's JSON form (`payload` an array of byte values).
pub fn encode_envelope_json(env: &Envelope) -> Vec<u8> {
    let payload: Vec<String> = env.payload.iter().map(u8::to_string).collect();
    // Field order of the older struct (topic first); only the topic needs escaping.
    format!(
        "{{\"topic\":{},\"publisher_id\":{},\"sequence\":{},\"published_at\":{},\"payload\":[{}]}}",
        json_string(&env.topic),
        env.publisher_id,
        env.sequence,
        env.published_at,
        payload.join(",")
    )
    .into_bytes()
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The ZMQ plane's four frames for an envelope: topic, publisher id (u64 BE), sequence (u64
/// BE), then version byte 0x01, the envelope's length (u32 BE) and the envelope.
pub fn zmq_plane_frames(env: &Envelope) -> Result<[Vec<u8>; 4], Error> {
    let envelope = encode_envelope(env)?;
    let len = u32::try_from(envelope.len()).map_err(|_| Error::Syntax("envelope longer than u32::MAX bytes".to_owned()))?;
    let mut last = Vec::with_capacity(5 + envelope.len());
    last.push(ZMQ_ENVELOPE_VERSION);
    last.extend_from_slice(&len.to_be_bytes());
    last.extend_from_slice(&envelope);
    Ok([env.topic.as_bytes().to_vec(), env.publisher_id.to_be_bytes().to_vec(), env.sequence.to_be_bytes().to_vec(), last])
}

/// What a relay publishes for one predicted engine batch: the envelope of the RouterEvents it
/// keeps, or `None` when it keeps none (Dynamo sends no message then).
pub fn relay_envelope(publisher_id: u64, sequence: u64, published_at: u64, predictions: &[Prediction]) -> Result<Option<Envelope>, Error> {
    let events: Vec<RouterEvent> = predictions.iter().filter_map(|p| p.router_event().cloned()).collect();
    if events.is_empty() {
        return Ok(None);
    }
    Ok(Some(Envelope {
        publisher_id,
        sequence,
        published_at,
        topic: KV_EVENTS_TOPIC.to_owned(),
        payload: encode_router_events(&events)?,
        form: kvscope_router::EnvelopeForm::Msgpack,
    }))
}
