//! Relay benchmark: ZMQ in -> WebSocket out, on loopback, against raw ZMQ PUB -> SUB measured in
//! the same run.
//!
//! `cargo bench -p kvscope --bench relay` (set `RELAY_BENCH_QUICK=1` for a shorter run).
//!
//! For each payload size (a 16-token vLLM store, 244 B, and a Kimi-K3 batch, 43 KB) it measures,
//! with the server's default 10 ms batch window:
//! - burst: N frames published as fast as the sockets take them; frames/s and bytes/s delivered
//!   to the receiving end (raw SUB; 1 and 10 WebSocket clients through `kvscope`), and the bytes
//!   the server copied per frame per client to fan them out (its own counters: into shared
//!   batches, and into each socket's buffer);
//! - a sweep of paced rates: what each client received, frames lost (lag notices), and the
//!   latency from the publisher's send to the client's receipt, p50 and p99. Added latency is
//!   the relay's minus raw ZMQ's at the same rate.
//!
//! Everything runs in one process on one runtime (publisher, server, clients), so on a 2-core
//! machine the clients compete with the server for CPU: the figures are a floor. The server is
//! the real one (`kvscope::app::App`, intake, classification under two policies, relay, axum).
//! Clients decode every message with `kvscope_protocol::decode`, as the browser does.

// Benchmark code: a failed unwrap aborts the measurement, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use kvscope::app::{App, AppConfig, Feed};
use kvscope::demo::engine::Engine;
use kvscope::demo::payload::{Batch, Hash, Release, Stored, encode_batch};
use kvscope::http::HttpConfig;
use kvscope::sources::Source;
use kvscope_protocol as proto;
use tokio_tungstenite::tungstenite::Message;
use zeromq::{Socket, SocketRecv, SubSocket};

fn small_payload() -> Bytes {
    let e = Stored::new([Hash::U64(0x1234_5678_9abc_def0)], 16)
        .parent(Some(Hash::U64(0x0fed_cba9_8765_4321)))
        .tokens((0..16).map(|i| 1000 + i * 37))
        .medium(Some("GPU"))
        .extra_keys_nil_per_block()
        .group_idx(Some(0))
        .kind(Some("full_attention"));
    Bytes::from(encode_batch(Release::Vllm033, &Batch { ts: 1.7e9, events: vec![e.into()], dp_rank: Some(0) }).unwrap())
}

fn kimi_payload() -> Bytes {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kv-events/vllm-0.33.0/kimi_k3_agg-w0-09.msgpack");
    Bytes::from(std::fs::read(path).expect("corpus payload"))
}

/// Send times, indexed by seq, in nanoseconds since `t0`.
struct Clock {
    t0: Instant,
    sent: Vec<AtomicU64>,
}

impl Clock {
    fn new(n: usize) -> Arc<Clock> {
        Arc::new(Clock { t0: Instant::now(), sent: (0..n).map(|_| AtomicU64::new(0)).collect() })
    }
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
}

#[derive(Default, Clone, Debug)]
struct Received {
    frames: u64,
    bytes: u64,
    lost: u64,
    first_ns: u64,
    last_ns: u64,
    latencies_ns: Vec<u64>,
}

impl Received {
    fn rate(&self) -> f64 {
        let secs = (self.last_ns.saturating_sub(self.first_ns)) as f64 / 1e9;
        if secs > 0.0 { self.frames as f64 / secs } else { 0.0 }
    }
    fn byte_rate(&self) -> f64 {
        let secs = (self.last_ns.saturating_sub(self.first_ns)) as f64 / 1e9;
        if secs > 0.0 { self.bytes as f64 / secs } else { 0.0 }
    }
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.latencies_ns.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_unstable();
        v[((v.len() as f64 - 1.0) * p) as usize] as f64 / 1e3
    }
}

/// Publishes `n` frames at `rate` per second (0: as fast as possible), stamping send times;
/// returns the rate achieved.
async fn publish(engine: &mut Engine, payload: &Bytes, n: u64, rate: f64, clock: &Clock) -> f64 {
    let topic = Bytes::from_static(b"kv-events");
    let start = Instant::now();
    for seq in 0..n {
        if rate > 0.0 {
            let due = start + Duration::from_secs_f64(seq as f64 / rate);
            let now = Instant::now();
            if due > now + Duration::from_micros(200) {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        clock.sent[seq as usize].store(clock.now(), Ordering::Relaxed);
        engine.publish_with_seq(&topic, seq, payload.clone()).await;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn note(r: &mut Received, clock: &Clock, seq: u64, bytes: usize, sample: bool) {
    let now = clock.now();
    if r.frames == 0 {
        r.first_ns = now;
    }
    r.last_ns = now;
    r.frames += 1;
    r.bytes += bytes as u64;
    if sample {
        r.latencies_ns.push(now.saturating_sub(clock.sent[seq as usize].load(Ordering::Relaxed)));
    }
}

/// Raw ZMQ: XPUB -> SUB, no relay.
async fn raw_zmq(payload: &Bytes, n: u64, rate: f64) -> (Received, f64) {
    let mut engine = Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap();
    let mut sub = SubSocket::new();
    sub.subscribe("").await.unwrap();
    sub.connect(&engine.endpoint).await.unwrap();
    engine.wait_subscribers(1).await;
    let clock = Clock::new(n as usize);
    let c = clock.clone();
    let reader = tokio::spawn(async move {
        let mut r = Received::default();
        while r.frames < n {
            let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(10), sub.recv()).await else { break };
            let seq = u64::from_be_bytes(m.get(1).unwrap()[..].try_into().unwrap());
            note(&mut r, &c, seq, m.get(2).unwrap().len(), seq % 7 == 0);
        }
        r.lost = n - r.frames;
        r
    });
    let sent = publish(&mut engine, payload, n, rate, &clock).await;
    (reader.await.unwrap(), sent)
}

/// Through kvscope: XPUB -> server (SUB, classify, relay) -> `clients` WebSockets.
async fn relay(payload: &Bytes, n: u64, rate: f64, clients: usize) -> (Vec<Received>, f64, Copies) {
    let mut engine = Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap();
    let mut config = AppConfig::loopback(
        vec![Source { worker_id: "0".into(), dp_rank: 0, endpoint: engine.endpoint.clone(), replay_endpoint: None }],
        Vec::new(),
        16 << 20,
    );
    // What users run: live frames gathered into shared batches for up to 10 ms.
    config.http.batch_window = HttpConfig::DEFAULT_BATCH_WINDOW;
    let app = App::start(config, Feed::Live).await.unwrap();
    let url = format!("ws://{}/ws", app.addr.unwrap());
    engine.wait_subscribers(1).await;
    let clock = Clock::new(n as usize);
    let mut readers = Vec::new();
    for i in 0..clients {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        // Read up to the end of the (empty) history first.
        loop {
            let Some(Ok(Message::Binary(b))) = ws.next().await else { panic!("preamble") };
            if proto::decode_all(&b).unwrap().iter().any(|m| matches!(m, proto::Message::HistoryComplete(_))) {
                break;
            }
        }
        let c = clock.clone();
        readers.push(tokio::spawn(async move {
            let mut r = Received::default();
            while r.frames + r.lost < n {
                let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await else { break };
                let Message::Binary(b) = m else { continue };
                for inner in proto::unbatch(&b).unwrap() {
                    match proto::decode(inner).unwrap() {
                        proto::Message::Frame(f) => note(&mut r, &c, f.seq, inner.len(), i == 0 && f.seq % 7 == 0),
                        proto::Message::LagNotice(l) => r.lost += l.frames_lost,
                        _ => {}
                    }
                }
            }
            r
        }));
    }
    let sent = publish(&mut engine, payload, n, rate, &clock).await;
    let mut out = Vec::new();
    for r in readers {
        out.push(r.await.unwrap());
    }
    let copies = Copies {
        live_bytes: app.metrics.ws_live_bytes_copied.get(),
        socket_bytes: app.metrics.ws_socket_bytes_copied.get(),
        ws_messages: app.metrics.client_ws_messages.get(),
        frames_offered: n * clients as u64,
        frames_delivered: out.iter().map(|r| r.frames).sum(),
    };
    let _ = app.stop().await;
    (out, sent, copies)
}

/// What the server copied to fan the frames out, from its own counters.
struct Copies {
    /// Bytes copied into live batches (once per batch, shared by every client).
    live_bytes: u64,
    /// Bytes copied into the clients' socket buffers (per client: messages under 8 KiB),
    /// the preamble and history included.
    socket_bytes: u64,
    /// WebSocket messages queued for the clients (history and preamble included).
    ws_messages: u64,
    /// Frames published times clients: what the fan-out was asked to deliver.
    frames_offered: u64,
    frames_delivered: u64,
}

impl Copies {
    fn per_frame_per_client(&self) -> f64 {
        (self.live_bytes + self.socket_bytes) as f64 / self.frames_offered.max(1) as f64
    }

    fn socket_copies_per_frame_per_client(&self) -> f64 {
        self.socket_bytes as f64 / self.frames_offered.max(1) as f64
    }
}

fn human(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn main() {
    let quick = std::env::var_os("RELAY_BENCH_QUICK").is_some();
    // `RELAY_BENCH_PAYLOAD=kimi` (or `small`) runs one payload only, e.g. under a profiler.
    let only = std::env::var("RELAY_BENCH_PAYLOAD").ok();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        for (name, payload, burst, rates) in [
            ("small (16-token store)", small_payload(), if quick { 50_000 } else { 200_000 }, vec![5_000.0, 20_000.0, 50_000.0, 100_000.0]),
            ("kimi-k3 batch", kimi_payload(), if quick { 5_000 } else { 20_000 }, vec![500.0, 2_000.0, 5_000.0, 10_000.0]),
        ] {
            if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
                continue;
            }
            println!("\n== payload: {name}, {} bytes ==", payload.len());
            let (raw, _) = raw_zmq(&payload, burst, 0.0).await;
            println!(
                "burst {burst} frames | raw ZMQ PUB->SUB: {} frames/s, {}B/s",
                human(raw.rate()),
                human(raw.byte_rate())
            );
            for clients in [1usize, 10] {
                let (got, _, copies) = relay(&payload, burst, 0.0, clients).await;
                let min_rate = got.iter().map(Received::rate).fold(f64::INFINITY, f64::min);
                let total_bytes: f64 = got.iter().map(Received::byte_rate).sum();
                let lost: u64 = got.iter().map(|r| r.lost).sum();
                println!(
                    "burst {burst} frames | kvscope -> {clients:>2} client(s): {} frames/s per client ({:.2}x raw), {}B/s WebSocket out in total, {lost} frames lost to lag",
                    human(min_rate),
                    min_rate / raw.rate(),
                    human(total_bytes),
                );
                println!(
                    "copies {burst} frames | kvscope -> {clients:>2} client(s): {:.1} bytes copied per frame per client, {:.1} frames per WebSocket message, of which {:.1} bytes into each socket's buffer",
                    copies.per_frame_per_client(),
                    copies.frames_delivered as f64 / copies.ws_messages.max(1) as f64,
                    copies.socket_copies_per_frame_per_client(),
                );
            }
            println!(
                "{:>10} | {:>30} | {:>60} | {:>50}",
                "asked/s",
                "raw ZMQ: sent/s, p50/p99 us",
                "kvscope 1 client: sent/s, got, lost, p50/p99 us, added p50/p99",
                "kvscope 10 clients: sent/s, min got, lost, p50/p99 us"
            );
            for rate in rates {
                let n = (rate * if quick { 1.0 } else { 3.0 }) as u64;
                let (raw, raw_sent) = raw_zmq(&payload, n, rate).await;
                let (one, one_sent, _) = relay(&payload, n, rate, 1).await;
                let (ten, ten_sent, _) = relay(&payload, n, rate, 10).await;
                let ten_min = ten.iter().map(|r| r.frames).min().unwrap_or(0);
                let ten_lost: u64 = ten.iter().map(|r| r.lost).sum();
                println!(
                    "{:>10} | {:>7} {:>9.0} / {:>9.0} | {:>7} {:>7}/{n} {:>5} {:>7.0}/{:>7.0} +{:>6.0}/+{:>6.0} | {:>7} {:>7}/{n} {:>6} {:>7.0}/{:>7.0}",
                    rate,
                    human(raw_sent),
                    raw.pct(0.5),
                    raw.pct(0.99),
                    human(one_sent),
                    one[0].frames,
                    one[0].lost,
                    one[0].pct(0.5),
                    one[0].pct(0.99),
                    one[0].pct(0.5) - raw.pct(0.5),
                    one[0].pct(0.99) - raw.pct(0.99),
                    human(ten_sent),
                    ten_min,
                    ten_lost,
                    ten[0].pct(0.5),
                    ten[0].pct(0.99),
                );
            }
        }
    });
}
