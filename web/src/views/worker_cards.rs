//! The grid of worker cards, one per (worker, dp_rank), filtered by the URL's worker filter.

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::views::worker_card::WorkerCard;

#[component]
pub fn WorkerCards() -> impl IntoView {
    let fleet = use_fleet();
    let shown = move || {
        let filter = fleet.settings.with(|s| s.worker_filter.clone());
        let list = fleet.source_list.get();
        // Event-plane sources are the router's side, listed apart (views::router).
        fleet.with_model(|m| {
            list.into_iter()
                .filter(|i| {
                    m.source(*i).is_some_and(|s| {
                        s.kind == kvscope_protocol::SourceKind::Engine && (filter.is_empty() || s.key.contains(filter.as_str()))
                    })
                })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <section class="cards-section" aria-labelledby="cards-title">
            <div class="section-head">
                <h2 id="cards-title">"Workers"</h2>
                <label class="field">
                    <span>"Filter workers"</span>
                    <input
                        type="search"
                        placeholder="worker id, e.g. 0:"
                        prop:value=move || fleet.settings.with(|s| s.worker_filter.clone())
                        on:input=move |ev| {
                            let v = event_target_value(&ev);
                            fleet.settings.update(|s| s.worker_filter = v);
                        }
                    />
                </label>
                <p class="legend-note">
                    "Counts are events (one verdict each); tier rows of 'applied' are the tier the event landed on. "
                    "Cells where the two policies differ are outlined."
                </p>
            </div>
            <div class="cards">
                <For each=shown key=|i| *i children=move |i| view! { <WorkerCard index=i /> } />
            </div>
        </section>
    }
}
