//! The timer of both wasm benchmarks (`benches/peers/tests/wasm_bench.rs` and
//! `crates/kvscope-engine/tests/wasm_bench.rs`, each includes this file): whole passes for at
//! least a round's time, the best of [`ROUNDS`] rounds, read from `performance.now()` of the page
//! or worker (`std::time::Instant` panics on wasm32).

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: milliseconds with sub-millisecond resolution.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

/// Rounds per measurement; the best counts (the machines are shared and noisy).
pub const ROUNDS: usize = 3;

/// Best seconds per pass of `pass` over [`ROUNDS`] rounds of at least `round_ms` each, after one
/// warm-up pass (first-touch allocation, lazy statics).
pub fn best_seconds_per_pass(round_ms: f64, mut pass: impl FnMut()) -> f64 {
    pass();
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let start = performance_now();
        let mut passes = 0u32;
        let elapsed = loop {
            pass();
            passes += 1;
            let elapsed = performance_now() - start;
            if elapsed >= round_ms {
                break elapsed;
            }
        };
        best = best.min(elapsed / 1000.0 / f64::from(passes));
    }
    best
}
