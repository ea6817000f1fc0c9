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
        let mut command = Command::new(BIN);
        command.args(args);
        Server::spawn(command, &format!("{args:?}"))
    }

    /// Starts `command` (one that ends up exec'ing kvscope) and waits as [`Server::start`] does.
    pub fn spawn(mut command: Command, args: &str) -> Server {
        let mut child = command
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
                panic!("kvscope {args} did not print `listening on` within 30 s; printed {lines:?}");
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
        let mut last = None;
        loop {
            // Each scrape is bounded by what is left, so a server that stops answering fails here too.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Ok(value) = tokio::time::timeout(left, self.metric(series)).await {
                if value == want {
                    return;
                }
                last = Some(value);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series}: wanted {want}, still {last:?} after 30 s (None: /metrics did not answer)"
            );
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
    http_get_as(addr, addr, path, headers).await
}

/// [`http_get`] with the `Host` header set to `host` (a DNS-rebinding page sends its own name).
pub async fn http_get_as(addr: &str, host: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    let (status, headers, body) = http_get_raw(addr, host, path, headers).await;
    let body = String::from_utf8_lossy(&body).into_owned();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked");
    let body = if chunked { dechunk(&body) } else { body };
    (status, headers, body)
}

/// How long one test request may take, connect to the last byte: the server answers on loopback.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// [`http_get_as`] with the body as bytes, as sent (not de-chunked: for fixed-length bodies).
/// Panics, naming the request, when the server does not answer in full within [`HTTP_TIMEOUT`].
pub async fn http_get_raw(addr: &str, host: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.unwrap();
        buf
    };
    let buf = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| panic!("GET http://{addr}{path}: no complete answer within {HTTP_TIMEOUT:?}"));
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").map_or(buf.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let body = buf[split..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines.filter_map(|l| l.split_once(": ").map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))).collect::<Vec<_>>();
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

pub type WsStream = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A client of `/ws`: the stream, and the messages of a batch not yet handed out (the server
/// bundles queued messages into one WebSocket message; the tests read them one at a time).
#[derive(Debug)]
pub struct Ws {
    pub stream: WsStream,
    pending: std::collections::VecDeque<proto::Message>,
    /// WebSocket messages that were batches of two or more, so tests can see batching happen.
    pub batches: u64,
    /// WebSocket messages received (a batch counts once).
    pub messages: u64,
}

impl From<WsStream> for Ws {
    fn from(stream: WsStream) -> Self {
        Ws { stream, pending: Default::default(), batches: 0, messages: 0 }
    }
}

impl std::ops::Deref for Ws {
    type Target = WsStream;
    fn deref(&self) -> &WsStream {
        &self.stream
    }
}

impl std::ops::DerefMut for Ws {
    fn deref_mut(&mut self) -> &mut WsStream {
        &mut self.stream
    }
}

/// Opens `/ws` (with extra request headers) and returns the stream.
pub async fn ws_connect(url: &str, headers: &[(&str, &str)]) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().unwrap();
    for (k, v) in headers {
        request
            .headers_mut()
            .insert(tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request).await.map(|(ws, _)| ws.into())
}

/// Opens `/ws` over a socket whose receive buffer is tiny, so that a client that stops reading
/// is not hidden behind megabytes of kernel buffers (loopback autotunes them large).
pub async fn ws_connect_small_window(addr: &str) -> Ws {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let url = format!("ws://{addr}/ws");
    let (ws, _) = tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(stream)).await.unwrap();
    ws.into()
}

/// The next protocol message, or None when the socket closed; panics after `timeout`.
pub async fn next_message(ws: &mut Ws, timeout: Duration) -> Option<proto::Message> {
    loop {
        if let Some(m) = ws.pending.pop_front() {
            return Some(m);
        }
        let m =
            tokio::time::timeout(timeout, ws.stream.next()).await.unwrap_or_else(|_| panic!("no WebSocket message within {timeout:?}"))?;
        match m {
            Ok(Message::Binary(b)) => {
                let messages = proto::decode_all(&b).expect("valid protocol message");
                ws.batches += u64::from(messages.len() > 1);
                ws.messages += 1;
                ws.pending.extend(messages);
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// The first source status for which `pred` holds, within 30 s. Fails, instead of spinning,
/// when the socket closes or the deadline passes, with the last status seen.
pub async fn status_when(ws: &mut Ws, pred: impl Fn(&proto::SourceStatus) -> bool) -> proto::SourceStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let message = match tokio::time::timeout(left, next_message(ws, left.max(Duration::from_millis(1)))).await {
            Ok(m) => m,
            Err(_) => panic!("no matching source status within 30 s; the last one was {last:#?}"),
        };
        match message {
            Some(proto::Message::SourceStatus(s)) if pred(&s) => return s,
            Some(proto::Message::SourceStatus(s)) => last = Some(s),
            Some(_) => {}
            None => panic!("the WebSocket closed before a matching source status arrived; the last one was {last:#?}"),
        }
    }
}

/// Reads hello, statuses and history up to `HistoryComplete`.
pub async fn read_preamble(ws: &mut Ws) -> (proto::Hello, Vec<proto::Message>) {
    let Some(proto::Message::Hello(hello)) = next_message(ws, Duration::from_secs(10)).await else {
        panic!("the first message is not a hello")
    };
    // Each message within 10 s, and the whole history within 60 s: a server that keeps sending
    // without ever completing its history fails too.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut history = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no HistoryComplete within 60 s ({} history messages read)", history.len());
        match next_message(ws, Duration::from_secs(10)).await.expect("socket open") {
            proto::Message::HistoryComplete(_) => return (hello, history),
            // How much history follows; the tests count the history itself.
            proto::Message::HistoryStart(_) => {}
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
    bytes::Bytes::from(encode_batch(Release::Vllm033, &Batch { ts: 1.0, events: vec![event.into()], dp_rank: Some(0) }).unwrap())
}

impl Server {
    pub async fn metrics_with_token(&self, token: &str) -> String {
        http_get(&self.addr, "/metrics", &[("Authorization", &format!("Bearer {token}"))]).await.2
    }
}

/// Where scripts/install-tools.sh puts the real peers' Python side (`KVSCOPE_PEERS` overrides).
pub fn peers_dir() -> std::path::PathBuf {
    std::env::var_os("KVSCOPE_PEERS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kvscope/peers"))
}

/// The peers' virtualenv Python; fails the test, naming the fix, when it is missing.
pub fn peer_python() -> std::path::PathBuf {
    let python = peers_dir().join("venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/install-tools.sh (it creates the peers' virtualenv)", python.display());
    python
}

/// vLLM 0.33.0's own `vllm/distributed/kv_events.py`, extracted from the release wheel.
pub fn vllm_kv_events() -> std::path::PathBuf {
    let file = peers_dir().join("vllm-0.33.0/vllm/distributed/kv_events.py");
    assert!(file.exists(), "{} is missing: run scripts/install-tools.sh (it fetches the vllm==0.33.0 wheel)", file.display());
    file
}

/// Every record of a capture as (source, seq, replayed), in file order; frames that are not a
/// live or replay message with a seq are skipped.
pub fn capture_seqs(path: &std::path::Path) -> Vec<(u32, u64, bool)> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = proto::capture::CaptureReader::new(std::io::BufReader::new(file)).expect("a capture header");
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().expect("a readable record") {
        let frames: Vec<Vec<u8>> = record.frames.into_iter().map(|f| f.into_vec()).collect();
        let seq = if record.replayed {
            match kvscope_wire::frame::parse_replay_reply(&frames) {
                Ok(kvscope_wire::ReplayReply::Message { seq, .. }) => seq,
                _ => continue,
            }
        } else {
            match kvscope_wire::frame::parse_live(&frames) {
                Ok(m) => m.seq,
                Err(_) => continue,
            }
        };
        out.push((record.source, seq, record.replayed));
    }
    out
}

/// Asserts that source `source` of a capture holds seq `0..n` exactly once, in order, and that
/// the replayed ones are exactly those before its first live frame; returns that first live seq.
pub fn assert_every_batch_once(records: &[(u32, u64, bool)], source: u32, n: u64) -> u64 {
    let mine: Vec<(u64, bool)> = records.iter().filter(|r| r.0 == source).map(|r| (r.1, r.2)).collect();
    let seqs: Vec<u64> = mine.iter().map(|r| r.0).collect();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "source {source}: every batch exactly once, in seq order");
    let first_live = mine.iter().find(|r| !r.1).map_or(n, |r| r.0);
    for (seq, replayed) in &mine {
        assert_eq!(*replayed, *seq < first_live, "source {source} seq {seq}: replayed iff before the first live frame {first_live}");
    }
    first_live
}

/// Writes a capture of one source (`0:0`, no replay endpoint) holding a live frame per
/// `(seq, recv_time_nanos)`, each a one-store batch ([`payload`]).
pub fn write_capture(path: &std::path::Path, records: impl IntoIterator<Item = (u64, u64)>) {
    use proto::capture::{self, CaptureHeader, CaptureRecord};
    let info = proto::SourceInfo {
        index: 0,
        key: "0:0".into(),
        worker_id: "0".into(),
        dp_rank: 0,
        endpoint: "tcp://127.0.0.1:1".into(),
        replay_endpoint: None,
        kind: proto::SourceKind::Engine,
        event_plane: None,
        block_size: None,
    };
    let header = CaptureHeader { created_unix_nanos: 0, kvscope_version: "test".into(), sources: vec![info], note: None };
    let mut bytes = Vec::new();
    capture::write_header(&mut bytes, &header).unwrap();
    for (seq, recv_time_nanos) in records {
        let frames = [b"kv-events".to_vec(), seq.to_be_bytes().to_vec(), payload(seq, 16).to_vec()];
        bytes.extend(capture::encode_record(&CaptureRecord {
            source: 0,
            recv_time_nanos,
            replayed: false,
            frames: frames.into_iter().map(serde_bytes::ByteBuf::from).collect(),
        }));
    }
    std::fs::write(path, bytes).unwrap();
}
