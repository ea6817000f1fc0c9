//! The flags of every subcommand (clap derive, every flag also readable from `KVSCOPE_*`), their
//! value parsers, and the checks clap cannot express.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kvscope_normalize::Policy;

use crate::http::HttpConfig;
use crate::plane::{PlaneSource, parse_planes};
use crate::sources::{Source, parse_sources};
use crate::stream::StreamOptions;

pub(crate) fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse::<Policy>().map_err(|e| e.to_string())
}

/// `64MiB`, `512KiB`, `1GB`, `1048576`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("{s:?} is not a size; write e.g. 64MiB, 512KiB or 1048576"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} in {s:?}; use KiB, MiB, GiB (or KB, MB, GB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}; write e.g. 30s, 5m or 1h30m"))
}

/// A playback speed: a factor, or `None` for as fast as possible.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speed(pub Option<f64>);

/// `max` or a positive factor.
pub fn parse_speed(s: &str) -> Result<Speed, String> {
    if s == "max" {
        return Ok(Speed(None));
    }
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(Speed(Some(x))),
        _ => Err(format!("--speed {s:?}: write a positive factor (1 = real time, 10 = ten times faster) or max")),
    }
}

/// Where engines are.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// Engine PUB endpoints, the Dynamo indexer's form: "id[:dp]=tcp://host:5557,...".
    #[arg(long, env = "KVSCOPE_WORKERS", value_name = "SPEC")]
    pub workers: Option<String>,
    /// Replay ROUTER endpoints in the same form: "id[:dp]=tcp://host:5558,...". Without one, a
    /// gap on that source cannot be recovered and is reported as lost.
    #[arg(long = "replay", env = "KVSCOPE_REPLAY", value_name = "SPEC")]
    pub replay: Option<String>,
    /// Expand each entry without a rank into ranks 0..N-1 on consecutive ports (base + rank), for
    /// both --workers and --replay.
    #[arg(long, env = "KVSCOPE_DP_SIZE", default_value_t = 1, value_name = "N")]
    pub dp_size: u32,
    /// Find the fleet in Dynamo's discovery store, live: etcd://HOST:PORT[,HOST:PORT…] (Dynamo's
    /// etcd backend; ETCD_AUTH_USERNAME and ETCD_AUTH_PASSWORD as for Dynamo), dynamo-file:DIR
    /// (its file backend, DYN_FILE_KV), or dynamo-indexer:http://HOST:PORT (a standalone
    /// indexer's /workers). Every relay registered there becomes an event-plane source, filed
    /// under its (worker_id, dp_rank); one that leaves is marked left and resumes when it comes
    /// back. Repeatable, and combines with --workers and --event-plane.
    #[arg(long, env = "KVSCOPE_DISCOVER", value_name = "URL")]
    pub discover: Vec<String>,
    /// How often each discovery store is read.
    #[arg(long, env = "KVSCOPE_DISCOVER_INTERVAL", default_value = "500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub discover_interval: Duration,
    /// A read that takes longer fails (shown and retried with backoff).
    #[arg(long, env = "KVSCOPE_DISCOVER_TIMEOUT", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub discover_timeout: Duration,
    /// A store holding more record bytes than this fails to read (shown and retried).
    #[arg(long, env = "KVSCOPE_DISCOVER_MAX_BYTES", default_value = "16MiB", value_parser = parse_size, value_name = "SIZE")]
    pub discover_max_bytes: usize,
    /// Read only shard i of n: the workers whose worker id hashes to i (xxh3 of the id as text,
    /// mod n), their engines and relays together, so n servers split one fleet with no overlap
    /// and no gap. On a shared NATS plane the other shards' RouterEvents are counted as such
    /// (kvscope_router_other_shard_events_total), not as unknown workers.
    #[arg(long, env = "KVSCOPE_SHARD", default_value = "0/1", value_parser = kvscope_router::Shard::parse, value_name = "I/N")]
    pub shard: kvscope_router::Shard,
}

impl SourceArgs {
    pub(crate) fn sources(&self) -> Result<Vec<Source>, String> {
        match &self.workers {
            Some(workers) => parse_sources(workers, self.replay.as_deref(), self.dp_size).map_err(|e| e.to_string()),
            None if self.replay.is_some() => Err("--replay names replay endpoints of --workers; give --workers too".to_owned()),
            None => Ok(Vec::new()),
        }
    }

    pub(crate) fn discover(&self) -> Result<Vec<crate::discover::DiscoverUrl>, String> {
        self.discover.iter().map(|u| crate::discover::DiscoverUrl::parse(u)).collect()
    }

    pub(crate) fn discover_options(&self) -> crate::discover::DiscoverOptions {
        crate::discover::DiscoverOptions {
            interval: self.discover_interval,
            timeout: self.discover_timeout,
            max_bytes: self.discover_max_bytes,
            ..crate::discover::DiscoverOptions::default()
        }
    }
}

/// The sources a live command reads, checked together: at least one kind is given.
pub(crate) struct LiveSources {
    pub sources: Vec<Source>,
    pub planes: Vec<PlaneSource>,
    pub discover: Vec<crate::discover::DiscoverUrl>,
}

impl LiveSources {
    pub(crate) fn parse(sources: &SourceArgs, planes: &PlaneArgs) -> Result<LiveSources, String> {
        let mut engines = sources.sources()?;
        engines.retain(|s| sources.shard.takes(&s.worker_id));
        let live = LiveSources { sources: engines, planes: planes.planes()?, discover: sources.discover()? };
        if live.sources.is_empty()
            && sources.workers.is_some()
            && !sources.shard.is_all()
            && live.planes.is_empty()
            && live.discover.is_empty()
        {
            return Err(format!("--shard {}: no worker of --workers falls in this shard; nothing to read", sources.shard));
        }
        if live.sources.is_empty() && live.planes.is_empty() && live.discover.is_empty() {
            return Err(
                "nothing to read: give --workers (engine endpoints), --event-plane or --discover (Dynamo's discovery store)".to_owned()
            );
        }
        Ok(live)
    }
}

/// Dynamo's event plane: what the router receives from each worker's relay, read-only.
#[derive(Debug, Args)]
pub struct PlaneArgs {
    /// Also read Dynamo's event plane: nats://HOST:PORT (a NATS core subscription, never
    /// JetStream; credentials from NATS_AUTH_* as for Dynamo's workers) or zmq://HOST:PORT (one
    /// publisher of Dynamo's ZMQ plane). Repeatable; each URL is one source.
    #[arg(long = "event-plane", env = "KVSCOPE_EVENT_PLANE", value_delimiter = ',', value_name = "URL")]
    pub event_plane: Vec<String>,
    /// The NATS subject to subscribe to (default namespace.>, every namespace); only subjects
    /// ending in .kv-events are taken.
    #[arg(long, env = "KVSCOPE_EVENT_PLANE_SUBJECT", value_name = "SUBJECT")]
    pub event_plane_subject: Option<String>,
    #[command(flatten)]
    pub relay: RelayPolicyArgs,
}

/// `--relay-policy`, one definition for `serve`, `record`, `demo` and `check`.
#[derive(Debug, Args)]
pub struct RelayPolicyArgs {
    /// With event-plane sources: the policy Dynamo's relays (KvEventPublisher) are predicted to
    /// run when reconciling what each engine sent with what the router received (/metrics'
    /// kvscope_router_*, the page's router rows, check's router counts); dynamo-1.6.1 is Dynamo
    /// 1.6.1's relay. Engine sources take part when their worker id is Dynamo's decimal
    /// worker_id, at their dp_rank, with --block-size as the relay's kv_block_size. Independent
    /// of the policies that judge the indexer.
    #[arg(long, env = "KVSCOPE_RELAY_POLICY", default_value = crate::router::DEFAULT_RELAY_POLICY, value_parser = parse_policy, value_name = "NAME")]
    pub relay_policy: Policy,
}

impl PlaneArgs {
    pub(crate) fn planes(&self) -> Result<Vec<PlaneSource>, String> {
        parse_planes(&self.event_plane, self.event_plane_subject.as_deref())
    }
}

/// A real router index to read, Dynamo's standalone indexer (serve, record).
#[derive(Debug, Args)]
pub struct RouterIndexArgs {
    /// Also read this real router index, a Dynamo standalone indexer (`python -m dynamo.indexer
    /// --port P`): http://HOST:PORT. Its /workers and /dump are read every
    /// --router-index-interval, recorded into the capture (for `check`), and its blocks compared
    /// with the model of Dynamo 1.6.1's index (/metrics' kvscope_router_index_*). Repeatable.
    #[arg(long = "router-index", env = "KVSCOPE_ROUTER_INDEX", value_delimiter = ',', value_name = "URL")]
    pub router_index: Vec<String>,
    /// How often to read it.
    #[arg(long, env = "KVSCOPE_ROUTER_INDEX_INTERVAL", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub router_index_interval: Duration,
    /// A read that takes longer is a counted error (`timeout`).
    #[arg(long, env = "KVSCOPE_ROUTER_INDEX_TIMEOUT", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub router_index_timeout: Duration,
    /// A /dump larger than this is a counted error (`too_large`), not read on.
    #[arg(long, env = "KVSCOPE_ROUTER_INDEX_MAX_BYTES", default_value = "64MiB", value_parser = parse_size, value_name = "SIZE")]
    pub router_index_max_bytes: usize,
}

impl RouterIndexArgs {
    pub(crate) fn sources(&self) -> Result<Vec<crate::router_index::RouterIndexSource>, String> {
        self.router_index.iter().map(|u| crate::router_index::RouterIndexSource::parse(u)).collect()
    }

    pub(crate) fn poll(&self) -> crate::router_index::PollOptions {
        crate::router_index::PollOptions {
            interval: self.router_index_interval,
            timeout: self.router_index_timeout,
            max_bytes: self.router_index_max_bytes,
        }
    }
}

/// How each source's stream is taken (serve, demo, record, replay and check alike, so a capture
/// is judged as the live server judged it).
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Refuse payloads larger than this before decoding, as a counted frame error (real batches
    /// are a few hundred KiB; the bound stops one hostile frame from taking the memory).
    #[arg(long, env = "KVSCOPE_MAX_FRAME_BYTES", default_value = "16MiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_frame_bytes: usize,
    /// Take a source's first frame as is. By default, a source with a replay endpoint whose first
    /// frame has seq N > 0 asks it for 0..N-1 (what the engine still buffers from before we joined).
    #[arg(long, env = "KVSCOPE_NO_LATE_JOIN_REPLAY")]
    pub no_late_join_replay: bool,
}

impl StreamArgs {
    pub(crate) fn options(&self) -> StreamOptions {
        StreamOptions { max_frame_bytes: self.max_frame_bytes, late_join_replay: !self.no_late_join_replay }
    }
}

/// How events are classified.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// The candidate normalizer (policy B), compared with --policy-a.
    #[arg(long, env = "KVSCOPE_POLICY", default_value = "fixed", value_parser = parse_policy, value_name = "NAME")]
    pub policy: Policy,
    /// The baseline normalizer (policy A).
    #[arg(long, env = "KVSCOPE_POLICY_A", default_value = "legacy", value_parser = parse_policy, value_name = "NAME")]
    pub policy_a: Policy,
    /// Nodes each modelled router index keeps (/metrics' kvscope_index_*), and blocks the
    /// engines' truth beside it holds, before the model stops growing (kvscope_index_refused).
    #[arg(long, env = "KVSCOPE_INDEX_MAX_NODES", default_value_t = kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS, value_name = "N")]
    pub index_max_nodes: usize,
    /// Bytes of engine batches and envelopes queued for the router task (the index model and
    /// the reconciliation) while it is behind; past it they are dropped and counted
    /// (kvscope_router_dropped_inputs_total), and its figures undercount.
    #[arg(long, env = "KVSCOPE_ROUTER_QUEUE_BYTES", default_value = "512MiB", value_parser = parse_size, value_name = "SIZE")]
    pub router_queue_bytes: usize,
}

/// HTTP, relay bounds and safety.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to serve on. Beyond loopback it requires --token.
    #[arg(long, env = "KVSCOPE_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Require this token on /ws and /metrics (Authorization: Bearer TOKEN or ?token=TOKEN).
    #[arg(long, env = "KVSCOPE_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Also accept WebSocket upgrades from this origin (scheme://host[:port]); repeatable.
    #[arg(long = "allow-origin", env = "KVSCOPE_ALLOW_ORIGIN", value_delimiter = ',', value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// History a new browser receives first, bounded in bytes (e.g. 64MiB).
    #[arg(long, env = "KVSCOPE_HISTORY_BYTES", default_value = "64MiB", value_parser = parse_size, value_name = "SIZE")]
    pub history_bytes: usize,
    /// Per-client queue bound; a client this far behind loses frames and gets a lag notice. The
    /// default holds about 6 s of a 64-engine fleet at 300 batches/s: a page that is loading (wasm
    /// compiling, the history catching up) on a busy machine falls that far behind.
    #[arg(long, env = "KVSCOPE_CLIENT_QUEUE_BYTES", default_value = "64MiB", value_parser = parse_size, value_name = "SIZE")]
    pub client_queue_bytes: usize,
    /// Largest WebSocket message a client may send.
    #[arg(long, env = "KVSCOPE_MAX_WS_MESSAGE_BYTES", default_value = "64KiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_ws_message_bytes: usize,
    /// Show a connected source as stale after this long without a frame.
    #[arg(long, env = "KVSCOPE_STALE_AFTER", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub stale_after: Duration,
    /// Gather live frames for a browser this long into one WebSocket message (the latency it
    /// adds); 0s sends only what is already queued, at the cost of more messages for the page.
    #[arg(long, env = "KVSCOPE_WS_BATCH_WINDOW", default_value = "10ms", value_parser = parse_duration, value_name = "DURATION")]
    pub ws_batch_window: Duration,
}

impl ServerArgs {
    /// Refuses to listen beyond loopback without a token.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "--listen {} is beyond loopback: anyone who can reach it would read every engine's stream. \
                 Pass --token SECRET (or set KVSCOPE_TOKEN) so that /ws and /metrics require it, or listen on 127.0.0.1",
                self.listen
            ));
        }
        Ok(())
    }

    pub(crate) fn http(&self) -> HttpConfig {
        HttpConfig {
            token: self.token.clone().filter(|t| !t.is_empty()),
            allow_origins: self.allow_origin.clone(),
            max_ws_message_bytes: self.max_ws_message_bytes,
            loopback_listener: self.listen.ip().is_loopback(),
            batch_window: self.ws_batch_window,
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sources: SourceArgs,
    #[command(flatten)]
    pub plane: PlaneArgs,
    #[command(flatten)]
    pub router_index: RouterIndexArgs,
    /// The indexer's --block-size: Device stores at another size are fatal (vLLM's default is 16).
    #[arg(long, env = "KVSCOPE_BLOCK_SIZE", default_value_t = 16, value_name = "N")]
    pub block_size: u32,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Also write every frame to this .kvcap capture.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// kimi-k3 (the incident), sglang-tiers, lmcache-relay, or fleet (64 workers, a few of them
    /// odd: offload at another block size, restarting, losing frames, an older release).
    #[arg(long, default_value = "kimi-k3", value_name = "NAME")]
    pub scenario: String,
    /// Engine release whose byte layout to publish: vllm-0.33.0, vllm-0.23.0, sglang-0.5.23
    /// (default: the scenario's own).
    #[arg(long, value_name = "RELEASE")]
    pub engine_release: Option<String>,
    /// Simulated workers (default: the scenario's; benchmarks use 16 and 64).
    #[arg(long = "workers", value_name = "N")]
    pub num_workers: Option<u32>,
    /// Engines per worker, one per data-parallel rank, each its own source `worker:rank`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub dp_ranks: u32,
    /// Batches per second per engine, on average (each engine ticks at its own rate within
    /// +/-20% and phase); 0 publishes as fast as possible.
    #[arg(long, default_value_t = 10.0, value_name = "PER_SECOND")]
    pub rate: f64,
    /// Stop each worker after this many batches (default: run until stopped).
    #[arg(long, value_name = "N")]
    pub batches: Option<u64>,
    /// Dynamo's event plane for the simulated relays (each worker's relay publishes what Dynamo
    /// 1.6.1's KvEventPublisher would): by default an embedded ZMQ-plane PUB per worker on
    /// loopback; nats://HOST:PORT publishes onto that NATS server instead, on
    /// namespace.demo.component.backend.endpoint.generate.kv-events. kvscope subscribes to it
    /// either way and reconciles it with the engines (/metrics' kvscope_router_*).
    #[arg(long = "event-plane", value_name = "URL", conflicts_with = "no_event_plane")]
    pub event_plane: Option<String>,
    /// Do not simulate Dynamo's relay (engines only).
    #[arg(long)]
    pub no_event_plane: bool,
    /// Also register each simulated relay in Dynamo's discovery store, as Dynamo 1.6.1's runtime
    /// does (etcd://HOST:PORT or dynamo-file:DIR), so that `kvscope serve --discover` finds this
    /// fleet; removed when the demo stops. Needs the embedded ZMQ plane (no --event-plane).
    #[arg(long, value_name = "URL", conflicts_with_all = ["no_event_plane", "event_plane"])]
    pub register: Option<String>,
    /// Also find sources in Dynamo's discovery store, beside the simulated fleet (as `serve
    /// --discover`); repeatable.
    #[arg(long, value_name = "URL")]
    pub discover: Vec<String>,
    /// With --register: how long to wait after registering before publishing, so that servers
    /// that discover the fleet subscribe first (a publisher drops what it sends before that).
    #[arg(long, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub register_grace: Duration,
    // What the demo's server predicts its simulated relays (Dynamo 1.6.1's) publish: another
    // policy shows what a relay rollout would change.
    #[command(flatten)]
    pub relay: RelayPolicyArgs,
    /// Block size to classify at (default: the scenario's main block size, 1536 for kimi-k3).
    #[arg(long, value_name = "N")]
    pub block_size: Option<u32>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub stream: StreamArgs,
    /// Also write every frame to this .kvcap capture.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub sources: SourceArgs,
    #[command(flatten)]
    pub plane: PlaneArgs,
    #[command(flatten)]
    pub router_index: RouterIndexArgs,
    /// The capture to write (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub stream: StreamArgs,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The capture to serve.
    pub file: PathBuf,
    /// Playback speed: 1 is real time, 10 ten times faster, max as fast as possible.
    #[arg(long, default_value = "1", value_parser = parse_speed, value_name = "X|max")]
    pub speed: Speed,
    /// Block size to classify at.
    #[arg(long, env = "KVSCOPE_BLOCK_SIZE", default_value_t = 16, value_name = "N")]
    pub block_size: u32,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub stream: StreamArgs,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The capture to publish.
    pub file: PathBuf,
    /// PUB endpoint of the first source; source i binds port + i (port 0: free ports).
    #[arg(long, value_name = "tcp://ADDR")]
    pub bind: String,
    /// Replay ROUTER endpoint of the first source; source i binds port + i (default: free ports).
    #[arg(long, value_name = "tcp://ADDR")]
    pub replay_bind: Option<String>,
    /// Playback speed: 1 is real time, max as fast as the subscribers take it.
    #[arg(long, default_value = "1", value_parser = parse_speed, value_name = "X|max")]
    pub speed: Speed,
    /// Wait for this many subscribers on each endpoint before publishing (0: do not wait).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub wait_subscribers: usize,
    /// Publish only this source (worker:rank).
    #[arg(long, value_name = "KEY")]
    pub source: Option<String>,
    /// Replay reply framing: 3 = [topic, seq, payload] (vLLM 0.26 on, SGLang), 2 = [seq, payload].
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=3), value_name = "2|3")]
    pub replay_framing: u8,
    /// Exit when everything is published instead of serving replay requests until Ctrl-C.
    #[arg(long)]
    pub exit_when_done: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The capture to check.
    pub file: PathBuf,
    /// The indexer's --block-size; with event-plane sources, also the relays' kv_block_size.
    #[arg(long, env = "KVSCOPE_BLOCK_SIZE", value_name = "N")]
    pub block_size: u32,
    /// The normalizer policy of the indexer being checked (fatal verdicts, exit 3).
    #[arg(long, env = "KVSCOPE_POLICY", default_value = "fixed", value_parser = parse_policy, value_name = "NAME")]
    pub policy: Policy,
    #[command(flatten)]
    pub relay: RelayPolicyArgs,
    /// Exit 4 when the reconciliation with the event plane shows anything but matches (missing,
    /// unexpected or mismatched RouterEvents, unknown workers, undecodable plane messages). A
    /// fatal verdict still exits 3 first.
    #[arg(long)]
    pub fail_on_router_mismatch: bool,
    /// Exit 5 when the router's index differs from what the engines hold: blocks the router
    /// cannot score, or blocks it scores that the engines evicted (the modelled index under
    /// --policy, and any recorded --router-index dump). A fatal verdict still exits 3 first,
    /// a router mismatch (with --fail-on-router-mismatch) 4.
    #[arg(long)]
    pub fail_on_index_divergence: bool,
    /// Nodes each modelled index keeps, and blocks the engines' truth beside it holds, before
    /// the model stops growing (the report counts what it kept out as refused_blocks).
    #[arg(long, env = "KVSCOPE_INDEX_MAX_NODES", default_value_t = kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS, value_name = "N")]
    pub index_max_nodes: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub stream: StreamArgs,
}

#[derive(Debug, Args)]
pub struct RulesArgs {
    /// The policy whose rules to print.
    #[arg(long, env = "KVSCOPE_POLICY", default_value = "fixed", value_parser = parse_policy, value_name = "NAME")]
    pub policy: Policy,
}
