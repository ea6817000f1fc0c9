//! One worker card: block counts per tier, verdict counts per policy by tier, skip reason and
//! fatal kind, and gaps, restarts and errors. It re-renders only when its own card changed.

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::label::Outcome;
use kvscope_engine_protocol::view::{Card, CardRow};
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::thousands;

/// "applied on device", "skipped offload_block_size_mismatch".
fn row_label(r: &CardRow) -> String {
    match r.kind {
        Outcome::Apply => format!("applied on {}", r.reason),
        kind => format!("{} {}", kind.past_tense(), r.reason),
    }
}

fn row_view(r: CardRow) -> impl IntoView {
    let differs = r.cells[0].0 != r.cells[1].0;
    let kind = r.kind.past_tense();
    let reason = r.reason.as_str();
    let routine = r.routine;
    let label = row_label(&r);
    let cell = move |side: &'static str, (n, tiers): (u64, String)| {
        view! {
            <td class:nonzero={n > 0} class:differs=differs>
                <span data-testid="verdict-count" data-policy=side data-kind=kind data-reason=reason>
                    {n.to_string()}
                </span>
                {(!tiers.is_empty() && n > 0).then(|| view! { <small>{format!(" on {tiers}")}</small> })}
            </td>
        }
    };
    let [ca, cb] = r.cells;
    view! {
        <tr class=format!("row-{kind}") class:routine=routine>
            <th scope="row">{label}</th>
            {cell("a", ca)}
            {cell("b", cb)}
        </tr>
    }
}

fn card_view(c: Card, pa: String, pb: String) -> impl IntoView {
    let short = (!c.completeness.is_complete()).then(|| c.completeness.prefix().trim_end_matches([':', ' ']).to_owned());
    let stop_lines = c
        .stop_lines
        .into_iter()
        .map(|(side, text)| {
            let side = side.as_str();
            view! {
                <p class="stop-line">
                    <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                    {text}
                </p>
            }
        })
        .collect_view();
    let index_lines = c
        .index_lines
        .into_iter()
        .map(|(side, text)| {
            let side = side.as_str();
            view! {
                <p class="index-line" data-testid="index-line" data-side=side>
                    <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                    {text}
                </p>
            }
        })
        .collect_view();
    let tiers = c.tiers;
    let (disagrees, label) = (c.disagree.is_some(), c.key.clone());
    view! {
        <article
            class="card"
            class:disagree=disagrees
            data-testid="worker-card"
            data-worker=c.worker
            data-dp-rank=c.dp_rank.to_string()
            data-completeness=c.completeness.key()
            aria-label=label
        >
            <header>
                <h3>{c.key}</h3>
                <span class="status">{c.status}</span>
            </header>
            {short.map(|t| view! { <p class="badge incomplete" data-testid="completeness">{t}</p> })}
            {c.disagree.map(|d| view! { <p class="badge" data-testid="disagree">{d}</p> })}
            {stop_lines}
            {crate::views::router::card_row(c.router)}
            {index_lines}
            <table class="tiers">
                <caption>{c.tree_caption}</caption>
                <tr>{tiers.iter().map(|(t, _)| view! { <th scope="col">{t.label()}</th> }).collect_view()}</tr>
                <tr>
                    {tiers
                        .iter()
                        .map(|(t, n)| view! { <td data-testid="tier-count" data-tier=t.label()>{n.to_string()}</td> })
                        .collect_view()}
                </tr>
            </table>
            <table class="verdicts">
                <caption>"Events by verdict"</caption>
                <thead>
                    <tr>
                        <th scope="col">"verdict"</th>
                        <th scope="col"><span class="side side-a">"A"</span>" "{pa}</th>
                        <th scope="col"><span class="side side-b">"B"</span>" "{pb}</th>
                    </tr>
                </thead>
                <tbody>{c.rows.into_iter().map(row_view).collect_view()}</tbody>
            </table>
            <footer>
                <span data-testid="frames">{format!("{} frames", thousands(c.frames))}</span>
                <span>{format!("{} events", thousands(c.events))}</span>
                <span>{format!("last seq {}", c.last_seq.map_or("—".to_owned(), |s| s.to_string()))}</span>
                <span data-testid="gaps" class:warn={c.gaps > 0}>{format!("{} gaps", c.gaps)}</span>
                <span data-testid="restarts" class:warn={c.restarts > 0}>{format!("{} restarts", c.restarts)}</span>
                <span data-testid="errors" class:warn={c.errors > 0} title=c.last_error.unwrap_or_default()>
                    {format!("{} errors", c.errors)}
                </span>
            </footer>
        </article>
    }
}

#[component]
pub fn WorkerCard(index: u32) -> impl IntoView {
    let fleet = use_fleet();
    // Its own card only: a memo, so that another card's change re-renders nothing here.
    let card = Memo::new(move |_| fleet.read(Part::Cards, |p| p.cards.cards.iter().find(|c| c.index == index).cloned()));
    let names = Memo::new(move |_| (fleet.policy_name(Side::A), fleet.policy_name(Side::B)));
    move || {
        let (pa, pb) = names.get();
        match card.get() {
            Some(c) => card_view(c, pa, pb).into_any(),
            None => view! { <article class="card"></article> }.into_any(),
        }
    }
}
