//! `--discover`: the fleet from Dynamo's discovery store, with the real parts: Debian's etcd on
//! loopback ports and NVIDIA Dynamo 1.6.1's own runtime registering relays
//! (`DistributedRuntime(loop, "etcd"|"file", "tcp", event_plane="zmq")` plus
//! `KvEventPublisher`, `scripts/peers/dynamo_relay.py`). Each case checks exact states and
//! counts, and waits are bounded by the times the issue promises (visible within 2 s of
//! registering, left within the TTL plus 5 s).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvscope_protocol as proto;

use crate::event_plane::{Relay, corpus, predicted, read_all};
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
    // The page is told the server discovers its fleet, and from where.
    let mut ws = ws_connect(&server.ws_url(), &[]).await.unwrap();
    let (hello, _) = read_preamble(&mut ws).await;
    assert_eq!(hello.discovery, vec![url.clone()]);
    assert!(hello.sources.is_empty());
    let mut etcd = Etcd { child: None, client_port: port, peer_port: free_port(), dir: scratch("discovery_away").join("etcd") };
    etcd.restart();
    within(&server, &up, 1.0, Duration::from_secs(15)).await;
    assert!(server.interrupt().success());
}
