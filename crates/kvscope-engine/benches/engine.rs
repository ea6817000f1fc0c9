//! Where the dashboard's engine worker spends a frame, against decoding and normalizing the same
//! bytes, measured in one run (issue 22: "measure the engine worker alone").
//!
//! Per stream (the Kimi-K3 incident, 3 workers of 43-64 KB batches, and a synthetic 16-worker
//! fleet of small events), criterion times one pass over every frame of:
//!
//! - `decode`: `kvscope_wire::decode_each`, events handed to a sink that counts them;
//! - `normalize`: decode and one policy's normalizer, the figure table 1's wasm bench reports;
//! - `engine`: the worker's [`Engine`] applying the server's WebSocket messages as the host does
//!   (`apply_server_message`: protocol decode, both policies, trees, timeline marks, retention,
//!   the router's index under both policies), without an event plane;
//! - `engine_router`: the same with one event-plane source in the hello and, after each batch,
//!   the envelope its worker's Dynamo 1.6.1 relay publishes there, so the relay's prediction and
//!   the reconciliation run too, as `kvscope demo` runs by default;
//! - `index_truth`, `index_a`, `index_a_b`: the router's index model alone (every frame decoded
//!   into a `Decoded`, the engines' truth with its tokens hashes, then no policy's index, policy
//!   A's, both): what a shard that models an index pays for the whole fleet; `index_a_b_prepared`:
//!   both given every frame decoded and its tokens hashed beforehand;
//! - `engine_router_2_shards`: the same stream through two shards' engines on two threads
//!   (`kvscope_engine::model::shard`), each reading every message, applying its own workers'
//!   and modelling one policy's index of every worker; `engine_router_shard_0_of_2` and
//!   `..._1_of_2`: each alone, on one thread;
//! - `summarize`: one summary of the loaded engine, as a flush makes it (10 a second at most).
//!
//! ```text
//! cargo bench -p kvscope-engine --bench engine
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod streams;

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use kvscope_engine::coordinator::InProcess;
use kvscope_engine::engine::Engine;
use kvscope_engine::model::shard::Shard;
use kvscope_engine_protocol::ViewQuery;
use kvscope_engine_protocol::settings::Settings;
use kvscope_index::{IndexConfig, IndexModel, IndexSourceId};
use kvscope_normalize::{Normalizer, Policy};
use kvscope_router::TokensHashes;
use streams::{Count, Stream, fleet16, kimi};

fn loaded(stream: &Stream, messages: &[Vec<u8>], event_plane: bool) -> Engine {
    loaded_shard(stream, messages, event_plane, Shard::ALL)
}

fn loaded_shard(stream: &Stream, messages: &[Vec<u8>], event_plane: bool, shard: Shard) -> Engine {
    let mut e = Engine::shard(Settings::default(), shard);
    e.apply_server_message(&stream.hello(event_plane), 0.0);
    for m in messages {
        e.apply_server_message(m, 0.0);
    }
    e
}

/// The router's index model alone under `policies` (none: the engines' truth only), with a
/// source per worker of the stream.
fn index_model(stream: &Stream, policies: &[Policy]) -> (IndexModel, Vec<IndexSourceId>) {
    let mut m = IndexModel::new(IndexConfig::sides(stream.block_size, policies));
    let ids = (0..stream.workers).map(|i| m.add_source(&format!("{i}:0"), &i.to_string(), 0)).collect();
    (m, ids)
}

fn engine_costs(c: &mut Criterion) {
    for stream in [kimi(), fleet16()] {
        let (messages, with_plane) = (stream.messages(false), stream.messages(true));
        println!(
            "BENCH engine_stream {{\"stream\":\"{}\",\"workers\":{},\"frames\":{},\"events\":{},\"bytes\":{},\"plane_frames\":{}}}",
            stream.name,
            stream.workers,
            stream.frames.len(),
            stream.events,
            stream.bytes(),
            with_plane.len() - messages.len()
        );
        let mut g = c.benchmark_group(format!("engine_{}", stream.name));
        g.sample_size(10);
        g.throughput(Throughput::Elements(stream.events));
        g.bench_function("decode", |b| {
            b.iter(|| {
                let mut count = Count(0);
                for (_, _, payload) in &stream.frames {
                    let _ = kvscope_wire::decode_each(payload, &mut count);
                }
                black_box(count.0)
            })
        });
        for (name, policies) in
            [("index_truth", &[][..]), ("index_a", &[Policy::LEGACY][..]), ("index_a_b", &[Policy::LEGACY, Policy::FIXED][..])]
        {
            g.bench_function(name, |b| {
                b.iter(|| {
                    let (mut m, ids) = index_model(&stream, policies);
                    for (source, seq, payload) in &stream.frames {
                        let d = kvscope_wire::Decoded::new(payload);
                        let _ = m.push_decoded(ids[*source as usize], *seq, payload, &d, &mut TokensHashes::default(), false);
                    }
                    black_box(m.approx_bytes())
                })
            });
        }
        // Both indexes given each frame decoded and its tokens hashed elsewhere: what the shard
        // that models them would pay if the other shards handed it their workers' frames so.
        let mut prepared: Vec<(kvscope_wire::Decoded, TokensHashes)> = {
            let (mut m, ids) = index_model(&stream, &[]);
            let prepare = |(source, seq, payload): &(u32, u64, Vec<u8>)| {
                let (d, mut h) = (kvscope_wire::Decoded::new(payload), TokensHashes::default());
                let _ = m.push_decoded(ids[*source as usize], *seq, payload, &d, &mut h, false);
                (d, h)
            };
            stream.frames.iter().map(prepare).collect()
        };
        g.bench_function("index_a_b_prepared", |b| {
            b.iter(|| {
                let (mut m, ids) = index_model(&stream, &[Policy::LEGACY, Policy::FIXED]);
                for ((source, seq, payload), (d, h)) in stream.frames.iter().zip(prepared.iter_mut()) {
                    let _ = m.push_decoded(ids[*source as usize], *seq, payload, d, h, false);
                }
                black_box(m.approx_bytes())
            })
        });
        g.bench_function("normalize", |b| {
            b.iter(|| {
                let mut n = Normalizer::new(stream.block_size, Policy::FIXED);
                let ids: Vec<_> = (0..stream.workers).map(|i| n.source(&i.to_string(), 0)).collect();
                let mut events = 0u64;
                for (source, seq, payload) in &stream.frames {
                    let _ = n.push_payload_with(ids[*source as usize], *seq, payload, |_, _| events += 1);
                }
                black_box(events)
            })
        });
        g.bench_function("engine", |b| b.iter(|| black_box(loaded(&stream, &messages, false))));
        g.bench_function("engine_router", |b| b.iter(|| black_box(loaded(&stream, &with_plane, true))));
        // Two shards on two threads, each reading every message and applying its own workers'.
        g.bench_function("engine_router_2_shards", |b| {
            let (stream, messages) = (&stream, &with_plane);
            b.iter(|| {
                std::thread::scope(|scope| {
                    let shards: Vec<_> = (0..2)
                        .map(|index| {
                            scope.spawn(move || loaded_shard(stream, messages, true, Shard { index, count: 2 }).model().position())
                        })
                        .collect();
                    black_box(shards.into_iter().map(|s| s.join().expect("a shard")).sum::<u64>())
                })
            })
        });
        for index in 0..2 {
            g.bench_function(format!("engine_router_shard_{index}_of_2"), |b| {
                b.iter(|| black_box(loaded_shard(&stream, &with_plane, true, Shard { index, count: 2 }).model().position()))
            });
        }
        g.bench_function("summarize", |b| {
            b.iter_batched(
                || {
                    let mut e = InProcess::one(Settings::default());
                    e.apply_server_message(&stream.hello(true), 0.0);
                    for m in &with_plane {
                        e.apply_server_message(m, 0.0);
                    }
                    e.set_view(ViewQuery { canvas_width: 1200.0, device_pixel_ratio: 1.0, ..e.coordinator.query().clone() });
                    e
                },
                |mut e| black_box(e.summarize(1_000.0, true).map(|(s, _)| s.seq)),
                criterion::BatchSize::LargeInput,
            )
        });
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    engine_costs(&mut c);
    c.final_summary();
}
