//! `/metrics` as operators use it, with Debian's `prometheus` package: `promtool check metrics`
//! on what curl gets, and a real Prometheus server scraping a running kvscope.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

fn demo() -> Server {
    // Every family gets samples: sources, events, verdicts under two policies, a recording.
    let file = scratch("prometheus_demo").join("demo.kvcap");
    Server::start(&["demo", "--workers", "3", "--rate", "20", "--listen", "127.0.0.1:0", "--record", file.to_str().unwrap()])
}

fn tool(name: &str) -> String {
    let path = format!("/usr/bin/{name}");
    assert!(std::path::Path::new(&path).exists(), "{path} is missing: scripts/install-tools.sh installs Debian's prometheus package");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_check_metrics_passes() {
    let server = demo();
    server.wait_metric("kvscope_frames_total{source=\"0:0\"}", 20.0).await;
    let (status, _, body) = http_get(&server.addr, "/metrics", &[]).await;
    assert_eq!(status, 200);
    assert!(body.contains("kvscope_verdicts_total{"), "the families have samples: {body}");
    let mut promtool = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {}: {said}", out.status);
}

async fn query(port: u16, promql: &str) -> Option<f64> {
    let path = format!("/api/v1/query?query={}", promql.replace('{', "%7B").replace('}', "%7D").replace('"', "%22"));
    let (status, _, body) = http_get(&format!("127.0.0.1:{port}"), &path, &[]).await;
    if status != 200 {
        return None;
    }
    let json: Value = serde_json::from_str(&body).ok()?;
    json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_server_scrapes_kvscope_and_sees_frames_rise() {
    let server = demo();
    let dir = scratch("prometheus_server");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kvscope\n    static_configs:\n      - targets: ['{}']\n",
            server.addr
        ),
    )
    .unwrap();
    let port = free_port();
    let mut prometheus = Command::new(tool("prometheus"))
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let series = "kvscope_frames_total{source=\"0:0\"}";
    let mut first = None;
    let mut rose = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // Prometheus takes a moment to listen; http_get panics on a refused connection.
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while !rose && tokio::time::Instant::now() < deadline {
        match (first, query(port, series).await) {
            (None, Some(v)) => first = Some(v),
            (Some(a), Some(b)) => rose = b > a,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let up = query(port, "up{job=\"kvscope\"}").await;
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    assert!(rose, "Prometheus saw {series} at {first:?} and never higher");
    assert_eq!(up, Some(1.0), "the scrape target is up");
}

/// The live index model's bound (`--index-max-nodes`): past it, `kvscope_index_refused` counts
/// what the model kept out, per policy, while a server at the default bound keeps it at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_index_model_counts_what_it_kept_out() {
    let bounded = Server::start(&["demo", "--workers", "2", "--rate", "50", "--listen", "127.0.0.1:0", "--index-max-nodes", "3"]);
    let roomy = Server::start(&["demo", "--workers", "2", "--rate", "50", "--listen", "127.0.0.1:0"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let series = "kvscope_index_refused{policy=\"fixed\"}";
    while bounded.metric(series).await == 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "{series} stayed 0 at --index-max-nodes 3");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut body = roomy.metrics().await;
    while !body.lines().any(|l| l.starts_with(series)) {
        assert!(tokio::time::Instant::now() < deadline, "the roomy server never reported {series}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        body = roomy.metrics().await;
    }
    assert_eq!(metric_value(&body, series), 0.0, "at the default bound nothing is kept out");
    // Pages are told the bound, so that theirs models what /metrics does.
    for (server, bound) in [(&bounded, 3), (&roomy, kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS as u64)] {
        let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
        let (hello, _) = read_preamble(&mut ws).await;
        assert_eq!(hello.defaults.index_max_nodes, Some(bound));
    }
}

/// The router task's queue is bounded in bytes (`--router-queue-bytes`): a server whose bound
/// holds no batch drops every one and counts it, and relays them all the same; at the default
/// bound a demo drops none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_router_queue_drops_and_counts_but_still_relays() {
    let full = Server::start(&["demo", "--workers", "2", "--rate", "50", "--listen", "127.0.0.1:0", "--router-queue-bytes", "1"]);
    let roomy = Server::start(&["demo", "--workers", "2", "--rate", "50", "--listen", "127.0.0.1:0"]);
    let dropped = "kvscope_router_dropped_inputs_total";
    let wait = Duration::from_secs(30);
    assert!(wait_until(wait, || async { full.metric(dropped).await >= 20.0 }).await, "{dropped} stayed under 20 at --router-queue-bytes 1");
    assert!(frames(&full).await >= 20.0, "the batches the router task had no room for are relayed");
    assert!(wait_until(wait, || async { frames(&roomy).await >= 20.0 }).await, "the roomy server relayed fewer than 20 frames");
    assert_eq!(roomy.metric(dropped).await, 0.0, "at the default bound the router task drops nothing");
}

/// Engine frames relayed, over every source.
async fn frames(server: &Server) -> f64 {
    let body = server.metrics().await;
    body.lines().filter(|l| l.starts_with("kvscope_frames_total{")).filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok()).sum()
}
