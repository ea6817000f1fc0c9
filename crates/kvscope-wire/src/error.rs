//! Errors for malformed frames and payloads.
//!
//! A decode error names the byte offset where the offending value starts, what was expected and
//! found, and the path inside the batch: `byte 17: expected array or map for event, found
//! string "x" (events[3])`. Helpers deep in the decoder build the message without an offset; the
//! top-level decoder fills in offset and path once, on the way up.

use std::fmt;

/// Why a payload could not be decoded, grouped for counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DecodeErrorKind {
    /// The input ended inside a value.
    Truncated,
    /// A value had the wrong msgpack type.
    TypeMismatch,
    /// A value had the right type but an impossible content (a 7-byte hash, a negative size).
    InvalidValue,
    /// A required field was absent.
    MissingField,
    /// Bytes followed the batch.
    TrailingBytes,
    /// Nesting deeper than any engine writes.
    TooDeep,
    /// A string was not UTF-8, or a reserved marker appeared.
    Malformed,
}

impl DecodeErrorKind {
    pub const ALL: [DecodeErrorKind; 7] = [
        DecodeErrorKind::Truncated,
        DecodeErrorKind::TypeMismatch,
        DecodeErrorKind::InvalidValue,
        DecodeErrorKind::MissingField,
        DecodeErrorKind::TrailingBytes,
        DecodeErrorKind::TooDeep,
        DecodeErrorKind::Malformed,
    ];

    /// Stable label for counters and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeErrorKind::Truncated => "truncated",
            DecodeErrorKind::TypeMismatch => "type_mismatch",
            DecodeErrorKind::InvalidValue => "invalid_value",
            DecodeErrorKind::MissingField => "missing_field",
            DecodeErrorKind::TrailingBytes => "trailing_bytes",
            DecodeErrorKind::TooDeep => "too_deep",
            DecodeErrorKind::Malformed => "malformed",
        }
    }
}

/// A payload that could not be decoded. Boxed so that `Result<EventBatch, DecodeError>` stays
/// small on the hot path.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodeError(Box<DecodeErrorInner>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct DecodeErrorInner {
    offset: usize,
    kind: DecodeErrorKind,
    message: String,
    path: String,
}

impl DecodeError {
    pub(crate) fn new(offset: usize, kind: DecodeErrorKind, message: String, path: String) -> Self {
        DecodeError(Box::new(DecodeErrorInner { offset, kind, message, path }))
    }

    /// Byte offset in the payload where the offending value starts.
    pub fn offset(&self) -> usize {
        self.0.offset
    }

    /// The group this error counts under.
    pub fn classify(&self) -> DecodeErrorKind {
        self.0.kind
    }

    /// What was expected and found, without offset or path.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// Where in the batch (`events[3].block_hashes[0]`); empty at the top level.
    pub fn path(&self) -> &str {
        &self.0.path
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.0.offset, self.0.message)?;
        if !self.0.path.is_empty() {
            write!(f, " ({})", self.0.path)?;
        }
        Ok(())
    }
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DecodeError({self})")
    }
}

impl std::error::Error for DecodeError {}

/// A ZMQ message that is not shaped like an engine's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("expected 3 frames [topic, seq, payload], got {got}")]
    FrameCount { got: usize },
    #[error("expected an 8-byte big-endian sequence number in frame {frame}, got {got} bytes")]
    SeqLength { frame: usize, got: usize },
    #[error(
        "expected a replay reply of 2 frames [seq, payload] or 3 frames [topic, seq, payload] \
         (after an optional empty delimiter), got {got}"
    )]
    ReplayFrameCount { got: usize },
}

impl FrameError {
    /// Stable label for counters and metrics.
    pub fn classify(&self) -> &'static str {
        match self {
            FrameError::FrameCount { .. } | FrameError::ReplayFrameCount { .. } => "frame_count",
            FrameError::SeqLength { .. } => "seq_length",
        }
    }
}
