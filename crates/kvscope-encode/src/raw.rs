//! Bytes no release writes: malformed or unusual batches for decoder tests, value by value.
//!
//! Everything well-formed goes through [`crate::encode_batch`] and a layout; this is for the
//! cases that are about the shape itself (a 1-element batch, a negative `lora_id` at array
//! position 5, a bin where a string belongs). Each call is one of rmp's writers, so markers are
//! msgpack's shortest, as msgspec's are.

use rmp::encode::{self as enc, ByteBuf};

/// Appends msgpack values to a byte vector; every method chains.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    // rmp's ByteBuf cannot fail (its error type is Infallible): every `let Ok(_)` is irrefutable.
    buf: ByteBuf,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf.into_vec()
    }

    pub fn nil(&mut self) -> &mut Self {
        let Ok(_) = enc::write_nil(&mut self.buf);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        let Ok(_) = enc::write_bool(&mut self.buf, v);
        self
    }

    /// The shortest unsigned form.
    pub fn uint(&mut self, v: u64) -> &mut Self {
        let Ok(_) = enc::write_uint(&mut self.buf, v);
        self
    }

    /// The shortest form: unsigned markers for non-negative values, signed ones below zero.
    pub fn int(&mut self, v: i64) -> &mut Self {
        let Ok(_) = enc::write_sint(&mut self.buf, v);
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        let Ok(_) = enc::write_f64(&mut self.buf, v);
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        let Ok(_) = enc::write_str(&mut self.buf, s);
        self
    }

    pub fn bin(&mut self, b: &[u8]) -> &mut Self {
        let Ok(_) = enc::write_bin(&mut self.buf, b);
        self
    }

    #[allow(clippy::expect_used, reason = "a test input of 2^32 items is a bug in the test")]
    pub fn array(&mut self, len: usize) -> &mut Self {
        let Ok(_) = enc::write_array_len(&mut self.buf, u32::try_from(len).expect("at most u32::MAX items"));
        self
    }

    #[allow(clippy::expect_used, reason = "a test input of 2^32 entries is a bug in the test")]
    pub fn map(&mut self, len: usize) -> &mut Self {
        let Ok(_) = enc::write_map_len(&mut self.buf, u32::try_from(len).expect("at most u32::MAX entries"));
        self
    }

    /// Bytes already encoded, spliced in as they are.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.as_mut_vec().extend_from_slice(bytes);
        self
    }
}

/// The hostile frame of the streams work: a valid 3-element batch of `n` one-element events
/// (`[""]`, an unknown empty tag, 2 bytes each), then dp_rank 0. 6 million of them are 12 MB;
/// a decoder that kept a few hundred bytes per event would need gigabytes.
pub fn unknown_event_flood(n: usize) -> Vec<u8> {
    let mut w = Writer::new();
    w.array(3).f64(1.0).array(n);
    for _ in 0..n {
        w.array(1).str("");
    }
    w.uint(0);
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_use_the_smallest_marker() {
        let mut w = Writer::new();
        w.uint(5).uint(200).uint(70_000).uint(u64::MAX).int(-1).int(-100).int(i64::MIN).int(300);
        assert_eq!(
            w.into_bytes(),
            [
                &[5u8][..],
                &[0xcc, 200],
                &[0xce, 0, 1, 0x11, 0x70],
                &[0xcf, 255, 255, 255, 255, 255, 255, 255, 255],
                &[0xff],
                &[0xd0, 0x9c],
                &[0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0],
                &[0xcd, 0x01, 0x2c],
            ]
            .concat()
        );
    }
}
