//! Native tests of the behaviour behind the JS API ([`Session`]); the browser tests in `web.rs`
//! run the same vectors through the `#[wasm_bindgen]` layer in headless Chromium.

use kvscope_corpus::vectors::{case_count, run_vectors};
use kvscope_normalize::{RULES, VerdictLabel};
use kvscope_wasm::Session;

mod host;
use host::SessionHost;

/// The JS API's label list is the normalizer's enum, in order, and its rule list carries every
/// label exactly once: a label cannot exist on one side only.
#[test]
fn test_exported_labels_and_rules_are_the_normalizers() {
    let labels: Vec<VerdictLabel> = kvscope_wasm::labels().iter().map(|l| l.label).collect();
    assert_eq!(labels, VerdictLabel::ALL);
    for l in kvscope_wasm::labels() {
        assert_eq!(l.outcome, l.label.outcome().as_str());
    }
    let rules = kvscope_wasm::rules();
    assert_eq!(rules.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(), RULES.iter().map(|r| r.name).collect::<Vec<_>>());
    let mut carried: Vec<VerdictLabel> = rules.iter().flat_map(|r| r.labels.iter().copied()).collect();
    carried.sort();
    assert_eq!(carried, VerdictLabel::ALL);
}

#[test]
fn test_vectors_pass_through_the_session() {
    let report = run_vectors(&mut SessionHost::new(kvscope_corpus::payload));
    report.assert_ok(case_count());
    assert_eq!(report.tree_checks_skipped, 0);
}

/// The Kimi-K3 worker 0 stream through the session: verdicts, counters, tree summary and an
/// icicle drill-down, as the web app reads them.
#[test]
fn test_session_reports_the_kimi_k3_stream_as_the_views_need_it() {
    let mut s = Session::new(1536, "fixed").unwrap();
    for m in kvscope_corpus::kimi_k3_stream(0) {
        let seq = m.seq.to_be_bytes();
        let r = s.push_frames("w0", 0, &[m.topic.as_bytes(), &seq, m.payload]);
        assert!(r.ok, "{:?}", r.error);
        if m.seq == 8 {
            let cpu = &r.verdicts[4];
            assert_eq!(cpu.code, "offload_block_size_mismatch host_pinned");
            assert_eq!((cpu.outcome.as_str(), cpu.rule.as_str(), cpu.rule_step.as_str()), ("skip", "offload_block_size_mismatch", "4"));
            assert_eq!(r.verdicts[3].change.inserted, 1);
        }
    }
    let c = s.counters("w0", 0).unwrap();
    assert_eq!(c.fatal_count, 0);
    assert_eq!(c.verdicts_by_label["offload_block_size_mismatch"], 2);
    assert_eq!(c.verdicts["host_pinned"]["offload_block_size_mismatch"], 2);
    assert_eq!(c.warnings["offload"].lines.len(), 2);
    assert_eq!(
        c.summaries.iter().find(|l| l.label == VerdictLabel::OffloadBlockSizeMismatch).unwrap().text,
        "2 stores skipped on an offload tier at another block size"
    );
    assert_eq!(c.trees["device"], 16);

    let t = s.tree_summary("w0", 0, "device", 2).unwrap();
    // Seq 18 starts a new chain (parent nil); removals of chain heads re-root the rest.
    assert_eq!(t.blocks, 16);
    assert!(t.roots >= 2, "{t:?}");
    assert_eq!(t.largest.len(), 2);
    assert_eq!(t.counters["block_not_found"], 0);

    let icicle = s.subtree("w0", 0, "device", None, 64, 8).unwrap();
    assert_eq!(icicle[0].hash, None);
    assert_eq!(icicle[0].blocks, 16);
    let first_root = icicle[1].hash.clone().unwrap();
    let below = s.subtree("w0", 0, "device", Some(&first_root), 64, 8).unwrap();
    assert_eq!(below[0].hash.as_deref(), Some(first_root.as_str()));
    let b = s.block("w0", 0, "device", &first_root).unwrap().unwrap();
    assert_eq!(b.hash, first_root);
    assert!(s.subtree("w0", 0, "device", Some("0000000000000001"), 4, 4).is_err());
}
