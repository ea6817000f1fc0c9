//! `--discover`: the fleet from Dynamo's discovery store, with the real parts: Debian's etcd on
//! loopback ports and NVIDIA Dynamo 1.6.1's own runtime registering relays
//! (`DistributedRuntime(loop, "etcd"|"file", "tcp", event_plane="zmq")` plus
//! `KvEventPublisher`, `scripts/peers/dynamo_relay.py`). Each case checks exact states and
//! counts, and waits are bounded by the times the issue promises (visible within 2 s of
//! registering, left within the TTL plus 5 s).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvscope_protocol as proto;

use crate::event_plane::{Relay, assert_reconciled, check_json, corpus, predicted, read_all};
use crate::support::{Server, free_port, read_preamble, scratch, wait_until, ws_connect};

/// Dynamo 1.6.1's registrations expire this long after their process stops refreshing them:
/// its etcd lease is granted for 30 s (read back with `/v3/lease/timetolive`), the file
/// backend's files for 10 s after their last touch.
const ETCD_TTL: Duration = Duration::from_secs(30);
const FILE_TTL: Duration = Duration::from_secs(10);
/// How long after the TTL a gone relay may still show as live.
const LEFT_SLACK: Duration = Duration::from_secs(5);
/// How long after registering a relay must be a source (the relay's "ready" line comes after
/// its registration, so this bound is generous to kvscope by the line's latency only).
const VISIBLE_WITHIN: Duration = Duration::from_secs(2);

/// An etcd on loopback ports, its data in a scratch directory; killed on drop.
struct Etcd {
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    dir: std::path::PathBuf,
}

impl Etcd {
    fn start(name: &str) -> Etcd {
        let mut etcd = Etcd { child: None, client_port: free_port(), peer_port: free_port(), dir: scratch(name).join("etcd") };
        etcd.restart();
        etcd
    }

    /// Starts it again on the same ports and data.
    fn restart(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "kvscope-test", "--data-dir", self.dir.to_str().unwrap()])
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("kvscope-test={peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("etcd: {e}; run scripts/install-tools.sh (it installs Debian's etcd-server)"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not listen on {} within 20 s", self.client_port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn discover_url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The series of a discovered relay's connection.
fn connected(worker: u64) -> String {
    format!("kvscope_source_connected{{source=\"{}\"}}", proto::relay_key(&worker.to_string(), 0))
}

/// Waits until `series` equals `want`, at most `within`; returns how long it took.
async fn within(server: &Server, series: &str, want: f64, within: Duration) -> Duration {
    let started = Instant::now();
    let ok = wait_until(within, || async { server.metric(series).await == want }).await;
    assert!(ok, "{series} was {} after {within:?}, expected {want}", server.metric(series).await);
    started.elapsed()
}

/// The status the page is shown for the source keyed `key`: a newcomer's preamble holds the
/// latest of each.
async fn status_of(server: &Server, key: &str) -> proto::SourceStatus {
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (hello, preamble) = read_preamble(&mut ws).await;
    let index =
        hello.sources.iter().find(|s| s.key == key).unwrap_or_else(|| panic!("{key} is not in the hello: {:?}", hello.sources)).index;
    preamble
        .into_iter()
        .find_map(|m| match m {
            proto::Message::SourceStatus(s) if s.source == index => Some(s),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no status of {key} in the preamble"))
}

/// One backend's whole story, etcd's or the file backend's: a relay of an engine kvscope also
/// reads is discovered and reconciled; killed, it is marked left; a second relay appears with no
/// restart; and the first comes back as the same source.
async fn discovery_story(discovery: &[&str], discover_url: &str, ttl: Duration, name: &str, etcd: Option<&mut Etcd>) {
    let names = ["gpu_basic", "storage_tier", "bytes_hashes-1"];
    let payloads = corpus(&names);
    let (per_batch, _) = predicted(&read_all(&payloads), 16);
    let expected: u64 = per_batch.iter().sum();

    let mut first = Relay::start_discovered(42, discovery, &payloads);
    let engine = first.wait("engine").as_str().unwrap().to_owned();
    first.wait("ready");
    let mut server = Server::start(&["serve", "--listen", "127.0.0.1:0", "--workers", &format!("42={engine}"), "--discover", discover_url]);
    server.wait_metric("kvscope_source_connected{source=\"42:0\"}", 1.0).await;
    within(&server, &connected(42), 1.0, Duration::from_secs(10)).await;
    assert_eq!(server.metric("kvscope_discovered_sources").await, 1.0);

    // Reconciled as --event-plane reconciles: every RouterEvent the relay should publish arrives.
    first.go();
    first.wait("published");
    server.wait_metric("kvscope_router_events_total{source=\"42:0\",count=\"matched\"}", expected as f64).await;
    for count in ["expected", "received"] {
        assert_eq!(server.metric(&format!("kvscope_router_events_total{{source=\"42:0\",count=\"{count}\"}}")).await, expected as f64);
    }

    // A second relay, registered while kvscope runs, is a source within 2 s of its "ready".
    let second = Relay::start_discovered(43, discovery, &payloads);
    second.wait("ready");
    let visible = within(&server, "kvscope_discovered_sources", 2.0, VISIBLE_WITHIN).await;
    eprintln!("{name}: a new relay was a source {:.2} s after it said ready", visible.as_secs_f64());

    // SIGKILL: no goodbye; the lease (etcd) or the file's TTL ends the registration.
    first.kill();
    let killed = Instant::now();
    within(&server, "kvscope_discovered_left", 1.0, ttl + LEFT_SLACK).await;
    eprintln!("{name}: a killed relay was marked left {:.2} s after SIGKILL", killed.elapsed().as_secs_f64());
    let status = status_of(&server, &proto::relay_key("42", 0)).await;
    assert_eq!(status.state, proto::ConnState::Left);
    assert_eq!(status.error.as_deref(), Some(kvscope::fleet::LEFT_NOTE));
    assert_eq!(server.metric("kvscope_discovered_sources").await, 2.0, "a left source stays a source");
    // It keeps what it received.
    assert!(server.metric(&format!("kvscope_frames_total{{source=\"{}\"}}", proto::relay_key("42", 0))).await > 0.0);

    if let Some(etcd) = etcd {
        // The store goes away: the sources go on, the error is shown, then cleared.
        etcd.stop();
        let up = format!("kvscope_discovery_up{{url=\"{discover_url}\"}}");
        within(&server, &up, 0.0, Duration::from_secs(10)).await;
        assert_eq!(server.metric(&connected(43)).await, 1.0, "a relay stays read while the store is away");
        assert_eq!(server.metric("kvscope_discovered_left").await, 1.0, "an unreachable store says nothing about the relays");
        etcd.restart();
        within(&server, &up, 1.0, Duration::from_secs(30)).await;
    }

    // The first worker comes back (a new registration id and port): the same source resumes.
    let again = Relay::start_discovered(42, discovery, &payloads);
    again.wait("ready");
    within(&server, "kvscope_discovered_left", 0.0, VISIBLE_WITHIN + Duration::from_secs(1)).await;
    within(&server, &connected(42), 1.0, Duration::from_secs(10)).await;
    assert_eq!(server.metric("kvscope_discovered_sources").await, 2.0, "a rank that comes back is the same source");
    drop((again, second));
    assert!(server.interrupt().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_etcd_relays_are_found_reconciled_left_and_found_again() {
    let mut etcd = Etcd::start("discovery_etcd");
    let (url, client) = (etcd.discover_url(), etcd.client_url());
    discovery_story(&["--discovery", "etcd", "--etcd", &client], &url, ETCD_TTL, "etcd", Some(&mut etcd)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_file_backend_relays_are_found_reconciled_left_and_found_again() {
    let dir = scratch("discovery_file").join("kv");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_owned();
    discovery_story(&["--discovery", "file", "--file-kv", &dir], &format!("dynamo-file:{dir}"), FILE_TTL, "file", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_a_store_that_is_away_at_start_is_shown_and_retried() {
    let port = free_port();
    let url = format!("etcd://127.0.0.1:{port}");
    let mut server = Server::start(&["serve", "--listen", "127.0.0.1:0", "--discover", &url]);
    let up = format!("kvscope_discovery_up{{url=\"{url}\"}}");
    within(&server, &up, 0.0, Duration::from_secs(10)).await;
    let failures = format!("kvscope_discovery_failures{{url=\"{url}\"}}");
    within(&server, &failures, 2.0, Duration::from_secs(10)).await;
    // The page is told the server discovers its fleet, from where, and that the store is away.
    let (hello, store) = discovery_of(&server).await;
    assert_eq!(hello.discovery, vec![url.clone()]);
    assert!(hello.sources.is_empty());
    let error = store.error.unwrap_or_else(|| panic!("no error shown for {url}"));
    assert!(error.contains("cannot connect") && error.contains("next try in"), "{error}");
    let mut etcd = Etcd { child: None, client_port: port, peer_port: free_port(), dir: scratch("discovery_away").join("etcd") };
    etcd.restart();
    within(&server, &up, 1.0, Duration::from_secs(15)).await;
    let (_, store) = discovery_of(&server).await;
    assert_eq!((store.error, store.failures > 0), (None, true), "the error is cleared, the count kept");
    assert!(server.interrupt().success());
}

/// A newcomer's hello and the status of the server's one discovery store.
async fn discovery_of(server: &Server) -> (proto::Hello, proto::StoreStatus) {
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (hello, preamble) = read_preamble(&mut ws).await;
    let status = preamble
        .into_iter()
        .find_map(|m| match m {
            proto::Message::DiscoveryStatus(d) => Some(d),
            _ => None,
        })
        .expect("a discovering server sends its discovery status to every newcomer");
    assert_eq!(status.stores.len(), 1);
    (hello, status.stores.into_iter().next().unwrap())
}

/// The repo's recording rules for fleet totals.
fn fleet_rules() -> std::path::PathBuf {
    crate::support::repo().join("deploy/prometheus/kvscope-fleet.rules.yml")
}

/// `(series, value)` of every sample in a `/metrics` text whose family one of the rules sums.
fn summed_samples(text: &str) -> Vec<(String, f64)> {
    let rules = std::fs::read_to_string(fleet_rules()).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            let value: f64 = value.parse().ok()?;
            rules.contains(&format!("({name})")).then(|| (series.to_owned(), value))
        })
        .collect()
}

/// The series with an `instance` label added, as Prometheus scraping `instance` would store it.
fn with_instance(series: &str, instance: &str) -> String {
    match series.split_once('{') {
        Some((name, labels)) => format!("{name}{{instance=\"{instance}\",{labels}"),
        None => format!("{series}{{instance=\"{instance}\"}}"),
    }
}

/// Three servers at `--shard i/3` and one unsharded server discover one fleet (a demo that
/// registers its relays in a file backend): together the shards hold every relay exactly once,
/// and the repo's recording rules, evaluated by `promtool test rules` on the shards' scraped
/// series, give the unsharded server's totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_three_shards_split_a_fleet_exactly_and_their_fleet_totals_are_one_server_s() {
    let dir = scratch("discovery_shards");
    let kv = dir.join("kv");
    std::fs::create_dir_all(&kv).unwrap();
    let url = format!("dynamo-file:{}", kv.display());
    let shards: Vec<Server> =
        (0..3).map(|i| Server::start(&["serve", "--listen", "127.0.0.1:0", "--discover", &url, "--shard", &format!("{i}/3")])).collect();
    let whole = Server::start(&["serve", "--listen", "127.0.0.1:0", "--discover", &url]);
    const WORKERS: usize = 12;
    let demo = Server::start(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--scenario",
        "sglang-tiers",
        "--workers",
        "12",
        "--rate",
        "20",
        "--batches",
        "20",
        "--register",
        &url,
    ]);
    within(&whole, "kvscope_discovered_sources", WORKERS as f64, Duration::from_secs(15)).await;

    // Every relay in exactly one shard.
    let relays = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("kvscope_source_connected{source=\"relay:"))
            .map(|l| l.rsplit_once(' ').unwrap().0.to_owned())
            .collect()
    };
    let ok = wait_until(Duration::from_secs(15), || async {
        let mut n = 0.0;
        for s in &shards {
            n += s.metric("kvscope_discovered_sources").await;
        }
        n == WORKERS as f64
    })
    .await;
    assert!(ok, "the shards did not discover {WORKERS} relays between them");
    let mut held: Vec<String> = Vec::new();
    for s in &shards {
        let mine = relays(&s.metrics().await);
        assert!(!mine.is_empty() && mine.len() < WORKERS, "a shard of 3 holds some of 12 relays, not {}", mine.len());
        held.extend(mine);
    }
    held.sort();
    let mut all = relays(&whole.metrics().await);
    all.sort();
    assert_eq!(held, all, "the shards together hold every relay exactly once");

    // Once the demo's batches are through, the shards' frames add up to the whole's.
    let frames =
        |text: String| summed_samples(&text).iter().filter(|(s, _)| s.starts_with("kvscope_frames_total")).map(|(_, v)| v).sum::<f64>();
    // Settled: unchanged for 1.5 s (the demo publishes 20 batches per relay, then stops).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (frames(whole.metrics().await), Instant::now());
    while last.0 == 0.0 || last.1.elapsed() < Duration::from_millis(1500) {
        assert!(Instant::now() < deadline, "the unsharded server's frames kept changing for 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = frames(whole.metrics().await);
        if now != last.0 {
            last = (now, Instant::now());
        }
    }
    let mut sharded = 0.0;
    for s in &shards {
        sharded += frames(s.metrics().await);
    }
    assert_eq!(sharded, last.0, "the shards' frames add up to the unsharded server's");

    // promtool: the rules over the shards' series equal the whole's own sums.
    let mut input = String::new();
    for (i, s) in shards.iter().enumerate() {
        for (series, value) in summed_samples(&s.metrics().await) {
            input.push_str(&format!("      - series: '{}'\n        values: '{value}x2'\n", with_instance(&series, &format!("shard{i}"))));
        }
    }
    let whole_samples = summed_samples(&whole.metrics().await);
    let rules = std::fs::read_to_string(fleet_rules()).unwrap();
    let mut tests = String::new();
    for block in rules.split("- record: ").skip(1) {
        let record = block.lines().next().unwrap().trim();
        let expr = block.lines().nth(1).unwrap().trim().trim_start_matches("expr: ");
        let want = if expr.starts_with("count(kvscope_discovery_up == 0)") {
            whole_samples.iter().filter(|(s, v)| s.starts_with("kvscope_discovery_up") && *v == 0.0).count() as f64
        } else {
            let family = expr.trim_start_matches("sum(").split(')').next().unwrap();
            whole_samples.iter().filter(|(s, _)| s.split('{').next() == Some(family)).map(|(_, v)| v).sum()
        };
        tests.push_str(&format!(
            "      - expr: {record}\n        eval_time: 1m\n        exp_samples:\n          - labels: '{record}'\n            value: {want}\n"
        ));
    }
    let test_file = dir.join("fleet.rules.test.yml");
    std::fs::write(
        &test_file,
        format!(
            "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}    promql_expr_test:\n{tests}",
            fleet_rules().display()
        ),
    )
    .unwrap();
    let out = Command::new("/usr/bin/promtool").args(["test", "rules", test_file.to_str().unwrap()]).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool test rules {}: {}{}",
        test_file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(demo);
}

/// A server that records while it discovers writes what it found into the capture (format 4's
/// discovery source): `check` adds the relay where its records begin and reconciles it exactly
/// as it was live, and `replay` serves it as the same source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_a_recording_keeps_the_sources_found_and_check_and_replay_read_them() {
    let dir = scratch("discovery_record");
    let kv = dir.join("kv");
    std::fs::create_dir_all(&kv).unwrap();
    let kv = kv.to_str().unwrap().to_owned();
    let url = format!("dynamo-file:{kv}");
    let payloads = corpus(&["gpu_basic", "storage_tier", "bytes_hashes-1"]);
    let (per_batch, drops) = predicted(&read_all(&payloads), 16);
    let expected: u64 = per_batch.iter().sum();

    let mut relay = Relay::start_discovered(42, &["--discovery", "file", "--file-kv", &kv], &payloads);
    let engine = relay.wait("engine").as_str().unwrap().to_owned();
    relay.wait("ready");
    let capture = dir.join("run.kvcap");
    let mut server = Server::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        &format!("42={engine}"),
        "--discover",
        &url,
        "--record",
        capture.to_str().unwrap(),
    ]);
    server.wait_metric("kvscope_source_connected{source=\"42:0\"}", 1.0).await;
    within(&server, &connected(42), 1.0, Duration::from_secs(10)).await;
    relay.go();
    relay.wait("published");
    server.wait_metric("kvscope_router_events_total{source=\"42:0\",count=\"matched\"}", expected as f64).await;
    let relay_frames = format!("kvscope_frames_total{{source=\"{}\"}}", proto::relay_key("42", 0));
    let frames = server.metric(&relay_frames).await;
    relay.kill();
    within(&server, "kvscope_discovered_left", 1.0, FILE_TTL + LEFT_SLACK).await;
    assert!(server.interrupt().success());

    let report = check_json(&capture, 16);
    let planes = report["event_planes"].as_array().unwrap();
    assert_eq!(planes.len(), 1, "{report:#}");
    assert_eq!((planes[0]["key"].as_str(), planes[0]["frames"].as_f64()), (Some("relay:42:0"), Some(frames)), "{report:#}");
    let dropped: Vec<(&str, u64)> = drops.iter().map(|(l, n)| (l.as_str(), *n)).collect();
    assert_reconciled(&report, expected, &dropped);

    let replay = Server::start(&["replay", capture.to_str().unwrap(), "--speed", "max", "--listen", "127.0.0.1:0"]);
    replay.wait_metric(&relay_frames, frames).await;
    let status = status_of(&replay, &proto::relay_key("42", 0)).await;
    assert_eq!(status.state, proto::ConnState::Left, "the replay says when the relay left");
}

/// `demo --register etcd://…` registers each simulated relay under a lease as Dynamo's runtime
/// does: `serve --discover` finds them all, and they are gone at once (the lease revoked) when
/// the demo stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_a_demo_registers_its_relays_in_etcd_and_removes_them_when_it_stops() {
    let etcd = Etcd::start("discovery_register_etcd");
    let url = etcd.discover_url();
    let server = Server::start(&["serve", "--listen", "127.0.0.1:0", "--discover", &url]);
    let mut demo = Server::start(&["demo", "--listen", "127.0.0.1:0", "--scenario", "sglang-tiers", "--workers", "3", "--register", &url]);
    within(&server, "kvscope_discovered_sources", 3.0, Duration::from_secs(15)).await;
    for worker in 0..3 {
        within(&server, &connected(worker), 1.0, Duration::from_secs(10)).await;
    }
    assert!(demo.interrupt().success());
    // Revoked, not expired: well within the lease's 10 s.
    within(&server, "kvscope_discovered_left", 3.0, Duration::from_secs(5)).await;
}
