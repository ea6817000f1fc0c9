//! `--discover URL`: the fleet from Dynamo's discovery store, live.
//!
//! Each backend is polled every `--discover-interval` and read whole into a [`Fleet`]
//! (`records`): the relays on the event plane with their `(worker_id, dp_rank)`, the engine
//! endpoints a standalone indexer reads, and each model's block size. The backends' fleets are
//! merged and handed to the supervisor (`crate::fleet`) as one [`Snapshot`], which turns changes
//! into sources: a new rank is a new source, a rank that is gone has *left*, one that comes back
//! resumes as the same source.
//!
//! A backend that cannot be read keeps its last fleet (an unreachable store says nothing about
//! the relays) and is retried with backoff; its error is logged once, counted and shown, and
//! cleared when a read succeeds again. Nothing here stops the relay.
//!
//! Polling, not watching: one range read per prefix is a few hundred bytes per relay, it
//! needs no long-lived stream per backend, and a 500 ms interval keeps a new relay visible
//! well within 2 s. Leases (etcd) and the file backend's TTL decide when a key is gone; kvscope
//! only reads.

pub mod etcd;
pub mod file;
pub mod records;
pub mod register;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use crate::http_client::Request;
pub use records::{EngineEndpoint, Fleet, Relay, Transport, WorkerRank};

/// One `--discover` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiscoverUrl {
    /// Dynamo's etcd backend: `etcd://HOST:PORT[,HOST:PORT…]`.
    Etcd { endpoints: Vec<String> },
    /// Dynamo's file backend: `dynamo-file:DIR` (the runtime's `DYN_FILE_KV`).
    DynamoFile { dir: PathBuf },
    /// A standalone indexer's `GET /workers`: `dynamo-indexer:http://HOST:PORT`.
    DynamoIndexer { authority: String },
}

impl DiscoverUrl {
    /// Parses one `--discover` value; the error shows the forms it takes.
    pub fn parse(url: &str) -> Result<DiscoverUrl, String> {
        const FORMS: &str = "etcd://HOST:PORT[,HOST:PORT…], dynamo-file:DIR or dynamo-indexer:http://HOST:PORT";
        if let Some(rest) = url.strip_prefix("etcd://") {
            let endpoints: Vec<String> = rest.trim_end_matches('/').split(',').map(|e| e.trim().to_owned()).collect();
            if let Some(bad) = endpoints.iter().find(|e| e.is_empty() || e.contains('/') || !e.contains(':')) {
                return Err(format!("--discover {url:?}: {bad:?} is not HOST:PORT; expected {FORMS}"));
            }
            return Ok(DiscoverUrl::Etcd { endpoints });
        }
        if let Some(dir) = url.strip_prefix("dynamo-file:") {
            if dir.is_empty() {
                return Err(format!("--discover {url:?}: name the directory Dynamo's processes use as DYN_FILE_KV"));
            }
            return Ok(DiscoverUrl::DynamoFile { dir: PathBuf::from(dir) });
        }
        if let Some(base) = url.strip_prefix("dynamo-indexer:") {
            let authority = base.strip_prefix("http://").map(|a| a.trim_end_matches('/'));
            return match authority {
                Some(a) if !a.is_empty() && !a.contains('/') && a.contains(':') => {
                    Ok(DiscoverUrl::DynamoIndexer { authority: a.to_owned() })
                }
                _ => Err(format!(
                    "--discover {url:?}: expected dynamo-indexer:http://HOST:PORT (the indexer's plain-HTTP base URL, no path)"
                )),
            };
        }
        Err(format!("--discover {url:?}: unknown kind of discovery; expected {FORMS}"))
    }

    /// As given, for logs, labels and the page (it holds no secrets: etcd's credentials come
    /// from the environment).
    pub fn label(&self) -> String {
        match self {
            DiscoverUrl::Etcd { endpoints } => format!("etcd://{}", endpoints.join(",")),
            DiscoverUrl::DynamoFile { dir } => format!("dynamo-file:{}", dir.display()),
            DiscoverUrl::DynamoIndexer { authority } => format!("dynamo-indexer:http://{authority}"),
        }
    }
}

/// How the backends are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoverOptions {
    pub interval: Duration,
    /// Each read's bound in time.
    pub timeout: Duration,
    /// Each read's bound in bytes.
    pub max_bytes: usize,
    /// The longest wait between tries of a backend that keeps failing.
    pub max_backoff: Duration,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(2),
            max_bytes: 16 << 20,
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// One backend's state, for the fleet bar and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendStatus {
    pub url: String,
    /// The last read's error, with what to do; `None` when it succeeded.
    pub error: Option<String>,
    /// Reads that failed since the start.
    pub failures: u64,
    /// Records that could not be read in the last successful read.
    pub bad_records: Vec<records::RecordError>,
}

/// What every backend holds now, merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub fleet: Fleet,
    pub backends: Vec<BackendStatus>,
    /// Becomes true after every backend was read once (or failed once): before that, nothing is
    /// marked as left.
    pub complete: bool,
}

/// A backend, opened.
enum Backend {
    Etcd(etcd::Client),
    File(file::Store),
    Indexer { authority: String },
}

impl Backend {
    fn open(url: &DiscoverUrl) -> Backend {
        match url {
            DiscoverUrl::Etcd { endpoints } => Backend::Etcd(etcd::Client::from_env(endpoints.clone())),
            DiscoverUrl::DynamoFile { dir } => Backend::File(file::Store::new(dir.clone())),
            DiscoverUrl::DynamoIndexer { authority } => Backend::Indexer { authority: authority.clone() },
        }
    }

    async fn read(&mut self, opts: DiscoverOptions) -> Result<(Fleet, Vec<records::RecordError>), String> {
        match self {
            Backend::Etcd(client) => {
                let mut pairs = Vec::new();
                for prefix in records::PREFIXES {
                    pairs.extend(client.range_prefix(prefix, opts).await?);
                }
                Ok(records::read_store(pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice()))))
            }
            Backend::File(store) => {
                let store = store.clone();
                let pairs = tokio::task::spawn_blocking(move || store.read(opts.max_bytes))
                    .await
                    .map_err(|e| format!("reading the directory failed: {e}"))??;
                Ok(records::read_store(pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice()))))
            }
            Backend::Indexer { authority } => {
                let body = Request::get(authority, "/workers").send(opts.timeout, opts.max_bytes).await.map_err(|e| e.to_string())?;
                Ok((records::read_indexer_workers(&body)?, Vec::new()))
            }
        }
    }
}

/// Reads every backend until `stop`, publishing each merged snapshot that differs from the last.
pub async fn run(urls: Vec<DiscoverUrl>, opts: DiscoverOptions, out: watch::Sender<Snapshot>, mut stop: watch::Receiver<bool>) {
    struct State {
        backend: Backend,
        last: Option<Fleet>,
        status: BackendStatus,
        /// Consecutive failures, for the backoff.
        failing: u32,
        next_try: tokio::time::Instant,
    }
    let now = tokio::time::Instant::now();
    let mut states: Vec<State> = urls
        .iter()
        .map(|url| State {
            backend: Backend::open(url),
            last: None,
            status: BackendStatus { url: url.label(), error: None, failures: 0, bad_records: Vec::new() },
            failing: 0,
            next_try: now,
        })
        .collect();
    let mut tick = tokio::time::interval(opts.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        for s in &mut states {
            let now = tokio::time::Instant::now();
            if now < s.next_try {
                continue;
            }
            let read = tokio::select! {
                _ = stop.changed() => return,
                r = s.backend.read(opts) => r,
            };
            match read {
                Ok((fleet, bad)) => {
                    if s.failing > 0 {
                        tracing::info!("discovery: {} is readable again", s.status.url);
                    }
                    for e in bad.iter().filter(|e| !s.status.bad_records.contains(e)) {
                        tracing::warn!("discovery: {}: skipped a record: {e}", s.status.url);
                    }
                    s.failing = 0;
                    s.status.error = None;
                    s.status.bad_records = bad;
                    s.last = Some(fleet);
                    s.next_try = now;
                }
                Err(e) => {
                    let backoff = opts.interval.saturating_mul(1 << s.failing.min(6)).min(opts.max_backoff);
                    let text =
                        format!("{e} (next try in {:.1} s; backing off to {:.0} s)", backoff.as_secs_f64(), opts.max_backoff.as_secs_f64());
                    if s.failing == 0 {
                        tracing::warn!("discovery: {}: {text}", s.status.url);
                    }
                    s.failing += 1;
                    s.status.failures += 1;
                    s.status.error = Some(text);
                    s.next_try = now + backoff;
                }
            }
        }
        let mut fleet = Fleet::default();
        for f in states.iter().filter_map(|s| s.last.as_ref()) {
            fleet.merge(f.clone());
        }
        let complete = states.iter().all(|s| s.last.is_some() || s.failing > 0);
        let snapshot = Snapshot { fleet, backends: states.iter().map(|s| s.status.clone()).collect(), complete };
        out.send_if_modified(|current| {
            let changed = *current != snapshot;
            if changed {
                *current = snapshot;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_forms_they_take() {
        assert_eq!(
            DiscoverUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379").unwrap(),
            DiscoverUrl::Etcd { endpoints: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()] }
        );
        assert_eq!(DiscoverUrl::parse("dynamo-file:/tmp/kv").unwrap(), DiscoverUrl::DynamoFile { dir: "/tmp/kv".into() });
        assert_eq!(
            DiscoverUrl::parse("dynamo-indexer:http://127.0.0.1:8090/").unwrap(),
            DiscoverUrl::DynamoIndexer { authority: "127.0.0.1:8090".into() }
        );
        assert!(DiscoverUrl::parse("etcd://host").unwrap_err().contains("\"host\" is not HOST:PORT"));
        assert!(DiscoverUrl::parse("k8s://x").unwrap_err().contains("unknown kind of discovery"));
        assert!(DiscoverUrl::parse("dynamo-indexer:127.0.0.1:1").unwrap_err().contains("dynamo-indexer:http://HOST:PORT"));
        assert_eq!(DiscoverUrl::parse("etcd://a:1").unwrap().label(), "etcd://a:1");
    }
}
