//! End-to-end tests: real ZMQ, real WebSocket, real headless Chromium.
//!
//! Helpers shared by the browser tests (`e2e/browser.rs`) and the browser benchmark
//! (`e2e/browser_bench.rs`): start the `kvscope` binary on a free port and read its URL, serve
//! `dist/` alone (the "no server" case), drive Debian's Chromium through `/usr/bin/chromedriver`
//! with fantoccini, install a console-error shim before the app loads (Chrome DevTools
//! `Page.addScriptToEvaluateOnNewDocument` through chromedriver), and read the figures the page
//! shows through the same `data-testid` attributes people's scripts use.
//!
//! What it is not: a test of the server's or the core crates' logic; those have their own
//! tests. Here the page's numbers are compared with `kvscope check --json` on the same frames.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// Where screenshots and benchmark output go (gitignored).
pub fn artifacts_dir() -> PathBuf {
    let dir = root().join("tests/artifacts");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// The `kvscope` binary: `$KVSCOPE_BIN`, else `target/release/kvscope`, else `target/debug/kvscope`.
pub fn kvscope_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KVSCOPE_BIN") {
        return Some(PathBuf::from(p));
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root().join("target"));
    ["release", "debug"].iter().map(|p| target.join(p).join("kvscope")).find(|p| p.exists())
}

/// Why the browser tests cannot run here, or `None` when they can.
pub fn missing_prerequisite() -> Option<String> {
    if !Path::new("/usr/bin/chromedriver").exists() {
        return Some("no /usr/bin/chromedriver: run scripts/install-tools.sh (apt-get install chromium chromium-driver)".into());
    }
    if !root().join("dist/index.html").exists() {
        return Some("no dist/index.html: run scripts/build-web.sh".into());
    }
    if kvscope_bin().is_none() {
        return Some("no kvscope binary: run cargo build -p kvscope (after scripts/build-web.sh)".into());
    }
    None
}

/// A running `kvscope` subcommand.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub url: String,
    pub port: u16,
    args: Vec<String>,
}

impl Server {
    /// CPU seconds the server process (and the demo engines it runs) has used, from
    /// `/proc/PID/stat`; `None` off Linux.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()?)).ok()?;
        // Fields after the command name (which may hold spaces) start after the last ')'.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    /// The sum of every series of a `/metrics` family (e.g. `kvscope_frames_total` over all
    /// sources); `None` when the server does not answer.
    pub async fn metric_sum(&self, family: &str) -> Option<f64> {
        let text = self.scrape_metrics().await?;
        let sum = text
            .lines()
            .filter(|l| l.strip_prefix(family).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum();
        Some(sum)
    }

    /// The value of one series, written as /metrics prints it (`family{label="v",...}`); 0 when
    /// the server has not exported it (a counter that never moved).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.scrape_metrics().await?;
        let value = text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok());
        Some(value.unwrap_or(0.0))
    }

    /// `GET /metrics`, whole, within 20 s; `None` when the server does not answer.
    async fn scrape_metrics(&self) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let scrape = async {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
            let mut text = String::new();
            stream.read_to_string(&mut text).await.ok()?;
            Some(text)
        };
        let deadline = Duration::from_secs(20);
        tokio::time::timeout(deadline, scrape)
            .await
            .unwrap_or_else(|_| panic!("GET /metrics on port {}: no complete answer within {deadline:?}", self.port))
    }

    /// Runs `kvscope ARGS --listen 127.0.0.1:PORT` and waits for its `listening on` line. Pass
    /// port 0 for one the kernel picks at bind time: a port found free beforehand can be taken
    /// meanwhile (a demo fleet binds a thousand ephemeral ports before it listens).
    pub async fn start(args: &[&str], port: u16) -> Server {
        let bin = kvscope_bin().expect("kvscope binary (see missing_prerequisite)");
        let listen = format!("127.0.0.1:{port}");
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.push("--listen".into());
        all.push(listen);
        let mut child = Command::new(&bin)
            .args(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("kvscope {all:?} printed no 'listening on' line within 30 s"))
                .expect("read kvscope stdout")
                .unwrap_or_else(|| panic!("kvscope {all:?} exited before listening"));
            if let Some(rest) = line.strip_prefix("listening on ") {
                break rest.trim().to_owned();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // With port 0 the kernel chose one; the URL says which (restart reuses it).
        let port = if port == 0 {
            let host = url.trim_start_matches("http://").split('/').next().unwrap_or_default();
            host.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {url}"))
        } else {
            port
        };
        Server { child, url, port, args: args.iter().map(|s| s.to_string()).collect() }
    }

    /// Kills the server (SIGKILL: the page sees the socket drop, as when a pod dies).
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts the same command again on the same port.
    pub async fn restart(&mut self) {
        self.kill().await;
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        // The port may linger briefly in the kernel; retry for a few seconds.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::net::TcpListener::bind(("127.0.0.1", self.port)).is_ok() || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        *self = Server::start(&args, self.port).await;
    }
}

/// Runs `kvscope check FILE --block-size N --policy P --json` and returns the JSON.
pub fn check_json(capture: &Path, block_size: u32, policy: &str) -> Value {
    check_json_with(capture, block_size, policy, &[])
}

/// [`check_json`] with more arguments (`--relay-policy NAME`).
pub fn check_json_with(capture: &Path, block_size: u32, policy: &str, more: &[&str]) -> Value {
    let bin = kvscope_bin().expect("kvscope binary");
    let mut command = std::process::Command::new(&bin);
    command.arg("check").arg(capture).args(["--block-size", &block_size.to_string(), "--policy", policy, "--json"]).args(more);
    let out = output_within(command, Duration::from_secs(120), "kvscope check --json");
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 3)), "kvscope check exited {code:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --json is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Runs `command` to its end and returns what it printed; kills it and panics, naming `what`,
/// when it has not exited within `timeout`. Its output is read on threads as it comes, so a
/// full pipe never stalls it.
pub fn output_within(mut command: std::process::Command, timeout: Duration, what: &str) -> std::process::Output {
    use std::io::Read;
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() }
}

/// Writes the corpus's Kimi-K3 incident streams (three workers) as a `.kvcap`, frames exactly as
/// the engines published them, `repeat` times over (seq continuing), 10 ms apart per worker.
pub fn write_kimi_capture(path: &Path, repeat: usize) {
    use kvscope_protocol as proto;
    let workers = kvscope_corpus::KIMI_K3_WORKERS;
    let sources: Vec<proto::SourceInfo> =
        (0..workers).map(|w| proto::SourceInfo::engine(w, &w.to_string(), 0, &format!("tcp://127.0.0.1:{}", 5557 + w), None)).collect();
    let header = proto::capture::CaptureHeader {
        created_unix_nanos: 1_700_000_000_000_000_000,
        kvscope_version: "e2e".into(),
        sources,
        note: Some("the corpus's kimi_k3_agg streams (vLLM 0.33.0), for the browser tests".into()),
    };
    let mut out = Vec::new();
    proto::capture::write_header(&mut out, &header).expect("write to a Vec");
    let streams: Vec<_> = (0..workers).map(kvscope_corpus::kimi_k3_stream).collect();
    let per = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut t = 1_700_000_000_000_000_000u64;
    for r in 0..repeat {
        for i in 0..per {
            for (w, s) in streams.iter().enumerate() {
                let Some(m) = s.get(i) else { continue };
                let seq = m.seq + (r * s.len()) as u64;
                t += 10_000_000;
                out.extend(proto::capture::encode_record_parts(w as u32, t, false, &[m.topic.as_bytes(), &seq.to_be_bytes(), m.payload]));
            }
        }
    }
    std::fs::write(path, out).expect("write the capture");
}

/// Serves `dist/` and nothing else: the page with no kvscope server behind it.
#[derive(Debug)]
pub struct StaticServer {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StaticServer {
    pub async fn start(dir: PathBuf) -> StaticServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let dir = dir.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]);
                    let path = req.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_owned();
                    let rel = path.trim_start_matches('/');
                    let file = if rel.is_empty() || rel.contains("..") { dir.join("index.html") } else { dir.join(rel) };
                    let (status, body, ctype) = match std::fs::read(&file) {
                        Ok(b) => {
                            let ct = match file.extension().and_then(|e| e.to_str()) {
                                Some("wasm") => "application/wasm",
                                Some("js") => "text/javascript",
                                Some("css") => "text/css",
                                Some("html") => "text/html; charset=utf-8",
                                _ => "application/octet-stream",
                            };
                            ("200 OK", b, ct)
                        }
                        Err(_) => ("404 Not Found", b"not found".to_vec(), "text/plain"),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(&body).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        StaticServer { url, task }
    }
}

/// Runs a Chrome DevTools command through chromedriver (`goog/cdp/execute`).
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/goog/cdp/execute", session_id.unwrap_or_default()))
    }
    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "cmd": self.cmd, "params": self.params }).to_string()))
    }
}

/// Installed before any page script: collects uncaught errors, unhandled rejections and
/// `console.error` calls, records the longest main-thread task (PerformanceObserver
/// 'longtask'), and keeps the wasm instance Trunk starts (for its memory size).
pub const SHIM_JS: &str = r#"
(() => {
  window.__kvErrors = [];
  window.__kvLongest = 0;
  window.__kvLongTasks = 0;
  // The last 1,000 long tasks as [start ms, duration ms], to tell periodic stalls from growth.
  window.__kvTasks = [];
  window.addEventListener('error', e => window.__kvErrors.push('error: ' + (e.message || e.type) + ' at ' + (e.filename || '') + ':' + (e.lineno || 0)));
  window.addEventListener('unhandledrejection', e => window.__kvErrors.push('unhandledrejection: ' + String(e.reason)));
  const orig = console.error.bind(console);
  console.error = (...args) => { window.__kvErrors.push('console.error: ' + args.map(String).join(' ')); orig(...args); };
  window.addEventListener('TrunkApplicationStarted', e => { window.__kvWasm = e.detail && e.detail.wasm; });
  try {
    new PerformanceObserver(list => {
      for (const t of list.getEntries()) { window.__kvLongTasks += 1; if (t.duration > window.__kvLongest) window.__kvLongest = t.duration;
        window.__kvTasks.push([Math.round(t.startTime), Math.round(t.duration)]); if (window.__kvTasks.length > 1000) window.__kvTasks.shift(); }
    }).observe({ type: 'longtask', buffered: true });
  } catch (e) { window.__kvErrors.push('no longtask observer: ' + e); }
  // The last 200 long animation frames (50 ms or more, Long Animation Frames API), with where
  // their time went: {at, ms, script_ms, render_ms (style, layout, paint), scripts: [[invoker, ms]]}.
  window.__kvFrames = [];
  try {
    new PerformanceObserver(list => {
      for (const f of list.getEntries()) {
        const scripts = (f.scripts || []).map(s => [s.invoker, Math.round(s.duration)]).sort((a, b) => b[1] - a[1]).slice(0, 3);
        const script_ms = (f.scripts || []).reduce((n, s) => n + s.duration, 0);
        const render_ms = f.renderStart > 0 ? f.startTime + f.duration - f.renderStart : 0;
        window.__kvFrames.push({ at: Math.round(f.startTime), ms: Math.round(f.duration), script_ms: Math.round(script_ms), render_ms: Math.round(render_ms), scripts });
        if (window.__kvFrames.length > 200) window.__kvFrames.shift();
      }
    }).observe({ type: 'long-animation-frame', buffered: true });
  } catch (e) { /* an older Chromium: long tasks alone */ }
})();
"#;

/// Reads every worker card: `{worker, dp, tiers: {tier: n}, verdicts: [[policy, kind, reason, n]], frames}`.
pub const CARDS_JS: &str = r#"
return Array.from(document.querySelectorAll('[data-testid="worker-card"]')).map(card => ({
  worker: card.dataset.worker,
  dp: Number(card.dataset.dpRank),
  tiers: Object.fromEntries(Array.from(card.querySelectorAll('[data-testid="tier-count"]')).map(e => [e.dataset.tier, Number(e.textContent)])),
  verdicts: Array.from(card.querySelectorAll('[data-testid="verdict-count"]')).map(e => [e.dataset.policy, e.dataset.kind, e.dataset.reason, Number(e.textContent)]),
  frames: Number((card.querySelector('[data-testid="frames"]') || {textContent: '0'}).textContent.replace(/[^0-9]/g, '')),
}));
"#;

/// Reads chromedriver's performance log (`se/log`), where it puts trace events when started
/// with `KVSCOPE_TRACE=1`.
#[derive(Debug)]
struct PerformanceLog;

impl WebDriverCompatibleCommand for PerformanceLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }
    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "type": "performance" }).to_string()))
    }
}

/// A headless Chromium driven through chromedriver.
pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
    /// Stops the Chromium of this profile if the test ends without [`Browser::close`].
    _chromium: ChromiumGuard,
}

/// A test that panics drops its [`Browser`] unclosed: chromedriver is killed with it
/// (`kill_on_drop`), but the Chromium it started would live on, its renderers busy, beside the
/// next tests. Chromium's profile lock (`SingletonLock`, a link to `host-PID`) names it.
#[derive(Debug)]
struct ChromiumGuard(PathBuf);

impl Drop for ChromiumGuard {
    fn drop(&mut self) {
        let pid = std::fs::read_link(self.0.join("SingletonLock"))
            .ok()
            .and_then(|target| target.to_str()?.rsplit('-').next()?.parse::<u32>().ok());
        if let Some(pid) = pid {
            let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("profile", &self.profile).finish()
    }
}

impl Browser {
    /// Starts chromedriver on a free port and a fresh headless Chromium with its own profile.
    pub async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start /usr/bin/chromedriver");
        let profile = std::env::temp_dir().join(format!("kvscope-chrome-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("profile dir");
        let args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--no-first-run".into(),
            "--window-size=1600,1200".into(),
            "--enable-precise-memory-info".into(),
            format!("--user-data-dir={}", profile.display()),
        ];
        // KVSCOPE_CHROME_ARGS: more switches, space-separated (an experiment's
        // `--js-flags=...`, say); none by default.
        let mut args = args;
        args.extend(std::env::var("KVSCOPE_CHROME_ARGS").unwrap_or_default().split_whitespace().map(str::to_owned));
        let mut caps = serde_json::Map::new();
        // KVSCOPE_TRACE=1: chromedriver records the page's trace events (what each main-thread
        // task did: script, style, layout, paint, compile) into its performance log, which
        // `Browser::trace_events` reads.
        if std::env::var("KVSCOPE_TRACE").as_deref() == Ok("1") {
            caps.insert("goog:loggingPrefs".into(), json!({ "performance": "ALL" }));
            caps.insert(
                "goog:chromeOptions".into(),
                json!({ "args": args, "binary": "/usr/bin/chromium",
                        "perfLoggingPrefs": { "enableNetwork": false, "enablePage": false,
                                              "traceCategories": "toplevel,devtools.timeline,disabled-by-default-devtools.timeline,v8.wasm" } }),
            );
        } else {
            caps.insert("goog:chromeOptions".into(), json!({ "args": args, "binary": "/usr/bin/chromium" }));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let conn = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(conn).capabilities(caps.clone()).connect(&format!("http://127.0.0.1:{port}")).await {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot start a Chromium session through chromedriver: {e}"),
            }
        };
        let b = Browser { client, driver, _chromium: ChromiumGuard(profile.clone()), profile };
        b.cdp("Page.addScriptToEvaluateOnNewDocument", json!({ "source": SHIM_JS })).await;
        b
    }

    /// The trace events chromedriver collected since the last call (with `KVSCOPE_TRACE=1`),
    /// as one array in Chrome's trace format.
    pub async fn trace_events(&self) -> Value {
        let entries = self.client.issue_cmd(PerformanceLog).await.unwrap_or_default();
        let mut events = Vec::new();
        for e in entries.as_array().into_iter().flatten() {
            let Some(text) = e["message"].as_str() else { continue };
            let Ok(m) = serde_json::from_str::<Value>(text) else { continue };
            // Chromedriver logs each trace event as the params of its own `Tracing.dataCollected`.
            if m["message"]["method"] == "Tracing.dataCollected" {
                events.push(m["message"]["params"].clone());
            }
        }
        Value::Array(events)
    }

    pub async fn cdp(&self, cmd: &'static str, params: Value) -> Value {
        self.client.issue_cmd(Cdp { cmd, params }).await.unwrap_or_else(|e| panic!("CDP {cmd}: {e}"))
    }

    /// Opens `url` and waits until every stage of the page is mounted. With
    /// `KVSCOPE_E2E_ENGINES=K` set, the page spreads its engine over K workers (`?engines=K`).
    pub async fn open(&self, url: &str) {
        let engines = std::env::var("KVSCOPE_E2E_ENGINES").ok().filter(|k| !k.is_empty());
        let url = match &engines {
            Some(k) => format!("{url}{}engines={k}", if url.contains('?') { '&' } else { '?' }),
            None => url.to_owned(),
        };
        self.client.goto(&url).await.expect("navigate");
        // The page mounts in stages (`views::app::staged_mount`); the tier tree is in the last.
        self.wait_for("return !!document.querySelector('[data-testid=\"tier-tree\"]')", Duration::from_secs(30), "the app to mount").await;
        if let Some(k) = engines {
            let script = format!("return document.querySelector('[data-testid=\"memory\"]')?.dataset.engines === '{k}'");
            self.wait_for(&script, Duration::from_secs(30), &format!("the engine to run over {k} workers")).await;
        }
    }

    /// Runs a script returning a JSON value.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `script` (returning a boolean) until true, or panics naming `what`.
    pub async fn wait_for(&self, script: &str, timeout: Duration, what: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            // Each poll is bounded by what is left: a page whose main thread hangs fails here too.
            let left = deadline.saturating_duration_since(Instant::now());
            let answered = tokio::time::timeout(left, self.js(script)).await;
            if answered.as_ref().is_ok_and(|v| v.as_bool() == Some(true)) {
                return;
            }
            if Instant::now() > deadline {
                let brief = Duration::from_secs(5);
                let errors = tokio::time::timeout(brief, self.errors()).await;
                let _ = tokio::time::timeout(brief, self.screenshot(&format!("timeout-{}", what.replace(' ', "-")))).await;
                let state = if answered.is_ok() { "the condition stayed false" } else { "the page stopped answering scripts" };
                panic!("timed out after {timeout:?} waiting for {what} ({state}); page errors: {errors:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Script errors the shim collected since the page loaded.
    pub async fn errors(&self) -> Vec<String> {
        let v = self.js("return window.__kvErrors || ['the error shim is not installed'];").await;
        v.as_array().map(|a| a.iter().map(|e| e.as_str().unwrap_or_default().to_owned()).collect()).unwrap_or_default()
    }

    pub async fn assert_no_errors(&self) {
        let errors = self.errors().await;
        assert!(errors.is_empty(), "the page logged script errors: {errors:#?}");
    }

    /// Every worker card's figures.
    pub async fn cards(&self) -> Vec<Value> {
        self.js(CARDS_JS).await.as_array().cloned().unwrap_or_default()
    }

    /// Saves a PNG of the viewport (or of one element) into tests/artifacts/NAME.png.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = artifacts_dir().join(format!("{name}.png"));
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(&path, png);
        }
        path
    }

    /// Scrolls an element into view and saves a PNG of it.
    pub async fn screenshot_of(&self, css: &str, name: &str) -> PathBuf {
        let path = artifacts_dir().join(format!("{name}.png"));
        if let Ok(el) = self.client.find(fantoccini::Locator::Css(css)).await {
            let _ = self
                .client
                .execute("arguments[0].scrollIntoView({block: 'start'});", vec![serde_json::to_value(&el).unwrap_or_default()])
                .await;
            if let Ok(png) = el.screenshot().await {
                let _ = std::fs::write(&path, png);
            }
        }
        path
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
        let mut driver = self.driver;
        let _ = driver.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The figures `kvscope check --json` gives for one source, in the page's terms:
/// `(policy side, kind, reason) -> n`.
pub fn expected_counts(check: &Value, side: &str, worker: &str, dp: u64) -> Vec<(String, String, String, u64)> {
    let src = check["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["worker_id"].as_str() == Some(worker) && s["dp_rank"].as_u64() == Some(dp)))
        .unwrap_or_else(|| panic!("check --json has no source {worker}:{dp}: {check}"));
    let mut out = Vec::new();
    for (tier, n) in src["applied"].as_object().expect("applied") {
        out.push((side.into(), "applied".into(), tier.clone(), n.as_u64().unwrap_or(0)));
    }
    for (reason, n) in src["skipped"].as_object().expect("skipped") {
        out.push((side.into(), "skipped".into(), reason.clone(), n.as_u64().unwrap_or(0)));
    }
    out.push((side.into(), "fatal".into(), "*".into(), src["fatal"]["count"].as_u64().unwrap_or(0)));
    out
}

/// Asserts that a card shows exactly what `check --json` says for its source under `side`.
pub fn assert_card_matches(card: &Value, check: &Value, side: &str) {
    let worker = card["worker"].as_str().expect("data-worker");
    let dp = card["dp"].as_u64().expect("data-dp-rank");
    let shown: Vec<(String, String, String, u64)> = card["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .map(|v| {
            (
                v[0].as_str().unwrap_or_default().to_owned(),
                v[1].as_str().unwrap_or_default().to_owned(),
                v[2].as_str().unwrap_or_default().to_owned(),
                v[3].as_u64().unwrap_or(0),
            )
        })
        .filter(|v| v.0 == side)
        .collect();
    let get =
        |kind: &str, reason: &str| -> u64 { shown.iter().filter(|v| v.1 == kind && (reason == "*" || v.2 == reason)).map(|v| v.3).sum() };
    for (_, kind, reason, n) in expected_counts(check, side, worker, dp) {
        assert_eq!(get(&kind, &reason), n, "worker {worker}:{dp} policy {side}: {kind} {reason} on the page vs check --json");
    }
    // Nothing on the page that check does not have (every skip reason it shows, check lists).
    let src = check["sources"].as_array().unwrap().iter().find(|s| s["worker_id"].as_str() == Some(worker)).unwrap();
    for v in shown.iter().filter(|v| v.1 == "skipped" && v.3 > 0) {
        assert_eq!(src["skipped"][&v.2].as_u64(), Some(v.3), "page shows {v:?} for {worker}:{dp}; check says {}", src["skipped"]);
    }
    let events: u64 = shown.iter().map(|v| v.3).sum::<u64>();
    assert_eq!(events, src["events"].as_u64().unwrap_or(0), "events (one verdict each) on the page for {worker}:{dp} under {side}");
}
