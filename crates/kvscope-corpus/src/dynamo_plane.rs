//! Dynamo's event plane as Dynamo 1.6.1's own relay published it: `tests/fixtures/dynamo-event-plane`
//! (see its README), embedded like the kv-events corpus.
//!
//! Per run tag: the engine batches fed to the relay's ZMQ SUB ([`sent`]), the event-plane
//! messages it published in receive order ([`messages`]: NATS bodies, or the last ZMQ frame),
//! the ZMQ plane's four frames ([`zmq_frames`]) and the file-discovery records
//! ([`discovery`]). Every run used `worker_id=42, dp_rank=0, kv_block_size=16`
//! ([`WORKER_ID`], [`DP_RANK`], [`KV_BLOCK_SIZE`]).

use serde::Deserialize;

use crate::embedded::DYNAMO_PLANE;

/// The worker id the fixtures' relay was started with (`KvEventPublisher(worker_id=42)`).
pub const WORKER_ID: u64 = 42;
/// The relay's `dp_rank`.
pub const DP_RANK: u32 = 0;
/// The relay's `kv_block_size`.
pub const KV_BLOCK_SIZE: u32 = 16;

/// One engine batch published on the ZMQ PUB the relay subscribed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentBatch {
    /// The ZMQ sequence number it went out under.
    pub seq: u64,
    /// What the batch tests (`cpu_store_bs64`, `bin32_hash`, ...).
    pub label: String,
    /// The msgpack batch.
    pub payload: Vec<u8>,
}

fn file(name: &str) -> Option<&'static [u8]> {
    DYNAMO_PLANE.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// Every run tag (`nats_map`, `zmq_file_media_loopback`, ...), sorted.
pub fn tags() -> Vec<&'static str> {
    let mut tags: Vec<&'static str> = DYNAMO_PLANE.iter().filter_map(|(n, _)| n.strip_suffix("_sent.json")).collect();
    tags.sort_unstable();
    tags
}

/// True for the runs over Dynamo's ZMQ plane (their messages are the last of four frames).
pub fn is_zmq(tag: &str) -> bool {
    tag.starts_with("zmq_")
}

/// The engine batches of a run, in publish order.
pub fn sent(tag: &str) -> Option<Vec<SentBatch>> {
    #[derive(Deserialize)]
    struct Raw {
        seq: u64,
        label: String,
        payload_hex: String,
    }
    let raw: Vec<Raw> = serde_json::from_slice(file(&format!("{tag}_sent.json"))?).expect("_sent.json parses");
    Some(raw.into_iter().map(|r| SentBatch { seq: r.seq, label: r.label, payload: unhex(&r.payload_hex) }).collect())
}

/// The event-plane messages of a run, in receive order: a NATS message body, or the last ZMQ
/// frame (version byte, u32 length, envelope).
pub fn messages(tag: &str) -> Option<Vec<&'static [u8]>> {
    let mut out = Vec::new();
    for i in 0.. {
        match file(&format!("{tag}_{i:03}.bin")) {
            Some(bytes) => out.push(bytes),
            None => break,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The `_messages.json` rendering of a run (subject or frame sizes, hex, decoded form).
pub fn messages_json(tag: &str) -> Option<serde_json::Value> {
    Some(serde_json::from_slice(file(&format!("{tag}_messages.json"))?).expect("_messages.json parses"))
}

/// The four frames of each ZMQ-plane message (topic, publisher id, sequence, envelope frame),
/// from `_messages.json`'s `frames_hex` with the `.bin` as the last frame; `None` for NATS runs.
pub fn zmq_frames(tag: &str) -> Option<Vec<Vec<Vec<u8>>>> {
    if !is_zmq(tag) {
        return None;
    }
    let json = messages_json(tag)?;
    let bins = messages(tag)?;
    let entries = json.as_array().expect("_messages.json is an array");
    assert_eq!(entries.len(), bins.len(), "{tag}: one _messages.json entry per .bin");
    Some(
        entries
            .iter()
            .zip(bins)
            .map(|(e, last)| {
                let hex = e["headers"]["frames_hex"].as_array().expect("ZMQ entries have headers.frames_hex");
                let mut frames: Vec<Vec<u8>> = hex[..3].iter().map(|h| unhex(h.as_str().expect("hex string"))).collect();
                frames.push(last.to_vec());
                frames
            })
            .collect(),
    )
}

/// The file-discovery records of a run, as `(kind, bytes)`: `event_channels` (the publisher's
/// ZMQ endpoint) and `event_sources` (worker id and dp rank per publisher). Empty for NATS runs.
pub fn discovery(tag: &str) -> Vec<(&'static str, &'static [u8])> {
    let prefix = format!("{tag}_discovery_");
    DYNAMO_PLANE.iter().filter_map(|(n, bytes)| Some((n.strip_prefix(prefix.as_str())?.strip_suffix(".bin")?, *bytes))).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd hex length");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digits")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_has_batches_and_messages() {
        let tags = tags();
        assert_eq!(tags, ["nats_array", "nats_core_nojs", "nats_map", "nats_map_media", "zmq_file_media_loopback"]);
        for tag in tags {
            assert!(!sent(tag).unwrap().is_empty(), "{tag}");
            assert!(!messages(tag).unwrap().is_empty(), "{tag}");
        }
        let frames = zmq_frames("zmq_file_media_loopback").unwrap();
        assert_eq!(frames[0][0], b"kv-events");
        assert_eq!(frames[0].len(), 4);
        let kinds: Vec<_> = discovery("zmq_file_media_loopback").into_iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, ["event_channels", "event_sources"]);
        assert!(discovery("nats_map").is_empty());
    }
}
