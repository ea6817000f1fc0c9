//! The mismatch timeline: a lane per source over wall-clock receive time (UTC); by default only
//! the events the policies decide differently or that are fatal or skipped under either, with
//! agreements dimmed; where a policy's indexer exits, a marker and the rest of its half hatched.
//!
//! The engine paints the whole image ([`TimelineImage`]); each lane is folded into one column
//! per pixel (`model::timeline::columns`), so a paint costs the canvas width times the lane
//! count, not the number of events. The page puts the pixels on its canvas, writes the text
//! over it, and asks here what a pixel holds ([`hover_text`]) and which event a click opens
//! ([`pick_at`]).

use kvscope_engine_protocol::fmt::{human_duration_ms, thousands};
use kvscope_engine_protocol::overview::Row;
use kvscope_engine_protocol::view::{LaneLabel, RangeCounts, Timeline};
use kvscope_engine_protocol::{Settings, Severity, Side, ViewQuery};

use super::clock;
use super::pixels::{Pixels, rgb};
use crate::model::Model;
use crate::model::classes::{ClassSet, FATAL, OTHER_SKIP};
use crate::model::timeline::{Show, agreement_runs, columns, pick, range_counts, runs};

const LANE_MAX_PX: f64 = 32.0;
const LANE_MIN_PX: f64 = 8.0;
const AXIS_PX: f64 = 20.0;
/// The narrowest canvas painted, in CSS pixels.
const MIN_WIDTH_PX: f64 = 200.0;

/// Lanes drawn when no source is opened and no filter given: a canvas of 512 lanes shows none of
/// them legibly, so a large fleet shows the sources the overview lists first.
pub const LANES_UNOPENED: usize = 24;

/// The timeline's pixels: `width` x `height` device pixels, RGBA.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineImage {
    pub width: u32,
    pub height: u32,
    pub rgba: Vec<u8>,
}

fn lane_px(lanes: usize) -> f64 {
    (420.0 / lanes.max(1) as f64).clamp(LANE_MIN_PX, LANE_MAX_PX)
}

/// Source indices shown, in index order: the sources opened from the overview when there are
/// any, else every one (the first [`LANES_UNOPENED`] in the overview's order, for a large
/// fleet); the worker filter applies either way. `rows` are the overview's, in its order.
pub fn shown_lanes(rows: &[Row], settings: &Settings) -> Vec<u32> {
    let (text, open) = (settings.worker_filter.as_str(), &settings.open);
    let shown = |r: &&Row| (text.is_empty() || r.key.contains(text)) && (open.is_empty() || open.contains(&r.key));
    let mut lanes: Vec<u32> = rows.iter().filter(shown).map(|r| r.index).collect();
    if open.is_empty() {
        lanes.truncate(LANES_UNOPENED);
    }
    lanes.sort_unstable();
    lanes
}

/// Says so when the lanes are the first of a large fleet, not all of them.
fn lane_note(rows: &[Row], settings: &Settings) -> Option<String> {
    let text = settings.worker_filter.as_str();
    let total = rows.iter().filter(|r| text.is_empty() || r.key.contains(text)).count();
    (settings.open.is_empty() && total > LANES_UNOPENED).then(|| {
        format!(
            "Lanes of the {LANES_UNOPENED} sources the fleet table lists first (what stands out), of {total}; \
             open sources there to see their lanes."
        )
    })
}

/// What one model (a shard, or the whole fleet) knows of the timeline apart from its pixels:
/// the classes its lanes ever marked, and from when their records are kept.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimelineFacts {
    /// Every class some lane marked: (severity, in words, colour).
    legend: Vec<(Severity, String, String)>,
    /// Until when (ms) some lane's event records are gone, once any were evicted.
    records_gone_until: Option<f64>,
    /// The widest time bucket of a lane, in ms.
    bucket_ms: f64,
    retain_events: usize,
}

pub fn facts(m: &Model) -> TimelineFacts {
    let classes = m.classes();
    let seen = m.lanes().iter().fold(ClassSet::default(), |s, l| s.union(l.seen));
    TimelineFacts {
        legend: classes
            .iter()
            .filter(|&(code, _)| seen.contains(code))
            .map(|(code, c)| (classes.severity(code), c.describe(), classes.colour(code).to_owned()))
            .collect(),
        records_gone_until: records_gone_until(m),
        bucket_ms: m.lanes().iter().map(|l| l.bucket_ms).fold(0.0, f64::max),
        retain_events: m.config().retain_events,
    }
}

/// Until when (ms) some lane's event records are gone, once any were evicted: the time before
/// is drawn from summaries and counted short.
fn records_gone_until(m: &Model) -> Option<f64> {
    if m.evicted_events() == 0 {
        return None;
    }
    m.lanes()
        .iter()
        .filter(|l| !l.buckets.is_empty())
        .filter_map(|l| l.time_ms.first().copied())
        .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))))
}

/// The shards' timeline facts as one model's: the latest time records are gone until, the
/// widest bucket, every class marked.
fn merge_facts(parts: &[TimelineFacts]) -> TimelineFacts {
    TimelineFacts {
        legend: parts.iter().flat_map(|p| p.legend.iter().cloned()).collect(),
        records_gone_until: parts.iter().filter_map(|p| p.records_gone_until).reduce(f64::max),
        bucket_ms: parts.iter().map(|p| p.bucket_ms).fold(0.0, f64::max),
        retain_events: parts.first().map_or(0, |p| p.retain_events),
    }
}

/// Says so when older time is drawn from summaries because its events' records are gone.
fn bucket_note(f: &TimelineFacts) -> Option<String> {
    let until = f.records_gone_until?;
    Some(format!(
        "The first {} are drawn from summaries of {}: those events' records are gone (this page keeps the last {}; \
         raise with ?events=N), so marks there open nothing.",
        human_duration_ms(until),
        human_duration_ms(f.bucket_ms),
        thousands(f.retain_events as u64),
    ))
}

/// The visible window: the settings', or the whole marked span (`marked`, the shards' union).
pub fn window(marked: Option<(f64, f64)>, w: Option<(f64, f64)>) -> (f64, f64) {
    w.unwrap_or_else(|| {
        let (a, b) = crate::model::timeline_span(marked);
        let pad = (b - a) * 0.01;
        (a - pad, b + pad)
    })
}

/// Tick spacing for about `target` ticks over `span_ms`.
fn tick_ms(span_ms: f64, target: f64) -> f64 {
    let raw = span_ms / target;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if raw <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

/// An axis label in wall-clock UTC: `12:01:03` for steps of a second or more, with
/// milliseconds below that.
fn fmt_tick(t0_nanos: Option<u64>, ms: f64, step: f64) -> String {
    let Some(t0) = t0_nanos else { return format!("+{ms:.0} ms") };
    let text = clock(t0.saturating_add((ms.max(0.0) * 1e6) as u64));
    let text = text.trim_end_matches(" UTC");
    if step >= 1000.0 { text[..8.min(text.len())].to_owned() } else { text.to_owned() }
}

/// The timeline laid out for the whole fleet: the lanes shown, the window, the canvas. Every
/// shard paints its own lanes with it ([`lanes_part`]).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    pub lanes: Vec<u32>,
    pub lane_h: f64,
    /// A and B, and the router's when there is an event plane.
    pub rows_per_lane: u32,
    pub window: (f64, f64),
    pub css_size: (f64, f64),
    pub dpr: f64,
    /// The page said how wide its canvas is: there are pixels to paint.
    pub paint: bool,
    pub show_all: bool,
    /// A shift-drag's range, whose events are counted.
    pub range: Option<(f64, f64)>,
}

/// How the fleet's timeline is laid out, from the overview's rows (every engine source, in
/// its order), the marked span of every shard's lanes, and what the page shows.
pub fn layout(rows: &[Row], marked: Option<(f64, f64)>, has_router: bool, q: &ViewQuery) -> Layout {
    let lanes = shown_lanes(rows, &q.settings);
    let lane_h = lane_px(lanes.len());
    let css_w = if q.canvas_width > 0.0 { q.canvas_width.max(MIN_WIDTH_PX) } else { 1000.0 };
    Layout {
        css_size: (css_w, lanes.len() as f64 * lane_h + AXIS_PX),
        lane_h,
        lanes,
        rows_per_lane: if has_router { 3 } else { 2 },
        window: window(marked, q.settings.window_ms),
        dpr: if q.device_pixel_ratio > 0.0 { q.device_pixel_ratio } else { 1.0 },
        paint: q.canvas_width > 0.0,
        show_all: q.settings.show_all,
        range: q.range,
    }
}

/// One model's lanes of the timeline: each painted in its band of the canvas's rows, and the
/// verdicts counted in the range, per policy (severity, class in words, events, colour).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LanesPart {
    /// (the canvas row the band starts at, its RGBA pixels).
    bands: Vec<(u32, serde_bytes::ByteBuf)>,
    range: [Vec<(Severity, String, u64, String)>; 2],
}

/// Paints this model's own lanes of `layout` (those of its sources) and counts its range.
pub fn lanes_part(m: &Model, layout: &Layout) -> LanesPart {
    let own: Vec<(usize, u32)> =
        layout.lanes.iter().enumerate().filter(|(_, i)| m.source(**i).is_some_and(|s| s.own)).map(|(row, i)| (row, *i)).collect();
    let bands = if layout.paint {
        own.iter()
            .map(|&(row, src)| {
                let px = paint_lane(m, layout, row, src);
                (px.first_row() as u32, serde_bytes::ByteBuf::from(px.into_rgba()))
            })
            .collect()
    } else {
        Vec::new()
    };
    let classes = m.classes();
    let range = layout.range.map_or_else(Default::default, |(a, b)| {
        let (a, b) = (a.min(b), a.max(b));
        range_counts(own.iter().filter_map(|&(_, i)| m.lanes().get(i as usize)), a, b).map(|c| {
            c.into_iter()
                .map(|(code, n)| {
                    let name = classes.get(code).map_or("no verdict".into(), |c| c.describe());
                    (classes.severity(code), name, n, classes.colour(code).to_owned())
                })
                .collect()
        })
    });
    LanesPart { bands, range }
}

/// One lane in its band of the canvas: A's row, B's row, the router's row with its markers.
fn paint_lane(m: &Model, layout: &Layout, row: usize, src: u32) -> Pixels {
    let (css_w, _) = layout.css_size;
    let (t0, t1) = layout.window;
    let lane_h = layout.lane_h;
    let y = row as f64 * lane_h;
    let mut px = Pixels::band(css_w, (y, y + lane_h), layout.dpr);
    let page_bg = rgb(PAGE_BG);
    let width_px = css_w as usize;
    let show = if layout.show_all { Show::All } else { Show::Mismatches };
    let classes = m.classes();
    let mut colour_of = [None::<[u8; 3]>; 256];
    let mut colour = |code: u8| *colour_of[usize::from(code)].get_or_insert_with(|| rgb(classes.colour(code)));
    let (row_bg, row_bg_alt, agree) = (rgb("#161b22"), rgb("#11161d"), rgb("#3b434d"));
    let half = lane_h / f64::from(layout.rows_per_lane);
    px.fill(0.0, y, css_w, lane_h, if row.is_multiple_of(2) { row_bg } else { row_bg_alt });
    let Some(lane) = m.lanes().get(src as usize) else { return px };
    // Upper part: policy A; then policy B, so a fatal under A sits right above the skip B
    // made of the same event; with an event plane, the router's row below them.
    for (k, policy_b) in [(0.0, false), (1.0, true)] {
        let top = y + k * half;
        let cols = columns(lane, classes, t0, t1, width_px, policy_b, show);
        for (x, w) in agreement_runs(&cols) {
            px.fill(x as f64, top + half / 2.0 - 0.5, w as f64, 1.0, agree);
        }
        for run in runs(&cols) {
            let sev = classes.severity(run.top);
            let (pad, h) = if !sev.is_marked() { (half * 0.35, half * 0.3) } else { (0.5, half - 1.0) };
            px.fill(run.x as f64, top + pad, run.width as f64, h.max(1.0), colour(run.top));
        }
    }
    let mut markers: Vec<(f64, f64)> = Vec::new();
    if let Some(router) = m.router() {
        let top = y + 2.0 * half;
        if let Some(rl) = router.lane(src) {
            for (x, v) in crate::model::router::router_columns(rl, t0, t1, width_px).iter().enumerate() {
                match v {
                    1 => px.fill(x as f64, top + half / 2.0 - 0.5, 1.0, 1.0, agree),
                    2 => px.fill(x as f64, top + 0.5, 1.0, half - 1.0, rgb(OTHER_SKIP)),
                    _ => {}
                }
            }
        }
        // The reconciliation's differences (the first ones kept): where the router's view
        // departs from what the relay should have published.
        if let Some(sr) = router.source_report(router.report(), src) {
            for d in &sr.differences {
                let Some(origin) = d.origin else { continue };
                let Some(t) = router.lane(src).and_then(|rl| rl.time_of(origin.seq, origin.event_index)) else { continue };
                markers.push(((t - t0) * width_px as f64 / (t1 - t0), top));
            }
        }
    }
    px.fill(0.0, y + lane_h - 1.0, css_w, 1.0, page_bg);
    let marker = rgb("#e6edf3");
    for (x, top) in markers {
        px.fill(x - 1.0, top, 3.0, half, marker);
    }
    px
}

const PAGE_BG: &str = "#0d1117";

/// What the timeline needs of the fleet beside the shards' timeline parts.
#[derive(Clone, Copy, Debug)]
pub struct FleetTimeline<'a> {
    /// The overview's rows, for the lanes' names.
    pub rows: &'a [Row],
    pub policies: &'a [String; 2],
    /// The timeline's origin.
    pub t0_nanos: Option<u64>,
    /// Where each policy's indexer exits, in ms since the origin.
    pub exits_ms: [Option<f64>; 2],
}

/// Everything the timeline shows, from the layout, every shard's facts and lanes, and the
/// fleet's. No pixels before the page said how wide its canvas is (an image at a guessed width
/// is painted, sent and put on the canvas for nothing, and the canvas is then reallocated at
/// the real width).
pub fn assemble(
    layout: &Layout,
    facts: &[TimelineFacts],
    parts: &[LanesPart],
    fleet: FleetTimeline<'_>,
    settings: &Settings,
) -> (Timeline, Option<TimelineImage>) {
    let FleetTimeline { rows, policies, t0_nanos, exits_ms } = fleet;
    let facts = merge_facts(facts);
    let (css_w, _) = layout.css_size;
    let (t0, t1) = layout.window;
    let scale = css_w / (t1 - t0);
    let exits = [Side::A, Side::B]
        .into_iter()
        .filter_map(|side| {
            let x = ((exits_ms[side as usize]? - t0) * scale).max(0.0);
            (x <= css_w).then_some((side, x))
        })
        .collect();
    let step = tick_ms(t1 - t0, (css_w / 110.0).max(2.0));
    let mut ticks = Vec::new();
    let mut t = (t0 / step).ceil() * step;
    while t < t1 {
        ticks.push(((t - t0) * scale, fmt_tick(t0_nanos, t, step)));
        t += step;
    }
    let router = if layout.rows_per_lane == 3 { ", R the router (what the relay drops, where the router's view differs)" } else { "" };
    let key = |i: u32| rows.iter().find(|r| r.index == i).map(|r| r.key.clone()).unwrap_or_default();
    let view = Timeline {
        lanes: layout.lanes.iter().map(|&i| LaneLabel { index: i, key: key(i) }).collect(),
        lane_px: layout.lane_h,
        rows_per_lane: layout.rows_per_lane,
        window: layout.window,
        css_size: layout.css_size,
        ticks,
        exits,
        legend: legend(&facts),
        heading: format!("Each lane: A {}, B {}{router}", policies[0], policies[1]),
        lane_note: lane_note(rows, settings),
        bucket_note: bucket_note(&facts),
        range: layout.range.map(|r| range_view(&facts, parts, t0_nanos, r)),
    };
    let image = layout.paint.then(|| {
        let px = compose(layout, parts, exits_ms);
        TimelineImage { width: px.width() as u32, height: px.height() as u32, rgba: px.into_rgba() }
    });
    (view, image)
}

/// The canvas: the lanes' bands put in place, then over them the exits' shading and hatching
/// and the axis ticks.
fn compose(layout: &Layout, parts: &[LanesPart], exits_ms: [Option<f64>; 2]) -> Pixels {
    let (css_w, css_h) = layout.css_size;
    let (t0, t1) = layout.window;
    let mut px = Pixels::new(css_w, css_h, layout.dpr);
    let page_bg = rgb(PAGE_BG);
    px.fill(0.0, 0.0, css_w, css_h, page_bg);
    for (first_row, rgba) in parts.iter().flat_map(|p| &p.bands) {
        px.put_band(*first_row as usize, rgba);
    }
    // Where a policy's indexer exits: the rest of that policy's half of every lane shaded and
    // hatched (the router's indexer is down for the whole fleet, not one worker), and a line.
    let lane_h = layout.lane_h;
    let half = lane_h / f64::from(layout.rows_per_lane);
    let lanes_h = layout.lanes.len() as f64 * lane_h;
    let width_px = css_w as usize;
    let scale = width_px as f64 / (t1 - t0);
    for (k, side) in [(0.0, Side::A), (1.0, Side::B)] {
        let Some(exit_ms) = exits_ms[side as usize] else { continue };
        let x = ((exit_ms - t0) * scale).max(0.0);
        if x > css_w {
            continue;
        }
        for row in 0..layout.lanes.len() {
            let y = row as f64 * lane_h + k * half;
            px.blend(x, y, css_w - x, half, page_bg, 0.55);
            px.hatch([x, y, css_w - x, half], 8.0, rgb("#d55e00"), 0.45);
        }
        px.fill(x, 0.0, 2.0, lanes_h, rgb(FATAL));
    }
    // Axis ticks, in wall-clock UTC (their labels are the page's text).
    let tick = rgb("#c9d1d9");
    let step = tick_ms(t1 - t0, (css_w / 110.0).max(2.0));
    let mut t = (t0 / step).ceil() * step;
    while t < t1 {
        px.fill((t - t0) * scale, lanes_h, 1.0, 4.0, tick);
        t += step;
    }
    px
}

/// Every class some shown lane ever marked, most severe first; applied classes share one entry
/// per tier colour (five blues in a row say nothing).
fn legend(f: &TimelineFacts) -> Vec<(String, String)> {
    let mut present = f.legend.clone();
    present.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    present.dedup();
    present.dedup_by(|x, y| x.2 == y.2 && x.0 == Severity::Applied && y.0 == Severity::Applied);
    present.into_iter().map(|(_, name, colour)| (name, colour)).collect()
}

/// Verdict counts of a selected time range, per policy, most severe first.
fn range_view(f: &TimelineFacts, parts: &[LanesPart], t0_nanos: Option<u64>, (a, b): (f64, f64)) -> RangeCounts {
    let (a, b) = (a.min(b), a.max(b));
    let rows = [0, 1].map(|side| {
        let mut by_class: Vec<(Severity, String, u64, String)> = Vec::new();
        for (sev, name, n, colour) in parts.iter().flat_map(|p| &p.range[side]) {
            match by_class.iter_mut().find(|r| r.1 == *name && r.3 == *colour) {
                Some(r) => r.2 += n,
                None => by_class.push((*sev, name.clone(), *n, colour.clone())),
            }
        }
        by_class.sort_by(|x, y| y.0.cmp(&x.0).then(y.2.cmp(&x.2)).then_with(|| x.1.cmp(&y.1)));
        by_class.into_iter().map(|r| (r.1, r.2, r.3)).collect()
    });
    let t0 = t0_nanos.unwrap_or(0);
    let at = |ms: f64| clock(t0 + (ms.max(0.0) * 1e6) as u64);
    RangeCounts {
        span: format!("{} to {}", at(a), at(b)),
        partial: f.records_gone_until.filter(|&until| a < until).map(|until| {
            format!(
                "Counted: the events whose records are kept. Before {} they are gone (this page keeps the last {}; raise with ?events=N), so the counts there are short.",
                at(until),
                thousands(f.retain_events as u64)
            )
        }),
        rows,
    }
}

/// What a lane holds between two times, in words: when (UTC), which seqs, and the verdicts.
pub fn hover_text(m: &Model, source: u32, side: Side, t_lo: f64, t_hi: f64) -> String {
    let Some(lane) = m.lanes().get(source as usize) else { return String::new() };
    let key = m.source(source).map(|s| s.key.clone()).unwrap_or_default();
    let range = lane.range(t_lo, t_hi.max(t_lo + 1e-6));
    let n = range.len();
    let at = fmt_tick(m.t0_nanos(), t_lo, 1.0);
    if n == 0 {
        return format!("{key} at {at} UTC: no events");
    }
    let seqs = {
        let first = m.event_seq(lane.event_id[range.start]);
        let last = m.event_seq(lane.event_id[range.end - 1]);
        match (first, last) {
            (Some(a), Some(b)) if a == b => format!("seq {a}"),
            (Some(a), Some(b)) => format!("seq {a}..={b}"),
            _ => "seq no longer retained".to_owned(),
        }
    };
    let codes = if side.is_b() { &lane.class_b } else { &lane.class_a };
    let mut counts: std::collections::BTreeMap<u8, usize> = Default::default();
    for i in range {
        *counts.entry(codes[i]).or_default() += 1;
    }
    let classes = m.classes();
    let mut parts: Vec<(Severity, String)> = counts
        .into_iter()
        .map(|(c, k)| (classes.severity(c), format!("{k} {}", classes.get(c).map_or("undecoded".into(), |c| c.describe()))))
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    format!(
        "{key} at {at} UTC, {seqs}: {n} events under policy {}: {}. Click to open.",
        side.as_str().to_uppercase(),
        parts.into_iter().map(|p| p.1).collect::<Vec<_>>().join(", ")
    )
}

/// The marked event a click at `time_ms` on a lane opens, within `tolerance_ms`.
pub fn pick_at(m: &Model, source: u32, side: Side, time_ms: f64, tolerance_ms: f64) -> Option<u64> {
    m.lanes().get(source as usize).and_then(|lane| pick(lane, m.classes(), time_ms, tolerance_ms, side.is_b()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_ms(10_000.0, 10.0), 1_000.0);
        assert_eq!(tick_ms(7_000.0, 10.0), 1_000.0);
        assert_eq!(tick_ms(3_000.0, 10.0), 500.0);
        // 1970-01-01 00:00:01 plus 12 s, on a whole-second step; milliseconds below one.
        assert_eq!(fmt_tick(Some(1_000_000_000), 12_000.0, 1000.0), "00:00:13");
        assert_eq!(fmt_tick(Some(1_000_000_000), 12_345.0, 100.0), "00:00:13.345");
    }
}
