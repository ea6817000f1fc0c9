//! The fleet overview: a dense, virtualized table of every engine source, the odd ones first
//! (the engine sorts them). Only the rows in the viewport are in the DOM, so 512 sources cost
//! what the twenty in view cost. Clicking a row opens that source: its card, its timeline lane
//! and its tier trees.

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::overview::{self, Anomaly, RelayCells, Row, Tally};
use leptos::prelude::*;

use crate::contexts::{Part, use_fleet};
use crate::views::thousands;
use crate::views::virtual_list::VirtualList;

const ROW_PX: f64 = 26.0;
const MAX_HEIGHT_PX: f64 = 26.0 * 16.0;

/// One policy's four verdict columns (fatal, skip, filter, applied), with the cards'
/// `verdict-count` hooks; each cell follows its row.
fn tally_cells(row: Memo<Option<Row>>, side: Side) -> impl IntoView {
    let tally = move |side: Side| row.with(|r| r.as_ref().map(|r| r.tally[side as usize]).unwrap_or_default());
    let other = if side == Side::A { Side::B } else { Side::A };
    let cell = move |kind: &'static str, reason: &'static str, pick: fn(Tally) -> u64, class: &'static str| {
        let n = move || pick(tally(side));
        let m = move || pick(tally(other));
        view! {
            <span class=format!("ov-num {class}") class:nonzero=move || { n() > 0 } class:differs=move || { n() != m() }>
                <span data-testid="verdict-count" data-policy=side.as_str() data-kind=kind data-reason=reason>
                    {move || thousands(n())}
                </span>
            </span>
        }
    };
    view! {
        {cell("fatal", "any", |t| t.fatal, "ov-fatal")}
        {cell("skipped", "not_routine", |t| t.skipped, "ov-skip")}
        {cell("skipped", "routine", |t| t.filtered, "ov-filter")}
        {cell("applied", "any", |t| t.applied, "ov-apply")}
    }
}

/// A figure of a row: `fmt` of `pick`, flagged `warn` when `warn_if_set` and non-zero. One
/// function for every figure cell, so the browser compiles its code once, not once per column
/// (a row of cells each with its own closures was 50-80 ms of compiling at the first update).
fn num_cell(
    row: Memo<Option<Row>>,
    testid: &'static str,
    pick: fn(&Row) -> u64,
    fmt: fn(u64) -> String,
    warn_if_set: bool,
) -> impl IntoView {
    let n = move || row.with(|r| r.as_ref().map_or(0, pick));
    view! { <span class="ov-num" class:warn=move || { warn_if_set && n() > 0 } data-testid=testid>{move || fmt(n())}</span> }
}

/// A row's text cell, flagged `warn` when `warn` says so.
fn text_cell(
    row: Memo<Option<Row>>,
    testid: &'static str,
    class: &'static str,
    pick: fn(&Row) -> String,
    warn: fn(&Row) -> bool,
) -> impl IntoView {
    view! {
        <span class=class class:warn=move || row.with(|r| r.as_ref().is_some_and(warn)) data-testid=testid>
            {move || row.with(|r| r.as_ref().map(pick).unwrap_or_default())}
        </span>
    }
}

fn plain(n: u64) -> String {
    n.to_string()
}

/// A relay count, or "—" for a source the relay side does not cover.
fn relay_count(row: &Row, pick: fn(&RelayCells) -> u64) -> String {
    row.relay.as_ref().map_or("—".to_owned(), |r| thousands(pick(r)))
}

/// "12%", or "—" before the engine cached anything.
fn sees(share: Option<f32>) -> String {
    share.map_or("—".to_owned(), |s| format!("{:.0}%", s * 100.0))
}

/// One row of the overview, bound field by field: a summary that changed a figure changes that
/// text node, not the row (rebuilding every row in view at every summary was the page's largest
/// cost at 64 sources, 15-70 ms a summary).
fn row_view(row: Memo<Option<Row>>) -> impl IntoView {
    let fleet = use_fleet();
    let key = Memo::new(move |_| row.with(|r| r.as_ref().map(|r| r.key.clone()).unwrap_or_default()));
    let open = Memo::new(move |_| key.with(|k| fleet.settings.with(|s| s.open.contains(k))));
    let anomalies = Memo::new(move |_| row.with(|r| r.as_ref().map(|r| r.anomalies.clone()).unwrap_or_default()));
    let toggle = move |_| {
        let k = key.get_untracked();
        fleet.settings.update(|s| s.toggle_open(&k));
    };
    let chips = move || {
        anomalies
            .get()
            .into_iter()
            .map(|an| view! { <span class=format!("chip chip-{}", an.key()) data-anomaly=an.key()>{an.as_str()}</span> })
            .collect_view()
    };
    view! {
        <div
            class="ov-row"
            class:open=move || open.get()
            class:odd-one=move || anomalies.with(|a| !a.is_empty())
            data-testid="source-row"
            data-source=move || key.get()
            data-completeness=move || row.with(|r| r.as_ref().map_or("unknown", |r| r.completeness.key()))
        >
            <button
                class="ov-key link"
                on:click=toggle
                aria-pressed=move || open.get().to_string()
                title="open this source's card, lane and trees"
            >
                {move || key.get()}
            </button>
            <span class="ov-chips">{chips}</span>
            {tally_cells(row, Side::A)}
            {tally_cells(row, Side::B)}
            {text_cell(row, "router-sees", "ov-num", |r| sees(r.router_sees[1]), |r| r.router_sees[1].is_some_and(|s| s < 0.5))}
            {num_cell(row, "router-stale", |r| r.router_stale[1], thousands, true)}
            {text_cell(row, "relay-expected", "ov-num", |r| relay_count(r, |c| c.expected), |_| false)}
            {text_cell(row, "relay-received", "ov-num", |r| relay_count(r, |c| c.received), |r| r.anomalies.contains(&Anomaly::RelayDiffers))}
            {text_cell(row, "relay-missing", "ov-num", |r| relay_count(r, |c| c.missing), |r| r.relay.is_some_and(|c| c.missing > 0))}
            {num_cell(row, "gaps", |r| r.gaps, plain, true)}
            {num_cell(row, "lost-frames", |r| r.lost_frames, thousands, true)}
            {num_cell(row, "restarts", |r| r.restarts, plain, true)}
            {num_cell(row, "errors", |r| r.errors, plain, true)}
            {text_cell(row, "rate", "ov-num", |r| format!("{:.0}", r.events_per_second), |_| false)}
            {text_cell(row, "wire", "ov-wire", |r| r.wire.clone(), |r| r.anomalies.contains(&Anomaly::OtherWireLayout))}
            {num_cell(row, "frames", |r| r.frames, plain, false)}
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
    // Row `i` of what the filter shows, for as long as it is in view.
    let render = move |i: usize| row_view(Memo::new(move |_| shown.with(|rows| rows.get(i).cloned())));
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
                <span class="ov-num" title="policy B: share of the engine's cached prefix tokens the router's index can score (Dynamo 1.6.1's index, modelled)">"sees"</span>
                <span class="ov-num" title="policy B: blocks the router's index scores that the engine evicted">"stale"</span>
                <span class="ov-num" title="RouterEvents Dynamo's relay should have published for this source (under the relay policy)"><span class="side side-r">"R"</span>" exp"</span>
                <span class="ov-num" title="RouterEvents the event plane delivered for this source">"recv"</span>
                <span class="ov-num" title="expected RouterEvents that never arrived (a later one passed them)">"miss"</span>
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
                 sees, stale: what the router's index under B can score of the engine's cached prefix, and the \
                 blocks it scores that the engine evicted (the card says why, by cause). \
                 R exp, recv, miss: what Dynamo's relay should have published for the source, what the event plane \
                 delivered, and what never arrived (the card's router row has every count). \
                 wire: how its stores are laid out (tagged arrays up to vLLM 0.23, maps after). \
                 Click a source to open its card, timeline lane and trees."
            </p>
        </section>
    }
}
