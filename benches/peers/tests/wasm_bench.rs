//! kvscope's decoder and normalizer compiled to wasm, timed in headless Chromium.
//!
//! The same inputs as the native benchmarks (`kvscope_peer_bench::inputs`), timed with the
//! page's `performance.now()` (never `std::time::Instant`, which panics on wasm32). Each
//! measurement runs whole passes over a workload for at least `ROUND_MS`, keeps the best of
//! `wasm_timing::ROUNDS` rounds (`benches/wasm_timing.rs`), and prints one machine-readable line
//! through the test output:
//!
//! `BENCH wasm {"workload": ..., "bench": "kvscope/decode", "events": ..., "bytes": ...,
//! "seconds_per_pass": ..., "events_per_s": ..., "mb_per_s": ...}`
//!
//! Run (scripts/bench.sh does):
//! `CHROMEDRIVER=/usr/bin/chromedriver CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//!  cargo test --release -p kvscope-peer-bench --target wasm32-unknown-unknown --test wasm_bench`
#![cfg(target_arch = "wasm32")]

#[path = "../../wasm_timing.rs"]
mod wasm_timing;

use std::hint::black_box;

use kvscope_normalize::{Normalizer, Policy};
use kvscope_peer_bench::inputs::{self, Workload};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};
use wasm_timing::best_seconds_per_pass;

wasm_bindgen_test_configure!(run_in_browser);

/// Each round's least time, in milliseconds.
const ROUND_MS: f64 = 600.0;

fn report(w: &Workload, bench: &str, seconds: f64) {
    let (events, bytes) = (w.total_events(), w.total_bytes());
    console_log!(
        "BENCH wasm {{\"workload\": \"{}\", \"bench\": \"{bench}\", \"events\": {events}, \"bytes\": {bytes}, \
         \"seconds_per_pass\": {seconds:e}, \"events_per_s\": {:.1}, \"mb_per_s\": {:.3}}}",
        w.name,
        events as f64 / seconds,
        bytes as f64 / seconds / 1e6
    );
}

fn bench(w: Workload) {
    assert!(w.payload_count() > 0, "{}: no payloads", w.name);
    let decode = best_seconds_per_pass(ROUND_MS, || {
        for p in w.payloads() {
            black_box(kvscope_wire::decode_batch(black_box(&p.bytes)).expect("inputs decode"));
        }
    });
    report(&w, "kvscope/decode", decode);

    let mut verdicts = Vec::with_capacity(64);
    let normalize = best_seconds_per_pass(ROUND_MS, || {
        let mut n = Normalizer::new(w.block_size, Policy::FIXED);
        for (worker, stream) in w.streams.iter().enumerate() {
            let source = n.source(&format!("w{worker}"), 0);
            for p in stream {
                verdicts.clear();
                let batch = n.push_payload(source, p.seq, black_box(&p.bytes), &mut verdicts).expect("inputs decode");
                black_box((&batch, &verdicts));
            }
        }
    });
    report(&w, "kvscope/decode+normalize", normalize);

    let skip = best_seconds_per_pass(ROUND_MS, || {
        for p in w.payloads() {
            black_box(kvscope_wire::skip_value(black_box(&p.bytes), 0, 32).expect("inputs walk"));
        }
    });
    report(&w, "floor/skip", skip);
}

#[wasm_bindgen_test]
fn kimi_k3() {
    bench(inputs::kimi_k3());
}

#[wasm_bindgen_test]
fn small_gpu() {
    bench(inputs::small_gpu(inputs::SYNTHETIC_BATCHES));
}

#[wasm_bindgen_test]
fn cpu_offload() {
    bench(inputs::cpu_offload(inputs::SYNTHETIC_BATCHES));
}

#[wasm_bindgen_test]
fn sglang() {
    bench(inputs::sglang(inputs::SYNTHETIC_BATCHES));
}
