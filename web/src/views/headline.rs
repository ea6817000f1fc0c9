//! The answer, first, in the router's terms: for each policy, whether the fleet's indexer exits
//! (where, when, on which rule), the crashloop after it, and what a running indexer skips or
//! moves; never an all-clear over incomplete data. The engine writes the sentences; this file
//! only lays them out.

use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn Headline() -> impl IntoView {
    let fleet = use_fleet();
    let headline = Memo::new(move |_| fleet.read(Part::Headline, |p| p.headline.clone()));
    view! {
        <section class="headline" aria-labelledby="headline-title" data-testid="headline">
            <h2 id="headline-title" class="visually-hidden">"What each policy does to the indexer"</h2>
            <div class="differences" data-testid="differences">
                {move || {
                    let h = headline.get();
                    if h.differences.is_empty() {
                        return view! { <p class="quiet" data-testid="agree">{h.agree_line}</p> }.into_any();
                    }
                    view! {
                        <p><strong>"Where the two policies disagree"</strong>" (events, same event under each):"</p>
                        <ul>
                            {h.differences
                                .into_iter()
                                .map(|d| {
                                    let first = d.first_event;
                                    view! {
                                        <li data-testid="difference">
                                            <span class="n">{d.events}</span>" events: "
                                            <span class="side side-a">"A"</span>" "{d.a}" → "
                                            <span class="side side-b">"B"</span>" "{d.b}" "
                                            <button
                                                class="link"
                                                data-testid="difference-first"
                                                on:click=move |_| {
                                                    fleet.select(Some(first));
                                                    crate::views::inspector::scroll_to_inspector();
                                                }
                                            >
                                                "open the first"
                                            </button>
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    }
                    .into_any()
                }}
            </div>
            {move || {
                headline
                    .get()
                    .policies
                    .into_iter()
                    .map(|s| {
                        let side = s.side;
                        let exit = s.exit.as_ref().map(|e| e.event_id);
                        view! {
                            <div
                                class="policy-summary"
                                class:bad=s.exit.is_some()
                                class:good=s.all_clear
                                class:incomplete=!s.completeness.is_complete()
                                data-testid=format!("summary-{}", side.as_str())
                                data-state=s.state.clone()
                                data-completeness=s.completeness.key()
                                data-allclear=s.all_clear.to_string()
                                data-exit-source=s.exit.as_ref().map(|e| e.source.clone())
                                data-exit-seq=s.exit.as_ref().map(|e| e.seq.to_string())
                                data-crashloop=s.exit.as_ref().map(|e| e.crashloop.to_string())
                                data-never-indexed=s.exit.as_ref().map(|e| e.never_indexed.to_string())
                            >
                                <p class="verdict-line">
                                    <span class=format!("side side-{}", side.as_str())>
                                        {format!("Policy {}", side.as_str().to_uppercase())}
                                    </span>
                                    " "
                                    <strong data-testid="verdict-line">{s.verdict_line.clone()}</strong>
                                </p>
                                <p class="about">{s.about.clone()}</p>
                                <ul>
                                    {s.details.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
                                </ul>
                                {exit.map(|id| view! {
                                    <button
                                        data-testid=format!("open-exit-{}", side.as_str())
                                        on:click=move |_| {
                                            fleet.select(Some(id));
                                            crate::views::inspector::scroll_to_inspector();
                                        }
                                    >
                                        "Open the event where the indexer exits"
                                    </button>
                                })}
                            </div>
                        }
                    })
                    .collect_view()
            }}
            {move || {
                let lines = headline.with(|h| h.index_lines.clone());
                (!lines.is_empty()).then(|| view! {
                    <div class="index-lines" data-testid="index-headline">
                        <p><strong>"What the router's index can score (Dynamo 1.6.1's index, modelled)"</strong></p>
                        <ul>{lines.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
                    </div>
                })
            }}
            {move || {
                let lines = headline.with(|h| h.router_lines.clone());
                (!lines.is_empty()).then(|| view! {
                    <div class="router-lines" data-testid="router-headline">
                        <p><strong>"The router's side (Dynamo's event plane)"</strong></p>
                        <ul>{lines.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
                    </div>
                })
            }}
        </section>
    }
}
