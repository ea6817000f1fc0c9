//! The indexer log: the lines an indexer following each policy would print, with its warning
//! budgets applied (three per budget per source, the rest counted), and where it would exit.

use kvscope_engine_protocol::Side;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

/// Lines shown per policy before "show all": the log grows with the page, never scrolls inside it.
const LOG_LINES_SHOWN: usize = 40;

#[component]
pub fn IndexerLog() -> impl IntoView {
    let fleet = use_fleet();
    let column = move |side: Side| {
        let show_all = RwSignal::new(false);
        let lines = Memo::new(move |_| (fleet.policy_name(side), fleet.read(Part::Logs, |p| p.logs.lines[side as usize].clone())));
        view! {
            <div class="log-col" data-testid=format!("log-{}", side.as_str())>
                <h3>
                    <span class=format!("side side-{}", side.as_str())>{side.as_str().to_uppercase()}</span>
                    {move || format!(" {} — {} lines", lines.with(|l| l.0.clone()), lines.with(|l| l.1.len()))}
                </h3>
                // Bounded by design (the first lines, then "show all"), whatever the fleet's
                // size: the page tests read the bound from here.
                <ol class="log-lines" data-bounded=LOG_LINES_SHOWN.to_string()>
                    {move || {
                        lines.with(|(_, ls)| {
                            if ls.is_empty() {
                                return view! { <li class="quiet">"(nothing: this indexer would print no warning)"</li> }.into_any();
                            }
                            let shown = if show_all.get() { ls.len() } else { ls.len().min(LOG_LINES_SHOWN) };
                            ls.iter()
                                .take(shown)
                                .map(|l| {
                                    let text = if l.fatal {
                                        format!("{}  ← the indexer exits here", l.text)
                                    } else if l.after_exit {
                                        format!("{}  (never printed: the indexer had exited)", l.text)
                                    } else {
                                        l.text.clone()
                                    };
                                    view! {
                                        <li class:fatal=l.fatal class:after-exit=l.after_exit class:summary=l.summary>
                                            <code>{text}</code>
                                        </li>
                                    }
                                })
                                .collect_view()
                                .into_any()
                        })
                    }}
                </ol>
                {move || {
                    let n = lines.with(|l| l.1.len());
                    (n > LOG_LINES_SHOWN).then(|| view! {
                        <button class="link" on:click=move |_| show_all.update(|v| *v = !*v)>
                            {move || if show_all.get() { format!("show the first {LOG_LINES_SHOWN} lines") } else { format!("show all {n} lines") }}
                        </button>
                    })
                }}
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
