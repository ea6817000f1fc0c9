//! The engine worker alone, in Chromium (issue 22, step 1): the worker's wasm build of the
//! [`Engine`] applying a recorded stream as fast as it takes it, in a dedicated worker as on the
//! page, with no server and no demo competing for the cores, against decoding and
//! decode+normalize of the same bytes in the same run. The native twin is `benches/engine.rs`;
//! both replay `benches/streams/mod.rs`.
//!
//! Each measurement runs whole passes for at least `ROUND_MS`, keeps the best of
//! `wasm_timing::ROUNDS` rounds (`benches/wasm_timing.rs`), and prints one line per bench:
//!
//! `BENCH wasm_engine {"stream": "kimi_k3", "bench": "engine_router", "frames": 60, "events": 300,
//! "bytes": ..., "seconds_per_pass": ...}`
//!
//! Run (`scripts/bench_engine.sh` does):
//! `CHROMEDRIVER=/usr/bin/chromedriver CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//!  cargo test --release -p kvscope-engine --target wasm32-unknown-unknown --test wasm_bench`
#![cfg(target_arch = "wasm32")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../benches/streams/mod.rs"]
mod streams;

#[path = "../../../benches/wasm_timing.rs"]
mod wasm_timing;

use std::hint::black_box;

use kvscope_engine::engine::Engine;
use kvscope_engine_protocol::settings::Settings;
use kvscope_normalize::{Normalizer, Policy};
use streams::{Count, Stream, fleet16, kimi};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};
use wasm_timing::best_seconds_per_pass;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

/// Each round's least time, in milliseconds.
const ROUND_MS: f64 = 800.0;

fn report(stream: &Stream, bench: &str, seconds: f64) {
    console_log!(
        "BENCH wasm_engine {{\"stream\": \"{}\", \"bench\": \"{bench}\", \"frames\": {}, \"events\": {}, \"bytes\": {}, \
         \"seconds_per_pass\": {seconds:e}}}",
        stream.name,
        stream.frames.len(),
        stream.events,
        stream.bytes()
    );
}

fn loaded(stream: &Stream, messages: &[Vec<u8>], event_plane: bool) -> Engine {
    let mut e = Engine::new(Settings::default());
    e.apply_server_message(&stream.hello(event_plane), 0.0);
    for m in messages {
        e.apply_server_message(m, 0.0);
    }
    e
}

fn bench(stream: &Stream) {
    let (messages, with_plane) = (stream.messages(false), stream.messages(true));
    let decode = best_seconds_per_pass(ROUND_MS, || {
        let mut count = Count(0);
        for (_, _, payload) in &stream.frames {
            let _ = kvscope_wire::decode_each(black_box(payload), &mut count);
        }
        black_box(count.0);
    });
    report(stream, "decode", decode);
    let normalize = best_seconds_per_pass(ROUND_MS, || {
        let mut n = Normalizer::new(stream.block_size, Policy::FIXED);
        let ids: Vec<_> = (0..stream.workers).map(|i| n.source(&i.to_string(), 0)).collect();
        let mut events = 0u64;
        for (source, seq, payload) in &stream.frames {
            let _ = n.push_payload_with(ids[*source as usize], *seq, black_box(payload), |_, _| events += 1);
        }
        assert_eq!(events, stream.events, "{}: every event normalized", stream.name);
    });
    report(stream, "normalize", normalize);
    let engine = best_seconds_per_pass(ROUND_MS, || drop(black_box(loaded(stream, &messages, false))));
    report(stream, "engine", engine);
    let engine_router = best_seconds_per_pass(ROUND_MS, || drop(black_box(loaded(stream, &with_plane, true))));
    report(stream, "engine_router", engine_router);
}

#[wasm_bindgen_test]
fn kimi_k3() {
    bench(&kimi());
}

#[wasm_bindgen_test]
fn fleet16_small_events() {
    bench(&fleet16());
}
