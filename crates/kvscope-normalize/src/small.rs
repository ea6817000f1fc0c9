//! A short wire string kept inline in a verdict.
//!
//! A verdict must be able to render "medium \"cpu\" -> HostPinned" long after the event is gone,
//! and the normalizer runs at millions of events per second, so a verdict cannot own a `String`
//! (one allocation per event). Mediums and cache kinds are short words written by engine code
//! (`GPU`, `cpu`, `chunked_local_attention` is the longest known at 23 bytes), so they are
//! copied into a fixed inline buffer. A longer string keeps its first bytes and remembers that it
//! was cut, so the rendering can say so instead of pretending it saw the whole string.
//! Rejected alternative: an interner in the normalizer, which would make every rendering need
//! the normalizer and would grow without bound on a hostile stream.

use std::fmt;

/// Inline capacity in bytes: the longest known kind, `chunked_local_attention`, fits; the struct
/// is 24 bytes.
pub const SMALL_STR_CAPACITY: usize = 23;

/// Bit of `len_and_cut` set when the input was longer than the capacity.
const CUT: u8 = 0x80;

/// A string of up to [`SMALL_STR_CAPACITY`] bytes stored inline; longer input is cut at a char
/// boundary and flagged.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmallStr {
    /// Length in the low bits, [`CUT`] in the high bit.
    len_and_cut: u8,
    bytes: [u8; SMALL_STR_CAPACITY],
}

impl SmallStr {
    /// The empty string.
    pub const EMPTY: SmallStr = SmallStr { len_and_cut: 0, bytes: [0; SMALL_STR_CAPACITY] };

    /// Copies `s`, cutting it at a char boundary if it is longer than the capacity.
    #[inline]
    pub fn new(s: &str) -> SmallStr {
        let mut end = s.len().min(SMALL_STR_CAPACITY);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; SMALL_STR_CAPACITY];
        // A fixed-bound loop rather than `copy_from_slice`, which becomes a `memmove` call for a
        // variable length: this is on the per-event path.
        let src = s.as_bytes();
        for (i, b) in bytes.iter_mut().enumerate().take(end) {
            *b = src[i];
        }
        SmallStr { len_and_cut: end as u8 | if end < s.len() { CUT } else { 0 }, bytes }
    }

    fn len(&self) -> usize {
        usize::from(self.len_and_cut & !CUT)
    }

    /// The kept bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len()]
    }

    /// The kept text (the whole string unless [`SmallStr::is_cut`]).
    pub fn as_str(&self) -> &str {
        // Only ever filled from a &str cut at a char boundary.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// True when this holds exactly `s` (not a cut prefix of it); no UTF-8 check.
    #[inline]
    pub fn eq_str(&self, s: &str) -> bool {
        !self.is_cut() && self.as_bytes() == s.as_bytes()
    }

    /// True when the original string was longer than the capacity.
    pub fn is_cut(&self) -> bool {
        self.len_and_cut & CUT != 0
    }
}

impl Default for SmallStr {
    fn default() -> Self {
        SmallStr::EMPTY
    }
}

/// Renders like `{:?}` of the original string; a cut string ends in `…` after the quote.
impl fmt::Debug for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())?;
        if self.is_cut() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Display for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.is_cut() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// As its kept text and whether it was cut: what another engine worker needs to show it alike.
impl serde::Serialize for SmallStr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&(self.as_str(), self.is_cut()), serializer)
    }
}

impl<'de> serde::Deserialize<'de> for SmallStr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SmallStr, D::Error> {
        let (text, cut): (std::borrow::Cow<'de, str>, bool) = serde::Deserialize::deserialize(deserializer)?;
        let mut s = SmallStr::new(&text);
        if cut {
            s.len_and_cut |= CUT;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_kept_whole_and_render_like_debug() {
        let s = SmallStr::new("cpu ");
        assert_eq!(s.as_str(), "cpu ");
        assert!(!s.is_cut());
        assert_eq!(format!("{s:?}"), "\"cpu \"");
        assert_eq!(SmallStr::new("chunked_local_attention").as_str(), "chunked_local_attention");
    }

    #[test]
    fn long_strings_are_cut_at_a_char_boundary_and_say_so() {
        let long = "é".repeat(20); // 40 bytes
        let s = SmallStr::new(&long);
        assert!(s.is_cut());
        assert_eq!(s.as_str(), "é".repeat(11));
        assert!(!s.eq_str(&"é".repeat(11)), "a cut string equals nothing");
        assert_eq!(std::mem::size_of::<SmallStr>(), 24);
        assert!(format!("{s:?}").ends_with("\"…"));
    }

    #[test]
    fn a_small_string_round_trips_through_serde_cut_or_not() {
        for s in [SmallStr::new("cpu"), SmallStr::new(&"é".repeat(20)), SmallStr::EMPTY] {
            let json = serde_json::to_string(&s).expect("serializes");
            assert_eq!(serde_json::from_str::<SmallStr>(&json).expect("deserializes"), s, "{json}");
        }
    }
}
