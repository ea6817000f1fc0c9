//! Joining a stream late: a source whose first frame has seq N > 0 asks the engine's replay
//! socket for 0..N-1, against vLLM's own publisher (its `kv_events.py` from the release wheel),
//! kvscope's own `publish` and the demo fleet. Each capture must hold every batch exactly once,
//! the replayed ones marked, and `check` must count the late join as one recovered gap.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// Lines a child printed on stdout, read on a thread so that waits have deadlines.
struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    fn of(child: &mut std::process::Child) -> Lines {
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    /// The next line, or a panic naming `what` after `timeout`.
    fn next(&self, what: &str, timeout: Duration) -> String {
        self.0.recv_timeout(timeout).unwrap_or_else(|_| panic!("no line from {what} within {timeout:?}"))
    }
}

fn spec(endpoints: &Value) -> String {
    let list = endpoints.as_array().expect("an endpoint list");
    list.iter().enumerate().map(|(i, e)| format!("{i}={}", e.as_str().unwrap())).collect::<Vec<_>>().join(",")
}

fn check_json(file: &std::path::Path) -> Value {
    let out = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "16", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Starts `kvscope record`, waits for it to say so.
fn record(workers: &str, replay: &str, out: &std::path::Path) -> (std::process::Child, Lines) {
    let mut child = Command::new(BIN)
        .args(["record", "--workers", workers, "--replay", replay, "--out", out.to_str().unwrap()])
        .env("KVSCOPE_LOG", "info,zeromq=off")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut child);
    assert!(lines.next("kvscope record", Duration::from_secs(30)).starts_with("recording to"));
    (child, lines)
}

fn interrupt(child: &mut std::process::Child) {
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(wait_child(child, Duration::from_secs(30)).success());
}

#[test]
fn a_late_join_recovers_what_vllms_own_publisher_still_buffers() {
    const WORKERS: u32 = 3;
    const BEFORE: u64 = 8;
    const AFTER: u64 = 12;
    let mut vllm = Command::new(peer_python())
        .arg(repo().join("scripts/peers/vllm_publisher.py"))
        .args(["--kv-events", vllm_kv_events().to_str().unwrap()])
        .args(["--workers", &WORKERS.to_string(), "--before", &BEFORE.to_string(), "--after", &AFTER.to_string()])
        .args(["--interval", "0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut vllm);
    let endpoints: Value = serde_json::from_str(&lines.next("vllm_publisher.py", Duration::from_secs(30))).unwrap();
    assert_eq!(lines.next("vllm_publisher.py", Duration::from_secs(30)), format!("{{\"paused\": {BEFORE}}}"));

    // kvscope joins during the pause: batches 0..7 exist only in vLLM's replay buffer.
    let file = scratch("late_join_vllm").join("late.kvcap");
    let (mut recorder, _) = record(&spec(&endpoints["pub"]), &spec(&endpoints["replay"]), &file);
    std::thread::sleep(Duration::from_secs(1)); // the SUB handshake; a slow join only moves the first live seq
    let mut stdin = vllm.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    assert_eq!(lines.next("vllm_publisher.py", Duration::from_secs(60)), format!("{{\"published\": {}}}", BEFORE + AFTER));
    std::thread::sleep(Duration::from_millis(500));
    interrupt(&mut recorder);
    drop(stdin);
    wait_child(&mut vllm, Duration::from_secs(30));

    let records = capture_seqs(&file);
    let report = check_json(&file);
    for source in 0..WORKERS {
        let first_live = assert_every_batch_once(&records, source, BEFORE + AFTER);
        assert!(first_live >= BEFORE, "source {source}: first live seq {first_live}, but 0..{BEFORE} were published before the join");
        let s = &report["sources"][source as usize];
        assert_eq!(s["frames"], BEFORE + AFTER, "source {source}: {s}");
        assert_eq!(s["replayed_frames"], first_live, "source {source}: {s}");
        assert_eq!((&s["gaps"], &s["lost_frames"]), (&Value::from(1), &Value::from(0)), "source {source}: {s}");
    }
}

#[test]
fn a_late_join_recovers_what_kvscope_publish_still_buffers() {
    const N: u64 = 40;
    // A capture of one source: 40 batches 50 ms apart, published as an engine would.
    let dir = scratch("late_join_publish");
    let source_file = dir.join("source.kvcap");
    write_capture(&source_file, (0..N).map(|seq| (seq, seq * 50_000_000)));

    let (pub_port, replay_port) = (free_port(), free_port());
    let pub_ep = format!("tcp://127.0.0.1:{pub_port}");
    let replay_ep = format!("tcp://127.0.0.1:{replay_port}");
    let mut publisher = Command::new(BIN)
        .args(["publish", source_file.to_str().unwrap(), "--bind", &pub_ep, "--replay-bind", &replay_ep])
        .args(["--wait-subscribers", "0", "--speed", "1"])
        .env("KVSCOPE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // About a third of the batches go out before kvscope joins.
    std::thread::sleep(Duration::from_millis(700));
    let file = dir.join("late.kvcap");
    let (mut recorder, _) = record(&format!("0={pub_ep}"), &format!("0={replay_ep}"), &file);
    std::thread::sleep(Duration::from_millis(N * 50 + 500));
    interrupt(&mut recorder);
    let _ = publisher.kill();
    let _ = publisher.wait();

    let first_live = assert_every_batch_once(&capture_seqs(&file), 0, N);
    assert!(first_live > 0, "kvscope joined late, so some batches came from replay");
    let s = &check_json(&file)["sources"][0];
    assert_eq!(
        (&s["frames"], &s["replayed_frames"], &s["lost_frames"]),
        (&Value::from(N), &Value::from(first_live), &Value::from(0)),
        "{s}"
    );
}

#[test]
fn the_demo_fleet_records_every_batch_once_however_late_its_intake_joins() {
    const BATCHES: u64 = 60;
    let dir = scratch("late_join_demo");
    let file = dir.join("demo.kvcap");
    let mut server = Server::start(&[
        "demo",
        "--workers",
        "4",
        "--rate",
        "200",
        "--batches",
        &BATCHES.to_string(),
        "--listen",
        "127.0.0.1:0",
        "--record",
        file.to_str().unwrap(),
    ]);
    let done = tokio::runtime::Runtime::new().unwrap().block_on(wait_until(Duration::from_secs(60), || async {
        let m = server.metrics().await;
        (0..4).all(|w| metric_value(&m, &format!("kvscope_frames_total{{source=\"{w}:0\"}}")) == BATCHES as f64)
    }));
    assert!(done, "every demo worker's {BATCHES} batches were relayed");
    assert!(server.interrupt().success());
    let records = capture_seqs(&file);
    for source in 0..4 {
        assert_every_batch_once(&records, source, BATCHES);
    }
}
