//! The router's side on the page: per engine source, what Dynamo's relay should have published
//! and what the event plane delivered (a row on the worker card); and the event-plane sources
//! with their publishers. The counts are `kvscope-router`'s, summarised by the engine: the same
//! `kvscope check --json` prints as `"router"`.

use kvscope_engine_protocol::view::RouterRow;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::thousands;

/// The card's router row.
pub fn card_row(row: RouterRow) -> Option<AnyView> {
    match row {
        RouterRow::None => None,
        RouterRow::NotMatched => Some(
            view! { <p class="router-row quiet" data-testid="router-counts">"router: not matched (the worker id is not a Dynamo worker id in decimal)"</p> }
                .into_any(),
        ),
        RouterRow::Counts { policy, clean, cells, dropped } => Some(
            view! {
                <p class="router-row" class:differs=!clean data-testid="router-counts">
                    <span class="side side-r">"R"</span>
                    {format!(" {policy}'s relay → router: ")}
                    {cells
                        .into_iter()
                        .map(|(k, n)| view! { <span class="router-count" data-count=k.clone()>{format!("{k} {} ", thousands(n))}</span> })
                        .collect_view()}
                    {dropped}
                </p>
            }
            .into_any(),
        ),
    }
}

/// The event-plane sources: what each reads, its state, and the publishers seen on it.
#[component]
pub fn EventPlanes() -> impl IntoView {
    let fleet = use_fleet();
    move || {
        let Some(planes) = fleet.read(Part::Planes, |p| p.planes.clone()) else { return ().into_any() };
        view! {
            <section class="event-planes" data-testid="event-planes" aria-label="Dynamo's event plane">
                <h2>"Event plane (what the router receives)"</h2>
                <ul>
                    {planes
                        .planes
                        .into_iter()
                        .map(|(key, line, error)| {
                            view! {
                                <li data-testid="event-plane" data-source=key>
                                    {line}
                                    {error.map(|e| view! { <span class="error">{format!(" · {e}")}</span> })}
                                </li>
                            }
                        })
                        .collect_view()}
                    {planes.publishers.into_iter().map(|p| view! { <li class="quiet">{p}</li> }).collect_view()}
                    {planes.rest.into_iter().map(|r| view! { <li class="quiet" data-testid="event-plane-rest">{r}</li> }).collect_view()}
                </ul>
            </section>
        }
        .into_any()
    }
}
