//! Decode and decode+normalize throughput: kvscope, Dynamo 1.6.1, and a skip-only floor.
//!
//! For each workload of `kvscope_peer_bench::inputs` (kimi_k3, small_gpu, cpu_offload, sglang),
//! one iteration processes every payload of the workload once, stream by stream:
//!
//! - `kvscope/decode`: `kvscope_wire::decode_batch`.
//! - `kvscope/decode+normalize`: `kvscope_normalize::Normalizer::push_payload` under policy
//!   `fixed` (decode, then one verdict per event), a fresh normalizer per iteration.
//! - `kvscope/decode+normalize-streaming`: `Normalizer::push_payload_with`, the server's path
//!   (each event classified as it is decoded, no vector of events or verdicts).
//! - `dynamo/decode`: `dynamo_kv_router::zmq_wire::decode_event_batch`.
//! - `dynamo/decode+normalize`: decode, then `ZmqEventNormalizer::normalize` per event, as the
//!   standalone indexer's listener does (a fresh normalizer per iteration). This includes the
//!   XXH3 hash of every published block's tokens, which Dynamo's radix tree keys on.
//! - `floor/skip`: `kvscope_wire::skip_value`, a walk over every msgpack value that builds
//!   nothing: close to the least any decoder of these bytes can do.
//!
//! Throughput is reported in events; scripts/bench.sh turns the same timings into MB/s.

// Benchmark code: a failed expect aborts the measurement, with its location.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvscope_normalize::{Normalizer, Policy};
use kvscope_peer_bench::dynamo::{self, DynamoListener};
use kvscope_peer_bench::inputs::{self, Workload};

/// One pass of kvscope's decode+normalize over every stream of `w`, a fresh normalizer per pass.
fn kvscope_pass(w: &Workload, policy: Policy, verdicts: &mut Vec<kvscope_normalize::Verdict>) {
    let mut n = Normalizer::new(w.block_size, policy);
    for (worker, stream) in w.streams.iter().enumerate() {
        let source = n.source(&format!("w{worker}"), 0);
        for p in stream {
            verdicts.clear();
            let batch = n.push_payload(source, p.seq, black_box(&p.bytes), verdicts).expect("inputs decode");
            black_box((&batch, &*verdicts));
        }
    }
}

/// [`kvscope_pass`] through the streaming path.
fn kvscope_streaming_pass(w: &Workload, policy: Policy) {
    let mut n = Normalizer::new(w.block_size, policy);
    for (worker, stream) in w.streams.iter().enumerate() {
        let source = n.source(&format!("w{worker}"), 0);
        for p in stream {
            let header = n
                .push_payload_with(source, p.seq, black_box(&p.bytes), |e, v| {
                    black_box((e, v));
                })
                .expect("inputs decode");
            black_box(header);
        }
    }
}

fn bench_workload(c: &mut Criterion, w: &Workload) {
    let events = w.total_events() as u64;
    let mut group = c.benchmark_group(w.name);
    group.throughput(Throughput::Elements(events));

    group.bench_function("kvscope/decode", |b| {
        b.iter(|| {
            for p in w.payloads() {
                black_box(kvscope_wire::decode_batch(black_box(&p.bytes)).expect("inputs decode"));
            }
        })
    });

    let mut verdicts = Vec::with_capacity(64);
    group.bench_function("kvscope/decode+normalize", |b| b.iter(|| kvscope_pass(w, Policy::FIXED, &mut verdicts)));
    group.bench_function("kvscope/decode+normalize-streaming", |b| b.iter(|| kvscope_streaming_pass(w, Policy::FIXED)));
    // The preset that reproduces Dynamo 1.6.1, once kvscope-normalize has it (issue 5).
    if let Ok(preset) = "dynamo-1.6.1".parse::<Policy>() {
        group.bench_function("kvscope-dynamo-preset/decode+normalize", |b| b.iter(|| kvscope_pass(w, preset, &mut verdicts)));
    }

    group.bench_function("dynamo/decode", |b| {
        b.iter(|| {
            for p in w.payloads() {
                black_box(dynamo::decode(black_box(&p.bytes)).expect("inputs decode"));
            }
        })
    });

    group.bench_function("dynamo/decode+normalize", |b| {
        b.iter(|| {
            for (worker, stream) in w.streams.iter().enumerate() {
                let mut listener = DynamoListener::new(worker as u64, 0, w.block_size);
                for p in stream {
                    black_box(listener.decode_and_normalize(p.seq, black_box(&p.bytes)));
                }
            }
        })
    });

    group.bench_function("floor/skip", |b| {
        b.iter(|| {
            for p in w.payloads() {
                black_box(kvscope_wire::skip_value(black_box(&p.bytes), 0, 32).expect("inputs walk"));
            }
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    for w in inputs::all() {
        // Dynamo must accept every input, or the comparison would time an error path.
        for p in w.payloads() {
            dynamo::decode(&p.bytes).unwrap_or_else(|e| panic!("{}: Dynamo rejects an input: {e}", w.name));
        }
        bench_workload(c, &w);
    }
}

criterion_group! {
    name = decode;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = benches
}
criterion_main!(decode);
