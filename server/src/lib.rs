//! The kvscope binary: subscribes to engines' KV-event streams and relays every frame to the dashboard.
//!
//! What this crate is: the `kvscope` command (`serve`, `demo`, `record`, `replay`, `publish`,
//! `check`) and the server behind it. It is a library too so that its integration tests and the
//! relay benchmark drive the same code the binary runs.
//!
//! What it is not: it does not decode or classify by itself. Payload bytes are relayed as
//! received; decoding is `kvscope-wire`'s, verdicts are `kvscope-normalize`'s (linked natively
//! for `/metrics` and `check`), and the browser runs both again on its side.
//!
//! Modules, each with one job:
//! - [`cli`]: flags (`cli::args`), exit codes, one function per subcommand (`cli::commands`);
//! - [`sources`]: `--workers`/`--replay`/`--dp-size` parsing;
//! - [`intake`]: one task per source: connection loop, replay requests;
//! - [`stream`]: per-source sequence tracking, errors and status, with gaps and restarts in
//!   `stream::gaps`, socket-free; [`plane`]: the same for Dynamo's event plane;
//! - [`source_state`]: what both kinds of source share: status, its sending, staleness;
//! - [`classify`]: the native normalizer per source, counted into [`metrics`];
//! - [`relay`]: the history ring and the per-client bounded queues;
//! - [`http`]: `/ws`, `/metrics`, `/healthz`, the safe defaults; [`assets`]: the embedded app;
//! - [`capture`]: `.kvcap` writing and opening; [`check`], [`publish`]: those subcommands;
//! - [`router`]: the router's side live (reconciliation with the event plane, the index
//!   models); [`router_index`]: `--router-index` reads of a real index;
//! - [`demo`]: the simulated fleet; [`app`]: wiring it all for a running server.

pub mod app;
pub mod assets;
pub mod capture;
pub mod check;
pub mod classify;
pub mod cli;
pub mod demo;
pub mod discover;
pub mod exit;
pub mod fleet;
pub mod http;
pub mod http_client;
pub mod intake;
pub mod metrics;
pub mod plane;
pub mod publish;
pub mod relay;
pub mod router;
pub mod router_index;
pub mod rules;
pub mod source_state;
pub mod sources;
pub mod stream;
pub mod time;
pub mod ws;
