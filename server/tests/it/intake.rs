//! The ZMQ intake against engines that misbehave: restarts, gaps with and without replay,
//! malformed frames and payloads, an engine that is down at start. Engines are in-test XPUB +
//! ROUTER pairs (`kvscope::demo::engine::Engine`): an XPUB sees the server's subscription, so a
//! test publishes only once the server listens (PUB/SUB drops whatever comes first otherwise).

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

fn serve(workers: &str, replay: Option<&str>) -> Server {
    let mut args = vec!["serve", "--workers", workers, "--listen", "127.0.0.1:0"];
    if let Some(r) = replay {
        args.extend(["--replay", r]);
    }
    Server::start(&args)
}

/// Frames of source 0, from history and live, until `n` arrived: (seq, replayed).
async fn frames(ws: &mut Ws, history: Vec<proto::Message>, n: usize) -> Vec<(u64, bool)> {
    let mut out: Vec<(u64, bool)> = history
        .into_iter()
        .filter_map(|m| match m {
            proto::Message::Frame(f) => Some((f.seq, f.replayed)),
            _ => None,
        })
        .collect();
    while out.len() < n {
        match next_message(ws, Duration::from_secs(30)).await {
            Some(proto::Message::Frame(f)) => out.push((f.seq, f.replayed)),
            Some(_) => {}
            None => panic!("the WebSocket closed after {} of {n} frames: {out:?}", out.len()),
        }
    }
    out
}

const FRAMES: &str = "kvscope_frames_total{source=\"0:0\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_recovered_by_replay_and_relayed_in_order() {
    let mut engine = engine().await;
    let server = serve(&format!("0={}", engine.endpoint), Some(&format!("0={}", engine.replay_endpoint)));
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (_, history) = read_preamble(&mut ws).await;
    for seq in 0..3 {
        engine.publish(&topic(), payload(seq, 16)).await;
    }
    // 3 and 4 go only to the replay buffer: the live stream jumps from 2 to 5.
    engine.buffer_only(&topic(), payload(3, 16));
    engine.buffer_only(&topic(), payload(4, 16));
    engine.publish(&topic(), payload(5, 16)).await;
    server.wait_metric(FRAMES, 6.0).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_replayed_frames_total{source=\"0:0\"}"), 2.0);
    assert_eq!(metric_value(&m, "kvscope_lost_frames_total{source=\"0:0\"}"), 0.0);
    assert_eq!(metric_value(&m, "kvscope_restarts_total{source=\"0:0\"}"), 0.0);
    let got = frames(&mut ws, history, 6).await;
    assert_eq!(got, vec![(0, false), (1, false), (2, false), (3, true), (4, true), (5, false)]);
    let status = status_when(&mut ws, |s| s.counters.gaps == 1 && s.counters.frames == 6).await;
    let gap = &status.gaps[0];
    assert_eq!((gap.from_seq, gap.to_seq, gap.recovered_frames, gap.lost_frames), (3, 4, 2, 0));
    assert_eq!(gap.state, proto::GapState::Recovered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_without_a_replay_endpoint_is_reported_lost_with_its_range() {
    let mut engine = engine().await;
    let server = serve(&format!("0={}", engine.endpoint), None);
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    for seq in 0..2 {
        engine.publish(&topic(), payload(seq, 16)).await;
    }
    engine.buffer_only(&topic(), payload(2, 16));
    engine.buffer_only(&topic(), payload(3, 16));
    engine.publish(&topic(), payload(4, 16)).await;
    server.wait_metric(FRAMES, 3.0).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_lost_frames_total{source=\"0:0\"}"), 2.0);
    assert_eq!(metric_value(&m, "kvscope_replayed_frames_total{source=\"0:0\"}"), 0.0);
    let status = status_when(&mut ws, |s| s.counters.gaps == 1).await;
    let gap = &status.gaps[0];
    assert_eq!((gap.from_seq, gap.to_seq, gap.recovered_frames, gap.lost_frames), (2, 3, 0, 2));
    assert_eq!(gap.state, proto::GapState::Unrecovered);
    assert_eq!(
        gap.reason.as_deref(),
        Some("no replay endpoint configured for 0:0; pass --replay \"0:0=tcp://HOST:PORT\" with the engine's replay port")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_endpoint_that_is_down_loses_the_gap_and_says_why() {
    let mut engine = engine().await;
    let dead = format!("0=tcp://127.0.0.1:{}", free_port());
    let server = serve(&format!("0={}", engine.endpoint), Some(&dead));
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    engine.publish(&topic(), payload(0, 16)).await;
    engine.buffer_only(&topic(), payload(1, 16));
    engine.publish(&topic(), payload(2, 16)).await;
    server.wait_metric(FRAMES, 2.0).await;
    assert_eq!(server.metric("kvscope_lost_frames_total{source=\"0:0\"}").await, 1.0);
    let status = status_when(&mut ws, |s| s.counters.gaps == 1).await;
    let reason = status.gaps[0].reason.clone().unwrap();
    assert!(reason.starts_with("replay endpoint tcp://127.0.0.1:"), "{reason}");
    assert!(reason.ends_with("is the engine's replay socket enabled on that port?"), "{reason}");
}

/// Runs an engine on its own runtime in its own thread, publishing `frames` once subscribed,
/// until told to stop; then the runtime is dropped with every task and socket of the engine, as
/// when an engine process dies (dropping only the socket would leave zeromq's connection tasks
/// holding the TCP stream).
fn engine_process(endpoint: String, frames: u64) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut engine = Engine::bind(&endpoint, "tcp://127.0.0.1:0", true, true).await.unwrap();
            engine.wait_subscribers(1).await;
            for seq in 0..frames {
                engine.publish(&topic(), payload(seq, 16)).await;
            }
            while stopped.try_recv().is_err() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        drop(runtime);
    });
    (stop, thread)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_restart_is_a_restart_not_a_gap() {
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let server = serve(&format!("0={endpoint}"), None);
    let (stop, first) = engine_process(endpoint.clone(), 6);
    server.wait_metric(FRAMES, 6.0).await;
    stop.send(()).unwrap();
    first.join().unwrap();
    server.wait_metric("kvscope_source_connected{source=\"0:0\"}", 0.0).await;
    // The engine comes back on the same port, its sequence counter from 0.
    let (stop, second) = engine_process(endpoint, 3);
    server.wait_metric(FRAMES, 9.0).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_restarts_total{source=\"0:0\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_reconnects_total{source=\"0:0\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 0.0);
    assert_eq!(metric_value(&m, "kvscope_lost_frames_total{source=\"0:0\"}"), 0.0);
    assert_eq!(metric_value(&m, "kvscope_source_connected{source=\"0:0\"}"), 1.0);
    stop.send(()).unwrap();
    second.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_and_payloads_are_counted_kept_and_the_stream_goes_on() {
    let mut engine = engine().await;
    let server = serve(&format!("0={}", engine.endpoint), None);
    engine.wait_subscribers(1).await;
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    let seq = |s: u64| Bytes::copy_from_slice(&s.to_be_bytes());
    let good = payload(0, 16);
    engine.send(vec![topic(), Bytes::from_static(&[1, 2]), good.clone()]).await; // seq of 2 bytes
    engine.send(vec![topic(), good.clone()]).await; // 2 frames
    engine.send(vec![topic(), seq(0), good.clone(), Bytes::from_static(b"x")]).await; // 4 frames
    engine.send(vec![topic(), seq(0), Bytes::from_static(b"\xa3abc")]).await; // a str, not a batch
    engine.send(vec![topic(), seq(1), good.slice(..good.len() / 2)]).await; // cut short
    engine.send(vec![topic(), seq(2), good.clone()]).await;
    server.wait_metric(FRAMES, 3.0).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_frame_errors_total{source=\"0:0\",kind=\"seq_length\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_frame_errors_total{source=\"0:0\",kind=\"frame_count\"}"), 2.0);
    assert_eq!(metric_value(&m, "kvscope_decode_errors_total{source=\"0:0\",kind=\"type_mismatch\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_decode_errors_total{source=\"0:0\",kind=\"truncated\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_events_total{source=\"0:0\",type=\"BlockStored\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 0.0);

    let mut errors = Vec::new();
    let mut frames = Vec::new();
    while errors.len() < 5 || frames.len() < 3 {
        match next_message(&mut ws, Duration::from_secs(30)).await.unwrap() {
            proto::Message::FrameError(e) => errors.push(e),
            proto::Message::Frame(f) => frames.push(f.seq),
            _ => {}
        }
    }
    assert_eq!(frames, vec![0, 1, 2]);
    let texts: Vec<(&str, &str)> = errors.iter().map(|e| (e.kind.as_str(), e.text.as_str())).collect();
    assert_eq!(texts[0], ("seq_length", "0:0: expected an 8-byte big-endian sequence number in frame 1, got 2 bytes"));
    assert_eq!(texts[1], ("frame_count", "0:0: expected 3 frames [topic, seq, payload], got 2"));
    assert_eq!(texts[2], ("frame_count", "0:0: expected 3 frames [topic, seq, payload], got 4"));
    assert_eq!(errors[0].frames.iter().map(|f| f.to_vec()).collect::<Vec<_>>(), vec![b"kv-events".to_vec(), vec![1, 2], good.to_vec()]);
    assert_eq!(texts[3].0, "decode");
    assert_eq!(errors[3].decode_kind.as_deref(), Some("type_mismatch"));
    assert!(texts[3].1.starts_with("0:0 seq 0: byte 0: "), "{}", texts[3].1);
    assert_eq!(errors[4].decode_kind.as_deref(), Some("truncated"));
    assert_eq!(errors[4].seq, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_down_at_start_is_shown_connecting_then_goes_live() {
    let port = free_port();
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let server = serve(&format!("0={endpoint}"), None);
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    let status = status_when(&mut ws, |s| s.state == proto::ConnState::Connecting && s.error.is_some()).await;
    let error = status.error.unwrap();
    assert!(error.starts_with(&format!("{endpoint}: ")), "{error}");
    assert!(error.ends_with("retrying (is the engine up and started with KV events on this port?)"), "{error}");
    assert_eq!(server.metric("kvscope_source_connected{source=\"0:0\"}").await, 0.0);
    // The server is still up and serving.
    assert_eq!(http_get(&server.addr, "/healthz", &[]).await.0, 200);

    let mut engine = Engine::bind(&endpoint, "tcp://127.0.0.1:0", true, true).await.unwrap();
    engine.wait_subscribers(1).await;
    status_when(&mut ws, |s| s.state == proto::ConnState::Live).await;
    for seq in 0..3 {
        engine.publish(&topic(), payload(seq, 16)).await;
    }
    server.wait_metric(FRAMES, 3.0).await;
    let m = server.metrics().await;
    assert_eq!(metric_value(&m, "kvscope_source_connected{source=\"0:0\"}"), 1.0);
    assert_eq!(metric_value(&m, "kvscope_reconnects_total{source=\"0:0\"}"), 0.0);
    assert_eq!(metric_value(&m, "kvscope_gaps_total{source=\"0:0\"}"), 0.0);
}
