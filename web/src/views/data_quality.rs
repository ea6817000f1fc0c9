//! The data-quality strip: what the verdicts above cover, fleet-wide, before anything else is
//! read. Each shortfall is one item with its count and unit; "complete" only when there is none.

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::completeness::Completeness;
use crate::views::{clock, human_duration_ms};

#[component]
pub fn DataQuality() -> impl IntoView {
    let fleet = use_fleet();
    let state = move || {
        fleet.track();
        fleet.with_model(|m| {
            let span = m.t0_nanos().map(|t0| {
                let (a, b) = m.time_span_ms();
                let from = t0 + (a.max(0.0) * 1e6) as u64;
                format!("covers {} from {}", human_duration_ms(b - a), clock(from))
            });
            (m.fleet_completeness(), m.short_sources(), span)
        })
    };
    move || {
        let (c, short, span) = state();
        let items: Vec<(&'static str, String)> = match &c {
            Completeness::Complete => vec![("complete", "complete: no gaps, no lost frames, no decode errors".to_owned())],
            Completeness::Unknown(u) => vec![("unknown", format!("unknown: {u}"))],
            Completeness::Incomplete(s) => s.iter().map(|x| (x.key(), x.to_string())).collect(),
        };
        let short_line = (!short.is_empty() && short.len() <= 12).then(|| format!("sources affected: {}", short.join(", ")));
        let short_many = (short.len() > 12).then(|| format!("{} sources affected", short.len()));
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
                {span.map(|s| view! { <span class="dq-span" data-testid="time-span">{s}</span> })}
                {short_line.or(short_many).map(|s| view! { <span class="dq-sources">{s}</span> })}
            </section>
        }
    }
}
