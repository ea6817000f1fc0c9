//! The event plane's framing: the envelope every message is wrapped in, and the ZMQ plane's
//! four frames around it.
//!
//! Both planes carry the same envelope, a msgpack map `{publisher_id, sequence, published_at,
//! topic, payload}` (Dynamo 1.6.1). Older Dynamo serialized it as JSON with `payload` an array
//! of byte values (serde_json's form of `serialize_bytes`); [`decode_envelope`] tells the two
//! apart by the first byte (`{` is a positive fixint in msgpack, never a map) and reads both.
//! On NATS the envelope is the message body; Dynamo's ZMQ plane sends
//! `[topic, publisher id (u64 BE), sequence (u64 BE), 0x01 + u32 BE length + envelope]`
//! ([`split_zmq_plane`]).

use kvscope_wire::msgpack::{Reader, Seg, missing};
use serde::Serialize;

use crate::error::{PlaneError, ZmqFrameError};

/// The topic Dynamo publishes KV events under.
pub const KV_EVENTS_TOPIC: &str = "kv-events";

/// The version byte of the ZMQ plane's envelope frame this build reads.
pub const ZMQ_ENVELOPE_VERSION: u8 = 0x01;

/// How an envelope was encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvelopeForm {
    /// Dynamo 1.6.1: a msgpack map.
    Msgpack,
    /// Older Dynamo: a JSON object.
    Json,
}

/// One event-plane message's envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The publisher (one per relay process, e.g. its discovery instance id).
    pub publisher_id: u64,
    /// Per publisher, from 0; a jump is a lost message, a return to 0 a restarted publisher.
    pub sequence: u64,
    /// Unix time in milliseconds, the publisher's clock.
    pub published_at: u64,
    pub topic: String,
    /// The `RouterEvent` array ([`crate::decode_router_events`]).
    pub payload: Vec<u8>,
    pub form: EnvelopeForm,
}

/// Decodes an envelope in either form (see the module docs). Unknown keys are skipped, key
/// order is free, all five keys are required.
pub fn decode_envelope(bytes: &[u8]) -> Result<Envelope, PlaneError> {
    if bytes.first() == Some(&b'{') {
        return decode_json_envelope(bytes);
    }
    Reader::read(bytes, |r| {
        let start = r.pos();
        let n = r.map("envelope")?;
        let (mut publisher_id, mut sequence, mut published_at, mut topic, mut payload) = (None, None, None, None, None);
        for _ in 0..n {
            let key = r.key()?;
            let at = r.pos();
            let seg = |name| move |e: kvscope_wire::msgpack::ReadError| e.within(at, Seg::Field(name));
            match key {
                b"publisher_id" => publisher_id = Some(r.u64("publisher_id").map_err(seg("publisher_id"))?),
                b"sequence" => sequence = Some(r.u64("sequence").map_err(seg("sequence"))?),
                b"published_at" => published_at = Some(r.u64("published_at").map_err(seg("published_at"))?),
                b"topic" => topic = Some(r.str("topic").map_err(seg("topic"))?.to_owned()),
                b"payload" => payload = Some(r.bin("payload").map_err(seg("payload"))?.to_vec()),
                other => {
                    Reader::check_utf8(other)?;
                    r.skip()?;
                }
            }
        }
        let need = |name: &str| missing(start, format!("envelope has no {name:?} key"));
        Ok(Envelope {
            publisher_id: publisher_id.ok_or_else(|| need("publisher_id"))?,
            sequence: sequence.ok_or_else(|| need("sequence"))?,
            published_at: published_at.ok_or_else(|| need("published_at"))?,
            topic: topic.ok_or_else(|| need("topic"))?,
            payload: payload.ok_or_else(|| need("payload"))?,
            form: EnvelopeForm::Msgpack,
        })
    })
    .map_err(PlaneError::Envelope)
}

fn decode_json_envelope(bytes: &[u8]) -> Result<Envelope, PlaneError> {
    /// serde_json's form of `serialize_bytes` is an array of numbers; a string is taken as its
    /// UTF-8 bytes (a producer that wrote the payload as text).
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Payload {
        Bytes(Vec<u8>),
        Text(String),
    }
    #[derive(serde::Deserialize)]
    struct Json {
        publisher_id: u64,
        sequence: u64,
        published_at: u64,
        topic: String,
        payload: Payload,
    }
    let json: Json = serde_json::from_slice(bytes).map_err(|e| PlaneError::EnvelopeJson(e.to_string()))?;
    Ok(Envelope {
        publisher_id: json.publisher_id,
        sequence: json.sequence,
        published_at: json.published_at,
        topic: json.topic,
        payload: match json.payload {
            Payload::Bytes(b) => b,
            Payload::Text(s) => s.into_bytes(),
        },
        form: EnvelopeForm::Json,
    })
}

/// One message of Dynamo's ZMQ plane, borrowed from its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZmqPlaneMessage<'a> {
    /// Frame 0 (`kv-events`); not checked here, a subscriber filters topics.
    pub topic: &'a [u8],
    /// Frame 1.
    pub publisher_id: u64,
    /// Frame 2.
    pub sequence: u64,
    /// Frame 3 after its version byte and length: the envelope.
    pub envelope: &'a [u8],
}

impl ZmqPlaneMessage<'_> {
    /// Decodes the envelope and checks that it names the publisher and sequence the frames do.
    pub fn decode_envelope(&self) -> Result<Envelope, PlaneError> {
        let env = decode_envelope(self.envelope)?;
        let disagrees = |frame, field, frames, envelope| ZmqFrameError::EnvelopeDisagrees { frame, field, frames, envelope };
        if env.publisher_id != self.publisher_id {
            return Err(disagrees(1, "publisher_id", self.publisher_id, env.publisher_id).into());
        }
        if env.sequence != self.sequence {
            return Err(disagrees(2, "sequence", self.sequence, env.sequence).into());
        }
        Ok(env)
    }
}

/// Splits the four frames of a ZMQ-plane message, checking the count, both 8-byte numbers, the
/// version byte and the declared envelope length.
pub fn split_zmq_plane<'a>(frames: &[&'a [u8]]) -> Result<ZmqPlaneMessage<'a>, PlaneError> {
    let &[topic, publisher, sequence, last] = frames else {
        return Err(ZmqFrameError::FrameCount { got: frames.len() }.into());
    };
    let be = |bytes: &[u8]| <[u8; 8]>::try_from(bytes).map(u64::from_be_bytes);
    let publisher_id = be(publisher).map_err(|_| ZmqFrameError::PublisherIdLength { got: publisher.len() })?;
    let sequence = be(sequence).map_err(|_| ZmqFrameError::SequenceLength { got: sequence.len() })?;
    let (&[version, a, b, c, d], envelope) = last.split_at_checked(5).ok_or(ZmqFrameError::EnvelopeHeader { got: last.len() })? else {
        return Err(ZmqFrameError::EnvelopeHeader { got: last.len() }.into());
    };
    if version != ZMQ_ENVELOPE_VERSION {
        return Err(ZmqFrameError::Version { got: version }.into());
    }
    let declared = u32::from_be_bytes([a, b, c, d]);
    if usize::try_from(declared).ok() != Some(envelope.len()) {
        return Err(ZmqFrameError::LengthMismatch { declared, actual: envelope.len() }.into());
    }
    Ok(ZmqPlaneMessage { topic, publisher_id, sequence, envelope })
}
