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
//! Relays on the NATS plane need no source of their own: one `--event-plane nats://…`
//! subscription reads them all. They are counted as discovered, and the log says once how to
//! read them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kvscope_protocol as proto;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::discover::{Snapshot, Transport, WorkerRank};
use crate::intake::{self, IntakeOptions, RelayOutput};
use crate::metrics::{Metrics, UrlLabels};
use crate::plane::PlanePipeline;
use crate::relay::Hub;
use crate::source_state::{SourceSummary, TrackedSource};

/// Builds the pipeline of a newly discovered relay (its index, key and output are the app's).
pub type MakePlane = Arc<dyn Fn(&proto::SourceInfo) -> PlanePipeline<RelayOutput> + Send + Sync>;

/// What the supervisor needs from the app.
#[allow(missing_debug_implementations)] // closures
pub struct FleetConfig {
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub make_plane: MakePlane,
    pub intake: IntakeOptions,
    /// Only ranks whose worker this server takes (`--shard`); every rank without one.
    pub takes: Arc<dyn Fn(u64) -> bool + Send + Sync>,
}

/// One discovered relay.
struct Member {
    info: proto::SourceInfo,
    /// `tcp://HOST:PORT` it reads now.
    endpoint: String,
    run: Run,
}

enum Run {
    Running {
        stop: watch::Sender<bool>,
        task: JoinHandle<PlanePipeline<RelayOutput>>,
    },
    /// Left the store; its pipeline waits here with its counts until it comes back.
    Parked(Box<PlanePipeline<RelayOutput>>),
    /// Between the two (only while the supervisor is handling a change).
    Moving,
}

/// The sentence a left source's status carries.
pub const LEFT_NOTE: &str = "left Dynamo's discovery store (its lease or TTL expired); resumes as this source when it registers again";

/// Follows the snapshots until `stop`; returns every discovered source's totals.
pub async fn run(config: FleetConfig, mut snapshots: watch::Receiver<Snapshot>, mut stop: watch::Receiver<bool>) -> Vec<SourceSummary> {
    let mut members: BTreeMap<WorkerRank, Member> = BTreeMap::new();
    let mut nats_noted: BTreeSet<WorkerRank> = BTreeSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            changed = snapshots.changed() => if changed.is_err() { break },
        }
        let snapshot = snapshots.borrow_and_update().clone();
        apply(&config, &mut members, &mut nats_noted, &snapshot).await;
    }
    let mut summaries = Vec::new();
    for (_, member) in std::mem::take(&mut members) {
        let pipeline = match member.run {
            Run::Running { stop, task } => {
                let _ = stop.send(true);
                task.await.ok()
            }
            Run::Parked(p) => Some(*p),
            Run::Moving => None,
        };
        summaries.extend(pipeline.map(|p| p.summary()));
    }
    summaries
}

async fn apply(
    config: &FleetConfig,
    members: &mut BTreeMap<WorkerRank, Member>,
    nats_noted: &mut BTreeSet<WorkerRank>,
    snapshot: &Snapshot,
) {
    let metrics = &config.metrics;
    for backend in &snapshot.backends {
        let labels = UrlLabels { url: backend.url.clone() };
        metrics.discovery_up.get_or_create(&labels).set(backend.error.is_none() as i64);
        metrics.discovery_failures.get_or_create(&labels).set(backend.failures as i64);
        metrics.discovery_bad_records.get_or_create(&labels).set(backend.bad_records.len() as i64);
    }
    let mut present = BTreeSet::new();
    for (&rank, relay) in &snapshot.fleet.relays {
        if !(config.takes)(relay.worker_id) {
            continue;
        }
        let endpoint = match &relay.transport {
            Transport::Zmq { endpoint } => endpoint.clone(),
            Transport::Nats { subject } => {
                if nats_noted.insert(rank) {
                    tracing::info!(
                        "discovery: relay of worker {} rank {} publishes on NATS ({subject}); one --event-plane nats://HOST:PORT reads every such relay",
                        relay.worker_id,
                        relay.dp_rank
                    );
                }
                continue;
            }
        };
        present.insert(rank);
        match members.get_mut(&rank) {
            None => {
                let url = format!("zmq://{}", endpoint.trim_start_matches("tcp://"));
                let info = config
                    .hub
                    .add_source(|index| proto::SourceInfo::discovered_relay(index, &relay.worker_id.to_string(), relay.dp_rank, &url));
                tracing::info!(source = %info.key, %endpoint, "discovered");
                let pipeline = (config.make_plane)(&info);
                let run = start(config, endpoint.clone(), pipeline);
                members.insert(rank, Member { info, endpoint, run });
            }
            Some(member) => {
                let moved = member.endpoint != endpoint;
                let parked = matches!(member.run, Run::Parked(_));
                if !moved && !parked {
                    continue;
                }
                let Some(pipeline) = take_pipeline(member).await else { continue };
                if moved {
                    member.endpoint = endpoint.clone();
                    member.info.endpoint = format!("zmq://{}", endpoint.trim_start_matches("tcp://"));
                    member.info.event_plane = Some(proto::EventPlaneInfo { url: member.info.endpoint.clone(), subject: None });
                    config.hub.update_source(member.info.clone());
                }
                tracing::info!(source = %member.info.key, %endpoint, "registered again");
                member.run = start(config, endpoint, pipeline);
            }
        }
    }
    // Before every backend answered once, a missing rank says nothing.
    if snapshot.complete {
        for (rank, member) in members.iter_mut() {
            if present.contains(rank) || matches!(member.run, Run::Parked(_)) {
                continue;
            }
            let Some(mut pipeline) = take_pipeline(member).await else { continue };
            tracing::info!(source = %member.info.key, "left the discovery store");
            pipeline.set_state(proto::ConnState::Left, Some(LEFT_NOTE.to_owned()));
            pipeline.flush_status();
            member.run = Run::Parked(Box::new(pipeline));
        }
    }
    let left = members.values().filter(|m| matches!(m.run, Run::Parked(_))).count();
    metrics.discovered_sources.set(members.len() as i64);
    metrics.discovered_left.set(left as i64);
}

fn start(config: &FleetConfig, endpoint: String, pipeline: PlanePipeline<RelayOutput>) -> Run {
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(intake::run_subscribed(endpoint, pipeline, config.intake.clone(), rx));
    Run::Running { stop, task }
}

/// Stops a member's intake (if it runs) and hands its pipeline over.
async fn take_pipeline(member: &mut Member) -> Option<PlanePipeline<RelayOutput>> {
    match std::mem::replace(&mut member.run, Run::Moving) {
        Run::Running { stop, task } => {
            let _ = stop.send(true);
            task.await.ok()
        }
        Run::Parked(p) => Some(*p),
        Run::Moving => None,
    }
}
