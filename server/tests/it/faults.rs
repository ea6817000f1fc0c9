//! Faults, each with its exact counters: the disk filling up while recording, the recorder
//! killed mid-write, 200 WebSocket clients (one never reads, the others at full speed), a source
//! sending malformed messages at a high rate, a hostile 12 MB frame between real ones, and a
//! capture whose receive times go backwards.

use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use kvscope::demo::engine::Engine;
use kvscope_protocol as proto;

use crate::support::*;

fn topic() -> Bytes {
    Bytes::from_static(b"kv-events")
}

async fn engine() -> Engine {
    Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap()
}

const FRAMES: &str = "kvscope_frames_total{source=\"0:0\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_recording_not_the_relay() {
    const N: u64 = 300;
    let mut engine = engine().await;
    let dir = scratch("disk_full");
    let file = dir.join("full.kvcap");
    // A 256 KiB filesystem of the server's own (a private mount namespace; nothing leaks out).
    let script = format!(
        "mount -t tmpfs -o size=256k kvscope-test {dir} && exec {bin} serve --workers 0={ep} --listen 127.0.0.1:0 --record {file}",
        dir = dir.display(),
        bin = BIN,
        ep = engine.endpoint,
        file = file.display()
    );
    let mut command = Command::new("unshare");
    command.args(["--mount", "sh", "-c", &script]);
    let mut server = Server::spawn(command, "serve --record on a 256 KiB tmpfs");
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (_, preamble) = read_preamble(&mut ws).await;
    assert!(
        preamble.iter().any(|m| matches!(m, proto::Message::RecordingStatus(r) if r.state == proto::RecordingState::Recording)),
        "a newcomer learns that the server records"
    );
    // 300 frames of ~4 KB: about 1.2 MB, far more than the filesystem holds.
    for seq in 0..N {
        engine.publish(&topic(), payload(seq, 1000)).await;
    }
    server.wait_metric(FRAMES, N as f64).await;
    // Every frame still reaches the browser (the relay never waits on the disk), and the
    // recording status says when writing stopped and what the file is missing.
    let (mut seen, mut last) = (0, None::<proto::RecordingStatus>);
    while seen < N || last.as_ref().is_none_or(|r| r.state != proto::RecordingState::Failed || r.records + r.dropped_records < N) {
        match next_message(&mut ws, Duration::from_secs(30)).await.expect("socket open") {
            proto::Message::Frame(_) => seen += 1,
            proto::Message::RecordingStatus(r) => last = Some(r),
            _ => {}
        }
    }
    let last = last.unwrap();
    assert_eq!(seen, N);
    let error = last.error.clone().unwrap();
    assert!(error.contains("No space left on device"), "{error}");
    assert!(error.contains("the relay goes on without it"), "{error}");
    assert!(last.records > 0 && last.records < N, "{last:?}");
    assert_eq!(last.records + last.dropped_records, N, "every frame is either in the file or counted as dropped: {last:?}");
    server.wait_metric("kvscope_recording{state=\"failed\"}", 1.0).await;
    assert_eq!(server.metric("kvscope_recording{state=\"recording\"}").await, 0.0);
    assert_eq!(server.metric("kvscope_recording_records").await, last.records as f64);
    assert_eq!(server.metric("kvscope_recording_dropped_records").await, last.dropped_records as f64);
    // The file holds exactly the complete records it claims, seq 0 onwards. It lives in the
    // server's mount namespace: read it through /proc before the server (and its tmpfs) goes.
    let copy = dir.with_extension("copy.kvcap");
    std::fs::copy(format!("/proc/{}/root{}", server.pid(), file.display()), &copy).unwrap();
    let status = server.interrupt();
    assert_eq!(status.code(), Some(1), "serve says the recording failed when it exits");
    let records = capture_seqs(&copy);
    let on_disk = std::fs::metadata(&copy).unwrap().len();
    assert_eq!(records.len() as u64, last.records, "{on_disk} bytes on disk, {last:?}");
    assert_eq!(records.iter().map(|r| r.1).collect::<Vec<_>>(), (0..last.records).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorder_killed_mid_write_leaves_every_complete_record() {
    let mut engine = engine().await;
    let file = scratch("sigkill").join("killed.kvcap");
    let mut recorder = Command::new(BIN)
        .args(["record", "--workers", &format!("0={}", engine.endpoint), "--out", file.to_str().unwrap()])
        .env("KVSCOPE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    engine.wait_subscribers(1).await;
    let mut seq = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        engine.publish(&topic(), payload(seq, 64)).await;
        seq += 1;
        if seq % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Command::new("kill").args(["-KILL", &recorder.id().to_string()]).status().unwrap();
    assert!(!wait_child(&mut recorder, Duration::from_secs(10)).success());
    // Every record the writer finished is there, in order, and the reader says where it was cut
    // (or the cut fell between records).
    let records = capture_seqs(&file);
    assert!(records.len() as u64 > seq / 4, "{} of {seq} records survived; the writer writes every 500 ms", records.len());
    assert_eq!(records.iter().map(|r| r.1).collect::<Vec<_>>(), (0..records.len() as u64).collect::<Vec<_>>());
    let check = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "64", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(json["sources"][0]["frames"], records.len() as u64, "check reads the same records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_clients_one_never_reading_one_at_full_speed() {
    const CLIENTS: usize = 200;
    const N: u64 = 3000;
    let mut engine = engine().await;
    let server = Server::start(&[
        "serve",
        "--workers",
        &format!("0={}", engine.endpoint),
        "--listen",
        "127.0.0.1:0",
        "--client-queue-bytes",
        "256KiB",
    ]);
    engine.wait_subscribers(1).await;
    let mut stalled = ws_connect_small_window(&server.addr).await;
    read_preamble(&mut stalled).await;
    // 199 clients reading as fast as they can, each counting what it received and lost.
    let mut readers = Vec::new();
    for _ in 0..CLIENTS - 1 {
        let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
        read_preamble(&mut ws).await;
        readers.push(tokio::spawn(async move {
            let (mut frames, mut lost) = (0u64, 0u64);
            while frames + lost < N {
                match next_message(&mut ws, Duration::from_secs(60)).await.expect("socket open") {
                    proto::Message::Frame(_) => frames += 1,
                    proto::Message::LagNotice(n) => lost += n.frames_lost,
                    _ => {}
                }
            }
            (frames, lost)
        }));
    }
    assert!(wait_until(Duration::from_secs(30), || async { server.metric("kvscope_clients").await == CLIENTS as f64 }).await);
    // ~4 KB frames at about 500/s: 12 MB in all, more than the stalled client's queue and
    // every kernel buffer between it and the server (loopback autotunes send buffers to 4 MB).
    for seq in 0..N {
        engine.publish(&topic(), payload(seq, 1000)).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.wait_metric(FRAMES, N as f64).await;
    for (i, r) in readers.into_iter().enumerate() {
        let (frames, lost) = tokio::time::timeout(Duration::from_secs(120), r).await.expect("reader done").unwrap();
        // A client that never reads costs the others nothing.
        assert_eq!((frames, lost), (N, 0), "reader {i}");
    }
    // The stalled client now reads: what fit in its queue, a lag notice for the rest, exactly.
    let (mut frames, mut lost) = (0u64, 0u64);
    while frames + lost < N {
        match next_message(&mut stalled, Duration::from_secs(30)).await.expect("socket open") {
            proto::Message::Frame(_) => frames += 1,
            proto::Message::LagNotice(n) => lost += n.frames_lost,
            _ => {}
        }
    }
    assert!(lost > 0 && frames + lost == N, "stalled client: {frames} frames + {lost} lost");
    assert_eq!(server.metric("kvscope_client_lagged_frames_total").await, lost as f64);
    // The 199 readers hung up when done; their slots are gone, the stalled one's is not.
    assert!(wait_until(Duration::from_secs(10), || async { server.metric("kvscope_clients").await == 1.0 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_at_a_high_rate_are_counted_and_the_stream_goes_on() {
    const BAD: u64 = 10_000;
    const GOOD: u64 = 500;
    let mut engine = engine().await;
    let server = Server::start(&["serve", "--workers", &format!("0={}", engine.endpoint), "--listen", "127.0.0.1:0"]);
    engine.wait_subscribers(1).await;
    let mut good = 0;
    for i in 0..BAD {
        // Two frames (no seq), and every 20th a valid frame between them.
        engine.send(vec![topic(), Bytes::from_static(b"\x90")]).await;
        if i % (BAD / GOOD) == 0 {
            engine.publish(&topic(), payload(good, 16)).await;
            good += 1;
            // ~20k messages/s: fast, but within what a PUB's high-water mark never drops.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    server.wait_metric(FRAMES, GOOD as f64).await;
    server.wait_metric("kvscope_frame_errors_total{source=\"0:0\",kind=\"frame_count\"}", BAD as f64).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 0.0);
    assert_eq!(metric_value(&m, "kvscope_decode_errors_total{source=\"0:0\",kind=\"truncated\"}"), 0.0);
    assert_eq!(http_get(&server.addr, "/healthz", &[]).await.0, 200);
}

/// Peak resident memory of a process, from /proc (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB").trim().parse().unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_12_mb_frame_between_real_ones_is_classified_in_bounded_memory() {
    let mut engine = engine().await;
    let server = Server::start(&["serve", "--workers", &format!("0={}", engine.endpoint), "--listen", "127.0.0.1:0"]);
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    // A valid batch of 6 million one-element events ([""], 2 bytes each): 12 MB.
    const EVENTS: u32 = 6_000_000;
    let hostile = kvscope_encode::raw::unknown_event_flood(EVENTS as usize);
    engine.publish(&topic(), payload(0, 16)).await;
    engine.publish(&topic(), Bytes::from(hostile)).await;
    for seq in 2..10 {
        engine.publish(&topic(), payload(seq, 16)).await;
    }
    server.wait_metric(FRAMES, 10.0).await;
    // Every event of it was classified (as an unknown tag), and so was every frame after it.
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_events_total{source=\"0:0\",type=\"unknown\"}"), EVENTS as f64);
    assert_eq!(metric_value(&m, "kvscope_events_total{source=\"0:0\",type=\"BlockStored\"}"), 9.0);
    let peak = peak_rss(server.pid());
    eprintln!("kvscope serve: peak RSS {} MiB after a 12 MB frame of {EVENTS} events", peak >> 20);
    assert!(peak < 512 << 20, "peak RSS {} MiB", peak >> 20);
    let mut frames = 0;
    while frames < 10 {
        if let Some(proto::Message::Frame(_)) = next_message(&mut ws, Duration::from_secs(30)).await {
            frames += 1;
        }
    }
}

#[test]
fn receive_times_that_go_backwards_replay_and_check_in_full() {
    const N: u64 = 50;
    let file = scratch("backwards").join("backwards.kvcap");
    // Every other record claims to be 10 s older than the one before (a clock stepped back).
    write_capture(
        &file,
        (0..N).map(|seq| (seq, 1_700_000_000_000_000_000 + if seq % 2 == 0 { seq * 1_000_000 } else { 0 } - (seq % 2) * 10_000_000_000)),
    );
    let out = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "16", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &json["sources"][0];
    assert_eq!((&s["frames"], &s["events"], &s["gaps"]), (&N.into(), &N.into(), &0.into()), "{s}");
    // Played at real-time speed, backwards steps cost no wait and nothing is skipped.
    let server = Server::start(&["replay", file.to_str().unwrap(), "--speed", "1", "--block-size", "16", "--listen", "127.0.0.1:0"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        server.wait_metric(FRAMES, N as f64).await;
        let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
        let (_, history) = read_preamble(&mut ws).await;
        let seqs: Vec<u64> = history.iter().filter_map(|m| if let proto::Message::Frame(f) = m { Some(f.seq) } else { None }).collect();
        assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    });
}
