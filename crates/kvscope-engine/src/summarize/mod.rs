//! The model, summarised for the page: one function per part of the page, each building the
//! display-ready struct of `kvscope_engine_protocol::view` from the [`Model`] and what the page
//! shows ([`ViewQuery`]). The page renders these and decides nothing about the stream.
//!
//! [`Sent`] remembers what was last sent of each part, so a summary carries only what changed:
//! at 512 sources the rows change every flush, the rules never.

pub mod cards;
mod headline;
mod inspector;
mod pixels;
pub mod timeline;
pub mod trees;

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::fmt::{human_bytes, human_duration_ms, thousands};
use kvscope_engine_protocol::view::{Bar, CaptureProgress, ConnBadge, ConnState, IntakeLine, Meta, OriginKind, Quality, RuleRow, Tone};
use serde::Serialize;

use crate::model::intake::IntakeStatus;
use crate::model::live::Behind;
use crate::model::{MemoryUse, Model, Origin};

pub use cards::{cards, planes};
pub use headline::{headline, headline_of, router_lines};
pub use inspector::{
    IndexQuery, InspectorCache, InspectorPart, LogsPart, event_index_lines, fields, index_query, logs, logs_of, logs_part,
};
pub use timeline::{TimelineImage, hover_text, pick_at};
pub use trees::trees;

/// Wall-clock time of a Unix-nanosecond stamp, `HH:MM:SS.mmm UTC` (the server protocol crate's
/// one formatter, so the page and `check` print the same time).
pub fn clock(nanos: u64) -> String {
    format!("{} UTC", kvscope_protocol::time::utc_time_of_day(nanos))
}

/// What the engine's own edges add to the fleet bar: the socket, the capture being opened, the
/// intake queue and the engine's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EdgeState {
    pub conn: ConnState,
    pub capture: CaptureProgress,
    pub intake: IntakeStatus,
    pub wasm_bytes: u64,
    /// The fleet bar's line while summaries go less often than every 100 ms
    /// ([`crate::pace::Pace::note`]).
    pub pace: Option<String>,
}

/// The policies, the rules they run, the block size, where the frames come from.
pub fn meta(m: &Model) -> Meta {
    let rules = |side: Side| {
        policy_rules(m.policy_name(side))
            .into_iter()
            .map(|r| RuleRow {
                step: r.step.to_string(),
                name: r.name.to_owned(),
                checks: r.checks.to_owned(),
                decides: r.decides.to_owned(),
            })
            .collect()
    };
    Meta {
        policies: [m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned()],
        presets: crate::model::policy_run::policy_names().into_iter().map(str::to_owned).collect(),
        rules: [rules(Side::A), rules(Side::B)],
        block_size: m.config().block_size,
        trees_side: m.config().trees,
        origin: match m.origin {
            Origin::Empty => OriginKind::Empty,
            Origin::Server { .. } => OriginKind::Server,
            Origin::Capture { .. } => OriginKind::Capture,
        },
        has_router: m.router().is_some(),
        defaults_note: m.defaults_note.clone().unwrap_or_default(),
        config_error: m.config_error.clone().unwrap_or_default(),
        retain_mib: (m.config().retain_bytes / (1024 * 1024)) as u64,
        sources: m.sources().iter().map(|s| s.key.clone()).collect(),
    }
}

/// The rules a policy runs, in order (the same words as `kvscope rules --policy P`); none for a
/// name that is no preset.
pub fn policy_rules(policy: &str) -> Vec<&'static kvscope_normalize::Rule> {
    policy
        .parse::<kvscope_normalize::Policy>()
        .map(|p| kvscope_normalize::RuleSet::for_policy(&p).rules().map(|(_, r)| r).collect())
        .unwrap_or_default()
}

/// One shard's part of the fleet bar ([`crate::model::shard`]): its own sources' figures and
/// its model's; what the socket, the intake and the page say is the [`EdgeState`]'s.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct BarPart {
    origin: String,
    /// Where the data comes from: a server (live, a rate) or a capture (a span and a count).
    live_server: bool,
    capture: bool,
    live: usize,
    total: usize,
    planes: usize,
    left: usize,
    events: u64,
    marked: Option<(f64, f64)>,
    events_per_second: f64,
    memory: MemoryUse,
    catching_up: Option<(u64, u64)>,
    lagged_frames: u64,
    recording: Option<(String, bool)>,
    discovery: Option<(String, bool)>,
    behind: Option<crate::model::live::Behind>,
}

/// This model's part of the fleet bar (`waiting`: the intake holds messages not yet applied).
pub fn bar_part(m: &Model, waiting: bool, now_ms: f64) -> BarPart {
    let origin = match &m.origin {
        Origin::Empty => "waiting for the server's hello".to_owned(),
        Origin::Server { mode, detail, .. } => format!("{mode}: {detail}"),
        Origin::Capture { name, truncated } => match truncated {
            Some(_) => format!("capture {name} (last record cut)"),
            None => format!("capture {name}"),
        },
    };
    // Live means analysed here: a socket that is open but whose events were not analysed is
    // not live.
    let live = m
        .engine_sources()
        .filter(|s| s.status.as_ref().is_some_and(|st| st.state == kvscope_protocol::ConnState::Live) && s.counts(Side::A).events > 0)
        .count();
    // Sources that left the discovery store keep their rows; the bar says how many.
    let left =
        m.sources().iter().filter(|s| s.own && s.status.as_ref().is_some_and(|st| st.state == kvscope_protocol::ConnState::Left)).count();
    BarPart {
        origin,
        live_server: matches!(m.origin, Origin::Server { .. }),
        capture: matches!(m.origin, Origin::Capture { .. }),
        live,
        total: m.engine_sources().count(),
        planes: m.plane_sources().count(),
        left,
        events: m.engine_sources().map(|s| s.counts(Side::A).events).sum(),
        marked: m.marked_span_ms(),
        events_per_second: m.events_per_second(now_ms),
        memory: m.memory(),
        catching_up: m.catching_up(),
        lagged_frames: m.lagged_frames,
        recording: m.recording.as_ref().map(|r| (r.summary(), r.state == kvscope_protocol::RecordingState::Failed)),
        discovery: m.discovery.as_ref().map(|d| (d.summary(), d.failing())),
        behind: m.live.behind(waiting, now_ms),
    }
}

/// The fleet bar's figures from the shards' parts (every shard reads the same hello, history
/// and notices: those figures are any one's) and the engine's edges.
pub fn bar_of(parts: &[&BarPart], edges: &EdgeState) -> Bar {
    let first = parts.first().map_or_else(BarPart::default, |p| (*p).clone());
    let sum = |f: fn(&BarPart) -> usize| parts.iter().map(|p| f(p)).sum::<usize>();
    // Workers are the engine sources; event planes are counted apart.
    let (live, total, planes, left) = (sum(|p| p.live), sum(|p| p.total), sum(|p| p.planes), sum(|p| p.left));
    let planes = if planes > 0 { format!(" · {planes} event planes") } else { String::new() };
    let left = if left > 0 { format!(" · {left} left") } else { String::new() };
    let sources =
        if first.live_server { format!("{live} of {total} workers live{planes}{left}") } else { format!("{total} workers{planes}{left}") };
    // A capture has a span and a count, not a rate.
    let rate = if first.capture {
        let events: u64 = parts.iter().map(|p| p.events).sum();
        let (a, b) = crate::model::timeline_span(crate::model::marked_union(parts.iter().filter_map(|p| p.marked)));
        format!("{} events over {}", thousands(events), human_duration_ms(b - a))
    } else {
        format!("{} events/s", thousands(parts.iter().map(|p| p.events_per_second).sum::<f64>().round() as u64))
    };
    let mut memory = MemoryUse::default();
    parts.iter().for_each(|p| memory.add(&p.memory));
    // The page is as far behind as its furthest shard, and catches up at that one's pace.
    let behind = parts.iter().filter_map(|p| p.behind).max_by(|a, b| a.lag_ms.total_cmp(&b.lag_ms));
    Bar {
        badge: conn_badge(&edges.conn, behind),
        origin: first.origin,
        sources,
        rate,
        memory: match parts.len() {
            0 | 1 => memory_text(&memory),
            n => format!("{} · across {n} engine workers", memory_text(&memory)),
        },
        engines: parts.len().max(1) as u32,
        memory_bound_reached: memory.bound_reached
            || memory.event_bound_reached
            || memory.tree_bound_reached
            || memory.index_refused_stores + memory.index_refused_blocks > 0,
        engine_wasm_bytes: edges.wasm_bytes,
        catching_up: first.catching_up,
        intake: intake_text(&edges.intake).map(|text| IntakeLine {
            text,
            queued_bytes: edges.intake.queued_bytes as u64,
            dropped_messages: edges.intake.dropped_messages,
        }),
        pace: edges.pace.clone(),
        lagged: (first.lagged_frames > 0).then(|| {
            format!(
                "this page lost {} frames (it read too slowly); the server's --client-queue-bytes raises the bound",
                thousands(first.lagged_frames)
            )
        }),
        recording: first.recording,
        discovery: first.discovery,
        capture: edges.capture.clone(),
    }
}

/// The fleet bar's figures of one model: the fleet as one part.
pub fn bar(m: &Model, edges: &EdgeState, now_ms: f64) -> Bar {
    bar_of(&[&bar_part(m, edges.intake.queued_messages > 0, now_ms)], edges)
}

/// The connection badge: the socket's state, unless it is open and the page is behind live;
/// then how far, and how fast it applies frames. Never a green "connected" while behind.
pub fn conn_badge(conn: &ConnState, behind: Option<Behind>) -> ConnBadge {
    match (conn, behind) {
        (ConnState::Open, Some(b)) => ConnBadge {
            text: format!(
                "behind live by {}, catching up at {} frames/s",
                human_duration_ms(b.lag_ms),
                thousands(b.frames_per_second.round() as u64)
            ),
            tone: Tone::Warn,
        },
        (ConnState::Open, None) => ConnBadge { text: conn.label(), tone: Tone::Ok },
        (ConnState::Off, _) => ConnBadge { text: conn.label(), tone: Tone::Off },
        _ => ConnBadge { text: conn.label(), tone: Tone::Warn },
    }
}

/// Below this much received and not yet applied, the page is not said to be behind.
const BEHIND_BYTES: usize = 4 << 20;

/// The fleet bar's intake line: how far behind the stream the engine is, and what the intake
/// bound dropped unread; `None` when it keeps up.
pub fn intake_text(s: &IntakeStatus) -> Option<String> {
    let behind = (s.queued_bytes >= BEHIND_BYTES).then(|| {
        format!(
            "behind the stream: {} received, not yet applied ({} messages)",
            human_bytes(s.queued_bytes as f64),
            thousands(s.queued_messages as u64)
        )
    });
    let dropped = (s.dropped_messages > 0).then(|| {
        format!(
            "intake bound of {} reached: {} messages ({}) dropped unread, their frames count as lost (raise with ?intake=MiB)",
            human_bytes(s.bound_bytes as f64),
            thousands(s.dropped_messages),
            human_bytes(s.dropped_bytes as f64)
        )
    });
    match (behind, dropped) {
        (None, None) => None,
        (a, b) => Some([a, b].into_iter().flatten().collect::<Vec<_>>().join(" · ")),
    }
}

/// The page's retention line: both bounds, and what reaching each dropped.
pub fn memory_text(m: &MemoryUse) -> String {
    let mut s = format!(
        "{} of {} events kept ({}) · raw bytes {} of {}",
        thousands(m.retained_events as u64),
        thousands(m.event_bound as u64),
        human_bytes(m.event_bytes as f64),
        human_bytes(m.retained_bytes as f64),
        human_bytes(m.bound_bytes as f64),
    );
    if m.event_bound_reached {
        s.push_str(&format!(" · event bound reached: the {} oldest events are gone (raise with ?events=N)", thousands(m.evicted_events)));
    }
    if m.bound_reached {
        s.push_str(&format!(
            " · raw-bytes bound reached: {} oldest frames' bytes dropped, their events kept (raise with ?mem=MiB)",
            thousands(m.evicted_frames)
        ));
    }
    if m.tree_bound_reached {
        s.push_str(&format!(
            " · tier-tree bound reached: {} blocks not placed in the trees, which are short of them (each tree may use a quarter of \
             ?mem=MiB)",
            thousands(m.tree_refused_blocks)
        ));
    }
    if m.index_nodes > 0 {
        s.push_str(&format!(" · router index model: {} nodes", thousands(m.index_nodes)));
    }
    if m.index_refused_stores + m.index_refused_blocks > 0 {
        s.push_str(&format!(
            " · index bound of {} nodes reached: {} stores not modelled, {} engine blocks not kept; the index figures are short \
             of them (raise with the server's --index-max-nodes, or ?indexnodes=N for this page)",
            thousands(m.index_bound as u64),
            thousands(m.index_refused_stores),
            thousands(m.index_refused_blocks)
        ));
    }
    s
}

/// One shard's part of the data-quality strip ([`crate::model::shard`]): its shortfalls, the
/// stretch of the stream its timeline covers, and its own sources that are short.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct QualityPart {
    shortfalls: crate::model::fleet::Shortfalls,
    /// The timeline's origin (the stream's first frame: the same in every shard) and the
    /// stretch after it, in ms.
    span: Option<(u64, Option<(f64, f64)>)>,
    history_evicted_frames: u64,
    short: Vec<(u32, String)>,
}

pub fn quality_part(m: &Model) -> QualityPart {
    QualityPart {
        shortfalls: crate::model::fleet::Shortfalls::of(m),
        span: m.t0_nanos().map(|t0| (t0, m.marked_span_ms())),
        history_evicted_frames: m.history_evicted_frames,
        short: m.short_sources(),
    }
}

/// The data-quality strip of the shards' parts: each shortfall with its count and unit;
/// "complete" only when there is none.
pub fn quality_of(parts: &[&QualityPart]) -> Quality {
    let mut shortfalls = crate::model::fleet::Shortfalls::default();
    parts.iter().for_each(|p| shortfalls.merge(&p.shortfalls));
    let t0 = parts.iter().filter_map(|p| p.span).map(|(t0, _)| t0).min();
    let marked = crate::model::marked_union(parts.iter().filter_map(|p| p.span?.1));
    let history_evicted = parts.iter().map(|p| p.history_evicted_frames).max().unwrap_or(0);
    let span = t0.map(|t0| {
        let (a, b) = crate::model::timeline_span(marked);
        let from = t0 + (a.max(0.0) * 1e6) as u64;
        let mut span = format!("covers {} from {}", human_duration_ms(b - a), clock(from));
        if history_evicted > 0 {
            // Before the window, not a hole in it (model/completeness.rs).
            span.push_str(&format!(
                ": the window starts there, {} earlier frames had left the server's history before this page joined",
                thousands(history_evicted)
            ));
        }
        span
    });
    let mut short: Vec<&(u32, String)> = parts.iter().flat_map(|p| &p.short).collect();
    short.sort();
    let sources = match short.len() {
        0 => None,
        n if n <= 12 => Some(format!("sources affected: {}", short.iter().map(|(_, key)| key.as_str()).collect::<Vec<_>>().join(", "))),
        n => Some(format!("{n} sources affected")),
    };
    Quality { completeness: shortfalls.completeness(), span, sources }
}

/// The data-quality strip of one model: the fleet as one part.
pub fn quality(m: &Model) -> Quality {
    quality_of(&[&quality_part(m)])
}

/// One part of the page as last sent: its bytes, to tell whether a new one differs.
#[derive(Debug, Default)]
pub struct Sent {
    parts: std::collections::HashMap<&'static str, Vec<u8>>,
}

impl Sent {
    /// `value` when it differs from what was last sent under `name` (and remembers it), else
    /// `None`.
    pub fn changed<T: Serialize>(&mut self, name: &'static str, value: T) -> Option<T> {
        let bytes = rmp_serde::to_vec(&value).unwrap_or_default();
        if self.parts.get(name) == Some(&bytes) {
            return None;
        }
        self.parts.insert(name, bytes);
        Some(value)
    }

    /// Forgets everything sent: the next summary carries every part (a page that just joined).
    pub fn clear(&mut self) {
        self.parts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intake_line_says_how_far_behind_and_what_its_bound_dropped() {
        let mut s = IntakeStatus { queued_bytes: 1 << 20, queued_messages: 3, bound_bytes: 256 << 20, ..Default::default() };
        assert_eq!(intake_text(&s), None, "a little queued is keeping up");
        s.queued_bytes = 12 << 20;
        assert_eq!(intake_text(&s).unwrap(), "behind the stream: 12.0 MiB received, not yet applied (3 messages)");
        (s.queued_bytes, s.dropped_messages, s.dropped_bytes) = (0, 1_200, 3 << 20);
        let t = intake_text(&s).unwrap();
        assert!(t.starts_with("intake bound of 256.0 MiB reached: 1,200 messages (3.0 MiB) dropped unread"), "{t}");
        assert!(t.ends_with("(raise with ?intake=MiB)"), "{t}");
    }

    #[test]
    fn the_memory_line_names_each_bound_reached_and_the_setting_that_raises_it() {
        let mut m = MemoryUse {
            retained_events: 4_750_000,
            event_bound: 5_000_000,
            event_bytes: 4_750_000 * 66,
            retained_bytes: 1 << 20,
            bound_bytes: 128 << 20,
            ..Default::default()
        };
        let calm = memory_text(&m);
        assert!(calm.starts_with("4,750,000 of 5,000,000 events kept ("), "{calm}");
        assert!(!calm.contains("bound reached"), "{calm}");
        (m.event_bound_reached, m.evicted_events, m.bound_reached, m.evicted_frames) = (true, 250_000, true, 12);
        let full = memory_text(&m);
        assert!(full.contains("event bound reached: the 250,000 oldest events are gone (raise with ?events=N)"), "{full}");
        assert!(
            full.contains("raw-bytes bound reached: 12 oldest frames' bytes dropped, their events kept (raise with ?mem=MiB)"),
            "{full}"
        );
        assert!(!full.contains("index") && !full.contains("tier-tree"), "{full}");
        (m.tree_bound_reached, m.tree_refused_blocks) = (true, 1_234);
        assert!(
            memory_text(&m).contains(
                " · tier-tree bound reached: 1,234 blocks not placed in the trees, which are short of them (each tree may use a \
                 quarter of ?mem=MiB)"
            ),
            "{}",
            memory_text(&m)
        );
        (m.index_nodes, m.index_bound, m.index_refused_stores, m.index_refused_blocks) = (2_000_000, 2_000_000, 40, 3);
        let full = memory_text(&m);
        assert!(full.contains(" · router index model: 2,000,000 nodes"), "{full}");
        assert!(
            full.contains(
                "index bound of 2,000,000 nodes reached: 40 stores not modelled, 3 engine blocks not kept; the index figures are short \
                 of them (raise with the server's --index-max-nodes, or ?indexnodes=N for this page)"
            ),
            "{full}"
        );
    }

    #[test]
    fn help_lists_the_rules_each_preset_runs() {
        use kvscope_normalize::{Policy, RuleSet};
        for policy in Policy::PRESETS {
            let names: Vec<&str> = policy_rules(policy.name).iter().map(|r| r.name).collect();
            let expected: Vec<&str> = RuleSet::for_policy(policy).rules().map(|(_, r)| r.name).collect();
            assert_eq!(names, expected);
        }
        assert!(policy_rules("strict").is_empty());
    }

    #[test]
    fn a_part_is_sent_again_only_when_it_changed() {
        let mut sent = Sent::default();
        assert_eq!(sent.changed("bar", "a"), Some("a"));
        assert_eq!(sent.changed("bar", "a"), None);
        assert_eq!(sent.changed("quality", "a"), Some("a"), "each part on its own");
        assert_eq!(sent.changed("bar", "b"), Some("b"));
        sent.clear();
        assert_eq!(sent.changed("bar", "b"), Some("b"), "everything again after a clear");
    }

    #[test]
    fn times_are_wall_clock_utc() {
        assert_eq!(clock(3_723_004_000_000), "01:02:03.004 UTC");
    }

    /// The Kimi-K3 incident as the page sees it: the router's index under legacy exits at the
    /// first cpu store and restarts empty; under fixed it holds 2-3 of each engine's 16 device
    /// blocks (removals of chain heads cut Dynamo's index edges, and the stores below are
    /// orphans). Every part of the page that shows the index says so, from one report.
    #[test]
    fn the_kimi_k3_incident_s_index_on_every_part_of_the_page() {
        let mut m = crate::model::tests::loaded(1536);
        m.refresh_index();
        let b = m.index().totals(kvscope_engine_protocol::Side::B).unwrap().clone();
        assert_eq!(b.tiers["device"].engine_blocks, 48);
        assert!(b.visible_prefix_tokens > 0 && b.visible_share() < 0.25, "{b:?}");
        assert!(m.index().report(kvscope_engine_protocol::Side::A).unwrap().indexer_exits > 0);

        let headline = headline::index_lines(&crate::model::fleet::FleetFacts::of(&m));
        assert!(headline[0].contains("cached prefix tokens"), "{headline:?}");
        let rows = crate::model::overview::rows(&m, 0.0);
        // Fixed's indexer runs and misses most of every source; legacy's exited (fatal says so).
        assert!(rows.iter().all(|r| r.anomalies.contains(&kvscope_engine_protocol::overview::Anomaly::RouterBlind)), "{rows:#?}");
        assert!(rows.iter().all(|r| r.router_sees[1].is_some_and(|s| s < 0.25)));
        let cards = cards::cards(&m, &kvscope_engine_protocol::Settings::default());
        let line = &cards.cards[0].index_lines.iter().find(|(s, _)| *s == kvscope_engine_protocol::Side::B).unwrap().1;
        assert!(line.contains("orphan:after_cut_off"), "{line}");

        // A device block of worker 0 the engine holds and fixed's router lacks: the tree marks
        // it, and the inspector of its store says why.
        let settings = kvscope_engine_protocol::Settings {
            tree: Some(("0:0".into(), "device".into())),
            ..kvscope_engine_protocol::Settings::default()
        };
        let trees = trees::trees(&m, &settings, None);
        fn any_lacks(c: &kvscope_engine_protocol::view::IcicleCell) -> bool {
            c.router_lacks || c.kids.iter().any(any_lacks)
        }
        fn first_lacking(c: &kvscope_engine_protocol::view::IcicleCell) -> Option<u64> {
            if c.router_lacks {
                return c.hash;
            }
            c.kids.iter().find_map(first_lacking)
        }
        assert!(trees.icicle.as_ref().is_some_and(any_lacks), "no block of the tree is marked");
        let why = m.index().why_missing(
            kvscope_engine_protocol::Side::B,
            "0",
            0,
            kvscope_normalize::StorageTier::Device,
            first_lacking(&trees.icicle.unwrap()).unwrap(),
        );
        assert!(why.is_some_and(|w| w.label().starts_with("orphan:")), "{why:?}");
    }
}
