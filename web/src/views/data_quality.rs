//! The data-quality strip: what the verdicts above cover, fleet-wide, before anything else is
//! read. Each shortfall is one item with its count and unit; "complete" only when there is none.

use kvscope_engine_protocol::completeness::Completeness;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn DataQuality() -> impl IntoView {
    let fleet = use_fleet();
    move || {
        let q = fleet.read(Part::Quality, |p| p.quality.clone());
        let c = &q.completeness;
        let items: Vec<(&'static str, String)> = match c {
            Completeness::Complete => vec![("complete", "complete: no gaps, no lost frames, no decode errors".to_owned())],
            Completeness::Unknown(u) => vec![("unknown", format!("unknown: {u}"))],
            Completeness::Incomplete(s) => s.iter().map(|x| (x.key(), x.to_string())).collect(),
        };
        view! {
            <section
                class="data-quality"
                class:incomplete=!c.is_complete()
                data-testid="data-quality"
                data-completeness=c.key()
                aria-label="What the verdicts cover"
            >
                <strong>"Data: "</strong>
                {items
                    .into_iter()
                    .map(|(key, text)| view! { <span class="dq-item" data-shortfall=key>{text}</span> })
                    .collect_view()}
                {q.span.map(|s| view! { <span class="dq-span" data-testid="time-span">{s}</span> })}
                {q.sources.map(|s| view! { <span class="dq-sources">{s}</span> })}
            </section>
        }
    }
}
