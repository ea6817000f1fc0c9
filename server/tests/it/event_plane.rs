//! Dynamo's event plane as kvscope sources, with the real parts: Debian's nats-server on a free
//! loopback port, NVIDIA Dynamo 1.6.1's own relay (`KvEventPublisher` from ai-dynamo-runtime,
//! `scripts/peers/dynamo_relay.py`) fed with corpus payloads, and faults injected with
//! async-nats, each with its exact counters.
//!
//! The real-relay runs are reconciled by `check --json` (kvscope-router's Reconciler): every
//! RouterEvent the prediction expects arrives, matched field for field, and nothing else does;
//! the events the relay drops are exactly the prediction's `dropped_by_policy`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use kvscope::demo::engine::Engine;
use kvscope_router::{Predicted, Predictor, RelayConfig};
use serde_json::Value;

use crate::support::{BIN, Server, free_port, peer_python, repo, scratch, wait_child};

const NATS_SERVER: &str = "/usr/sbin/nats-server";

/// A nats-server on a loopback port; killed on drop.
struct Nats {
    child: Child,
    port: u16,
}

impl Nats {
    fn start(port: u16) -> Nats {
        let bin = if std::path::Path::new(NATS_SERVER).exists() { NATS_SERVER } else { "nats-server" };
        let child = Command::new(bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e}; run scripts/install-tools.sh (it installs Debian's nats-server)"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen on {port} within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nats { child, port }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Dynamo's relay harness; its lines on stdout are JSON.
pub(crate) struct Relay {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Relay {
    fn start(plane: &str, nats: &str, worker_id: u64, block_size: u32, payloads: &[std::path::PathBuf]) -> Relay {
        let payloads: Vec<String> = payloads.iter().map(|p| p.display().to_string()).collect();
        Relay::start_with(plane, nats, worker_id, block_size, &payloads)
    }

    /// Relays an engine bound elsewhere (`--engine`), until killed.
    fn relay_engine(nats: &str, worker_id: u64, block_size: u32, engine: &str) -> Relay {
        Relay::start_with("nats", nats, worker_id, block_size, &["--engine".to_owned(), engine.to_owned()])
    }

    /// A relay on the ZMQ plane that registers in a discovery store (`discovery`: the harness's
    /// `--discovery …` flags), at block size 16.
    pub(crate) fn start_discovered(worker_id: u64, discovery: &[&str], payloads: &[std::path::PathBuf]) -> Relay {
        let mut extra: Vec<String> = discovery.iter().map(|s| (*s).to_owned()).collect();
        extra.extend(payloads.iter().map(|p| p.display().to_string()));
        Relay::spawn(&["--plane", "zmq", "--worker-id", &worker_id.to_string(), "--block-size", "16"], &extra)
    }

    fn start_with(plane: &str, nats: &str, worker_id: u64, block_size: u32, extra: &[String]) -> Relay {
        Relay::spawn(
            &["--plane", plane, "--nats", nats, "--worker-id", &worker_id.to_string(), "--block-size", &block_size.to_string()],
            extra,
        )
    }

    fn spawn(args: &[&str], extra: &[String]) -> Relay {
        let mut child = Command::new(peer_python())
            .arg(repo().join("scripts/peers/dynamo_relay.py"))
            .args(args)
            .args(extra)
            .env("DYN_LOG", "warn")
            // Its file-backend directory (and anything else it makes) stays under target/, not
            // in /tmp after the test kills it.
            .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start scripts/peers/dynamo_relay.py");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        let stdin = child.stdin.take();
        Relay { child, stdin, lines }
    }

    /// Waits (60 s: the runtime starts slowly on a loaded machine) for a line with `key`.
    pub(crate) fn wait(&self, key: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_else(|_| {
                panic!(
                    "dynamo_relay.py printed no {key:?} within 60 s (is ai-dynamo-runtime==1.6.1 installed? run scripts/install-tools.sh)"
                )
            });
            if let Some(v) = line.get(key) {
                return v.clone();
            }
        }
    }

    pub(crate) fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// SIGKILL: the relay stops mid-stream, with no goodbye on the plane.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What kvscope-router predicts Dynamo 1.6.1's relay (worker 42, rank 0) publishes for these
/// engine batches, published in this order from seq 0: RouterEvents per batch, and the events it
/// drops by label.
pub(crate) fn predicted(payloads: &[Vec<u8>], block_size: u32) -> (Vec<u64>, BTreeMap<String, u64>) {
    let mut predictor = Predictor::new(RelayConfig::dynamo_1_6_1(42, 0, block_size));
    let mut per_batch = Vec::new();
    let mut dropped = BTreeMap::new();
    for (seq, payload) in payloads.iter().enumerate() {
        let predictions = predictor.predict(seq as u64, payload).expect("corpus payloads decode");
        per_batch.push(predictions.iter().filter(|p| p.router_event().is_some()).count() as u64);
        for p in &predictions {
            if let Predicted::Dropped { label, .. } = &p.outcome {
                *dropped.entry(label.as_str().to_owned()).or_default() += 1;
            }
        }
    }
    (per_batch, dropped)
}

pub(crate) fn read_all(paths: &[std::path::PathBuf]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The engine source's `"router"` object shows every predicted RouterEvent arriving as
/// predicted and nothing else, with exactly `dropped` dropped by the relay. Returns it.
pub(crate) fn assert_reconciled(report: &Value, expected: u64, dropped: &[(&str, u64)]) -> Value {
    let router = report["sources"][0]["router"].clone();
    let counts = |k: &str| router[k].as_u64().unwrap_or_else(|| panic!("router.{k} missing: {report:#}"));
    assert!(expected > 0);
    assert_eq!(
        [counts("expected"), counts("received"), counts("matched"), counts("missing"), counts("unexpected"), counts("mismatched")],
        [expected, expected, expected, 0, 0, 0],
        "expected, received, matched, missing, unexpected, mismatched; differences: {:#}",
        report["sources"][0]["router_differences"]
    );
    let want: serde_json::Map<String, Value> = dropped.iter().map(|(l, n)| ((*l).to_owned(), Value::from(*n))).collect();
    assert_eq!(router["dropped_by_policy"], Value::Object(want), "{router:#}");
    assert_eq!(report["router"]["unknown_workers"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["totals"]["router"]["matched"].as_u64(), Some(expected));
    router
}

pub(crate) fn corpus(names: &[&str]) -> Vec<std::path::PathBuf> {
    names.iter().map(|n| repo().join("tests/fixtures/kv-events/vllm-0.33.0").join(format!("{n}.msgpack"))).collect()
}

pub(crate) fn check_json(capture: &std::path::Path, block_size: u32) -> Value {
    let out = Command::new(BIN)
        .arg("check")
        .arg(capture)
        .args(["--block-size", &block_size.to_string(), "--policy", "dynamo-1.6.1", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Waits until `series` has not changed for `quiet` and returns it.
async fn settled(server: &Server, series: &str, quiet: Duration) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = server.metric(series).await;
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = server.metric(series).await;
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= quiet {
            return last;
        }
        assert!(tokio::time::Instant::now() < deadline, "{series} kept changing for 30 s");
    }
}

/// The real relay over a real plane: kvscope records both the engine stream and what the relay
/// published, and `check` reads both back. Returns the check report.
async fn relay_run(plane: &str, payloads: &[std::path::PathBuf], block_size: u32, name: &str) -> (Value, u64) {
    let nats = Nats::start(free_port());
    let mut relay = Relay::start(plane, &nats.url(), 42, block_size, payloads);
    let engine = relay.wait("engine").as_str().unwrap().to_owned();
    let plane_url = match plane {
        "zmq" => relay.wait("event_plane").as_str().unwrap().to_owned(),
        _ => nats.url(),
    };
    relay.wait("ready");
    let dir = scratch(name);
    let capture = dir.join("run.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42={engine}"),
        "--event-plane",
        &plane_url,
        "--block-size",
        &block_size.to_string(),
        "--record",
        capture.to_str().unwrap(),
    ]);
    let plane_key = format!("plane:{plane_url}");
    server.wait_metric("kvscope_source_connected{source=\"42:0\"}", 1.0).await;
    server.wait_metric(&format!("kvscope_source_connected{{source=\"{plane_key}\"}}"), 1.0).await;
    relay.go();
    let published = relay.wait("published").as_u64().unwrap();
    server.wait_metric("kvscope_frames_total{source=\"42:0\"}", published as f64).await;
    let received = settled(&server, &format!("kvscope_frames_total{{source=\"{plane_key}\"}}"), Duration::from_millis(1500)).await;
    assert!(server.interrupt().success());
    let report = check_json(&capture, block_size);
    let planes = report["event_planes"].as_array().unwrap();
    assert_eq!(planes.len(), 1, "{report:#}");
    assert_eq!(planes[0]["frames"].as_f64().unwrap(), received, "{report:#}");
    (report, published)
}

/// One real-relay run, reconciled: the plane's counters, then `assert_reconciled` with the
/// prediction's RouterEvent count and `dropped` (the prediction's drops, written out).
async fn reconciled_run(plane: &str, names: &[&str], block_size: u32, name: &str, dropped: &[(&str, u64)]) -> Value {
    let (report, published) = relay_run(plane, &corpus(names), block_size, name).await;
    let (per_batch, predicted_drops) = predicted(&read_all(&corpus(names)), block_size);
    let want: BTreeMap<String, u64> = dropped.iter().map(|(l, n)| ((*l).to_owned(), *n)).collect();
    assert_eq!(predicted_drops, want, "the prediction's drops are not the ones this test writes out");
    let plane_json = &report["event_planes"][0];
    assert_eq!(report["sources"][0]["frames"], published);
    assert_eq!(
        (plane_json["frame_errors"].as_u64(), plane_json["gaps"].as_u64(), plane_json["publishers"].as_u64()),
        (Some(0), Some(0), Some(1)),
        "{plane_json}"
    );
    // Dynamo sends one message per batch that keeps at least one event.
    assert_eq!(plane_json["frames"].as_u64(), Some(per_batch.iter().filter(|n| **n > 0).count() as u64), "{report:#}");
    let router = assert_reconciled(&report, per_batch.iter().sum(), dropped);
    eprintln!("{plane}/{name}: engine {published} batches, event plane {} messages; router {router}", plane_json["frames"]);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_vllm_0_33_payloads_are_reconciled() {
    let names = [
        "gpu_basic",
        "storage_tier",
        "bytes_hashes-1",
        "bytes_hashes-2",
        "mooncake_lowercase_cpu-1",
        "cpu_offload_placeholder",
        "hybrid_groups",
    ];
    let report = reconciled_run("nats", &names, 16, "plane_nats_vllm", DROPPED_VLLM).await;
    assert_eq!(report["event_planes"][0]["subject"], "namespace.>");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_kimi_k3_stream_is_reconciled() {
    let names: Vec<String> = (1..=20).map(|i| format!("kimi_k3_agg-w0-{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    reconciled_run("nats", &names, 1536, "plane_nats_kimi", DROPPED_KIMI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_zmq_real_relay_through_dynamos_zmq_plane_is_reconciled() {
    let names = ["gpu_basic", "storage_tier", "bytes_hashes-1", "mooncake_lowercase_cpu-1", "hybrid_groups"];
    let report = reconciled_run("zmq", &names, 16, "plane_zmq_vllm", DROPPED_ZMQ).await;
    assert_eq!(report["event_planes"][0]["subject"], Value::Null);
}

/// What Dynamo 1.6.1's relay drops of the vLLM 0.33 mix: lowercase `cpu` (and `gpu`) mediums
/// are in no row of its exact-match table, and a batch holding a 32-byte bin hash is rejected whole.
/// The rest are hybrid_groups' non-main attention groups and cpu_offload_placeholder's remote block.
const DROPPED_VLLM: &[(&str, u64)] = &[
    ("batch_decode_rejected", 4),
    ("non_local_locality", 1),
    ("non_main_attention_group", 3),
    ("non_main_attention_kind", 3),
    ("unknown_medium", 3),
];
/// kimi_k3 worker 0: the mamba groups are not the main attention group, and the offload
/// connector's lowercase `cpu` stores are in no row.
const DROPPED_KIMI: &[(&str, u64)] = &[("non_main_attention_group", 12), ("non_main_attention_kind", 60), ("unknown_medium", 4)];
const DROPPED_ZMQ: &[(&str, u64)] = &[
    ("batch_decode_rejected", 2),
    ("non_local_locality", 1),
    ("non_main_attention_group", 3),
    ("non_main_attention_kind", 3),
    ("unknown_medium", 3),
];

/// The relay is SIGKILLed mid-stream while the engine keeps publishing: every RouterEvent
/// predicted for the batches after the kill is `missing`, exactly, and the ones before matched.
/// /metrics shows the same live (matched and received; missing is decided at the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_faults_a_relay_killed_mid_stream_leaves_exactly_the_later_events_missing() {
    let nats = Nats::start(free_port());
    let mut engine = Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap();
    let mut relay = Relay::relay_engine(&nats.url(), 42, 16, &engine.endpoint);
    relay.wait("ready");
    let dir = scratch("plane_relay_killed");
    let capture = dir.join("k.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42={}", engine.endpoint),
        "--event-plane",
        &nats.url(),
        "--block-size",
        "16",
        "--record",
        capture.to_str().unwrap(),
    ]);
    let plane_key = format!("plane:{}", nats.url());
    server.wait_metric(&format!("kvscope_source_connected{{source=\"{plane_key}\"}}"), 1.0).await;
    engine.wait_subscribers(2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names = ["gpu_basic", "storage_tier", "hybrid_groups", "gpu_basic", "storage_tier", "hybrid_groups", "gpu_basic"];
    let payloads = read_all(&corpus(&names));
    let (per_batch, _) = predicted(&payloads, 16);
    let (before, after) = (4usize, names.len() - 4);
    let topic = bytes::Bytes::from_static(b"");
    for p in &payloads[..before] {
        engine.publish(&topic, bytes::Bytes::from(p.clone())).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let messages_before = per_batch[..before].iter().filter(|n| **n > 0).count() as f64;
    server.wait_metric(&format!("kvscope_frames_total{{source=\"{plane_key}\"}}"), messages_before).await;
    let events_before: u64 = per_batch[..before].iter().sum();
    server.wait_metric("kvscope_router_events_total{source=\"42:0\",count=\"matched\"}", events_before as f64).await;
    relay.kill();
    for p in &payloads[before..] {
        engine.publish(&topic, bytes::Bytes::from(p.clone())).await;
    }
    server.wait_metric("kvscope_frames_total{source=\"42:0\"}", names.len() as f64).await;
    server.wait_metric("kvscope_router_events_total{source=\"42:0\",count=\"expected\"}", per_batch.iter().sum::<u64>() as f64).await;
    assert_eq!(server.metric("kvscope_router_events_total{source=\"42:0\",count=\"received\"}").await, events_before as f64);
    assert!(server.interrupt().success());
    let report = check_json(&capture, 16);
    let router = &report["sources"][0]["router"];
    let events_after: u64 = per_batch[before..].iter().sum();
    eprintln!("relay killed after {before} of {} batches: router {router}", names.len());
    assert!(after > 0 && events_after > 0);
    assert_eq!(
        [&router["expected"], &router["received"], &router["matched"], &router["missing"], &router["unexpected"], &router["mismatched"]]
            .map(|v| v.as_u64().unwrap()),
        [events_before + events_after, events_before, events_before, events_after, 0, 0],
        "{report:#}"
    );
    // The missing ones are exactly the batches after the kill, in order.
    let missing_seqs: Vec<u64> =
        report["sources"][0]["router_differences"].as_array().unwrap().iter().map(|d| d["origin"]["seq"].as_u64().unwrap()).collect();
    assert!(missing_seqs.iter().all(|s| *s >= before as u64), "{missing_seqs:?}");
}

/// A RouterEvent for a worker no engine source has (published raw, written by kvscope-encode's
/// router encoder) is listed under unknown workers with its count, live and in `check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_faults_router_events_for_an_unknown_worker_are_listed_with_their_count() {
    use kvscope_router::{EventData, KvCacheEvent, PlaneTier, RouterEvent, StoredBlock, StoredData};
    let nats = Nats::start(free_port());
    let dir = scratch("plane_unknown_worker");
    let capture = dir.join("u.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42=tcp://127.0.0.1:{}", free_port()),
        "--event-plane",
        &nats.url(),
        "--record",
        capture.to_str().unwrap(),
    ]);
    let key = format!("plane:{}", nats.url());
    server.wait_metric(&format!("kvscope_source_connected{{source=\"{key}\"}}"), 1.0).await;
    let event = |id: u64, worker_id: u64, dp_rank: u32| RouterEvent {
        worker_id,
        storage_tier: PlaneTier::Device,
        residency_domain: Some("worker".into()),
        event: KvCacheEvent {
            event_id: id,
            data: EventData::Stored(StoredData {
                parent_hash: None,
                start_position: None,
                blocks: vec![StoredBlock { block_hash: id, tokens_hash: 7 }],
            }),
            dp_rank,
        },
    };
    let client = publisher(&nats.url()).await;
    let batches = [vec![event(1, 99, 0), event(2, 99, 0), event(3, 99, 0)], vec![event(4, 99, 0), event(5, 42, 1)]];
    for (seq, events) in batches.iter().enumerate() {
        let env = kvscope_router::Envelope {
            publisher_id: 5,
            sequence: seq as u64,
            published_at: 1,
            topic: "kv-events".to_owned(),
            payload: kvscope_encode::router::encode_router_events(events).unwrap(),
            form: kvscope_router::EnvelopeForm::Msgpack,
        };
        publish(&client, SUBJECT, kvscope_encode::router::encode_envelope(&env).unwrap()).await;
    }
    server.wait_metric(&format!("kvscope_frames_total{{source=\"{key}\"}}"), 2.0).await;
    server.wait_metric("kvscope_router_unknown_worker_events_total", 5.0).await;
    assert!(server.interrupt().success());
    let report = check_json(&capture, 16);
    assert_eq!(
        report["router"]["unknown_workers"],
        serde_json::json!([{"worker_id": 42, "dp_rank": 1, "events": 1}, {"worker_id": 99, "dp_rank": 0, "events": 4}]),
        "{report:#}"
    );
    assert_eq!(report["sources"][0]["router"]["received"], 0);
    assert_eq!((report["totals"]["router"]["received"].as_u64(), report["totals"]["router"]["unexpected"].as_u64()), (Some(5), Some(5)));
    assert_eq!(report["router"]["publishers"][0]["messages"], 2);
    // The table says it in words too.
    let out = Command::new(BIN).arg("check").arg(&capture).args(["--block-size", "16"]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("event plane: 4 RouterEvents for worker 99 dp_rank 0, which no engine source has (unknown worker)"), "{table}");
    assert_eq!(out.status.code(), Some(0));
    let strict = Command::new(BIN).arg("check").arg(&capture).args(["--block-size", "16", "--fail-on-router-mismatch"]).status().unwrap();
    assert_eq!(strict.code(), Some(4));
}

/// A Dynamo envelope as the relay writes it (msgpack map, payload bin of RouterEvents).
fn envelope(publisher: u64, sequence: u64) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct E {
        publisher_id: u64,
        sequence: u64,
        published_at: u64,
        topic: &'static str,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    }
    rmp_serde::to_vec_named(&E { publisher_id: publisher, sequence, published_at: 1, topic: "kv-events", payload: vec![0x90] }).unwrap()
}

const SUBJECT: &str = "namespace.dynamo.component.backend.endpoint.generate.kv-events";

async fn publisher(url: &str) -> async_nats::Client {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match async_nats::ConnectOptions::new().max_reconnects(None).connect(url).await {
            Ok(c) => return c,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "{url}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn publish(client: &async_nats::Client, subject: &str, body: Vec<u8>) {
    client.publish(subject.to_owned(), body.into()).await.unwrap();
    client.flush().await.unwrap();
}

/// A corrupted envelope is a counted frame error, its bytes kept in the capture; the stream
/// goes on, and subjects that are not KV events are not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_faults_a_corrupted_envelope_is_a_frame_error_and_the_stream_goes_on() {
    let nats = Nats::start(free_port());
    let dir = scratch("plane_corrupt");
    let capture = dir.join("c.kvcap");
    let engine_port = free_port();
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42=tcp://127.0.0.1:{engine_port}"),
        "--event-plane",
        &nats.url(),
        "--record",
        capture.to_str().unwrap(),
    ]);
    let key = format!("plane:{}", nats.url());
    server.wait_metric(&format!("kvscope_source_connected{{source=\"{key}\"}}"), 1.0).await;
    let client = publisher(&nats.url()).await;
    publish(&client, SUBJECT, envelope(7, 0)).await;
    publish(&client, SUBJECT, b"\xc1 not an envelope".to_vec()).await;
    publish(&client, "namespace.dynamo.component.backend.kv-metrics", envelope(7, 99)).await;
    publish(&client, SUBJECT, envelope(7, 1)).await;
    server.wait_metric(&format!("kvscope_frames_total{{source=\"{key}\"}}"), 2.0).await;
    server.wait_metric(&format!("kvscope_frame_errors_total{{source=\"{key}\",kind=\"envelope\"}}"), 1.0).await;
    assert!(server.interrupt().success());
    let report = check_json(&capture, 16);
    let plane = &report["event_planes"][0];
    assert_eq!(
        (plane["frames"].as_u64(), plane["frame_errors"].as_u64(), plane["gaps"].as_u64(), plane["publishers"].as_u64()),
        (Some(2), Some(1), Some(0), Some(1)),
        "{plane}"
    );
}

/// nats-server restarts: kvscope reconnects by itself (one reconnect counted), and the
/// publisher's sequence continues, so what was published while the server was away is one gap
/// of that publisher with its exact size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_faults_a_nats_server_restart_is_a_reconnect_and_one_gap_per_publisher() {
    let port = free_port();
    let mut nats = Nats::start(port);
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42=tcp://127.0.0.1:{}", free_port()),
        "--event-plane",
        &nats.url(),
    ]);
    let key = format!("plane:{}", nats.url());
    let connected = format!("kvscope_source_connected{{source=\"{key}\"}}");
    server.wait_metric(&connected, 1.0).await;
    let client = publisher(&nats.url()).await;
    for seq in 0..5 {
        publish(&client, SUBJECT, envelope(7, seq)).await;
    }
    server.wait_metric(&format!("kvscope_frames_total{{source=\"{key}\"}}"), 5.0).await;
    nats.kill();
    server.wait_metric(&connected, 0.0).await;
    let _nats = Nats::start(port);
    server.wait_metric(&connected, 1.0).await;
    // 5..=7 went out while the server was away (a relay's sequence keeps counting).
    let client = publisher(&format!("nats://127.0.0.1:{port}")).await;
    for seq in 8..10 {
        publish(&client, SUBJECT, envelope(7, seq)).await;
    }
    server.wait_metric(&format!("kvscope_frames_total{{source=\"{key}\"}}"), 7.0).await;
    assert_eq!(server.metric(&format!("kvscope_reconnects_total{{source=\"{key}\"}}")).await, 1.0);
    assert_eq!(server.metric(&format!("kvscope_gaps_total{{source=\"{key}\"}}")).await, 1.0);
    assert_eq!(server.metric(&format!("kvscope_lost_frames_total{{source=\"{key}\"}}")).await, 3.0);
    assert!(server.interrupt().success());
}

/// The server starts with the event plane away, shows it connecting, and picks it up when it
/// comes; it never exits because of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_faults_a_plane_that_is_away_at_start_is_retried() {
    let port = free_port();
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42=tcp://127.0.0.1:{}", free_port()),
        "--event-plane",
        &format!("nats://127.0.0.1:{port}"),
    ]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(server.child.try_wait().unwrap().is_none(), "kvscope exited while the event plane was away");
    let _nats = Nats::start(port);
    server.wait_metric(&format!("kvscope_source_connected{{source=\"plane:nats://127.0.0.1:{port}\"}}"), 1.0).await;
    let status = server.interrupt();
    assert!(status.success());
    let _ = wait_child;
}

/// `kvscope demo` acts as Dynamo 1.6.1's relay for its workers; recorded for a few seconds and
/// checked, every worker's RouterEvents arrive as predicted (the relay's policy drops show in
/// `dropped_by_policy`, not as missing).
async fn demo_run(name: &str, extra: &[&str], scenario: &str, block_size: u32, workers: u32) -> Value {
    let dir = scratch(name);
    let capture = dir.join("demo.kvcap");
    let batches = 40;
    let mut args = vec!["demo", "--listen", "127.0.0.1:0", "--scenario", scenario, "--rate", "40"];
    let (batches_s, workers_s) = (batches.to_string(), workers.to_string());
    args.extend(["--batches", &batches_s, "--workers", &workers_s, "--record", capture.to_str().unwrap()]);
    args.extend(extra);
    let mut server = Server::start(&args);
    for w in 0..workers {
        server.wait_metric(&format!("kvscope_frames_total{{source=\"{w}:0\"}}"), f64::from(batches)).await;
        let expected =
            settled(&server, &format!("kvscope_router_events_total{{source=\"{w}:0\",count=\"expected\"}}"), Duration::from_millis(300))
                .await;
        server.wait_metric(&format!("kvscope_router_events_total{{source=\"{w}:0\",count=\"received\"}}"), expected).await;
    }
    assert!(server.interrupt().success());
    let report = check_json(&capture, block_size);
    assert_eq!(report["sources"].as_array().unwrap().len(), workers as usize);
    for (w, source) in report["sources"].as_array().unwrap().iter().enumerate() {
        let r = &source["router"];
        eprintln!("demo {scenario} {name} worker {w}: router {r}");
        let n = |k: &str| r[k].as_u64().unwrap();
        assert!(n("expected") > 0, "{r}");
        assert_eq!(
            [n("received"), n("matched"), n("missing"), n("unexpected"), n("mismatched")],
            [n("expected"), n("expected"), 0, 0, 0],
            "{r}"
        );
    }
    assert_eq!(report["router"]["unknown_workers"], serde_json::json!([]));
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_demo_embedded_relays_are_reconciled_for_every_worker() {
    let report = demo_run("plane_demo_embedded", &[], "kimi-k3", 1536, 3).await;
    let keys: Vec<&str> = report["event_planes"].as_array().unwrap().iter().map(|p| p["key"].as_str().unwrap()).collect();
    assert!(keys.iter().all(|k| k.starts_with("plane:zmq://127.0.0.1:")), "{keys:?}");
    // One embedded ZMQ-plane publisher per worker; lowercase `cpu` offload stores dropped by the relay.
    assert_eq!(report["event_planes"].as_array().unwrap().len(), 3);
    assert!(report["sources"][0]["router"]["dropped_by_policy"]["unknown_medium"].as_u64().unwrap() > 0, "{report:#}");
    let report = demo_run("plane_demo_embedded_sglang", &[], "sglang-tiers", 16, 2).await;
    assert_eq!(report["event_planes"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_demo_onto_a_real_nats_server_is_reconciled() {
    let nats = Nats::start(free_port());
    let report = demo_run("plane_demo_nats", &["--event-plane", &nats.url()], "lmcache-relay", 16, 2).await;
    let planes = report["event_planes"].as_array().unwrap();
    assert_eq!(planes.len(), 1);
    assert_eq!(planes[0]["subject"], "namespace.demo.component.backend.endpoint.generate.kv-events");
    assert_eq!(planes[0]["publishers"], 2);
}

#[test]
fn plane_demo_event_plane_and_no_event_plane_are_a_usage_error_together() {
    let out = Command::new(BIN).args(["demo", "--no-event-plane", "--event-plane", "nats://127.0.0.1:1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Every public corpus payload of every release, in manifest order, through Dynamo 1.6.1's real
/// relay at one block size: every RouterEvent the prediction expects arrives as predicted (the
/// relay's coalescing of adjacent events and its removal refcounts included) and nothing else
/// does; the plane carries one message per batch the prediction publishes from. Kimi-K3 and the
/// hybrid groups at 1536, the rest at 16 (the block sizes they were made at).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_every_corpus_payload_is_reconciled() {
    let entries = kvscope_corpus::manifest();
    let at_1536 = |f: &str| f.contains("kimi_k3") || f.contains("hybrid_groups");
    for (block_size, name) in [(16u32, "plane_every_16"), (1536, "plane_every_1536")] {
        let files: Vec<std::path::PathBuf> = entries
            .iter()
            .filter(|e| at_1536(&e.file) == (block_size == 1536))
            .map(|e| repo().join("tests/fixtures/kv-events").join(&e.file))
            .collect();
        assert!(files.len() > 20, "{name}: {} payloads", files.len());
        let (report, published) = relay_run("nats", &files, block_size, name).await;
        let (per_batch, _) = predicted(&read_all(&files), block_size);
        let router = &report["sources"][0]["router"];
        let n = |k: &str| router[k].as_u64().unwrap();
        let expected: u64 = per_batch.iter().sum();
        assert!(expected > 0);
        assert_eq!(
            [n("expected"), n("received"), n("matched"), n("missing"), n("unexpected"), n("mismatched")],
            [expected, expected, expected, 0, 0, 0],
            "{name}: differences {:#}",
            report["sources"][0]["router_differences"]
        );
        assert_eq!(report["router"]["unknown_workers"], serde_json::json!([]), "{name}");
        let plane = &report["event_planes"][0];
        assert_eq!(plane["frames"].as_u64(), Some(per_batch.iter().filter(|n| **n > 0).count() as u64), "{name}: {plane}");
        eprintln!("{name}: {published} engine batches, {expected} RouterEvents matched; router {router}");
    }
}

/// The relay prediction the index stands on, exact: vLLM 0.33's own publisher sends the 17
/// non-Kimi vLLM 0.33 corpus batches (manifest order) as worker 7 at block size 16; Dynamo
/// 1.6.1's relay republishes them on a real nats-server. A NATS subscriber of the test's own
/// counts the RouterEvents (msgpack read generically, not by kvscope), and `check` predicted
/// exactly those: the partial block of edge-3 coalesced into its chain's store, edge-5's batch
/// (data_parallel_rank 3, on the rank-0 socket) filed under the router's own key (7, 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_of_vllm_s_own_publisher_is_predicted_exactly() {
    use futures_util::StreamExt;
    let nats = Nats::start(free_port());
    let mut vllm = crate::peers::Vllm::start();
    let relay = Relay::relay_engine(&nats.url(), 7, 16, &vllm.endpoint);
    relay.wait("ready");
    let counter = publisher(&nats.url()).await;
    let mut sub = counter.subscribe("namespace.>").await.unwrap();
    counter.flush().await.unwrap();
    let dir = scratch("plane_vllm_own");
    let capture = dir.join("v.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("7={}", vllm.endpoint),
        "--event-plane",
        &nats.url(),
        "--block-size",
        "16",
        "--record",
        capture.to_str().unwrap(),
    ]);
    server.wait_metric(&format!("kvscope_source_connected{{source=\"plane:{}\"}}", nats.url()), 1.0).await;
    server.wait_metric("kvscope_source_connected{source=\"7:0\"}", 1.0).await;
    // Both SUBs (kvscope's, the relay's) connected; PUB/SUB still drops the first moments.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let steps = crate::peers::corpus_stream("mixed");
    assert_eq!(steps.len(), 17);
    vllm.run(&steps);
    server.wait_metric("kvscope_frames_total{source=\"7:0\"}", 17.0).await;
    // The test's own count of what the relay published.
    let mut events = 0u64;
    let quiet = Duration::from_millis(1500);
    while let Ok(Some(m)) = tokio::time::timeout(quiet, sub.next()).await {
        #[derive(serde::Deserialize)]
        struct Envelope {
            #[serde(with = "serde_bytes")]
            payload: Vec<u8>,
        }
        let env: Envelope = rmp_serde::from_slice(&m.payload).unwrap();
        let list: Vec<serde::de::IgnoredAny> = rmp_serde::from_slice(&env.payload).unwrap();
        events += list.len() as u64;
    }
    assert_eq!(events, 21, "RouterEvents the relay published for the 17 batches");
    assert!(server.interrupt().success());
    let report = check_json(&capture, 16);
    let router = &report["sources"][0]["router"];
    let n = |k: &str| router[k].as_u64().unwrap();
    assert_eq!(
        [n("expected"), n("received"), n("matched"), n("missing"), n("unexpected"), n("mismatched")],
        [21, 21, 21, 0, 0, 0],
        "differences {:#}",
        report["sources"][0]["router_differences"]
    );
    assert_eq!(n("coalesced"), 1, "edge-3's partial block joins its chain's store");
    assert_eq!(report["router"]["unknown_workers"], serde_json::json!([]));
    std::fs::remove_dir_all(dir).unwrap();
}
