//! The answer, first: for each policy, does an indexer following it stop, where, and why; and
//! what it skips. Written as sentences an operator reads aloud on an incident call.

use std::collections::BTreeMap;

use kvscope_normalize::Outcome;
use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::Model;
use crate::model::classes::{Reason, TierShown};
use crate::model::settings::Side;
use crate::views::thousands;

/// One policy's verdict over the fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySummary {
    pub side: Side,
    pub policy: String,
    pub workers: usize,
    pub fatal_workers: Vec<String>,
    /// (reason, tiers, count) of fatal verdicts.
    pub fatal: Vec<(String, String, u64)>,
    /// The first fatal: source key, seq and sentence.
    pub first_fatal: Option<(String, u64, String)>,
    /// (reason, tiers, count) of skips that are not routine filtering.
    pub notable_skips: Vec<(String, String, u64)>,
    pub filtered: u64,
    pub applied: u64,
}

fn tiers_text(tiers: &BTreeMap<TierShown, u64>) -> String {
    tiers.keys().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Sums one policy's verdicts over every source.
pub fn summarize(m: &Model, side: Side) -> PolicySummary {
    let classes = m.classes();
    let mut fatal: BTreeMap<Reason, (BTreeMap<TierShown, u64>, u64)> = BTreeMap::new();
    let mut skips: BTreeMap<Reason, (BTreeMap<TierShown, u64>, u64)> = BTreeMap::new();
    let mut s = PolicySummary {
        side,
        policy: m.policy_name(side).to_owned(),
        workers: m.sources().len(),
        fatal_workers: Vec::new(),
        fatal: Vec::new(),
        first_fatal: None,
        notable_skips: Vec::new(),
        filtered: 0,
        applied: 0,
    };
    for src in m.sources() {
        let counts = src.counts(side);
        for ((kind, reason), (n, tiers)) in counts.rows(classes) {
            match kind {
                Outcome::Fatal => {
                    let e = fatal.entry(reason).or_default();
                    e.1 += n;
                    for (t, k) in tiers {
                        *e.0.entry(t).or_default() += k;
                    }
                }
                Outcome::Skip => {
                    if reason.is_routine_filter() {
                        s.filtered += n;
                    } else {
                        let e = skips.entry(reason).or_default();
                        e.1 += n;
                        for (t, k) in tiers {
                            *e.0.entry(t).or_default() += k;
                        }
                    }
                }
                Outcome::Apply => s.applied += n,
            }
        }
        if let Some((seq, text)) = &counts.first_fatal {
            s.fatal_workers.push(src.key.clone());
            if s.first_fatal.is_none() {
                s.first_fatal = Some((src.key.clone(), *seq, text.clone()));
            }
        }
    }
    s.fatal = fatal.into_iter().map(|(r, (t, n))| (r.to_string(), tiers_text(&t), n)).collect();
    s.notable_skips = skips.into_iter().map(|(r, (t, n))| (r.to_string(), tiers_text(&t), n)).collect();
    s
}

impl PolicySummary {
    /// "legacy: the indexer STOPS on 3 of 3 workers" / "fixed: no fatal verdicts".
    pub fn verdict_line(&self) -> String {
        if self.fatal_workers.is_empty() {
            format!("{}: no fatal verdict; an indexer following it keeps running", self.policy)
        } else {
            format!(
                "{}: the indexer STOPS on {} of {} workers ({})",
                self.policy,
                self.fatal_workers.len(),
                self.workers,
                self.fatal_workers.join(", ")
            )
        }
    }

    /// The detail lines under the verdict.
    pub fn detail_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (reason, tiers, n) in &self.fatal {
            out.push(format!("{} events fatal {reason} on {tiers}", thousands(*n)));
        }
        if let Some((key, seq, text)) = &self.first_fatal {
            out.push(format!("first at {key} seq {seq}: {text}"));
        }
        for (reason, tiers, n) in &self.notable_skips {
            out.push(format!("{} events skipped as {reason} on {tiers}", thousands(*n)));
        }
        out.push(format!(
            "{} applied, {} filtered as non-main groups or unknown events",
            thousands(self.applied),
            thousands(self.filtered)
        ));
        out
    }
}

#[component]
pub fn Headline() -> impl IntoView {
    let fleet = use_fleet();
    let summaries = move || {
        fleet.track();
        fleet.with_model(|m| [summarize(m, Side::A), summarize(m, Side::B)])
    };
    let differences = move || {
        fleet.track();
        fleet.with_model(|m| {
            let (pa, pb) = (m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned());
            m.differences()
                .into_iter()
                .take(6)
                .map(|(a, b, n)| {
                    let d = |c: Option<&crate::model::classes::Class>| c.map_or("no verdict".to_owned(), |c| c.describe());
                    (thousands(n), format!("{pa}: {}", d(a)), format!("{pb}: {}", d(b)))
                })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <section class="headline" aria-labelledby="headline-title" data-testid="headline">
            <h2 id="headline-title" class="visually-hidden">"What each policy does to the indexer"</h2>
            <div class="differences" data-testid="differences">
                {move || {
                    let rows = differences();
                    if rows.is_empty() {
                        return view! { <p class="quiet">"Policies A and B decide every event the same way."</p> }.into_any();
                    }
                    view! {
                        <p><strong>"Where the two policies disagree"</strong>" (events, same event under each):"</p>
                        <ul>
                            {rows
                                .into_iter()
                                .map(|(n, a, b)| view! {
                                    <li>
                                        <span class="n">{n}</span>" events: "
                                        <span class="side side-a">"A"</span>" "{a}" → "
                                        <span class="side side-b">"B"</span>" "{b}
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
                        let bad = !s.fatal_workers.is_empty();
                        let open_first = move |_| {
                            let id = fleet.with_model(|m| m.next_marked(side, None, 4));
                            fleet.select(id);
                            crate::views::inspector::scroll_to_inspector();
                        };
                        view! {
                            <div
                                class="policy-summary"
                                class:bad=bad
                                class:good=!bad
                                data-testid=format!("summary-{}", side.as_str())
                            >
                                <p class="verdict-line">
                                    <span class=format!("side side-{}", side.as_str())>
                                        {format!("Policy {}", side.as_str().to_uppercase())}
                                    </span>
                                    " "
                                    <strong>{s.verdict_line()}</strong>
                                </p>
                                <ul>
                                    {s.detail_lines().into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
                                </ul>
                                {bad.then(|| view! {
                                    <button on:click=open_first>"Open the first fatal event"</button>
                                })}
                            </div>
                        }
                    })
                    .collect_view()
            }}
        </section>
    }
}
