//! The decoder's msgpack reader, for other formats kvscope reads: a position over a byte slice,
//! typed reads that check every length against the bytes left, and errors that name offset,
//! expectation and path exactly like [`DecodeError`]s of engine payloads do.
//!
//! Why it is public: Dynamo's event plane (envelopes and `RouterEvent`s, read by
//! `kvscope-router`) is msgpack too, and a second reader would repeat every bounds check and
//! every "expected X, found Y" message of this one. What it is not: a general msgpack library.
//! It reads the values kvscope's formats hold (maps, arrays, strings, bins, integers, nil) and
//! skips the rest; building values is the caller's job.
//!
//! ```
//! use kvscope_wire::msgpack::{Reader, Seg};
//!
//! // {"a": "x"}: a string where an integer belongs.
//! let bytes = [0x81, 0xa1, b'a', 0xa1, b'x'];
//! let err = Reader::read(&bytes, |r| {
//!     let n = r.map("map")?;
//!     assert_eq!(n, 1);
//!     assert_eq!(r.key()?, b"a");
//!     let start = r.pos();
//!     r.u64("a").map_err(|e| e.within(start, Seg::Field("a")))
//! })
//! .unwrap_err();
//! assert_eq!(err.to_string(), "byte 3: expected u64 for a, found string \"x\" (a)");
//! ```

use crate::cursor::{Container, Cursor, Int, MAX_DEPTH};
use crate::error::{DecodeError, DecodeErrorKind};

pub use crate::cursor::{Fail as ReadError, Seg};

/// A read position over one msgpack value (see the module docs).
#[derive(Debug)]
pub struct Reader<'a> {
    c: Cursor<'a>,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { c: Cursor::new(buf) }
    }

    /// Runs `read` over `buf` and turns its failure into a [`DecodeError`] (offset and path
    /// filled in); bytes left after `read` returns are an error, as for engine payloads.
    pub fn read<T>(buf: &'a [u8], read: impl FnOnce(&mut Reader<'a>) -> Result<T, ReadError>) -> Result<T, DecodeError> {
        let mut r = Reader::new(buf);
        match read(&mut r) {
            Ok(v) if r.c.pos == buf.len() => Ok(v),
            Ok(_) => Err(DecodeError::new(
                r.c.pos,
                DecodeErrorKind::TrailingBytes,
                format!("{} trailing bytes after the value", buf.len() - r.c.pos),
                String::new(),
            )),
            Err(fail) => Err(fail.finish(buf.len())),
        }
    }

    /// The offset of the next value: pass it to [`ReadError::within`] for the value read next.
    pub fn pos(&self) -> usize {
        self.c.pos
    }

    /// Bytes after the position.
    pub fn remaining(&self) -> usize {
        self.c.buf.len().saturating_sub(self.c.pos)
    }

    /// The marker of the next value, not consumed.
    pub fn peek(&self) -> Result<u8, ReadError> {
        self.c.peek()
    }

    /// True (and consumed) when the next value is nil.
    pub fn nil(&mut self) -> bool {
        self.c.nil()
    }

    /// A map header: the number of entries. `what` names the value in the error.
    pub fn map(&mut self, what: &str) -> Result<usize, ReadError> {
        let start = self.c.pos;
        match self.c.container(&format_args!("map for {what}"))? {
            Container::Map(n) => Ok(n),
            Container::Array(_) => {
                self.c.pos = start;
                Err(self.c.mismatch(&format_args!("map for {what}")))
            }
        }
    }

    /// An array header: the number of items.
    pub fn array(&mut self, what: &str) -> Result<usize, ReadError> {
        self.c.array(&format_args!("array for {what}"))
    }

    /// A map key, as raw bytes (compare with known names; [`Reader::check_utf8`] the others).
    pub fn key(&mut self) -> Result<&'a [u8], ReadError> {
        self.c.key()
    }

    /// Fails unless `bytes` (an unknown key) are UTF-8, as every string read is.
    pub fn check_utf8(bytes: &[u8]) -> Result<(), ReadError> {
        Cursor::check_utf8(bytes)
    }

    /// The raw bytes of a string, or `None` (nothing consumed) when the next value is no string.
    pub fn str_bytes(&mut self) -> Result<Option<&'a [u8]>, ReadError> {
        self.c.str_bytes()
    }

    /// A UTF-8 string.
    pub fn str(&mut self, what: &str) -> Result<&'a str, ReadError> {
        self.c.str(&format_args!("string for {what}"))
    }

    /// A bin (msgpack's byte string).
    pub fn bin(&mut self, what: &str) -> Result<&'a [u8], ReadError> {
        let n = match self.c.peek()? {
            0xc4 => {
                self.c.pos += 1;
                usize::from(self.c.byte()?)
            }
            0xc5 => {
                self.c.pos += 1;
                let b = self.c.take(2)?;
                usize::from(u16::from_be_bytes([b[0], b[1]]))
            }
            0xc6 => {
                self.c.pos += 1;
                let b = self.c.take(4)?;
                u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
            }
            _ => return Err(self.c.mismatch(&format_args!("bin for {what}"))),
        };
        self.c.take(n)
    }

    /// A non-negative integer (any int marker; a negative one is an invalid value).
    pub fn u64(&mut self, what: &str) -> Result<u64, ReadError> {
        match self.c.int()? {
            Some(Int::U(v)) => Ok(v),
            Some(Int::I(v)) => u64::try_from(v).map_err(|_| invalid(format!("expected u64 for {what}, found {v}"))),
            None => Err(self.c.mismatch(&format_args!("u64 for {what}"))),
        }
    }

    /// An integer that fits u32.
    pub fn u32(&mut self, what: &str) -> Result<u32, ReadError> {
        let v = match self.c.int()? {
            Some(Int::U(v)) => i128::from(v),
            Some(Int::I(v)) => i128::from(v),
            None => return Err(self.c.mismatch(&format_args!("u32 for {what}"))),
        };
        u32::try_from(v).map_err(|_| invalid(format!("expected u32 for {what}, found {v}")))
    }

    /// An integer as i64 (a u64 beyond i64 is an invalid value).
    pub fn i64(&mut self, what: &str) -> Result<i64, ReadError> {
        match self.c.int()? {
            Some(Int::I(v)) => Ok(v),
            Some(Int::U(v)) => i64::try_from(v).map_err(|_| invalid(format!("expected i64 for {what}, found {v}"))),
            None => Err(self.c.mismatch(&format_args!("int for {what}"))),
        }
    }

    /// Skips one value of any type, nested no deeper than the decoder allows.
    pub fn skip(&mut self) -> Result<(), ReadError> {
        self.c.skip(MAX_DEPTH - 1)
    }

    /// The failure for a value of the wrong type at the position: `expected {expecting},
    /// found ...` (reads the value's head to say what it is).
    pub fn mismatch(&mut self, expecting: &str) -> ReadError {
        self.c.mismatch(&expecting)
    }
}

/// A value of the right type and an impossible content.
pub fn invalid(message: String) -> ReadError {
    ReadError::new(DecodeErrorKind::InvalidValue, message)
}

/// A required field that was absent; `at` is the offset of the value that lacks it.
pub fn missing(at: usize, message: String) -> ReadError {
    ReadError::at(at, DecodeErrorKind::MissingField, message)
}
