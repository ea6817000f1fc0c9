//! A hasher for block hashes.
//!
//! Block hashes are already hash values (vLLM's sha256/xxhash, SGLang's int64), but not all of
//! them are well spread: LMCache chunk hashes and test streams are small integers, and vLLM
//! 0.9's builtin `hash()` of small ints is the int itself. A folded 128-bit multiply spreads any
//! u64 over both the low bits (bucket index) and the high bits (hashbrown's control byte) for one
//! multiplication, where SipHash (the std default) costs ~20 ns per lookup at a million blocks.
//! Not DoS-resistant: an engine that wanted to slow this viewer down could; it cannot corrupt it.

use std::hash::{BuildHasherDefault, Hasher};

/// Hashes one `u64` with a folded multiply.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockHasher(u64);

impl Hasher for BlockHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        const K: u128 = 0x9E37_79B9_7F4A_7C15;
        let p = u128::from(x ^ self.0) * K;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }

    // Composite keys ((worker, rank), tier, hash) hash their small fields one multiply each,
    // not through `write`'s byte chunks.
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write_isize(&mut self, x: isize) {
        self.write_u64(x as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; keep any other use correct, if slower.
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
}

/// `HashMap<u64, _, BuildBlockHasher>`.
pub type BuildBlockHasher = BuildHasherDefault<BlockHasher>;
