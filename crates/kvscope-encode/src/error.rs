//! Why a batch could not be written in a layout.

use std::fmt;

/// An event carries something its layout has no place for. Encoding it anyway would publish
/// bytes no engine of that release writes, so the caller decides ([`crate::encode_batch_lossy`]
/// drops such fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError {
    pub layout: &'static str,
    /// `events[3]`, or `batch` for the batch's own fields.
    pub at: String,
    pub message: String,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.at, self.layout, self.message)
    }
}

impl std::error::Error for EncodeError {}
