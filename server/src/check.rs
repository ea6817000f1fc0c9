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
use kvscope_normalize::{Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_router::{Reconciler, ReconcilerConfig, RouterReport, RouterSourceId};
use serde_json::{Map, Value, json};

use kvscope_protocol as proto;

use crate::capture;
use crate::classify::Classifier;
use crate::exit::{FleetExit, Totals};
use crate::plane::PlanePipeline;
use crate::stream::{NoOutput, Output, Pipeline, StreamOptions};

/// The result of a check, ready to print.
#[derive(Debug)]
pub struct Report {
    pub json: Value,
    pub fatal: bool,
    /// The reconciliation with the event plane found something other than matches.
    pub router_mismatch: bool,
    pub table: String,
    pub truncation: Option<String>,
}

/// What a check runs under.
#[derive(Clone, Copy, Debug)]
pub struct CheckOptions {
    /// The indexer's block size, also the predicted relay's `kv_block_size`.
    pub block_size: u32,
    /// The indexer's normalizer policy (fatal verdicts, skip notes).
    pub policy: Policy,
    /// The policy Dynamo's relay is predicted to run (`--relay-policy`).
    pub relay_policy: Policy,
    pub stream: StreamOptions,
}

/// Keeps the engine batches a pipeline relays (seq, payload), for the reconciler.
#[derive(Debug, Default)]
struct Relayed(Vec<(u64, Vec<u8>)>);

impl Output for Relayed {
    fn frame(&mut self, f: &proto::Frame, _: &[Bytes]) {
        self.0.push((f.seq, f.payload.clone()));
    }
    fn frame_error(&mut self, _: &proto::FrameError, _: &[Bytes]) {}
    fn status(&mut self, _: &proto::SourceStatus) {}
}

enum Fed {
    Engine(Box<Pipeline<Relayed>>, Option<RouterSourceId>),
    Plane(Box<PlanePipeline<NoOutput>>),
}

fn add(total: &mut Map<String, Value>, key: &str, v: &Value) {
    match v {
        Value::Number(n) => {
            let sum = total.get(key).and_then(Value::as_u64).unwrap_or(0) + n.as_u64().unwrap_or(0);
            total.insert(key.to_owned(), json!(sum));
        }
        Value::Object(o) => {
            let entry = total.entry(key.to_owned()).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(inner) = entry {
                for (k, v) in o {
                    add(inner, k, v);
                }
            }
        }
        _ => {}
    }
}

/// Checks a capture under one block size and policy.
pub fn check(path: &Path, opts: &CheckOptions) -> Result<Report, String> {
    let (block_size, policy) = (opts.block_size, opts.policy);
    let options = opts.stream;
    let mut reader = capture::open(path)?;
    let infos = reader.header().sources.clone();
    let any_plane = infos.iter().any(|i| i.kind == proto::SourceKind::EventPlane);
    let mut reconciler = any_plane.then(|| Reconciler::new(ReconcilerConfig::default()));
    let mut pipelines: Vec<Fed> = infos
        .iter()
        .map(|info| match info.kind {
            proto::SourceKind::Engine => {
                let classifier = Classifier::new(&info.worker_id, info.dp_rank, block_size, &[policy], None);
                let relay = crate::router::relay_config(&info.worker_id, info.dp_rank, block_size, opts.relay_policy);
                let id = reconciler.as_mut().zip(relay).map(|(r, relay)| r.add_source(&info.key, relay));
                Fed::Engine(Box::new(Pipeline::new(info, Some(classifier), None, Relayed::default()).with_options(options)), id)
            }
            proto::SourceKind::EventPlane => Fed::Plane(Box::new(PlanePipeline::new(info, options.max_frame_bytes, None, NoOutput))),
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
            Fed::Engine(p, id) => {
                p.capture_record(frames, record.recv_time_nanos, record.replayed);
                for (seq, payload) in p.output.0.drain(..) {
                    if let (Some(r), Some(id)) = (reconciler.as_mut(), *id) {
                        // A payload that does not decode is counted (engine_decode_errors).
                        let _ = r.push_engine(id, seq, &payload);
                    }
                }
            }
            Fed::Plane(p) => {
                if let (Some(env), Some(r)) = (p.message(frames, record.recv_time_nanos), reconciler.as_mut()) {
                    // A payload that does not decode is counted on its publisher.
                    let _ = r.push_envelope(&env);
                }
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
    let truncation = reader.truncated().map(|t| format!("{}: {t}", path.display()));

    let mut sources = Vec::new();
    let mut totals = Map::new();
    let mut any_fatal = false;
    let mut table = String::new();
    table.push_str(&format!(
        "{:<12} {:>8} {:>8} {:>6} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  first fatal\n",
        "source", "frames", "events", "f.err", "d.err", "gaps", "restarts", "device", "host", "disk", "external", "fatal"
    ));
    let mut notes = Vec::new();
    let mut planes = Vec::new();
    let mut router_lines = Vec::new();
    for (info, p) in infos.iter().zip(&pipelines) {
        let (p, router_id) = match p {
            Fed::Engine(p, id) => (p, *id),
            Fed::Plane(p) => {
                planes.push(plane_json(info, p));
                continue;
            }
        };
        let Some(classifier) = p.classifier() else {
            return Err(format!("{}: source {}: its pipeline was built without a classifier", path.display(), info.key));
        };
        let (normalizer, id) = classifier.normalizer(0);
        let c = normalizer.counters(id);
        let sc = p.counters();
        let mut applied = Map::new();
        for tier in StorageTier::ALL {
            let n: u64 = VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Apply).map(|l| c.verdicts(Some(tier), *l)).sum();
            applied.insert(tier.label().to_owned(), json!(n));
        }
        let cleared: u64 = VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Apply).map(|l| c.verdicts(None, *l)).sum();
        let mut skipped = Map::new();
        for label in VerdictLabel::ALL.iter().filter(|l| l.outcome() == Outcome::Skip) {
            let n = c.verdicts_by_label(*label);
            if n > 0 {
                skipped.insert(label.as_str().to_owned(), json!(n));
            }
        }
        let first = c.first_fatal.as_ref();
        any_fatal |= c.fatal_count > 0;
        let source = json!({
            "worker_id": info.worker_id,
            "dp_rank": info.dp_rank,
            "key": info.key,
            "frames": sc.frames,
            "events": c.total_events(),
            "frame_errors": sc.frame_errors,
            "decode_errors": sc.decode_errors,
            "gaps": sc.gaps,
            "lost_frames": sc.lost_frames,
            "replayed_frames": sc.replayed_frames,
            "restarts": sc.restarts,
            "applied": applied,
            "applied_without_tier": cleared,
            "skipped": skipped,
            "fatal": {
                "count": c.fatal_count,
                "first_seq": first.map(|l| l.seq),
                "first_error": first.map(|l| l.text.clone()),
            },
        });
        for key in [
            "frames",
            "events",
            "frame_errors",
            "decode_errors",
            "gaps",
            "lost_frames",
            "replayed_frames",
            "restarts",
            "applied",
            "applied_without_tier",
            "skipped",
        ] {
            add(&mut totals, key, &source[key]);
        }
        let mut source = source;
        let reconciled = router.as_ref().zip(router_id).and_then(|(r, id)| r.sources.get(id.0 as usize));
        source["router"] = match reconciled {
            Some(s) => serde_json::to_value(&s.router).map_err(|e| e.to_string())?,
            None => Value::Null,
        };
        if let Some(s) = reconciled {
            source["router_differences"] = serde_json::to_value(&s.differences).map_err(|e| e.to_string())?;
            router_lines.push(crate::router::table_line(&info.key, &s.router));
        } else if router.is_some() {
            notes.push(crate::router::not_reconciled_note(&info.key, &info.worker_id));
        }
        sources.push(source);
        let fatal_total = totals.get("fatal").and_then(|f| f["count"].as_u64()).unwrap_or(0) + c.fatal_count;
        totals.insert("fatal".to_owned(), json!({ "count": fatal_total }));
        let a = |t: &str| applied.get(t).and_then(Value::as_u64).unwrap_or(0);
        table.push_str(&format!(
            "{:<12} {:>8} {:>8} {:>6} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {}\n",
            info.key,
            sc.frames,
            c.total_events(),
            sc.frame_errors,
            sc.decode_errors,
            sc.gaps,
            sc.restarts,
            a("device"),
            a("host_pinned"),
            a("disk"),
            a("external"),
            c.fatal_count,
            first.map_or("-".to_owned(), |l| format!("seq {}", l.seq)),
        ));
        for (label, _, summary) in c.summaries() {
            if label.outcome() == Outcome::Skip {
                notes.push(format!("  {}: {summary}", info.key));
            }
        }
        if let Some(l) = first {
            notes.push(format!("  {}", l.text));
        }
    }
    if !router_lines.is_empty() {
        table.push('\n');
        table.push_str(&router_lines.join("\n"));
        table.push('\n');
    }
    if !notes.is_empty() {
        table.push('\n');
        table.push_str(&notes.join("\n"));
        table.push('\n');
    }
    table.push_str(&if any_fatal {
        format!("\nFATAL under policy {} at block size {block_size}: an indexer with this configuration would stop.\n", policy.name)
    } else {
        format!("\nno fatal verdict under policy {} at block size {block_size}.\n", policy.name)
    });
    totals.entry("fatal".to_owned()).or_insert_with(|| json!({"count": 0}));
    let router_json = match &router {
        Some(r) => {
            totals.insert("router".to_owned(), serde_json::to_value(&r.totals).map_err(|e| e.to_string())?);
            json!({
                "relay_policy": opts.relay_policy.name,
                "kv_block_size": block_size,
                "publishers": r.publishers,
                "unknown_workers": r.unknown_workers,
                "unattributed_decode_errors": r.unattributed_decode_errors,
                "first_errors": r.first_errors,
            })
        }
        None => {
            totals.insert("router".to_owned(), Value::Null);
            Value::Null
        }
    };
    for plane in &planes {
        table.push_str(&format!(
            "event plane {}: {} messages from {} publisher(s), {} frame errors, {} gaps ({} lost), {} restarts\n",
            plane["key"].as_str().unwrap_or(""),
            plane["frames"],
            plane["publishers"],
            plane["frame_errors"],
            plane["gaps"],
            plane["lost_frames"],
            plane["restarts"],
        ));
    }
    let keys: Vec<String> = infos.iter().map(|i| i.key.clone()).collect();
    let finals: Vec<Totals> = pipelines.iter().map(totals_of).collect();
    let fleet = fleet_exit.to_json(&keys, &finals, |i| {
        let Fed::Engine(p, _) = pipelines.get(i)? else { return None };
        let (normalizer, id) = p.classifier()?.normalizer(0);
        normalizer.counters(id).first_fatal.as_ref().map(|l| (l.seq, l.event_index, l.text.clone()))
    });
    if let Some(first) = fleet["first_fatal"].as_object() {
        table.push_str(&format!(
            "the router's indexer (one for every source) exits at {} seq {} ({}); {} later events would stop a restarted one again, {} events arrive after it\n",
            first["source"].as_str().unwrap_or("?"),
            first["seq"],
            first["utc"].as_str().unwrap_or("?"),
            fleet["fatal_after_first_fatal"],
            fleet["events_after_first_fatal"],
        ));
    }
    if let Some(r) = &router {
        for u in &r.unknown_workers {
            table.push_str(&format!(
                "event plane: {} RouterEvents for worker {} dp_rank {}, which no engine source has (unknown worker)\n",
                u.events, u.worker_id, u.dp_rank
            ));
        }
        let decode_errors: u64 = r.publishers.iter().map(|p| p.decode_errors).sum::<u64>() + r.unattributed_decode_errors;
        if decode_errors > 0 {
            table.push_str(&format!("event plane: {decode_errors} messages whose RouterEvents did not decode\n"));
        }
        table.push_str(&format!(
            "router reconciled under relay policy {} at kv_block_size {block_size}{}\n",
            opts.relay_policy.name,
            if crate::router::has_mismatch(r) { ": the router's view differs from what the relays should have published" } else { "" }
        ));
    }
    let json = json!({
        "file": path.display().to_string(),
        "block_size": block_size,
        "policy": policy.name,
        "sources": Value::Array(sources),
        "event_planes": Value::Array(planes),
        "router": router_json,
        "totals": Value::Object(totals),
        "fleet": fleet,
        "truncated": truncation,
    });
    let router_mismatch = router.as_ref().is_some_and(crate::router::has_mismatch);
    Ok(Report { json, fatal: any_fatal, router_mismatch, table, truncation })
}

/// An engine source's running event and fatal totals (zero for an event plane).
fn totals_of(p: &Fed) -> Totals {
    let Fed::Engine(p, _) = p else { return Totals::default() };
    let Some(c) = p.classifier() else { return Totals::default() };
    let (normalizer, id) = c.normalizer(0);
    let counters = normalizer.counters(id);
    Totals { events: counters.total_events(), fatal: counters.fatal_count }
}

/// An event-plane source's counters (what arrived, per publisher gaps, undecodable envelopes).
fn plane_json(info: &proto::SourceInfo, p: &PlanePipeline<NoOutput>) -> Value {
    let c = p.counters();
    json!({
        "key": info.key,
        "url": info.event_plane.as_ref().map(|e| e.url.clone()),
        "subject": info.event_plane.as_ref().and_then(|e| e.subject.clone()),
        "frames": c.frames,
        "publishers": p.num_publishers(),
        "frame_errors": c.frame_errors,
        "gaps": c.gaps,
        "lost_frames": c.lost_frames,
        "restarts": c.restarts,
    })
}
