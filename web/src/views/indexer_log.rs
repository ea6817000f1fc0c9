//! The indexer log: the lines an indexer following each policy would print, with its warning
//! budgets applied (three per budget per source, the rest counted), and where it would exit.

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::settings::Side;

#[component]
pub fn IndexerLog() -> impl IntoView {
    let fleet = use_fleet();
    let column = move |side: Side| {
        let lines = Memo::new(move |_| {
            fleet.track();
            fleet.with_model(|m| (m.policy_name(side).to_owned(), m.log(side)))
        });
        view! {
            <div class="log-col" data-testid=format!("log-{}", side.as_str())>
                <h3>
                    <span class=format!("side side-{}", side.as_str())>{side.as_str().to_uppercase()}</span>
                    {move || format!(" {} — {} lines", lines.with(|l| l.0.clone()), lines.with(|l| l.1.len()))}
                </h3>
                <ol class="log-lines">
                    {move || {
                        lines.with(|(_, ls)| {
                            if ls.is_empty() {
                                return view! { <li class="quiet">"(nothing: this indexer would print no warning)"</li> }.into_any();
                            }
                            ls.iter()
                                .map(|l| {
                                    let text = if l.fatal {
                                        format!("{}  ← the indexer exits here", l.text)
                                    } else if l.after_exit {
                                        format!("{}  (never printed: the indexer had exited)", l.text)
                                    } else {
                                        l.text.clone()
                                    };
                                    view! {
                                        <li class:fatal=l.fatal class:after-exit=l.after_exit class:summary={l.seq == u64::MAX}>
                                            <code>{text}</code>
                                        </li>
                                    }
                                })
                                .collect_view()
                                .into_any()
                        })
                    }}
                </ol>
            </div>
        }
    };
    view! {
        <section class="indexer-log" aria-labelledby="log-title">
            <h2 id="log-title">"Indexer log"</h2>
            <p class="legend-note">"What the pods' logs would say: first 3 warnings per budget and source, then counted."</p>
            <div class="log-cols">
                {column(Side::A)}
                {column(Side::B)}
            </div>
        </section>
    }
}
