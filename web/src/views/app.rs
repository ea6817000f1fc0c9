//! The page: reads the URL, provides the fleet, connects, and lays out the views.

use leptos::prelude::*;

use crate::contexts::provide_fleet;
use crate::views::capture_bar::CaptureBar;
use crate::views::data_quality::DataQuality;
use crate::views::fleet_bar::FleetBar;
use crate::views::fleet_overview::FleetOverview;
use crate::views::headline::Headline;
use crate::views::indexer_log::IndexerLog;
use crate::views::inspector::Inspector;
use crate::views::router::EventPlanes;
use crate::views::rules_help::RulesHelp;
use crate::views::tier_tree::TierTree;
use crate::views::timeline::Timeline;
use crate::views::worker_cards::WorkerCards;

/// The whole dashboard, connected to the server the page came from.
#[component]
pub fn App() -> impl IntoView {
    let settings = crate::url::read_settings();
    let fleet = provide_fleet(settings);
    // Effect at the edge: settings -> URL.
    Effect::new(move |_| {
        let s = fleet.settings.get();
        crate::url::write_settings(&s);
    });
    // A selection in the URL is resolved once the event has arrived.
    Effect::new(move |_| {
        fleet.track();
        if fleet.selected.get_untracked().is_none()
            && let Some(r) = fleet.settings.with_untracked(|s| s.selected.clone())
            && let Some(id) = fleet.with_model(|m| m.find_event(&r))
        {
            fleet.selected.set(Some(id));
        }
    });
    fleet.connect();
    view! { <Dashboard /> }
}

/// Opens the event an operator looks at first, once, when nothing is selected: where a policy's
/// indexer exits, else the first event the policies decide differently.
fn open_first_finding(fleet: crate::contexts::Fleet) {
    let opened = StoredValue::new(false);
    Effect::new(move |_| {
        fleet.track();
        if opened.get_value() || fleet.selected.get_untracked().is_some() || fleet.settings.with_untracked(|s| s.selected.is_some()) {
            return;
        }
        let first = fleet.with_model(|m| {
            m.indexer_exit(crate::model::settings::Side::A)
                .or(m.indexer_exit(crate::model::settings::Side::B))
                .map(|e| e.event_id)
                .or_else(|| m.differences().iter().map(|d| d.2.first_event).min())
        });
        if let Some(id) = first {
            opened.set_value(true);
            fleet.select(Some(id));
        }
    });
}

/// How many later stages of the page are mounted: each in a task of its own, after the browser
/// painted the one before. Building every view in the task that starts the app was the page's
/// longest main-thread task at start-up (90 ms on the 3-worker demo, up to 230 ms at 64).
fn staged_mount(stages: u8) -> ReadSignal<u8> {
    let (stage, set_stage) = signal(0u8);
    fn next(set_stage: WriteSignal<u8>, stages: u8) {
        request_animation_frame(move || {
            set_timeout(
                move || {
                    let Some(now) = set_stage.try_update(|s| {
                        *s += 1;
                        *s
                    }) else {
                        return;
                    };
                    if now < stages {
                        next(set_stage, stages);
                    }
                },
                std::time::Duration::ZERO,
            )
        });
    }
    next(set_stage, stages);
    stage
}

/// The views, in reading order: the answer first, then the evidence (mounted in stages).
#[component]
pub fn Dashboard() -> impl IntoView {
    open_first_finding(crate::contexts::use_fleet());
    let stage = staged_mount(4);
    view! {
        <FleetBar />
        <main id="main">
            <CaptureBar />
            <Show when=move || { stage.get() >= 1 }>
                <DataQuality />
                <Headline />
            </Show>
            <Show when=move || { stage.get() >= 2 }>
                <FleetOverview />
                <WorkerCards />
                <EventPlanes />
            </Show>
            <Show when=move || { stage.get() >= 3 }>
                <Timeline />
            </Show>
            <Show when=move || { stage.get() >= 4 }>
                <div class="two-col">
                    <Inspector />
                    <IndexerLog />
                </div>
                <TierTree />
                <RulesHelp />
            </Show>
        </main>
    }
}
