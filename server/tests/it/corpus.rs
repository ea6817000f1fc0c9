//! The corpus end to end: a Python publisher (pyzmq) replays the real-release Kimi-K3 streams
//! with their seqs, `kvscope serve --record` records them, and `kvscope check --json` on the
//! recording must say what `kvscope-normalize` says about the same streams: no fatal verdict
//! under `fixed` at 1536, fatal under `legacy`, and every count equal.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use kvscope_normalize::{Normalizer, Outcome, Policy, StorageTier, VerdictLabel};
use serde_json::Value;

use crate::support::*;

const STREAMS: [&str; 3] =
    ["vllm-0.33.0/streams/kimi_k3_worker0.jsonl", "vllm-0.33.0/streams/kimi_k3_worker1.jsonl", "vllm-0.33.0/streams/kimi_k3_worker2.jsonl"];

fn fixtures() -> std::path::PathBuf {
    repo().join("tests/fixtures/kv-events")
}

/// The payloads of one stream, in publish order.
fn stream_payloads(stream: &str) -> Vec<(u64, Vec<u8>)> {
    std::fs::read_to_string(fixtures().join(stream))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let file = fixtures().join(v["payload_file"].as_str().unwrap());
            (v["seq"].as_u64().unwrap(), std::fs::read(file).unwrap())
        })
        .collect()
}

/// What the core crate says about one stream, shaped like `check --json`'s source entry.
fn expected(worker: usize, block_size: u32, policy: Policy) -> Value {
    let mut n = Normalizer::new(block_size, policy);
    let id = n.source(&worker.to_string(), 0);
    let mut verdicts = Vec::new();
    for (seq, payload) in stream_payloads(STREAMS[worker]) {
        n.push_payload(id, seq, &payload, &mut verdicts).unwrap();
    }
    let mut applied = serde_json::Map::new();
    for tier in StorageTier::ALL {
        let count = verdicts.iter().filter(|v| v.tier == Some(tier) && v.label().outcome() == Outcome::Apply).count();
        applied.insert(tier.label().to_owned(), count.into());
    }
    let mut skipped = serde_json::Map::new();
    for label in VerdictLabel::ALL {
        let count = verdicts.iter().filter(|v| v.label() == label && label.outcome() == Outcome::Skip).count();
        if count > 0 {
            skipped.insert(label.as_str().to_owned(), count.into());
        }
    }
    let fatal: Vec<_> = verdicts.iter().filter(|v| v.is_fatal()).collect();
    let c = n.counters(id);
    serde_json::json!({
        "events": verdicts.len(),
        "applied": applied,
        "skipped": skipped,
        "fatal": {
            "count": fatal.len(),
            "first_seq": fatal.first().map(|v| v.seq),
            "first_error": c.first_fatal.as_ref().map(|l| l.text.clone()),
        },
    })
}

fn check(file: &std::path::Path, policy: &str) -> (Option<i32>, Value) {
    let out =
        Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "1536", "--policy", policy, "--json"]).output().unwrap();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_kimi_k3_streams_check_like_the_core_crate() {
    let mut publisher = Command::new(peer_python())
        .arg(repo().join("scripts/publish_corpus.py"))
        .args(["--fixtures", fixtures().to_str().unwrap()])
        .args(STREAMS.iter().flat_map(|s| ["--stream", s]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the peers' Python runs");
    let mut lines = BufReader::new(publisher.stdout.take().unwrap()).lines();
    let first = lines
        .next()
        .expect("publish_corpus.py printed its endpoints (scripts/install-tools.sh installs pyzmq in the peers' virtualenv)")
        .unwrap();
    let endpoints: Value = serde_json::from_str(&first).unwrap();
    let spec = |key: &str| {
        endpoints[key]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i}={}", e.as_str().unwrap()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let dir = scratch("corpus");
    let file = dir.join("kimi_k3.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--workers",
        &spec("pub"),
        "--replay",
        &spec("replay"),
        "--block-size",
        "1536",
        "--listen",
        "127.0.0.1:0",
        "--record",
        file.to_str().unwrap(),
    ]);
    let published: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(published["published"], 60);
    for w in 0..3 {
        server.wait_metric(&format!("kvscope_frames_total{{source=\"{w}:0\"}}"), 20.0).await;
    }
    let m = server.metrics().await;
    // The live server classifies with both policies too.
    assert_eq!(
        metric_value(&m, "kvscope_verdicts_total{source=\"0:0\",policy=\"fixed\",tier=\"device\",verdict=\"block_size_mismatch\"}"),
        0.0
    );
    assert!(
        metric_value(&m, "kvscope_verdicts_total{source=\"0:0\",policy=\"legacy\",tier=\"device\",verdict=\"block_size_mismatch\"}") > 0.0
    );
    assert!(
        metric_value(
            &m,
            "kvscope_verdicts_total{source=\"0:0\",policy=\"fixed\",tier=\"host_pinned\",verdict=\"offload_block_size_mismatch\"}"
        ) > 0.0
    );
    assert!(server.interrupt().success());
    drop(publisher.stdin.take());
    let _ = publisher.wait();

    let (code, fixed) = check(&file, "fixed");
    assert_eq!(code, Some(0), "no fatal verdict under fixed at 1536: {fixed:#}");
    assert_eq!(fixed["block_size"], 1536);
    assert_eq!(fixed["policy"], "fixed");
    assert_eq!(fixed["totals"]["fatal"]["count"], 0);
    let (code, legacy) = check(&file, "legacy");
    assert_eq!(code, Some(3), "fatal under legacy");
    assert!(legacy["totals"]["fatal"]["count"].as_u64().unwrap() > 0);

    for (report, policy) in [(&fixed, Policy::FIXED), (&legacy, Policy::LEGACY)] {
        let sources = report["sources"].as_array().unwrap();
        assert_eq!(sources.len(), 3);
        for (w, source) in sources.iter().enumerate() {
            assert_eq!(source["worker_id"], w.to_string());
            assert_eq!(source["dp_rank"], 0);
            for (key, want) in [("frames", 20), ("frame_errors", 0), ("decode_errors", 0), ("gaps", 0), ("restarts", 0)] {
                assert_eq!(source[key], want, "{} source {w} {key}", policy.name);
            }
            let want = expected(w, 1536, policy);
            for key in ["events", "applied", "skipped", "fatal"] {
                assert_eq!(source[key], want[key], "{} source {w} {key}", policy.name);
            }
        }
        assert_eq!(report["totals"]["frames"], 60);
    }
    let first_error = legacy["sources"][0]["fatal"]["first_error"].as_str().unwrap();
    assert!(first_error.starts_with("0:0 seq 8 "), "{first_error}");

    let table = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "1536", "--policy", "legacy"]).output().unwrap();
    assert_eq!(table.status.code(), Some(3));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("FATAL under policy legacy at block size 1536"), "{text}");
    let _ = std::io::stdout().flush();
}
