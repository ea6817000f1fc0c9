//! Benchmarks and differential checks of kvscope against the decoders operators run today (Dynamo's dynamo-kv-router, msgspec).
//!
//! What this crate is not: part of the product. It is the only crate that depends on
//! `dynamo-kv-router`, so the server, the web app and the core crates never build it.
//!
//! - [`dynamo`] drives Dynamo 1.6.1's decoder and normalizer the way its indexer does (native
//!   only).
//! - [`inputs`] builds the benchmark inputs (the corpus's Kimi-K3 streams and three synthetic
//!   streams) for the native benchmarks, the wasm benchmark and the msgspec script alike.
//!
//! Payloads are written by `kvscope-encode` (release layouts, and `raw::Writer` for the
//! differential tests' malformed shapes).

// Benchmark code: a failed expect aborts the measurement, with its location.
#![allow(clippy::expect_used)]

#[cfg(not(target_arch = "wasm32"))]
pub mod dynamo;
#[cfg(not(target_arch = "wasm32"))]
pub mod dynamo_index;
pub mod inputs;
