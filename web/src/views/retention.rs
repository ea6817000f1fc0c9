//! The retention line: what the engine keeps of the stream against both of its bounds, and,
//! once one is reached, what it let go and the setting that raises it.
//!
//! It sits under the data-quality strip rather than in the fleet bar: the bar stays on one line,
//! where this sentence was cut to its first figure just when it mattered most.

use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn Retention() -> impl IntoView {
    let fleet = use_fleet();
    view! {
        <p
            class="retention"
            class:bound=move || fleet.read(Part::Bar, |p| p.bar.memory_bound_reached)
            data-testid="retention"
            title="Every event's record is kept (for the timeline, the inspector and search), the raw bytes of the most recent frames (for the hex view, re-classification and download), and the router index model's nodes (Dynamo's tree under each policy)"
        >
            <strong>"Kept: "</strong>
            <span
                data-testid="memory"
                data-engine-wasm-bytes=move || fleet.read(Part::Bar, |p| p.bar.engine_wasm_bytes.to_string())
                data-engines=move || fleet.read(Part::Bar, |p| p.bar.engines.to_string())
            >
                {move || fleet.read(Part::Bar, |p| p.bar.memory.clone())}
            </span>
        </p>
    }
}
