//! [`Hashes`]: an event's block hashes, without a heap allocation for the common one or two.
//!
//! Most stores and removals name one block, and a `Vec` per event was a third of the decode
//! time of small events. A newtype rather than a bare `SmallVec`, so that the type compares with
//! arrays and vectors as the `Vec` it replaced did, and a later change of representation stays
//! inside this crate.

use std::fmt;
use std::ops::{Deref, DerefMut};

use smallvec::SmallVec;

use crate::event::BlockHash;

/// An event's block hashes: up to two inline, on the heap beyond. Reads as a `[BlockHash]`.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Hashes(SmallVec<[BlockHash; 2]>);

impl Hashes {
    pub fn new() -> Self {
        Hashes(SmallVec::new())
    }

    /// Room for `n` hashes (inline up to two).
    pub fn with_capacity(n: usize) -> Self {
        Hashes(SmallVec::with_capacity(n))
    }

    #[inline]
    pub fn push(&mut self, hash: BlockHash) {
        self.0.push(hash);
    }
}

impl Deref for Hashes {
    type Target = [BlockHash];
    fn deref(&self) -> &[BlockHash] {
        &self.0
    }
}

impl DerefMut for Hashes {
    fn deref_mut(&mut self) -> &mut [BlockHash] {
        &mut self.0
    }
}

impl fmt::Debug for Hashes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<BlockHash> for Hashes {
    fn from_iter<I: IntoIterator<Item = BlockHash>>(iter: I) -> Self {
        Hashes(iter.into_iter().collect())
    }
}

impl From<Vec<BlockHash>> for Hashes {
    fn from(v: Vec<BlockHash>) -> Self {
        Hashes(SmallVec::from_vec(v))
    }
}

impl<const N: usize> From<[BlockHash; N]> for Hashes {
    fn from(v: [BlockHash; N]) -> Self {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Hashes {
    type Item = &'a BlockHash;
    type IntoIter = std::slice::Iter<'a, BlockHash>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut Hashes {
    type Item = &'a mut BlockHash;
    type IntoIter = std::slice::IterMut<'a, BlockHash>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<const N: usize> PartialEq<[BlockHash; N]> for Hashes {
    fn eq(&self, other: &[BlockHash; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<[BlockHash]> for Hashes {
    fn eq(&self, other: &[BlockHash]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[BlockHash]> for Hashes {
    fn eq(&self, other: &&[BlockHash]) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<BlockHash>> for Hashes {
    fn eq(&self, other: &Vec<BlockHash>) -> bool {
        **self == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_hashes_stay_inline_and_compare_like_a_vec() {
        let mut h = Hashes::new();
        h.push(BlockHash(1));
        h.push(BlockHash(2));
        assert!(!h.0.spilled());
        assert_eq!(h, [BlockHash(1), BlockHash(2)]);
        assert_eq!(h, vec![BlockHash(1), BlockHash(2)]);
        h.push(BlockHash(3));
        assert_eq!(h.len(), 3);
        assert_eq!(format!("{h:?}"), "[0x0000000000000001, 0x0000000000000002, 0x0000000000000003]");
        assert_eq!(std::mem::size_of::<Hashes>(), 24);
    }
}
