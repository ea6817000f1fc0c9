//! The router's side on the page: per engine source, what Dynamo's relay should have published
//! and what the event plane delivered (a row on the worker card); the event-plane sources with
//! their publishers and unknown workers; and the headline's lines about the relay. The counts
//! are `kvscope-router`'s, the same `kvscope check --json` prints as `"router"`.

use leptos::prelude::*;

use crate::contexts::use_fleet;
use crate::model::Model;
use crate::views::thousands;

/// The relay's drops and the reconciliation's differences, fleet-wide, as headline sentences:
/// "dynamo-1.6.1's relay dropped 129 events of 3:0 (unknown_medium): 129 stores skipped: medium
/// names no tier". Empty when there is no event plane.
pub fn headline_lines(m: &Model) -> Vec<String> {
    let Some(router) = m.router() else { return Vec::new() };
    let report = router.report();
    let policy = router.policy.name;
    let mut out = Vec::new();
    let mut routine = 0;
    for s in &report.sources {
        for (label, n) in &s.router.dropped_by_policy {
            // Routine filtering (non-main attention groups, unknown events) is what every relay
            // does; it is summed once below, not listed per source.
            if label.is_routine_filter() {
                routine += n;
                continue;
            }
            out.push(format!(
                "{policy}'s relay dropped {} events of {} ({label}): the router never indexes them. {}",
                thousands(*n),
                s.source,
                label.summary(*n)
            ));
        }
        let c = &s.router;
        if c.missing + c.unexpected + c.mismatched > 0 {
            out.push(format!(
                "the router's view of {} differs from what its relay should have published: {} missing, {} unexpected, {} mismatched",
                s.source,
                thousands(c.missing),
                thousands(c.unexpected),
                thousands(c.mismatched)
            ));
        }
    }
    if routine > 0 {
        out.push(format!(
            "and {} events dropped by the relays as routine filtering (non-main attention groups and kinds)",
            thousands(routine)
        ));
    }
    for u in &report.unknown_workers {
        out.push(format!(
            "{} RouterEvents name worker {} at dp rank {}, which no --workers source is",
            thousands(u.events),
            u.worker_id,
            u.dp_rank
        ));
    }
    out
}

/// The card's router row: the reconciliation counts of one engine source.
pub fn card_row(m: &Model, index: u32) -> Option<AnyView> {
    let router = m.router()?;
    let report = router.report();
    let Some(s) = router.source_report(report, index) else {
        return Some(view! { <p class="router-row quiet" data-testid="router-counts">"router: not matched (the worker id is not a Dynamo worker id in decimal)"</p> }.into_any());
    };
    let c = s.router.clone();
    let cells = [
        ("expected", c.expected),
        ("received", c.received),
        ("matched", c.matched),
        ("missing", c.missing),
        ("unexpected", c.unexpected),
        ("mismatched", c.mismatched),
        ("pending", c.pending_expected),
    ];
    let dropped: Vec<String> = c.dropped_by_policy.iter().map(|(l, n)| format!("{l} {}", thousands(*n))).collect();
    let clean = c.is_clean();
    Some(
        view! {
            <p class="router-row" class:differs=!clean data-testid="router-counts">
                <span class="side side-r">"R"</span>
                {format!(" {}'s relay → router: ", router.policy.name)}
                {cells
                    .into_iter()
                    .map(|(k, n)| view! { <span class="router-count" data-count=k>{format!("{k} {} ", thousands(n))}</span> })
                    .collect_view()}
                {(!dropped.is_empty()).then(|| format!("· dropped by the relay: {}", dropped.join(", ")))}
            </p>
        }
        .into_any(),
    )
}

/// The event-plane sources: what each reads, its state, and the publishers seen on it.
#[component]
pub fn EventPlanes() -> impl IntoView {
    let fleet = use_fleet();
    move || {
        fleet.track();
        fleet.with_model(|m| {
            let planes: Vec<_> = m.sources().iter().filter(|s| s.kind == kvscope_protocol::SourceKind::EventPlane).cloned().collect();
            if planes.is_empty() {
                return ().into_any();
            }
            let report = m.router().map(|r| r.report().clone()).unwrap_or_default();
            let publishers = report
                .publishers
                .iter()
                .map(|p| {
                    format!(
                        "publisher {}: {} messages, {} gaps ({} missed), {} restarts, {} decode errors",
                        p.publisher_id,
                        thousands(p.messages),
                        p.gaps,
                        thousands(p.missed_messages),
                        p.restarts,
                        p.decode_errors
                    )
                })
                .collect::<Vec<_>>();
            view! {
                <section class="event-planes" data-testid="event-planes" aria-label="Dynamo's event plane">
                    <h2>"Event plane (what the router receives)"</h2>
                    <ul>
                        {planes
                            .into_iter()
                            .map(|s| {
                                let url = s.event_plane.as_ref().map_or_else(|| s.endpoint.clone(), |p| p.url.clone());
                                let state = s.status.as_ref().map_or("capture".to_owned(), |st| format!("{:?}", st.state).to_lowercase());
                                view! {
                                    <li data-testid="event-plane" data-source=s.key.clone()>
                                        {format!("{} ({url}): {state}, {} messages, {} errors", s.key, thousands(s.frames), s.frame_errors + s.decode_errors)}
                                        {s.last_error.map(|e| view! { <span class="error">{format!(" · {e}")}</span> })}
                                    </li>
                                }
                            })
                            .collect_view()}
                        {publishers.into_iter().map(|p| view! { <li class="quiet">{p}</li> }).collect_view()}
                    </ul>
                </section>
            }
            .into_any()
        })
    }
}
