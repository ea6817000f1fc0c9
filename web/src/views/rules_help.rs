//! Help: the rules each selected policy runs, in evaluation order, with the same words
//! `kvscope rules --policy P` prints, read from the same rule items of `kvscope-normalize`.

use kvscope_normalize::{Policy, Rule, RuleSet};
use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::settings::Side;

/// The rules a policy runs, in order; none for a name that is no preset.
pub fn policy_rules(policy: &str) -> Vec<&'static Rule> {
    policy.parse::<Policy>().map(|p| RuleSet::for_policy(&p).rules().map(|(_, r)| r).collect()).unwrap_or_default()
}

#[component]
pub fn RulesHelp() -> impl IntoView {
    let fleet = use_fleet();
    let column = move |side: Side| {
        let name = Memo::new(move |_| {
            fleet.track();
            fleet.with_model(|m| m.policy_name(side).to_owned())
        });
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
                            policy_rules(&name.get())
                                .into_iter()
                                .map(|r| {
                                    view! {
                                        <tr data-testid="rule" data-rule=r.name>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_the_rules_each_preset_runs() {
        for policy in Policy::PRESETS {
            let names: Vec<&str> = policy_rules(policy.name).iter().map(|r| r.name).collect();
            let expected: Vec<&str> = RuleSet::for_policy(policy).rules().map(|(_, r)| r.name).collect();
            assert_eq!(names, expected);
        }
        assert!(policy_rules("strict").is_empty());
    }
}
