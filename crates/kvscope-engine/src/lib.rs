//! The kvscope dashboard's engine: everything the page knows about the stream, computed off the
//! page's main thread, in a Web Worker (as Perfetto UI runs its trace processor).
//!
//! What it is: the WebSocket to the kvscope server ([`conn`]) and the captures opened in the
//! page ([`capture`]); the [`model`] that decodes every frame with `kvscope-wire`, classifies
//! each event under two policies with `kvscope-normalize`, builds tier trees with
//! `kvscope-tiers`, reconciles the router's side with `kvscope-router` and keeps bounded
//! retention; and [`summarize`], which turns the model into the display-ready summaries of
//! `kvscope-engine-protocol` that the page renders. [`engine::Engine`] holds it together in
//! plain Rust (tested natively); [`host::Host`] is its I/O: the page's messages, the socket's,
//! timers, one summary at a time.
//!
//! What it is not: a place for classification rules (the core crates) or for anything drawn in
//! the DOM (`kvscope-web`). It never touches `window`: in a worker there is none ([`scope`]).
//!
//! Layout:
//! - [`worker`]: the worker's entry (`main.rs` calls [`worker::run`]); [`local`]: the same host
//!   on the page's thread, for the component tests.
//! - [`host`]: messages, the intake queue, the flush and acknowledgement cycle; [`pace`]: how
//!   often summaries go, from what each cost the page.
//! - [`engine`]: the model, the view query, the selection, what was last sent.
//! - [`model`]: the state, applied message by message.
//! - [`summarize`]: one function per part of the page, and the timeline's pixels.
//! - [`coordinator`]: the fleet-wide parts from every engine worker's report, when the fleet is
//!   spread over several ([`model::shard`]).
//! - [`conn`], [`capture`], [`history`], [`scope`]: the edges (socket, files, `/frame`, timers).

pub mod capture;
pub mod conn;
pub mod coordinator;
pub mod engine;
pub mod history;
pub mod host;
pub mod local;
pub mod model;
pub mod pace;
pub mod scope;
pub mod summarize;
pub mod worker;
