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
//! The indexer serves plain HTTP on a port of its own, and a GET is all it takes
//! (`crate::http_client`).

use std::time::Duration;

use kvscope_protocol as proto;
use tokio::sync::watch;

use crate::capture::Recorder;
use crate::http_client::{HttpError, Request};
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
            block_size: None,
        }
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
                    let text = format!("{}{path}: {}", src.url, explain(&e));
                    if !failing {
                        tracing::warn!("router index: {text} (retrying every {:?})", opts.interval);
                    }
                    failing = true;
                    let labels = PollLabels { url: src.url.clone(), what: what_name, result: e.kind().into() };
                    metrics.router_index_polls.get_or_create(&labels).inc();
                    if let Some(r) = &recorder {
                        r.record(index, now, false, &[ERROR, text.as_bytes()]).await;
                    }
                }
            }
        }
    }
}

/// `GET path` of the indexer, bounded in time and size; the error says which flag to raise.
pub async fn get(authority: &str, path: &str, opts: PollOptions) -> Result<Vec<u8>, HttpError> {
    Request::get(authority, path).send(opts.timeout, opts.max_bytes).await
}

/// A failed read in words, with the flag that changes it.
fn explain(e: &HttpError) -> String {
    match e {
        HttpError::Timeout(_) => format!("{e} (raise --router-index-timeout)"),
        HttpError::TooLarge(_) => format!("{e} (raise --router-index-max-bytes)"),
        HttpError::Status { .. } => format!("{e} (is this a Dynamo standalone indexer?)"),
        HttpError::Connect { .. } | HttpError::Malformed(_) => e.to_string(),
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
    fn read_errors_name_the_flag_to_raise() {
        assert_eq!(explain(&HttpError::Timeout(Duration::from_secs(5))), "timed out after 5s (raise --router-index-timeout)");
        assert!(explain(&HttpError::TooLarge(9)).ends_with("(raise --router-index-max-bytes)"));
    }
}
