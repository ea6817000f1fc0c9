//! Timeline lanes: one per source, one mark per classified event, and the per-pixel
//! aggregation the canvas draws.
//!
//! A lane keeps parallel vectors (time, class under A, class under B, event id) in arrival
//! order, so a visible window is found by binary search and folded into at most one column per
//! pixel. Drawing cost is then bounded by the canvas width times the lane count, not by the
//! number of events (a million retained events across 64 lanes still draws in a few
//! milliseconds). The rejected alternative, one SVG element per mark, stops being usable at
//! a few thousand marks.
//!
//! Every mark is also counted in its lane's time [`Bucket`]s (100 ms at first, doubling past
//! [`MAX_BUCKETS`]). A window as coarse as the buckets is drawn from them alone, so the
//! default whole-session view costs at most [`MAX_BUCKETS`] steps per lane however many
//! millions of marks there are; and marks whose event records were evicted (the page keeps 5
//! million by default) live on in the buckets, so older time is drawn from them, never blank.
//!
//! Neighbours: [`super::classes`] names what a class code means; `views::timeline` draws the
//! columns this module computes.

use super::chunked::Chunked;
use super::classes::{ClassCode, ClassSet, ClassTable};
use kvscope_engine_protocol::Severity;

/// One source's marks, oldest first, in [`Chunked`] columns (eviction frees whole chunks
/// instead of moving every mark kept).
#[derive(Debug, Default, Clone)]
pub struct Lane {
    /// Receive time in milliseconds since the model's origin; non-decreasing.
    pub time_ms: Chunked<f64>,
    /// The verdict class under policy A.
    pub class_a: Chunked<ClassCode>,
    /// The verdict class under policy B.
    pub class_b: Chunked<ClassCode>,
    /// The model's event id, to open the event in the inspector.
    pub event_id: Chunked<u64>,
    /// Every mark since the session started (evicted or not), folded by time: bucket `i`
    /// covers `[i, i + 1) * bucket_ms`.
    pub buckets: Vec<Bucket>,
    /// The buckets' width; starts at [`BUCKET_MS`] and doubles whenever they would exceed
    /// [`MAX_BUCKETS`], so their memory stays bounded however long the session runs.
    pub bucket_ms: f64,
    /// The retained marks folded into [`FINE_MS`] slots, one per slot that holds a mark: a
    /// window too dense to scan mark by mark is drawn from these.
    pub fine: Chunked<FineBucket>,
    /// Every class marked on this lane since the session started, under either policy (the
    /// legend's entries: evicted marks are still drawn from the buckets).
    pub seen: ClassSet,
}

/// The first buckets' width.
pub const BUCKET_MS: f64 = 100.0;

/// The fine buckets' width: a dense window drawn from them places each mark to within 10 ms.
pub const FINE_MS: f64 = 10.0;

/// Past this many retained marks per pixel column on average, a window is drawn from the fine
/// buckets: at 64 lanes of 750 marks a second, a scan of every mark in a two-minute window took
/// 50-150 ms at every refresh, and in a session's first seconds (columns narrower than
/// [`FINE_MS`]) each refresh's scan grew to 20-35 ms.
pub const MARKS_PER_COLUMN_TO_SCAN: usize = 4;

/// The marks of one [`FINE_MS`] slot of a lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FineBucket {
    /// The slot's start is `slot * FINE_MS`.
    pub slot: u32,
    pub bucket: Bucket,
}

/// Buckets kept per lane (16 bytes each, 32 KiB a lane); past it, neighbours merge and the
/// width doubles.
pub const MAX_BUCKETS: usize = 2_048;

/// Marks of one stretch of time whose events are gone, as the canvas needs them: how many,
/// how many were marked under each policy, and the most severe class under each policy, over
/// every mark and over the mismatches only ([`Show`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub events: u32,
    pub marked: [u32; 2],
    /// `[policy][show]`: show 0 is [`Show::Mismatches`], 1 is [`Show::All`].
    pub top: [[ClassCode; 2]; 2],
}

impl Bucket {
    fn add(&mut self, classes: &ClassTable, codes: [ClassCode; 2], mismatch: bool) {
        self.events = self.events.saturating_add(1);
        for (policy, &code) in codes.iter().enumerate() {
            let severity = classes.severity(code);
            if mismatch && severity.is_marked() {
                self.marked[policy] = self.marked[policy].saturating_add(1);
            }
            if mismatch && severity > classes.severity(self.top[policy][0]) {
                self.top[policy][0] = code;
            }
            if severity > classes.severity(self.top[policy][1]) {
                self.top[policy][1] = code;
            }
        }
    }

    fn merge(&mut self, classes: &ClassTable, other: &Bucket) {
        self.events = self.events.saturating_add(other.events);
        for policy in 0..2 {
            self.marked[policy] = self.marked[policy].saturating_add(other.marked[policy]);
            for show in 0..2 {
                if classes.severity(other.top[policy][show]) > classes.severity(self.top[policy][show]) {
                    self.top[policy][show] = other.top[policy][show];
                }
            }
        }
    }
}

impl Lane {
    pub fn len(&self) -> usize {
        self.time_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_ms.is_empty()
    }

    pub fn push(&mut self, time_ms: f64, class_a: ClassCode, class_b: ClassCode, event_id: u64, classes: &ClassTable) {
        // Receive times can step back by a little across a reconnect or a replayed frame; the
        // binary search needs order, so a mark never goes before the lane's last one.
        let time_ms = match self.time_ms.last() {
            Some(&last) if time_ms < last => last,
            _ => time_ms,
        };
        self.time_ms.push(time_ms);
        self.class_a.push(class_a);
        self.class_b.push(class_b);
        self.event_id.push(event_id);
        self.seen.insert(class_a);
        self.seen.insert(class_b);
        if self.bucket_ms <= 0.0 {
            self.bucket_ms = BUCKET_MS;
        }
        let mut b = (time_ms.max(0.0) / self.bucket_ms) as usize;
        while b >= MAX_BUCKETS {
            self.coarsen(classes);
            b = (time_ms.max(0.0) / self.bucket_ms) as usize;
        }
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, Bucket::default());
        }
        let mismatch = is_mismatch(self, classes, self.len() - 1);
        self.buckets[b].add(classes, [class_a, class_b], mismatch);
        let slot = (time_ms.max(0.0) / FINE_MS) as u32;
        match self.fine.last_mut() {
            Some(f) if f.slot == slot => f.bucket.add(classes, [class_a, class_b], mismatch),
            _ => {
                let mut bucket = Bucket::default();
                bucket.add(classes, [class_a, class_b], mismatch);
                self.fine.push(FineBucket { slot, bucket });
            }
        }
    }

    /// Bytes reserved for the retained marks and their fine buckets.
    pub fn reserved_bytes(&self) -> usize {
        self.time_ms.capacity_bytes()
            + self.class_a.capacity_bytes()
            + self.class_b.capacity_bytes()
            + self.event_id.capacity_bytes()
            + self.fine.capacity_bytes()
    }

    /// Drops every mark whose event id is below `first_kept`; the buckets keep counting them.
    pub fn evict_below(&mut self, first_kept: u64) {
        let n = self.event_id.partition_point(|&id| id < first_kept);
        if n > 0 {
            self.time_ms.drop_front(n);
            self.class_a.drop_front(n);
            self.class_b.drop_front(n);
            self.event_id.drop_front(n);
            // The fine buckets cover the retained marks (the oldest slot may also count a few
            // evicted ones, as the coarse buckets count every mark).
            let first_slot = self.time_ms.first().map_or(u32::MAX, |&t| (t.max(0.0) / FINE_MS) as u32);
            let stale = self.fine.partition_point(|f| f.slot < first_slot);
            self.fine.drop_front(stale);
        }
    }

    /// Halves the buckets' resolution: neighbours merge, the width doubles.
    fn coarsen(&mut self, classes: &ClassTable) {
        let merged: Vec<Bucket> = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut b = pair[0];
                if let Some(second) = pair.get(1) {
                    b.merge(classes, second);
                }
                b
            })
            .collect();
        self.buckets = merged;
        self.bucket_ms *= 2.0;
    }

    /// Where the lane's time starts: its first bucket with events, else its first mark.
    pub fn first_time_ms(&self) -> Option<f64> {
        self.buckets.iter().position(|b| b.events > 0).map(|i| i as f64 * self.bucket_ms).or_else(|| self.time_ms.first().copied())
    }

    /// Index range of the marks inside `[t0, t1)`.
    pub fn range(&self, t0: f64, t1: f64) -> std::ops::Range<usize> {
        let start = self.time_ms.partition_point(|&t| t < t0);
        let end = self.time_ms.partition_point(|&t| t < t1);
        start..end.max(start)
    }

    fn classes(&self, policy_b: bool) -> &Chunked<ClassCode> {
        if policy_b { &self.class_b } else { &self.class_a }
    }
}

/// What one pixel column of one lane shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Column {
    /// The most severe class seen in the column (fatal over skipped over applied); 0 when the
    /// column only holds agreements and only mismatches are shown.
    pub top: ClassCode,
    /// How many events fell into the column.
    pub events: u32,
    /// How many of them were skipped or fatal.
    pub marked: u32,
}

/// Which marks a lane draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Show {
    /// Only events where the policies disagree, or that are fatal or a notable skip under
    /// either: what an operator is looking for. Agreements are drawn dimmed.
    #[default]
    Mismatches,
    /// Every event, coloured by its class.
    All,
}

impl Show {
    pub fn as_str(self) -> &'static str {
        match self {
            Show::Mismatches => "mismatches",
            Show::All => "all",
        }
    }
}

/// True for a mark worth drawing in colour under [`Show::Mismatches`]: the policies decide it
/// differently, or either stops or skips it for a reason that is not routine filtering.
pub fn is_mismatch(lane: &Lane, classes: &ClassTable, i: usize) -> bool {
    let (a, b) = (lane.class_a[i], lane.class_b[i]);
    a != b || classes.severity(a) >= Severity::Skip || classes.severity(b) >= Severity::Skip
}

/// Folds the marks of `lane` inside `[t0, t1)` into `width_px` columns under one policy:
/// from the buckets alone when a column is at least a bucket wide (at most [`MAX_BUCKETS`]
/// steps), else from the buckets before the first retained mark and the marks after it (one
/// pass over the visible marks).
pub fn columns(lane: &Lane, classes: &ClassTable, t0: f64, t1: f64, width_px: usize, policy_b: bool, show: Show) -> Vec<Column> {
    let mut out = vec![Column::default(); width_px];
    if width_px == 0 || t1 <= t0 {
        return out;
    }
    let px_ms = (t1 - t0) / width_px as f64;
    if px_ms >= lane.bucket_ms && lane.bucket_ms > 0.0 {
        bucket_columns(&mut out, lane, classes, t0, t1, t1, policy_b, show);
        return out;
    }
    let first_mark = lane.time_ms.first().copied().unwrap_or(f64::INFINITY);
    if first_mark > t0 {
        bucket_columns(&mut out, lane, classes, t0, t1, t1.min(first_mark), policy_b, show);
    }
    if lane.range(t0, t1).len() > MARKS_PER_COLUMN_TO_SCAN * width_px {
        fine_columns(&mut out, lane, classes, t0, t1, policy_b, show);
    } else {
        mark_columns(&mut out, lane, classes, t0, t1, policy_b, show);
    }
    out
}

/// Adds the fine buckets starting inside `[t0, t1)`: each in the column of its start when
/// columns are at least a bucket wide, else spread over the columns it covers (so a mark is
/// placed to within [`FINE_MS`] either way; picking an event under the pointer stays exact).
fn fine_columns(out: &mut [Column], lane: &Lane, classes: &ClassTable, t0: f64, t1: f64, policy_b: bool, show: Show) {
    let width_px = out.len();
    let scale = width_px as f64 / (t1 - t0);
    let narrow = (t1 - t0) / (width_px as f64) < FINE_MS;
    let (policy, show_index) = (usize::from(policy_b), usize::from(show == Show::All));
    let start = lane.fine.partition_point(|f| f64::from(f.slot) * FINE_MS < t0);
    for i in start..lane.fine.len() {
        let f = &lane.fine[i];
        let t = f64::from(f.slot) * FINE_MS;
        if t >= t1 {
            break;
        }
        let x0 = (((t - t0) * scale) as usize).min(width_px - 1);
        let top = f.bucket.top[policy][show_index];
        if narrow {
            let x1 = (((t + FINE_MS - t0) * scale).ceil() as usize).clamp(x0 + 1, width_px);
            spread(&mut out[x0..x1], classes, f.bucket.events, f.bucket.marked[policy], top);
            continue;
        }
        let col = &mut out[x0];
        col.events = col.events.saturating_add(f.bucket.events);
        col.marked = col.marked.saturating_add(f.bucket.marked[policy]);
        if classes.severity(top) > classes.severity(col.top) {
            col.top = top;
        }
    }
}

/// Adds a bucket's counts to the columns it covers, evenly (at least one event each), and its
/// worst class to each.
fn spread(cols: &mut [Column], classes: &ClassTable, events: u32, marked: u32, top: ClassCode) {
    let n = cols.len().max(1) as u32;
    for col in cols {
        col.events = col.events.saturating_add((events / n).max(1));
        col.marked = col.marked.saturating_add(marked / n);
        if classes.severity(top) > classes.severity(col.top) {
            col.top = top;
        }
    }
}

/// Adds the buckets overlapping `[t0, clip_end)` to columns laid out over `[t0, t1)`.
#[allow(clippy::too_many_arguments)]
fn bucket_columns(out: &mut [Column], lane: &Lane, classes: &ClassTable, t0: f64, t1: f64, clip_end: f64, policy_b: bool, show: Show) {
    let width_px = out.len();
    if lane.buckets.is_empty() || clip_end <= t0 || lane.bucket_ms <= 0.0 {
        return;
    }
    let scale = width_px as f64 / (t1 - t0);
    let (policy, show_index) = (usize::from(policy_b), usize::from(show == Show::All));
    let first_bucket = ((t0.max(0.0) / lane.bucket_ms) as usize).min(lane.buckets.len());
    for (i, bucket) in lane.buckets.iter().enumerate().skip(first_bucket) {
        let start = i as f64 * lane.bucket_ms;
        if start >= clip_end {
            break;
        }
        if bucket.events == 0 {
            continue;
        }
        let x0 = (((start - t0).max(0.0) * scale) as usize).min(width_px - 1);
        let end = (start + lane.bucket_ms).min(clip_end);
        let x1 = (((end - t0) * scale).ceil() as usize).clamp(x0 + 1, width_px);
        spread(&mut out[x0..x1], classes, bucket.events, bucket.marked[policy], bucket.top[policy][show_index]);
    }
}

fn mark_columns(out: &mut [Column], lane: &Lane, classes: &ClassTable, t0: f64, t1: f64, policy_b: bool, show: Show) {
    let width_px = out.len();
    let scale = width_px as f64 / (t1 - t0);
    let codes = lane.classes(policy_b);
    for i in lane.range(t0, t1) {
        let x = (((lane.time_ms[i] - t0) * scale) as usize).min(width_px - 1);
        let code = codes[i];
        let col = &mut out[x];
        col.events += 1;
        if show == Show::Mismatches && !is_mismatch(lane, classes, i) {
            continue;
        }
        let severity = classes.severity(code);
        if severity.is_marked() {
            col.marked += 1;
        }
        if severity > classes.severity(col.top) {
            col.top = code;
        }
    }
}

/// Verdict counts per class under each policy for the marks inside `[t0, t1)` of `lanes`: what
/// a selected time range holds.
pub fn range_counts<'a>(lanes: impl Iterator<Item = &'a Lane>, t0: f64, t1: f64) -> [std::collections::BTreeMap<ClassCode, u64>; 2] {
    let mut out: [std::collections::BTreeMap<ClassCode, u64>; 2] = Default::default();
    for lane in lanes {
        for i in lane.range(t0, t1) {
            *out[0].entry(lane.class_a[i]).or_default() += 1;
            *out[1].entry(lane.class_b[i]).or_default() += 1;
        }
    }
    out
}

/// A run of neighbouring columns with the same top class: one rectangle on the canvas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub x: usize,
    pub width: usize,
    pub top: ClassCode,
}

/// Merges equal neighbouring columns, so a lane that is one colour is one `fill_rect`.
pub fn runs(columns: &[Column]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (x, col) in columns.iter().enumerate() {
        if col.events == 0 || col.top == 0 {
            continue;
        }
        match out.last_mut() {
            Some(run) if run.top == col.top && run.x + run.width == x => run.width += 1,
            _ => out.push(Run { x, width: 1, top: col.top }),
        }
    }
    out
}

/// Runs of columns that hold only agreements under [`Show::Mismatches`]: drawn as one dim
/// line each, so a quiet stretch reads as "events, all agreed", not as "no data".
pub fn agreement_runs(columns: &[Column]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (x, col) in columns.iter().enumerate() {
        if col.events == 0 || col.top != 0 {
            continue;
        }
        match out.last_mut() {
            Some((start, width)) if *start + *width == x => *width += 1,
            _ => out.push((x, 1)),
        }
    }
    out
}

/// The event nearest to time `t` in a lane, within `tolerance_ms`, preferring the most severe
/// class under the policy shown (a click on a red pixel opens a fatal event, not its neighbour).
pub fn pick(lane: &Lane, classes: &ClassTable, t: f64, tolerance_ms: f64, policy_b: bool) -> Option<u64> {
    let range = lane.range(t - tolerance_ms, t + tolerance_ms);
    let codes = lane.classes(policy_b);
    range
        .max_by(|&i, &j| {
            let si = classes.severity(codes[i]);
            let sj = classes.severity(codes[j]);
            si.cmp(&sj).then_with(|| {
                let di = (lane.time_ms[i] - t).abs();
                let dj = (lane.time_ms[j] - t).abs();
                dj.partial_cmp(&di).unwrap_or(std::cmp::Ordering::Equal)
            })
        })
        .map(|i| lane.event_id[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::classes::{Class, ClassTable};
    use kvscope_normalize::{StorageTier, VerdictLabel};

    fn table() -> (ClassTable, ClassCode, ClassCode, ClassCode) {
        let mut t = ClassTable::default();
        let applied = t.intern(Class::applied(StorageTier::Device));
        let skipped = t.intern(Class::labelled(VerdictLabel::OffloadBlockSizeMismatch));
        let fatal = t.intern(Class::labelled(VerdictLabel::BlockSizeMismatch));
        (t, applied, skipped, fatal)
    }

    #[test]
    fn a_column_shows_its_most_severe_class_and_counts_every_event() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        lane.push(0.0, applied, applied, 0, &t);
        lane.push(0.4, fatal, skipped, 1, &t);
        lane.push(0.6, applied, applied, 2, &t);
        lane.push(5.0, skipped, skipped, 3, &t);
        let cols = columns(&lane, &t, 0.0, 10.0, 10, false, Show::All);
        assert_eq!(cols[0], Column { top: fatal, events: 3, marked: 1 });
        assert_eq!(cols[5], Column { top: skipped, events: 1, marked: 1 });
        let cols_b = columns(&lane, &t, 0.0, 10.0, 10, true, Show::All);
        assert_eq!(cols_b[0].top, skipped);
    }

    #[test]
    fn a_million_marks_fold_into_one_column_per_pixel() {
        let (t, applied, skipped, _) = table();
        let mut lane = Lane::default();
        for i in 0..1_000_000u64 {
            let c = if i % 1000 == 0 { skipped } else { applied };
            lane.push(i as f64, c, c, i, &t);
        }
        let cols = columns(&lane, &t, 0.0, 1_000_000.0, 800, false, Show::All);
        assert_eq!(cols.len(), 800);
        assert_eq!(cols.iter().map(|c| c.events as u64).sum::<u64>(), 1_000_000);
        assert!(cols.iter().all(|c| c.top == skipped));
        assert_eq!(runs(&cols).len(), 1, "one colour is one rectangle");
    }

    #[test]
    fn by_default_only_mismatches_are_coloured_and_agreements_are_counted() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        lane.push(0.0, applied, applied, 0, &t); // agreement: dimmed
        lane.push(1.0, fatal, skipped, 1, &t); // disagreement
        lane.push(2.0, skipped, skipped, 2, &t); // the same notable skip under both: still shown
        let cols = columns(&lane, &t, 0.0, 10.0, 10, false, Show::Mismatches);
        assert_eq!(cols[0], Column { top: 0, events: 1, marked: 0 });
        assert_eq!(cols[1].top, fatal);
        assert_eq!(cols[2].top, skipped);
        let r = runs(&cols);
        assert_eq!(r.len(), 2, "agreements draw no coloured run: {r:?}");
        assert_eq!(agreement_runs(&cols), [(0, 1)]);
        let counts = range_counts(std::iter::once(&lane), 0.5, 10.0);
        assert_eq!(counts[0].get(&fatal), Some(&1));
        assert_eq!(counts[1].get(&skipped), Some(&2));
        assert_eq!(counts[0].get(&applied), None);
    }

    #[test]
    fn eviction_drops_marks_below_the_first_kept_event() {
        let (t, applied, _, _) = table();
        let mut lane = Lane::default();
        for i in 0..10 {
            lane.push(i as f64, applied, applied, i, &t);
        }
        lane.evict_below(4);
        assert_eq!(lane.len(), 6);
        assert_eq!(lane.event_id[0], 4);
        assert_eq!(lane.buckets, [Bucket { events: 10, marked: [0, 0], top: [[0, applied], [0, applied]] }], "still counted");
    }

    #[test]
    fn a_dense_window_is_drawn_from_fine_buckets_with_the_classes_a_scan_finds() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        // 40 marks every 10 ms for 4 s, with a fatal (a skip under B) every 777th.
        for i in 0..16_000u64 {
            let bad = i % 777 == 5;
            lane.push(i as f64 / 4.0, if bad { fatal } else { applied }, if bad { skipped } else { applied }, i, &t);
        }
        lane.evict_below(4_000);
        assert_eq!(lane.fine.first().map(|f| f.slot), Some(100), "fine buckets follow the marks kept");
        // 200 columns of 20 ms over the retained three seconds: 60 marks a column, so fine.
        let (t0, t1, width) = (1_000.0, 5_000.0, 200);
        assert!(lane.range(t0, t1).len() > MARKS_PER_COLUMN_TO_SCAN * width);
        for policy_b in [false, true] {
            for show in [Show::All, Show::Mismatches] {
                let drawn = columns(&lane, &t, t0, t1, width, policy_b, show);
                let mut scanned = vec![Column::default(); width];
                mark_columns(&mut scanned, &lane, &t, t0, t1, policy_b, show);
                let tops = |c: &[Column]| c.iter().map(|c| (c.top, c.events)).collect::<Vec<_>>();
                assert_eq!(tops(&drawn), tops(&scanned), "policy_b {policy_b}, {show:?}");
                assert!(drawn.iter().any(|c| c.top == if policy_b { skipped } else { fatal }));
            }
        }
    }

    #[test]
    fn a_dense_young_window_spreads_fine_buckets_and_marks_within_one_bucket_of_a_scan() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        // A session's first 4 s at 4 marks a millisecond, a fatal (a skip under B) every 777th.
        for i in 0..16_000u64 {
            let bad = i % 777 == 5;
            lane.push(i as f64 / 4.0, if bad { fatal } else { applied }, if bad { skipped } else { applied }, i, &t);
        }
        // 1,000 columns of 4 ms: narrower than a fine bucket, 16 marks a column.
        let (t0, t1, width) = (0.0, 4_000.0, 1_000);
        assert!(lane.range(t0, t1).len() > MARKS_PER_COLUMN_TO_SCAN * width);
        let px_per_bucket = (FINE_MS / ((t1 - t0) / width as f64)).ceil() as usize;
        for policy_b in [false, true] {
            for show in [Show::All, Show::Mismatches] {
                let drawn = columns(&lane, &t, t0, t1, width, policy_b, show);
                let mut scanned = vec![Column::default(); width];
                mark_columns(&mut scanned, &lane, &t, t0, t1, policy_b, show);
                let bad = if policy_b { skipped } else { fatal };
                let at = |c: &[Column]| c.iter().enumerate().filter(|(_, c)| c.top == bad).map(|(x, _)| x).collect::<Vec<_>>();
                let (drawn_bad, scanned_bad) = (at(&drawn), at(&scanned));
                assert_eq!(scanned_bad.len(), 21, "policy_b {policy_b}, {show:?}");
                // Drawn from the buckets, not scanned: each mark covers its bucket's columns.
                assert!(drawn_bad.len() > scanned_bad.len(), "{} columns", drawn_bad.len());
                // Every scanned mark is drawn, and nothing is drawn farther than one bucket away.
                for x in &scanned_bad {
                    assert!(drawn_bad.contains(x), "column {x} lost its mark (policy_b {policy_b}, {show:?})");
                }
                for x in &drawn_bad {
                    assert!(scanned_bad.iter().any(|s| s.abs_diff(*x) <= px_per_bucket), "column {x} marked out of place");
                }
                let events = |c: &[Column]| c.iter().map(|c| u64::from(c.events)).sum::<u64>();
                assert!(events(&drawn).abs_diff(events(&scanned)) <= width as u64, "counts kept to within a column each");
            }
        }
    }

    #[test]
    fn a_lane_remembers_every_class_it_marked_after_its_marks_are_evicted() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        lane.push(0.0, fatal, skipped, 0, &t);
        for i in 1..10 {
            lane.push(i as f64, applied, applied, i, &t);
        }
        lane.evict_below(5);
        assert!(lane.class_a.iter().chain(lane.class_b.iter()).all(|&c| c == applied), "the fatal mark is evicted");
        // The legend names it still: the buckets go on drawing it.
        assert!([applied, skipped, fatal].iter().all(|&c| lane.seen.contains(c)));
        assert!(!lane.seen.contains(0));
    }

    #[test]
    fn evicted_time_is_drawn_from_buckets_never_blank_with_the_same_worst_class() {
        let (t, applied, skipped, fatal) = table();
        let mut lane = Lane::default();
        // Two minutes at one mark every 10 ms: a fatal under A (skip under B) at 61.5 s.
        for i in 0..12_000u64 {
            let (a, b) = if i == 6_150 { (fatal, skipped) } else { (applied, applied) };
            lane.push(i as f64 * 10.0, a, b, i, &t);
        }
        assert_eq!(lane.bucket_ms, 100.0);
        // The reference: every mark scanned, one column per bucket.
        let marks = |lane: &Lane, b: bool, show| {
            let mut out = vec![Column::default(); 1_200];
            mark_columns(&mut out, lane, &t, 0.0, 120_000.0, b, show);
            out
        };
        let before: Vec<[Vec<Column>; 2]> = [Show::All, Show::Mismatches].map(|s| [marks(&lane, false, s), marks(&lane, true, s)]).into();
        lane.evict_below(10_000);
        assert_eq!(lane.len(), 2_000);
        assert_eq!(lane.first_time_ms(), Some(0.0), "the lane still starts at the session's start");
        for (k, show) in [Show::All, Show::Mismatches].into_iter().enumerate() {
            for (p, policy_b) in [false, true].into_iter().enumerate() {
                // Columns a bucket wide (drawn from buckets), and zoomed in (marks after the first kept one).
                for width in [1_200usize, 2_400] {
                    let after = columns(&lane, &t, 0.0, 120_000.0, width, policy_b, show);
                    for (x, a) in after.iter().enumerate() {
                        let b = &before[k][p][x * 1_200 / width];
                        assert!(a.events > 0, "column {x} of {width} ({show:?}, B {policy_b}) is blank");
                        assert_eq!(a.top, b.top, "column {x} of {width} ({show:?}, B {policy_b})");
                    }
                }
            }
        }
        assert_eq!(columns(&lane, &t, 0.0, 120_000.0, 1_200, false, Show::All)[615].top, fatal);
    }

    #[test]
    fn buckets_stay_bounded_however_long_the_session() {
        let (t, applied, _, fatal) = table();
        let mut lane = Lane::default();
        // Three hours at a mark per second, evicted as it goes.
        for i in 0..10_800u64 {
            lane.push(i as f64 * 1_000.0, if i == 9_000 { fatal } else { applied }, applied, i, &t);
            lane.evict_below(i);
        }
        assert!(lane.buckets.len() <= MAX_BUCKETS, "{}", lane.buckets.len());
        assert_eq!(lane.bucket_ms, 6_400.0, "3 hours from 100 ms buckets, coarsened six times to stay within 2,048");
        let cols = columns(&lane, &t, 0.0, 10_800_000.0, 1_080, false, Show::All);
        assert!(cols.iter().all(|c| c.events > 0));
        assert_eq!(cols[900].top, fatal);
    }

    #[test]
    fn pick_prefers_the_fatal_event_near_the_click() {
        let (t, applied, _, fatal) = table();
        let mut lane = Lane::default();
        lane.push(10.0, applied, applied, 7, &t);
        lane.push(11.0, fatal, applied, 8, &t);
        assert_eq!(pick(&lane, &t, 10.0, 2.0, false), Some(8));
        assert_eq!(pick(&lane, &t, 10.0, 2.0, true), Some(7));
        assert_eq!(pick(&lane, &t, 50.0, 2.0, false), None);
    }

    #[test]
    fn times_that_step_back_are_clamped_to_keep_the_lane_sorted() {
        let (t, applied, _, _) = table();
        let mut lane = Lane::default();
        lane.push(5.0, applied, applied, 0, &t);
        lane.push(3.0, applied, applied, 1, &t);
        assert!(lane.time_ms.iter().eq(&[5.0, 5.0]));
    }
}
