//! The fleet bar: connection, sources, events/s, policy A and B, block size, pause on one line;
//! below it, only while there are any, its notes (catching up, intake, lag, recording, pause).

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::view::Tone;
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn FleetBar() -> impl IntoView {
    let fleet = use_fleet();
    let conn_label = move || fleet.read(Part::Bar, |p| p.bar.badge.text.clone());
    let conn_class = move || {
        fleet.read(Part::Bar, |p| match p.bar.badge.tone {
            Tone::Ok => "dot ok",
            Tone::Off => "dot off",
            Tone::Warn => "dot warn",
        })
    };
    let policy_select = move |side: Side| {
        let label = match side {
            Side::A => "Policy A",
            Side::B => "Policy B",
        };
        let id = format!("policy-{}", side.as_str());
        let id_for = id.clone();
        // The preset list changes never; the selected one with the engine's configuration.
        let presets = Memo::new(move |_| fleet.read(Part::Meta, |p| p.meta.presets.clone()));
        let current = Memo::new(move |_| fleet.policy_name(side));
        view! {
            <label class="field" for=id_for>
                <span class=format!("side side-{}", side.as_str())>{label}</span>
                <select
                    id=id
                    data-testid=format!("policy-{}", side.as_str())
                    on:change=move |ev| {
                        let v = event_target_value(&ev);
                        fleet.update_settings(|s| match side {
                            Side::A => s.policy_a = Some(v),
                            Side::B => s.policy_b = Some(v),
                        });
                    }
                >
                    {move || {
                        presets
                            .get()
                            .into_iter()
                            .map(|n| {
                                let (value, name) = (n.clone(), n.clone());
                                view! { <option value=value selected=move || current.with(|c| *c == n)>{name}</option> }
                            })
                            .collect_view()
                    }}
                </select>
            </label>
        }
    };
    let block_size = move || fleet.read(Part::Meta, |p| p.meta.block_size);
    let defaults_note = move || fleet.read(Part::Meta, |p| p.meta.defaults_note.clone());
    view! {
        <header class="fleet-bar" role="banner">
            <div class="bar-line">
                <h1>"kvscope"</h1>
                <span class="conn" data-testid="conn-state" aria-live="polite">
                    <span class=conn_class aria-hidden="true"></span>
                    {conn_label}
                </span>
                <span class="origin" data-testid="origin">{move || fleet.read(Part::Bar, |p| p.bar.origin.clone())}</span>
                <span class="stat" data-testid="sources">{move || fleet.read(Part::Bar, |p| p.bar.sources.clone())}</span>
                <span class="stat" data-testid="rate">{move || fleet.read(Part::Bar, |p| p.bar.rate.clone())}</span>
                {policy_select(Side::A)}
                {policy_select(Side::B)}
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
                    on:click=move |_| fleet.paused.update(|p| *p = !*p)
                >
                    {move || if fleet.paused.get() { "Resume" } else { "Pause" }}
                </button>
            </div>
            // Notes wrap on a line of their own, only when there is one: cut off at the bar's
            // edge, a warning would say nothing.
            <div class="bar-notes">
                <span
                    class="error"
                    role="alert"
                    data-testid="config-error"
                    hidden=move || fleet.read(Part::Meta, |p| p.meta.config_error.is_empty())
                >
                    {move || fleet.read(Part::Meta, |p| p.meta.config_error.clone())}
                </span>
                {move || {
                    fleet.read(Part::Bar, |p| p.bar.catching_up).map(|(done, total)| {
                        view! {
                            <span class="stat catching-up" data-testid="catching-up" data-done=done.to_string() data-total=total.to_string()>
                                {format!(
                                    "catching up: {} of {} frames of the server's history",
                                    super::thousands(done),
                                    super::thousands(total)
                                )}
                            </span>
                        }
                    })
                }}
                {move || {
                    fleet.read(Part::Bar, |p| p.bar.intake.clone()).map(|line| {
                        let dropped = line.dropped_messages > 0;
                        view! {
                            <span
                                class="stat intake"
                                class:lagged=dropped
                                data-testid="intake"
                                data-queued-bytes=line.queued_bytes.to_string()
                                data-dropped=line.dropped_messages.to_string()
                            >
                                {line.text}
                            </span>
                        }
                    })
                }}
                <span class="stat pace" data-testid="pace" hidden=move || fleet.read(Part::Bar, |p| p.bar.pace.is_none())>
                    {move || fleet.read(Part::Bar, |p| p.bar.pace.clone()).unwrap_or_default()}
                </span>
                <span class="lagged" data-testid="lagged" hidden=move || fleet.read(Part::Bar, |p| p.bar.lagged.is_none())>
                    {move || fleet.read(Part::Bar, |p| p.bar.lagged.clone()).unwrap_or_default()}
                </span>
                <span
                    data-testid="recording"
                    class:lagged=move || fleet.read(Part::Bar, |p| p.bar.recording.as_ref().is_some_and(|r| r.1))
                    hidden=move || fleet.read(Part::Bar, |p| p.bar.recording.is_none())
                >
                    {move || fleet.read(Part::Bar, |p| p.bar.recording.as_ref().map(|r| r.0.clone())).unwrap_or_default()}
                </span>
                <span
                    data-testid="discovery"
                    class:lagged=move || fleet.read(Part::Bar, |p| p.bar.discovery.as_ref().is_some_and(|d| d.1))
                    hidden=move || fleet.read(Part::Bar, |p| p.bar.discovery.is_none())
                >
                    {move || fleet.read(Part::Bar, |p| p.bar.discovery.as_ref().map(|d| d.0.clone())).unwrap_or_default()}
                </span>
                <span class="paused-note" hidden=move || !fleet.paused.get()>
                    "paused: still receiving, views frozen"
                </span>
            </div>
        </header>
    }
}
