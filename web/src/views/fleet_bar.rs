//! The fleet bar: connection, sources, events/s, policy A and B, block size, pause, memory.

use leptos::prelude::*;

use crate::contexts::{now_ms, use_fleet};
use crate::model::Origin;
use crate::model::policy_run::policy_names;
use crate::views::{human_bytes, thousands};
use kvscope_protocol as proto;

#[component]
pub fn FleetBar() -> impl IntoView {
    let fleet = use_fleet();
    let conn_label = move || fleet.conn.with(|c| c.label());
    let conn_class = move || {
        fleet.conn.with(|c| match c {
            crate::conn::ConnState::Open => "dot ok",
            crate::conn::ConnState::Off => "dot off",
            _ => "dot warn",
        })
    };
    let origin = move || {
        fleet.track();
        fleet.with_model(|m| match &m.origin {
            Origin::Empty => "waiting for the server's hello".to_owned(),
            Origin::Server { mode, detail, .. } => format!("{mode}: {detail}"),
            Origin::Capture { name, truncated } => match truncated {
                Some(_) => format!("capture {name} (last record cut)"),
                None => format!("capture {name}"),
            },
        })
    };
    let sources = move || {
        fleet.track();
        fleet.with_model(|m| {
            // Workers are the engine sources; event planes are counted apart.
            let total = m.engine_sources().count();
            let planes = m.sources().len() - total;
            let planes = if planes > 0 { format!(" · {planes} event planes") } else { String::new() };
            // Live means analysed here: a socket that is open but whose events this page has not
            // analysed is not live.
            let live = m
                .engine_sources()
                .filter(|s| {
                    s.status.as_ref().is_some_and(|st| st.state == kvscope_protocol::ConnState::Live)
                        && s.counts(crate::model::settings::Side::A).events > 0
                })
                .count();
            if matches!(m.origin, Origin::Server { .. }) {
                format!("{live} of {total} workers live{planes}")
            } else {
                format!("{total} workers{planes}")
            }
        })
    };
    // A capture has a span and a count, not a rate.
    let rate = move || {
        fleet.track();
        fleet.with_model(|m| match m.origin {
            Origin::Capture { .. } => {
                let events: u64 = m.sources().iter().map(|s| s.counts(crate::model::settings::Side::A).events).sum();
                let (a, b) = m.time_span_ms();
                format!("{} events over {}", thousands(events), crate::views::human_duration_ms(b - a))
            }
            _ => format!("{} events/s", thousands(m.events_per_second(now_ms()).round() as u64)),
        })
    };
    let memory = move || {
        fleet.track();
        fleet.with_model(|m| m.memory())
    };
    let names: Vec<&'static str> = policy_names();
    let policy_select = move |side: crate::model::settings::Side| {
        let names = names.clone();
        let current = move || fleet.with_model(|m| m.policy_name(side).to_owned());
        let label = match side {
            crate::model::settings::Side::A => "Policy A",
            crate::model::settings::Side::B => "Policy B",
        };
        let id = format!("policy-{}", side.as_str());
        let id_for = id.clone();
        view! {
            <label class="field" for=id_for>
                <span class=format!("side side-{}", side.as_str())>{label}</span>
                <select
                    id=id
                    data-testid=format!("policy-{}", side.as_str())
                    on:change=move |ev| {
                        let v = event_target_value(&ev);
                        fleet.update_settings(|s| match side {
                            crate::model::settings::Side::A => s.policy_a = Some(v),
                            crate::model::settings::Side::B => s.policy_b = Some(v),
                        });
                    }
                >
                    {names
                        .iter()
                        .map(|n| {
                            let n = *n;
                            view! {
                                <option value=n selected=move || { fleet.track(); current() == n }>{n}</option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
        }
    };
    let block_size = move || {
        fleet.track();
        fleet.with_model(|m| m.config().block_size)
    };
    let defaults_note = move || {
        fleet.track();
        fleet.with_model(|m| m.defaults_note.clone()).unwrap_or_default()
    };
    view! {
        <header class="fleet-bar" role="banner">
            <h1>"kvscope"</h1>
            <span class="conn" data-testid="conn-state" aria-live="polite">
                <span class=conn_class aria-hidden="true"></span>
                {conn_label}
            </span>
            <span class="origin" data-testid="origin">{origin}</span>
            <span class="stat" data-testid="sources">{sources}</span>
            <span class="stat" data-testid="rate">{rate}</span>
            {policy_select(crate::model::settings::Side::A)}
            {policy_select(crate::model::settings::Side::B)}
            <label class="field" for="block-size" title=defaults_note>
                <span>"Block size"</span>
                <input
                    id="block-size"
                    data-testid="block-size"
                    type="number"
                    min="1"
                    step="1"
                    prop:value=move || block_size().to_string()
                    on:change=move |ev| {
                        let v = event_target_value(&ev).trim().parse::<u32>().ok().filter(|&n| n > 0);
                        fleet.update_settings(|s| s.block_size = v);
                    }
                />
                <span class="unit">"tokens"</span>
            </label>
            <button
                data-testid="pause"
                aria-pressed=move || fleet.paused.get().to_string()
                on:click=move |_| {
                    let p = !fleet.paused.get_untracked();
                    fleet.paused.set(p);
                    if !p {
                        fleet.update_model(|m| m.dirty = true);
                        fleet.flush();
                    }
                }
            >
                {move || if fleet.paused.get() { "Resume" } else { "Pause" }}
            </button>
            <span
                class="memory"
                data-testid="memory"
                class:bound=move || { let m = memory(); m.bound_reached || m.event_bound_reached }
                title="Every event's record is kept (for the timeline, the inspector and search), and the raw bytes of the most recent frames (for the hex view, re-classification and download)"
            >
                {move || memory_text(&memory())}
            </span>
            <span class="error" role="alert" data-testid="config-error">
                {move || { fleet.track(); fleet.with_model(|m| m.config_error.clone()).unwrap_or_default() }}
            </span>
            {move || {
                fleet.track();
                fleet.with_model(|m| m.catching_up()).map(|(done, total)| {
                    view! {
                        <span class="stat catching-up" data-testid="catching-up" data-done=done.to_string() data-total=total.to_string()>
                            {format!("catching up: {} of {} frames of the server's history", thousands(done), thousands(total))}
                        </span>
                    }
                })
            }}
            {move || {
                fleet.track();
                let status = fleet.intake_status();
                let dropped = status.dropped_messages > 0;
                intake_text(&status).map(|text| {
                    view! {
                        <span
                            class="stat intake"
                            class:lagged=dropped
                            data-testid="intake"
                            data-queued-bytes=status.queued_bytes.to_string()
                            data-dropped=status.dropped_messages.to_string()
                        >
                            {text}
                        </span>
                    }
                })
            }}
            <span class="lagged" data-testid="lagged" hidden=move || { fleet.track(); fleet.with_model(|m| m.lagged_frames == 0) }>
                {move || {
                    fleet.track();
                    let n = fleet.with_model(|m| m.lagged_frames);
                    format!("this page lost {} frames (it read too slowly); the server's --client-queue-bytes raises the bound", thousands(n))
                }}
            </span>
            <span
                data-testid="recording"
                class:lagged=move || { fleet.track(); fleet.with_model(|m| m.recording.as_ref().is_some_and(|r| r.state == proto::RecordingState::Failed)) }
                hidden=move || { fleet.track(); fleet.with_model(|m| m.recording.is_none()) }
            >
                {move || { fleet.track(); fleet.with_model(|m| m.recording.as_ref().map(proto::RecordingStatus::summary)).unwrap_or_default() }}
            </span>
            <span class="paused-note" hidden=move || !fleet.paused.get()>
                "paused: still receiving, views frozen"
            </span>
        </header>
    }
}

/// Below this much received and not yet applied, the page is not said to be behind.
const BEHIND_BYTES: usize = 4 << 20;

/// The fleet bar's intake line: how far behind the stream the page is, and what the intake
/// bound dropped unread; `None` when it keeps up.
pub fn intake_text(s: &crate::model::intake::IntakeStatus) -> Option<String> {
    let behind = (s.queued_bytes >= BEHIND_BYTES).then(|| {
        format!(
            "behind the stream: {} received, not yet applied ({} messages)",
            human_bytes(s.queued_bytes as f64),
            thousands(s.queued_messages as u64)
        )
    });
    let dropped = (s.dropped_messages > 0).then(|| {
        format!(
            "intake bound of {} reached: {} messages ({}) dropped unread, their frames count as lost (raise with ?intake=MiB)",
            human_bytes(s.bound_bytes as f64),
            thousands(s.dropped_messages),
            human_bytes(s.dropped_bytes as f64)
        )
    });
    match (behind, dropped) {
        (None, None) => None,
        (a, b) => Some([a, b].into_iter().flatten().collect::<Vec<_>>().join(" · ")),
    }
}

/// The fleet bar's memory line: both bounds, and what reaching each dropped.
pub fn memory_text(m: &crate::model::MemoryUse) -> String {
    let mut s = format!(
        "{} of {} events kept ({}) · raw bytes {} of {}",
        thousands(m.retained_events as u64),
        thousands(m.event_bound as u64),
        human_bytes(m.event_bytes as f64),
        human_bytes(m.retained_bytes as f64),
        human_bytes(m.bound_bytes as f64),
    );
    if m.event_bound_reached {
        s.push_str(&format!(" · event bound reached: the {} oldest events are gone (raise with ?events=N)", thousands(m.evicted_events)));
    }
    if m.bound_reached {
        s.push_str(&format!(
            " · raw-bytes bound reached: {} oldest frames' bytes dropped, their events kept (raise with ?mem=MiB)",
            thousands(m.evicted_frames)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intake_line_says_how_far_behind_and_what_its_bound_dropped() {
        let mut s =
            crate::model::intake::IntakeStatus { queued_bytes: 1 << 20, queued_messages: 3, bound_bytes: 256 << 20, ..Default::default() };
        assert_eq!(intake_text(&s), None, "a little queued is keeping up");
        s.queued_bytes = 12 << 20;
        assert_eq!(intake_text(&s).unwrap(), "behind the stream: 12.0 MiB received, not yet applied (3 messages)");
        (s.queued_bytes, s.dropped_messages, s.dropped_bytes) = (0, 1_200, 3 << 20);
        let t = intake_text(&s).unwrap();
        assert!(t.starts_with("intake bound of 256.0 MiB reached: 1,200 messages (3.0 MiB) dropped unread"), "{t}");
        assert!(t.ends_with("(raise with ?intake=MiB)"), "{t}");
    }

    #[test]
    fn the_memory_line_names_each_bound_reached_and_the_setting_that_raises_it() {
        let mut m = crate::model::MemoryUse {
            retained_events: 4_750_000,
            event_bound: 5_000_000,
            event_bytes: 4_750_000 * 66,
            retained_bytes: 1 << 20,
            bound_bytes: 128 << 20,
            ..Default::default()
        };
        let calm = memory_text(&m);
        assert!(calm.starts_with("4,750,000 of 5,000,000 events kept ("), "{calm}");
        assert!(!calm.contains("bound reached"), "{calm}");
        (m.event_bound_reached, m.evicted_events, m.bound_reached, m.evicted_frames) = (true, 250_000, true, 12);
        let full = memory_text(&m);
        assert!(full.contains("event bound reached: the 250,000 oldest events are gone (raise with ?events=N)"), "{full}");
        assert!(
            full.contains("raw-bytes bound reached: 12 oldest frames' bytes dropped, their events kept (raise with ?mem=MiB)"),
            "{full}"
        );
    }
}
