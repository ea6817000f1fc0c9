//! Decode + normalize throughput on two streams, reported as events/s and bytes/s.
//!
//! - `kimi_k3`: the corpus's three Kimi-K3 workers (60 payloads: mamba and mla_attention GPU
//!   stores at 1536, cpu stores at 12288), at `--block-size 1536` under `fixed`. Large token
//!   arrays: bytes/s is the figure that matters.
//! - `small_gpu_blocks`: synthetic vLLM 0.24+ map-encoded batches of 16-token GPU blocks, 1-4
//!   blocks per store with chained parents, and evictions; many small events, so events/s is.
//!
//! Each stream is measured decoding and normalizing (`decode_and_normalize`) and normalizing
//! pre-decoded batches (`normalize_only`, the normalizer's own cost). Run:
//! `cargo bench -p kvscope-normalize -- --warm-up-time 1 --measurement-time 3`.

// Benchmark code: a failed unwrap aborts the measurement, with its location.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvscope_corpus::vectors::{EventSpec, HashSpec, encode_batch};
use kvscope_normalize::{Normalizer, Policy};
use kvscope_wire::{EventBatch, decode_batch};

/// One stream: (worker, seq, payload).
struct Stream {
    name: &'static str,
    block_size: u32,
    messages: Vec<(String, u64, Vec<u8>)>,
}

impl Stream {
    fn events(&self) -> u64 {
        self.messages.iter().map(|(_, _, p)| decode_batch(p).unwrap().events.len() as u64).sum()
    }

    fn bytes(&self) -> u64 {
        self.messages.iter().map(|(_, _, p)| p.len() as u64).sum()
    }
}

fn kimi_k3() -> Stream {
    let mut messages = Vec::new();
    for w in 0..kvscope_corpus::KIMI_K3_WORKERS {
        for m in kvscope_corpus::kimi_k3_stream(w) {
            messages.push((format!("w{w}"), m.seq, m.payload.to_vec()));
        }
    }
    // Interleave workers by seq, as they arrive.
    messages.sort_by_key(|(w, seq, _)| (*seq, w.clone()));
    Stream { name: "kimi_k3", block_size: 1536, messages }
}

/// Deterministic xorshift, so every run measures the same stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn small_gpu_blocks() -> Stream {
    const BATCHES: u64 = 2_000;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut live: Vec<u64> = Vec::new();
    let mut messages = Vec::new();
    for seq in 0..BATCHES {
        let mut events = Vec::new();
        // 1-3 stores per batch, each 1-4 blocks chained from a live block or a new root.
        for _ in 0..1 + rng.next() % 3 {
            let n = 1 + rng.next() % 4;
            let parent = (!live.is_empty() && !rng.next().is_multiple_of(4)).then(|| live[(rng.next() % live.len() as u64) as usize]);
            let hashes: Vec<u64> = (0..n).map(|_| rng.next()).collect();
            live.extend(&hashes);
            events.push(EventSpec {
                tag: "BlockStored".into(),
                hashes: hashes.into_iter().map(HashSpec::Unsigned).collect(),
                parent: parent.map(HashSpec::Unsigned),
                tokens: None,
                block_size: Some(16),
                medium: Some("GPU".into()),
                group_idx: Some(0),
                kind: Some("full_attention".into()),
                ..Default::default()
            });
        }
        // Evict the oldest blocks once the cache is "full".
        if live.len() > 4_096 {
            let evicted: Vec<u64> = live.drain(..1 + (rng.next() % 6) as usize).collect();
            events.push(EventSpec {
                tag: "BlockRemoved".into(),
                hashes: evicted.into_iter().map(HashSpec::Unsigned).collect(),
                parent: None,
                tokens: None,
                block_size: None,
                medium: Some("GPU".into()),
                group_idx: Some(0),
                kind: None,
                ..Default::default()
            });
        }
        let payload = encode_batch(1_700_000_000.0 + seq as f64, &events, Some(0), false).unwrap();
        messages.push(("w0".to_owned(), seq, payload));
    }
    Stream { name: "small_gpu_blocks", block_size: 16, messages }
}

fn decode_and_normalize(stream: &Stream) -> u64 {
    let mut n = Normalizer::new(stream.block_size, Policy::FIXED);
    let mut out = Vec::with_capacity(64);
    let mut applied = 0;
    for (worker, seq, payload) in &stream.messages {
        let id = n.source(worker, 0);
        out.clear();
        let batch = n.push_payload(id, *seq, payload, &mut out).unwrap();
        applied += out.iter().map(|v| u64::from(v.blocks_applied())).sum::<u64>();
        black_box(batch);
    }
    applied
}

fn normalize_only(stream: &Stream, batches: &[(String, u64, EventBatch)]) -> u64 {
    let mut n = Normalizer::new(stream.block_size, Policy::FIXED);
    let mut out = Vec::with_capacity(64);
    let mut applied = 0;
    for (worker, seq, batch) in batches {
        let id = n.source(worker, 0);
        out.clear();
        n.normalize_batch(id, *seq, batch, &mut out);
        applied += out.iter().map(|v| u64::from(v.blocks_applied())).sum::<u64>();
    }
    applied
}

fn bench(c: &mut Criterion) {
    let streams = [kimi_k3(), small_gpu_blocks()];
    let mut events = c.benchmark_group("events");
    for s in &streams {
        let decoded: Vec<(String, u64, EventBatch)> =
            s.messages.iter().map(|(w, seq, p)| (w.clone(), *seq, decode_batch(p).unwrap())).collect();
        events.throughput(Throughput::Elements(s.events()));
        events.bench_function(format!("{}/decode_and_normalize", s.name), |b| b.iter(|| decode_and_normalize(black_box(s))));
        events.bench_function(format!("{}/normalize_only", s.name), |b| b.iter(|| normalize_only(s, black_box(&decoded))));
    }
    events.finish();

    let mut bytes = c.benchmark_group("bytes");
    for s in &streams {
        bytes.throughput(Throughput::Bytes(s.bytes()));
        bytes.bench_function(format!("{}/decode_and_normalize", s.name), |b| b.iter(|| decode_and_normalize(black_box(s))));
    }
    bytes.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
