//! The page: reads the URL, provides the fleet, starts the engine worker, and lays out the
//! views.

use leptos::prelude::*;

use crate::contexts::{Part, provide_fleet};
use crate::views::capture_bar::CaptureBar;
use crate::views::data_quality::DataQuality;
use crate::views::fleet_bar::FleetBar;
use crate::views::fleet_overview::FleetOverview;
use crate::views::headline::Headline;
use crate::views::indexer_log::IndexerLog;
use crate::views::inspector::Inspector;
use crate::views::retention::Retention;
use crate::views::router::EventPlanes;
use crate::views::rules_help::RulesHelp;
use crate::views::tier_tree::TierTree;
use crate::views::timeline::Timeline;
use crate::views::worker_cards::WorkerCards;

/// The whole dashboard, its engine in a Web Worker connected to the server the page came from.
#[component]
pub fn App() -> impl IntoView {
    let settings = crate::url::read_settings();
    let fleet = provide_fleet(settings);
    url_effects(fleet);
    if let Some(link) = crate::link::WorkerLink::start(fleet) {
        fleet.attach(link);
    }
    view! { <Dashboard /> }
}

/// Keeps the URL in step: settings -> query string, and the engine's selection -> `ev=`.
fn url_effects(fleet: crate::contexts::Fleet) {
    Effect::new(move |_| {
        let s = fleet.settings.get();
        crate::url::write_settings(&s);
    });
    Effect::new(move |_| {
        let event = fleet.read(Part::Selection, |p| p.selection.event.clone());
        if fleet.settings.with_untracked(|s| s.selected != event) {
            fleet.settings.update(|s| s.selected = event);
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
    // The task that starts the app instantiates its wasm and starts the engine worker; even the
    // fleet bar waits for the next (at 512 sources the two together were a 52 ms task).
    let stage = staged_mount(5);
    view! {
        <Show when=move || { stage.get() >= 1 }>
            <FleetBar />
        </Show>
        <main id="main">
            <Show when=move || { stage.get() >= 1 }>
                <CaptureBar />
                <DataQuality />
                <Retention />
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
            </Show>
            <Show when=move || { stage.get() >= 5 }>
                <TierTree />
                <RulesHelp />
            </Show>
        </main>
    }
}
