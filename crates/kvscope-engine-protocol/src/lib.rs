//! What the kvscope page and its engine worker say to each other.
//!
//! The dashboard runs in two threads, as Perfetto UI runs its trace processor: an engine in a
//! Web Worker (`kvscope-engine`: the WebSocket, decoding, both normalizers, tier trees,
//! retention) and the page on the main thread (`kvscope-web`: Leptos views that render and ask).
//! This crate is all they share:
//!
//! - [`ToEngine`]: what the page asks: what it shows ([`ViewQuery`], its [`Settings`] among it),
//!   a selection, a hover, a download, a capture to open;
//! - [`FromEngine`]: the engine's [`Summary`] of what changed, one struct per part of the page
//!   ([`view`]), display-ready, and the answers;
//! - [`encode`] and [`decode`]: msgpack behind [`ENGINE_PROTOCOL_VERSION`].
//!
//! What it is not: the server's protocol (`kvscope-protocol`), or a place for decisions about
//! the stream. Of the core it uses only `kvscope-normalize`'s typed labels ([`label`]): the page
//! links no decoder, normalizer or tree.

pub mod completeness;
pub mod fmt;
pub mod label;
mod message;
pub mod overview;
pub mod settings;
pub mod severity;
pub mod view;

pub use message::{
    DecodeError, ENGINE_PROTOCOL_VERSION, ENGINE_WORKER_URL, ExportKind, FromEngine, ToEngine, ViewQuery, decode, encode,
    engine_worker_name, engines_of_worker_name,
};
pub use settings::{EventRef, Settings, Side};
pub use severity::Severity;
pub use view::Summary;
