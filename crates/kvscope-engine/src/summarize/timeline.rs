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

/// Rows per lane: A and B, and the router's when there is an event plane.
fn rows_per_lane(m: &Model) -> u32 {
    if m.router().is_some() { 3 } else { 2 }
}

fn lane_px(lanes: usize) -> f64 {
    (420.0 / lanes.max(1) as f64).clamp(LANE_MIN_PX, LANE_MAX_PX)
}

/// Source indices shown, in index order: the sources opened from the overview when there are
/// any, else every one (the first [`LANES_UNOPENED`] in the overview's order, for a large
/// fleet); the worker filter applies either way.
pub fn shown_lanes(m: &Model, settings: &Settings, overview_order: &[u32]) -> Vec<u32> {
    let (text, open) = (settings.worker_filter.as_str(), &settings.open);
    let all: Vec<u32> = m
        .engine_sources()
        .filter(|s| (text.is_empty() || s.key.contains(text)) && (open.is_empty() || open.contains(&s.key)))
        .map(|s| s.index)
        .collect();
    if open.is_empty() && all.len() > LANES_UNOPENED {
        let mut first: Vec<u32> = overview_order.iter().copied().filter(|i| all.binary_search(i).is_ok()).take(LANES_UNOPENED).collect();
        first.sort_unstable();
        return first;
    }
    all
}

/// Says so when the lanes are the first of a large fleet, not all of them.
fn lane_note(m: &Model, settings: &Settings) -> Option<String> {
    let text = settings.worker_filter.as_str();
    let total = m.engine_sources().filter(|s| text.is_empty() || s.key.contains(text)).count();
    (settings.open.is_empty() && total > LANES_UNOPENED).then(|| {
        format!(
            "Lanes of the {LANES_UNOPENED} sources the fleet table lists first (what stands out), of {total}; \
             open sources there to see their lanes."
        )
    })
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

/// Says so when older time is drawn from summaries because its events' records are gone.
fn bucket_note(m: &Model) -> Option<String> {
    let until = records_gone_until(m)?;
    let width = m.lanes().iter().map(|l| l.bucket_ms).fold(0.0, f64::max);
    Some(format!(
        "The first {} are drawn from summaries of {}: those events' records are gone (this page keeps the last {}; \
         raise with ?events=N), so marks there open nothing.",
        human_duration_ms(until),
        human_duration_ms(width),
        thousands(m.config().retain_events as u64),
    ))
}

/// The visible window: the settings', or everything retained.
pub fn window(m: &Model, w: Option<(f64, f64)>) -> (f64, f64) {
    w.unwrap_or_else(|| {
        let (a, b) = m.time_span_ms();
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

/// Everything the timeline shows, and its pixels; no pixels before the page said how wide its
/// canvas is (an image at a guessed width is painted, sent and put on the canvas for nothing, and
/// the canvas is then reallocated at the real width).
pub fn timeline(m: &Model, q: &ViewQuery, overview_order: &[u32]) -> (Timeline, Option<TimelineImage>) {
    let s = &q.settings;
    let lanes = shown_lanes(m, s, overview_order);
    let lane_h = lane_px(lanes.len());
    let rows = rows_per_lane(m);
    let css_w = if q.canvas_width > 0.0 { q.canvas_width.max(MIN_WIDTH_PX) } else { 1000.0 };
    let css_h = lanes.len() as f64 * lane_h + AXIS_PX;
    let dpr = if q.device_pixel_ratio > 0.0 { q.device_pixel_ratio } else { 1.0 };
    let (t0, t1) = window(m, s.window_ms);
    let show = if s.show_all { Show::All } else { Show::Mismatches };
    let px = (q.canvas_width > 0.0).then(|| paint(m, &lanes, lane_h, (css_w, css_h, dpr), (t0, t1), show));
    let scale = css_w / (t1 - t0);
    let exits = [Side::A, Side::B]
        .into_iter()
        .filter_map(|side| {
            let x = ((m.exit_time_ms(side)? - t0) * scale).max(0.0);
            (x <= css_w).then_some((side, x))
        })
        .collect();
    let step = tick_ms(t1 - t0, (css_w / 110.0).max(2.0));
    let mut ticks = Vec::new();
    let mut t = (t0 / step).ceil() * step;
    while t < t1 {
        ticks.push(((t - t0) * scale, fmt_tick(m.t0_nanos(), t, step)));
        t += step;
    }
    let router = if m.router().is_some() { ", R the router (what the relay drops, where the router's view differs)" } else { "" };
    let view = Timeline {
        lanes: lanes.iter().map(|&i| LaneLabel { index: i, key: m.source(i).map(|s| s.key.clone()).unwrap_or_default() }).collect(),
        lane_px: lane_h,
        rows_per_lane: rows,
        window: (t0, t1),
        css_size: (css_w, css_h),
        ticks,
        exits,
        legend: legend(m),
        heading: format!("Each lane: A {}, B {}{router}", m.policy_name(Side::A), m.policy_name(Side::B)),
        lane_note: lane_note(m, s),
        bucket_note: bucket_note(m),
        range: q.range.map(|r| range_counts_view(m, &lanes, r)),
    };
    let image = px.map(|px| TimelineImage { width: px.width() as u32, height: px.height() as u32, rgba: px.into_rgba() });
    (view, image)
}

/// The lanes, the router's rows and markers, the exits' shading and the axis ticks, in pixels.
fn paint(m: &Model, lanes: &[u32], lane_h: f64, (css_w, css_h, dpr): (f64, f64, f64), (t0, t1): (f64, f64), show: Show) -> Pixels {
    let mut px = Pixels::new(css_w, css_h, dpr);
    let page_bg = rgb("#0d1117");
    px.fill(0.0, 0.0, css_w, css_h, page_bg);
    let width_px = css_w as usize;
    let classes = m.classes();
    let mut colour_of = [None::<[u8; 3]>; 256];
    let mut colour = |code: u8| *colour_of[usize::from(code)].get_or_insert_with(|| rgb(classes.colour(code)));
    let (row_bg, row_bg_alt, agree) = (rgb("#161b22"), rgb("#11161d"), rgb("#3b434d"));
    let other_skip = rgb(OTHER_SKIP);
    let half = lane_h / f64::from(rows_per_lane(m));
    let mut markers: Vec<(f64, f64)> = Vec::new();
    for (row, &src) in lanes.iter().enumerate() {
        let y = row as f64 * lane_h;
        px.fill(0.0, y, css_w, lane_h, if row % 2 == 0 { row_bg } else { row_bg_alt });
        let Some(lane) = m.lanes().get(src as usize) else { continue };
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
        if let Some(router) = m.router() {
            let top = y + 2.0 * half;
            if let Some(rl) = router.lane(src) {
                for (x, v) in crate::model::router::router_columns(rl, t0, t1, width_px).iter().enumerate() {
                    match v {
                        1 => px.fill(x as f64, top + half / 2.0 - 0.5, 1.0, 1.0, agree),
                        2 => px.fill(x as f64, top + 0.5, 1.0, half - 1.0, other_skip),
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
    }
    let marker = rgb("#e6edf3");
    for (x, top) in markers {
        px.fill(x - 1.0, top, 3.0, half, marker);
    }
    // Where a policy's indexer exits: the rest of that policy's half of every lane shaded and
    // hatched (the router's indexer is down for the whole fleet, not one worker), and a line.
    let lanes_h = lanes.len() as f64 * lane_h;
    let scale = width_px as f64 / (t1 - t0);
    for (k, side) in [(0.0, Side::A), (1.0, Side::B)] {
        let Some(exit_ms) = m.exit_time_ms(side) else { continue };
        let x = ((exit_ms - t0) * scale).max(0.0);
        if x > css_w {
            continue;
        }
        for row in 0..lanes.len() {
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
fn legend(m: &Model) -> Vec<(String, String)> {
    let classes = m.classes();
    let seen = m.lanes().iter().fold(ClassSet::default(), |s, l| s.union(l.seen));
    let mut present: Vec<(Severity, String, &'static str)> = classes
        .iter()
        .filter(|&(code, _)| seen.contains(code))
        .map(|(code, c)| (classes.severity(code), c.describe(), classes.colour(code)))
        .collect();
    present.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    present.dedup_by(|x, y| x.2 == y.2 && x.0 == Severity::Applied && y.0 == Severity::Applied);
    present.into_iter().map(|(_, name, colour)| (name, colour.to_owned())).collect()
}

/// Verdict counts of a selected time range, per policy, most severe first.
fn range_counts_view(m: &Model, lanes: &[u32], (a, b): (f64, f64)) -> RangeCounts {
    let (a, b) = (a.min(b), a.max(b));
    let counts = range_counts(lanes.iter().filter_map(|&i| m.lanes().get(i as usize)), a, b);
    let classes = m.classes();
    let rows = counts.map(|c| {
        let mut rows: Vec<(Severity, String, u64, &'static str)> = c
            .into_iter()
            .map(|(code, n)| {
                (classes.severity(code), classes.get(code).map_or("no verdict".into(), |c| c.describe()), n, classes.colour(code))
            })
            .collect();
        rows.sort_by(|x, y| y.0.cmp(&x.0).then(y.2.cmp(&x.2)));
        rows.into_iter().map(|r| (r.1, r.2, r.3.to_owned())).collect()
    });
    let t0 = m.t0_nanos().unwrap_or(0);
    let at = |ms: f64| clock(t0 + (ms.max(0.0) * 1e6) as u64);
    RangeCounts {
        span: format!("{} to {}", at(a), at(b)),
        partial: records_gone_until(m).filter(|&until| a < until).map(|until| {
            format!(
                "Counted: the events whose records are kept. Before {} they are gone (this page keeps the last {}; raise with ?events=N), so the counts there are short.",
                at(until),
                thousands(m.config().retain_events as u64)
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
