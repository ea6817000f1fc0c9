//! The kvscope dashboard: a Leptos app that decodes and classifies every frame in the browser.
//!
//! What it is: a client-side app (Leptos 0.8, CSR) built by Trunk from the root `Trunk.toml`
//! into `dist/`, which the `kvscope` binary embeds and serves. The server only relays raw frames
//! over `/ws`; this app decodes them with `kvscope-wire`, classifies every event under two
//! policies with `kvscope-normalize`, and builds tier trees with `kvscope-tiers`: the same
//! crates the server runs natively for `kvscope check`. It also opens `.kvcap` captures with no
//! server at all.
//!
//! What it is not: a place for classification logic (that lives in the core crates) or for
//! protocol types (`kvscope-protocol`).
//!
//! Layout (STYLE.md, "The Leptos app"):
//! - [`conn`]: the only file touching `web_sys::WebSocket`; capped backoff.
//! - [`model`]: plain Rust, tested natively; applies protocol messages and capture records.
//! - [`contexts`]: `provide_fleet()`/`use_fleet()`; generation counters announce changes.
//! - [`views`]: one component per file.
//! - [`url`], [`capture`] and [`history`]: the effects at the edges (query string, files, the
//!   server's history of raw bytes).

pub mod capture;
pub mod conn;
pub mod contexts;
pub mod history;
pub mod model;
pub mod url;
pub mod views;

/// Mounts the app on `<body>`.
pub fn start() {
    install_panic_hook();
    leptos::mount::mount_to_body(views::app::App);
}

/// Prints panics to the browser console (as `console.error`, so the end-to-end tests' console
/// check sees them) instead of wasm's bare "unreachable", and has the page say that it stopped
/// (`window.kvscopeCrashed` in `index.html`, which also catches traps and failed allocations):
/// after a panic the wasm instance is gone, and a page still showing "connected" would lie.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let text = format!("kvscope panicked: {info}");
        web_sys::console::error_1(&text.clone().into());
        if let Some(window) = web_sys::window()
            && let Ok(crashed) = js_sys::Reflect::get(&window, &"kvscopeCrashed".into())
            && let Some(crashed) = wasm_bindgen::JsCast::dyn_ref::<js_sys::Function>(&crashed)
        {
            let _ = crashed.call1(&wasm_bindgen::JsValue::NULL, &text.into());
        }
    }));
}
