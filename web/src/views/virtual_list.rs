//! A hand-virtualized list: only the rows in view (plus a margin) are in the DOM, so a list of
//! a million rows costs a few dozen elements. (leptos_virtual_scroller would add 53 KB and want
//! the whole list in a signal.)

use leptos::prelude::*;

/// Rows built above and below the viewport, so a scroll shows built rows: few, as each costs its
/// bindings at every update.
const OVERSCAN_ROWS: usize = 2;

/// Rows built in one animation frame: a list that gets its rows all at once (the first summary
/// with data, at 64 sources) builds them over a few frames instead of in one long task (40-60 ms
/// for 21 rows on a busy 2-core machine, measured).
const ROWS_PER_FRAME: usize = 7;

/// The rows to render for a viewport: `[first, last)`.
pub fn visible_range(scroll_top_px: f64, viewport_px: f64, row_px: f64, rows: usize, margin: usize) -> (usize, usize) {
    if rows == 0 || row_px <= 0.0 {
        return (0, 0);
    }
    let first = ((scroll_top_px / row_px).floor().max(0.0) as usize).saturating_sub(margin).min(rows);
    let shown = (viewport_px / row_px).ceil() as usize + 2 * margin + 1;
    (first, (first + shown).min(rows))
}

/// A scrolling box of `rows` rows of `row_px` pixels; `render(i)` builds row `i` once, when it
/// comes into view, and binds it to the data behind it (a row re-renders its own fields, not
/// the list).
#[component]
pub fn VirtualList<R, V>(
    #[prop(into)] rows: Signal<usize>,
    row_px: f64,
    #[prop(into)] height_px: Signal<f64>,
    render: R,
    #[prop(into, optional)] label: String,
) -> impl IntoView
where
    R: Fn(usize) -> V + Send + Sync + Clone + 'static,
    V: IntoView + 'static,
{
    let scroll = RwSignal::new(0.0f64);
    let range = Memo::new(move |_| visible_range(scroll.get(), height_px.get(), row_px, rows.get(), OVERSCAN_ROWS));
    // How many rows may be built so far; raised a frame at a time until the view is covered.
    let allowed = RwSignal::new(ROWS_PER_FRAME);
    Effect::new(move |_| {
        let (first, last) = range.get();
        if last - first > allowed.get() {
            request_animation_frame(move || {
                let _ = allowed.try_update(|n| *n += ROWS_PER_FRAME);
            });
        }
    });
    let on_scroll = move |ev: web_sys::Event| {
        use wasm_bindgen::JsCast;
        if let Some(el) = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) {
            scroll.set(el.scroll_top() as f64);
        }
    };
    view! {
        <div
            class="vlist"
            role="list"
            tabindex="0"
            aria-label=label
            style:height=move || format!("{}px", height_px.get())
            on:scroll=on_scroll
        >
            <div style:height=move || format!("{}px", rows.get() as f64 * row_px) style:position="relative">
                // Keyed by position: a row is built when it scrolls into view and keeps its
                // elements while in view; `render` binds what it shows to the data.
                <For
                    each=move || {
                        let (first, last) = range.get();
                        first..last.min(first + allowed.get())
                    }
                    key=|i| *i
                    children=move |i| {
                        view! {
                            <div class="vrow" role="listitem" style:top=format!("{}px", i as f64 * row_px) style:height=format!("{row_px}px")>
                                {render(i)}
                            </div>
                        }
                    }
                />
            </div>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_rows_render_a_few_dozen() {
        let (first, last) = visible_range(500_000.0 * 20.0, 400.0, 20.0, 1_000_000, 5);
        assert_eq!(first, 499_995);
        assert!(last - first <= 32, "{}", last - first);
        assert_eq!(visible_range(0.0, 400.0, 20.0, 3, 5), (0, 3));
        assert_eq!(visible_range(0.0, 400.0, 20.0, 0, 5), (0, 0));
    }
}
