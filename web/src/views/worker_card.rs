//! One worker card: block counts per tier, verdict counts per policy by tier, skip reason and
//! fatal kind, and gaps, restarts and errors. It re-renders only when its own source changed.

use std::collections::BTreeSet;

use kvscope_normalize::{Outcome, StorageTier, VerdictLabel};
use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::Model;
use crate::model::classes::Reason;
use crate::model::settings::Side;
use crate::views::thousands;

/// One row of a card's verdict table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub kind: Outcome,
    pub reason: Reason,
    /// Per policy: count and the tiers it happened on.
    pub cells: [(u64, String); 2],
}

/// The rows of a card: fatal first, then skips, then applied per tier (always all four tiers,
/// so a zero is shown, not missing).
pub fn card_rows(m: &Model, index: u32) -> Vec<Row> {
    let Some(src) = m.source(index) else { return Vec::new() };
    let classes = m.classes();
    let a = src.counts(Side::A).rows(classes);
    let b = src.counts(Side::B).rows(classes);
    let mut keys: BTreeSet<(Outcome, Reason)> = a.keys().chain(b.keys()).copied().collect();
    for t in StorageTier::ALL {
        keys.insert((Outcome::Apply, Reason::Tier(t)));
    }
    let order = |k: Outcome| match k {
        Outcome::Fatal => 0,
        Outcome::Skip => 1,
        Outcome::Apply => 2,
    };
    let mut keys: Vec<_> = keys.into_iter().collect();
    keys.sort_by_key(|(k, r)| {
        let tier_pos = match r {
            Reason::Tier(t) => t.index(),
            _ => 9,
        };
        (order(*k), tier_pos, *r)
    });
    keys.into_iter()
        .map(|(kind, reason)| {
            let cell = |rows: &crate::model::Rows| {
                rows.get(&(kind, reason)).map_or((0, String::new()), |(n, tiers)| {
                    let routine = kind == Outcome::Apply || (kind == Outcome::Skip && reason.is_routine_filter());
                    (*n, if routine { String::new() } else { tiers.keys().map(ToString::to_string).collect::<Vec<_>>().join(", ") })
                })
            };
            Row { cells: [cell(&a), cell(&b)], kind, reason }
        })
        .collect()
}

/// "A fatal · B skipped" when the policies disagree on this worker, else `None`.
pub fn disagreement(m: &Model, index: u32) -> Option<String> {
    let src = m.source(index)?;
    if !src.policies_disagree(m.classes()) {
        return None;
    }
    let word = |side: Side| {
        let c = src.counts(side);
        if c.total(m.classes(), Outcome::Fatal) > 0 {
            "fatal"
        } else if c.get(m.classes(), Outcome::Skip, Reason::Label(VerdictLabel::OffloadBlockSizeMismatch)) > 0 {
            "offload skipped"
        } else {
            "ok"
        }
    };
    Some(format!("policies disagree: A {} · B {}", word(Side::A), word(Side::B)))
}

/// What the card says of its source's connection. "live" means the page is analysing the
/// source's events, not only that the server's socket is open.
pub fn status_word(m: &Model, index: u32) -> String {
    let Some(src) = m.source(index) else { return "—".to_owned() };
    match &src.status {
        Some(st) if st.state == kvscope_protocol::ConnState::Live && src.counts(Side::A).events == 0 => {
            "connected, no events analysed".to_owned()
        }
        Some(st) => format!("{:?}", st.state).to_lowercase(),
        None if matches!(m.origin, crate::model::Origin::Capture { .. }) => "capture".to_owned(),
        None => "—".to_owned(),
    }
}

#[component]
pub fn WorkerCard(index: u32) -> impl IntoView {
    let fleet = use_fleet();
    let generation = Memo::new(move |_| fleet.track_source(index));
    // Policy names and the tree side are global: track them too.
    let global = Memo::new(move |_| {
        fleet.track();
        fleet.with_model(|m| (m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned(), m.config().trees))
    });
    move || {
        generation.track();
        let (pa, pb, trees_side) = global.get();
        fleet.with_model(|m| {
            let Some(src) = m.source(index) else { return view! { <article class="card"></article> }.into_any() };
            let rows = card_rows(m, index);
            let disagree = disagreement(m, index);
            let is_disagree = disagree.is_some();
            let status = status_word(m, index);
            let completeness = m.completeness(index);
            let completeness_key = completeness.key();
            let short = (!completeness.is_complete()).then(|| completeness.prefix().trim_end_matches([':', ' ']).to_owned());
            let tier_counts: Vec<(StorageTier, u64)> = StorageTier::ALL.iter().map(|t| (*t, m.trees().blocks(index, *t))).collect();
            let fatal_a = src.counts(Side::A).first_fatal.clone();
            let fatal_b = src.counts(Side::B).first_fatal.clone();
            let gaps = src.gaps();
            let restarts = src.restarts();
            let last_seq = src.seq.last_seq;
            let errors = src.decode_errors + src.frame_errors;
            let last_error = src.last_error.clone();
            let worker = src.worker_id.clone();
            let dp = src.dp_rank;
            let title = src.key.clone();
            let title_label = title.clone();
            let frames = src.frames;
            let events = src.counts(Side::A).events;
            let tree_policy = if trees_side == Side::A { pa.clone() } else { pb.clone() };
            let fatal_line = |side: &'static str, name: &str, f: Option<(u64, String)>| {
                f.map(|(seq, _)| {
                    view! {
                        <p class="stop-line">
                            <span class=format!("side side-{side}")>{side.to_uppercase()}</span>
                            {format!(" {name}: an indexer stops at seq {seq}")}
                        </p>
                    }
                })
            };
            view! {
                <article
                    class="card"
                    class:disagree=is_disagree
                    data-testid="worker-card"
                    data-worker=worker
                    data-dp-rank=dp.to_string()
                    data-completeness=completeness_key
                    aria-label=title_label
                >
                    <header>
                        <h3>{title}</h3>
                        <span class="status">{status}</span>
                    </header>
                    {short.map(|t| view! { <p class="badge incomplete" data-testid="completeness">{t}</p> })}
                    {disagree.map(|d| view! { <p class="badge" data-testid="disagree">{d}</p> })}
                    {fatal_line("a", &pa, fatal_a)}
                    {fatal_line("b", &pb, fatal_b)}
                    {crate::views::router::card_row(m, index)}
                    <table class="tiers">
                        <caption>{format!("Blocks held per tier (trees built by policy {})", tree_policy)}</caption>
                        <tr>
                            {tier_counts
                                .iter()
                                .map(|(t, _)| view! { <th scope="col">{t.label()}</th> })
                                .collect_view()}
                        </tr>
                        <tr>
                            {tier_counts
                                .into_iter()
                                .map(|(t, n)| {
                                    view! {
                                        <td data-testid="tier-count" data-tier=t.label()>
                                            {n.to_string()}
                                        </td>
                                    }
                                })
                                .collect_view()}
                        </tr>
                    </table>
                    <table class="verdicts">
                        <caption>"Events by verdict"</caption>
                        <thead>
                            <tr>
                                <th scope="col">"verdict"</th>
                                <th scope="col"><span class="side side-a">"A"</span>" "{pa.clone()}</th>
                                <th scope="col"><span class="side side-b">"B"</span>" "{pb.clone()}</th>
                            </tr>
                        </thead>
                        <tbody>
                            {rows
                                .into_iter()
                                .map(|r| {
                                    let differs = r.cells[0].0 != r.cells[1].0;
                                    let kind = r.kind.past_tense();
                                    let label = match r.kind {
                                        Outcome::Apply => format!("applied on {}", r.reason),
                                        _ => format!("{kind} {}", r.reason),
                                    };
                                    let cell = |side: &'static str, (n, tiers): (u64, String)| {
                                        let reason = r.reason.as_str();
                                        view! {
                                            <td class:nonzero={n > 0} class:differs=differs>
                                                <span
                                                    data-testid="verdict-count"
                                                    data-policy=side
                                                    data-kind=kind
                                                    data-reason=reason
                                                >
                                                    {n.to_string()}
                                                </span>
                                                {(!tiers.is_empty() && n > 0).then(|| view! { <small>{format!(" on {tiers}")}</small> })}
                                            </td>
                                        }
                                    };
                                    let [ca, cb] = r.cells.clone();
                                    let routine = r.kind == Outcome::Skip && r.reason.is_routine_filter();
                                    view! {
                                        <tr class=format!("row-{kind}") class:routine=routine>
                                            <th scope="row">{label}</th>
                                            {cell("a", ca)}
                                            {cell("b", cb)}
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                    <footer>
                        <span data-testid="frames">{format!("{} frames", thousands(frames))}</span>
                        <span>{format!("{} events", thousands(events))}</span>
                        <span>{format!("last seq {}", last_seq.map_or("—".to_owned(), |s| s.to_string()))}</span>
                        <span data-testid="gaps" class:warn={gaps > 0}>{format!("{gaps} gaps")}</span>
                        <span data-testid="restarts" class:warn={restarts > 0}>{format!("{restarts} restarts")}</span>
                        <span data-testid="errors" class:warn={errors > 0} title=last_error.unwrap_or_default()>
                            {format!("{errors} errors")}
                        </span>
                    </footer>
                </article>
            }
            .into_any()
        })
    }
}
