//! The router's side in the page: what Dynamo's relay should have published for each engine
//! source (predicted by `kvscope-router` under the relay's policy) against what the event plane
//! delivered, fed from the same frames the rest of the model sees.
//!
//! Present only when the server (or the capture) has event-plane sources. One [`Reconciler`]
//! for the page: engine frames feed its predictions, event-plane frames its receptions, in
//! arrival order. Each engine source also gets a router lane: one mark per engine event, the
//! RouterEvent the relay publishes for it or the rule that drops it, so the timeline draws the
//! router's view beside A's and B's. Counts and differences come from the reconciler's report,
//! asked for when a view renders.

use super::chunked::Chunked;
use kvscope_normalize::{Policy, VerdictLabel};
use kvscope_protocol as proto;
use kvscope_router::{
    Predicted, Reconciler, ReconcilerConfig, RelayConfig, RelayMark, RouterReport, RouterSourceId, Shard, SourceReport, TokensHashes,
};
use kvscope_wire::Decoded;

/// One engine source's router lane, oldest first, parallel vectors like [`super::timeline::Lane`].
#[derive(Clone, Debug, Default)]
pub struct RouterLane {
    pub time_ms: Chunked<f64>,
    pub mark: Chunked<RelayMark>,
    /// The model's event id of the engine event.
    pub event_id: Chunked<u64>,
    /// The times of the drop marks ([`RelayMark::is_drop`]) alone (rare), so that a dense window finds
    /// them without scanning every publish.
    pub drop_times: Chunked<f64>,
    /// Per engine seq, the model's id of its first event (the latest run's, across restarts):
    /// how a reconciliation difference, which names (seq, event index), finds its mark.
    frames: std::collections::BTreeMap<u64, u64>,
}

impl RouterLane {
    fn push(&mut self, time_ms: f64, mark: RelayMark, event_id: u64) {
        let time_ms = self.time_ms.last().map_or(time_ms, |&l| time_ms.max(l));
        self.time_ms.push(time_ms);
        self.mark.push(mark);
        self.event_id.push(event_id);
        if mark.is_drop() {
            self.drop_times.push(time_ms);
        }
    }

    pub fn range(&self, t0: f64, t1: f64) -> std::ops::Range<usize> {
        let start = self.time_ms.partition_point(|&t| t < t0);
        let end = self.time_ms.partition_point(|&t| t < t1);
        start..end.max(start)
    }

    pub(super) fn evict_below(&mut self, first_kept: u64) {
        let n = self.event_id.partition_point(|&id| id < first_kept);
        self.time_ms.drop_front(n);
        self.mark.drop_front(n);
        self.event_id.drop_front(n);
        let first_kept_time = self.time_ms.first().copied().unwrap_or(f64::INFINITY);
        let stale = self.drop_times.partition_point(|&t| t < first_kept_time);
        self.drop_times.drop_front(stale);
        self.frames.retain(|_, id| *id >= first_kept);
    }

    /// The receive time of the engine event at (seq, index), while retained.
    pub fn time_of(&self, seq: u64, index: u32) -> Option<f64> {
        let id = self.frames.get(&seq)? + u64::from(index);
        let i = self.event_id.partition_point(|&e| e < id);
        (self.event_id.get(i) == Some(&id)).then(|| self.time_ms[i])
    }
}

/// The page's reconciliation.
#[derive(Debug)]
pub struct RouterSide {
    reconciler: Reconciler,
    /// Reconciler source per model source index (engine sources with a decimal worker id).
    ids: Vec<Option<RouterSourceId>>,
    lanes: Vec<RouterLane>,
    /// The reconciler's report as of the last flush ([`RouterSide::refresh`]): building one walks
    /// every source, so views share one per flush instead of each card and lane building its own.
    report: RouterReport,
    /// Something was pushed since the report was built.
    stale: bool,
    pub policy: Policy,
    /// The engine's part of the fleet: other shards' engines take no part here.
    shard: Shard,
    /// Event-plane messages whose envelope did not decode, in words (the latest).
    pub last_plane_error: Option<String>,
}

impl RouterSide {
    /// A reconciliation for these sources, when any of them is an event plane; the relays are
    /// predicted under `policy` at `block_size` (the relay's `kv_block_size`).
    pub fn for_sources(sources: &[proto::SourceInfo], policy: Policy, block_size: u32, shard: Shard) -> Option<RouterSide> {
        sources
            .iter()
            .any(|s| s.kind == proto::SourceKind::EventPlane)
            .then(|| RouterSide::with_sources(sources, policy, block_size, shard))
    }

    /// The router's side even before any event-plane source is known: a server that discovers
    /// its fleet announces its relays after the hello, and the engines' predictions must start
    /// with their first frame.
    pub fn with_sources(sources: &[proto::SourceInfo], policy: Policy, block_size: u32, shard: Shard) -> RouterSide {
        let reconciler = Reconciler::new(ReconcilerConfig { shard, ..ReconcilerConfig::default() });
        let report = reconciler.report();
        let mut side =
            RouterSide { reconciler, ids: Vec::new(), lanes: Vec::new(), report, stale: false, policy, shard, last_plane_error: None };
        for s in sources {
            side.add_source(s, block_size);
        }
        side
    }

    /// One more source; an engine whose worker id is Dynamo's takes part from now on.
    pub fn add_source(&mut self, s: &proto::SourceInfo, block_size: u32) {
        let i = s.index as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, None);
        }
        // Another shard's engine: its RouterEvents are counted as that shard's, not received.
        if s.kind == proto::SourceKind::Engine
            && self.shard.takes(&s.worker_id)
            && self.ids[i].is_none()
            && let Some(relay) = RelayConfig::for_source(&s.worker_id, s.dp_rank, s.block_size_or(block_size), self.policy)
        {
            self.ids[i] = Some(self.reconciler.add_source(&s.key, relay));
            self.stale = true;
        }
    }

    /// The policy the relays are predicted under.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// One engine frame: the relay's predictions for its events, marked on the source's lane.
    pub fn push_engine(
        &mut self,
        source: u32,
        seq: u64,
        payload: &[u8],
        (decoded, hashes): (&Decoded, &mut TokensHashes),
        time_ms: f64,
        first_event_id: u64,
    ) {
        let Some(Some(id)) = self.ids.get(source as usize).copied() else { return };
        self.stale = true;
        // The skipped events come as they are judged (8 bytes each), the rest after the batch;
        // the lane takes both in event order.
        let mut skipped: Vec<(u32, VerdictLabel)> = Vec::new();
        let Ok(marks) = self.reconciler.push_engine_decoded(id, seq, payload, decoded, hashes, |i, label| skipped.push((i, label))) else {
            return;
        };
        let i = source as usize;
        if self.lanes.len() <= i {
            self.lanes.resize_with(i + 1, RouterLane::default);
        }
        let lane = &mut self.lanes[i];
        lane.frames.insert(seq, first_event_id);
        let kept = marks.into_iter().map(|(origin, mark)| (origin.event_index, mark));
        let mut skipped = skipped.into_iter().map(|(i, label)| (i, RelayMark::Drops(label))).peekable();
        let mut kept = kept.peekable();
        loop {
            let next = match (kept.peek(), skipped.peek()) {
                (Some(k), Some(s)) if s.0 < k.0 => skipped.next(),
                (Some(_), _) => kept.next(),
                (None, _) => skipped.next(),
            };
            let Some((index, mark)) = next else { break };
            lane.push(time_ms, mark, first_event_id + u64::from(index));
        }
    }

    /// One event-plane message: the envelope as relayed (`payload` of a live frame), or the
    /// frames as recorded (`[subject, body]` from NATS, Dynamo's 4 ZMQ-plane frames).
    pub fn push_plane(&mut self, frames: &[&[u8]]) {
        self.stale = true;
        let result = match frames {
            [envelope] | [_, envelope] => self.reconciler.push_plane_message(envelope),
            _ => self.reconciler.push_zmq_frames(frames),
        };
        if let Err(e) = result {
            self.last_plane_error = Some(e.to_string());
        }
    }

    pub fn lane(&self, source: u32) -> Option<&RouterLane> {
        self.lanes.get(source as usize)
    }

    pub(super) fn evict_below(&mut self, first_kept: u64) {
        for lane in &mut self.lanes {
            lane.evict_below(first_kept);
        }
    }

    /// Rebuilds the report when something was pushed since; the model calls it once per flush
    /// ([`super::Model::take_dirty`]).
    pub(super) fn refresh(&mut self) {
        if std::mem::take(&mut self.stale) {
            self.report = self.reconciler.report();
        }
    }

    /// Everything counted as of the last flush (pending predictions are not yet missing: the
    /// plane may be behind).
    pub fn report(&self) -> &RouterReport {
        &self.report
    }

    /// The report's entry for one model source.
    pub fn source_report<'a>(&self, report: &'a RouterReport, source: u32) -> Option<&'a SourceReport> {
        let id = self.ids.get(source as usize).copied().flatten()?;
        report.sources.get(id.0 as usize)
    }
}

/// What one pixel column of a router lane shows: 0 nothing, 1 only events the relay publishes,
/// 2 some event it drops.
pub fn router_columns(lane: &RouterLane, t0: f64, t1: f64, width_px: usize) -> Vec<u8> {
    let mut out = vec![0u8; width_px];
    if width_px == 0 || t1 <= t0 {
        return out;
    }
    let scale = width_px as f64 / (t1 - t0);
    let column = |t: f64| (((t - t0) * scale) as usize).min(width_px - 1);
    let range = lane.range(t0, t1);
    if range.len() <= super::timeline::MARKS_PER_COLUMN_TO_SCAN * width_px {
        for i in range {
            let v = if lane.mark[i].is_drop() { 2 } else { 1 };
            let x = column(lane.time_ms[i]);
            out[x] = out[x].max(v);
        }
        return out;
    }
    // Dense: from each column's first mark, one binary search jumps to the next column's; the
    // drops are looked up in their own short list.
    let mut i = range.start;
    while i < range.end {
        let x = column(lane.time_ms[i]);
        out[x] = out[x].max(1);
        let end = t0 + (x + 1) as f64 / scale;
        i = lane.time_ms.partition_point(|&t| t < end).max(i + 1);
    }
    let first_drop = lane.drop_times.partition_point(|&t| t < t0);
    for d in first_drop..lane.drop_times.len() {
        let t = lane.drop_times[d];
        if t >= t1 {
            break;
        }
        out[column(t)] = 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_shows_a_drop_over_publishes() {
        let mut lane = RouterLane::default();
        lane.push(0.0, RelayMark::Publishes, 0);
        lane.push(0.5, RelayMark::Drops(VerdictLabel::UnknownMedium), 1);
        lane.push(5.0, RelayMark::Publishes, 2);
        assert_eq!(router_columns(&lane, 0.0, 10.0, 10), [2, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        lane.frames.insert(7, 0);
        assert_eq!(lane.time_of(7, 1), Some(0.5));
        lane.evict_below(2);
        assert!(lane.event_id.iter().eq(&[2]));
        assert_eq!(lane.time_of(7, 1), None);
        assert!(lane.drop_times.is_empty(), "the drop's time goes with its mark");
    }

    #[test]
    fn a_dense_lane_draws_the_columns_a_scan_of_every_mark_draws() {
        let mut lane = RouterLane::default();
        // 40 marks a millisecond for 2 s with gaps (t in [500, 700) is empty) and a few drops.
        for i in 0..80_000u64 {
            let t = i as f64 / 40.0;
            if (500.0..700.0).contains(&t) {
                continue;
            }
            let mark = if i % 9_973 == 3 { RelayMark::Drops(VerdictLabel::UnknownMedium) } else { RelayMark::Publishes };
            lane.push(t, mark, i);
        }
        let (t0, t1, width) = (100.0, 1_900.0, 300);
        assert!(lane.range(t0, t1).len() > crate::model::timeline::MARKS_PER_COLUMN_TO_SCAN * width);
        let drawn = router_columns(&lane, t0, t1, width);
        let scale = width as f64 / (t1 - t0);
        let mut scanned = vec![0u8; width];
        for i in lane.range(t0, t1) {
            let x = (((lane.time_ms[i] - t0) * scale) as usize).min(width - 1);
            scanned[x] = scanned[x].max(if lane.mark[i].is_drop() { 2 } else { 1 });
        }
        assert_eq!(drawn, scanned);
        assert!(drawn.contains(&0) && drawn.contains(&2));
    }
}

/// What the router's side says of one engine event, for the inspector: the RouterEvent the
/// relay publishes for it (or the rule that drops it) and whether the event plane delivered it.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterDetail {
    pub policy: &'static str,
    /// `None` when the relay publishes nothing; then `dropped` says why.
    pub published: Option<kvscope_router::RouterEvent>,
    pub dropped: Option<(VerdictLabel, String)>,
    /// What the relay's publisher stage did with it, in words, when it coalesced or held it back.
    pub relay_note: Option<String>,
    /// What the reconciliation recorded for it: `None` when it kept no difference (matched, or
    /// past the differences kept), else the difference kind and the fields.
    pub difference: Option<String>,
    /// What arrived in its place, when a mismatch was recorded.
    pub received: Option<kvscope_router::RouterEvent>,
}

impl super::Model {
    /// The router's view of event `id` (an engine event), when there is an event plane. The
    /// prediction re-runs the relay's normalizer over the event's batch alone: state learned
    /// from earlier batches (attention groups) is not replayed, as the inspector's rule sentences
    /// are not.
    pub fn router_detail(&self, id: u64) -> Option<RouterDetail> {
        let router = self.router.as_ref()?;
        let loc = self.event_loc(id)?;
        let (frame, _) = self.bytes_of_event(id)?;
        let src = self.source(loc.source)?;
        let worker = src.worker_id.parse::<u64>().ok()?;
        let predictions = kvscope_router::predict(frame.payload()?, worker, src.dp_rank, self.config.block_size, router.policy).ok()?;
        let p = predictions.iter().find(|p| p.origin.event_index == loc.index)?;
        let relay_note = p.outcome.relay_note();
        let (published, dropped) = match &p.outcome {
            Predicted::Publish(e) => (Some(e.clone()), None),
            Predicted::Coalesced { into } => (predictions.iter().find(|q| q.origin == *into).and_then(|q| q.router_event().cloned()), None),
            Predicted::Dropped { label, sentence } => (None, Some((*label, sentence.clone()))),
            Predicted::HeldBack => (None, None),
        };
        let diff = router.source_report(router.report(), loc.source).and_then(|s| {
            s.differences.iter().find(|d| d.origin.is_some_and(|o| o.seq == frame.seq && o.event_index == loc.index)).cloned()
        });
        let difference = diff.as_ref().map(|d| {
            let fields: Vec<&str> = d.fields.iter().map(|f| f.as_str()).collect();
            if fields.is_empty() {
                format!("{:?}", d.kind).to_lowercase()
            } else {
                format!("{:?} ({})", d.kind, fields.join(", ")).to_lowercase()
            }
        });
        Some(RouterDetail {
            policy: router.policy.name,
            published,
            dropped,
            relay_note,
            difference,
            received: diff.and_then(|d| d.received),
        })
    }
}

/// A RouterEvent in one line: "stored on host_pinned: 2 blocks 1001 1002, parent 7, tokens hashes …".
pub fn describe(e: &kvscope_router::RouterEvent) -> String {
    use kvscope_router::EventData;
    let head = format!("worker {} dp {} on {}", e.worker_id, e.event.dp_rank, e.storage_tier);
    match &e.event.data {
        EventData::Stored(s) => {
            let blocks: Vec<String> =
                s.blocks.iter().take(4).map(|b| format!("{} (tokens {:016x})", b.block_hash, b.tokens_hash)).collect();
            let more = if s.blocks.len() > 4 { format!(" +{} more", s.blocks.len() - 4) } else { String::new() };
            let parent = s.parent_hash.map_or("none".to_owned(), |p| p.to_string());
            format!("stored, {head}: {} blocks [{}{more}], parent {parent}", s.blocks.len(), blocks.join(", "))
        }
        EventData::Removed(r) => format!("removed, {head}: {} blocks", r.block_hashes.len()),
        EventData::Cleared => format!("cleared, {head}"),
    }
}
