//! `--router-index URL`: reads a real router index, Dynamo's standalone indexer (`python -m
//! dynamo.indexer`), from outside: its `GET /workers` and `GET /dump`, every `--router-index-interval`,
//! each read bounded by `--router-index-timeout` and `--router-index-max-bytes`.
//!
//! Each read is a record of the source (kind `router_index`) in the capture, `[workers|dump,
//! body]`, or `[error, what went wrong]`, so `check` compares the real index with the model at
//! that point of the stream; each is counted (`kvscope_router_index_polls_total{url, what,
//! result}`) and a dump goes to the live index task, which compares it with its model of Dynamo
//! 1.6.1's index (`kvscope_router_index_differences`). A read that fails or is too large is an
//! error that is counted, logged (the first of a run of them) and recorded; the next read tries
//! again. Nothing here ever stops the relay.
//!
//! The client is plain HTTP/1.1 over a TCP stream (`Connection: close`, a `Content-Length` or
//! chunked body): the indexer serves plain HTTP on a port of its own, and a GET is all it takes.

use std::time::Duration;

use kvscope_protocol as proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::capture::Recorder;
use crate::metrics::{Metrics, PollLabels, UrlLabels};

/// What a record's first frame says the read was.
pub const WORKERS: &[u8] = b"workers";
pub const DUMP: &[u8] = b"dump";
pub const ERROR: &[u8] = b"error";

/// How a real index is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollOptions {
    pub interval: Duration,
    pub timeout: Duration,
    pub max_bytes: usize,
}

impl Default for PollOptions {
    fn default() -> Self {
        PollOptions { interval: Duration::from_secs(5), timeout: Duration::from_secs(5), max_bytes: 64 << 20 }
    }
}

/// One `--router-index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterIndexSource {
    /// As given: `http://HOST:PORT`.
    pub url: String,
    /// `HOST:PORT`.
    authority: String,
}

impl RouterIndexSource {
    /// Parses `http://HOST:PORT` (a trailing `/` allowed).
    pub fn parse(url: &str) -> Result<RouterIndexSource, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--router-index {url:?}: give the indexer's plain-HTTP base URL, http://HOST:PORT (as `python -m dynamo.indexer --port P` serves it)")
        })?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
            return Err(format!("--router-index {url:?}: expected http://HOST:PORT with no path"));
        }
        Ok(RouterIndexSource { url: url.trim_end_matches('/').to_owned(), authority: authority.to_owned() })
    }

    /// Its source in a capture's header.
    pub fn info(&self, index: u32) -> proto::SourceInfo {
        proto::SourceInfo {
            index,
            key: format!("index:{}", self.url),
            worker_id: String::new(),
            dp_rank: 0,
            endpoint: self.url.clone(),
            replay_endpoint: None,
            kind: proto::SourceKind::RouterIndex,
            event_plane: None,
        }
    }
}

/// Why a read failed, as `result` in `/metrics`.
fn error_kind(e: &str) -> &'static str {
    if e.contains("timed out") {
        "timeout"
    } else if e.contains("larger than") {
        "too_large"
    } else if e.contains("connect") {
        "connect"
    } else if e.contains("HTTP status") {
        "status"
    } else {
        "malformed"
    }
}

/// Reads `src` until `stop`, recording and counting every read; each dump also goes to `dumps`.
pub async fn run(
    src: RouterIndexSource,
    index: u32,
    recorder: Option<Recorder>,
    metrics: std::sync::Arc<Metrics>,
    opts: PollOptions,
    dumps: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(opts.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        for (path, what) in [("/workers", WORKERS), ("/dump", DUMP)] {
            let result = tokio::select! {
                _ = stop.changed() => return,
                r = get(&src.authority, path, opts) => r,
            };
            let now = crate::time::unix_nanos();
            let what_name = String::from_utf8_lossy(what).into_owned();
            match result {
                Ok(body) => {
                    failing = false;
                    metrics.router_index_bytes.get_or_create(&UrlLabels { url: src.url.clone() }).inc_by(body.len() as u64);
                    metrics
                        .router_index_polls
                        .get_or_create(&PollLabels { url: src.url.clone(), what: what_name, result: "ok".into() })
                        .inc();
                    if let Some(r) = &recorder {
                        r.record(index, now, false, &[what, body.as_slice()]).await;
                    }
                    if what == DUMP
                        && let Some(tx) = &dumps
                    {
                        // The live task keeps up or the dump waits for the next read.
                        let _ = tx.try_send(body);
                    }
                }
                Err(e) => {
                    let text = format!("{}{path}: {e}", src.url);
                    if !failing {
                        tracing::warn!("router index: {text} (retrying every {:?})", opts.interval);
                    }
                    failing = true;
                    let labels = PollLabels { url: src.url.clone(), what: what_name, result: error_kind(&e).into() };
                    metrics.router_index_polls.get_or_create(&labels).inc();
                    if let Some(r) = &recorder {
                        r.record(index, now, false, &[ERROR, text.as_bytes()]).await;
                    }
                }
            }
        }
    }
}

/// `GET path` of `authority`, the body when the status is 200; bounded in time and size.
pub async fn get(authority: &str, path: &str, opts: PollOptions) -> Result<Vec<u8>, String> {
    tokio::time::timeout(opts.timeout, get_unbounded_time(authority, path, opts.max_bytes))
        .await
        .map_err(|_| format!("timed out after {:?} (raise --router-index-timeout)", opts.timeout))?
}

async fn get_unbounded_time(authority: &str, path: &str, max_bytes: usize) -> Result<Vec<u8>, String> {
    let mut stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("cannot send the request: {e}"))?;
    // Header plus body, bounded: 64 KiB of header at most.
    let limit = max_bytes.saturating_add(64 << 10);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|e| format!("reading the answer failed: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > limit {
            return Err(format!("the answer is larger than {max_bytes} bytes (raise --router-index-max-bytes)"));
        }
    }
    parse_response(&buf, max_bytes)
}

/// The body of an HTTP/1.1 response read to its end.
fn parse_response(buf: &[u8], max_bytes: usize) -> Result<Vec<u8>, String> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("the answer has no complete HTTP header")?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "the HTTP header is not UTF-8".to_owned())?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if code != "200" {
        return Err(format!("HTTP status {status:?} (is this a Dynamo standalone indexer?)"));
    }
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
        })
    };
    let body = &buf[end + 4..];
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(body)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| format!("Content-Length {len:?} is not a number"))?;
        body.get(..len).ok_or_else(|| format!("the body ends after {} of its {len} bytes", body.len()))?.to_vec()
    } else {
        body.to_vec()
    };
    if body.len() > max_bytes {
        return Err(format!("the answer is larger than {max_bytes} bytes (raise --router-index-max-bytes)"));
    }
    Ok(body)
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size line has no end")?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| "a chunk size is not text".to_owned())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or_default().trim(), 16)
            .map_err(|_| format!("chunk size {size_text:?} is not hexadecimal"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let data = body.get(..size).ok_or("a chunk is cut short")?;
        out.extend_from_slice(data);
        body = body.get(size + 2..).ok_or("a chunk has no end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_plain_http_base_urls() {
        assert_eq!(RouterIndexSource::parse("http://127.0.0.1:8090/").unwrap().authority, "127.0.0.1:8090");
        assert!(RouterIndexSource::parse("https://x:1").unwrap_err().contains("plain-HTTP"));
        assert!(RouterIndexSource::parse("http://x:1/dump").unwrap_err().contains("no path"));
    }

    #[test]
    fn responses_with_length_chunks_or_errors() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(ok, 10).unwrap(), b"{}");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked, 10).unwrap(), b"[1,2]");
        assert!(parse_response(b"HTTP/1.1 404 Not Found\r\n\r\n", 10).unwrap_err().contains("404"));
        assert!(parse_response(ok, 1).unwrap_err().contains("larger than 1 bytes"));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}", 10).unwrap_err().contains("after 2 of its 9"));
        assert_eq!(error_kind("timed out after 5s"), "timeout");
    }
}
