//! The mismatch timeline: a lane per source over receive time; marks coloured by verdict class
//! under the chosen policy; zoom (wheel, buttons, + and -), pan (drag, arrow keys); hover shows
//! what a pixel holds; a click opens the event in the inspector.
//!
//! Drawn on a canvas through web-sys. Each lane is folded into one column per pixel
//! (`model::timeline::columns`) and equal neighbours are merged into one rectangle, so the
//! cost of a redraw follows the canvas width times the lane count, not the number of events.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::contexts::{Fleet, use_fleet};
use crate::model::Model;
use crate::model::settings::Side;
use crate::model::timeline::{columns, pick, runs};

const LANE_MAX_PX: f64 = 32.0;
const LANE_MIN_PX: f64 = 8.0;
const AXIS_PX: f64 = 20.0;
const LABEL_PX: f64 = 0.0;

fn lane_px(lanes: usize) -> f64 {
    (420.0 / lanes.max(1) as f64).clamp(LANE_MIN_PX, LANE_MAX_PX)
}

/// Source indices shown, in order (the worker filter applies).
fn shown_lanes(m: &Model, filter: &str) -> Vec<u32> {
    m.sources().iter().filter(|s| filter.is_empty() || s.key.contains(filter)).map(|s| s.index).collect()
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

fn fmt_offset(ms: f64, step: f64) -> String {
    let ms = if ms.abs() < step / 2.0 { 0.0 } else { ms };
    if step >= 1000.0 { format!("+{:.0} s", ms / 1000.0) } else if step >= 100.0 { format!("+{:.1} s", ms / 1000.0) } else { format!("+{:.0} ms", ms) }
}

/// Draws the timeline. Returns the number of rectangles filled (for the benchmark's log).
pub fn draw(canvas: &web_sys::HtmlCanvasElement, m: &Model, side: Side, filter: &str, win: Option<(f64, f64)>) -> usize {
    let Ok(Some(ctx)) = canvas.get_context("2d") else { return 0 };
    let Ok(ctx) = ctx.dyn_into::<web_sys::CanvasRenderingContext2d>() else { return 0 };
    let dpr = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio());
    let lanes = shown_lanes(m, filter);
    let lane_h = lane_px(lanes.len());
    let css_w = canvas.client_width().max(200) as f64;
    let css_h = lanes.len() as f64 * lane_h + AXIS_PX;
    let _ = web_sys::HtmlElement::style(canvas).set_property("height", &format!("{css_h}px"));
    canvas.set_width((css_w * dpr) as u32);
    canvas.set_height((css_h * dpr) as u32);
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    ctx.set_fill_style_str("#0d1117");
    ctx.fill_rect(0.0, 0.0, css_w, css_h);
    let (t0, t1) = window(m, win);
    let width_px = (css_w - LABEL_PX) as usize;
    let classes = m.classes();
    let mut rects = 0;
    for (row, &src) in lanes.iter().enumerate() {
        let y = row as f64 * lane_h;
        ctx.set_fill_style_str(if row % 2 == 0 { "#161b22" } else { "#11161d" });
        ctx.fill_rect(LABEL_PX, y, css_w, lane_h);
        let Some(lane) = m.lanes().get(src as usize) else { continue };
        // Upper half: policy A; lower half: policy B, so a fatal under A sits right above the
        // skip B made of the same event.
        let half = lane_h / 2.0;
        for (k, policy_b) in [(0.0, false), (1.0, true)] {
            let top = y + k * half;
            let cols = columns(lane, classes, t0, t1, width_px, policy_b);
            for run in runs(&cols) {
                let sev = classes.severity(run.top);
                let (pad, h) = if sev <= 1 { (half * 0.35, half * 0.3) } else { (0.5, half - 1.0) };
                ctx.set_fill_style_str(classes.colour(run.top));
                ctx.fill_rect(LABEL_PX + run.x as f64, top + pad, run.width as f64, h.max(1.0));
                rects += 1;
            }
        }
        ctx.set_fill_style_str("#0d1117");
        ctx.fill_rect(LABEL_PX, y + lane_h - 1.0, css_w, 1.0);
    }
    let _ = side;
    // Axis.
    let axis_y = lanes.len() as f64 * lane_h;
    ctx.set_fill_style_str("#c9d1d9");
    ctx.set_font("11px system-ui, sans-serif");
    let span = t1 - t0;
    let step = tick_ms(span, (css_w / 110.0).max(2.0));
    let mut t = (t0 / step).ceil() * step;
    while t < t1 {
        let x = LABEL_PX + (t - t0) / span * width_px as f64;
        ctx.fill_rect(x, axis_y, 1.0, 4.0);
        let _ = ctx.fill_text(&fmt_offset(t, step), x + 3.0, axis_y + 14.0);
        t += step;
    }
    rects
}

/// What the pixel under the pointer holds, in words.
fn hover_text(m: &Model, side: Side, src: u32, t_lo: f64, t_hi: f64) -> String {
    let Some(lane) = m.lanes().get(src as usize) else { return String::new() };
    let key = m.source(src).map(|s| s.key.clone()).unwrap_or_default();
    let range = lane.range(t_lo, t_hi);
    let n = range.len();
    if n == 0 {
        return format!("{key} at {}: no events", fmt_offset(t_lo, 1.0));
    }
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
        "{key} at {}: {n} events under policy {}: {}. Click to open.",
        fmt_offset(t_lo, 1.0),
        side.as_str().to_uppercase(),
        parts.into_iter().map(|p| p.1).collect::<Vec<_>>().join(", ")
    )
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

    Effect::new(move |_| {
        fleet.track();
        let side = fleet.lanes_side();
        let (filter, win) = fleet.settings.with(|s| (s.worker_filter.clone(), s.window_ms));
        let _ = fleet.settings.with(|s| s.lanes);
        if let Some(canvas) = canvas_ref.get() {
            fleet.with_model(|m| draw(&canvas, m, side, &filter, win));
        }
    });

    // Pointer position -> (source, time range of that pixel, x fraction, policy half).
    let locate = move |ev: &web_sys::MouseEvent| -> Option<(u32, f64, f64, f64, Side)> {
        let canvas = canvas_ref.get()?;
        let rect = canvas.get_bounding_client_rect();
        let x = ev.client_x() as f64 - rect.left() - LABEL_PX;
        let y = ev.client_y() as f64 - rect.top();
        let width = rect.width() - LABEL_PX;
        let (filter, win) = fleet.settings.with_untracked(|s| (s.worker_filter.clone(), s.window_ms));
        fleet.with_model(|m| {
            let lanes = shown_lanes(m, &filter);
            let lane_h = lane_px(lanes.len());
            let row = (y / lane_h).floor();
            let side = if y - row * lane_h < lane_h / 2.0 { Side::A } else { Side::B };
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
        let win = fleet.with_model(|m| window(m, fleet.settings.with_untracked(|s| s.window_ms)));
        drag.set_value(Some((ev.client_x() as f64, win, false)));
    };
    let on_up = move |ev: web_sys::MouseEvent| {
        let moved = drag.try_get_value().flatten().is_some_and(|d| d.2);
        drag.set_value(None);
        if moved {
            return;
        }
        if let Some((src, t, per_px, _, side)) = locate(&ev) {
            let id = fleet.with_model(|m| {
                m.lanes().get(src as usize).and_then(|lane| pick(lane, m.classes(), t, per_px * 3.0, side.is_b()))
            });
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
            "+" | "=" => { zoom(fleet, 0.8, 0.5); true }
            "-" | "_" => { zoom(fleet, 1.25, 0.5); true }
            "ArrowLeft" => { pan(fleet, -0.2); true }
            "ArrowRight" => { pan(fleet, 0.2); true }
            "0" | "Home" => { fleet.settings.update(|s| s.window_ms = None); true }
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
    let legend = move || {
        fleet.track();
        fleet.with_model(|m| {
            let classes = m.classes();
            let mut present: Vec<(u8, u8, String, &'static str)> = classes
                .iter()
                .filter(|(code, _)| m.lanes().iter().any(|l| l.class_a.contains(code) || l.class_b.contains(code)))
                .map(|(code, c)| (classes.severity(code), code, c.describe(), classes.colour(code)))
                .collect();
            present.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
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
        let filter = fleet.settings.with(|s| s.worker_filter.clone());
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
                            <span class="lane-ab" style:line-height=format!("{}px", h / 2.0)>"A"<br />"B"</span>
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
                    <span class="quiet">{move || { fleet.track(); fleet.with_model(|m| format!("Each lane: upper half A {}, lower half B {}", m.policy_name(Side::A), m.policy_name(Side::B))) }}</span>
                    <button on:click=move |_| zoom(fleet, 0.5, 0.5) aria-label="Zoom in">"Zoom in"</button>
                    <button on:click=move |_| zoom(fleet, 2.0, 0.5) aria-label="Zoom out">"Zoom out"</button>
                    <button on:click=move |_| fleet.settings.update(|s| s.window_ms = None)>"Show all"</button>
                    <button data-testid="next-fatal" on:click=move |_| jump(4)>"Next fatal"</button>
                    <button data-testid="next-skip" on:click=move |_| jump(3)>"Next offload skip or fatal"</button>
                </div>
            </div>
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
        assert_eq!(fmt_offset(12_000.0, 1000.0), "+12 s");
    }
}
