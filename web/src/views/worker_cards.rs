//! Full worker cards, for the sources a person opened from the fleet overview (all of them on a
//! small fleet, where a card per source still fits a screen).

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::Model;
use crate::views::worker_card::WorkerCard;

/// Up to this many engine sources, every card is shown without opening it.
pub const CARDS_FOR_ALL: usize = 8;

/// The sources whose cards are shown, in display order: the opened ones, or every source of a
/// small fleet; the worker filter applies either way.
pub fn carded_sources(m: &Model, list: &[u32], open: &[String], filter: &str) -> Vec<u32> {
    let engines = m.engine_sources().count();
    list.iter()
        .copied()
        .filter(|i| {
            m.source(*i).is_some_and(|s| {
                s.kind == kvscope_protocol::SourceKind::Engine
                    && (filter.is_empty() || s.key.contains(filter))
                    && (open.contains(&s.key) || (open.is_empty() && engines <= CARDS_FOR_ALL))
            })
        })
        .collect()
}

#[component]
pub fn WorkerCards() -> impl IntoView {
    let fleet = use_fleet();
    let shown = move || {
        let (filter, open) = fleet.settings.with(|s| (s.worker_filter.clone(), s.open.clone()));
        let list = fleet.source_list.get();
        // Event-plane sources are the router's side, listed apart (views::router).
        fleet.with_model(|m| carded_sources(m, &list, &open, &filter))
    };
    let hint = move || {
        fleet.track();
        let none_open = fleet.settings.with(|s| s.open.is_empty());
        let many = fleet.with_model(|m| m.engine_sources().count() > CARDS_FOR_ALL);
        (none_open && many).then(|| {
            view! { <p class="empty" data-testid="cards-hint">"Click a source in the fleet table above to open its card here."</p> }
        })
    };
    view! {
        <section class="cards-section" aria-labelledby="cards-title">
            <div class="section-head">
                <h2 id="cards-title">"Workers"</h2>
                <p class="legend-note">
                    "Counts are events (one verdict each); tier rows of 'applied' are the tier the event landed on. "
                    "Cells where the two policies differ are outlined."
                </p>
            </div>
            {hint}
            <div class="cards">
                <For each=shown key=|i| *i children=move |i| view! { <WorkerCard index=i /> } />
            </div>
        </section>
    }
}
