//! The shared vector table, run natively through the reference host (`NativeHost`, a
//! `Normalizer` called directly). The same table runs in `kvscope-tiers` (with trees) and in
//! headless Chromium through `kvscope-wasm` (Rust side and JS-facing API).

use kvscope_normalize::vectors::{case_count, run_vectors, vector_count, NativeHost};

#[test]
fn test_vectors_pass_natively_under_every_policy() {
    let mut host = NativeHost::new(kvscope_corpus::payload);
    let report = run_vectors(&mut host);
    assert!(report.vectors > 0, "the vector table is empty");
    assert_eq!(report.vectors, vector_count());
    // Both required policies in every vector, so at least twice as many runs as vectors.
    assert!(report.runs >= 2 * report.vectors, "{} runs for {} vectors", report.runs, report.vectors);
    report.assert_ok(case_count());
    eprintln!("native host: {} vectors, {} runs", report.vectors, report.runs);
}
