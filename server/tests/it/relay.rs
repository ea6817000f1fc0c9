//! The WebSocket relay: what a browser receives from `kvscope demo` (hello, history, live, each
//! frame once and in order per source), and what a client that never reads costs (nothing: the
//! others get every frame, memory stays bounded, the slow one is told what it lost).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kvscope::demo::engine::Engine;
use kvscope_protocol as proto;

use crate::support::*;

/// Checks that each source's seqs are consecutive; returns frames per source.
fn assert_once_in_order(seqs: &BTreeMap<u32, Vec<u64>>) {
    for (source, s) in seqs {
        for w in s.windows(2) {
            assert_eq!(w[1], w[0] + 1, "source {source}: seq {} followed by {} (duplicate or hole)", w[0], w[1]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_clients_get_hello_history_then_live_frames_once_and_in_order() {
    // Engine sources only; the demo's event plane is event_plane.rs's (plane_demo_*).
    let server = Server::start(&["demo", "--listen", "127.0.0.1:0", "--rate", "40", "--no-event-plane"]);
    let mut first = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (hello, _) = read_preamble(&mut first).await;
    assert_eq!(hello.mode, proto::ServerMode::Demo);
    assert_eq!(hello.sources.len(), 3);
    assert_eq!(hello.sources.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["0:0", "1:0", "2:0"]);
    assert!(hello.sources.iter().all(|s| s.replay_endpoint.is_some()));
    assert_eq!(
        hello.defaults,
        proto::Defaults {
            block_size: 1536,
            policy_a: "legacy".into(),
            policy_b: "fixed".into(),
            relay_policy: "dynamo-1.6.1".into(),
            index_max_nodes: Some(kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS as u64)
        }
    );
    assert!(hello.mode_detail.starts_with("scenario kimi-k3 (vllm-0.33.0), 3 worker(s)"), "{}", hello.mode_detail);

    // The first client reads live frames until every source has sent 30.
    let mut live: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut seen_live: BTreeMap<u32, bool> = BTreeMap::new();
    while live.len() < 3 || live.values().any(|s| s.len() < 30) {
        match next_message(&mut first, Duration::from_secs(30)).await {
            Some(proto::Message::Frame(f)) => {
                // No gap on loopback: only a late join (the intake connecting after the engine's
                // first batches) is replayed, and only before the source's first live frame.
                let after_live = seen_live.get(&f.source).copied().unwrap_or(false);
                assert!(!(f.replayed && after_live), "source {} seq {}: replayed after live frames", f.source, f.seq);
                seen_live.insert(f.source, after_live || !f.replayed);
                kvscope_wire::decode_batch(&f.payload).expect("demo payloads decode");
                live.entry(f.source).or_default().push(f.seq);
            }
            Some(_) => {}
            None => panic!("the first client's socket closed"),
        }
    }
    assert_once_in_order(&live);

    // A newcomer gets the history (everything so far), then live frames: joined, they are one
    // unbroken run per source that covers what the first client saw.
    let mut second = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (_, history) = read_preamble(&mut second).await;
    let mut joined: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut statuses = 0;
    for m in history {
        match m {
            proto::Message::Frame(f) => joined.entry(f.source).or_default().push(f.seq),
            proto::Message::SourceStatus(_) => statuses += 1,
            _ => {}
        }
    }
    assert_eq!(statuses, 3, "the newcomer gets each source's latest status before the history");
    let history_len: usize = joined.values().map(Vec::len).sum();
    assert!(history_len >= 90, "history holds what was published: {history_len}");
    assert!(second.batches >= 1, "the history of {history_len} frames arrives in batches (protocol 5), not one WebSocket message each");
    let target: BTreeMap<u32, u64> = live.iter().map(|(s, v)| (*s, *v.last().unwrap() + 10)).collect();
    while target.iter().any(|(s, t)| joined.get(s).and_then(|v| v.last()).is_none_or(|l| l < t)) {
        match next_message(&mut second, Duration::from_secs(30)).await {
            Some(proto::Message::Frame(f)) => joined.entry(f.source).or_default().push(f.seq),
            Some(_) => {}
            None => panic!("the newcomer's socket closed"),
        }
    }
    assert_once_in_order(&joined);
    for (source, seqs) in &live {
        let j = &joined[source];
        assert!(j[0] <= seqs[0] && j.last() > seqs.last(), "source {source}: history + live covers the first client's frames");
    }
}

/// A busy stream reaches a browser in few WebSocket messages: the writer gathers live frames for
/// `--ws-batch-window` after the first (a browser pays per message), and /metrics counts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_frames_are_gathered_into_one_websocket_message_per_batch_window() {
    let server = Server::start(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--scenario",
        "sglang-tiers",
        "--workers",
        "16",
        "--rate",
        "100",
        "--no-event-plane",
        "--ws-batch-window",
        "100ms",
    ]);
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    let messages_before = ws.messages;
    let mut frames = 0u64;
    // 1,600 frames a second offered: 800 frames in about half a second.
    while frames < 800 {
        match next_message(&mut ws, Duration::from_secs(30)).await {
            Some(proto::Message::Frame(_)) => frames += 1,
            Some(_) => {}
            None => panic!("the socket closed"),
        }
    }
    let messages = ws.messages - messages_before;
    // One message per 100 ms window holds about 160 frames; at least 20 each leaves room for a
    // loaded machine without letting one message per frame (or per few) pass.
    assert!(frames >= 20 * messages, "{frames} live frames came in {messages} WebSocket messages");
    let sent = server.metric("kvscope_client_ws_messages_total").await;
    let protocol = server.metric("kvscope_client_protocol_messages_total").await;
    assert!(sent >= (ws.messages) as f64, "the metric counts every WebSocket message sent: {sent} < {}", ws.messages);
    assert!(protocol >= 20.0 * sent, "{protocol} protocol messages in {sent} WebSocket messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_is_fetched_back_from_the_history_by_source_seq_and_receive_time() {
    let server = Server::start(&["demo", "--listen", "127.0.0.1:0", "--rate", "40", "--no-event-plane"]);
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut ws).await;
    let frame = loop {
        match next_message(&mut ws, Duration::from_secs(30)).await {
            Some(proto::Message::Frame(f)) if f.source == 1 => break f,
            Some(_) => {}
            None => panic!("the socket closed"),
        }
    };
    let path = format!("/frame?source=1&seq={}&recv={}", frame.seq, frame.recv_time_nanos);
    let (status, headers, body) = http_get_raw(&server.addr, &server.addr, &path, &[]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(headers.contains(&("content-type".into(), "application/octet-stream".into())), "{headers:?}");
    assert_eq!(proto::decode(&body).unwrap(), proto::Message::Frame(frame.clone()), "the bytes /ws relayed");

    // Another receive time is another frame (a restarted engine reuses seqs): not found, and why.
    let path = format!("/frame?source=1&seq={}&recv={}", frame.seq, frame.recv_time_nanos + 1);
    let (status, _, body) = http_get(&server.addr, &path, &[]).await;
    assert_eq!(status, 404);
    assert!(body.starts_with(&format!("1:0 seq {} is no longer in the server's history either", frame.seq)), "{body}");
    assert!(body.contains("raise --history-bytes"), "{body}");
    assert_eq!(http_get(&server.addr, "/frame?source=1&seq=x", &[]).await.0, 400, "a query that is not numbers");
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("{field} missing in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_costs_nothing_but_its_own_frames() {
    const FRAMES: u64 = 100_000;
    const HISTORY_MIB: u64 = 4;
    const QUEUE_MIB: u64 = 4;
    let mut engine = Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", true, true).await.unwrap();
    let server = Server::start(&[
        "serve",
        "--workers",
        &format!("0={}", engine.endpoint),
        "--listen",
        "127.0.0.1:0",
        "--history-bytes",
        &format!("{HISTORY_MIB}MiB"),
        "--client-queue-bytes",
        &format!("{QUEUE_MIB}MiB"),
    ]);
    engine.wait_subscribers(1).await;
    let mut slow = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut slow).await;
    let mut fast = ws_connect(&server.ws_url(), &[]).await.unwrap();
    read_preamble(&mut fast).await;
    let idle_rss_kib = vm_kib(server.pid(), "VmRSS:");

    // The reading client counts frames and checks their order as they come.
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let reader = tokio::spawn(async move {
        let mut next = 0u64;
        let mut lag_notices = 0;
        while next < FRAMES {
            match next_message(&mut fast, Duration::from_secs(60)).await.expect("fast client socket open") {
                proto::Message::Frame(f) => {
                    assert_eq!(f.seq, next, "the reading client got every frame in order");
                    next += 1;
                    counter.store(next, Ordering::Relaxed);
                }
                proto::Message::LagNotice(_) => lag_notices += 1,
                _ => {}
            }
        }
        lag_notices
    });

    // Sample the bounds the server reports while frames flow.
    let metrics_addr = server.addr.clone();
    let sampler = tokio::spawn(async move {
        let (mut max_history, mut max_queued) = (0f64, 0f64);
        loop {
            let m = http_get(&metrics_addr, "/metrics", &[]).await.2;
            max_history = max_history.max(metric_value(&m, "kvscope_history_bytes"));
            max_queued = max_queued.max(metric_value(&m, "kvscope_client_queued_bytes"));
            if metric_value(&m, "kvscope_frames_total{source=\"0:0\"}") as u64 == FRAMES {
                return (max_history, max_queued);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // Paced by the reading client (at most 5 000 frames ahead of it): the test is about the
    // client that never reads, not about whether a debug-built test client keeps up with the
    // server at full speed (the relay benchmark measures that).
    let topic = Bytes::from_static(b"kv-events");
    let body = payload(0, 64);
    for seq in 0..FRAMES {
        if seq % 500 == 0 {
            let ok = wait_until(Duration::from_secs(60), || async { received.load(Ordering::Relaxed) + 5_000 >= seq }).await;
            assert!(ok, "the reading client stalled at {} of {seq}", received.load(Ordering::Relaxed));
        }
        engine.publish(&topic, body.clone()).await;
    }
    server.wait_metric("kvscope_frames_total{source=\"0:0\"}", FRAMES as f64).await;
    let fast_notices = tokio::time::timeout(Duration::from_secs(120), reader).await.expect("reader finished").unwrap();
    assert_eq!(fast_notices, 0, "the reading client never lagged");
    assert_eq!(received.load(Ordering::Relaxed), FRAMES);
    let (max_history, max_queued) = sampler.await.unwrap();
    assert!(max_history <= (HISTORY_MIB << 20) as f64, "history ring {max_history} bytes > --history-bytes");
    assert!(max_queued <= ((2 * QUEUE_MIB) << 20) as f64, "client queues {max_queued} bytes > 2 x --client-queue-bytes");
    let m = server.metrics().await;
    assert!(metric_value(&m, "kvscope_client_lagged_frames_total") > 0.0);
    assert!(metric_value(&m, "kvscope_history_evicted_frames_total") > 0.0, "the ring evicted to stay bounded");
    // Peak memory: the ring, two client queues and socket buffers over the idle process. The
    // 100 000 frames themselves (about 45 MB) must not have been held.
    let peak_kib = vm_kib(server.pid(), "VmHWM:");
    let allowed_kib = idle_rss_kib + (HISTORY_MIB + 2 * QUEUE_MIB) * 1024 + 24 * 1024;
    eprintln!("server RSS: idle {idle_rss_kib} KiB, peak {peak_kib} KiB, allowed {allowed_kib} KiB");
    assert!(peak_kib <= allowed_kib, "peak RSS {peak_kib} KiB > idle {idle_rss_kib} KiB + bounds (allowed {allowed_kib} KiB)");

    // Now the slow client reads: what it received plus what its lag notices say it lost is
    // exactly every frame, and the notice sits where the hole is.
    let (mut got, mut lost, mut notices) = (0u64, 0u64, 0u64);
    let mut last_seq: Option<u64> = None;
    while got + lost < FRAMES {
        match next_message(&mut slow, Duration::from_secs(30)).await.expect("slow client socket open") {
            proto::Message::Frame(f) => {
                if let Some(prev) = last_seq {
                    assert!(f.seq > prev, "frames stay in order across the hole");
                }
                last_seq = Some(f.seq);
                got += 1;
            }
            proto::Message::LagNotice(n) => {
                notices += 1;
                lost += n.frames_lost;
                assert_eq!(n.flag, "--client-queue-bytes");
                assert_eq!(n.queue_bytes, QUEUE_MIB << 20);
                let s = &n.sources[0];
                assert_eq!(s.frames, s.last_seq - s.first_seq + 1, "one contiguous hole per notice");
                assert_eq!(Some(s.first_seq), last_seq.map(|l| l + 1), "the notice comes right after the last frame before the hole");
                last_seq = Some(s.last_seq);
            }
            _ => {}
        }
    }
    assert!(notices >= 1 && lost > 0, "the slow client was told it lost frames");
    assert_eq!(got + lost, FRAMES);
    assert_eq!(metric_value(&m, "kvscope_client_lagged_frames_total"), lost as f64);
}
