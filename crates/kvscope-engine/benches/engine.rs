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
//! - `engine_router`: the same with one event-plane source in the hello, so the relay's
//!   prediction and the reconciliation run too, as `kvscope demo` runs by default;
//! - `summarize`: one summary of the loaded engine, as a flush makes it (10 a second at most).
//!
//! ```text
//! cargo bench -p kvscope-engine --bench engine
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use kvscope_engine::engine::Engine;
use kvscope_engine_protocol::ViewQuery;
use kvscope_engine_protocol::settings::Settings;
use kvscope_normalize::{Normalizer, Policy};
use kvscope_protocol as proto;
use kvscope_wire::{EventSink, KvEvent};

/// A recorded stream: per frame (source, seq, payload), and the same frames as the server
/// sends them.
struct Stream {
    name: &'static str,
    workers: u32,
    block_size: u32,
    frames: Vec<(u32, u64, Vec<u8>)>,
    events: u64,
}

impl Stream {
    fn bytes(&self) -> u64 {
        self.frames.iter().map(|f| f.2.len() as u64).sum()
    }

    fn hello(&self, event_plane: bool) -> Vec<u8> {
        let mut sources: Vec<proto::SourceInfo> = (0..self.workers)
            .map(|i| proto::SourceInfo::engine(i, &i.to_string(), 0, &format!("tcp://127.0.0.1:{}", 5557 + i), None))
            .collect();
        if event_plane {
            sources.push(proto::SourceInfo::event_plane(self.workers, "nats://127.0.0.1:4222", Some("namespace.>".into())));
        }
        proto::encode(&proto::Message::Hello(proto::Hello {
            protocol_version: proto::PROTOCOL_VERSION,
            server_version: "bench".into(),
            mode: proto::ServerMode::Demo,
            mode_detail: self.name.into(),
            sources,
            defaults: proto::Defaults {
                block_size: self.block_size,
                policy_a: "legacy".into(),
                policy_b: "fixed".into(),
                relay_policy: "dynamo-1.6.1".into(),
            },
            history_bytes: 1 << 20,
            client_queue_bytes: 1 << 20,
            started_unix_nanos: 0,
            discovery: Vec::new(),
        }))
    }

    /// The frames as WebSocket messages, 10 ms apart per round of workers.
    fn messages(&self) -> Vec<Vec<u8>> {
        self.frames
            .iter()
            .enumerate()
            .map(|(i, (source, seq, payload))| {
                proto::encode(&proto::Message::Frame(proto::Frame {
                    source: *source,
                    seq: *seq,
                    recv_time_nanos: 1_000_000_000 + (i as u64 / u64::from(self.workers)) * 10_000_000,
                    replayed: false,
                    topic: b"kv-events".to_vec(),
                    payload: payload.clone(),
                }))
            })
            .collect()
    }
}

/// Kimi-K3's three workers, interleaved batch by batch.
fn kimi() -> Stream {
    let streams: Vec<_> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(kvscope_corpus::kimi_k3_stream).collect();
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut frames = Vec::new();
    for i in 0..longest {
        for (w, s) in streams.iter().enumerate() {
            if let Some(m) = s.get(i) {
                frames.push((w as u32, m.seq, m.payload.to_vec()));
            }
        }
    }
    let events = frames.iter().map(|f| kvscope_wire::decode_batch(&f.2).map_or(0, |b| b.events.len() as u64)).sum();
    Stream { name: "kimi_k3", workers: kvscope_corpus::KIMI_K3_WORKERS, block_size: 1536, frames, events }
}

/// 16 synthetic workers, their batches interleaved round by round.
fn fleet16() -> Stream {
    let batches = kvscope_encode::synthetic::fleet(16, 200).unwrap();
    let events = batches.iter().map(|b| u64::from(b.events)).sum();
    let mut frames: Vec<(u32, u64, Vec<u8>)> = batches.into_iter().map(|b| (b.worker, b.seq, b.payload)).collect();
    frames.sort_by_key(|f| (f.1, f.0));
    Stream { name: "fleet16", workers: 16, block_size: 16, frames, events }
}

struct Count(u64);

impl EventSink for Count {
    fn event(&mut self, _: u32, _: &KvEvent) {
        self.0 += 1;
    }
}

fn loaded(stream: &Stream, messages: &[Vec<u8>], event_plane: bool) -> Engine {
    let mut e = Engine::new(Settings::default());
    e.apply_server_message(&stream.hello(event_plane), 0.0);
    for m in messages {
        e.apply_server_message(m, 0.0);
    }
    e
}

fn engine_costs(c: &mut Criterion) {
    for stream in [kimi(), fleet16()] {
        let messages = stream.messages();
        println!(
            "BENCH engine_stream {{\"stream\":\"{}\",\"workers\":{},\"frames\":{},\"events\":{},\"bytes\":{}}}",
            stream.name,
            stream.workers,
            stream.frames.len(),
            stream.events,
            stream.bytes()
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
        g.bench_function("engine_router", |b| b.iter(|| black_box(loaded(&stream, &messages, true))));
        g.bench_function("summarize", |b| {
            b.iter_batched(
                || {
                    let mut e = loaded(&stream, &messages, true);
                    e.set_view(ViewQuery { canvas_width: 1200.0, device_pixel_ratio: 1.0, ..e.query().clone() });
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
