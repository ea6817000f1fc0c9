//! Keeps the discovered sources in step with the discovery store (`--discover`).
//!
//! A source is its engine's `(worker_id, dp_rank)`, not its registration: Dynamo gives a relay a
//! new id and a new port on every restart, while the router files its events under the same
//! worker and rank. So a rank seen for the first time becomes a new source
//! ([`Hub::add_source`]); a rank that is gone from the store has *left* (its intake stops, its
//! history and counts stay, its status says when); a rank that comes back, or moves to another
//! port, resumes as the same source with the same pipeline, so its counts go on and the late-join
//! rules apply to what it publishes next.
//!
//! Engines (`dynamo-indexer:`, whose `/workers` lists them) are kept the same way, keyed
//! `worker:rank` as `--workers` keys them; one that `--workers` names already is not added twice.
//! Each is classified at its own block size (the indexer's, else its model card's, else
//! `--block-size`), and joins the live reconciliation and index models from its first batch.
//!
//! Relays on the NATS plane need no source of their own: one `--event-plane nats://…`
//! subscription reads them all. The log says once how to read them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kvscope_protocol as proto;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use kvscope_protocol::capture::DiscoveryEvent;

use crate::capture::Recorder;
use crate::discover::{Snapshot, Transport, WorkerRank};
use crate::intake::{self, IntakeOptions, RelayOutput};
use crate::metrics::{Metrics, UrlLabels};
use crate::plane::PlanePipeline;
use crate::relay::Hub;
use crate::router::{Input, NewEngine, Tap};
use crate::source_state::{AnyPipeline, SourceSummary, TrackedSource};
use crate::stream::Pipeline;

/// Builds the pipeline of a newly discovered relay (its index, key and output are the app's),
/// recording under the capture index given, if any.
pub type MakePlane = Arc<dyn Fn(&proto::SourceInfo, Option<u32>) -> PlanePipeline<RelayOutput> + Send + Sync>;
/// Builds the pipeline of a newly discovered engine, classifying at the block size given.
pub type MakeEngine = Arc<dyn Fn(&proto::SourceInfo, u32, Option<u32>) -> Pipeline<RelayOutput> + Send + Sync>;

/// Where the discovery events go in a capture: the header's discovery source, and the index
/// the next source found takes there (the header's sources come first).
#[derive(Clone, Debug)]
pub struct CaptureLog {
    pub recorder: Recorder,
    pub source: u32,
    pub next: u32,
}

impl CaptureLog {
    async fn write(&self, event: &DiscoveryEvent) {
        self.recorder.record(self.source, crate::time::unix_nanos(), false, &event.frames()).await;
    }
}

/// What the supervisor needs from the app.
#[allow(missing_debug_implementations)] // closures
pub struct FleetConfig {
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub make_plane: MakePlane,
    pub make_engine: MakeEngine,
    /// The live reconciler and index models, told of each new engine.
    pub router: Option<Tap>,
    /// Keys of the engines given on the command line: discovery does not add them again.
    pub static_keys: BTreeSet<String>,
    /// `--block-size`: for an engine whose indexer and model card say nothing.
    pub block_size: u32,
    pub intake: IntakeOptions,
    /// Whether this server takes a worker (`--shard`); every worker without one.
    pub takes: Arc<dyn Fn(u64) -> bool + Send + Sync>,
    /// When recording.
    pub capture: Option<CaptureLog>,
    /// What the pages were told last.
    pub last_status: Option<proto::DiscoveryStatus>,
}

/// What a discovered source reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Engine,
    Relay,
}

type Discovered = AnyPipeline<RelayOutput>;

/// One discovered source.
struct Member {
    info: proto::SourceInfo,
    /// Its index in the capture, when recording.
    capture_index: Option<u32>,
    /// `tcp://HOST:PORT` it reads now.
    endpoint: String,
    run: Run,
}

enum Run {
    Running {
        stop: watch::Sender<bool>,
        task: JoinHandle<Discovered>,
    },
    /// Left the store; its pipeline waits here with its counts until it comes back.
    Parked(Box<Discovered>),
    /// Between the two (only while the supervisor is handling a change).
    Moving,
}

/// A source as the store lists it now.
struct Wanted {
    worker_id: u64,
    dp_rank: u32,
    endpoint: String,
    /// Engines only: the block size to classify at.
    block_size: u32,
    /// Whether the store said it (the indexer or the model card), rather than `--block-size`.
    own_block_size: bool,
}

/// The sentence a left source's status carries.
pub const LEFT_NOTE: &str = "left Dynamo's discovery store (its lease or TTL expired); resumes as this source when it registers again";

/// Follows the snapshots until `stop`; returns every discovered source's totals.
pub async fn run(mut config: FleetConfig, mut snapshots: watch::Receiver<Snapshot>, mut stop: watch::Receiver<bool>) -> Vec<SourceSummary> {
    let mut members: BTreeMap<(Kind, WorkerRank), Member> = BTreeMap::new();
    let mut nats_noted: BTreeSet<WorkerRank> = BTreeSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            changed = snapshots.changed() => if changed.is_err() { break },
        }
        let snapshot = snapshots.borrow_and_update().clone();
        apply(&mut config, &mut members, &mut nats_noted, &snapshot).await;
    }
    let mut summaries = Vec::new();
    for (_, mut member) in std::mem::take(&mut members) {
        summaries.extend(take_pipeline(&mut member).await.map(|p| p.summary()));
    }
    summaries
}

/// What the store lists now, as sources this server takes.
fn wanted(config: &FleetConfig, nats_noted: &mut BTreeSet<WorkerRank>, snapshot: &Snapshot) -> BTreeMap<(Kind, WorkerRank), Wanted> {
    let fleet = &snapshot.fleet;
    let mut wanted = BTreeMap::new();
    for (&rank, relay) in &fleet.relays {
        match &relay.transport {
            Transport::Zmq { endpoint } => {
                let w = Wanted {
                    worker_id: relay.worker_id,
                    dp_rank: relay.dp_rank,
                    endpoint: endpoint.clone(),
                    block_size: 0,
                    own_block_size: false,
                };
                wanted.insert((Kind::Relay, rank), w);
            }
            Transport::Nats { subject } => {
                if nats_noted.insert(rank) {
                    tracing::info!(
                        "discovery: the relay of worker {} rank {} publishes on NATS ({subject}); one --event-plane nats://HOST:PORT reads every such relay",
                        relay.worker_id,
                        relay.dp_rank
                    );
                }
            }
        }
    }
    for (&rank, engine) in &fleet.engines {
        let own = engine.block_size.or_else(|| fleet.block_size(&engine.model));
        let w = Wanted {
            worker_id: engine.worker_id,
            dp_rank: engine.dp_rank,
            endpoint: engine.endpoint.clone(),
            block_size: own.unwrap_or(config.block_size),
            own_block_size: own.is_some(),
        };
        wanted.insert((Kind::Engine, rank), w);
    }
    wanted.retain(|(kind, _), w| {
        (config.takes)(w.worker_id)
            && (*kind == Kind::Relay || !config.static_keys.contains(&proto::engine_key(&w.worker_id.to_string(), w.dp_rank)))
    });
    wanted
}

async fn apply(
    config: &mut FleetConfig,
    members: &mut BTreeMap<(Kind, WorkerRank), Member>,
    nats_noted: &mut BTreeSet<WorkerRank>,
    snapshot: &Snapshot,
) {
    let metrics = config.metrics.clone();
    for backend in &snapshot.backends {
        let labels = UrlLabels { url: backend.url.clone() };
        metrics.discovery_up.get_or_create(&labels).set(backend.error.is_none() as i64);
        metrics.discovery_failures.get_or_create(&labels).set(backend.failures as i64);
        metrics.discovery_bad_records.get_or_create(&labels).set(backend.bad_records.len() as i64);
    }
    let wanted = wanted(config, nats_noted, snapshot);
    for (&key, w) in &wanted {
        let Some(member) = members.get_mut(&key) else {
            let member = add(&mut *config, key.0, w).await;
            members.insert(key, member);
            continue;
        };
        let moved = member.endpoint != w.endpoint;
        if !moved && !matches!(member.run, Run::Parked(_)) {
            continue;
        }
        let Some(pipeline) = take_pipeline(member).await else { continue };
        if moved {
            member.endpoint = w.endpoint.clone();
            member.info.endpoint = shown_endpoint(key.0, &w.endpoint);
            if let Some(plane) = &mut member.info.event_plane {
                plane.url = member.info.endpoint.clone();
            }
            config.hub.update_source(member.info.clone());
            if let (Some(log), Some(index)) = (&config.capture, member.capture_index) {
                log.write(&DiscoveryEvent::Source(proto::SourceInfo { index, ..member.info.clone() })).await;
            }
        }
        tracing::info!(source = %member.info.key, endpoint = %w.endpoint, "registered again");
        member.run = start(config, w.endpoint.clone(), pipeline);
    }
    // Before every backend answered once, a missing source says nothing.
    if snapshot.complete {
        for (key, member) in members.iter_mut() {
            if wanted.contains_key(key) || matches!(member.run, Run::Parked(_)) {
                continue;
            }
            let Some(mut pipeline) = take_pipeline(member).await else { continue };
            tracing::info!(source = %member.info.key, "left the discovery store");
            pipeline.set_state(proto::ConnState::Left, Some(LEFT_NOTE.to_owned()));
            pipeline.flush_status();
            if let (Some(log), Some(source)) = (&config.capture, member.capture_index) {
                log.write(&DiscoveryEvent::Left { source }).await;
            }
            member.run = Run::Parked(Box::new(pipeline));
        }
    }
    let left = members.values().filter(|m| matches!(m.run, Run::Parked(_))).count();
    metrics.discovered_sources.set(members.len() as i64);
    metrics.discovered_left.set(left as i64);
    let status = proto::DiscoveryStatus {
        stores: snapshot
            .backends
            .iter()
            .map(|b| proto::StoreStatus {
                url: b.url.clone(),
                error: b.error.clone(),
                failures: b.failures,
                bad_records: b.bad_records.len() as u32,
            })
            .collect(),
        sources: members.len() as u32,
        left: left as u32,
    };
    if config.last_status.as_ref() != Some(&status) {
        let bytes = bytes::Bytes::from(proto::encode_ref(proto::MessageRef::DiscoveryStatus(&status)));
        config.hub.publish(bytes, crate::relay::Kind::Discovery);
        config.last_status = Some(status);
    }
}

/// How the page and the logs show where a source reads: a relay as its event-plane URL.
fn shown_endpoint(kind: Kind, endpoint: &str) -> String {
    match kind {
        Kind::Relay => format!("zmq://{}", endpoint.trim_start_matches("tcp://")),
        Kind::Engine => endpoint.to_owned(),
    }
}

/// A source seen for the first time: announced (and recorded), registered with the live
/// router side, started.
async fn add(config: &mut FleetConfig, kind: Kind, w: &Wanted) -> Member {
    let worker_id = w.worker_id.to_string();
    let shown = shown_endpoint(kind, &w.endpoint);
    let info = config.hub.add_source(|index| match kind {
        Kind::Relay => proto::SourceInfo::discovered_relay(index, &worker_id, w.dp_rank, &shown),
        Kind::Engine => proto::SourceInfo {
            block_size: w.own_block_size.then_some(w.block_size),
            ..proto::SourceInfo::engine(index, &worker_id, w.dp_rank, &shown, None)
        },
    });
    tracing::info!(source = %info.key, endpoint = %w.endpoint, "discovered");
    let capture_index = match &mut config.capture {
        Some(log) => {
            let index = log.next;
            log.next += 1;
            log.write(&DiscoveryEvent::Source(proto::SourceInfo { index, ..info.clone() })).await;
            Some(index)
        }
        None => None,
    };
    let pipeline = match kind {
        Kind::Relay => AnyPipeline::Plane((config.make_plane)(&info, capture_index)),
        Kind::Engine => {
            if let Some(tap) = &config.router {
                let e = NewEngine {
                    source: info.index as usize,
                    key: info.key.clone(),
                    worker_id,
                    dp_rank: w.dp_rank,
                    block_size: w.block_size,
                };
                tap.add_engine(Input::AddEngine(e)).await;
            }
            AnyPipeline::Engine((config.make_engine)(&info, w.block_size, capture_index))
        }
    };
    let run = start(config, w.endpoint.clone(), pipeline);
    Member { info, capture_index, endpoint: w.endpoint.clone(), run }
}

fn start(config: &FleetConfig, endpoint: String, pipeline: Discovered) -> Run {
    let (stop, rx) = watch::channel(false);
    let opts = config.intake.clone();
    let task = match pipeline {
        AnyPipeline::Engine(p) => tokio::spawn(async move { AnyPipeline::Engine(intake::run_subscribed(endpoint, p, opts, rx).await) }),
        AnyPipeline::Plane(p) => tokio::spawn(async move { AnyPipeline::Plane(intake::run_subscribed(endpoint, p, opts, rx).await) }),
    };
    Run::Running { stop, task }
}

/// Stops a member's intake (if it runs) and hands its pipeline over.
async fn take_pipeline(member: &mut Member) -> Option<Discovered> {
    match std::mem::replace(&mut member.run, Run::Moving) {
        Run::Running { stop, task } => {
            let _ = stop.send(true);
            task.await.ok()
        }
        Run::Parked(p) => Some(*p),
        Run::Moving => None,
    }
}
