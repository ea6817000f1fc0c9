//! Captures: `record` writes what it receives, a killed recorder's file still checks (the cut
//! record reported), `replay` serves a capture as if live, and `publish` re-publishes one for
//! another subscriber.

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use kvscope::demo::engine::Engine;
use kvscope_protocol as proto;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_writes_every_frame_then_replay_and_publish_play_it_back() {
    let dir = scratch("record");
    let file = dir.join("run.kvcap");
    let mut engine = Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap();
    let mut recorder = Command::new(BIN)
        .args(["record", "--workers", &format!("w=tcp://{}", engine.endpoint.trim_start_matches("tcp://"))])
        .args(["--out", file.to_str().unwrap(), "--duration", "3s"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    engine.wait_subscribers(1).await;
    let topic = Bytes::from_static(b"kv-events");
    for seq in 0..20 {
        engine.publish(&topic, payload(seq, 16)).await;
    }
    engine.send(vec![topic.clone(), Bytes::from_static(b"\x01")]).await; // a frame error, recorded too
    let status = wait_child(&mut recorder, Duration::from_secs(30));
    assert!(status.success());
    let reader = kvscope::capture::open(&file).unwrap();
    assert_eq!(reader.header().sources[0].key, "w:0");
    let records: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(records.len(), 21);
    assert_eq!(records[0].frames[1].as_slice(), 0u64.to_be_bytes());
    assert_eq!(records[19].frames[2].as_slice(), &payload(19, 16)[..]);
    assert_eq!(records[20].frames.len(), 2);

    // replay: the capture served as if live, at full speed.
    let server = Server::start(&["replay", file.to_str().unwrap(), "--speed", "max", "--listen", "127.0.0.1:0"]);
    server.wait_metric("kvscope_frames_total{source=\"w:0\"}", 20.0).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (hello, history) = read_preamble(&mut ws).await;
    assert_eq!(hello.mode, proto::ServerMode::Replay);
    let seqs: Vec<u64> = history.iter().filter_map(|m| if let proto::Message::Frame(f) = m { Some(f.seq) } else { None }).collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    assert_eq!(history.iter().filter(|m| matches!(m, proto::Message::FrameError(_))).count(), 1);
    drop(server);

    // publish: re-published for a subscriber, which receives the same 20 frames.
    let mut publisher = Command::new(BIN)
        .args(["publish", file.to_str().unwrap(), "--bind", "tcp://127.0.0.1:0", "--speed", "max", "--exit-when-done"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(publisher.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    // "w:0 pub tcp://127.0.0.1:P replay tcp://127.0.0.1:R"
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts[0], "w:0", "{line}");
    let server = Server::start(&[
        "serve",
        "--workers",
        &format!("w={}", parts[2]),
        "--replay",
        &format!("w={}", parts[4]),
        "--listen",
        "127.0.0.1:0",
    ]);
    server.wait_metric("kvscope_frames_total{source=\"w:0\"}", 20.0).await;
    assert_eq!(server.metric("kvscope_frame_errors_total{source=\"w:0\",kind=\"frame_count\"}").await, 1.0);
    assert_eq!(server.metric("kvscope_gaps_total{source=\"w:0\"}").await, 0.0);
    assert!(wait_child(&mut publisher, Duration::from_secs(30)).success());
}

#[test]
fn a_killed_recorders_cut_file_still_checks_and_says_so() {
    let dir = scratch("truncated");
    let file = dir.join("cut.kvcap");
    let info = proto::SourceInfo {
        index: 0,
        key: "0:0".into(),
        worker_id: "0".into(),
        dp_rank: 0,
        endpoint: "tcp://127.0.0.1:5557".into(),
        replay_endpoint: None,
        kind: proto::SourceKind::Engine,
        event_plane: None,
        block_size: None,
    };
    let mut bytes = Vec::new();
    proto::capture::write_header(&mut bytes, &kvscope::capture::header(vec![info], None)).unwrap();
    for seq in 0..5u64 {
        let frames = [b"kv-events".to_vec(), seq.to_be_bytes().to_vec(), payload(seq, 16).to_vec()];
        bytes.extend_from_slice(&proto::capture::encode_record_parts(0, seq, false, &frames));
    }
    let full = bytes.len();
    bytes.truncate(full - 10);
    std::fs::write(&file, &bytes).unwrap();
    let out = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "16", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["sources"][0]["frames"], 4);
    assert_eq!(json["sources"][0]["applied"]["device"], 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is cut short"), "{stderr}");
    assert!(stderr.contains("The 4 complete records before it were read."), "{stderr}");
    assert!(json["truncated"].as_str().unwrap().contains("cut short"));

    std::fs::write(&file, b"not a capture").unwrap();
    let out = Command::new(BIN).args(["check", file.to_str().unwrap(), "--block-size", "16"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a kvscope capture"));
}
