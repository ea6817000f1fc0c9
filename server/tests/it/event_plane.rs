//! Dynamo's event plane as kvscope sources, with the real parts: Debian's nats-server on a free
//! loopback port, NVIDIA Dynamo 1.6.1's own relay (`KvEventPublisher` from ai-dynamo-runtime,
//! `scripts/peers/dynamo_relay.py`) fed with corpus payloads, and faults injected with
//! async-nats, each with its exact counters.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

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
struct Relay {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Relay {
    fn start(plane: &str, nats: &str, worker_id: u64, block_size: u32, payloads: &[std::path::PathBuf]) -> Relay {
        let mut child = Command::new(peer_python())
            .arg(repo().join("scripts/peers/dynamo_relay.py"))
            .args(["--plane", plane, "--nats", nats, "--worker-id", &worker_id.to_string(), "--block-size", &block_size.to_string()])
            .args(payloads)
            .env("DYN_LOG", "warn")
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
    fn wait(&self, key: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("dynamo_relay.py printed no {key:?} within 60 s (is ai-dynamo-runtime==1.6.1 installed? run scripts/install-tools.sh)"));
            if let Some(v) = line.get(key) {
                return v.clone();
            }
        }
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn corpus(names: &[&str]) -> Vec<std::path::PathBuf> {
    names.iter().map(|n| repo().join("tests/fixtures/kv-events/vllm-0.33.0").join(format!("{n}.msgpack"))).collect()
}

fn check_json(capture: &std::path::Path, block_size: u32) -> Value {
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
async fn relay_run(plane: &str, names: &[&str], block_size: u32, name: &str) -> (Value, u64) {
    let nats = Nats::start(free_port());
    let payloads = corpus(names);
    let mut relay = Relay::start(plane, &nats.url(), 42, block_size, &payloads);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_vllm_0_33_payloads_are_recorded_and_checked() {
    let names = ["gpu_basic", "storage_tier", "bytes_hashes-1", "bytes_hashes-2", "mooncake_lowercase_cpu-1", "cpu_offload_placeholder", "hybrid_groups"];
    let (report, published) = relay_run("nats", &names, 16, "plane_nats_vllm").await;
    let engine = &report["sources"][0];
    let plane = &report["event_planes"][0];
    eprintln!("nats/vLLM 0.33: engine {published} batches; event plane {plane}");
    assert_eq!(engine["frames"], published);
    assert_eq!((plane["frame_errors"].as_u64(), plane["gaps"].as_u64(), plane["publishers"].as_u64()), (Some(0), Some(0), Some(1)), "{plane}");
    assert!(plane["frames"].as_u64().unwrap() > 0, "the relay published nothing: {report:#}");
    assert_eq!(plane["subject"], "namespace.>");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_nats_real_relay_kimi_k3_stream_is_recorded_and_checked() {
    let names: Vec<String> = (1..=20).map(|i| format!("kimi_k3_agg-w0-{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (report, published) = relay_run("nats", &names, 1536, "plane_nats_kimi").await;
    let plane = &report["event_planes"][0];
    eprintln!("nats/kimi_k3 w0: engine {published} batches; event plane {plane}");
    assert_eq!(report["sources"][0]["frames"], published);
    assert_eq!((plane["frame_errors"].as_u64(), plane["gaps"].as_u64()), (Some(0), Some(0)), "{plane}");
    assert!(plane["frames"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_zmq_real_relay_through_dynamos_zmq_plane() {
    let names = ["gpu_basic", "storage_tier", "bytes_hashes-1", "mooncake_lowercase_cpu-1", "hybrid_groups"];
    let (report, published) = relay_run("zmq", &names, 16, "plane_zmq_vllm").await;
    let plane = &report["event_planes"][0];
    eprintln!("zmq/vLLM 0.33: engine {published} batches; event plane {plane}");
    assert_eq!(report["sources"][0]["frames"], published);
    assert_eq!((plane["frame_errors"].as_u64(), plane["gaps"].as_u64(), plane["publishers"].as_u64()), (Some(0), Some(0), Some(1)), "{plane}");
    assert!(plane["frames"].as_u64().unwrap() > 0);
    assert_eq!(plane["subject"], Value::Null);
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
    let mut server = Server::start(&["serve", "--listen", "127.0.0.1:0", "--workers", &format!("42=tcp://127.0.0.1:{}", free_port()), "--event-plane", &nats.url()]);
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
    let mut server = Server::start(&["serve", "--listen", "127.0.0.1:0", "--workers", &format!("42=tcp://127.0.0.1:{}", free_port()), "--event-plane", &format!("nats://127.0.0.1:{port}")]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(server.child.try_wait().unwrap().is_none(), "kvscope exited while the event plane was away");
    let _nats = Nats::start(port);
    server.wait_metric(&format!("kvscope_source_connected{{source=\"plane:nats://127.0.0.1:{port}\"}}"), 1.0).await;
    let status = server.interrupt();
    assert!(status.success());
    let _ = wait_child;
}
