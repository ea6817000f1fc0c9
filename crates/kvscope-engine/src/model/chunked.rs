//! An append-only sequence that forgets its oldest elements, stored in fixed-size chunks.
//!
//! The page keeps millions of event records and timeline marks and drops the oldest past a
//! bound. In one `Vec` (or `VecDeque`) that costs twice: growth doubles the buffer and copies
//! every element (a 4-to-8-million-record step copied 190 MB at once and left 1 GB of wasm
//! memory reserved), and dropping from the front of a `Vec` moves every element kept. Here
//! the only buffer that grows is the newest chunk (at most [`CHUNK`] elements), and eviction
//! frees whole chunks, so every push and every eviction costs the same however much is kept,
//! and memory is what is kept plus at most one chunk.

use std::collections::VecDeque;
use std::ops::Index;

/// Elements per chunk: large enough that the chunk list stays short (300 chunks for 5 million
/// records), small enough that the newest chunk's growth never copies much.
pub const CHUNK: usize = 1 << 14;

#[derive(Clone, Debug)]
pub struct Chunked<T> {
    chunks: VecDeque<Vec<T>>,
    /// Elements already dropped from the first chunk.
    head: usize,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: VecDeque::new(), head: 0, len: 0 }
    }
}

impl<T> Chunked<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push(value),
            // A new chunk grows by doubling like any Vec, so a lane with a handful of marks
            // does not reserve a whole chunk; once full, its capacity is exactly CHUNK.
            _ => self.chunks.push_back(vec![value]),
        }
        self.len += 1;
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let j = i + self.head;
        self.chunks.get(j / CHUNK)?.get(j % CHUNK)
    }

    pub fn first(&self) -> Option<&T> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&T> {
        self.chunks.back()?.last()
    }

    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.chunks.back_mut()?.last_mut()
    }

    /// Forgets the `n` oldest elements (all of them if fewer), freeing every chunk emptied.
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.len -= n;
        self.head += n;
        while self.head >= CHUNK || (self.len == 0 && !self.chunks.is_empty()) {
            let Some(first) = self.chunks.pop_front() else { break };
            self.head = self.head.saturating_sub(first.len());
        }
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// The index of the first element for which `pred` is false, as [`slice::partition_point`]
    /// (the elements must be partitioned by `pred`).
    pub fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(&self[mid]) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        let head = self.head;
        self.chunks.iter().enumerate().flat_map(move |(k, c)| if k == 0 { &c[head..] } else { &c[..] })
    }

    /// Bytes reserved for elements, kept or not yet filled.
    pub fn capacity_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<T>()
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        self.get(i).unwrap_or_else(|| panic!("index {i} out of a chunked sequence of {}", self.len))
    }
}

impl<T> FromIterator<T> for Chunked<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut c = Chunked::default();
        for x in iter {
            c.push(x);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_indexes_searches_and_forgets_like_a_deque_across_chunk_edges() {
        let n = 3 * CHUNK + 17;
        let mut c: Chunked<u64> = (0..n as u64).collect();
        let mut model: VecDeque<u64> = (0..n as u64).collect();
        for drop in [0, 5, CHUNK - 5, 1, CHUNK, 2 * CHUNK] {
            c.drop_front(drop);
            model.drain(..drop.min(model.len()));
            assert_eq!(c.len(), model.len());
            assert_eq!(c.first(), model.front());
            assert_eq!(c.last(), model.back());
            assert!(c.iter().eq(model.iter()), "after dropping {drop}");
            for i in [0, 1, CHUNK - 1, CHUNK, c.len().saturating_sub(1)] {
                assert_eq!(c.get(i), model.get(i), "index {i} after dropping {drop}");
            }
            let probe = model.get(model.len() / 2).copied().unwrap_or(0);
            assert_eq!(c.partition_point(|&x| x < probe), model.partition_point(|&x| x < probe));
            c.push(n as u64);
            model.push_back(n as u64);
        }
        assert_eq!(c.get(c.len()), None);
    }

    #[test]
    fn eviction_frees_whole_chunks_so_memory_follows_what_is_kept() {
        let mut c: Chunked<u64> = (0..10 * CHUNK as u64).collect();
        assert_eq!(c.capacity_bytes(), 10 * CHUNK * 8, "full chunks reserve exactly CHUNK");
        c.drop_front(9 * CHUNK + 1);
        assert_eq!(c.capacity_bytes(), CHUNK * 8);
        c.drop_front(usize::MAX);
        assert!(c.is_empty());
        assert_eq!(c.capacity_bytes(), 0);
        c.push(7);
        assert_eq!((c.len(), c.first(), c.last()), (1, Some(&7), Some(&7)));
    }
}
