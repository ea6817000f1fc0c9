//! What kvscope reads of a Dynamo event-plane message before relaying it: the envelope's
//! publisher and sequence (for gap tracking), and, on Dynamo's ZMQ plane, where the envelope sits
//! in the 4 frames. The `RouterEvent`s inside the envelope's payload are relayed as bytes.
//!
//! TODO(plane): replace with `kvscope-router`'s `decode_envelope` and `split_zmq_plane` once
//! that crate is merged (it also names the byte offset and path of a decode error); this keeps
//! the server's intake working meanwhile, with the same rules as the fixtures show.

use serde::Deserialize;

/// The two envelope fields the intake needs; the rest (`published_at`, `topic`, `payload`) is
/// relayed untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct EnvelopeHead {
    /// The Dynamo publisher (one per relay process), a random u64.
    pub publisher_id: u64,
    /// Per publisher, from 0; a jump is a gap.
    pub sequence: u64,
}

/// Reads the envelope's head: a msgpack map (Dynamo 1.x) or JSON (older Dynamo).
pub fn decode_head(envelope: &[u8]) -> Result<EnvelopeHead, String> {
    if envelope.is_empty() {
        return Err("empty envelope: expected a msgpack map {publisher_id, sequence, published_at, topic, payload}".to_owned());
    }
    if envelope[0] == b'{' {
        return serde_json::from_slice(envelope).map_err(|e| format!("envelope is not Dynamo's JSON envelope: {e}"));
    }
    let mut rest = envelope;
    let head = EnvelopeHead::deserialize(&mut rmp_serde::Deserializer::new(&mut rest))
        .map_err(|e| format!("envelope is not Dynamo's msgpack envelope (a map with publisher_id and sequence): {e}"))?;
    if !rest.is_empty() {
        let used = envelope.len() - rest.len();
        return Err(format!("byte {used}: {} trailing bytes after the envelope", rest.len()));
    }
    Ok(head)
}

/// Where the envelope is in a ZMQ-plane message: 4 frames, `[topic, publisher id (u64 BE),
/// sequence (u64 BE), 0x01 + u32 BE length + envelope]`. Returns the envelope's range in frame 3.
pub fn split_zmq_plane<F: AsRef<[u8]>>(frames: &[F]) -> Result<std::ops::Range<usize>, String> {
    if frames.len() != 4 {
        return Err(format!(
            "expected 4 frames [topic, publisher id, sequence, envelope] from Dynamo's ZMQ event plane, got {}",
            frames.len()
        ));
    }
    for (i, what) in [(1, "publisher id"), (2, "sequence")] {
        let n = frames[i].as_ref().len();
        if n != 8 {
            return Err(format!("expected an 8-byte big-endian {what} in frame {i}, got {n} bytes"));
        }
    }
    let last = frames[3].as_ref();
    match last.first() {
        None => return Err("frame 3 is empty: expected 0x01 + u32 length + envelope".to_owned()),
        Some(1) => {}
        Some(v) => return Err(format!("frame 3: envelope version byte {v:#04x}, this build reads 0x01")),
    }
    if last.len() < 5 {
        return Err(format!("frame 3: {} bytes, shorter than the 5-byte version and length prefix", last.len()));
    }
    let len = u32::from_be_bytes([last[1], last[2], last[3], last[4]]) as usize;
    if len != last.len() - 5 {
        return Err(format!("frame 3: length prefix says {len} bytes, {} follow", last.len() - 5));
    }
    Ok(5..last.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../tests/fixtures/dynamo-event-plane/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn the_relays_own_envelopes_give_publisher_and_sequence() {
        let first = decode_head(&fixture("nats_map_000.bin")).unwrap();
        let second = decode_head(&fixture("nats_map_001.bin")).unwrap();
        assert_eq!(first.publisher_id, second.publisher_id);
        assert_eq!((first.sequence, second.sequence), (0, 1));
        let zmq = fixture("zmq_file_media_loopback_000.bin");
        let range = split_zmq_plane(&[b"kv-events".as_slice(), &[0; 8], &[0; 8], &zmq]).unwrap();
        assert_eq!(decode_head(&zmq[range]).unwrap().sequence, 0);
    }

    #[test]
    fn corrupt_envelopes_are_errors_not_panics() {
        let good = fixture("nats_map_000.bin");
        for cut in 0..good.len() {
            assert!(decode_head(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode_head(b"").unwrap_err(), "empty envelope: expected a msgpack map {publisher_id, sequence, published_at, topic, payload}");
        assert!(decode_head(b"\xc1garbage").is_err());
        assert_eq!(
            split_zmq_plane(&[b"kv-events".as_slice(), &[0; 8], &[0; 8], b"\x02"]).unwrap_err(),
            "frame 3: envelope version byte 0x02, this build reads 0x01"
        );
    }
}
