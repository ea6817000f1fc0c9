//! Puts the pieces together for `serve`, `demo`, `replay` and `record`: the hub, one pipeline
//! per source fed live (`intake`) or from a capture, the optional recorder, and the HTTP server.
//!
//! Neighbours: `cli` builds an [`AppConfig`] from flags; everything below is started here and
//! stopped by [`App::stop`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kvscope_normalize::Policy;
use kvscope_protocol as proto;
use tokio::sync::watch;

use crate::capture::{self, Recorder, Writer};
use crate::classify::Classifier;
use crate::discover::{DiscoverOptions, DiscoverUrl};
use crate::http::{self, HttpConfig};
use crate::intake::{self, IntakeOptions, RelayOutput};
use crate::metrics::Metrics;
use crate::plane::{PlaneKind, PlanePipeline, PlaneSource};
use crate::relay::{Hub, HubConfig};
use crate::router_index::{PollOptions, RouterIndexSource};
pub use crate::source_state::SourceSummary;
use crate::source_state::{AnyPipeline, TrackedSource};
use crate::sources::Source;
use crate::stream::Pipeline;
use crate::time::unix_nanos;

/// Everything a running server needs.
#[derive(Clone, Debug)]
pub struct AppConfig {
    pub sources: Vec<Source>,
    /// Event-plane sources (`--event-plane`), listed after the engines.
    pub planes: Vec<PlaneSource>,
    pub mode: proto::ServerMode,
    pub mode_detail: String,
    pub block_size: u32,
    pub policy_a: Policy,
    pub policy_b: Policy,
    /// The live index model's bound (`--index-max-nodes`).
    pub index_max_nodes: usize,
    /// What the router task may have queued (`--router-queue-bytes`).
    pub router_queue_bytes: usize,
    /// The policy Dynamo's relays are predicted to run, for the live reconciliation with the
    /// event plane (`/metrics`' `kvscope_router_*`); used only with event-plane sources.
    pub relay_policy: Policy,
    /// `None`: no HTTP server (`record`).
    pub listen: Option<SocketAddr>,
    pub http: HttpConfig,
    pub history_bytes: usize,
    pub client_queue_bytes: usize,
    /// Capture file and the note for its header.
    pub record: Option<(PathBuf, String)>,
    pub intake: IntakeOptions,
    /// Real router indexes to read (`--router-index`), and how.
    pub router_indexes: Vec<RouterIndexSource>,
    pub router_index_poll: PollOptions,
    /// Discovery stores to find more sources in (`--discover`), and how to read them.
    pub discover: Vec<DiscoverUrl>,
    pub discover_options: DiscoverOptions,
    /// This server's part of the fleet (`--shard`; static sources are filtered before).
    pub shard: kvscope_router::Shard,
}

impl AppConfig {
    /// A server on a free loopback port with default bounds, for benchmarks: `fixed` beside
    /// `legacy`, block size 16, no recording, no router index.
    pub fn loopback(sources: Vec<Source>, planes: Vec<PlaneSource>, client_queue_bytes: usize) -> AppConfig {
        AppConfig {
            sources,
            planes,
            mode: proto::ServerMode::Live,
            mode_detail: "bench".into(),
            block_size: 16,
            policy_a: Policy::LEGACY,
            policy_b: Policy::FIXED,
            index_max_nodes: kvscope_index::IndexConfig::DEFAULT_MAX_BLOCKS,
            router_queue_bytes: crate::router::DEFAULT_QUEUE_BYTES,
            relay_policy: kvscope_router::RelayConfig::DEFAULT_POLICY,
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            http: HttpConfig::loopback(65536),
            history_bytes: 64 << 20,
            client_queue_bytes,
            record: None,
            intake: IntakeOptions::default(),
            router_indexes: Vec::new(),
            router_index_poll: PollOptions::default(),
            discover: Vec::new(),
            discover_options: DiscoverOptions::default(),
            shard: kvscope_router::Shard::ALL,
        }
    }

    /// What every page is told first: the sources and the defaults it classifies and predicts
    /// with (the policies, the block size, the relay policy).
    fn hello(&self, sources: Vec<proto::SourceInfo>) -> proto::Hello {
        proto::Hello {
            protocol_version: proto::PROTOCOL_VERSION,
            server_version: env!("CARGO_PKG_VERSION").to_owned(),
            mode: self.mode,
            mode_detail: self.mode_detail.clone(),
            sources,
            defaults: proto::Defaults {
                block_size: self.block_size,
                policy_a: self.policy_a.name.to_owned(),
                policy_b: self.policy_b.name.to_owned(),
                relay_policy: self.relay_policy.name.to_owned(),
                index_max_nodes: Some(self.index_max_nodes as u64),
            },
            history_bytes: self.history_bytes as u64,
            client_queue_bytes: self.client_queue_bytes as u64,
            started_unix_nanos: unix_nanos(),
            discovery: self.discover.iter().map(DiscoverUrl::label).collect(),
        }
    }
}

/// Where frames come from.
#[derive(Clone, Debug)]
pub enum Feed {
    /// ZMQ SUB per source.
    Live,
    /// A capture, paced by its receive times divided by `speed` (`None`: as fast as possible).
    File { path: PathBuf, speed: Option<f64> },
}

/// A running server.
#[derive(Debug)]
pub struct App {
    /// The address HTTP listens on (port resolved).
    pub addr: Option<SocketAddr>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<SourceSummary>>>,
    /// The live reconciler's task.
    router: Option<tokio::task::JoinHandle<()>>,
    http: Option<tokio::task::JoinHandle<()>>,
    writer: Option<Writer>,
    /// Turns true when a file feed reached the end of the capture.
    pub feed_done: watch::Receiver<bool>,
}

/// Binds `listen` and serves `router` on it; the error says what to do when the port is taken.
async fn serve_http(listen: SocketAddr, router: axum::Router) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("{listen} is in use; pass --listen {}:0 for a free port, or stop the other process", listen.ip())
        } else {
            format!("cannot listen on {listen}: {e}")
        }
    })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("HTTP server stopped: {e}");
        }
    });
    Ok((addr, task))
}

fn policies(a: Policy, b: Policy) -> Vec<Policy> {
    if a == b { vec![a] } else { vec![a, b] }
}

impl App {
    /// Binds HTTP (if asked), opens the recorder (if asked) and starts the feed.
    pub async fn start(config: AppConfig, feed: Feed) -> Result<App, String> {
        let metrics = Arc::new(Metrics::new());
        let num_engines = config.sources.len();
        let infos: Vec<proto::SourceInfo> = config
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| s.info(i as u32))
            .chain(config.planes.iter().enumerate().map(|(i, p)| p.info((num_engines + i) as u32)))
            .collect();
        let hub = Arc::new(Hub::new(
            HubConfig {
                history_bytes: config.history_bytes,
                client_queue_bytes: config.client_queue_bytes,
                hello: config.hello(infos.clone()),
                batch_window: config.http.batch_window,
            },
            metrics.clone(),
        ));
        if !config.http.batch_window.is_zero() {
            tokio::spawn(Hub::run_flusher(Arc::downgrade(&hub)));
        }
        let (addr, http_task) = match config.listen {
            Some(listen) => {
                let (addr, task) = serve_http(listen, http::router(hub.clone(), metrics.clone(), config.http.clone())).await?;
                (Some(addr), Some(task))
            }
            None => (None, None),
        };

        let first_index = infos.len() as u32;
        let mut index_infos: Vec<proto::SourceInfo> =
            config.router_indexes.iter().enumerate().map(|(i, r)| r.info(first_index + i as u32)).collect();
        // Recording a discovered fleet: one capture source holds the discovery events, and the
        // sources found later take the indexes after it.
        let discovery_index = (!config.discover.is_empty() && config.record.is_some()).then(|| {
            let index = first_index + index_infos.len() as u32;
            let labels: Vec<String> = config.discover.iter().map(DiscoverUrl::label).collect();
            index_infos.push(proto::SourceInfo {
                index,
                key: "discovery".to_owned(),
                worker_id: String::new(),
                dp_rank: 0,
                endpoint: labels.join(" "),
                replay_endpoint: None,
                kind: proto::SourceKind::Discovery,
                event_plane: None,
                block_size: None,
            });
            index
        });
        let (recorder, writer) = match &config.record {
            Some((path, note)) => {
                // Router-index reads are in the capture, not in the hello: the page has no use
                // for whole dumps every few seconds.
                let header = capture::header(infos.iter().chain(&index_infos).cloned().collect(), Some(note.clone()));
                let (hub, metrics) = (hub.clone(), metrics.clone());
                let sink: capture::StatusSink = Arc::new(move |status: &proto::RecordingStatus| {
                    metrics.recording_status(status);
                    hub.publish(Bytes::from(proto::encode_ref(proto::MessageRef::RecordingStatus(status))), crate::relay::Kind::Recording);
                });
                let (r, w) = capture::create(path, &header, sink).await?;
                (Some(r), Some(w))
            }
            None => (None, None),
        };

        let (shutdown, shutdown_rx) = watch::channel(false);
        let (done_tx, feed_done) = watch::channel(false);
        // The router's side live, for /metrics: the reconciliation with an event plane, and the
        // router's index modelled under each policy (and compared with a real one).
        let (dumps_tx, dumps_rx) = match config.router_indexes.is_empty() {
            true => (None, None),
            false => {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                (Some(tx), Some(rx))
            }
        };
        let live = config.listen.is_some().then(|| {
            let mut index_policies = policies(config.policy_a, config.policy_b);
            if !config.router_indexes.is_empty() && !index_policies.contains(&Policy::DYNAMO_1_6_1) {
                index_policies.push(Policy::DYNAMO_1_6_1);
            }
            let live = crate::router::LiveConfig {
                engines: infos[..num_engines].iter().map(|i| (i.key.clone(), i.worker_id.clone(), i.dp_rank)).collect(),
                block_size: config.block_size,
                index_max_nodes: config.index_max_nodes,
                queue_max_bytes: config.router_queue_bytes,
                reconcile: (!config.planes.is_empty() || !config.discover.is_empty()).then_some(config.relay_policy),
                shard: config.shard,
                index_policies,
                dumps: dumps_rx,
            };
            crate::router::start_live(live, metrics.clone(), shutdown_rx.clone())
        });
        // Every source's pipeline, given on the command line, found by discovery or announced
        // by a capture, is built in one place (`builders`). Engines feed the live task's index
        // models, and its reconciler when there is one (planes or discovery); envelopes are
        // counted only by a reconciler.
        let live_tap = live.as_ref().map(|l| l.tap.clone());
        let (make_plane, make_engine) = builders(&config, &hub, &metrics, recorder.clone(), live_tap.clone());
        let plane_infos = &infos[num_engines..];
        let mut tasks = Vec::new();
        match feed {
            Feed::Live => {
                for (info, source) in infos.iter().zip(&config.sources) {
                    let pipeline = make_engine(info, config.block_size, None);
                    let task = intake::run_subscribed(source.endpoint.clone(), pipeline, config.intake.clone(), shutdown_rx.clone());
                    tasks.push(tokio::spawn(async move { vec![task.await.summary()] }));
                }
                for (info, plane) in plane_infos.iter().zip(&config.planes) {
                    let pipeline = make_plane(info, None);
                    let (opts, stop) = (config.intake.clone(), shutdown_rx.clone());
                    let plane = plane.clone();
                    tasks.push(tokio::spawn(async move {
                        let p = match plane.kind {
                            PlaneKind::Nats { subject } => crate::plane::nats::run(plane.url, subject, pipeline, opts, stop).await,
                            PlaneKind::Zmq { endpoint } => intake::run_subscribed(endpoint, pipeline, opts, stop).await,
                        };
                        vec![p.summary()]
                    }));
                }
                if !config.discover.is_empty() {
                    let capture = recorder.clone().zip(discovery_index).map(|(recorder, source)| crate::fleet::CaptureLog {
                        recorder,
                        source,
                        next: source + 1,
                    });
                    let builders = (make_plane.clone(), make_engine.clone());
                    tasks.push(start_discovery(
                        &config,
                        hub.clone(),
                        metrics.clone(),
                        capture,
                        builders,
                        live_tap.clone(),
                        shutdown_rx.clone(),
                    ));
                }
                drop(done_tx);
            }
            Feed::File { path, speed } => {
                let pipelines: Vec<AnyPipeline<RelayOutput>> = infos[..num_engines]
                    .iter()
                    .map(|info| AnyPipeline::Engine(make_engine(info, config.block_size, None)))
                    .chain(plane_infos.iter().map(|info| AnyPipeline::Plane(make_plane(info, None))))
                    .collect();
                let found = Found { hub: hub.clone(), make_plane, make_engine, block_size: config.block_size, at: HashMap::new() };
                tasks.push(tokio::spawn(feed_file(path, speed, pipelines, found, shutdown_rx.clone(), done_tx)));
            }
        }
        for (info, source) in index_infos.iter().filter(|i| i.kind == proto::SourceKind::RouterIndex).zip(&config.router_indexes) {
            let task = crate::router_index::run(
                source.clone(),
                info.index,
                recorder.clone(),
                metrics.clone(),
                config.router_index_poll,
                dumps_tx.clone(),
                shutdown_rx.clone(),
            );
            tasks.push(tokio::spawn(async move {
                task.await;
                Vec::new()
            }));
        }
        drop(dumps_tx);
        drop(recorder);
        let router = live.map(|l| l.task);
        Ok(App { addr, hub, metrics, shutdown, tasks, router, http: http_task, writer, feed_done })
    }

    /// Stops the feed, finishes the capture and stops HTTP; returns per-source totals.
    pub async fn stop(self) -> Result<(Vec<SourceSummary>, Option<capture::Written>), String> {
        let _ = self.shutdown.send(true);
        let mut summaries = Vec::new();
        for t in self.tasks {
            if let Ok(mut s) = t.await {
                summaries.append(&mut s);
            }
        }
        if let Some(r) = self.router {
            let _ = r.await;
        }
        let written = match self.writer {
            Some(w) => Some(w.finish().await?),
            None => None,
        };
        self.hub.flush();
        if let Some(h) = self.http {
            h.abort();
        }
        Ok((summaries, written))
    }
}

/// Reads the discovery stores and keeps their sources in step (`crate::fleet`), building their
/// pipelines with the app's builders; the task ends with the discovered sources' totals.
/// `router` is the live reconciler's tap.
fn start_discovery(
    config: &AppConfig,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    capture: Option<crate::fleet::CaptureLog>,
    (make_plane, make_engine): (crate::fleet::MakePlane, crate::fleet::MakeEngine),
    router: Option<crate::router::Tap>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<SourceSummary>> {
    let (snapshots_tx, snapshots) = watch::channel(crate::discover::Snapshot::default());
    tokio::spawn(crate::discover::run(config.discover.clone(), config.discover_options, snapshots_tx, shutdown.clone()));
    let fleet = crate::fleet::FleetConfig {
        hub,
        metrics,
        make_plane,
        make_engine,
        router,
        static_keys: config.sources.iter().map(|s| proto::engine_key(&s.worker_id, s.dp_rank)).collect(),
        block_size: config.block_size,
        intake: config.intake.clone(),
        takes: {
            let shard = config.shard;
            Arc::new(move |worker_id| shard.takes_id(worker_id))
        },
        capture,
        last_status: None,
    };
    tokio::spawn(crate::fleet::run(fleet, snapshots, shutdown))
}

/// How a source found after the start gets its pipeline: by discovery live, or from a
/// capture's discovery events in a replay.
fn builders(
    config: &AppConfig,
    hub: &Arc<Hub>,
    metrics: &Arc<Metrics>,
    recorder: Option<Recorder>,
    router: Option<crate::router::Tap>,
) -> (crate::fleet::MakePlane, crate::fleet::MakeEngine) {
    let stream = config.intake.stream;
    let (plane_hub, plane_metrics, plane_recorder, plane_tap) = (hub.clone(), metrics.clone(), recorder.clone(), router.clone());
    let make_plane: crate::fleet::MakePlane = Arc::new(move |info: &proto::SourceInfo, capture_index: Option<u32>| {
        let output = RelayOutput::new(plane_hub.clone(), plane_recorder.clone()).with_capture_index(capture_index);
        PlanePipeline::new(info, stream.max_frame_bytes, Some(plane_metrics.source(&info.key)), output).with_router(plane_tap.clone())
    });
    let (engine_hub, engine_metrics) = (hub.clone(), metrics.clone());
    let engine_policies = policies(config.policy_a, config.policy_b);
    let make_engine: crate::fleet::MakeEngine = Arc::new(move |info: &proto::SourceInfo, block_size: u32, capture_index: Option<u32>| {
        let sm = engine_metrics.source(&info.key);
        let classifier =
            Classifier::new(&info.worker_id, info.dp_rank, block_size, &engine_policies, Some((sm.clone(), engine_metrics.clone())));
        let tap = router.clone().map(|tap| crate::router::EngineTap { tap, source: info.index as usize });
        let output = RelayOutput::new(engine_hub.clone(), recorder.clone()).with_router(tap).with_capture_index(capture_index);
        Pipeline::new(info, Some(classifier), Some(sm), output).with_options(stream)
    });
    (make_plane, make_engine)
}

/// The sources a capture's discovery events announce, as a replay serves them: each is added
/// to the hub (under the hub's next index) and gets a pipeline; `at` maps its capture index to
/// its place among the pipelines.
struct Found {
    hub: Arc<Hub>,
    make_plane: crate::fleet::MakePlane,
    make_engine: crate::fleet::MakeEngine,
    block_size: u32,
    at: HashMap<u32, usize>,
}

impl Found {
    /// Applies one discovery record; a record that does not read is logged and skipped.
    fn apply(&mut self, frames: &[Bytes], pipelines: &mut Vec<AnyPipeline<RelayOutput>>, path: &std::path::Path) {
        use proto::capture::DiscoveryEvent;
        match DiscoveryEvent::parse(frames) {
            Ok(DiscoveryEvent::Source(info)) => match self.at.get(&info.index) {
                Some(&at) => {
                    if let Some(known) = self.hub.sources().into_iter().find(|s| s.key == info.key) {
                        self.hub.update_source(proto::SourceInfo { index: known.index, ..info });
                    }
                    let p = &mut pipelines[at];
                    if p.state() == proto::ConnState::Left {
                        p.set_state(proto::ConnState::Live, None);
                    }
                }
                None => {
                    let capture_index = info.index;
                    let served = self.hub.add_source(|index| proto::SourceInfo { index, ..info });
                    let pipeline = match served.kind {
                        proto::SourceKind::Engine => AnyPipeline::Engine((self.make_engine)(&served, self.block_size, None)),
                        _ => AnyPipeline::Plane((self.make_plane)(&served, None)),
                    };
                    self.at.insert(capture_index, pipelines.len());
                    pipelines.push(pipeline);
                    if let Some(p) = pipelines.last_mut() {
                        p.set_state(proto::ConnState::Live, None);
                    }
                }
            },
            Ok(DiscoveryEvent::Left { source }) => {
                if let Some(p) = self.at.get(&source).and_then(|&at| pipelines.get_mut(at)) {
                    p.set_state(proto::ConnState::Left, Some(crate::fleet::LEFT_NOTE.to_owned()));
                }
            }
            Err(e) => tracing::warn!("{}: {e}; skipped", path.display()),
        }
    }
}

/// Plays a capture into the pipelines, paced by its receive times.
async fn feed_file(
    path: PathBuf,
    speed: Option<f64>,
    mut pipelines: Vec<AnyPipeline<RelayOutput>>,
    mut found: Found,
    mut shutdown: watch::Receiver<bool>,
    done: watch::Sender<bool>,
) -> Vec<SourceSummary> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u32, u64, bool, Vec<Bytes>)>(1024);
    let (header_kinds, kinds) = tokio::sync::oneshot::channel::<Vec<proto::SourceKind>>();
    let reader_path = path.clone();
    // The capture reader is synchronous; it runs on a blocking thread and hands records over.
    let reader = tokio::task::spawn_blocking(move || -> Result<Option<String>, String> {
        let mut reader = capture::open(&reader_path)?;
        // Reads of a router index are `check`'s to compare; a replay serves the streams.
        let reads: Vec<bool> = reader.header().sources.iter().map(|s| s.kind == proto::SourceKind::RouterIndex).collect();
        let _ = header_kinds.send(reader.header().sources.iter().map(|s| s.kind).collect());
        while let Some(record) = reader.next_record().map_err(|e| e.with_path(&reader_path.display().to_string()).to_string())? {
            if reads.get(record.source as usize).copied().unwrap_or(false) {
                continue;
            }
            let frames = record.frames.into_iter().map(|f| Bytes::from(f.into_vec())).collect();
            if tx.blocking_send((record.source, record.recv_time_nanos, record.replayed, frames)).is_err() {
                break;
            }
        }
        Ok(reader.truncated().map(ToString::to_string))
    });
    for p in &mut pipelines {
        p.set_state(proto::ConnState::Live, None);
    }
    // What each capture index is (a reader that failed to open says so below).
    let kinds = kinds.await.unwrap_or_default();
    let started = tokio::time::Instant::now();
    let mut first: Option<u64> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tick.tick() => for p in &mut pipelines { p.flush_status_if_dirty(); },
            record = rx.recv() => {
                let Some((source, recv, replayed, frames)) = record else { break };
                if let Some(speed) = speed {
                    let t0 = *first.get_or_insert(recv);
                    let due = Duration::from_nanos(((recv.saturating_sub(t0)) as f64 / speed) as u64);
                    tokio::time::sleep_until(started + due).await;
                }
                if kinds.get(source as usize) == Some(&proto::SourceKind::Discovery) {
                    found.apply(&frames, &mut pipelines, &path);
                    continue;
                }
                // Sources the header lists come first; those found later are where `found` put them.
                let at = if (source as usize) < kinds.len() { Some(source as usize) } else { found.at.get(&source).copied() };
                match at.and_then(|at| pipelines.get_mut(at)) {
                    Some(p) => {
                        // With a live reconciler an envelope went to it; otherwise nothing takes it.
                        let _ = p.capture_record(frames, recv, replayed);
                        relay_output(p).flush_pending().await;
                    }
                    None => tracing::warn!("{}: record names source {source}, the header lists {}", path.display(), pipelines.len()),
                }
            }
        }
    }
    match reader.await {
        Ok(Ok(Some(truncation))) => tracing::warn!("{}: {truncation}", path.display()),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::error!("{e}"),
        Err(e) => tracing::error!("capture reader failed: {e}"),
    }
    for p in &mut pipelines {
        // A source that left says so to the end.
        if p.state() != proto::ConnState::Left {
            p.set_state(proto::ConnState::Stale, Some("end of the capture".to_owned()));
        }
        p.flush_status();
        relay_output(p).flush_pending().await;
    }
    let _ = done.send(true);
    tracing::info!("{}: replay finished", path.display());
    pipelines.iter().map(TrackedSource::summary).collect()
}

/// Where a capture feed's source relays and records to.
fn relay_output(p: &mut AnyPipeline<RelayOutput>) -> &mut RelayOutput {
    match p {
        AnyPipeline::Engine(p) => &mut p.output,
        AnyPipeline::Plane(p) => &mut p.output,
    }
}
