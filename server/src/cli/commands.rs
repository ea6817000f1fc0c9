//! One function per subcommand: each turns its flags into a running server, a recording, a
//! playback or a report, and returns the exit status.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use kvscope_normalize::Policy;
use kvscope_protocol as proto;

use super::args::*;
use super::{EXIT_FATAL, EXIT_INDEX_DIVERGENCE, EXIT_ROUTER_MISMATCH, failure, usage};
use crate::app::{App, AppConfig, Feed};
use crate::demo::relay::{DEMO_SUBJECT, DemoPlane};
use crate::demo::{Fleet, FleetOptions, Scenario, payload::Release};
use crate::http::HttpConfig;
use crate::intake::IntakeOptions;
use crate::plane::PlaneSource;
use crate::sources::Source;

fn base_config(sources: Vec<Source>, server: &ServerArgs, stream: &StreamArgs, block_size: u32, policy: &PolicyArgs) -> AppConfig {
    AppConfig {
        sources,
        planes: Vec::new(),
        mode: proto::ServerMode::Live,
        mode_detail: String::new(),
        block_size,
        policy_a: policy.policy_a,
        policy_b: policy.policy,
        index_max_nodes: policy.index_max_nodes,
        router_queue_bytes: policy.router_queue_bytes,
        relay_policy: kvscope_router::RelayConfig::DEFAULT_POLICY,
        listen: Some(server.listen),
        http: server.http(),
        history_bytes: server.history_bytes,
        client_queue_bytes: server.client_queue_bytes,
        record: None,
        intake: IntakeOptions { stale_after: server.stale_after, stream: stream.options(), ..IntakeOptions::default() },
        router_indexes: Vec::new(),
        router_index_poll: crate::router_index::PollOptions::default(),
        discover: Vec::new(),
        discover_options: crate::discover::DiscoverOptions::default(),
        shard: kvscope_router::Shard::ALL,
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

pub(super) async fn serve(args: ServeArgs) -> ExitCode {
    if let Err(e) = args.server.check() {
        return usage(&e);
    }
    let live = match LiveSources::parse(&args.sources, &args.plane) {
        Ok(l) => l,
        Err(e) => return usage(&e),
    };
    let mut config = base_config(live.sources, &args.server, &args.stream, args.block_size, &args.policy);
    config.mode_detail = match live.planes.len() {
        0 => format!("{} endpoint(s)", config.sources.len()),
        n => format!("{} endpoint(s), {n} event plane(s)", config.sources.len()),
    };
    if !live.discover.is_empty() {
        let labels: Vec<String> = live.discover.iter().map(crate::discover::DiscoverUrl::label).collect();
        config.mode_detail.push_str(&format!(", discovering from {}", labels.join(" and ")));
    }
    if !args.sources.shard.is_all() {
        config.mode_detail.push_str(&format!(", shard {}", args.sources.shard));
    }
    config.planes = live.planes;
    config.discover = live.discover;
    config.discover_options = args.sources.discover_options();
    config.shard = args.sources.shard;
    config.relay_policy = args.plane.relay.relay_policy;
    config.record = args.record.map(|p| (p, command_line()));
    config.router_indexes = match args.router_index.sources() {
        Ok(r) => r,
        Err(e) => return usage(&e),
    };
    config.router_index_poll = args.router_index.poll();
    let app = match App::start(config, Feed::Live).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    announce(&app, &args.server, &format!("serve: {} source(s)", app.hub.sources().len()));
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

pub(super) async fn demo(args: DemoArgs) -> ExitCode {
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
    let plane = match (&args.event_plane, args.no_event_plane) {
        (_, true) => DemoPlane::Off,
        (None, false) => DemoPlane::Embedded,
        (Some(url), false) if url.starts_with("nats://") => DemoPlane::Nats(url.clone()),
        (Some(url), false) => {
            return usage(&format!(
                "--event-plane {url:?}: the demo publishes its relays onto nats://HOST:PORT; without --event-plane they use an embedded ZMQ plane"
            ));
        }
    };
    let block_size = args.block_size.unwrap_or(scenario.block_size());
    if args.dp_ranks == 0 {
        return usage("--dp-ranks 0: each worker needs at least one rank");
    }
    let options =
        FleetOptions { scenario, release, workers, dp_ranks: args.dp_ranks, rate: args.rate, batches: args.batches, plane, block_size };
    let discover = match args.discover.iter().map(|u| crate::discover::DiscoverUrl::parse(u)).collect::<Result<Vec<_>, _>>() {
        Ok(d) => d,
        Err(e) => return usage(&e),
    };
    let register = match args.register.as_deref().map(crate::discover::DiscoverUrl::parse).transpose() {
        Ok(r) => r,
        Err(e) => return usage(&e.replace("--discover", "--register")),
    };
    let fleet = match Fleet::bind(&options).await {
        Ok(f) => f,
        Err(e) => return failure(&e),
    };
    let sources: Vec<Source> = fleet
        .engines
        .iter()
        .map(|e| Source {
            worker_id: e.worker.to_string(),
            dp_rank: e.dp_rank,
            endpoint: e.endpoint.clone(),
            replay_endpoint: Some(e.replay_endpoint.clone()),
        })
        .collect();
    let engine_keys: Vec<String> = fleet.engines.iter().map(|e| format!("{}:{}", e.worker, e.dp_rank)).collect();
    let mut config = base_config(sources, &args.server, &args.stream, block_size, &args.policy);
    let subject = matches!(options.plane, DemoPlane::Nats(_)).then_some(DEMO_SUBJECT);
    config.planes = match fleet.planes.iter().map(|url| PlaneSource::parse(url, subject)).collect() {
        Ok(p) => p,
        Err(e) => return failure(&e),
    };
    config.mode = proto::ServerMode::Demo;
    config.mode_detail = format!("scenario {} ({}), {workers} worker(s): {}", scenario.name(), release.name(), scenario.describe());
    if args.dp_ranks > 1 {
        config.mode_detail.push_str(&format!(", {} dp ranks each", args.dp_ranks));
    }
    if scenario == Scenario::Fleet {
        config.mode_detail.push_str(&format!(" ({})", crate::demo::cast::Role::cast(workers)));
    }
    config.relay_policy = args.relay.relay_policy;
    if !config.planes.is_empty() {
        config.mode_detail.push_str("; Dynamo 1.6.1's relay per worker on the event plane");
        if config.relay_policy != kvscope_router::RelayConfig::DEFAULT_POLICY {
            config.mode_detail.push_str(&format!(", predicted under {}", config.relay_policy.name));
        }
    }
    config.record = args.record.map(|p| (p, command_line()));
    config.discover = discover;
    let app = match App::start(config, Feed::Live).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    // Start publishing once every source is subscribed, so the dashboard starts near seq 0
    // (a PUB drops what it sends before a subscription arrives; the event plane has no replay).
    let planes: Vec<String> = app.hub.sources().iter().filter(|s| s.kind == proto::SourceKind::EventPlane).map(|s| s.key.clone()).collect();
    // Hundreds of sources take a moment to subscribe.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3 + engine_keys.len() as u64 / 50);
    while tokio::time::Instant::now() < deadline {
        let is_up = |source: String| app.metrics.connected.get_or_create(&crate::metrics::SourceLabels { source }).get() == 1;
        let connected = engine_keys.iter().all(|key| is_up(key.clone())) && planes.iter().all(|key| is_up(key.clone()));
        if connected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (stop_registering, registering) = tokio::sync::watch::channel(false);
    let registrar = register.map(|url| {
        let regs = fleet
            .engines
            .iter()
            .zip(&fleet.planes)
            .map(|(e, plane)| crate::discover::register::Registration {
                worker_id: u64::from(e.worker),
                dp_rank: e.dp_rank,
                instance_id: crate::demo::relay::publisher_id(e.worker, e.dp_rank),
                endpoint: plane.replacen("zmq://", "tcp://", 1),
                block_size,
            })
            .collect();
        let label = url.label();
        tokio::spawn(async move {
            if let Err(e) = crate::discover::register::run(url, regs, crate::discover::DiscoverOptions::default(), registering).await {
                tracing::error!("--register {label}: {e}; the demo goes on unregistered");
            }
        })
    });
    if registrar.is_some() {
        tokio::time::sleep(args.register_grace).await;
    }
    fleet.start();
    announce(
        &app,
        &args.server,
        &format!(
            "demo: scenario {} ({} layout), {workers} worker(s) x {} dp rank(s) at {} batch/s, block size {block_size}, policies {} vs {}",
            scenario.name(),
            release.name(),
            args.dp_ranks,
            args.rate,
            args.policy.policy_a.name,
            args.policy.policy.name
        ),
    );
    wait_for_ctrl_c().await;
    let _ = stop_registering.send(true);
    if let Some(registrar) = registrar {
        let _ = registrar.await;
    }
    drop(fleet);
    stop(app).await
}

pub(super) async fn record(args: RecordArgs) -> ExitCode {
    let LiveSources { sources, planes, discover } = match LiveSources::parse(&args.sources, &args.plane) {
        Ok(l) => l,
        Err(e) => return usage(&e),
    };
    let router_indexes = match args.router_index.sources() {
        Ok(r) => r,
        Err(e) => return usage(&e),
    };
    let config = AppConfig {
        sources,
        planes,
        mode: proto::ServerMode::Live,
        mode_detail: String::new(),
        block_size: 16,
        policy_a: Policy::LEGACY,
        policy_b: Policy::FIXED,
        index_max_nodes: kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS,
        router_queue_bytes: crate::router::DEFAULT_QUEUE_BYTES,
        relay_policy: args.plane.relay.relay_policy,
        listen: None,
        http: HttpConfig::loopback(0),
        history_bytes: 0,
        client_queue_bytes: 0,
        record: Some((args.out.clone(), command_line())),
        intake: IntakeOptions { stream: args.stream.options(), ..IntakeOptions::default() },
        router_indexes,
        router_index_poll: args.router_index.poll(),
        discover,
        discover_options: args.sources.discover_options(),
        shard: args.sources.shard,
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

pub(super) async fn replay(args: ReplayArgs) -> ExitCode {
    if let Err(e) = args.server.check() {
        return usage(&e);
    }
    let header = match crate::capture::open(&args.file) {
        Ok(r) => r.header().clone(),
        Err(e) => return failure(&e),
    };
    let num_engines = header.sources.iter().take_while(|s| s.kind == proto::SourceKind::Engine).count();
    // Router-index reads and discovery events come last; a replay serves the streams (and the
    // sources the discovery events announce, as they come).
    let planes: Option<Vec<_>> = header.sources[num_engines..]
        .iter()
        .filter(|s| !matches!(s.kind, proto::SourceKind::RouterIndex | proto::SourceKind::Discovery))
        .map(crate::plane::PlaneSource::from_info)
        .collect();
    let Some(planes) = planes else {
        return failure(&format!(
            "{}: the header lists an engine source after an event-plane source, or an event plane kvscope cannot read; \
             this build writes engines first",
            args.file.display()
        ));
    };
    let sources: Vec<Source> = header.sources[..num_engines]
        .iter()
        .map(|s| Source {
            worker_id: s.worker_id.clone(),
            dp_rank: s.dp_rank,
            endpoint: s.endpoint.clone(),
            replay_endpoint: s.replay_endpoint.clone(),
        })
        .collect();
    let mut config = base_config(sources, &args.server, &args.stream, args.block_size, &args.policy);
    config.planes = planes;
    config.mode = proto::ServerMode::Replay;
    config.mode_detail = format!("{} at {}", args.file.display(), args.speed.0.map_or("max speed".to_owned(), |s| format!("{s}x")));
    let app = match App::start(config, Feed::File { path: args.file.clone(), speed: args.speed.0 }).await {
        Ok(app) => app,
        Err(e) => return failure(&e),
    };
    announce(&app, &args.server, &format!("replay: {}", args.file.display()));
    wait_for_ctrl_c().await;
    stop(app).await
}

pub(super) async fn publish(args: PublishArgs) -> ExitCode {
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

pub(super) fn check(args: CheckArgs) -> ExitCode {
    let opts = crate::check::CheckOptions {
        block_size: args.block_size,
        policy: args.policy,
        relay_policy: args.relay.relay_policy,
        index_max_nodes: args.index_max_nodes,
        stream: args.stream.options(),
    };
    let report = match crate::check::check(&args.file, &opts) {
        Ok(r) => r,
        Err(e) => return failure(&e),
    };
    if let Some(t) = &report.truncated {
        eprintln!("warning: {t}");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        // Through a JSON value, whose maps keep their keys sorted (the report's documented form).
        match serde_json::to_value(&report).and_then(|v| serde_json::to_string_pretty(&v)) {
            Ok(json) => {
                let _ = writeln!(out, "{json}");
            }
            Err(e) => return failure(&format!("check --json: {e}")),
        }
    } else {
        let _ = write!(out, "{}", crate::check::table(&report));
    }
    let _ = out.flush();
    if report.fatal() {
        ExitCode::from(EXIT_FATAL)
    } else if args.fail_on_router_mismatch && report.router_mismatch() {
        ExitCode::from(EXIT_ROUTER_MISMATCH)
    } else if args.fail_on_index_divergence && report.index_divergence() {
        ExitCode::from(EXIT_INDEX_DIVERGENCE)
    } else {
        ExitCode::SUCCESS
    }
}

pub(super) fn rules(args: RulesArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", crate::rules::table(&args.policy));
    let _ = out.flush();
    ExitCode::SUCCESS
}
