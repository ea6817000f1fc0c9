//! Event-plane intake benchmark: messages/s from an async-nats publisher through kvscope
//! (`--event-plane nats://...`: core subscription, envelope decode, live reconciler, relay) to a
//! reading WebSocket client, against nats-server's own pub/sub (async-nats publisher ->
//! async-nats subscriber) measured in the same run.
//!
//! `cargo bench -p kvscope --bench plane` (needs `nats-server` on PATH or /usr/sbin; set
//! `PLANE_BENCH_N` for the message count, default 50000). Not run in CI.
//!
//! Messages are Dynamo 1.6.1 envelopes as its relay writes them (kvscope-encode's
//! `relay_envelope` of the prediction for the corpus's vLLM 0.33 `gpu_basic` batch). The
//! publisher sends as fast as async-nats takes them; a run is timed from the first publish to
//! the N-th message received (or until 10 s without one: what was lost is reported). Publisher,
//! server, subscriber and client share one process and one 2-thread runtime, as in the relay
//! bench, so the figures are a floor on a 2-core machine.

// Benchmark code: a failed unwrap aborts the measurement, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kvscope::app::{App, AppConfig, Feed};
use kvscope::plane::PlaneSource;
use kvscope::sources::Source;
use kvscope_protocol as proto;
use kvscope_router::{Predictor, RelayConfig};
use tokio_tungstenite::tungstenite::Message;

const SUBJECT: &str = "namespace.dynamo.component.backend.endpoint.generate.kv-events";

struct Nats(Child, u16);

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nats_server() -> Nats {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bin = if std::path::Path::new("/usr/sbin/nats-server").exists() { "/usr/sbin/nats-server" } else { "nats-server" };
    let child =
        Command::new(bin).args(["-a", "127.0.0.1", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    Nats(child, port)
}

/// Envelopes 0..n of one publisher, as Dynamo 1.6.1's relay writes them.
fn envelopes(n: u64) -> Vec<bytes::Bytes> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kv-events/vllm-0.33.0/gpu_basic.msgpack");
    let payload = std::fs::read(path).unwrap();
    let predictions = Predictor::new(RelayConfig::dynamo_1_6_1(42, 0, 16)).predict(0, &payload).unwrap();
    (0..n)
        .map(|seq| {
            let env = kvscope_encode::router::relay_envelope(7, seq, 1, &predictions).unwrap().unwrap();
            bytes::Bytes::from(kvscope_encode::router::encode_envelope(&env).unwrap())
        })
        .collect()
}

async fn publish_all(url: &str, bodies: &[bytes::Bytes]) -> Instant {
    let client = async_nats::connect(url).await.unwrap();
    let t0 = Instant::now();
    for b in bodies {
        client.publish(SUBJECT, b.clone()).await.unwrap();
    }
    client.flush().await.unwrap();
    t0
}

/// (messages received, seconds from first publish to last receipt).
async fn nats_baseline(url: &str, bodies: &[bytes::Bytes]) -> (u64, f64) {
    let sub_client = async_nats::ConnectOptions::new().subscription_capacity(64 * 1024).connect(url).await.unwrap();
    let mut sub = sub_client.subscribe(SUBJECT).await.unwrap();
    sub_client.flush().await.unwrap();
    let n = bodies.len() as u64;
    let reader = tokio::spawn(async move {
        let mut got = 0u64;
        let mut last = Instant::now();
        while got < n {
            match tokio::time::timeout(Duration::from_secs(10), sub.next()).await {
                Ok(Some(_)) => {
                    got += 1;
                    last = Instant::now();
                }
                _ => break,
            }
        }
        (got, last)
    });
    let t0 = publish_all(url, bodies).await;
    let (got, last) = reader.await.unwrap();
    (got, last.duration_since(t0).as_secs_f64())
}

async fn through_kvscope(url: &str, bodies: &[bytes::Bytes]) -> (u64, f64) {
    let config = AppConfig::loopback(
        vec![Source { worker_id: "42".into(), dp_rank: 0, endpoint: "tcp://127.0.0.1:9".into(), replay_endpoint: None }],
        vec![PlaneSource::parse(url, None).unwrap()],
        64 << 20,
    );
    let app = App::start(config, Feed::Live).await.unwrap();
    let key = format!("plane:{url}");
    let connected = app.metrics.connected.get_or_create(&kvscope::metrics::SourceLabels { source: key }).clone();
    while connected.get() != 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The subscription is registered when the source shows live; give the server a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", app.addr.unwrap())).await.unwrap();
    loop {
        let Some(Ok(Message::Binary(b))) = ws.next().await else { panic!("preamble") };
        if proto::decode_all(&b).unwrap().iter().any(|m| matches!(m, proto::Message::HistoryComplete(_))) {
            break;
        }
    }
    let n = bodies.len() as u64;
    let reader = tokio::spawn(async move {
        let (mut got, mut lost) = (0u64, 0u64);
        let mut last = Instant::now();
        while got + lost < n {
            let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await else { break };
            let Message::Binary(b) = m else { continue };
            for m in proto::decode_all(&b).unwrap() {
                match m {
                    proto::Message::Frame(f) if f.source == 1 => {
                        got += 1;
                        last = Instant::now();
                    }
                    proto::Message::LagNotice(l) => lost += l.frames_lost,
                    _ => {}
                }
            }
        }
        (got, last)
    });
    let t0 = publish_all(url, bodies).await;
    let (got, last) = reader.await.unwrap();
    // Let the reconciler export once more, then read what it counted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dropped_inputs = app.metrics.router_dropped_inputs.get();
    let labels = kvscope::metrics::RouterCountLabels { source: "42:0".into(), count: "received".into() };
    let received = app.metrics.router_events.get_or_create(&labels).get();
    let _ = app.stop().await;
    println!("  (kvscope's live reconciler: {received} RouterEvents received for 42:0, {dropped_inputs} inputs it had no room for)");
    (got, last.duration_since(t0).as_secs_f64())
}

fn main() {
    let n: u64 = std::env::var("PLANE_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(50_000);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let nats = nats_server();
        let url = format!("nats://127.0.0.1:{}", nats.1);
        let bodies = envelopes(n);
        println!("== {n} Dynamo 1.6.1 envelopes of {} bytes (gpu_basic's RouterEvents) ==", bodies[0].len());
        let (base_got, base_s) = nats_baseline(&url, &bodies).await;
        let base_rate = base_got as f64 / base_s;
        println!("nats-server pub/sub (async-nats -> async-nats): {base_got}/{n} in {base_s:.3} s = {base_rate:.0} msg/s");
        let (got, s) = through_kvscope(&url, &bodies).await;
        let rate = got as f64 / s;
        println!(
            "async-nats -> kvscope (--event-plane) -> WebSocket client: {got}/{n} in {s:.3} s = {rate:.0} msg/s ({:.2}x nats-server's own)",
            rate / base_rate
        );
        drop(nats);
    });
}
