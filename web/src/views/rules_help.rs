//! Help: the rules each selected policy runs, in evaluation order, with the same words
//! `kvscope rules --policy P` prints, read from the same rule items of `kvscope-normalize` (the
//! engine sends them with the policies).

use kvscope_engine_protocol::Side;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn RulesHelp() -> impl IntoView {
    let fleet = use_fleet();
    let column = move |side: Side| {
        let name = Memo::new(move |_| fleet.policy_name(side));
        let rules = Memo::new(move |_| fleet.read(Part::Meta, |p| p.meta.rules[side as usize].clone()));
        view! {
            <div class="rules-col" data-testid=format!("rules-{}", side.as_str())>
                <h3>
                    <span class=format!("side side-{}", side.as_str())>{side.as_str().to_uppercase()}</span>
                    {move || format!(" {}", name.get())}
                </h3>
                <table class="rules">
                    <thead>
                        <tr>
                            <th scope="col">"step"</th>
                            <th scope="col">"rule"</th>
                            <th scope="col">"checks"</th>
                            <th scope="col">"decides"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {move || {
                            rules
                                .get()
                                .into_iter()
                                .map(|r| {
                                    let rule = r.name.clone();
                                    view! {
                                        <tr data-testid="rule" data-rule=rule>
                                            <td>{r.step}</td>
                                            <th scope="row"><code>{r.name}</code></th>
                                            <td>{r.checks}</td>
                                            <td>{r.decides}</td>
                                        </tr>
                                    }
                                })
                                .collect_view()
                        }}
                    </tbody>
                </table>
            </div>
        }
    };
    view! {
        <details class="rules-help" data-testid="rules-help">
            <summary><h2>"Rules"</h2></summary>
            <p class="legend-note">
                "What each policy's normalizer checks, in order; the first rule that decides gives the event its verdict. \
                 The same list as kvscope rules --policy NAME."
            </p>
            <div class="rules-cols">
                {column(Side::A)}
                {column(Side::B)}
            </div>
        </details>
    }
}
