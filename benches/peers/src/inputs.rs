//! The benchmark inputs, built the same way for every host (criterion, wasm, msgspec).
//!
//! - `kimi_k3`: the corpus's three Kimi-K3 worker streams (vLLM 0.33.0, block size 1536; most
//!   bytes are token ids), read from `kvscope-corpus`.
//! - `small_gpu`: synthetic vLLM 0.33 map-layout batches of small GPU blocks: 16-token blocks,
//!   1-4 blocks per store, request chains with parents, and evictions.
//! - `cpu_offload`: synthetic vLLM 0.33 OffloadingConnector placeholders: `CPU` stores with one
//!   u64 hash, no tokens, block_size 0, and `CPU` removals. (The 0.13-0.23 form with bin hashes
//!   is left out on purpose: Dynamo cannot decode it, so there would be nothing to compare.)
//! - `sglang`: synthetic SGLang 0.5.23 batches: tagged-map events with signed int64 hashes, one
//!   16-token page per store, removals, `attn_dp_rank` nil.
//!
//! The synthetic streams are typed events encoded by `kvscope-encode` in vLLM 0.33.0's and
//! SGLang 0.5.23's layouts, whose bytes its corpus test checks against those releases'
//! payloads. Everything is deterministic (a fixed-seed splitmix64).

use std::borrow::Cow;

use kvscope_encode::release::{SGLANG_0_5_23, VLLM_0_33};
use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch};

/// One payload of a stream, with the sequence number it was published under.
#[derive(Debug, Clone)]
pub struct Payload {
    pub seq: u64,
    pub bytes: Cow<'static, [u8]>,
}

/// A named set of streams (one per worker), replayed in order.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Short name used in benchmark ids and BENCHMARKS.md.
    pub name: &'static str,
    pub about: &'static str,
    /// The `--block-size` a router would be configured with for this stream.
    pub block_size: u32,
    /// One stream per worker, in publish order.
    pub streams: Vec<Vec<Payload>>,
}

impl Workload {
    /// Every payload, stream by stream.
    pub fn payloads(&self) -> impl Iterator<Item = &Payload> {
        self.streams.iter().flatten()
    }

    pub fn payload_count(&self) -> usize {
        self.streams.iter().map(Vec::len).sum()
    }

    pub fn total_bytes(&self) -> usize {
        self.payloads().map(|p| p.bytes.len()).sum()
    }

    /// Events in the workload, as kvscope decodes them (every payload decodes).
    pub fn total_events(&self) -> usize {
        self.payloads().map(|p| kvscope_wire::decode_batch(&p.bytes).expect("benchmark inputs decode").events.len()).sum()
    }
}

/// All four workloads, in report order.
pub fn all() -> Vec<Workload> {
    vec![kimi_k3(), small_gpu(SYNTHETIC_BATCHES), cpu_offload(SYNTHETIC_BATCHES), sglang(SYNTHETIC_BATCHES)]
}

/// Batches per synthetic stream: a few thousand events, about a megabyte or less.
pub const SYNTHETIC_BATCHES: usize = 2000;

/// The corpus's Kimi-K3 streams (3 workers x 20 batches).
pub fn kimi_k3() -> Workload {
    let streams = (0..kvscope_corpus::KIMI_K3_WORKERS)
        .map(|w| kvscope_corpus::kimi_k3_stream(w).into_iter().map(|m| Payload { seq: m.seq, bytes: Cow::Borrowed(m.payload) }).collect())
        .collect();
    Workload {
        name: "kimi_k3",
        about: "corpus Kimi-K3 streams, vLLM 0.33.0, 3 workers x 20 batches, block_size 1536",
        block_size: 1536,
        streams,
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness

/// splitmix64: tiny, fast, and the same on every target.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// A token id over a `vocab`-sized vocabulary, skewed toward small ids (u^3).
    pub fn token(&mut self, vocab: u32) -> u32 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (u * u * u * vocab as f64) as u32
    }
}

const VOCAB: u32 = 151_936;
const TS0: f64 = 1_765_000_000.0;

// ---------------------------------------------------------------------------------------------
// Events

/// A vLLM 0.33 GPU store of full 16-token blocks, with per-block nil `extra_keys` as vLLM's
/// block pool writes them.
fn gpu_store(hashes: &[u64], parent: Option<u64>, tokens: Vec<u32>) -> Event {
    Stored::new(hashes.iter().map(|&h| Hash::U64(h)), 16)
        .parent(parent.map(Hash::U64))
        .tokens(tokens)
        .medium(Some("GPU"))
        .extra_keys_nil_per_block()
        .group_idx(Some(0))
        .kind(Some("full_attention"))
        .into()
}

/// A vLLM 0.24+ OffloadingConnector placeholder: one chunk hash, no tokens, block_size 0.
fn cpu_placeholder(hash: u64) -> Event {
    Stored::new([Hash::U64(hash)], 0).medium(Some("CPU")).group_idx(Some(0)).into()
}

fn vllm_remove(hashes: &[u64], medium: &str) -> Event {
    Removed::new(hashes.iter().map(|&h| Hash::U64(h))).medium(Some(medium)).group_idx(Some(0)).into()
}

/// An SGLang page store: signed int64 hashes, no group fields.
fn sglang_store(hash: i64, parent: Option<i64>, tokens: Vec<u32>) -> Event {
    Stored::new([Hash::I64(hash)], 16).parent(parent.map(Hash::I64)).tokens(tokens).medium(Some("GPU")).into()
}

fn sglang_remove(hashes: &[i64]) -> Event {
    Removed::new(hashes.iter().map(|&h| Hash::I64(h))).medium(Some("GPU")).into()
}

/// A batch in vLLM 0.33.0's layout (`data_parallel_rank` 0) or SGLang 0.5.23's (nil).
fn payload(ts: f64, events: Vec<Event>, sglang: bool) -> Vec<u8> {
    let (layout, dp_rank) = if sglang { (&SGLANG_0_5_23.layout, None) } else { (&VLLM_0_33.layout, Some(0)) };
    encode_batch(layout, &Batch { ts, events, dp_rank }).expect("the synthetic events fit their release")
}

// ---------------------------------------------------------------------------------------------
// Synthetic streams

fn single_stream(payloads: Vec<Vec<u8>>) -> Vec<Vec<Payload>> {
    vec![payloads.into_iter().enumerate().map(|(i, b)| Payload { seq: i as u64, bytes: Cow::Owned(b) }).collect()]
}

/// Small GPU blocks: per batch 1-6 events; a store has 1-4 blocks of 16 tokens and continues the
/// current request chain (parent = its last hash) 70% of the time; once 64 blocks are live, 30%
/// of events evict the 1-4 oldest.
pub fn small_gpu(batches: usize) -> Workload {
    let mut rng = Rng::new(0x5eed_0001);
    let mut live: std::collections::VecDeque<u64> = Default::default();
    let mut last: Option<u64> = None;
    let mut payloads = Vec::with_capacity(batches);
    for b in 0..batches {
        let n = rng.range(1, 6) as usize;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            if live.len() > 64 && rng.range(0, 9) < 3 {
                let k = rng.range(1, 4) as usize;
                let gone: Vec<u64> = live.drain(..k).collect();
                events.push(vllm_remove(&gone, "GPU"));
                continue;
            }
            let blocks = rng.range(1, 4) as usize;
            let hashes: Vec<u64> = (0..blocks).map(|_| rng.next_u64()).collect();
            let toks: Vec<u32> = (0..16 * blocks).map(|_| rng.token(VOCAB)).collect();
            let parent = if rng.range(0, 9) < 7 { last } else { None };
            last = hashes.last().copied();
            events.push(gpu_store(&hashes, parent, toks));
            live.extend(hashes);
        }
        payloads.push(payload(TS0 + b as f64 * 0.01, events, false));
    }
    Workload {
        name: "small_gpu",
        about: "synthetic vLLM 0.33 map batches: 16-token GPU blocks, 1-4 blocks per store, evictions",
        block_size: 16,
        streams: single_stream(payloads),
    }
}

/// CPU-offload placeholders (vLLM 0.24+ OffloadingConnector default): per batch 1-8 events;
/// 75% are `CPU` stores of one chunk hash with no tokens and block_size 0, 25% `CPU` removals of
/// the oldest stored chunk.
pub fn cpu_offload(batches: usize) -> Workload {
    let mut rng = Rng::new(0x5eed_0002);
    let mut live: std::collections::VecDeque<u64> = Default::default();
    let mut payloads = Vec::with_capacity(batches);
    for b in 0..batches {
        let n = rng.range(1, 8) as usize;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            if !live.is_empty() && rng.range(0, 3) == 0 {
                let gone = live.pop_front().expect("non-empty");
                events.push(vllm_remove(&[gone], "CPU"));
                continue;
            }
            let h = rng.next_u64();
            events.push(cpu_placeholder(h));
            live.push_back(h);
        }
        payloads.push(payload(TS0 + b as f64 * 0.01, events, false));
    }
    Workload {
        name: "cpu_offload",
        about: "synthetic vLLM 0.33 CPU-offload placeholders: one-hash CPU stores (no tokens, block_size 0) and CPU removals",
        block_size: 16,
        streams: single_stream(payloads),
    }
}

/// SGLang map events: per batch 1-8 events; a store is one 16-token page with a signed hash
/// chained to the previous page 80% of the time; 25% of events (once 32 pages are live) remove
/// the 1-2 oldest pages.
pub fn sglang(batches: usize) -> Workload {
    let mut rng = Rng::new(0x5eed_0003);
    let mut live: std::collections::VecDeque<i64> = Default::default();
    let mut last: Option<i64> = None;
    let mut payloads = Vec::with_capacity(batches);
    for b in 0..batches {
        let n = rng.range(1, 8) as usize;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            if live.len() > 32 && rng.range(0, 3) == 0 {
                let k = rng.range(1, 2) as usize;
                let gone: Vec<i64> = live.drain(..k).collect();
                events.push(sglang_remove(&gone));
                continue;
            }
            let h = rng.next_u64() as i64;
            let toks: Vec<u32> = (0..16).map(|_| rng.token(VOCAB)).collect();
            let parent = if rng.range(0, 9) < 8 { last } else { None };
            events.push(sglang_store(h, parent, toks));
            last = Some(h);
            live.push_back(h);
        }
        payloads.push(payload(TS0 + b as f64 * 0.01, events, true));
    }
    Workload {
        name: "sglang",
        about: "synthetic SGLang 0.5.23 batches: map events, signed hashes, one 16-token page per store, removals",
        block_size: 16,
        streams: single_stream(payloads),
    }
}

#[cfg(test)]
mod tests {
    //! The streams have the shape they advertise. That their bytes are what the releases write
    //! is `kvscope-encode`'s corpus test.

    use kvscope_wire::{KvEvent, decode_batch};

    use super::*;

    #[test]
    fn synthetic_streams_decode_and_have_the_advertised_shape() {
        for w in all() {
            assert!(w.payload_count() > 0 && w.total_events() > w.payload_count(), "{}", w.name);
            for p in w.payloads() {
                let batch = decode_batch(&p.bytes).unwrap_or_else(|e| panic!("{}: {e}", w.name));
                for e in &batch.events {
                    if let KvEvent::BlockStored(s) = e {
                        match w.name {
                            "small_gpu" => {
                                assert!((1..=4).contains(&s.block_hashes.len()));
                                assert_eq!(s.token_ids.count as usize, 16 * s.block_hashes.len());
                            }
                            "cpu_offload" => {
                                assert_eq!((s.block_size, s.token_ids.count), (Some(0), 0))
                            }
                            "sglang" => assert_eq!(s.block_hashes.len(), 1),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}
