//! Classifying a payload costs memory proportional to the payload, not to its event count.
//!
//! A valid 12 MB batch of six million one-element events (`[""]`, two bytes each) once made the
//! server hold six million decoded events of ~300 bytes and six million verdicts: 2.5 GB. The
//! streaming path (`push_payload_with`) holds a bounded chunk of events and no verdicts; this
//! test measures the peak of live heap bytes while it classifies such batches under every
//! policy. One test function, so no other test allocates while it measures.

// Test code: a failed expect is a failed test, with its location.
#![allow(clippy::expect_used)]

use kvscope_normalize::{Normalizer, Policy};
use peak_alloc::PeakAlloc;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// The bound asserted: far below the payload itself (12 MB), and independent of it.
const PEAK_LIMIT: usize = 4 << 20;

/// `[0.0, [<event> x n], 0]` with a 32-bit events header.
fn batch_of(event: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + event.len() * n);
    out.extend_from_slice(&[0x93, 0xcb]);
    out.extend_from_slice(&0.0f64.to_be_bytes());
    out.push(0xdd);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for _ in 0..n {
        out.extend_from_slice(event);
    }
    out.push(0x00);
    out
}

/// Peak live heap bytes above what was live before, while classifying `payload` under `policy`.
fn peak_while_classifying(policy: Policy, payload: &[u8], expected_events: usize) -> usize {
    let mut n = Normalizer::new(16, policy);
    let id = n.source("w0", 0);
    let before = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let mut count = 0usize;
    n.push_payload_with(id, 0, payload, |_, _| count += 1).expect("the batch is valid");
    let peak = HEAP.peak_usage() - before;
    assert_eq!(count, expected_events, "{}", policy.name);
    peak
}

#[test]
fn hostile_batches_classify_in_bounded_memory() {
    // `[""]`: an event of an unknown (empty) tag, 2 bytes.
    let tiny = batch_of(&[0x91, 0xa0], 6_000_000);
    // The smallest BlockStored: ["BlockStored", [1], nil, [], 16], 18 bytes.
    let mut store = vec![0x95, 0xab];
    store.extend_from_slice(b"BlockStored");
    store.extend_from_slice(&[0x91, 0x01, 0xc0, 0x90, 0x10]);
    let stores = batch_of(&store, 12_000_000 / store.len());
    for (name, payload, events) in [("[\"\"] x 6M", &tiny, 6_000_000), ("BlockStored x 666k", &stores, 666_666)] {
        assert!(payload.len() >= 12_000_000);
        for policy in Policy::PRESETS {
            let peak = peak_while_classifying(*policy, payload, events);
            eprintln!(
                "{name} ({} bytes) under {}: peak {} bytes live ({:.4}x the payload)",
                payload.len(),
                policy.name,
                peak,
                peak as f64 / payload.len() as f64
            );
            assert!(peak < PEAK_LIMIT, "{name} under {}: peak {peak} bytes", policy.name);
        }
    }
}
