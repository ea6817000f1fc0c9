//! A shard's report at a flush, and the fleet-wide parts of the page merged from every
//! shard's.

use kvscope_engine_protocol::view::{Bar, Cards, Headline, Logs, Meta, Planes, Quality, Timeline};
use kvscope_engine_protocol::{Settings, Side, ViewQuery, overview::Row};
use serde::{Deserialize, Serialize};

use crate::model::fleet::FleetFacts;
use crate::model::overview::{self, OverviewPart};
use crate::model::shard::{self, Shard};
use crate::model::{IndexerExit, Model};
use crate::summarize::cards::{self, CardsPart};
use crate::summarize::timeline::{self, LanesPart, Layout, TimelineFacts};
use crate::summarize::{self, BarPart, EdgeState, LogsPart, QualityPart, TimelineImage};

/// What one shard tells the coordinator at a flush.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardReport {
    /// Which shard, of how many.
    pub shard: (u32, u32),
    pub fleet: FleetFacts,
    pub overview: OverviewPart,
    pub cards: CardsPart,
    pub bar: BarPart,
    pub quality: QualityPart,
    pub logs: LogsPart,
    /// Where this shard saw each policy's indexer exit (its own first fatal, or one it adopted).
    pub exits: [Option<IndexerExit>; 2],
    /// The first and last mark of its lanes, in ms since the stream's first frame.
    pub marked: Option<(f64, f64)>,
    pub timeline: TimelineFacts,
    /// The sources it reads (the coordinator asks about a lane of the shard that reads it).
    pub own_sources: Vec<u32>,
    /// Policies, block size, sources, where the frames come from: the same in every shard, so
    /// shard 0 alone says it.
    pub meta: Option<Meta>,
    /// The event-plane sources, shown by shard 0.
    pub planes: Option<Planes>,
    /// The event a shared link names (`ToShard::Report`'s `find`), if this shard reads it.
    pub found: Option<u64>,
}

/// A message between engine workers did not decode: they were built apart (a cached script),
/// or the bytes were cut.
#[derive(Debug)]
pub struct MessageError(pub(super) String);

impl std::fmt::Display for MessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an engine worker's message does not decode ({}): reload the page, every worker is built with it", self.0)
    }
}

impl std::error::Error for MessageError {}

impl ShardReport {
    /// This model's report (`waiting`: its intake holds messages not yet applied).
    pub fn of(m: &Model, settings: &Settings, waiting: bool, now_ms: f64) -> ShardReport {
        let Shard { index, count } = m.shard();
        ShardReport {
            shard: (index, count),
            fleet: FleetFacts::of(m),
            overview: overview::part(m, now_ms),
            cards: cards::part(m, settings),
            bar: summarize::bar_part(m, waiting, now_ms),
            quality: summarize::quality_part(m),
            logs: summarize::logs_part(m),
            exits: [m.indexer_exit(Side::A).cloned(), m.indexer_exit(Side::B).cloned()],
            marked: m.marked_span_ms(),
            timeline: timeline::facts(m),
            own_sources: m.sources().iter().filter(|s| s.own).map(|s| s.index).collect(),
            meta: (m.shard().index == 0).then(|| summarize::meta(m)),
            planes: summarize::planes(m),
            found: None,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        super::protocol::encode(self)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<ShardReport, MessageError> {
        super::protocol::decode(bytes)
    }
}

/// The fleet-wide parts of the page, from every shard's report.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetParts {
    /// The fleet's facts the headline was made from (the first finding opens by itself).
    pub facts: FleetFacts,
    pub bar: Bar,
    pub quality: Quality,
    pub headline: Headline,
    /// The overview's rows, in the order the page lists them (and the timeline stacks lanes).
    pub rows: Vec<Row>,
    pub cards: Cards,
    pub logs: Logs,
}

/// The page's fleet-wide parts from the shards' reports and the engine's edges (the socket, the
/// capture, the intake, the pace: the coordinator's own).
pub fn merge(reports: &[ShardReport], edges: &EdgeState) -> FleetParts {
    // Each part by reference: a report is read, not copied, at every flush.
    fn parts<'a, T>(reports: &'a [ShardReport], part: impl Fn(&'a ShardReport) -> &'a T) -> Vec<&'a T> {
        reports.iter().map(part).collect()
    }
    let facts = FleetFacts::merge(&parts(reports, |r| &r.fleet));
    FleetParts {
        headline: summarize::headline_of(&facts),
        facts,
        bar: summarize::bar_of(&parts(reports, |r| &r.bar), edges),
        quality: summarize::quality_of(&parts(reports, |r| &r.quality)),
        rows: overview::merge(&parts(reports, |r| &r.overview)),
        cards: cards::merge(&parts(reports, |r| &r.cards)),
        logs: summarize::logs_of(&parts(reports, |r| &r.logs)),
    }
}

/// The exit of each policy's indexer fleet-wide: the earliest in the stream of the shards'.
/// Each shard adopts it, so that its events after it count as never indexed.
pub fn fleet_exits(reports: &[ShardReport]) -> [Option<IndexerExit>; 2] {
    [Side::A, Side::B].map(|side| shard::earliest_exit(reports.iter().filter_map(|r| r.exits[side as usize].as_ref())).cloned())
}

/// How the fleet's timeline is laid out: the lanes shown (from the merged overview's `rows`),
/// the window over every shard's marks, the canvas. Each shard then paints its own lanes
/// ([`timeline::lanes_part`]).
pub fn timeline_layout(reports: &[ShardReport], rows: &[Row], query: &ViewQuery) -> Layout {
    let marked = crate::model::marked_union(reports.iter().filter_map(|r| r.marked));
    let has_router = reports.iter().any(|r| r.fleet.router.is_some());
    timeline::layout(rows, marked, has_router, query)
}

/// The fleet's timeline and its pixels, from the layout, the reports and every shard's lanes.
pub fn timeline(
    layout: &Layout,
    reports: &[ShardReport],
    lanes: &[LanesPart],
    rows: &[Row],
    settings: &Settings,
) -> (Timeline, Option<TimelineImage>) {
    let facts: Vec<TimelineFacts> = reports.iter().map(|r| r.timeline.clone()).collect();
    let t0_nanos = reports.iter().filter_map(|r| r.fleet.t0_nanos).min();
    let policies = reports.first().map(|r| r.fleet.policies.clone()).unwrap_or_default();
    let exits_ms = fleet_exits(reports).map(|e| {
        let (e, t0) = (e?, t0_nanos?);
        Some(e.recv_time_nanos.saturating_sub(t0) as f64 / 1e6)
    });
    timeline::assemble(layout, &facts, lanes, timeline::FleetTimeline { rows, policies: &policies, t0_nanos, exits_ms }, settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{config, hello, kimi_frames};

    fn shards(count: u32) -> Vec<Model> {
        (0..count)
            .map(|index| {
                let mut m = Model::new(crate::model::Config { shard: Shard { index, count }, ..config(1536) });
                m.apply_message(hello(3, 1536), 0.0);
                for f in kimi_frames() {
                    m.apply_message(f, 0.0);
                }
                m
            })
            .collect()
    }

    #[test]
    fn the_fleet_s_exit_is_the_earliest_any_shard_saw_and_every_shard_adopts_it() {
        let mut models = shards(3);
        let reports: Vec<ShardReport> = models.iter().map(|m| ShardReport::of(m, &Settings::default(), false, 0.0)).collect();
        let seen: Vec<u64> = reports.iter().filter_map(|r| r.exits[0].as_ref()).map(|e| e.position).collect();
        assert!(!seen.is_empty(), "legacy's indexer exits on the incident");
        let exits = fleet_exits(&reports);
        assert_eq!(exits[0].as_ref().map(|e| e.position), seen.iter().min().copied(), "the earliest");
        for m in &mut models {
            for side in [Side::A, Side::B] {
                if let Some(exit) = &exits[side as usize] {
                    m.adopt_exit(side, exit);
                }
            }
        }
        let agreed: Vec<Option<u64>> = models.iter().map(|m| m.indexer_exit(Side::A).map(|e| e.position)).collect();
        assert!(agreed.iter().all(|p| *p == exits[0].as_ref().map(|e| e.position)), "{agreed:?}");
    }

    #[test]
    fn a_report_reads_back_from_its_bytes_and_cut_bytes_say_so() {
        for m in shards(2) {
            let report = ShardReport::of(&m, &Settings::default(), true, 0.0);
            let bytes = report.to_bytes();
            assert_eq!(ShardReport::from_bytes(&bytes).expect("reads back"), report);
            let cut = ShardReport::from_bytes(&bytes[..bytes.len() / 2]).expect_err("half a report");
            assert!(cut.to_string().starts_with("an engine worker's message does not decode ("), "{cut}");
        }
    }
}
