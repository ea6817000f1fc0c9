//! The kvscope dashboard: a Leptos app that renders what its engine worker summarises, and asks
//! it for details.
//!
//! What it is: a client-side app (Leptos 0.8, CSR) built by Trunk from the root `Trunk.toml`
//! into `dist/`, which the `kvscope` binary embeds and serves. Everything about the stream runs
//! in the engine (`kvscope-engine`), a Web Worker: the WebSocket, decoding, both normalizers,
//! the tier trees, retention. The page's main thread only lays out the engine's summaries (a
//! few parts an animation frame) and sends what a person asks for (a selection, a hover, a
//! download, a capture to open) as `kvscope-engine-protocol` messages.
//!
//! What it is not: a place for classification logic (the core crates), for anything computed
//! from the stream (the engine), or for protocol types.
//!
//! Layout (STYLE.md, "The Leptos app" and "Engine in a worker"):
//! - [`link`]: starts the engine worker and carries messages both ways.
//! - [`contexts`]: `provide_fleet()`/`use_fleet()`; the engine's parts, one generation counter
//!   each; the page's own state; the requests.
//! - [`views`]: one component per file.
//! - [`url`] and [`download`]: the effects at the edges (query string, files saved).

pub mod contexts;
pub mod download;
pub mod link;
pub mod url;
pub mod views;

/// Mounts the app on `<body>`.
pub fn start() {
    install_panic_hook();
    leptos::mount::mount_to_body(views::app::App);
}

/// Starts the app in a task of its own: the task that instantiates the page's wasm (3 MB) and
/// the one that mounts the app and starts the engine worker were one, at times over 50 ms.
pub fn start_in_next_task() {
    let Some(window) = web_sys::window() else { return start() };
    let cb = wasm_bindgen::closure::Closure::once_into_js(start);
    if window.set_timeout_with_callback_and_timeout_and_arguments_0(wasm_bindgen::JsCast::unchecked_ref(&cb), 0).is_err() {
        start();
    }
}

/// Prints panics to the browser console (as `console.error`, so the end-to-end tests' console
/// check sees them) instead of wasm's bare "unreachable", and has the page say that it stopped
/// (`window.kvscopeCrashed` in `index.html`, which also catches traps and failed allocations):
/// after a panic the wasm instance is gone, and a page still showing "connected" would lie.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        contexts::crashed(&format!("kvscope panicked: {info}"));
    }));
}
