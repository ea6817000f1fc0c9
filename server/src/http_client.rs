//! A small HTTP/1.1 client for the plain-HTTP services kvscope reads: Dynamo's standalone
//! indexer (`--router-index`, `--discover dynamo-indexer:`) and etcd's JSON gateway
//! (`--discover etcd://`).
//!
//! One request per connection (`Connection: close`), a `Content-Length` or chunked body, bounded
//! in time and in size: each is a poll that the next poll repeats, so nothing here keeps
//! connections or retries.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why a request failed; [`HttpError::kind`] is the `result` label in `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    Connect {
        authority: String,
        detail: String,
    },
    Timeout(Duration),
    TooLarge(usize),
    /// A status other than 200, with the first bytes of the body (services say why there).
    Status {
        line: String,
        body: String,
    },
    Malformed(String),
}

impl HttpError {
    /// One word for a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            HttpError::Connect { .. } => "connect",
            HttpError::Timeout(_) => "timeout",
            HttpError::TooLarge(_) => "too_large",
            HttpError::Status { .. } => "status",
            HttpError::Malformed(_) => "malformed",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Connect { authority, detail } => write!(f, "cannot connect to {authority}: {detail}"),
            HttpError::Timeout(t) => write!(f, "timed out after {t:?}"),
            HttpError::TooLarge(n) => write!(f, "the answer is larger than {n} bytes"),
            HttpError::Status { line, body } if body.is_empty() => write!(f, "HTTP status {line:?}"),
            HttpError::Status { line, body } => write!(f, "HTTP status {line:?}: {body}"),
            HttpError::Malformed(what) => f.write_str(what),
        }
    }
}

/// One request.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub authority: &'a str,
    pub method: &'static str,
    pub path: &'a str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl<'a> Request<'a> {
    pub fn get(authority: &'a str, path: &'a str) -> Request<'a> {
        Request { authority, method: "GET", path, headers: Vec::new(), body: Vec::new() }
    }

    /// A POST of a JSON body.
    pub fn post_json(authority: &'a str, path: &'a str, body: Vec<u8>) -> Request<'a> {
        Request { authority, method: "POST", path, headers: vec![("Content-Type", "application/json".into())], body }
    }

    pub fn header(mut self, name: &'static str, value: String) -> Request<'a> {
        self.headers.push((name, value));
        self
    }

    /// Sends the request and returns the body of a 200 answer of at most `max_bytes`.
    pub async fn send(&self, timeout: Duration, max_bytes: usize) -> Result<Vec<u8>, HttpError> {
        tokio::time::timeout(timeout, self.send_unbounded_time(max_bytes)).await.map_err(|_| HttpError::Timeout(timeout))?
    }

    async fn send_unbounded_time(&self, max_bytes: usize) -> Result<Vec<u8>, HttpError> {
        let authority = self.authority;
        let mut stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| HttpError::Connect { authority: authority.to_owned(), detail: e.to_string() })?;
        let mut head =
            format!("{} {} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n", self.method, self.path);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(&self.body);
        stream.write_all(&request).await.map_err(|e| HttpError::Malformed(format!("cannot send the request: {e}")))?;
        // Header plus body, bounded: 64 KiB of header at most.
        let limit = max_bytes.saturating_add(64 << 10);
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = stream.read(&mut chunk).await.map_err(|e| HttpError::Malformed(format!("reading the answer failed: {e}")))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > limit {
                return Err(HttpError::TooLarge(max_bytes));
            }
        }
        parse_response(&buf, max_bytes)
    }
}

/// The body of an HTTP/1.1 response read to its end.
fn parse_response(buf: &[u8], max_bytes: usize) -> Result<Vec<u8>, HttpError> {
    let malformed = |what: &str| HttpError::Malformed(what.to_owned());
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| malformed("the answer has no complete HTTP header"))?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| malformed("the HTTP header is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
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
        let len: usize = len.parse().map_err(|_| HttpError::Malformed(format!("Content-Length {len:?} is not a number")))?;
        body.get(..len).ok_or_else(|| HttpError::Malformed(format!("the body ends after {} of its {len} bytes", body.len())))?.to_vec()
    } else {
        body.to_vec()
    };
    if code != "200" {
        let said = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
        return Err(HttpError::Status { line: status.to_owned(), body: said });
    }
    if body.len() > max_bytes {
        return Err(HttpError::TooLarge(max_bytes));
    }
    Ok(body)
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, HttpError> {
    let malformed = |what: &str| HttpError::Malformed(what.to_owned());
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").ok_or_else(|| malformed("a chunk size line has no end"))?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| malformed("a chunk size is not text"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or_default().trim(), 16)
            .map_err(|_| HttpError::Malformed(format!("chunk size {size_text:?} is not hexadecimal")))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let data = body.get(..size).ok_or_else(|| malformed("a chunk is cut short"))?;
        out.extend_from_slice(data);
        body = body.get(size + 2..).ok_or_else(|| malformed("a chunk has no end"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_with_length_chunks_or_errors() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(ok, 10).unwrap(), b"{}");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked, 10).unwrap(), b"[1,2]");
        let not_found = parse_response(b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\n\r\nnope!", 10).unwrap_err();
        assert_eq!(not_found.to_string(), "HTTP status \"HTTP/1.1 404 Not Found\": nope!");
        assert_eq!(not_found.kind(), "status");
        assert_eq!(parse_response(ok, 1).unwrap_err(), HttpError::TooLarge(1));
        let short = parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}", 10).unwrap_err();
        assert!(short.to_string().contains("after 2 of its 9"), "{short}");
    }
}
