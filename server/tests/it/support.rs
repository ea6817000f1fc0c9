//! Helpers shared by every area: the `kvscope` binary as a child process, `/metrics` scraping,
//! a WebSocket client that decodes protocol messages, in-test engines, and waiting for
//! conditions with a deadline (never a bare sleep).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kvscope_protocol as proto;
use tokio_tungstenite::tungstenite::Message;

pub const BIN: &str = env!("CARGO_BIN_EXE_kvscope");

/// A running `kvscope`; killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub stdout_lines: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `kvscope ARGS` and waits for its `listening on http://ADDR/` line.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(args)
            .env("KVSCOPE_LOG", "info,zeromq=off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kvscope");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("kvscope {args:?} did not print `listening on` within 30 s; printed {lines:?}");
            };
            if let Some(rest) = line.strip_prefix("listening on http://") {
                let addr = rest.split('/').next().unwrap().to_owned();
                lines.push(line);
                return Server { child, addr, stdout_lines: lines };
            }
            lines.push(line);
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGINT (the Ctrl-C the server handles) and waits for the exit.
    pub fn interrupt(&mut self) -> std::process::ExitStatus {
        Command::new("kill").args(["-INT", &self.child.id().to_string()]).status().expect("kill -INT");
        wait_child(&mut self.child, Duration::from_secs(30))
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> String {
        http_get(&self.addr, "/metrics", &[]).await.2
    }

    /// One sample of `/metrics`: `name{labels}` exactly as printed, 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }

    /// Waits until `series` equals `want`, then returns; panics with the last value after 30 s.
    pub async fn wait_metric(&self, series: &str, want: f64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let last = self.metric(series).await;
            if last == want {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{series}: wanted {want}, still {last} after 30 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn wait_child(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "child did not exit within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of one series in a Prometheus text exposition (0 when absent).
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(name, _)| *name == series).map(|(_, v)| v.parse().unwrap()))
        .unwrap_or(0.0)
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A minimal HTTP/1.1 GET over a fresh TCP connection: (status, headers, body).
pub async fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": ").map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned())))
        .collect::<Vec<_>>();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked");
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    (status, headers, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

pub type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/ws` (with extra request headers) and returns the stream.
pub async fn ws_connect(url: &str, headers: &[(&str, &str)]) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().unwrap();
    for (k, v) in headers {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    tokio_tungstenite::connect_async(request).await.map(|(ws, _)| ws)
}

/// The next protocol message, or None when the socket closed; panics after `timeout`.
pub async fn next_message(ws: &mut Ws, timeout: Duration) -> Option<proto::Message> {
    loop {
        let m = tokio::time::timeout(timeout, ws.next()).await.expect("no WebSocket message in time")?;
        match m {
            Ok(Message::Binary(b)) => return Some(proto::decode(&b).expect("valid protocol message")),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Reads hello, statuses and history up to `HistoryComplete`.
pub async fn read_preamble(ws: &mut Ws) -> (proto::Hello, Vec<proto::Message>) {
    let Some(proto::Message::Hello(hello)) = next_message(ws, Duration::from_secs(10)).await else {
        panic!("the first message is not a hello")
    };
    let mut history = Vec::new();
    loop {
        match next_message(ws, Duration::from_secs(10)).await.expect("socket open") {
            proto::Message::HistoryComplete(_) => return (hello, history),
            m => history.push(m),
        }
    }
}


/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The repository root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A scratch directory under the target dir, fresh per test.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A valid one-event payload (vLLM 0.33.0 layout), `size` token ids long.
pub fn payload(seq: u64, tokens: usize) -> bytes::Bytes {
    use kvscope::demo::payload::{Batch, Hash, Release, Stored, encode_batch};
    let event = Stored::new([Hash::U64(seq + 1)], tokens as u32)
        .tokens(0..tokens as u32)
        .medium(Some("GPU"))
        .extra_keys_nil_per_block()
        .group_idx(Some(0))
        .kind(Some("full_attention"));
    bytes::Bytes::from(encode_batch(Release::Vllm033, &Batch { ts: 1.0, events: vec![event.into()], dp_rank: Some(0) }))
}

impl Server {
    pub async fn metrics_with_token(&self, token: &str) -> String {
        http_get(&self.addr, "/metrics", &[("Authorization", &format!("Bearer {token}"))]).await.2
    }
}
