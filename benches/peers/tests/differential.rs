//! kvscope against NVIDIA Dynamo 1.6.1 (`dynamo-kv-router`) on every corpus payload.
//!
//! One test binary, one module per area:
//! - `decode`: the two decoders agree on every field both understand, and every payload Dynamo
//!   rejects is one of the named, documented rejections (docs/dynamo-1.6.1.md, "Decoding").
//! - `tiers`: wherever Dynamo's normalizer applies an event and kvscope's `fixed` policy applies
//!   it too, both file it on the same storage tier; where they differ by design the case is
//!   named and asserted.
//! - `preset`: kvscope's `dynamo-1.6.1` preset gives Dynamo's verdict for every corpus event.
//! - `index`: kvscope-index's model of Dynamo's index holds and scores what Dynamo's own index
//!   does, on random event streams.
//! - `rules`: each rule of docs/dynamo-1.6.1.md asserted against Dynamo itself on a hand-built
//!   payload, so the document stays true when the crate version changes.
//!
//! Every test counts what it compared and fails on zero. Native only: Dynamo does not build for
//! wasm32.
#![cfg(not(target_arch = "wasm32"))]

#[path = "differential/common.rs"]
mod common;
#[path = "differential/decode.rs"]
mod decode;
#[path = "differential/index.rs"]
mod index;
#[path = "differential/preset.rs"]
mod preset;
#[path = "differential/rules/mod.rs"]
mod rules;
#[path = "differential/tiers.rs"]
mod tiers;
