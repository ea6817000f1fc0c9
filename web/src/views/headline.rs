//! The answer, first, in the router's terms: for each policy, whether the fleet's indexer exits
//! (where, when, on which rule), the crashloop after it, and what a running indexer skips or
//! moves; never an all-clear over incomplete data. The sentences are built in
//! `model::summary`; this file only renders them.

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::settings::Side;
use crate::views::thousands;

#[component]
pub fn Headline() -> impl IntoView {
    let fleet = use_fleet();
    let summaries = move || {
        fleet.track();
        fleet.with_model(|m| [m.policy_summary(Side::A), m.policy_summary(Side::B)])
    };
    let differences = move || {
        fleet.track();
        fleet.with_model(|m| {
            let (pa, pb) = (m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned());
            m.differences()
                .into_iter()
                .take(6)
                .map(|(a, b, d)| {
                    let text = |c: Option<&crate::model::classes::Class>| c.map_or("no verdict".to_owned(), |c| c.describe());
                    (thousands(d.events), format!("{pa}: {}", text(a)), format!("{pb}: {}", text(b)), d.first_event)
                })
                .collect::<Vec<_>>()
        })
    };
    let agree_line = move || {
        fleet.track();
        fleet.with_model(|m| {
            let c = m.fleet_completeness();
            if c.is_complete() {
                "Policies A and B decide every event the same way.".to_owned()
            } else {
                format!("{}no event seen so far is decided differently by policies A and B.", c.prefix())
            }
        })
    };
    let router_lines = move || {
        fleet.track();
        fleet.with_model(crate::views::router::headline_lines)
    };
    view! {
        <section class="headline" aria-labelledby="headline-title" data-testid="headline">
            <h2 id="headline-title" class="visually-hidden">"What each policy does to the indexer"</h2>
            <div class="differences" data-testid="differences">
                {move || {
                    let rows = differences();
                    if rows.is_empty() {
                        return view! { <p class="quiet" data-testid="agree">{agree_line()}</p> }.into_any();
                    }
                    view! {
                        <p><strong>"Where the two policies disagree"</strong>" (events, same event under each):"</p>
                        <ul>
                            {rows
                                .into_iter()
                                .map(|(n, a, b, first)| view! {
                                    <li data-testid="difference">
                                        <span class="n">{n}</span>" events: "
                                        <span class="side side-a">"A"</span>" "{a}" → "
                                        <span class="side side-b">"B"</span>" "{b}" "
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
                                })
                                .collect_view()}
                        </ul>
                    }
                    .into_any()
                }}
            </div>
            {move || {
                summaries()
                    .into_iter()
                    .map(|s| {
                        let side = s.side;
                        let exit = s.exit.as_ref().map(|e| e.event_id);
                        let state = if s.exit.is_some() { "exits" } else if s.all_clear() { "clear" } else { s.completeness.key() };
                        view! {
                            <div
                                class="policy-summary"
                                class:bad=s.exit.is_some()
                                class:good=s.all_clear()
                                class:incomplete=!s.completeness.is_complete()
                                data-testid=format!("summary-{}", side.as_str())
                                data-state=state
                                data-completeness=s.completeness.key()
                                data-allclear=s.all_clear().to_string()
                                data-exit-source=s.exit.as_ref().map(|e| e.source.clone())
                                data-exit-seq=s.exit.as_ref().map(|e| e.seq.to_string())
                                data-crashloop=s.exit.as_ref().map(|_| s.crashloop.iter().map(|c| c.1).sum::<u64>().to_string())
                                data-never-indexed=s.exit.as_ref().map(|_| s.never_indexed.to_string())
                            >
                                <p class="verdict-line">
                                    <span class=format!("side side-{}", side.as_str())>
                                        {format!("Policy {}", side.as_str().to_uppercase())}
                                    </span>
                                    " "
                                    <strong data-testid="verdict-line">{s.verdict_line()}</strong>
                                </p>
                                <p class="about">{s.about}</p>
                                <ul>
                                    {s.detail_lines().into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
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
                let lines = router_lines();
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
