//! The shared vector table, run natively through the reference host (`NativeHost`, a
//! `Normalizer` called directly). The same table runs in `kvscope-tiers` (with trees) and in
//! headless Chromium through `kvscope-wasm` (Rust side and JS-facing API).

use kvscope_corpus::vectors::{NativeHost, case_count, case_count_for, run_vectors, vector_count};
use kvscope_normalize::Policy;

#[test]
fn test_vectors_pass_natively_under_every_policy() {
    let mut host = NativeHost::new(kvscope_corpus::payload);
    let report = run_vectors(&mut host);
    assert!(report.vectors > 0, "the vector table is empty");
    assert_eq!(report.vectors, vector_count());
    report.assert_ok(case_count());
    // Every preset runs vectors, and the runs are the sum of each preset's.
    let per_policy: Vec<(&str, usize)> = Policy::names().map(|p| (p, case_count_for(p))).collect();
    for (p, n) in &per_policy {
        assert!(*n > 0, "no vector runs under {p}");
    }
    assert_eq!(per_policy.iter().map(|(_, n)| n).sum::<usize>(), report.runs);
    eprintln!("native host: {} vectors, {} runs {per_policy:?}", report.vectors, report.runs);
}
