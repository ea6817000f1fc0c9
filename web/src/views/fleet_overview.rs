//! The fleet overview: a dense, virtualized table of every engine source, the odd ones first
//! (the engine sorts them). Only the rows in the viewport are in the DOM, so 512 sources cost
//! what the twenty in view cost. Clicking a row opens that source: its card, its timeline lane
//! and its tier trees.

use kvscope_engine_protocol::overview::{self, Anomaly, Row, Tally};
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::thousands;
use crate::views::virtual_list::VirtualList;

const ROW_PX: f64 = 26.0;
const MAX_HEIGHT_PX: f64 = 26.0 * 16.0;

/// One policy's four verdict columns (fatal, skip, filter, applied), with the cards'
/// `verdict-count` hooks.
fn tally_cells(side: &'static str, t: Tally, other: Tally) -> impl IntoView {
    let cell = move |kind: &'static str, reason: &'static str, n: u64, m: u64, class: &'static str| {
        view! {
            <span class=format!("ov-num {class}") class:nonzero={n > 0} class:differs={n != m}>
                <span data-testid="verdict-count" data-policy=side data-kind=kind data-reason=reason>
                    {thousands(n)}
                </span>
            </span>
        }
    };
    view! {
        {cell("fatal", "any", t.fatal, other.fatal, "ov-fatal")}
        {cell("skipped", "not_routine", t.skipped, other.skipped, "ov-skip")}
        {cell("skipped", "routine", t.filtered, other.filtered, "ov-filter")}
        {cell("applied", "any", t.applied, other.applied, "ov-apply")}
    }
}

fn row_view(r: Row, open: bool) -> impl IntoView {
    let fleet = use_fleet();
    let key = r.key.clone();
    let toggle = move |_| {
        let key = key.clone();
        fleet.settings.update(|s| s.toggle_open(&key));
    };
    let [a, b] = r.tally;
    let chips = r
        .anomalies
        .iter()
        .map(|an| view! { <span class=format!("chip chip-{}", an.key()) data-anomaly=an.key()>{an.as_str()}</span> })
        .collect_view();
    view! {
        <div
            class="ov-row"
            class:open=open
            class:odd-one={!r.anomalies.is_empty()}
            data-testid="source-row"
            data-source=r.key.clone()
            data-completeness=r.completeness.key()
        >
            <button class="ov-key link" on:click=toggle aria-pressed=open.to_string() title="open this source's card, lane and trees">
                {r.key.clone()}
            </button>
            <span class="ov-chips">{chips}</span>
            {tally_cells("a", a, b)}
            {tally_cells("b", b, a)}
            <span class="ov-num" class:warn={r.gaps > 0} data-testid="gaps">{r.gaps.to_string()}</span>
            <span class="ov-num" class:warn={r.lost_frames > 0} data-testid="lost-frames">{thousands(r.lost_frames)}</span>
            <span class="ov-num" class:warn={r.restarts > 0} data-testid="restarts">{r.restarts.to_string()}</span>
            <span class="ov-num" class:warn={r.errors > 0} data-testid="errors">{r.errors.to_string()}</span>
            <span class="ov-num" data-testid="rate">{format!("{:.0}", r.events_per_second)}</span>
            <span class="ov-wire" class:warn={r.anomalies.contains(&Anomaly::OtherWireLayout)} data-testid="wire">
                {r.wire.clone()}
            </span>
            <span class="ov-num" data-testid="frames">{r.frames.to_string()}</span>
        </div>
    }
}

#[component]
pub fn FleetOverview() -> impl IntoView {
    let fleet = use_fleet();
    // The rows as the engine last sent them (a memo: one clone per summary that changed them).
    let rows = Memo::new(move |_| fleet.read(Part::Overview, |p| p.overview.rows.clone()));
    let filter = move || fleet.settings.with(|s| s.worker_filter.clone());
    let shown = Memo::new(move |_| {
        let f = filter();
        rows.with(|rows| rows.iter().filter(|r| r.matches(&f)).cloned().collect::<Vec<_>>())
    });
    let totals = move || {
        rows.with(|rows| {
            let frames: u64 = rows.iter().map(|r| r.frames).sum();
            let events: u64 = rows.iter().map(|r| r.events).sum();
            (rows.len(), frames, events)
        })
    };
    let heading = move || {
        rows.with(|rows| {
            let counts = overview::anomaly_counts(rows);
            if counts.is_empty() {
                return "no source stands out".to_owned();
            }
            let parts: Vec<String> = counts.iter().map(|(a, n)| format!("{} ({})", a.as_str(), thousands(*n as u64))).collect();
            format!("what stands out, in sources: {}", parts.join(" · "))
        })
    };
    let count = Signal::derive(move || shown.with(Vec::len));
    // Plus the list's 1 px borders (box-sizing: border-box), so a short fleet shows no scrollbar.
    let height = Signal::derive(move || (count.get() as f64 * ROW_PX).clamp(ROW_PX, MAX_HEIGHT_PX) + 2.0);
    let render = move |i: usize| {
        let open_keys = fleet.settings.with(|s| s.open.clone());
        shown.with(|rows| rows.get(i).cloned()).map(|r| {
            let open = open_keys.contains(&r.key);
            row_view(r, open)
        })
    };
    view! {
        <section class="overview-section" aria-labelledby="overview-title">
            <div class="section-head">
                <h2 id="overview-title">"Fleet"</h2>
                <p class="ov-totals">
                    <span data-testid="fleet-sources">{move || totals().0.to_string()}</span>
                    " sources · "
                    <span data-testid="fleet-frames">{move || totals().1.to_string()}</span>
                    " frames · "
                    <span data-testid="fleet-events">{move || totals().2.to_string()}</span>
                    " events · "
                    <span data-testid="anomaly-summary">{heading}</span>
                </p>
                <label class="field">
                    <span>"Filter"</span>
                    <input
                        type="search"
                        data-testid="source-filter"
                        placeholder="worker id (0:), or fatal, restarted, frames lost…"
                        prop:value=move || fleet.settings.with(|s| s.worker_filter.clone())
                        on:input=move |ev| {
                            let v = event_target_value(&ev);
                            fleet.settings.update(|s| s.worker_filter = v);
                        }
                    />
                </label>
            </div>
            <div class="ov-row ov-head">
                <span>"source"</span>
                <span>"what stands out"</span>
                <span class="ov-num" title="policy A: fatal events"><span class="side side-a">"A"</span>" fatal"</span>
                <span class="ov-num" title="policy A: skips that leave a tier's view incomplete">"skip"</span>
                <span class="ov-num" title="policy A: routine filtering">"filter"</span>
                <span class="ov-num" title="policy A: events applied">"applied"</span>
                <span class="ov-num" title="policy B: fatal events"><span class="side side-b">"B"</span>" fatal"</span>
                <span class="ov-num" title="policy B: skips that leave a tier's view incomplete">"skip"</span>
                <span class="ov-num" title="policy B: routine filtering">"filter"</span>
                <span class="ov-num" title="policy B: events applied">"applied"</span>
                <span class="ov-num" title="seq gaps">"gaps"</span>
                <span class="ov-num" title="frames lost: in gaps replay did not fill, or to lag">"lost"</span>
                <span class="ov-num" title="engine restarts (seq went back)">"restart"</span>
                <span class="ov-num" title="payloads that did not decode">"errors"</span>
                <span class="ov-num">"ev/s"</span>
                <span class="ov-wire">"wire"</span>
                <span class="ov-num">"frames"</span>
            </div>
            <VirtualList rows=count row_px=ROW_PX height_px=height render=render label="sources".to_owned() />
            <p class="legend-note">
                "One row per (worker, dp rank), workers with something odd first. skip: skips that leave a tier's view \
                 incomplete (offload stores at another block size, unknown media); filter: routine filtering \
                 (non-main attention groups, unknown events). Counts where A and B differ are underlined. \
                 wire: how its events are laid out (tagged arrays up to vLLM 0.23, maps after). \
                 Click a source to open its card, timeline lane and trees."
            </p>
        </section>
    }
}
