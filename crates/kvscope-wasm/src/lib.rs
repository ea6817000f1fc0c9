//! The kvscope normalizer as a wasm-bindgen package that JavaScript can call.
//!
//! What this crate is not: it adds no rules and no tree logic. It wraps `kvscope-normalize` and
//! `kvscope-tiers` (the same code the server and the Leptos app link) behind a JS-friendly
//! surface: construct with a block size and a policy name, push frames or payloads per source,
//! read verdicts, counters and tree summaries back as plain JS objects. It does no I/O: the
//! caller brings the bytes (from a WebSocket, a capture file, a test).
//!
//! - [`KvScope`] (in [`js`]): the `#[wasm_bindgen]` class.
//! - [`Session`]: the same behaviour in plain Rust, tested natively; [`KvScope`] only converts.
//! - [`model`]: the shapes of the JS objects.
//!
//! The vector table's hosts over [`Session`] and the JS API are test code (`tests/host`,
//! `tests/web.rs`): this package ships no test scaffolding.
//!
//! Build with `wasm-pack build crates/kvscope-wasm`; test in headless Chromium with
//! `wasm-pack test --headless --chrome crates/kvscope-wasm`.

pub mod js;
pub mod model;
mod session;

pub use js::KvScope;
pub use session::{Session, js_verdict, labels, parse_hash, parse_tier, policies, rules};
