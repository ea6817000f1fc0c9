//! The mismatch timeline: a lane per source over wall-clock receive time (UTC); by default only
//! the events the policies decide differently or that are fatal or skipped under either, with
//! agreements dimmed; where a policy's indexer exits, a marker and the rest of its half hatched;
//! shift-drag counts the verdicts of a time range; zoom (wheel, buttons, + and -), pan (drag, arrow keys); hover shows
//! what a pixel holds; a click opens the event in the inspector.
//!
//! Drawn on a canvas through web-sys. Each lane is folded into one column per pixel
//! (`model::timeline::columns`) and equal neighbours are merged into one rectangle, so the
//! cost of a redraw follows the canvas width times the lane count, not the number of events.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::contexts::{Fleet, use_fleet};
use crate::model::Model;
use crate::model::classes::ClassSet;
use crate::model::settings::Side;
use crate::model::timeline::{Show, agreement_runs, columns, pick, range_counts, runs};
use crate::views::pixels::{Pixels, rgb};
use crate::views::{clock, thousands};

const LANE_MAX_PX: f64 = 32.0;
const LANE_MIN_PX: f64 = 8.0;
const AXIS_PX: f64 = 20.0;
const LABEL_PX: f64 = 0.0;

/// Rows per lane: A and B, and the router's when there is an event plane.
fn rows_per_lane(m: &Model) -> f64 {
    if m.router().is_some() { 3.0 } else { 2.0 }
}

fn lane_px(lanes: usize) -> f64 {
    (420.0 / lanes.max(1) as f64).clamp(LANE_MIN_PX, LANE_MAX_PX)
}

/// Which lanes are drawn: the sources opened from the overview when there are any, else every
/// one; the worker filter applies either way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaneFilter {
    text: String,
    open: Vec<String>,
    /// Source indices in the overview's order (what stands out first).
    overview_order: Vec<u32>,
}

impl LaneFilter {
    /// The settings' filter and opened sources, and the overview's order (tracked).
    fn of(fleet: Fleet) -> LaneFilter {
        let overview_order = fleet.overview.with(|rows| rows.iter().map(|r| r.index).collect());
        fleet.settings.with(|s| LaneFilter { text: s.worker_filter.clone(), open: s.open.clone(), overview_order })
    }

    fn of_untracked(fleet: Fleet) -> LaneFilter {
        untrack(|| LaneFilter::of(fleet))
    }
}

/// Lanes drawn when no source is opened and no filter given: a canvas of 512 lanes shows none of
/// them legibly, so a large fleet shows the sources the overview lists first.
pub const LANES_UNOPENED: usize = 24;

/// Source indices shown, in index order.
fn shown_lanes(m: &Model, f: &LaneFilter) -> Vec<u32> {
    let all: Vec<u32> = m
        .engine_sources()
        .filter(|s| (f.text.is_empty() || s.key.contains(f.text.as_str())) && (f.open.is_empty() || f.open.contains(&s.key)))
        .map(|s| s.index)
        .collect();
    if f.open.is_empty() && all.len() > LANES_UNOPENED {
        let mut first: Vec<u32> = f.overview_order.iter().copied().filter(|i| all.binary_search(i).is_ok()).take(LANES_UNOPENED).collect();
        first.sort_unstable();
        return first;
    }
    all
}

/// Says so when the lanes are the first of a large fleet, not all of them.
fn lane_note(m: &Model, f: &LaneFilter) -> Option<String> {
    let total = m.engine_sources().filter(|s| f.text.is_empty() || s.key.contains(f.text.as_str())).count();
    (f.open.is_empty() && total > LANES_UNOPENED).then(|| {
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
        crate::views::human_duration_ms(until),
        crate::views::human_duration_ms(width),
        crate::views::thousands(m.config().retain_events as u64),
    ))
}

/// The visible window: the URL's, or everything retained.
fn window(m: &Model, w: Option<(f64, f64)>) -> (f64, f64) {
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
    let Some(t0) = t0_nanos else { return format!("+{:.0} ms", ms) };
    let text = clock(t0.saturating_add((ms.max(0.0) * 1e6) as u64));
    let text = text.trim_end_matches(" UTC");
    if step >= 1000.0 { text[..8.min(text.len())].to_owned() } else { text.to_owned() }
}

fn shown(settings_show_all: bool) -> Show {
    if settings_show_all { Show::All } else { Show::Mismatches }
}

thread_local! {
    static CANVAS_WIDTH: std::cell::Cell<(f64, u32)> = const { std::cell::Cell::new((0.0, 0)) };
}

/// The canvas's CSS width. Reading `clientWidth` forces a layout in the middle of a flush (4% of
/// the page's time at 512 sources), so it is read again only every 20th draw (2 s at most after a
/// resize).
fn canvas_width(canvas: &web_sys::HtmlCanvasElement) -> f64 {
    CANVAS_WIDTH.with(|cell| {
        let (px, draws) = cell.get();
        if px > 0.0 && draws < 20 {
            cell.set((px, draws + 1));
            return px;
        }
        let px = canvas.client_width().max(200) as f64;
        cell.set((px, 0));
        px
    })
}

/// Draws the timeline. Returns the number of rectangles filled (for the benchmark's log).
pub fn draw(
    canvas: &web_sys::HtmlCanvasElement,
    m: &Model,
    filter: &LaneFilter,
    win: Option<(f64, f64)>,
    show: Show,
    selection: Option<(f64, f64)>,
) -> usize {
    let Ok(Some(ctx)) = canvas.get_context("2d") else { return 0 };
    let Ok(ctx) = ctx.dyn_into::<web_sys::CanvasRenderingContext2d>() else { return 0 };
    let dpr = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio());
    let lanes = shown_lanes(m, filter);
    let lane_h = lane_px(lanes.len());
    let css_w = canvas_width(canvas);
    let css_h = lanes.len() as f64 * lane_h + AXIS_PX;
    // Only when the size changed: setting a canvas's width or height, even to the same value,
    // reallocates and clears its bitmap, and a new style height is a layout; the draw below
    // paints every pixel anyway.
    let (w, h) = ((css_w * dpr) as u32, (css_h * dpr) as u32);
    if canvas.height() != h {
        let _ = web_sys::HtmlElement::style(canvas).set_property("height", &format!("{css_h}px"));
        canvas.set_height(h);
    }
    if canvas.width() != w {
        canvas.set_width(w);
    }
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    ctx.set_fill_style_str("#0d1117");
    ctx.fill_rect(0.0, 0.0, css_w, css_h);
    let (t0, t1) = window(m, win);
    let width_px = (css_w - LABEL_PX) as usize;
    let classes = m.classes();
    let mut rects = 0;
    // The lanes go into one buffer (x from the lane area's left edge), put on the canvas at
    // once; the few markers over them are drawn after it.
    let mut px = Pixels::new(css_w - LABEL_PX, lanes.len() as f64 * lane_h, dpr);
    let mut colour_of = [None::<[u8; 3]>; 256];
    let mut colour = |code: u8| *colour_of[usize::from(code)].get_or_insert_with(|| rgb(classes.colour(code)));
    let (row_bg, row_bg_alt, page_bg, agree) = (rgb("#161b22"), rgb("#11161d"), rgb("#0d1117"), rgb("#3b434d"));
    let other_skip = rgb(crate::model::classes::OTHER_SKIP);
    let mut markers: Vec<(f64, f64, f64)> = Vec::new();
    for (row, &src) in lanes.iter().enumerate() {
        let y = row as f64 * lane_h;
        px.fill(0.0, y, css_w, lane_h, if row % 2 == 0 { row_bg } else { row_bg_alt });
        let Some(lane) = m.lanes().get(src as usize) else { continue };
        // Upper part: policy A; then policy B, so a fatal under A sits right above the skip B
        // made of the same event; with an event plane, the router's row below them.
        let half = lane_h / rows_per_lane(m);
        for (k, policy_b) in [(0.0, false), (1.0, true)] {
            let top = y + k * half;
            let cols = columns(lane, classes, t0, t1, width_px, policy_b, show);
            for (x, w) in agreement_runs(&cols) {
                px.fill(x as f64, top + half / 2.0 - 0.5, w as f64, 1.0, agree);
                rects += 1;
            }
            for run in runs(&cols) {
                let sev = classes.severity(run.top);
                let (pad, h) = if sev <= 1 { (half * 0.35, half * 0.3) } else { (0.5, half - 1.0) };
                px.fill(run.x as f64, top + pad, run.width as f64, h.max(1.0), colour(run.top));
                rects += 1;
            }
        }
        if let Some(router) = m.router() {
            let top = y + 2.0 * half;
            if let Some(rl) = router.lane(src) {
                let cols = crate::model::router::router_columns(rl, t0, t1, width_px);
                for (x, v) in cols.iter().enumerate() {
                    match v {
                        1 => px.fill(x as f64, top + half / 2.0 - 0.5, 1.0, 1.0, agree),
                        2 => px.fill(x as f64, top + 0.5, 1.0, half - 1.0, other_skip),
                        _ => continue,
                    }
                    rects += 1;
                }
            }
            // The reconciliation's differences (the first ones kept): where the router's view
            // departs from what the relay should have published.
            if let Some(sr) = router.source_report(router.report(), src) {
                for d in &sr.differences {
                    let Some(origin) = d.origin else { continue };
                    let Some(t) = router.lane(src).and_then(|rl| rl.time_of(origin.seq, origin.event_index)) else { continue };
                    markers.push((LABEL_PX + (t - t0) * width_px as f64 / (t1 - t0), top, half));
                    rects += 1;
                }
            }
        }
        px.fill(0.0, y + lane_h - 1.0, css_w, 1.0, page_bg);
    }
    if px.width() > 0
        && px.height() > 0
        && let Ok(image) =
            web_sys::ImageData::new_with_u8_clamped_array_and_sh(wasm_bindgen::Clamped(px.rgba()), px.width() as u32, px.height() as u32)
    {
        let _ = ctx.put_image_data(&image, (LABEL_PX * dpr).round(), 0.0);
    }
    ctx.set_fill_style_str("#e6edf3");
    for (x, top, h) in markers {
        ctx.fill_rect(x - 1.0, top, 3.0, h);
    }
    // Where a policy's indexer exits: a marker, and the rest of that policy's half of every
    // lane hatched (the router's indexer is down for the whole fleet, not one worker).
    let scale = width_px as f64 / (t1 - t0);
    for (k, side) in [(0.0, Side::A), (1.0, Side::B)] {
        let Some(exit_ms) = m.exit_time_ms(side) else { continue };
        let x = (LABEL_PX + (exit_ms - t0) * scale).max(LABEL_PX);
        if x > css_w {
            continue;
        }
        let half = lane_h / rows_per_lane(m);
        ctx.set_fill_style_str("rgba(13, 17, 23, 0.55)");
        for row in 0..lanes.len() {
            let y = row as f64 * lane_h + k * half;
            ctx.fill_rect(x, y, css_w - x, half);
        }
        let h = lanes.len() as f64 * lane_h;
        ctx.save();
        ctx.begin_path();
        for row in 0..lanes.len() {
            ctx.rect(x, row as f64 * lane_h + k * half, css_w - x, half);
        }
        ctx.clip();
        ctx.set_stroke_style_str("rgba(213, 94, 0, 0.45)");
        ctx.set_line_width(1.0);
        ctx.begin_path();
        let mut sx = x - h;
        while sx < css_w {
            ctx.move_to(sx, h);
            ctx.line_to(sx + h, 0.0);
            sx += 8.0;
        }
        ctx.stroke();
        ctx.restore();
        ctx.set_fill_style_str(crate::model::classes::FATAL);
        ctx.fill_rect(x, 0.0, 2.0, h);
        ctx.set_font("bold 11px system-ui, sans-serif");
        let _ = ctx.fill_text(&format!("{} exits", side.as_str().to_uppercase()), x + 4.0, 11.0 + k * 12.0);
    }
    if let Some((a, b)) = selection {
        let (a, b) = (a.min(b), a.max(b));
        let xa = LABEL_PX + (a - t0) * scale;
        let xb = LABEL_PX + (b - t0) * scale;
        ctx.set_fill_style_str("rgba(230, 237, 243, 0.12)");
        ctx.fill_rect(xa, 0.0, (xb - xa).max(1.0), lanes.len() as f64 * lane_h);
    }
    // Axis, in wall-clock UTC.
    let axis_y = lanes.len() as f64 * lane_h;
    ctx.set_fill_style_str("#c9d1d9");
    ctx.set_font("11px system-ui, sans-serif");
    let span = t1 - t0;
    let step = tick_ms(span, (css_w / 110.0).max(2.0));
    let mut t = (t0 / step).ceil() * step;
    while t < t1 {
        let x = LABEL_PX + (t - t0) / span * width_px as f64;
        ctx.fill_rect(x, axis_y, 1.0, 4.0);
        let _ = ctx.fill_text(&fmt_tick(m.t0_nanos(), t, step), x + 3.0, axis_y + 14.0);
        t += step;
    }
    rects
}

/// What the pixel under the pointer holds, in words: when (UTC), which seqs, and the verdicts.
fn hover_text(m: &Model, side: Side, src: u32, t_lo: f64, t_hi: f64) -> String {
    let Some(lane) = m.lanes().get(src as usize) else { return String::new() };
    let key = m.source(src).map(|s| s.key.clone()).unwrap_or_default();
    let range = lane.range(t_lo, t_hi);
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
    let mut parts: Vec<(u8, String)> = counts
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

/// Verdict counts of a selected time range, per policy, most severe first.
fn selection_rows(m: &Model, filter: &LaneFilter, (a, b): (f64, f64)) -> [Vec<(String, u64, &'static str)>; 2] {
    let (a, b) = (a.min(b), a.max(b));
    let lanes = shown_lanes(m, filter);
    let counts = range_counts(lanes.iter().filter_map(|&i| m.lanes().get(i as usize)), a, b);
    let classes = m.classes();
    counts.map(|c| {
        let mut rows: Vec<(u8, String, u64, &'static str)> = c
            .into_iter()
            .map(|(code, n)| {
                (classes.severity(code), classes.get(code).map_or("no verdict".into(), |c| c.describe()), n, classes.colour(code))
            })
            .collect();
        rows.sort_by(|x, y| y.0.cmp(&x.0).then(y.2.cmp(&x.2)));
        rows.into_iter().map(|r| (r.1, r.2, r.3)).collect()
    })
}

fn zoom(fleet: Fleet, factor: f64, centre_frac: f64) {
    let cur = fleet.with_model(|m| window(m, fleet.settings.with_untracked(|s| s.window_ms)));
    let span = cur.1 - cur.0;
    let centre = cur.0 + span * centre_frac;
    let new_span = (span * factor).max(1.0);
    let a = centre - new_span * centre_frac;
    fleet.settings.update(|s| s.window_ms = Some((a, a + new_span)));
}

fn pan(fleet: Fleet, frac: f64) {
    let cur = fleet.with_model(|m| window(m, fleet.settings.with_untracked(|s| s.window_ms)));
    let d = (cur.1 - cur.0) * frac;
    fleet.settings.update(|s| s.window_ms = Some((cur.0 + d, cur.1 + d)));
}

#[component]
pub fn Timeline() -> impl IntoView {
    let fleet = use_fleet();
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let hover = RwSignal::new(String::new());
    let drag = StoredValue::new(None::<(f64, (f64, f64), bool)>);
    // A shift-drag selects a time range (ms): its verdict counts are listed under the canvas.
    let selection = RwSignal::new(None::<(f64, f64)>);
    let selecting = StoredValue::new(None::<f64>);

    // The effect only notes that the timeline changed; the draw runs in a task of its own right
    // after, once for however many changes came before it. The flush's DOM updates and the
    // canvas together made tasks of 50 ms and more. (At the next animation frame instead, the
    // draw joined the frame's layout and paint: 114 such tasks a minute instead of 6.)
    let draw_pending = StoredValue::new(false);
    Effect::new(move |_| {
        // What the draw reads: the model, the lane filter (overview order, settings), the selection.
        fleet.track();
        fleet.overview.track();
        fleet.settings.track();
        selection.track();
        if draw_pending.get_value() {
            return;
        }
        draw_pending.set_value(true);
        set_timeout(
            move || {
                // The timeline may be gone by then (a capture replaced the page's contents).
                if draw_pending.try_set_value(false).is_some() {
                    return;
                }
                let Some(Some(canvas)) = canvas_ref.try_get_untracked() else { return };
                let filter = LaneFilter::of_untracked(fleet);
                let Some((win, show_all)) = fleet.settings.try_with_untracked(|s| (s.window_ms, s.show_all)) else { return };
                let sel = selection.get_untracked();
                fleet.with_model(|m| draw(&canvas, m, &filter, win, shown(show_all), sel));
            },
            std::time::Duration::ZERO,
        );
    });

    // Pointer position -> (source, time range of that pixel, x fraction, policy half).
    let locate = move |ev: &web_sys::MouseEvent| -> Option<(u32, f64, f64, f64, Side)> {
        let canvas = canvas_ref.get()?;
        let rect = canvas.get_bounding_client_rect();
        let x = ev.client_x() as f64 - rect.left() - LABEL_PX;
        let y = ev.client_y() as f64 - rect.top();
        let width = rect.width() - LABEL_PX;
        let filter = LaneFilter::of_untracked(fleet);
        let win = fleet.settings.with_untracked(|s| s.window_ms);
        fleet.with_model(|m| {
            let lanes = shown_lanes(m, &filter);
            let lane_h = lane_px(lanes.len());
            let row = (y / lane_h).floor();
            let side = if y - row * lane_h < lane_h / rows_per_lane(m) { Side::A } else { Side::B };
            if row < 0.0 || x < 0.0 || width <= 0.0 {
                return None;
            }
            let src = *lanes.get(row as usize)?;
            let (t0, t1) = window(m, win);
            let per_px = (t1 - t0) / width;
            let t = t0 + x * per_px;
            Some((src, t, per_px, x / width, side))
        })
    };

    let on_move = move |ev: web_sys::MouseEvent| {
        if let Some(Some(start)) = selecting.try_get_value() {
            if let Some((_, t, _, _, _)) = locate(&ev) {
                selection.set(Some((start, t)));
            }
            return;
        }
        if let Some(Some((x0, (a, b), _))) = drag.try_get_value() {
            let Some(canvas) = canvas_ref.get() else { return };
            let width = canvas.get_bounding_client_rect().width().max(1.0);
            let dx = ev.client_x() as f64 - x0;
            if dx.abs() > 3.0 {
                let d = -dx / width * (b - a);
                drag.set_value(Some((x0, (a, b), true)));
                fleet.settings.update(|s| s.window_ms = Some((a + d, b + d)));
            }
            return;
        }
        let text = locate(&ev).map(|(src, t, per_px, _, side)| fleet.with_model(|m| hover_text(m, side, src, t, t + per_px.max(1e-6))));
        hover.set(text.unwrap_or_default());
    };
    let on_down = move |ev: web_sys::MouseEvent| {
        if ev.shift_key() {
            if let Some((_, t, _, _, _)) = locate(&ev) {
                selecting.set_value(Some(t));
                selection.set(Some((t, t)));
            }
            return;
        }
        let win = fleet.with_model(|m| window(m, fleet.settings.with_untracked(|s| s.window_ms)));
        drag.set_value(Some((ev.client_x() as f64, win, false)));
    };
    let on_up = move |ev: web_sys::MouseEvent| {
        if selecting.try_get_value().flatten().is_some() {
            selecting.set_value(None);
            return;
        }
        let moved = drag.try_get_value().flatten().is_some_and(|d| d.2);
        drag.set_value(None);
        if moved {
            return;
        }
        if let Some((src, t, per_px, _, side)) = locate(&ev) {
            let id =
                fleet.with_model(|m| m.lanes().get(src as usize).and_then(|lane| pick(lane, m.classes(), t, per_px * 3.0, side.is_b())));
            if id.is_some() {
                fleet.select(id);
            }
        }
    };
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let frac = locate(&ev).map_or(0.5, |l| l.3);
        zoom(fleet, if ev.delta_y() > 0.0 { 1.25 } else { 0.8 }, frac);
    };
    let on_key = move |ev: web_sys::KeyboardEvent| {
        let handled = match ev.key().as_str() {
            "+" | "=" => {
                zoom(fleet, 0.8, 0.5);
                true
            }
            "-" | "_" => {
                zoom(fleet, 1.25, 0.5);
                true
            }
            "ArrowLeft" => {
                pan(fleet, -0.2);
                true
            }
            "ArrowRight" => {
                pan(fleet, 0.2);
                true
            }
            "0" | "Home" => {
                fleet.settings.update(|s| s.window_ms = None);
                true
            }
            "Enter" => {
                let id = fleet.with_model(|m| {
                    [Side::A, Side::B].into_iter().filter_map(|s| m.next_marked(s, fleet.selected.get_untracked(), 3)).min()
                });
                fleet.select(id);
                true
            }
            _ => false,
        };
        if handled {
            ev.prevent_default();
        }
    };
    // Next event marked under either policy (a fatal under A is the skip under B).
    let jump = move |min_sev: u8| {
        let id = fleet.with_model(|m| {
            let after = fleet.selected.get_untracked();
            let next = |after| [Side::A, Side::B].into_iter().filter_map(|s| m.next_marked(s, after, min_sev)).min();
            next(after).or_else(|| next(None))
        });
        fleet.select(id);
    };
    let selection_view = move || {
        let sel = selection.get()?;
        fleet.track();
        let filter = LaneFilter::of(fleet);
        let (rows, pa, pb, span, partial) = fleet.with_model(|m| {
            let t0 = m.t0_nanos().unwrap_or(0);
            let at = |ms: f64| clock(t0 + (ms.max(0.0) * 1e6) as u64);
            let (a, b) = (sel.0.min(sel.1), sel.0.max(sel.1));
            (
                selection_rows(m, &filter, sel),
                m.policy_name(Side::A).to_owned(),
                m.policy_name(Side::B).to_owned(),
                format!("{} to {}", at(a), at(b)),
                records_gone_until(m).filter(|&until| a < until).map(|until| {
                    format!(
                        "Counted: the events whose records are kept. Before {} they are gone (this page keeps the last {}; raise with ?events=N), so the counts there are short.",
                        at(until),
                        thousands(m.config().retain_events as u64)
                    )
                }),
            )
        });
        let [ra, rb] = rows;
        let list =
            |rows: Vec<(String, u64, &'static str)>| {
                rows.into_iter()
                .map(|(name, n, colour)| view! {
                    <li><span class="swatch" style:background=colour aria-hidden="true"></span>{format!("{} {name}", thousands(n))}</li>
                })
                .collect_view()
            };
        Some(view! {
            <div class="range-counts" data-testid="range-counts">
                <p>
                    <strong>{format!("Selected: {span}")}</strong>" "
                    <button class="link" on:click=move |_| selection.set(None)>"clear"</button>
                </p>
                {partial.map(|p| view! { <p class="legend-note" data-testid="range-partial">{p}</p> })}
                <div class="range-cols">
                    <div><span class="side side-a">"A"</span>" "{pa}<ul>{list(ra)}</ul></div>
                    <div><span class="side side-b">"B"</span>" "{pb}<ul>{list(rb)}</ul></div>
                </div>
            </div>
        })
    };
    let legend = move || {
        fleet.track();
        fleet.with_model(|m| {
            let classes = m.classes();
            let seen = m.lanes().iter().fold(ClassSet::default(), |s, l| s.union(l.seen));
            let mut present: Vec<(u8, u8, String, &'static str)> = classes
                .iter()
                .filter(|&(code, _)| seen.contains(code))
                .map(|(code, c)| (classes.severity(code), code, c.describe(), classes.colour(code)))
                .collect();
            // Five blues in a row say nothing: applied classes share one legend entry per tier
            // colour, and the legend says what a dim line means.
            present.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
            present.dedup_by(|x, y| x.3 == y.3 && x.0 == 1 && y.0 == 1);
            present
                .into_iter()
                .map(|(_, _, name, colour)| {
                    view! {
                        <li><span class="swatch" style:background=colour aria-hidden="true"></span>{name}</li>
                    }
                })
                .collect_view()
        })
    };
    let lane_labels = move || {
        fleet.track();
        let filter = LaneFilter::of(fleet);
        fleet.with_model(|m| {
            let lanes = shown_lanes(m, &filter);
            let h = lane_px(lanes.len());
            lanes
                .into_iter()
                .map(|i| {
                    let key = m.source(i).map(|s| s.key.clone()).unwrap_or_default();
                    view! {
                        <li style:height=format!("{h}px")>
                            <span class="lane-key">{key}</span>
                            <span class="lane-ab" style:line-height=format!("{}px", h / rows_per_lane(m))>
                                "A"<br />"B"{m.router().is_some().then(|| view! { <br />"R" })}
                            </span>
                        </li>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <section class="timeline" aria-labelledby="timeline-title" data-testid="timeline">
            <div class="section-head">
                <h2 id="timeline-title">"Mismatch timeline"</h2>
                <div class="toolbar" role="toolbar" aria-label="Timeline controls">
                    <span class="quiet">{move || { fleet.track(); fleet.with_model(|m| {
                        let router = if m.router().is_some() { ", R the router (what the relay drops, where the router's view differs)" } else { "" };
                        format!("Each lane: A {}, B {}{router}", m.policy_name(Side::A), m.policy_name(Side::B))
                    }) }}</span>
                    <button on:click=move |_| zoom(fleet, 0.5, 0.5) aria-label="Zoom in">"Zoom in"</button>
                    <button on:click=move |_| zoom(fleet, 2.0, 0.5) aria-label="Zoom out">"Zoom out"</button>
                    <button on:click=move |_| fleet.settings.update(|s| s.window_ms = None)>"Show all"</button>
                    <button
                        data-testid="show-toggle"
                        aria-pressed=move || fleet.settings.with(|s| s.show_all).to_string()
                        on:click=move |_| fleet.settings.update(|s| s.show_all = !s.show_all)
                    >
                        {move || if fleet.settings.with(|s| s.show_all) { "Show mismatches only" } else { "Show every event" }}
                    </button>
                    <button data-testid="next-fatal" on:click=move |_| jump(4)>"Next fatal"</button>
                    <button data-testid="next-skip" on:click=move |_| jump(3)>"Next offload skip or fatal"</button>
                </div>
            </div>
            {move || {
                fleet.track();
                let f = LaneFilter::of(fleet);
                fleet.with_model(|m| lane_note(m, &f)).map(|n| view! { <p class="legend-note" data-testid="lane-note">{n}</p> })
            }}
            {move || {
                fleet.track();
                fleet.with_model(bucket_note).map(|n| view! { <p class="legend-note" data-testid="bucket-note">{n}</p> })
            }}
            <div class="timeline-body">
                <ul class="lane-labels" aria-hidden="true">{lane_labels}</ul>
                <canvas
                    node_ref=canvas_ref
                    tabindex="0"
                    role="img"
                    aria-label="Timeline: one lane per worker, upper half policy A, lower half policy B; keys: + and - zoom, arrows pan, 0 shows all, Enter opens the next skip or fatal"
                    on:mousemove=on_move
                    on:mousedown=on_down
                    on:mouseup=on_up
                    on:mouseleave=move |_| { drag.set_value(None); hover.set(String::new()); }
                    on:wheel=on_wheel
                    on:keydown=on_key
                ></canvas>
            </div>
            <p class="hover" aria-live="polite" data-testid="timeline-hover">
                {move || {
                    let h = hover.get();
                    if h.is_empty() { "Hover a lane for details; drag to pan, wheel to zoom, click to inspect.".to_owned() } else { h }
                }}
            </p>
            {selection_view}
            <p class="legend-note">
                {move || if fleet.settings.with(|s| s.show_all) {
                    "Every event, coloured by its verdict."
                } else {
                    "Only events the policies decide differently, or that are fatal or a notable skip under either; a dim line is events both decide alike. Shift-drag to count a time range."
                }}
            </p>
            <ul class="legend" data-testid="timeline-legend">{legend}</ul>
        </section>
    }
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
