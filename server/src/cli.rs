//! The command line: flags (clap derive, every flag also readable from `KVSCOPE_*`), checks that
//! clap cannot express, exit codes, and one function per subcommand.
//!
//! Exit status: 0 fine, 1 a runtime failure (a port in use, a file that cannot be read), 2 a
//! usage error (clap's own, and ours: a bad `--workers`, listening beyond loopback without a
//! token), 3 `check` found a fatal verdict.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kvscope_normalize::Policy;
use kvscope_protocol as proto;

use crate::app::{App, AppConfig, Feed};
use crate::demo::{Fleet, FleetOptions, Scenario, payload::Release};
use crate::http::HttpConfig;
use crate::intake::IntakeOptions;
use crate::stream::StreamOptions;
use crate::sources::{Source, parse_sources};

/// Exit status for a usage error.
pub const EXIT_USAGE: u8 = 2;
/// Exit status of `check` when a verdict is fatal.
pub const EXIT_FATAL: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "kvscope",
    version,
    about = "See what LLM engines' KV-cache event streams contain and what a KV router's normalizer does with each event.",
    after_help = "Exit status: 0 fine, 1 runtime failure, 2 usage error, 3 `check` found a fatal verdict.\n\
                  Logs go to stderr; set KVSCOPE_LOG (e.g. KVSCOPE_LOG=debug) for more."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Subscribe to engines and serve the dashboard, /ws and /metrics.
    Serve(ServeArgs),
    /// Start a simulated fleet publishing real ZMQ on loopback, and serve it.
    Demo(DemoArgs),
    /// Write frames exactly as received to a .kvcap capture.
    Record(RecordArgs),
    /// Serve a capture as if it were live.
    Replay(ReplayArgs),
    /// Re-publish a capture as a ZMQ PUB with a replay ROUTER, to test any indexer against it.
    Publish(PublishArgs),
    /// Run the normalizer over a capture; exit 3 if any verdict is fatal.
    Check(CheckArgs),
    /// Print the rules a policy runs, in evaluation order: step, rule, what it checks and decides.
    Rules(RulesArgs),
}

fn parse_policy(s: &str) -> Result<Policy, String> {
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

fn parse_duration(s: &str) -> Result<Duration, String> {
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
    pub workers: String,
    /// Replay ROUTER endpoints in the same form: "id[:dp]=tcp://host:5558,...". Without one, a
    /// gap on that source cannot be recovered and is reported as lost.
    #[arg(long = "replay", env = "KVSCOPE_REPLAY", value_name = "SPEC")]
    pub replay: Option<String>,
    /// Expand each entry without a rank into ranks 0..N-1 on consecutive ports (base + rank), for
    /// both --workers and --replay.
    #[arg(long, env = "KVSCOPE_DP_SIZE", default_value_t = 1, value_name = "N")]
    pub dp_size: u32,
}

impl SourceArgs {
    fn sources(&self) -> Result<Vec<Source>, String> {
        parse_sources(&self.workers, self.replay.as_deref(), self.dp_size).map_err(|e| e.to_string())
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
    fn options(&self) -> StreamOptions {
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
    /// Per-client queue bound; a client this far behind loses frames and gets a lag notice.
    #[arg(long, env = "KVSCOPE_CLIENT_QUEUE_BYTES", default_value = "16MiB", value_parser = parse_size, value_name = "SIZE")]
    pub client_queue_bytes: usize,
    /// Largest WebSocket message a client may send.
    #[arg(long, env = "KVSCOPE_MAX_WS_MESSAGE_BYTES", default_value = "64KiB", value_parser = parse_size, value_name = "SIZE")]
    pub max_ws_message_bytes: usize,
    /// Show a connected source as stale after this long without a frame.
    #[arg(long, env = "KVSCOPE_STALE_AFTER", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub stale_after: Duration,
}

impl ServerArgs {
    /// Refuses to listen beyond loopback without a token.
    fn check(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "--listen {} is beyond loopback: anyone who can reach it would read every engine's stream. \
                 Pass --token SECRET (or set KVSCOPE_TOKEN) so that /ws and /metrics require it, or listen on 127.0.0.1",
                self.listen
            ));
        }
        Ok(())
    }

    fn http(&self) -> HttpConfig {
        HttpConfig {
            token: self.token.clone().filter(|t| !t.is_empty()),
            allow_origins: self.allow_origin.clone(),
            max_ws_message_bytes: self.max_ws_message_bytes,
            loopback_listener: self.listen.ip().is_loopback(),
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sources: SourceArgs,
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
    /// kimi-k3 (the incident), sglang-tiers or lmcache-relay.
    #[arg(long, default_value = "kimi-k3", value_name = "NAME")]
    pub scenario: String,
    /// Engine release whose byte layout to publish: vllm-0.33.0, vllm-0.23.0, sglang-0.5.23
    /// (default: the scenario's own).
    #[arg(long, value_name = "RELEASE")]
    pub engine_release: Option<String>,
    /// Simulated workers (default: the scenario's; benchmarks use 16 and 64).
    #[arg(long = "workers", value_name = "N")]
    pub num_workers: Option<u32>,
    /// Batches per second per worker; 0 publishes as fast as possible.
    #[arg(long, default_value_t = 10.0, value_name = "PER_SECOND")]
    pub rate: f64,
    /// Stop each worker after this many batches (default: run until stopped).
    #[arg(long, value_name = "N")]
    pub batches: Option<u64>,
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
    /// The indexer's --block-size.
    #[arg(long, env = "KVSCOPE_BLOCK_SIZE", value_name = "N")]
    pub block_size: u32,
    /// The normalizer policy to check under.
    #[arg(long, env = "KVSCOPE_POLICY", default_value = "fixed", value_parser = parse_policy, value_name = "NAME")]
    pub policy: Policy,
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

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KVSCOPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},zeromq=warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(EXIT_USAGE)
}

fn failure(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(cli.command, Command::Check(_) | Command::Rules(_));
    init_logging(if quiet { "warn" } else { "info" });
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return failure(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(run(cli.command))
}

async fn run(command: Command) -> ExitCode {
    match command {
        Command::Serve(args) => serve(args).await,
        Command::Demo(args) => demo(args).await,
        Command::Record(args) => record(args).await,
        Command::Replay(args) => replay(args).await,
        Command::Publish(args) => publish(args).await,
        Command::Check(args) => check(args),
        Command::Rules(args) => rules(args),
    }
}

fn base_config(sources: Vec<Source>, server: &ServerArgs, stream: &StreamArgs, block_size: u32, policy: &PolicyArgs) -> AppConfig {
    AppConfig {
        sources,
        mode: proto::ServerMode::Live,
        mode_detail: String::new(),
        block_size,
        policy_a: policy.policy_a,
        policy_b: policy.policy,
        listen: Some(server.listen),
        http: server.http(),
        history_bytes: server.history_bytes,
        client_queue_bytes: server.client_queue_bytes,
        record: None,
        intake: IntakeOptions { stale_after: server.stale_after, stream: stream.options(), ..IntakeOptions::default() },
    }
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Prints where the dashboard is; tests read the `listening on` line.
fn announce(app: &App, server: &ServerArgs, what: &str) {
    let Some(addr) = app.addr else {
        let _ = writeln!(std::io::stdout().lock(), "kvscope {what}: not listening on any address");
        return;
    };
    let token = server.token.as_deref().filter(|t| !t.is_empty()).map(|t| format!("?token={t}")).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "kvscope {what}");
    let _ = writeln!(out, "listening on http://{addr}/{token}");
    if !crate::assets::dashboard_built() {
        let _ = writeln!(out, "note: the dashboard is not built into this binary; run scripts/build-web.sh, then rebuild");
    }
    let _ = out.flush();
}

async fn wait_for_ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
}

async fn serve(args: ServeArgs) -> ExitCode {
    if let Err(e) = args.server.check() {
        return usage(&e);
    }
    let sources = match args.sources.sources() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let mut config = base_config(sources, &args.server, &args.stream, args.block_size, &args.policy);
    config.mode_detail = format!("{} endpoint(s)", config.sources.len());
    config.record = args.record.map(|p| (p, command_line()));
    let app = match App::start(config, Feed::Live).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    announce(&app, &args.server, &format!("serve: {} source(s)", app.hub.config().hello.sources.len()));
    wait_for_ctrl_c().await;
    stop(app).await
}

async fn stop(app: App) -> ExitCode {
    match app.stop().await {
        Ok((_, Some(w))) => {
            eprintln!("capture: {} records, {} bytes", w.records, w.bytes);
            ExitCode::SUCCESS
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => failure(&e),
    }
}

async fn demo(args: DemoArgs) -> ExitCode {
    if let Err(e) = args.server.check() {
        return usage(&e);
    }
    let scenario = match Scenario::parse(&args.scenario) {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let release = match &args.engine_release {
        None => scenario.default_release(),
        Some(name) => match Release::parse(name).filter(|r| scenario.releases().contains(r)) {
            Some(r) => r,
            None => {
                let names: Vec<&str> = scenario.releases().iter().map(|r| r.name()).collect();
                return usage(&format!(
                    "--engine-release {name:?}: scenario {} can be published as {}",
                    scenario.name(),
                    names.join(" or ")
                ));
            }
        },
    };
    let workers = args.num_workers.unwrap_or(scenario.default_workers());
    if workers == 0 {
        return usage("--workers 0: a demo fleet needs at least one worker");
    }
    if !(args.rate >= 0.0 && args.rate.is_finite()) {
        return usage(&format!("--rate {}: write batches per second per worker, or 0 for as fast as possible", args.rate));
    }
    let fleet = match Fleet::bind(&FleetOptions { scenario, release, workers, rate: args.rate, batches: args.batches }).await {
        Ok(f) => f,
        Err(e) => return failure(&e),
    };
    let sources: Vec<Source> = fleet
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, (pub_ep, replay_ep))| Source {
            worker_id: i.to_string(),
            dp_rank: 0,
            endpoint: pub_ep.clone(),
            replay_endpoint: Some(replay_ep.clone()),
        })
        .collect();
    let block_size = args.block_size.unwrap_or(scenario.block_size());
    let mut config = base_config(sources, &args.server, &args.stream, block_size, &args.policy);
    config.mode = proto::ServerMode::Demo;
    config.mode_detail = format!("scenario {} ({}), {workers} worker(s): {}", scenario.name(), release.name(), scenario.describe());
    config.record = args.record.map(|p| (p, command_line()));
    let app = match App::start(config, Feed::Live).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    // Start publishing once every source is subscribed, so the dashboard starts near seq 0
    // (a PUB drops what it sends before a subscription arrives).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let connected = (0..workers).all(|w| {
            app.metrics.connected.get_or_create(&crate::metrics::SourceLabels { source: format!("{w}:0") }).get() == 1
        });
        if connected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fleet.start();
    announce(
        &app,
        &args.server,
        &format!(
            "demo: scenario {} ({} layout), {workers} worker(s) at {} batch/s, block size {block_size}, policies {} vs {}",
            scenario.name(),
            release.name(),
            args.rate,
            args.policy.policy_a.name,
            args.policy.policy.name
        ),
    );
    wait_for_ctrl_c().await;
    drop(fleet);
    stop(app).await
}

async fn record(args: RecordArgs) -> ExitCode {
    let sources = match args.sources.sources() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let config = AppConfig {
        sources,
        mode: proto::ServerMode::Live,
        mode_detail: String::new(),
        block_size: 16,
        policy_a: Policy::LEGACY,
        policy_b: Policy::FIXED,
        listen: None,
        http: HttpConfig { token: None, allow_origins: vec![], max_ws_message_bytes: 0, loopback_listener: true },
        history_bytes: 0,
        client_queue_bytes: 0,
        record: Some((args.out.clone(), command_line())),
        intake: IntakeOptions { stream: args.stream.options(), ..IntakeOptions::default() },
    };
    let app = match App::start(config, Feed::Live).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "recording to {}", args.out.display());
        let _ = out.flush();
    }
    match args.duration {
        Some(d) => {
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = wait_for_ctrl_c() => {}
            }
        }
        None => wait_for_ctrl_c().await,
    }
    match app.stop().await {
        Ok((summaries, written)) => {
            let mut out = std::io::stdout().lock();
            for s in summaries {
                let c = s.counters;
                let _ = writeln!(
                    out,
                    "{}: {} frames, {} frame errors, {} gaps ({} frames lost), {} restarts",
                    s.key, c.frames, c.frame_errors, c.gaps, c.lost_frames, c.restarts
                );
            }
            if let Some(w) = written {
                let _ = writeln!(out, "wrote {} records ({} bytes) to {}", w.records, w.bytes, args.out.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => failure(&e),
    }
}

async fn replay(args: ReplayArgs) -> ExitCode {
    if let Err(e) = args.server.check() {
        return usage(&e);
    }
    let header = match crate::capture::open(&args.file) {
        Ok(r) => r.header().clone(),
        Err(e) => return failure(&e),
    };
    let sources: Vec<Source> = header
        .sources
        .iter()
        .map(|s| Source {
            worker_id: s.worker_id.clone(),
            dp_rank: s.dp_rank,
            endpoint: s.endpoint.clone(),
            replay_endpoint: s.replay_endpoint.clone(),
        })
        .collect();
    let mut config = base_config(sources, &args.server, &args.stream, args.block_size, &args.policy);
    config.mode = proto::ServerMode::Replay;
    config.mode_detail = format!(
        "{} at {}",
        args.file.display(),
        args.speed.0.map_or("max speed".to_owned(), |s| format!("{s}x"))
    );
    let app = match App::start(config, Feed::File { path: args.file.clone(), speed: args.speed.0 }).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    announce(&app, &args.server, &format!("replay: {}", args.file.display()));
    wait_for_ctrl_c().await;
    stop(app).await
}

async fn publish(args: PublishArgs) -> ExitCode {
    let opts = crate::publish::PublishOptions {
        file: args.file,
        bind: args.bind,
        replay_bind: args.replay_bind,
        speed: args.speed.0,
        wait_subscribers: args.wait_subscribers,
        source: args.source,
        replay_topic: args.replay_framing == 3,
        exit_when_done: args.exit_when_done,
    };
    let mut out = std::io::stdout();
    match crate::publish::run(opts, &mut out).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.starts_with("--") => usage(&e),
        Err(e) => failure(&e),
    }
}

fn check(args: CheckArgs) -> ExitCode {
    let report = match crate::check::check(&args.file, args.block_size, args.policy, args.stream.options()) {
        Ok(r) => r,
        Err(e) => return failure(&e),
    };
    if let Some(t) = &report.truncation {
        eprintln!("warning: {t}");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        match serde_json::to_string_pretty(&report.json) {
            Ok(json) => {
                let _ = writeln!(out, "{json}");
            }
            Err(e) => return failure(&format!("check --json: {e}")),
        }
    } else {
        let _ = write!(out, "{}", report.table);
    }
    let _ = out.flush();
    if report.fatal { ExitCode::from(EXIT_FATAL) } else { ExitCode::SUCCESS }
}

fn rules(args: RulesArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", crate::rules::table(&args.policy));
    let _ = out.flush();
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sizes_and_speeds() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("2 KB").unwrap(), 2000);
        assert_eq!(parse_size("3x").unwrap_err(), "unknown size unit \"x\" in \"3x\"; use KiB, MiB, GiB (or KB, MB, GB)");
        assert_eq!(parse_speed("max").unwrap(), Speed(None));
        assert_eq!(parse_speed("2.5").unwrap(), Speed(Some(2.5)));
        assert!(parse_speed("0").is_err());
    }
}
