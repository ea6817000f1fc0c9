//! A read position over the payload slice, the msgpack reads the decoder needs, and the error
//! they fail with.
//!
//! Each read checks the bytes it takes against what is left, so no length prefix is trusted and
//! nothing is allocated before the bytes it describes are known to be there. A failed read
//! returns a [`Fail`]: kind and message, with the offset and path filled in by the callers on
//! the way up ([`Fail::within`]), so that only the error path pays for knowing where it is.

use std::fmt;

use crate::error::{DecodeError, DecodeErrorKind};
use crate::event::{BlockHash, HashReprs, WireStr, known_wire_str};
use crate::skip::TokenBytes;

/// Deeper than any engine writes; caps what unknown values may nest.
pub(crate) const MAX_DEPTH: usize = 32;

/// One segment of an error's path: `[3]` or `.block_hashes`.
#[derive(Clone, Copy, Debug)]
pub enum Seg {
    Index(u32),
    Field(&'static str),
}

/// A decode failure on its way up (public as [`crate::msgpack::ReadError`]). Boxed, so a `Result` of the hot path stays one word wider
/// than its value.
#[derive(Debug)]
pub struct Fail(Box<FailInner>);

#[derive(Debug)]
struct FailInner {
    /// Where the offending value starts; `None` until the innermost value that knows its start
    /// claims it.
    offset: Option<usize>,
    kind: DecodeErrorKind,
    message: String,
    /// Innermost first.
    path: Vec<Seg>,
}

impl Fail {
    /// A failure whose offset the enclosing value will name.
    #[cold]
    pub fn new(kind: DecodeErrorKind, message: String) -> Fail {
        Fail(Box::new(FailInner { offset: None, kind, message, path: Vec::new() }))
    }

    /// A failure at a known offset.
    #[cold]
    pub fn at(offset: usize, kind: DecodeErrorKind, message: String) -> Fail {
        Fail(Box::new(FailInner { offset: Some(offset), kind, message, path: Vec::new() }))
    }

    #[cold]
    pub(crate) fn truncated() -> Fail {
        Fail::new(DecodeErrorKind::Truncated, "unexpected end of input".to_owned())
    }

    #[cold]
    pub(crate) fn too_deep() -> Fail {
        Fail::new(DecodeErrorKind::TooDeep, format!("nesting deeper than {MAX_DEPTH}"))
    }

    #[cold]
    pub(crate) fn not_utf8() -> Fail {
        Fail::new(DecodeErrorKind::Malformed, "string is not valid UTF-8".to_owned())
    }

    /// Says the failure happened inside the value that starts at `start` and sits at `seg` of
    /// its parent: the innermost such call names the offset, every call adds its segment.
    #[cold]
    pub fn within(mut self, start: usize, seg: Seg) -> Fail {
        self.0.offset.get_or_insert(start);
        self.0.path.push(seg);
        self
    }

    /// The public error: the offset (0 when no value claimed one: the batch itself) and the
    /// path rendered outermost first (`events[3].block_hashes[0]`).
    #[cold]
    pub(crate) fn finish(self, len: usize) -> DecodeError {
        let FailInner { offset, kind, message, path } = *self.0;
        let mut text = String::new();
        for seg in path.iter().rev() {
            match seg {
                Seg::Index(i) => text.push_str(&format!("[{i}]")),
                Seg::Field(name) if text.is_empty() => text.push_str(name),
                Seg::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
            }
        }
        DecodeError::new(offset.unwrap_or(0).min(len), kind, message, text)
    }
}

/// Adds a path segment to a failed result (see [`Fail::within`]).
pub(crate) trait Within<T> {
    fn within(self, start: usize, seg: Seg) -> Result<T, Fail>;
}

impl<T> Within<T> for Result<T, Fail> {
    #[inline(always)]
    fn within(self, start: usize, seg: Seg) -> Result<T, Fail> {
        match self {
            Ok(v) => Ok(v),
            Err(e) => Err(e.within(start, seg)),
        }
    }
}

/// What a container header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Container {
    Array(usize),
    Map(usize),
}

/// The payload and a read position in it.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    /// Where the token ids read go as little-endian bytes, for decodes that keep them.
    pub tokens: Option<Box<TokenBytes>>,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0, tokens: None }
    }

    /// The marker of the next value, not consumed.
    #[inline(always)]
    pub(crate) fn peek(&self) -> Result<u8, Fail> {
        match self.buf.get(self.pos) {
            Some(&m) => Ok(m),
            None => Err(Fail::truncated()),
        }
    }

    #[inline(always)]
    pub(crate) fn byte(&mut self) -> Result<u8, Fail> {
        let m = self.peek()?;
        self.pos += 1;
        Ok(m)
    }

    #[inline(always)]
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Fail> {
        match self.buf.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(bytes) => {
                self.pos += n;
                Ok(bytes)
            }
            None => Err(Fail::truncated()),
        }
    }

    #[inline(always)]
    fn be<const N: usize>(&mut self) -> Result<[u8; N], Fail> {
        let bytes = self.take(N)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, Fail> {
        self.byte()
    }
    #[inline(always)]
    fn u16(&mut self) -> Result<u16, Fail> {
        self.be::<2>().map(u16::from_be_bytes)
    }
    #[inline(always)]
    fn u32(&mut self) -> Result<u32, Fail> {
        self.be::<4>().map(u32::from_be_bytes)
    }
    #[inline(always)]
    fn u64(&mut self) -> Result<u64, Fail> {
        self.be::<8>().map(u64::from_be_bytes)
    }

    /// True (and consumed) when the next value is nil.
    #[inline(always)]
    pub(crate) fn nil(&mut self) -> bool {
        if self.buf.get(self.pos) == Some(&0xc0) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Reads an array or map header; anything else fails as `expected <expecting>`.
    #[inline(always)]
    pub(crate) fn container(&mut self, expecting: &dyn fmt::Display) -> Result<Container, Fail> {
        let m = self.peek()?;
        let c = match m {
            0x90..=0x9f => {
                self.pos += 1;
                return Ok(Container::Array(usize::from(m & 0x0f)));
            }
            0x80..=0x8f => {
                self.pos += 1;
                return Ok(Container::Map(usize::from(m & 0x0f)));
            }
            0xdc..=0xdf => {
                self.pos += 1;
                let n = if m & 1 == 0 { usize::from(self.u16()?) } else { self.u32()? as usize };
                if m < 0xde { Container::Array(n) } else { Container::Map(n) }
            }
            _ => return Err(self.mismatch(expecting)),
        };
        Ok(c)
    }

    /// Reads an array header; anything else fails as `expected <expecting>`.
    #[inline(always)]
    pub(crate) fn array(&mut self, expecting: &dyn fmt::Display) -> Result<usize, Fail> {
        match self.peek()? {
            m @ 0x90..=0x9f => {
                self.pos += 1;
                Ok(usize::from(m & 0x0f))
            }
            0xdc => {
                self.pos += 1;
                Ok(usize::from(self.u16()?))
            }
            0xdd => {
                self.pos += 1;
                Ok(self.u32()? as usize)
            }
            _ => Err(self.mismatch(expecting)),
        }
    }

    /// The raw bytes of a string, or `None` (nothing consumed) when the next value is no string.
    #[inline(always)]
    pub(crate) fn str_bytes(&mut self) -> Result<Option<&'a [u8]>, Fail> {
        let n = match self.peek()? {
            m @ 0xa0..=0xbf => {
                self.pos += 1;
                usize::from(m & 0x1f)
            }
            0xd9 => {
                self.pos += 1;
                usize::from(self.u8()?)
            }
            0xda => {
                self.pos += 1;
                usize::from(self.u16()?)
            }
            0xdb => {
                self.pos += 1;
                self.u32()? as usize
            }
            _ => return Ok(None),
        };
        self.take(n).map(Some)
    }

    /// A UTF-8 string; anything else fails as `expected <expecting>`.
    #[inline(always)]
    pub(crate) fn str(&mut self, expecting: &dyn fmt::Display) -> Result<&'a str, Fail> {
        match self.str_bytes()? {
            Some(bytes) => std::str::from_utf8(bytes).map_err(|_| Fail::not_utf8()),
            None => Err(self.mismatch(expecting)),
        }
    }

    /// A map key as raw bytes: engines write a dozen known ASCII names, compared without a UTF-8
    /// check (a key that matches none is checked by [`Cursor::check_utf8`]).
    #[inline(always)]
    pub(crate) fn key(&mut self) -> Result<&'a [u8], Fail> {
        match self.str_bytes()? {
            Some(bytes) => Ok(bytes),
            None => Err(self.mismatch(&"string map key")),
        }
    }

    /// Fails unless `bytes` (an unknown key) are UTF-8, as every string read is.
    #[inline]
    pub(crate) fn check_utf8(bytes: &[u8]) -> Result<(), Fail> {
        if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() { Ok(()) } else { Err(Fail::not_utf8()) }
    }

    /// A string or nil, owned inline when short. The strings engines write in every event
    /// (`GPU`, `CPU`, a kind) are recognised by their bytes and come from a constant, with no
    /// UTF-8 check and no copy through `CompactString::new`: together they were a tenth of the
    /// decode time of the `cpu_offload` workload, whose only string is `CPU`.
    #[inline(always)]
    pub(crate) fn opt_str(&mut self, what: &'static str) -> Result<Option<WireStr>, Fail> {
        if self.nil() {
            return Ok(None);
        }
        match self.str_bytes()? {
            Some(bytes) => match known_wire_str(bytes) {
                Some(known) => Ok(Some(known)),
                None => match std::str::from_utf8(bytes) {
                    Ok(s) => Ok(Some(WireStr::new(s))),
                    Err(_) => Err(Fail::not_utf8()),
                },
            },
            None => Err(self.mismatch(&Expecting::NilOrStr(what))),
        }
    }

    /// An integer, as `(value, signed)`: `signed` when the marker was a signed type, in which
    /// case `value` is the `i64` bit-cast. `None` (nothing consumed) when the value is no int.
    #[inline(always)]
    pub(crate) fn int(&mut self) -> Result<Option<Int>, Fail> {
        let m = self.peek()?;
        let v = match m {
            0x00..=0x7f => Int::U(u64::from(m)),
            0xe0..=0xff => Int::I(i64::from(m as i8)),
            0xcc..=0xd3 => {
                self.pos += 1;
                return Ok(Some(match m {
                    0xcc => Int::U(u64::from(self.u8()?)),
                    0xcd => Int::U(u64::from(self.u16()?)),
                    0xce => Int::U(u64::from(self.u32()?)),
                    0xcf => Int::U(self.u64()?),
                    0xd0 => Int::I(i64::from(self.u8()? as i8)),
                    0xd1 => Int::I(i64::from(self.u16()? as i16)),
                    0xd2 => Int::I(i64::from(self.u32()? as i32)),
                    _ => Int::I(self.u64()? as i64),
                }));
            }
            _ => return Ok(None),
        };
        self.pos += 1;
        Ok(Some(v))
    }

    /// A non-negative integer that fits u32, or nil.
    #[inline(always)]
    pub(crate) fn opt_u32(&mut self, what: &'static str) -> Result<Option<u32>, Fail> {
        if self.nil() {
            return Ok(None);
        }
        match self.int()? {
            Some(v) => match v.to_u32() {
                Some(n) => Ok(Some(n)),
                None => Err(Fail::new(DecodeErrorKind::InvalidValue, format!("expected u32 for {what}, found {v}"))),
            },
            None => Err(self.mismatch(&Expecting::NilOrU32(what))),
        }
    }

    /// An integer that fits i64, or nil.
    #[inline]
    pub(crate) fn opt_i64(&mut self, what: &'static str) -> Result<Option<i64>, Fail> {
        if self.nil() {
            return Ok(None);
        }
        match self.int()? {
            Some(Int::I(v)) => Ok(Some(v)),
            Some(Int::U(v)) => match i64::try_from(v) {
                Ok(v) => Ok(Some(v)),
                Err(_) => Err(Fail::new(DecodeErrorKind::InvalidValue, format!("expected i64 for {what}, found {v}"))),
            },
            None => Err(self.mismatch(&Expecting::NilOrInt(what))),
        }
    }

    /// Any number, as f64.
    #[inline]
    pub(crate) fn number(&mut self, expecting: &dyn fmt::Display) -> Result<f64, Fail> {
        match self.peek()? {
            0xcb => {
                self.pos += 1;
                Ok(f64::from_bits(self.u64()?))
            }
            0xca => {
                self.pos += 1;
                Ok(f64::from(f32::from_bits(self.u32()?)))
            }
            _ => match self.int()? {
                Some(Int::U(v)) => Ok(v as f64),
                Some(Int::I(v)) => Ok(v as f64),
                None => Err(self.mismatch(expecting)),
            },
        }
    }

    /// One block hash: u64, i64 (bit-cast) or a 16/32-byte bin (its last 8 bytes, big-endian).
    #[inline(always)]
    pub(crate) fn hash(&mut self, expecting: &dyn fmt::Display) -> Result<(BlockHash, HashReprs), Fail> {
        let m = self.peek()?;
        if m <= 0x7f {
            self.pos += 1;
            return Ok((BlockHash(u64::from(m)), HashReprs::UNSIGNED));
        }
        if m == 0xcf {
            self.pos += 1;
            return Ok((BlockHash(self.u64()?), HashReprs::UNSIGNED));
        }
        if let 0xc4..=0xc6 = m {
            self.pos += 1;
            let n = match m {
                0xc4 => usize::from(self.u8()?),
                0xc5 => usize::from(self.u16()?),
                _ => self.u32()? as usize,
            };
            let bytes = self.take(n)?;
            let repr = match n {
                16 => HashReprs::BIN16,
                32 => HashReprs::BIN32,
                _ => {
                    return Err(Fail::new(
                        DecodeErrorKind::InvalidValue,
                        format!("expected a 16- or 32-byte bin block hash, found {n} bytes"),
                    ));
                }
            };
            let mut tail = [0; 8];
            tail.copy_from_slice(&bytes[n - 8..]);
            return Ok((BlockHash(u64::from_be_bytes(tail)), repr));
        }
        match self.int()? {
            Some(Int::U(v)) => Ok((BlockHash(v), HashReprs::UNSIGNED)),
            Some(Int::I(v)) => Ok((BlockHash(v as u64), if v < 0 { HashReprs::SIGNED } else { HashReprs::UNSIGNED })),
            None => Err(self.mismatch(expecting)),
        }
    }

    /// Skips one value of any type, nested at most `depth_left` containers deep.
    #[inline]
    pub(crate) fn skip(&mut self, depth_left: usize) -> Result<(), Fail> {
        match crate::skip::skip_raw(self.buf, self.pos, depth_left) {
            Ok(end) => {
                self.pos = end;
                Ok(())
            }
            Err(e) => Err(match e.kind {
                crate::skip::RawSkipKind::Truncated => Fail::truncated(),
                crate::skip::RawSkipKind::TooDeep => Fail::too_deep(),
                crate::skip::RawSkipKind::Reserved => reserved(),
            }),
        }
    }

    /// The failure for a value of the wrong type at the position: `expected X, found Y`. The
    /// value's head is read first, as a reader that builds values would: a string or bin cut
    /// short is a truncation, not a mismatch.
    #[cold]
    #[inline(never)]
    pub(crate) fn mismatch(&mut self, expecting: &dyn fmt::Display) -> Fail {
        match self.found() {
            Ok(found) => Fail::new(DecodeErrorKind::TypeMismatch, format!("expected {expecting}, found {found}")),
            Err(fail) => fail,
        }
    }

    /// What the value at the position is, in words (`string "x"`, ``integer `5` ``, `nil`).
    #[cold]
    fn found(&mut self) -> Result<String, Fail> {
        let m = self.peek()?;
        if let Some(bytes) = self.str_bytes()? {
            return match std::str::from_utf8(bytes) {
                Ok(s) => Ok(format!("string {s:?}")),
                Err(_) => Err(Fail::not_utf8()),
            };
        }
        if let Some(v) = self.int()? {
            return Ok(format!("integer `{v}`"));
        }
        self.pos += 1;
        Ok(match m {
            0xc0 => "nil".to_owned(),
            0xc2 => "boolean `false`".to_owned(),
            0xc3 => "boolean `true`".to_owned(),
            0xca => format!("floating point `{}`", WithDecimalPoint(f64::from(f32::from_bits(self.u32()?)))),
            0xcb => format!("floating point `{}`", WithDecimalPoint(f64::from_bits(self.u64()?))),
            0xc4..=0xc6 => {
                let n = match m {
                    0xc4 => usize::from(self.u8()?),
                    0xc5 => usize::from(self.u16()?),
                    _ => self.u32()? as usize,
                };
                self.take(n)?;
                "bin".to_owned()
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                self.pos -= 1;
                self.array(&"")?;
                "array".to_owned()
            }
            0x80..=0x8f | 0xde | 0xdf => {
                self.pos -= 1;
                self.container(&"")?;
                "map".to_owned()
            }
            0xd4..=0xd8 => "ext".to_owned(),
            0xc7..=0xc9 => {
                // Only the length is read: the type is judged before the data.
                self.take(1 << (m - 0xc7))?;
                "ext".to_owned()
            }
            _ => return Err(reserved()),
        })
    }
}

#[cold]
fn reserved() -> Fail {
    Fail::new(DecodeErrorKind::Malformed, "reserved msgpack marker 0xc1".to_owned())
}

/// An integer as its marker typed it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Int {
    U(u64),
    I(i64),
}

impl Int {
    #[inline(always)]
    fn to_u32(self) -> Option<u32> {
        match self {
            Int::U(v) => u32::try_from(v).ok(),
            Int::I(v) => u32::try_from(v).ok(),
        }
    }
}

impl fmt::Display for Int {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Int::U(v) => write!(f, "{v}"),
            Int::I(v) => write!(f, "{v}"),
        }
    }
}

/// What a reader expected, rendered only when it did not get it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Expecting {
    NilOrStr(&'static str),
    NilOrU32(&'static str),
    NilOrInt(&'static str),
}

impl fmt::Display for Expecting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expecting::NilOrStr(what) => write!(f, "string or nil for {what}"),
            Expecting::NilOrU32(what) => write!(f, "u32 or nil for {what}"),
            Expecting::NilOrInt(what) => write!(f, "int or nil for {what}"),
        }
    }
}

/// A float as error messages show it: `1.0`, not `1` (the form users of serde know).
struct WithDecimalPoint(f64);

impl fmt::Display for WithDecimalPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        if self.0.is_finite() && !text.contains('.') { write!(f, "{text}.0") } else { f.write_str(&text) }
    }
}
