//! The mismatch timeline: a lane per source over wall-clock receive time (UTC); by default only
//! the events the policies decide differently or that are fatal or skipped under either, with
//! agreements dimmed; where a policy's indexer exits, a marker and the rest of its half hatched;
//! shift-drag counts the verdicts of a time range; zoom (wheel, buttons, + and -), pan (drag,
//! arrow keys); hover shows what a pixel holds; a click opens the event in the inspector.
//!
//! The engine paints the image (`summarize::timeline`, one column per pixel, however many
//! events) and sends its pixels beside the summary; this view puts them on the canvas with one
//! `putImageData`, writes the axis labels and exit markers over it as text, and asks the engine
//! what a pixel holds and which event a click opens.

use kvscope_engine_protocol::view::Timeline as TimelineView;
use kvscope_engine_protocol::{Severity, Side, ToEngine};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;

use crate::contexts::{Fleet, Part, use_fleet};
use crate::views::thousands;

/// Where the pointer is: the lane's source, the time under it and one pixel's worth of time,
/// its fraction of the width, and which policy's half.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spot {
    pub source: u32,
    pub time_ms: f64,
    pub per_px_ms: f64,
    pub fraction: f64,
    pub side: Side,
}

/// The spot at (`x`, `y`) CSS pixels from the canvas's top left, `width` pixels wide.
pub fn locate(t: &TimelineView, x: f64, y: f64, width: f64) -> Option<Spot> {
    if t.lane_px <= 0.0 || x < 0.0 || y < 0.0 || width <= 0.0 {
        return None;
    }
    let row = (y / t.lane_px).floor();
    let lane = t.lanes.get(row as usize)?;
    let side = if y - row * t.lane_px < t.lane_px / f64::from(t.rows_per_lane.max(1)) { Side::A } else { Side::B };
    let (t0, t1) = t.window;
    let per_px_ms = (t1 - t0) / width;
    Some(Spot { source: lane.index, time_ms: t0 + x * per_px_ms, per_px_ms, fraction: x / width, side })
}

/// The window after zooming by `factor` around `centre` (a fraction of the width).
pub fn zoomed((a, b): (f64, f64), factor: f64, centre: f64) -> (f64, f64) {
    let span = b - a;
    let at = a + span * centre;
    let new_span = (span * factor).max(1.0);
    let start = at - new_span * centre;
    (start, start + new_span)
}

fn zoom(fleet: Fleet, factor: f64, centre: f64) {
    let cur = fleet.read_untracked(|p| p.timeline.window);
    fleet.settings.update(|s| s.window_ms = Some(zoomed(cur, factor, centre)));
}

fn pan(fleet: Fleet, frac: f64) {
    let cur = fleet.read_untracked(|p| p.timeline.window);
    let d = (cur.1 - cur.0) * frac;
    fleet.settings.update(|s| s.window_ms = Some((cur.0 + d, cur.1 + d)));
}

/// The observer of the canvas's width, and its callback (which must live as long as it).
type WidthObserver = (web_sys::ResizeObserver, Closure<dyn FnMut(js_sys::Array)>);

/// Sends the engine the canvas's CSS width whenever layout gives it one: a `ResizeObserver`
/// reports it after layout, on mount and on every resize, where reading `clientWidth` would
/// force a layout (and reads 0 before the canvas is laid out). The engine paints no pixels
/// before it knows the width.
fn observe_width(fleet: Fleet, canvas: &web_sys::HtmlCanvasElement) -> Option<WidthObserver> {
    let on_resize = Closure::<dyn FnMut(js_sys::Array)>::new(move |entries: js_sys::Array| {
        let Some(entry) = entries.iter().last().and_then(|e| e.dyn_into::<web_sys::ResizeObserverEntry>().ok()) else { return };
        let w = entry.content_rect().width().round();
        if w > 0.0 && fleet.canvas_width.try_get_untracked().is_some_and(|old| old != w) {
            fleet.canvas_width.set(w);
        }
    });
    let observer = web_sys::ResizeObserver::new(on_resize.as_ref().unchecked_ref()).ok()?;
    observer.observe(canvas);
    Some((observer, on_resize))
}

#[component]
pub fn Timeline() -> impl IntoView {
    let fleet = use_fleet();
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let drag = StoredValue::new(None::<(f64, (f64, f64), bool)>);
    let selecting = StoredValue::new(None::<f64>);
    let timeline = Memo::new(move |_| fleet.read(Part::Timeline, |p| p.timeline.clone()));

    // Effect at the edge: the engine's pixels -> the canvas.
    Effect::new(move |_| {
        fleet.track(Part::Timeline);
        let Some(canvas) = canvas_ref.get() else { return };
        let Some(image) = fleet.pixels() else { return };
        // Only when the size changed: setting a canvas's width or height, even to the same
        // value, reallocates and clears its bitmap. (Its CSS height follows the timeline's size
        // as soon as that is known, so the pixels arriving move nothing on the page.)
        if canvas.height() != image.height() {
            canvas.set_height(image.height());
        }
        if canvas.width() != image.width() {
            canvas.set_width(image.width());
        }
        if let Ok(Some(ctx)) = canvas.get_context("2d")
            && let Ok(ctx) = ctx.dyn_into::<web_sys::CanvasRenderingContext2d>()
        {
            let _ = ctx.put_image_data(&image, 0.0, 0.0);
        }
    });
    let observer = StoredValue::new_local(None);
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            observer.set_value(observe_width(fleet, &canvas));
        }
    });
    on_cleanup(move || {
        observer.try_with_value(|o| {
            if let Some((o, _)) = o {
                o.disconnect();
            }
        });
    });

    let spot = move |ev: &web_sys::MouseEvent| -> Option<Spot> {
        let canvas = canvas_ref.get_untracked()?;
        let rect = canvas.get_bounding_client_rect();
        let (x, y) = (f64::from(ev.client_x()) - rect.left(), f64::from(ev.client_y()) - rect.top());
        fleet.read_untracked(|p| locate(&p.timeline, x, y, rect.width()))
    };
    let on_move = move |ev: web_sys::MouseEvent| {
        if let Some(Some(start)) = selecting.try_get_value() {
            if let Some(s) = spot(&ev) {
                fleet.range.set(Some((start, s.time_ms)));
            }
            return;
        }
        if let Some(Some((x0, (a, b), _))) = drag.try_get_value() {
            let Some(canvas) = canvas_ref.get_untracked() else { return };
            let width = canvas.get_bounding_client_rect().width().max(1.0);
            let dx = f64::from(ev.client_x()) - x0;
            if dx.abs() > 3.0 {
                let d = -dx / width * (b - a);
                drag.set_value(Some((x0, (a, b), true)));
                fleet.settings.update(|s| s.window_ms = Some((a + d, b + d)));
            }
            return;
        }
        match spot(&ev) {
            Some(s) => fleet.send(&ToEngine::Hover {
                source: s.source,
                side: s.side,
                from_ms: s.time_ms,
                to_ms: s.time_ms + s.per_px_ms.max(1e-6),
            }),
            None => fleet.hover.set(String::new()),
        }
    };
    let on_down = move |ev: web_sys::MouseEvent| {
        if ev.shift_key() {
            if let Some(s) = spot(&ev) {
                selecting.set_value(Some(s.time_ms));
                fleet.range.set(Some((s.time_ms, s.time_ms)));
            }
            return;
        }
        let win = fleet.read_untracked(|p| p.timeline.window);
        drag.set_value(Some((f64::from(ev.client_x()), win, false)));
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
        if let Some(s) = spot(&ev) {
            fleet.send(&ToEngine::SelectAt { source: s.source, side: s.side, time_ms: s.time_ms, tolerance_ms: s.per_px_ms * 3.0 });
        }
    };
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let frac = spot(&ev).map_or(0.5, |s| s.fraction);
        zoom(fleet, if ev.delta_y() > 0.0 { 1.25 } else { 0.8 }, frac);
    };
    // Next event marked under either policy (a fatal under A is the skip under B).
    let jump = move |min_severity: Severity| fleet.send(&ToEngine::SelectNext { min_severity });
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
                jump(Severity::Skip);
                true
            }
            _ => false,
        };
        if handled {
            ev.prevent_default();
        }
    };
    let range = Memo::new(move |_| timeline.with(|t| t.range.clone()));
    let range_view = move || {
        let r = range.get()?;
        let (pa, pb) = (fleet.policy_name(Side::A), fleet.policy_name(Side::B));
        let [ra, rb] = r.rows;
        let list =
            |rows: Vec<(String, u64, String)>| {
                rows.into_iter()
                .map(|(name, n, colour)| view! {
                    <li><span class="swatch" style:background=colour aria-hidden="true"></span>{format!("{} {name}", thousands(n))}</li>
                })
                .collect_view()
            };
        Some(view! {
            <div class="range-counts" data-testid="range-counts">
                <p>
                    <strong>{format!("Selected: {}", r.span)}</strong>" "
                    <button class="link" on:click=move |_| fleet.range.set(None)>"clear"</button>
                </p>
                {r.partial.map(|p| view! { <p class="legend-note" data-testid="range-partial">{p}</p> })}
                <div class="range-cols">
                    <div><span class="side side-a">"A"</span>" "{pa}<ul>{list(ra)}</ul></div>
                    <div><span class="side side-b">"B"</span>" "{pb}<ul>{list(rb)}</ul></div>
                </div>
            </div>
        })
    };
    // The shift-drag's range, over the canvas (drawn here at once, not by the engine).
    let range_overlay = move || {
        let (a, b) = fleet.range.get()?;
        let (t, (w, _)) = timeline.with(|t| (t.window, t.css_size));
        let x = |ms: f64| (ms - t.0) / (t.1 - t.0) * w;
        let (xa, xb) = (x(a.min(b)), x(a.max(b)));
        Some(view! { <div class="range-overlay" style:left=format!("{xa}px") style:width=format!("{}px", (xb - xa).max(1.0))></div> })
    };
    // Each piece re-renders when its own data changed (a live window moves at every summary;
    // the lanes and the legend rarely change).
    let heading = Memo::new(move |_| timeline.with(|t| t.heading.clone()));
    let lane_note = Memo::new(move |_| timeline.with(|t| t.lane_note.clone()));
    let bucket_note = Memo::new(move |_| timeline.with(|t| t.bucket_note.clone()));
    let legend_items = Memo::new(move |_| timeline.with(|t| t.legend.clone()));
    let lanes = Memo::new(move |_| timeline.with(|t| (t.lanes.clone(), t.lane_px, t.rows_per_lane)));
    let text = Memo::new(move |_| timeline.with(|t| (t.ticks.clone(), t.exits.clone(), t.lanes.len() as f64 * t.lane_px)));
    let legend = move || {
        legend_items.with(|legend| {
            legend
                .iter()
                .map(|(name, colour)| view! { <li><span class="swatch" style:background=colour.clone() aria-hidden="true"></span>{name.clone()}</li> })
                .collect_view()
        })
    };
    let lane_labels = move || {
        lanes.with(|(lanes, h, rows)| {
            let (h, rows) = (*h, *rows);
            let router = rows > 2;
            lanes
                .iter()
                .map(|l| {
                    view! {
                        <li style:height=format!("{h}px")>
                            <span class="lane-key">{l.key.clone()}</span>
                            <span class="lane-ab" style:line-height=format!("{}px", h / f64::from(rows.max(1)))>
                                "A"<br />"B"{router.then(|| view! { <br />"R" })}
                            </span>
                        </li>
                    }
                })
                .collect_view()
        })
    };
    // Text over the pixels: the axis labels and where a policy's indexer exits.
    let text_over = move || {
        text.with(|(ticks, exits, axis_y)| {
            let axis_y = *axis_y;
            let ticks = ticks
                .iter()
                .map(|(x, label)| view! { <span class="tick-label" style:left=format!("{}px", x + 3.0) style:top=format!("{}px", axis_y + 4.0)>{label.clone()}</span> })
                .collect_view();
            let exits = exits
                .iter()
                .map(|(side, x)| {
                    let k = if side.is_b() { 12.0 } else { 0.0 };
                    view! {
                        <span class="exit-label" data-testid="exit-label" style:left=format!("{}px", x + 4.0) style:top=format!("{k}px")>
                            {format!("{} exits", side.as_str().to_uppercase())}
                        </span>
                    }
                })
                .collect_view();
            view! { {ticks}{exits} }
        })
    };
    view! {
        <section class="timeline" aria-labelledby="timeline-title" data-testid="timeline">
            <div class="section-head">
                <h2 id="timeline-title">"Mismatch timeline"</h2>
                <div class="toolbar" role="toolbar" aria-label="Timeline controls">
                    <span class="quiet">{move || heading.get()}</span>
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
                    <button data-testid="next-fatal" on:click=move |_| jump(Severity::Fatal)>{Severity::Fatal.next_button()}</button>
                    <button data-testid="next-skip" on:click=move |_| jump(Severity::Skip)>{Severity::Skip.next_button()}</button>
                </div>
            </div>
            {move || lane_note.get().map(|n| view! { <p class="legend-note" data-testid="lane-note">{n}</p> })}
            {move || bucket_note.get().map(|n| view! { <p class="legend-note" data-testid="bucket-note">{n}</p> })}
            <div class="timeline-body">
                <ul class="lane-labels" aria-hidden="true">{lane_labels}</ul>
                <div class="canvas-wrap">
                    <canvas
                        node_ref=canvas_ref
                        style:height=move || format!("{}px", timeline.with(|t| t.css_size.1))
                        tabindex="0"
                        role="img"
                        aria-label="Timeline: one lane per worker, upper half policy A, lower half policy B; keys: + and - zoom, arrows pan, 0 shows all, Enter opens the next skip or fatal"
                        on:mousemove=on_move
                        on:mousedown=on_down
                        on:mouseup=on_up
                        on:mouseleave=move |_| { drag.set_value(None); fleet.hover.set(String::new()); }
                        on:wheel=on_wheel
                        on:keydown=on_key
                    ></canvas>
                    <div class="timeline-text" aria-hidden="true">{text_over}{range_overlay}</div>
                </div>
            </div>
            <p class="hover" aria-live="polite" data-testid="timeline-hover">
                {move || {
                    let h = fleet.hover.get();
                    if h.is_empty() { "Hover a lane for details; drag to pan, wheel to zoom, click to inspect.".to_owned() } else { h }
                }}
            </p>
            {range_view}
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
    use kvscope_engine_protocol::view::LaneLabel;

    use super::*;

    fn two_lanes() -> TimelineView {
        TimelineView {
            lanes: vec![LaneLabel { index: 4, key: "4:0".into() }, LaneLabel { index: 9, key: "9:0".into() }],
            lane_px: 20.0,
            rows_per_lane: 2,
            window: (1_000.0, 2_000.0),
            ..TimelineView::default()
        }
    }

    #[test]
    fn the_pointer_names_a_lane_a_policy_and_a_time() {
        let t = two_lanes();
        let s = locate(&t, 250.0, 25.0, 1_000.0).unwrap();
        assert_eq!((s.source, s.side, s.time_ms, s.per_px_ms, s.fraction), (9, Side::A, 1_250.0, 1.0, 0.25));
        assert_eq!(locate(&t, 250.0, 35.0, 1_000.0).unwrap().side, Side::B, "the lower half is B");
        assert_eq!(locate(&t, 250.0, 45.0, 1_000.0), None, "below the lanes: the axis");
        assert_eq!(locate(&t, -1.0, 5.0, 1_000.0), None);
    }

    #[test]
    fn zooming_keeps_the_point_under_the_pointer() {
        assert_eq!(zoomed((0.0, 1_000.0), 0.5, 0.5), (250.0, 750.0));
        assert_eq!(zoomed((0.0, 1_000.0), 2.0, 0.0), (0.0, 2_000.0));
        assert_eq!(zoomed((0.0, 1.0), 0.1, 0.5).1 - zoomed((0.0, 1.0), 0.1, 0.5).0, 1.0, "never below a millisecond");
    }
}
