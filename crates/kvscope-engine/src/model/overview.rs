//! The fleet overview: one dense row per engine source, the odd ones first.
//!
//! At 64-512 sources a grid of full cards hides the one worker that misbehaves; the overview
//! answers "which source is odd, and how" in one screen. Each row is plain data
//! ([`Row`], in the engine protocol), computed here from the model and posted to the page, which
//! only draws the rows in its viewport.
//!
//! What counts as odd, and how odd, is [`Anomaly`]: one enum, one severity and one word each
//! (in the engine protocol), read by the row's chips, the sort and the tests alike; which a
//! source has is decided here.

use kvscope_normalize::{Outcome, VerdictLabel};
use kvscope_wire::{EventEncoding, KvEvent};

pub use kvscope_engine_protocol::overview::{Anomaly, RelayCells, Row, Tally, anomaly_counts};

use super::classes::Reason;
use super::settings::Side;
use super::{Model, Source};

fn tally(m: &Model, src: &Source, side: Side) -> Tally {
    let mut t = Tally::default();
    let classes = m.classes();
    for (code, n) in &src.counts(side).by_class {
        let Some(c) = classes.get(*code) else { continue };
        match c.kind {
            Outcome::Fatal => t.fatal += n,
            Outcome::Skip if c.reason.is_routine_filter() => t.filtered += n,
            Outcome::Skip => t.skipped += n,
            Outcome::Apply => t.applied += n,
        }
    }
    t
}

/// A source's wire layout as the overview shows and compares it: that of its latest store, or
/// of its latest event before any store.
///
/// Stores decide because each event type of a tagged-array release has its own length (a vLLM
/// 0.23 store is an array of 12, a removal of 4): the latest event's layout would change the
/// column with every removal, and in a fleet all on one old release it would flag as "other
/// wire layout" whichever sources happened to send a removal last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireLayout {
    store: Option<EventEncoding>,
    other: Option<EventEncoding>,
}

impl WireLayout {
    pub fn record(&mut self, event: &KvEvent) {
        let Some(e) = event.encoding() else { return };
        match event {
            KvEvent::BlockStored(_) => self.store = Some(e),
            _ => self.other = Some(e),
        }
    }

    pub fn shown(self) -> Option<EventEncoding> {
        self.store.or(self.other)
    }
}

/// "map", "array of 12": the wire column.
pub fn wire_text(wire: Option<EventEncoding>) -> String {
    match wire {
        None => "—".to_owned(),
        Some(EventEncoding::Map) => "map".to_owned(),
        Some(EventEncoding::Array { len }) => format!("array of {len}"),
    }
}

/// The layout most sources use; `None` on a tie for first, so that a fleet split in two halves
/// flags neither.
fn fleet_wire<'a>(layouts: impl Iterator<Item = &'a EventEncoding>) -> Option<EventEncoding> {
    let mut counts: Vec<(EventEncoding, usize)> = Vec::new();
    for w in layouts {
        match counts.iter_mut().find(|(e, _)| e == w) {
            Some((_, n)) => *n += 1,
            None => counts.push((*w, 1)),
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    match counts.as_slice() {
        [(e, _)] => Some(*e),
        [(e, a), (_, b), ..] if a > b => Some(*e),
        _ => None,
    }
}

/// What one policy's index of the router says of one engine source, from the shard that
/// models that index ([`super::shard::index_sides`]).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndexCell {
    router_sees: Option<f32>,
    router_stale: u64,
    /// A running indexer sees less than half of the source's cached prefix.
    blind: bool,
}

fn index_cell(m: &Model, side: Side, source: u32) -> Option<IndexCell> {
    let report = m.index().report(side)?;
    let counts = m.index().counts(side, source);
    let router_sees = counts.filter(|c| c.engine_prefix_tokens > 0).map(|c| c.visible_share() as f32);
    // An indexer that exited on a fatal verdict sees nothing anywhere: that is the fatal
    // anomaly's story, told once. Blind is a running indexer missing most of a source.
    let running = report.indexer_exits == 0;
    Some(IndexCell {
        router_sees,
        router_stale: counts.map_or(0, |c| c.blocks.router_only.values().sum()),
        blind: running && router_sees.is_some_and(|s| s < 0.5),
    })
}

/// One shard's part of the overview ([`super::shard`]): its engine sources' rows as far as
/// they are its own to say, each with its wire layout; and, per policy whose index it models,
/// every engine source's [`IndexCell`]. [`merge`] makes the rows.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct OverviewPart {
    rows: Vec<OwnRow>,
    index: Vec<(u32, Side, IndexCell)>,
}

/// A source's row as its shard says it, and its wire layout, which the merge compares with
/// the fleet's.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct OwnRow {
    row: Row,
    #[serde(with = "layout_between_workers")]
    layout: Option<EventEncoding>,
}

/// kvscope-wire stays free of serde: between engine workers a layout goes as this enum.
mod layout_between_workers {
    use kvscope_wire::EventEncoding;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    enum Layout {
        Map,
        Array(u32),
    }

    pub fn serialize<S: Serializer>(layout: &Option<EventEncoding>, s: S) -> Result<S::Ok, S::Error> {
        let layout = layout.map(|e| match e {
            EventEncoding::Array { len } => Layout::Array(len),
            EventEncoding::Map => Layout::Map,
        });
        layout.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EventEncoding>, D::Error> {
        let layout: Option<Layout> = Deserialize::deserialize(d)?;
        Ok(layout.map(|l| match l {
            Layout::Array(len) => EventEncoding::Array { len },
            Layout::Map => EventEncoding::Map,
        }))
    }
}

/// This model's part of the overview.
pub fn part(m: &Model, now_ms: f64) -> OverviewPart {
    let index = m
        .fleet_engine_sources()
        .flat_map(|s| [Side::A, Side::B].into_iter().filter_map(move |side| Some((s.index, side, index_cell(m, side, s.index)?))))
        .collect();
    OverviewPart { rows: m.engine_sources().map(|s| OwnRow { row: own_row(m, s, now_ms), layout: s.wire.shown() }).collect(), index }
}

/// A source's row but for what needs the rest of the fleet: the index's cells, and whether
/// its wire layout is the fleet's.
fn own_row(m: &Model, src: &Source, now_ms: f64) -> Row {
    let tally = [tally(m, src, Side::A), tally(m, src, Side::B)];
    let completeness = m.completeness(src.index);
    let lost_frames = super::completeness::lost_in_gaps(src) + src.lagged_frames;
    let errors = src.decode_errors + src.frame_errors;
    let offload = Reason::Label(VerdictLabel::OffloadBlockSizeMismatch);
    let offload_skipped = [Side::A, Side::B].iter().any(|s| src.counts(*s).get(m.classes(), Outcome::Skip, offload) > 0);
    let mut anomalies = Vec::new();
    let mut flag = |on: bool, a: Anomaly| {
        if on {
            anomalies.push(a);
        }
    };
    flag(tally[0].fatal + tally[1].fatal > 0, Anomaly::Fatal);
    flag(src.policies_disagree(m.classes()), Anomaly::PoliciesDisagree);
    flag(lost_frames > 0, Anomaly::LostFrames);
    flag(errors > 0, Anomaly::DecodeErrors);
    let relay = m.router().and_then(|r| r.source_report(r.report(), src.index)).map(|s| &s.router);
    flag(relay.is_some_and(|c| !c.is_clean()), Anomaly::RelayDiffers);
    flag(src.restarts() > 0, Anomaly::Restarted);
    flag(offload_skipped, Anomaly::OffloadSkipped);
    flag(src.counts(Side::A).events == 0, Anomaly::Silent);
    Row {
        index: src.index,
        key: src.key.clone(),
        worker_id: src.worker_id.clone(),
        dp_rank: src.dp_rank,
        frames: src.frames,
        events: src.counts(Side::A).events,
        tally,
        gaps: src.gaps(),
        lost_frames,
        restarts: src.restarts(),
        errors,
        events_per_second: src.rate.per_second(now_ms),
        wire: wire_text(src.wire.shown()),
        completeness: completeness.coverage(),
        router_sees: [None, None],
        router_stale: [0, 0],
        relay: relay.map(|c| RelayCells { expected: c.expected, received: c.received, missing: c.missing }),
        anomalies,
    }
}

/// Worker ids in numeric order when they are numbers ("2" before "10"), else by spelling.
fn worker_order(id: &str) -> (u64, &str) {
    (id.parse::<u64>().unwrap_or(u64::MAX), id)
}

/// Every engine source's row from the shards' parts, grouped by worker (its DP ranks together,
/// in rank order) and the groups sorted by their worst row: the odd workers first, then the
/// healthy in id order.
pub fn merge(parts: &[&OverviewPart]) -> Vec<Row> {
    let wire = fleet_wire(parts.iter().flat_map(|p| &p.rows).filter_map(|r| r.layout.as_ref()));
    let cells: std::collections::HashMap<(u32, Side), &IndexCell> =
        parts.iter().flat_map(|p| &p.index).map(|(i, side, c)| ((*i, *side), c)).collect();
    let mut rows: Vec<Row> = parts
        .iter()
        .flat_map(|p| &p.rows)
        .map(|OwnRow { row, layout }| {
            let mut row = row.clone();
            let mut blind = false;
            for side in [Side::A, Side::B] {
                if let Some(c) = cells.get(&(row.index, side)) {
                    (row.router_sees[side as usize], row.router_stale[side as usize]) = (c.router_sees, c.router_stale);
                    blind |= c.blind;
                }
            }
            if blind {
                row.anomalies.push(Anomaly::RouterBlind);
            }
            if wire.is_some() && layout.is_some() && *layout != wire {
                row.anomalies.push(Anomaly::OtherWireLayout);
            }
            row.anomalies.sort();
            row
        })
        .collect();
    let mut worst: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for r in &rows {
        let w = worst.entry(r.worker_id.clone()).or_default();
        *w = (*w).max(r.score());
    }
    let group = |r: &Row| worst.get(&r.worker_id).copied().unwrap_or(0);
    rows.sort_by(|a, b| {
        group(b).cmp(&group(a)).then_with(|| worker_order(&a.worker_id).cmp(&worker_order(&b.worker_id))).then(a.dp_rank.cmp(&b.dp_rank))
    });
    rows
}

/// Every engine source's row of one model: the fleet as one part.
pub fn rows(m: &Model, now_ms: f64) -> Vec<Row> {
    merge(&[&part(m, now_ms)])
}

#[cfg(test)]
mod tests {
    use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch_lossy, release};
    use kvscope_protocol as proto;

    use super::*;
    use crate::model::completeness::Coverage;
    use crate::model::tests::{config, frame};

    fn info(index: u32, worker: u32, rank: u32) -> proto::SourceInfo {
        proto::SourceInfo {
            index,
            key: format!("{worker}:{rank}"),
            worker_id: worker.to_string(),
            dp_rank: rank,
            endpoint: format!("tcp://127.0.0.1:{}", 6000 + index),
            replay_endpoint: None,
            kind: proto::SourceKind::Engine,
            event_plane: None,
            block_size: None,
        }
    }

    fn hello(sources: Vec<proto::SourceInfo>) -> proto::Message {
        crate::model::tests::hello_of(sources, 16)
    }

    /// A vLLM 0.33 batch: one GPU store at block size 16, or a `cpu` offload store at 256.
    fn batch(seq: u64, offload: bool) -> Vec<u8> {
        batch_as(&release::VLLM_0_33.layout, seq, offload)
    }

    fn batch_as(layout: &kvscope_encode::Layout, seq: u64, offload: bool) -> Vec<u8> {
        let store = if offload {
            Stored::new([Hash::U64(seq + 1)], 256).tokens(0..256).medium(Some("cpu"))
        } else {
            Stored::new([Hash::U64(seq + 1)], 16).tokens(0..16).medium(Some("GPU")).group_idx(Some(0))
        };
        let events: Vec<Event> = vec![store.into()];
        encode_batch_lossy(layout, &Batch { ts: 1.0, events, dp_rank: Some(0) }).unwrap()
    }

    /// Twelve workers of one rank: 7 behind an offload connector, 9 losing frames, 4
    /// restarting, 3 on vLLM 0.23, 11 silent, the rest healthy.
    fn fleet() -> Model {
        let mut m = Model::new(config(16));
        m.apply_message(hello((0..12).map(|w| info(w, w, 0)).collect()), 0.0);
        for w in (0..11).filter(|w| ![4, 7, 9].contains(w)) {
            let layout = if w == 3 { &release::VLLM_0_23.layout } else { &release::VLLM_0_33.layout };
            for seq in 0..6 {
                m.apply_message(frame(w, seq, batch_as(layout, seq, false)), 0.0);
            }
        }
        for seq in 0..6 {
            m.apply_message(frame(7, seq, batch(seq, seq % 3 == 2)), 0.0);
        }
        for seq in [0, 1, 2, 10, 11] {
            m.apply_message(frame(9, seq, batch(seq, false)), 0.0);
        }
        for seq in [0, 1, 2, 3, 0, 1] {
            m.apply_message(frame(4, seq, batch(seq, false)), 0.0);
        }
        m
    }

    fn keys(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.key.as_str()).collect()
    }

    #[test]
    fn the_odd_sources_come_first_most_severe_first_and_the_healthy_in_id_order() {
        let m = fleet();
        let rows = rows(&m, 0.0);
        assert_eq!(keys(&rows), ["7:0", "9:0", "4:0", "3:0", "11:0", "0:0", "1:0", "2:0", "5:0", "6:0", "8:0", "10:0"]);
        assert_eq!(rows[0].anomalies, [Anomaly::Fatal, Anomaly::PoliciesDisagree, Anomaly::OffloadSkipped]);
        assert_eq!(rows[0].tally[0].fatal, 2, "legacy: the cpu stores at 256 are fatal");
        assert_eq!(rows[0].tally[1].fatal, 0);
        assert_eq!(rows[0].tally[1].skipped, 2, "fixed: they are offload skips");
        assert_eq!(rows[0].tally[1].applied, 4);
        assert_eq!((rows[1].anomalies.as_slice(), rows[1].lost_frames, rows[1].gaps), ([Anomaly::LostFrames].as_slice(), 7, 1));
        assert_eq!((rows[2].anomalies.as_slice(), rows[2].restarts), ([Anomaly::Restarted].as_slice(), 1));
        assert_eq!(rows[3].anomalies, [Anomaly::OtherWireLayout]);
        assert_eq!((rows[3].wire.as_str(), rows[0].wire.as_str()), ("array of 12", "map"));
        assert_eq!((rows[4].anomalies.as_slice(), rows[4].completeness), ([Anomaly::Silent].as_slice(), Coverage::Unknown));
        assert!(rows[5..].iter().all(|r| r.anomalies.is_empty() && r.completeness == Coverage::Complete && r.tally[0].applied == 6));
        assert_eq!(
            anomaly_counts(&rows),
            [
                (Anomaly::Fatal, 1),
                (Anomaly::PoliciesDisagree, 1),
                (Anomaly::LostFrames, 1),
                (Anomaly::Restarted, 1),
                (Anomaly::OtherWireLayout, 1),
                (Anomaly::OffloadSkipped, 1),
                (Anomaly::Silent, 1)
            ]
        );
    }

    #[test]
    fn the_wire_column_shows_a_sources_stores_so_a_removal_neither_changes_it_nor_flags_it() {
        let old = &release::VLLM_0_23.layout;
        let removal = |seq: u64| {
            let events: Vec<Event> = vec![Removed::new([Hash::U64(seq)]).into()];
            encode_batch_lossy(old, &Batch { ts: 1.0, events, dp_rank: Some(0) }).unwrap()
        };
        let mut m = Model::new(config(16));
        m.apply_message(hello((0..3).map(|w| info(w, w, 0)).collect()), 0.0);
        // A fleet all on vLLM 0.23: worker 0 removes first, then stores; 1 stores, then
        // removes; 2 only stores.
        m.apply_message(frame(0, 0, removal(1)), 0.0);
        let before_any_store = rows(&m, 0.0);
        m.apply_message(frame(0, 1, batch_as(old, 1, false)), 0.0);
        m.apply_message(frame(1, 0, batch_as(old, 0, false)), 0.0);
        m.apply_message(frame(1, 1, removal(1)), 0.0);
        m.apply_message(frame(2, 0, batch_as(old, 0, false)), 0.0);
        let rows = rows(&m, 0.0);
        let worker_0 = before_any_store.iter().find(|r| r.key == "0:0").unwrap();
        assert_eq!(worker_0.wire, "array of 4", "before any store, the removal's layout");
        assert!(rows.iter().all(|r| r.wire == "array of 12"), "{:?}", rows.iter().map(|r| &r.wire).collect::<Vec<_>>());
        assert!(rows.iter().all(|r| !r.anomalies.contains(&Anomaly::OtherWireLayout)));
    }

    #[test]
    fn a_workers_ranks_stay_together_and_move_up_with_its_worst_rank() {
        let mut m = Model::new(config(16));
        // Workers 0-2 with two ranks each; worker 2's rank 1 loses frames.
        let sources = (0..6).map(|i| info(i, i / 2, i % 2)).collect();
        m.apply_message(hello(sources), 0.0);
        for i in 0..6 {
            let seqs: &[u64] = if i == 5 { &[0, 5] } else { &[0, 1] };
            for &seq in seqs {
                m.apply_message(frame(i, seq, batch(seq, false)), 0.0);
            }
        }
        assert_eq!(keys(&rows(&m, 0.0)), ["2:0", "2:1", "0:0", "0:1", "1:0", "1:1"]);
    }

    #[test]
    fn the_filter_finds_a_worker_or_an_anomaly() {
        let rows = rows(&fleet(), 0.0);
        let find = |f: &str| keys(&rows).into_iter().zip(&rows).filter(|(_, r)| r.matches(f)).map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(find("restart"), ["4:0"]);
        assert_eq!(find("1:"), ["11:0", "1:0"]);
        assert_eq!(find("fatal"), ["7:0"]);
        assert_eq!(find("wire"), ["3:0"]);
        assert_eq!(find(" ").len(), 12);
    }
}
