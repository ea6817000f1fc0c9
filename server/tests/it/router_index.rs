//! The router's index, modelled, against the real one: NVIDIA Dynamo 1.6.1's standalone indexer
//! (`python -m dynamo.indexer` from ai-dynamo-runtime 1.6.1) subscribes to the same engine
//! streams as `kvscope serve --router-index`, which records the stream and the indexer's
//! `/dump`s; `kvscope check` then compares the last dump with its model of that index block for
//! block, and this test asks the indexer itself (`POST /query_by_hash`) for the score of every
//! chain the engine holds and compares it with the model's.
//!
//! Engines: vLLM 0.33.0's own publisher (`ZmqEventPublisher` from the release wheel,
//! `scripts/peers/vllm_corpus_publisher.py`) carrying corpus payloads, and `kvscope publish` of
//! the Kimi-K3 incident capture. Cases: a clean stream (with lowercase `cpu`, bin hashes, a CPU
//! store at another block size and a batch naming rank 3 among the 17 vLLM 0.33 payloads), the
//! Kimi-K3 fleet, an indexer (and kvscope) that joined late, a lost frame, an engine restart.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvscope::router_index::{PollOptions, get};
use kvscope_index::{IndexConfig, IndexModel};
use kvscope_normalize::{Policy, StorageTier};
use kvscope_protocol as proto;
use serde_json::Value;

use super::peers::{Step, Vllm, corpus_stream, kimi};
use super::support::{BIN, Server, free_port, peer_python, scratch};

/// Dynamo's standalone indexer, on loopback.
struct Indexer {
    child: Child,
    port: u16,
}

impl Indexer {
    fn start(workers: &str, block_size: u32) -> Indexer {
        let port = free_port();
        let child = Command::new(peer_python())
            .args(["-m", "dynamo.indexer", "--workers", workers, "--block-size", &block_size.to_string(), "--port", &port.to_string()])
            .env("DYN_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python -m dynamo.indexer (ai-dynamo-runtime==1.6.1; run scripts/install-tools.sh)");
        Indexer { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let opts = PollOptions { timeout: Duration::from_secs(5), ..PollOptions::default() };
        let body = get(&format!("127.0.0.1:{}", self.port), path, opts).await.ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// Waits (60 s: the runtime starts slowly on a loaded machine) until every listener of
    /// `/workers` is active.
    async fn wait_active(&self, listeners: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(Value::Array(workers)) = self.get("/workers").await {
                let active = workers
                    .iter()
                    .flat_map(|w| w["listeners"].as_object().into_iter().flat_map(|l| l.values()))
                    .filter(|l| l["status"] == "active")
                    .count();
                if active == listeners {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the indexer's /workers never showed {listeners} active listeners within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `POST /query_by_hash`: the device score (tokens) of a chain of tokens hashes per
    /// `(worker_id, dp_rank)`.
    async fn score(&self, tokens_hashes: &[u64]) -> std::collections::BTreeMap<(u64, u32), u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // The API takes signed 64-bit values; the hashes are their bit patterns.
        let signed: Vec<i64> = tokens_hashes.iter().map(|&h| h as i64).collect();
        let body = serde_json::json!({"model_name": "default", "block_hashes": signed}).to_string();
        let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(("127.0.0.1", self.port)))
            .await
            .expect("connecting to the indexer timed out")
            .expect("connect to the indexer");
        let req = format!(
            "POST /query_by_hash HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await.expect("the query timed out").unwrap();
        let text = String::from_utf8_lossy(&buf);
        let json = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        // A chunked body (axum's JSON is not) would start with its size: take the JSON object.
        let json = &json[json.find('{').unwrap_or(0)..json.rfind('}').map_or(json.len(), |i| i + 1)];
        let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("/query_by_hash answered {text:?}: {e}"));
        let mut out = std::collections::BTreeMap::new();
        for (worker, ranks) in v["scores"].as_object().into_iter().flatten() {
            for (rank, tokens) in ranks.as_object().into_iter().flatten() {
                out.insert((worker.parse().unwrap(), rank.parse().unwrap()), tokens.as_u64().unwrap());
            }
        }
        out
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn check_json(capture: &std::path::Path, block_size: u32) -> Value {
    let mut child = Command::new(BIN)
        .arg("check")
        .arg(capture)
        .args(["--block-size", &block_size.to_string(), "--policy", "dynamo-1.6.1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = super::support::wait_child(&mut child, Duration::from_secs(60));
    let mut out = Vec::new();
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(status.code().is_some_and(|c| c == 0 || c == 3), "check exited {status:?}");
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("check --json printed no JSON: {e}"))
}

/// One engine batch of a capture: source, seq, payload, replayed.
type Batch = (u32, u64, Vec<u8>, bool);

/// The capture's engine batches, in record order.
fn engine_batches(capture: &std::path::Path) -> (Vec<proto::SourceInfo>, Vec<Batch>) {
    let file = std::fs::File::open(capture).unwrap();
    let mut reader = proto::capture::CaptureReader::new(std::io::BufReader::new(file)).unwrap();
    let infos = reader.header().sources.clone();
    let mut out = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        if infos[r.source as usize].kind != proto::SourceKind::Engine {
            continue;
        }
        let frames: Vec<Vec<u8>> = r.frames.into_iter().map(|f| f.into_vec()).collect();
        if let Ok(m) = kvscope_wire::frame::parse_live(&frames) {
            out.push((r.source, m.seq, m.payload.to_vec(), r.replayed));
        }
    }
    (infos, out)
}

/// What one case ended with: the check report, and the model rebuilt from the capture.
struct Ran {
    report: Value,
    model: IndexModel,
    /// Tokens the indexer scored over every chain asked.
    scored_tokens: u64,
}

/// One run: the indexer and kvscope subscribe to the engines (`workers`, Dynamo's form), the
/// steps are published, kvscope reads the indexer's dumps; then `check` compares, and every
/// device chain the engine holds is scored by the indexer and by the model.
async fn run(name: &str, workers: &str, block_size: u32, listeners: usize, publish: impl AsyncFnOnce(&Server), frames: u64) -> Ran {
    let indexer = Indexer::start(workers, block_size);
    indexer.wait_active(listeners).await;
    let dir = scratch(name);
    let capture = dir.join("run.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        workers,
        "--block-size",
        &block_size.to_string(),
        "--policy",
        "dynamo-1.6.1",
        "--router-index",
        &indexer.url(),
        "--router-index-interval",
        "250ms",
        "--record",
        capture.to_str().unwrap(),
    ]);
    for w in workers.split(',') {
        let key = w.split_once('=').unwrap().0;
        let key = if key.contains(':') { key.to_owned() } else { format!("{key}:0") };
        server.wait_metric(&format!("kvscope_source_connected{{source=\"{key}\"}}"), 1.0).await;
    }
    // Both subscribers are connected; PUB/SUB still drops what it sends in the first moments.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    publish(&server).await;
    // Frames of every engine source, summed.
    let received = |text: &str| -> f64 {
        text.lines().filter(|l| l.starts_with("kvscope_frames_total{")).filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok()).sum()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = received(&server.metrics().await);
        if got >= frames as f64 {
            break;
        }
        if Instant::now() >= deadline {
            let m = server.metrics().await;
            let lines: Vec<&str> = m
                .lines()
                .filter(|l| l.contains("source=") && !l.starts_with('#') && !l.contains("verdicts") && !l.contains("index_"))
                .collect();
            panic!("{name}: kvscope received {got} of {frames} frames in 60 s:\n{}", lines.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The indexer applies what it got; two more reads of its dump come after that.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let polls = format!("kvscope_router_index_polls_total{{url=\"{}\",what=\"dump\",result=\"ok\"}}", indexer.url());
    let start = server.metric(&polls).await;
    server.wait_metric(&polls, start + 2.0).await;
    assert!(server.interrupt().success());
    let report = check_json(&capture, block_size);

    // The model, rebuilt from the capture, scores what the indexer scores for every chain.
    let (infos, batches) = engine_batches(&capture);
    let mut model = IndexModel::new(IndexConfig::new(block_size, Policy::DYNAMO_1_6_1));
    let ids: Vec<_> = infos.iter().map(|i| model.add_source(&i.key, &i.worker_id, i.dp_rank)).collect();
    for (source, seq, payload, replayed) in &batches {
        let _ = model.push(ids[*source as usize], *seq, payload, *replayed);
    }
    let (mut chains, mut scored_tokens) = (0, 0);
    for ((w, tier), set) in model.truth().sets() {
        if *tier != StorageTier::Device {
            continue;
        }
        for chain in chains_of(set) {
            let want = indexer.score(&chain).await;
            let got = model.index().find_matches(&chain);
            let got: std::collections::BTreeMap<(u64, u32), u64> =
                got.into_iter().map(|(k, n)| (k, u64::from(n) * u64::from(block_size))).collect();
            assert_eq!(got, want, "{name}: scores of worker {w:?}'s chain {chain:?}");
            chains += 1;
            scored_tokens += want.values().sum::<u64>();
        }
    }
    eprintln!("{name}: {chains} device chains scored alike by the model and the indexer ({scored_tokens} tokens)");
    for s in report["sources"].as_array().into_iter().flatten() {
        let i = &s["index"];
        eprintln!(
            "{name} {}: engine {} blocks, router {} (real {}), both {}; engine only {}; router only {}; the router sees {} of {} cached prefix tokens, {} phantom",
            s["key"],
            i["engine_blocks"],
            i["router_blocks"],
            s["index_real"]["router_blocks"],
            i["both"],
            i["engine_only"],
            i["router_only"],
            i["visible_prefix_tokens"],
            i["engine_prefix_tokens"],
            i["phantom_tokens"]
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
    Ran { report, model, scored_tokens }
}

/// Every root-to-leaf chain of a truth set, as tokens hashes: from the engine's roots, and from
/// the blocks whose parent the engine no longer holds (a request for those tokens is scored
/// from the index's root too).
fn chains_of(set: &kvscope_index::FastMap<u64, kvscope_index::TruthBlock>) -> Vec<Vec<u64>> {
    let mut children: std::collections::HashMap<u64, Vec<u64>> = Default::default();
    let mut roots = Vec::new();
    for (&h, b) in set {
        match b.parent {
            Some(p) if set.contains_key(&p) => children.entry(p).or_default().push(h),
            _ => roots.push(h),
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(u64, Vec<u64>)> = roots.into_iter().map(|r| (r, Vec::new())).collect();
    while let Some((h, mut path)) = stack.pop() {
        path.push(set[&h].tokens_hash);
        match children.get(&h) {
            Some(kids) => stack.extend(kids.iter().map(|&k| (k, path.clone()))),
            None => out.push(path),
        }
    }
    out
}

/// The last dump equals the model block for block, for every source and tier, and the
/// source's real view equals its modelled one. Returns the first source's index object.
fn assert_model_is_the_real_index(name: &str, report: &Value) -> Value {
    let ri = &report["router_indexes"][0];
    assert!(ri["dumps"].as_u64().unwrap() >= 2, "{name}: {ri:#}");
    assert_eq!(ri["errors"], 0, "{name}: {ri:#}");
    assert_eq!(ri["differences"], 0, "{name}: the real index differs from the model: {:#}", ri["first_differences"]);
    for s in report["sources"].as_array().unwrap() {
        let (real, model) = (&s["index_real"], &s["index"]);
        for k in ["engine_blocks", "router_blocks", "both", "engine_only", "router_only", "tiers"] {
            assert_eq!(real[k], model[k], "{name} {}: {k}", s["key"]);
        }
    }
    report["sources"][0]["index"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_index_the_17_vllm_0_33_batches_leave_the_model_s_index() {
    let mut vllm = Vllm::start();
    let workers = format!("7={}", vllm.endpoint);
    let steps = corpus_stream("mixed");
    let n = steps.len() as u64;
    let ran = run("ri_mixed", &workers, 16, 1, async |_| vllm.run(&steps), n).await;
    let index = assert_model_is_the_real_index("mixed", &ran.report);
    // Lowercase cpu dropped (unknown_medium), bin hashes lose their batch, the CPU placeholder
    // at another block size publishes no block; the rank-3 batch is a source of its own.
    let engine_only = index["engine_only"].as_object().unwrap();
    for cause in ["dropped:unknown_medium", "dropped:batch_decode_rejected", "not_published"] {
        assert!(engine_only.contains_key(cause), "mixed: no {cause} in {engine_only:?}");
    }
    assert!(ran.model.index().block_sets().keys().any(|((_, rank), _)| *rank == 3));
    assert!(ran.scored_tokens > 0, "no chain scored anything: the comparison of scores would be empty");
    assert_eq!(index["tiers"]["host_pinned"]["router_blocks"], 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_index_an_indexer_that_joined_late_holds_only_what_it_saw() {
    let mut vllm = Vllm::start();
    let workers = format!("7={}", vllm.endpoint);
    // Six Kimi-K3 batches go out before anyone reads the stream (kvscope included: it joins
    // with the indexer, as an operator opening kvscope mid-incident does; no replay for
    // either). The chains those batches began continue after the join.
    vllm.run(&kimi(0, 1..=6));
    let rest = kimi(0, 7..=20);
    let n = rest.len() as u64;
    let ran = run("ri_late", &workers, 1536, 1, async |_| vllm.run(&rest), n).await;
    let index = assert_model_is_the_real_index("late", &ran.report);
    assert!(index["engine_only"].as_object().unwrap().contains_key("orphan:late_join"), "{index:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_index_a_lost_frame_and_an_engine_restart_cut_the_chains_as_the_real_index_does() {
    let mut vllm = Vllm::start();
    let workers = format!("7={}", vllm.endpoint);
    let mut before = kimi(0, 1..=6);
    before.push(Step::Skip);
    before.extend(kimi(0, 8..=14));
    before.push(Step::Restart);
    let after = kimi(0, 1..=10);
    // A batch with no event: harmless to both readers, it shows when a reader is back.
    let empty = scratch("ri_empty_batch").join("empty.msgpack");
    let mut bytes = vec![0x93, 0xcb];
    bytes.extend(1_765_000_000f64.to_be_bytes());
    bytes.extend([0x90, 0x00]);
    std::fs::write(&empty, bytes).unwrap();
    let probes = std::sync::atomic::AtomicU64::new(0);
    let publish = async |server: &Server| {
        let series = "kvscope_frames_total{source=\"7:0\"}";
        vllm.run(&before);
        // The restarted engine binds a new PUB, and PUB/SUB drops what it sends before a
        // reader has resubscribed: send empty batches until kvscope takes two, then give the
        // indexer's SUB (libzmq reconnects within its 100 ms interval) a second more.
        let seen = server.metric(series).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.metric(series).await < seen + 2.0 {
            assert!(Instant::now() < deadline, "kvscope did not read the restarted engine within 30 s");
            vllm.run(&[Step::Publish(empty.display().to_string())]);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let extra = server.metric(series).await - seen;
        probes.store(extra as u64, std::sync::atomic::Ordering::Relaxed);
        vllm.run(&after);
        server.wait_metric(series, seen + extra + after.len() as f64).await;
    };
    let ran = run("ri_lost_restart", &workers, 1536, 1, publish, 0).await;
    let probes = probes.load(std::sync::atomic::Ordering::Relaxed);
    let index = assert_model_is_the_real_index("lost+restart", &ran.report);
    let s = &ran.report["sources"][0];
    assert_eq!(s["frames"], (before.len() - 2 + after.len()) as u64 + probes, "{s:#}");
    // The skipped seq is a gap; the first probes after the restart may be one more (PUB/SUB
    // lost them before kvscope was back, which is why they are probes).
    assert!(s["gaps"].as_u64().unwrap() >= 1 && s["restarts"] == 1, "{s:#}");
    // After the restart the indexer drops every batch at or below its last seq (the engine's
    // new seqs are all below 13): every block the engine holds now is stale_seq, and the index
    // is empty (the removals before the restart had cut its chains already).
    let engine = index["engine_blocks"].as_u64().unwrap();
    assert!(engine > 0);
    assert_eq!(index["router_blocks"], 0, "{index:#}");
    assert_eq!(index["engine_only"], serde_json::json!({ "stale_seq": engine }), "{index:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_index_the_kimi_k3_capture_published_by_kvscope_leaves_the_model_s_index() {
    // The incident's capture: workers 0, 1 and 2, each its own engine endpoint.
    let dir = scratch("ri_kimi_capture");
    let capture = dir.join("kimi.kvcap");
    write_kimi_capture(&capture);
    let mut publisher = Command::new(BIN)
        .arg("publish")
        .arg(&capture)
        .args(["--bind", "tcp://127.0.0.1:0", "--wait-subscribers", "2", "--speed", "1", "--exit-when-done"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(publisher.stdout.take().unwrap()).lines();
    let mut endpoints = Vec::new();
    while endpoints.len() < 3 {
        let line = lines.next().expect("kvscope publish printed its endpoints").unwrap();
        if let Some((key, rest)) = line.split_once(" pub ") {
            let worker = key.split(':').next().unwrap().to_owned();
            endpoints.push(format!("{worker}={}", rest.split_whitespace().next().unwrap()));
        }
    }
    let workers = endpoints.join(",");
    let frames = 3 * kvscope_corpus::kimi_k3_stream(0).len() as u64;
    let done = std::thread::spawn(move || {
        for _ in lines.map_while(Result::ok) {}
        super::support::wait_child(&mut publisher, Duration::from_secs(120))
    });
    let ran = run("ri_kimi", &workers, 1536, 3, async |_| {}, frames).await;
    assert!(done.join().unwrap().success());
    let index = assert_model_is_the_real_index("kimi", &ran.report);
    // The finding: each engine holds 16 device blocks, and Dynamo's index 2 or 3 of them. The
    // stream evicts the heads of chains; Dynamo's removal cuts the rest of the index edge, and
    // every later store below a cut block is dropped for its missing parent.
    for s in ran.report["sources"].as_array().unwrap() {
        let device = &s["index"]["tiers"]["device"];
        assert_eq!(device["engine_blocks"], 16, "{device:#}");
        assert!(device["router_blocks"].as_u64().unwrap() <= 3, "{device:#}");
        assert!(device["engine_only"]["orphan:after_cut_off"].as_u64().unwrap() >= 13, "{device:#}");
    }
    assert!(index["visible_prefix_tokens"].as_u64().unwrap() * 4 < index["engine_prefix_tokens"].as_u64().unwrap());
    assert!(ran.scored_tokens > 0);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The Kimi-K3 incident streams as a capture: sources 0, 1 and 2, records interleaved.
fn write_kimi_capture(path: &std::path::Path) {
    use proto::capture::{self, CaptureHeader};
    let sources: Vec<proto::SourceInfo> =
        (0..3).map(|w| proto::SourceInfo::engine(w, &w.to_string(), 0, &format!("tcp://127.0.0.1:{}", 5557 + w), None)).collect();
    let header = CaptureHeader { created_unix_nanos: 0, kvscope_version: "test".into(), sources, note: None };
    let mut bytes = Vec::new();
    capture::write_header(&mut bytes, &header).unwrap();
    let streams: Vec<_> = (0..3).map(kvscope_corpus::kimi_k3_stream).collect();
    let mut t = 0u64;
    for i in 0..streams[0].len() {
        for (w, s) in streams.iter().enumerate() {
            let m = &s[i];
            t += 20_000_000;
            bytes.extend(capture::encode_record_parts(w as u32, t, false, &[m.topic.as_bytes(), &m.seq.to_be_bytes(), m.payload]));
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// `--discover dynamo-indexer:URL`: the engines a standalone indexer reads (its `/workers`)
/// become engine sources, each classified at the block size the indexer lists for it, not at
/// `--block-size`: every verdict equals that of a server given the engine by name at the
/// indexer's block size, on the same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_index_a_standalone_indexer_s_workers_are_discovered_as_engine_sources() {
    let mut vllm = Vllm::start();
    let workers = format!("7={}", vllm.endpoint);
    let indexer = Indexer::start(&workers, 16);
    indexer.wait_active(1).await;
    let discover = format!("dynamo-indexer:{}", indexer.url());
    let discovered = Server::start(&["serve", "--listen", "127.0.0.1:0", "--discover", &discover, "--block-size", "1536"]);
    let named = Server::start(&["serve", "--listen", "127.0.0.1:0", "--workers", &workers, "--block-size", "16"]);
    for server in [&discovered, &named] {
        server.wait_metric("kvscope_source_connected{source=\"7:0\"}", 1.0).await;
    }
    assert_eq!(discovered.metric("kvscope_discovered_sources").await, 1.0);
    // The page is told the engine's own block size, so it classifies it as the server does.
    let mut ws = super::support::ws_connect(&discovered.ws_url(), &[]).await.unwrap();
    let (hello, _) = super::support::read_preamble(&mut ws).await;
    let engine = hello.sources.iter().find(|s| s.key == "7:0").expect("7:0 in the hello");
    assert_eq!((engine.kind, engine.block_size), (proto::SourceKind::Engine, Some(16)));
    drop(ws);
    // PUB/SUB drops what it sends in the first moments after a subscription.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let steps = corpus_stream("mixed");
    vllm.run(&steps);
    let verdicts = |text: String| -> Vec<String> {
        let mut lines: Vec<String> =
            text.lines().filter(|l| l.starts_with("kvscope_verdicts_total{source=\"7:0\"")).map(str::to_owned).collect();
        lines.sort();
        lines
    };
    for server in [&discovered, &named] {
        server.wait_metric("kvscope_frames_total{source=\"7:0\"}", steps.len() as f64).await;
    }
    let (got, want) = (verdicts(discovered.metrics().await), verdicts(named.metrics().await));
    assert!(want.iter().any(|l| l.contains("verdict=\"store\"")), "{want:#?}");
    assert_eq!(got, want, "the discovered engine was not classified at the indexer's block size");
}
