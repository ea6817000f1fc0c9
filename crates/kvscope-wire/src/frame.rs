//! ZMQ message framing: live messages and replay replies.
//!
//! Engines publish `[topic, seq (8 bytes, big-endian), payload]` on a PUB socket. A replay
//! request is `["", seq]` sent from a DEALER to the engine's ROUTER; the replies are
//! `[seq, payload]` (vLLM up to 0.25) or `[topic, seq, payload]` (vLLM 0.26 on, SGLang), each
//! possibly preceded by the empty delimiter frame the ROUTER echoes back. The end of a replay is
//! seq `u64::MAX` or an empty payload.

use crate::error::FrameError;

/// The sequence number that ends a replay.
pub const REPLAY_END_SEQ: u64 = u64::MAX;

/// One live message, borrowed from the frames it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveMessage<'a> {
    pub topic: &'a [u8],
    pub seq: u64,
    pub payload: &'a [u8],
}

/// Splits a live message. Anything but exactly 3 frames with an 8-byte seq is a frame error.
pub fn parse_live<F: AsRef<[u8]>>(frames: &[F]) -> Result<LiveMessage<'_>, FrameError> {
    let [topic, seq, payload] = frames else {
        return Err(FrameError::FrameCount { got: frames.len() });
    };
    Ok(LiveMessage { topic: topic.as_ref(), seq: parse_seq(seq.as_ref(), 1)?, payload: payload.as_ref() })
}

/// One reply from an engine's replay socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayReply<'a> {
    /// A replayed message; `topic` is `None` in the 2-frame framing.
    Message { topic: Option<&'a [u8]>, seq: u64, payload: &'a [u8] },
    /// The engine has nothing more to replay.
    End,
}

/// Splits a replay reply in either framing.
pub fn parse_replay_reply<F: AsRef<[u8]>>(frames: &[F]) -> Result<ReplayReply<'_>, FrameError> {
    let frames = match frames {
        // The ROUTER echoes the DEALER's empty delimiter; a 2- or 3-frame reply never starts
        // with an empty frame otherwise (a seq is 8 bytes, and a topic before a 2-frame tail
        // would make 3 frames, not 4).
        [first, rest @ ..] if first.as_ref().is_empty() && (rest.len() == 2 || rest.len() == 3) => rest,
        other => other,
    };
    let (topic, seq, payload) = match frames {
        [seq, payload] => (None, parse_seq(seq.as_ref(), 0)?, payload.as_ref()),
        [topic, seq, payload] => (Some(topic.as_ref()), parse_seq(seq.as_ref(), 1)?, payload.as_ref()),
        _ => return Err(FrameError::ReplayFrameCount { got: frames.len() }),
    };
    if seq == REPLAY_END_SEQ || payload.is_empty() {
        return Ok(ReplayReply::End);
    }
    Ok(ReplayReply::Message { topic, seq, payload })
}

/// The frames of a replay request for everything from `start_seq` on.
pub fn replay_request(start_seq: u64) -> [Vec<u8>; 2] {
    [Vec::new(), start_seq.to_be_bytes().to_vec()]
}

fn parse_seq(bytes: &[u8], frame: usize) -> Result<u64, FrameError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| FrameError::SeqLength { frame, got: bytes.len() })?;
    Ok(u64::from_be_bytes(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_message_needs_three_frames_and_an_eight_byte_seq() {
        let seq = 7u64.to_be_bytes();
        let frames = [b"kv".as_slice(), &seq, b"\x90"];
        assert_eq!(parse_live(&frames).unwrap(), LiveMessage { topic: b"kv", seq: 7, payload: b"\x90" });
        let two = [b"kv".as_slice(), b"\x90"];
        assert_eq!(parse_live(&two).unwrap_err().to_string(), "expected 3 frames [topic, seq, payload], got 2");
        let short_seq = [b"kv".as_slice(), b"\x01\x02", b"\x90"];
        assert_eq!(
            parse_live(&short_seq).unwrap_err().to_string(),
            "expected an 8-byte big-endian sequence number in frame 1, got 2 bytes"
        );
    }

    #[test]
    fn replay_reply_accepts_both_framings_and_the_delimiter() {
        let seq = 5u64.to_be_bytes();
        let two = [seq.as_slice(), b"p"];
        let three = [b"t".as_slice(), &seq, b"p"];
        let delimited = [b"".as_slice(), &seq, b"p"];
        let delimited3 = [b"".as_slice(), b"t", &seq, b"p"];
        let expect2 = ReplayReply::Message { topic: None, seq: 5, payload: b"p" };
        let expect3 = ReplayReply::Message { topic: Some(b"t"), seq: 5, payload: b"p" };
        assert_eq!(parse_replay_reply(&two).unwrap(), expect2);
        assert_eq!(parse_replay_reply(&three).unwrap(), expect3);
        assert_eq!(parse_replay_reply(&delimited).unwrap(), expect2);
        assert_eq!(parse_replay_reply(&delimited3).unwrap(), expect3);
    }

    #[test]
    fn replay_end_is_max_seq_or_empty_payload() {
        let end = u64::MAX.to_be_bytes();
        let three = 3u64.to_be_bytes();
        assert_eq!(parse_replay_reply(&[end.as_slice(), b""]).unwrap(), ReplayReply::End);
        assert_eq!(parse_replay_reply(&[end.as_slice(), b"x"]).unwrap(), ReplayReply::End);
        assert_eq!(parse_replay_reply(&[three.as_slice(), b""]).unwrap(), ReplayReply::End);
        assert_eq!(parse_replay_reply(&[b"a".as_slice()]).unwrap_err(), FrameError::ReplayFrameCount { got: 1 });
    }

    #[test]
    fn replay_request_is_an_empty_delimiter_and_the_seq() {
        assert_eq!(replay_request(9), [Vec::new(), 9u64.to_be_bytes().to_vec()]);
    }
}
