//! Captures: open a `.kvcap` (file picker or drag and drop, with a progress bar; the engine
//! reads and analyses it), download the page's frames as a capture and its classified events as
//! JSON lines (the engine builds them).

use kvscope_engine_protocol::ExportKind;
use kvscope_engine_protocol::view::CaptureProgress;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::contexts::{Part, use_fleet};

#[component]
pub fn CaptureBar() -> impl IntoView {
    let fleet = use_fleet();
    let dragging = RwSignal::new(false);
    let open = move |file: web_sys::File| fleet.open_capture(file);
    let on_change = move |ev: web_sys::Event| {
        let input: Option<web_sys::HtmlInputElement> = ev.target().and_then(|t| t.dyn_into().ok());
        if let Some(file) = input.as_ref().and_then(|i| i.files()).and_then(|f| f.get(0)) {
            open(file);
        }
    };
    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        if let Some(file) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
            open(file);
        }
    };
    let download_kvcap = move |_| fleet.export(ExportKind::Capture);
    let download_jsonl = move |_| fleet.export(ExportKind::VerdictsJsonl);
    let progress = move || match fleet.read(Part::Bar, |p| p.bar.capture.clone()) {
        CaptureProgress::Idle => view! { <span class="quiet">"or drop a .kvcap file here"</span> }.into_any(),
        CaptureProgress::Running { name, phase, done, total } => view! {
            <span>{format!("{name}: {phase} ")}</span>
            <progress data-testid="capture-progress" max=total.max(1.0).to_string() value=done.to_string()></progress>
            <span>{format!(" {:.0}%", 100.0 * done / total.max(1.0))}</span>
        }
        .into_any(),
        CaptureProgress::Done { name, records, note } => view! {
            <span data-testid="capture-done">
                {format!("{name}: {records} records analysed in the page (no server)")}
                {note.map(|n| format!(". {n}"))}
            </span>
        }
        .into_any(),
        CaptureProgress::Failed { error, .. } => {
            view! { <span class="error" role="alert" data-testid="capture-error">{error}</span> }.into_any()
        }
    };
    view! {
        <section
            class="capture-bar"
            class:dragging=move || dragging.get()
            aria-label="Captures"
            on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
            on:dragleave=move |_| dragging.set(false)
            on:drop=on_drop
        >
            <label class="button" for="capture-file">"Open capture…"</label>
            <input id="capture-file" data-testid="capture-file" type="file" accept=".kvcap" class="visually-hidden" on:change=on_change />
            <span class="capture-status">{progress}</span>
            <button data-testid="download-kvcap" on:click=download_kvcap>"Download .kvcap"</button>
            <button data-testid="download-jsonl" on:click=download_jsonl>"Download verdicts (.jsonl)"</button>
        </section>
    }
}
