//! Full worker cards, for the sources a person opened from the fleet overview (all of them on a
//! small fleet, where a card per source still fits a screen). Which ones is the engine's call
//! (`summarize::cards`); each card re-renders only when its own summary changed.

use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::worker_card::WorkerCard;

#[component]
pub fn WorkerCards() -> impl IntoView {
    let fleet = use_fleet();
    let shown = Memo::new(move |_| fleet.read(Part::Cards, |p| p.cards.cards.iter().map(|c| c.index).collect::<Vec<_>>()));
    let hint = move || {
        fleet.read(Part::Cards, |p| p.cards.hint).then(|| {
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
                <For each=move || shown.get() key=|i| *i children=move |i| view! { <WorkerCard index=i /> } />
            </div>
        </section>
    }
}
