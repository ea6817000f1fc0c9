//! `kvscope check`: run the native normalizer over a capture, print a table per source (or
//! JSON), exit 3 when any verdict is fatal, so a rollout pipeline can gate on it.
//!
//! When the capture holds event-plane sources, the engine streams are also reconciled with what
//! Dynamo's relays published ([`crate::router`]): each engine source gets a `"router"` object
//! (kvscope-router's `RouterCounts`, `null` when its worker id is not Dynamo's decimal
//! `worker_id`), `totals.router` sums them, and the top-level `"router"` holds the relay policy,
//! the per-publisher counts, the unknown workers and the first plane decode errors. Without an
//! event-plane source every `"router"` is `null`.
//!
//! Frames go through the same [`crate::stream::Pipeline`] as on the live server, so gaps,
//! restarts and errors are counted the same way; verdicts come from `kvscope-normalize`, the
//! crate the dashboard runs too.

use std::path::Path;

use bytes::Bytes;
use kvscope_index::{IndexConfig, IndexCounts, IndexModel, IndexSourceId};
use kvscope_normalize::{Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_router::{Reconciler, ReconcilerConfig, RouterReport, RouterSourceId};
use kvscope_wire::Decoded;

use kvscope_protocol as proto;

mod report;
mod table;

pub use report::{
    CheckReport, FatalSummary, IndexReal, IndexSection, PlaneReport, RouterIndexReport, RouterSection, SourceCounts, SourceReport, Totals,
};
pub use table::render as table;

use crate::capture;
use crate::classify::Classifier;
use crate::exit::{self, FleetExit};
use crate::plane::PlanePipeline;
use crate::source_state::{AnyPipeline, TrackedSource};
use crate::stream::{NoOutput, Output, Pipeline, StreamOptions};

/// What a check runs under.
#[derive(Clone, Copy, Debug)]
pub struct CheckOptions {
    /// The indexer's block size, also the predicted relay's `kv_block_size`.
    pub block_size: u32,
    /// The indexer's normalizer policy (fatal verdicts, skip notes).
    pub policy: Policy,
    /// The policy Dynamo's relay is predicted to run (`--relay-policy`).
    pub relay_policy: Policy,
    /// The index model's bound (`--index-max-nodes`).
    pub index_max_nodes: usize,
    pub stream: StreamOptions,
}

/// Keeps the engine batches a pipeline relays (seq, payload, replayed, and the classifier's
/// decode), for the reconciler and the index model: drained after each record, so the decode is
/// held only that long and the batch is decoded once.
#[derive(Debug, Default)]
struct Relayed(Vec<(u64, Vec<u8>, bool, Option<Decoded>)>);

impl Output for Relayed {
    fn frame(&mut self, f: &proto::Frame, _: &[Bytes], decoded: Option<Decoded>) {
        self.0.push((f.seq, f.payload.clone(), f.replayed, decoded));
    }
    fn takes_decoded(&self) -> bool {
        true
    }
    fn frame_error(&mut self, _: &proto::FrameError, _: &[Bytes]) {}
    fn status(&mut self, _: &proto::SourceStatus) {}
}

/// A source of the capture as `check` reads it.
enum Fed {
    /// An engine's stream or an event plane's, through the live server's pipelines.
    Stream(Box<AnyPipeline<Relayed, NoOutput>>),
    RouterIndex(Box<RealIndex>),
    /// The discovery events of a server that found its fleet while recording: a source they
    /// announce joins the check at the index its records use.
    Discovery,
}

/// Where an engine source's batches go besides its pipeline.
#[derive(Clone, Copy, Debug)]
struct Lanes {
    /// Its lane of the reconciler, when the capture has an event plane and its worker id is
    /// Dynamo's.
    router: Option<RouterSourceId>,
    index: IndexSourceId,
}

/// A router-index source's reads, and the last dump compared with the model.
#[derive(Debug, Default)]
struct RealIndex {
    url: String,
    reads: u64,
    dumps: u64,
    errors: u64,
    first_errors: Vec<String>,
    /// The last dump that parsed, compared with the Dynamo 1.6.1 model as of its record.
    last: Option<RealComparison>,
}

#[derive(Debug)]
struct RealComparison {
    recv_time_nanos: u64,
    report: kvscope_index::IndexReport,
    differences: u64,
    first_differences: Vec<kvscope_index::IndexDifference>,
}

/// Differences kept per read for the report.
const DIFFERENCES_KEPT: usize = 16;

impl RealIndex {
    fn record(&mut self, frames: &[Bytes], recv_time_nanos: u64, model: &IndexModel) {
        self.reads += 1;
        let (what, body) = match frames {
            [what, body] => (what.as_ref(), body.as_ref()),
            _ => return self.error(format!("a record of {} frames (want 2: what, body)", frames.len())),
        };
        match what {
            crate::router_index::DUMP => match kvscope_index::parse_dump(body) {
                Ok(parts) => {
                    self.dumps += 1;
                    let sets = kvscope_index::dump_block_sets(&parts);
                    // A real index is Dynamo 1.6.1's: compared with the model of that policy.
                    let Some(side) = model.side(Policy::DYNAMO_1_6_1) else { return };
                    let (differences, first_differences) = model.differences(side, &sets, DIFFERENCES_KEPT);
                    let report = model.report_for(side, &sets, &kvscope_index::DynamoIndex::from_dump(&parts));
                    self.last = Some(RealComparison { recv_time_nanos, report, differences, first_differences });
                }
                Err(e) => self.error(e),
            },
            crate::router_index::ERROR => self.error(String::from_utf8_lossy(body).into_owned()),
            _ => {}
        }
    }

    fn error(&mut self, text: String) {
        self.errors += 1;
        if self.first_errors.len() < 8 {
            self.first_errors.push(text);
        }
    }
}

/// Checks a capture under one block size and policy.
pub fn check(path: &Path, opts: &CheckOptions) -> Result<CheckReport, String> {
    let mut reader = capture::open(path)?;
    let mut infos = reader.header().sources.clone();
    // A discovering recorder may find relays later: reconcile from the start.
    let any_plane = infos.iter().any(|i| matches!(i.kind, proto::SourceKind::EventPlane | proto::SourceKind::Discovery));
    let mut reconciler = any_plane.then(|| Reconciler::new(ReconcilerConfig::default()));
    // The index of the checked policy first; a real index read with the capture is Dynamo
    // 1.6.1's, so that policy's index is modelled too.
    let any_real = infos.iter().any(|i| i.kind == proto::SourceKind::RouterIndex);
    let policies = if any_real { vec![opts.policy, Policy::DYNAMO_1_6_1] } else { vec![opts.policy] };
    let mut index = IndexModel::new(IndexConfig { max_blocks: opts.index_max_nodes, ..IndexConfig::sides(opts.block_size, &policies) });
    let mut lanes: Vec<Option<Lanes>> = Vec::with_capacity(infos.len());
    let mut pipelines: Vec<Fed> = infos
        .iter()
        .map(|info| {
            lanes.push(Lanes::new(info, opts, reconciler.as_mut(), &mut index));
            Fed::new(info, opts)
        })
        .collect();
    let mut stray = 0u64;
    let mut fleet_exit = FleetExit::default();
    while let Some(record) = reader.next_record().map_err(|e| e.with_path(&path.display().to_string()).to_string())? {
        let frames: Vec<Bytes> = record.frames.into_iter().map(|f| Bytes::from(f.into_vec())).collect();
        let i = record.source as usize;
        let Some(fed) = pipelines.get_mut(i) else {
            stray += 1;
            continue;
        };
        let before = totals_of(fed);
        match fed {
            Fed::Stream(p) => {
                if let (Some(envelope), Some(r)) = (p.capture_record(frames, record.recv_time_nanos, record.replayed), reconciler.as_mut())
                {
                    // A payload that does not decode is counted on its publisher.
                    let _ = r.push_envelope(&envelope);
                }
                if let (AnyPipeline::Engine(p), Some(lanes)) = (&mut **p, lanes[i]) {
                    for (seq, payload, replayed, decoded) in p.output.0.drain(..) {
                        // A payload that does not decode is counted by both (the reconciler's
                        // engine_decode_errors; the model has nothing to apply).
                        let router = reconciler.as_mut().zip(lanes.router);
                        let batch = (seq, &payload[..], replayed);
                        crate::router::push_engine_batch(router, Some((&mut index, lanes.index)), batch, decoded.as_ref());
                    }
                }
            }
            Fed::RouterIndex(real) => real.record(&frames, record.recv_time_nanos, &index),
            Fed::Discovery => {
                let event =
                    proto::capture::DiscoveryEvent::parse(&frames).map_err(|e| format!("{}: {e}; the file is corrupt", path.display()))?;
                // A new source takes the next index; a known one that moved or left keeps its
                // pipeline (what it reads next continues its stream).
                if let proto::capture::DiscoveryEvent::Source(info) = event
                    && info.index as usize == pipelines.len()
                {
                    lanes.push(Lanes::new(&info, opts, reconciler.as_mut(), &mut index));
                    pipelines.push(Fed::new(&info, opts));
                    infos.push(info);
                }
                continue;
            }
        }
        let after = totals_of(&pipelines[i]);
        fleet_exit.record(i, record.recv_time_nanos, before, after, || pipelines.iter().map(totals_of).collect());
    }
    if stray > 0 {
        return Err(format!(
            "{}: {stray} records name a source the header does not list ({} sources); the file is corrupt",
            path.display(),
            infos.len()
        ));
    }
    let router: Option<RouterReport> = reconciler.map(|mut r| {
        r.finish();
        r.report()
    });

    let index = index.report();
    let mut router_indexes: Vec<&RealIndex> = Vec::new();
    let mut sources = Vec::new();
    let mut event_planes = Vec::new();
    let mut totals = Totals::default();
    for ((info, fed), lanes) in infos.iter().zip(&pipelines).zip(&lanes) {
        let (p, lanes) = match (fed, lanes) {
            (Fed::Stream(s), lanes) => match (&**s, lanes) {
                (AnyPipeline::Engine(p), Some(lanes)) => (p, lanes),
                (AnyPipeline::Plane(p), _) => {
                    event_planes.push(plane_report(info, p));
                    continue;
                }
                (AnyPipeline::Engine(_), None) => {
                    return Err(format!("{}: source {}: an engine source without its lanes", path.display(), info.key));
                }
            },
            (Fed::RouterIndex(real), _) => {
                router_indexes.push(real);
                continue;
            }
            (Fed::Discovery, _) => continue,
        };

        let Some(classifier) = p.classifier() else {
            return Err(format!("{}: source {}: its pipeline was built without a classifier", path.display(), info.key));
        };
        let reconciled = router.as_ref().zip(lanes.router).and_then(|(r, id)| r.sources.get(id.0 as usize));
        let mut source = source_report(info, info.block_size_or(opts.block_size), p.counters(), classifier, reconciled);
        source.index = index.sources.get(lanes.index.0 as usize).map(|s| s.counts.clone()).unwrap_or_default();
        // The last real dump's view of this source, with the differences that concern it.
        if let Some(last) = router_indexes_last(&pipelines) {
            let real = last.report.sources.get(lanes.index.0 as usize).map(|s| s.counts.clone()).unwrap_or_default();
            let differences: Vec<_> =
                last.first_differences.iter().filter(|d| d.source.as_deref() == Some(info.key.as_str())).cloned().collect();
            source.index_real = Some(IndexReal { counts: real, differences });
        }
        totals.add(&source);
        sources.push(source);
    }
    totals.router = router.as_ref().map(|r| r.totals.clone());
    totals.index = index.totals.clone();
    totals.index_real = router_indexes_last(&pipelines).map(|l| l.report.totals.clone());
    let keys: Vec<String> = infos.iter().map(|i| i.key.clone()).collect();
    let finals: Vec<exit::Totals> = pipelines.iter().map(totals_of).collect();
    let fleet = fleet_exit.report(&keys, &finals, |i| {
        let p = pipelines.get(i)?.engine()?;
        let (normalizer, id) = p.classifier()?.normalizer(0);
        normalizer.counters(id).first_fatal.as_ref().map(|l| (l.seq, l.event_index, l.text.clone()))
    });
    Ok(CheckReport {
        file: path.display().to_string(),
        block_size: opts.block_size,
        policy: opts.policy.name,
        sources,
        event_planes,
        router: router.map(|r| RouterSection {
            relay_policy: opts.relay_policy.name,
            kv_block_size: opts.block_size,
            clean: r.is_clean(),
            publishers: r.publishers,
            unknown_workers: r.unknown_workers,
            unattributed_decode_errors: r.unattributed_decode_errors,
            first_errors: r.first_errors,
            shared_keys: r.shared_keys,
        }),
        totals,
        fleet,
        truncated: reader.truncated().map(|t| format!("{}: {t}", path.display())),
        index: IndexSection {
            policy: index.policy,
            indexer_exits: index.indexer_exits,
            first_exit: index.first_exit,
            refused_blocks: index.refused_blocks,
            bound: opts.index_max_nodes,
        },
        router_indexes: router_indexes.iter().map(|r| r.report()).collect(),
    })
}

impl Fed {
    /// The pipeline a source of the capture is read through.
    fn new(info: &proto::SourceInfo, opts: &CheckOptions) -> Fed {
        let options = opts.stream;
        match info.kind {
            proto::SourceKind::Engine => {
                let block_size = info.block_size_or(opts.block_size);
                let classifier = Classifier::new(&info.worker_id, info.dp_rank, block_size, &[opts.policy], None);
                let pipeline = Pipeline::new(info, Some(classifier), None, Relayed::default()).with_options(options);
                Fed::Stream(Box::new(AnyPipeline::Engine(pipeline)))
            }
            proto::SourceKind::EventPlane => {
                Fed::Stream(Box::new(AnyPipeline::Plane(PlanePipeline::new(info, options.max_frame_bytes, None, NoOutput))))
            }
            proto::SourceKind::RouterIndex => Fed::RouterIndex(Box::new(RealIndex { url: info.endpoint.clone(), ..RealIndex::default() })),
            proto::SourceKind::Discovery => Fed::Discovery,
        }
    }

    /// An engine source's pipeline.
    fn engine(&self) -> Option<&Pipeline<Relayed>> {
        match self {
            Fed::Stream(s) => match &**s {
                AnyPipeline::Engine(p) => Some(p),
                AnyPipeline::Plane(_) => None,
            },
            Fed::RouterIndex(_) | Fed::Discovery => None,
        }
    }
}

impl Lanes {
    /// An engine source's lanes: of the reconciler (when the capture has an event plane and its
    /// worker id is Dynamo's) and of the index model. None for other kinds of source.
    fn new(info: &proto::SourceInfo, opts: &CheckOptions, reconciler: Option<&mut Reconciler>, index: &mut IndexModel) -> Option<Lanes> {
        if info.kind != proto::SourceKind::Engine {
            return None;
        }
        let block_size = info.block_size_or(opts.block_size);
        let relay = crate::router::relay_config(&info.worker_id, info.dp_rank, block_size, opts.relay_policy);
        let router = reconciler.zip(relay).map(|(r, relay)| r.add_source(&info.key, relay));
        Some(Lanes { router, index: index.add_source_at(&info.key, &info.worker_id, info.dp_rank, block_size) })
    }
}

impl RealIndex {
    /// What `check` says of a real index read with the capture.
    fn report(&self) -> RouterIndexReport {
        RouterIndexReport {
            url: self.url.clone(),
            reads: self.reads,
            dumps: self.dumps,
            errors: self.errors,
            first_errors: self.first_errors.clone(),
            last_dump_utc: self.last.as_ref().map(|l| kvscope_protocol::time::utc(l.recv_time_nanos)),
            differences: self.last.as_ref().map_or(0, |l| l.differences),
            first_differences: self.last.as_ref().map(|l| l.first_differences.clone()).unwrap_or_default(),
        }
    }
}

/// One engine source's part of the report, from its stream counters and its normalizer.
fn source_report(
    info: &proto::SourceInfo,
    block_size: u32,
    sc: &proto::SourceCounters,
    classifier: &Classifier,
    reconciled: Option<&kvscope_router::SourceReport>,
) -> SourceReport {
    let (normalizer, id) = classifier.normalizer(0);
    let c = normalizer.counters(id);
    let applied_under = |tier| VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Apply).map(|l| c.verdicts(tier, *l)).sum();
    let first = c.first_fatal.as_ref();
    SourceReport {
        worker_id: info.worker_id.clone(),
        dp_rank: info.dp_rank,
        key: info.key.clone(),
        block_size,
        counts: SourceCounts {
            frames: sc.frames,
            events: c.total_events(),
            frame_errors: sc.frame_errors,
            decode_errors: sc.decode_errors,
            gaps: sc.gaps,
            lost_frames: sc.lost_frames,
            replayed_frames: sc.replayed_frames,
            restarts: sc.restarts,
            applied: StorageTier::ALL.iter().map(|&t| (t.label(), applied_under(Some(t)))).collect(),
            applied_without_tier: applied_under(None),
            skipped: VerdictLabel::ALL
                .iter()
                .filter(|l| l.outcome() == Outcome::Skip)
                .map(|&l| (l, c.verdicts_by_label(l)))
                .filter(|&(_, n)| n > 0)
                .collect(),
        },
        fatal: FatalSummary { count: c.fatal_count, first_seq: first.map(|l| l.seq), first_error: first.map(|l| l.text.clone()) },
        router: reconciled.map(|s| s.router.clone()),
        router_differences: reconciled.map(|s| s.differences.clone()),
        index: IndexCounts::default(),
        index_real: None,
    }
}

/// The last dump any router-index source read, compared with the model.
fn router_indexes_last(pipelines: &[Fed]) -> Option<&RealComparison> {
    pipelines
        .iter()
        .filter_map(|p| match p {
            Fed::RouterIndex(r) => r.last.as_ref(),
            _ => None,
        })
        .max_by_key(|l| l.recv_time_nanos)
}

/// An engine source's running event and fatal totals (zero for an event plane).
fn totals_of(p: &Fed) -> exit::Totals {
    let Some(p) = p.engine() else { return exit::Totals::default() };
    let Some(c) = p.classifier() else { return exit::Totals::default() };
    let (normalizer, id) = c.normalizer(0);
    let counters = normalizer.counters(id);
    exit::Totals { events: counters.total_events(), fatal: counters.fatal_count }
}

/// An event-plane source's counters (what arrived, per publisher gaps, undecodable envelopes).
fn plane_report(info: &proto::SourceInfo, p: &PlanePipeline<NoOutput>) -> PlaneReport {
    let c = p.counters();
    PlaneReport {
        key: info.key.clone(),
        url: info.event_plane.as_ref().map(|e| e.url.clone()),
        subject: info.event_plane.as_ref().and_then(|e| e.subject.clone()),
        frames: c.frames,
        publishers: p.num_publishers(),
        frame_errors: c.frame_errors,
        gaps: c.gaps,
        lost_frames: c.lost_frames,
        restarts: c.restarts,
    }
}

#[cfg(test)]
mod tests;
