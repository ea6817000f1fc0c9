//! Why an event-plane message could not be read: which layer (ZMQ frames, envelope, payload)
//! and, for msgpack, the byte offset, expectation and path of kvscope-wire's [`DecodeError`].

use kvscope_wire::DecodeError;

/// An event-plane message that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaneError {
    /// The ZMQ plane's frames were not `[topic, publisher id, sequence, versioned envelope]`.
    #[error("ZMQ plane frames: {0}")]
    Frames(#[from] ZmqFrameError),
    /// The msgpack envelope did not decode: `envelope: byte 12: expected u64 for sequence, ...`.
    #[error("envelope: {0}")]
    Envelope(DecodeError),
    /// The JSON envelope (older Dynamo) did not parse.
    #[error("JSON envelope: {0}")]
    EnvelopeJson(String),
    /// The envelope's payload (the `RouterEvent` array) did not decode; offsets are within the
    /// payload: `payload: byte 57: expected u64 for tokens_hash, found string "x"
    /// ([0].event.data.stored.blocks[1].tokens_hash)`.
    #[error("payload: {0}")]
    Payload(DecodeError),
}

impl PlaneError {
    /// Stable label for counters: `frames_<what>`, `envelope_<kind>`, `envelope_json`,
    /// `payload_<kind>`.
    pub fn classify(&self) -> String {
        match self {
            PlaneError::Frames(e) => format!("frames_{}", e.classify()),
            PlaneError::Envelope(e) => format!("envelope_{}", e.classify().as_str()),
            PlaneError::EnvelopeJson(_) => "envelope_json".to_owned(),
            PlaneError::Payload(e) => format!("payload_{}", e.classify().as_str()),
        }
    }
}

/// What was wrong with a ZMQ-plane message's frames.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZmqFrameError {
    #[error("expected 4 frames [topic, publisher id, sequence, envelope], got {got}")]
    FrameCount { got: usize },
    #[error("expected an 8-byte big-endian publisher id in frame 1, got {got} bytes")]
    PublisherIdLength { got: usize },
    #[error("expected an 8-byte big-endian sequence in frame 2, got {got} bytes")]
    SequenceLength { got: usize },
    #[error("expected version byte 0x01 and a 4-byte length in frame 3, got {got} bytes")]
    EnvelopeHeader { got: usize },
    #[error("unsupported envelope frame version {got:#04x}; this build reads version 0x01")]
    Version { got: u8 },
    #[error("envelope frame declares {declared} bytes, but {actual} follow the header")]
    LengthMismatch { declared: u32, actual: usize },
    #[error("frame {frame} says {field} {frames}, the envelope says {envelope}")]
    EnvelopeDisagrees { frame: usize, field: &'static str, frames: u64, envelope: u64 },
}

impl ZmqFrameError {
    /// Stable label for counters.
    pub fn classify(&self) -> &'static str {
        match self {
            ZmqFrameError::FrameCount { .. } => "frame_count",
            ZmqFrameError::PublisherIdLength { .. } => "publisher_id_length",
            ZmqFrameError::SequenceLength { .. } => "sequence_length",
            ZmqFrameError::EnvelopeHeader { .. } => "envelope_header",
            ZmqFrameError::Version { .. } => "version",
            ZmqFrameError::LengthMismatch { .. } => "length_mismatch",
            ZmqFrameError::EnvelopeDisagrees { .. } => "envelope_disagrees",
        }
    }
}
