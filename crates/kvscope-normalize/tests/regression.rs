//! Regression tests: each is named for the behaviour it keeps and says, in its doc comment, what
//! went wrong before the fix. Inputs are real msgpack payloads, encoded from events described as
//! data (`kvscope_corpus::vectors::encode_batch`), pushed through `Normalizer::push_payload` like live frames.

// Test code: a failed expect is a failed test, with its location.
#![allow(clippy::expect_used)]

use kvscope_corpus::vectors::{EventSpec, encode_batch};
use kvscope_normalize::tier::MEDIUM_TABLE;
use kvscope_normalize::{Normalizer, Policy, SourceId, StorageTier, TierSource, Verdict, VerdictLabel, resolve_tier};
use kvscope_wire::decode_batch;

/// Encodes events given as JSON into one map-encoded batch for dp rank 0.
fn payload(events: &str) -> Vec<u8> {
    let events: Vec<EventSpec> = serde_json::from_str(events).expect("test events are valid JSON");
    encode_batch(1.0, &events, Some(0), false).expect("test events encode")
}

fn push(n: &mut Normalizer, id: SourceId, seq: u64, events: &str) -> Vec<Verdict> {
    let mut out = Vec::new();
    n.push_payload(id, seq, &payload(events), &mut out).expect("test payloads decode");
    out
}

fn codes(verdicts: &[Verdict]) -> Vec<String> {
    verdicts.iter().map(|v| v.code().to_string()).collect()
}

/// Before the fix, the indexer ran its block-size check before looking at the tier, so the first
/// store on an offload tier at another block size (Kimi-K3's `cpu` stores: 12288 = 8 x 1536
/// tokens per block, at `--block-size 1536`) was fatal and the indexer exited. Now such a store
/// is skipped as `offload_block_size_mismatch`, counted, and logged within its own budget; the
/// Device tier is unaffected and nothing is fatal.
#[test]
fn test_normalizer_skips_offload_tier_block_size_mismatch() {
    let mut n = Normalizer::new(1536, Policy::FIXED);
    let w0 = n.source("w0", 0);
    let gpu = push(
        &mut n,
        w0,
        0,
        r#"[{"type":"BlockStored","hashes":[1],"block_size":1536,"medium":"GPU","group_idx":3,"kind":"mla_attention"}]"#,
    );
    assert_eq!(codes(&gpu), ["store device 1"]);
    let offload = push(
        &mut n,
        w0,
        1,
        r#"[{"type":"BlockStored","hashes":[1],"block_size":12288,"medium":"cpu","group_idx":3},
            {"type":"BlockStored","hashes":[2],"block_size":256,"medium":"CPU_PINNED"},
            {"type":"BlockStored","hashes":[3],"block_size":0,"tokens":0,"medium":"STORAGE"},
            {"type":"BlockStored","hashes":[4],"block_size":64,"medium":"remote"}]"#,
    );
    assert_eq!(
        codes(&offload),
        [
            "offload_block_size_mismatch host_pinned",
            "offload_block_size_mismatch host_pinned",
            "offload_block_size_mismatch disk",
            "offload_block_size_mismatch external",
        ]
    );
    assert_eq!(
        offload[0].to_string(),
        "medium \"cpu\" -> HostPinned (case-insensitive); no kind; group 3 was learned as \"mla_attention\"; \
         block_size 12288 != 1536 on a non-device tier -> skip offload_block_size_mismatch"
    );
    let c = n.counters(w0);
    assert_eq!(c.fatal_count, 0);
    assert_eq!(c.first_fatal, None);
    assert_eq!(c.verdicts_by_label(VerdictLabel::OffloadBlockSizeMismatch), 4);
    assert_eq!(c.verdicts(Some(StorageTier::HostPinned), VerdictLabel::OffloadBlockSizeMismatch), 2);
    assert_eq!((c.offload.emitted, c.offload.suppressed), (3, 1));
    assert_eq!(
        c.offload.lines[0].text,
        "w0:0 seq 1 event 0: skipping BlockStored on HostPinned (medium \"cpu\"): block_size 12288 != 1536 \
         (offload_block_size_mismatch)"
    );
    assert!(c.offload.lines[2].text.ends_with("; further warnings of this kind are counted, not logged"));
    assert_eq!(c.summaries()[1].2, "4 stores skipped on an offload tier at another block size");
    assert_eq!(c.blocks_applied, 1, "only the GPU block was applied");

    // The same stream under legacy, the behaviour before the fix: the first offload store is fatal.
    let mut legacy = Normalizer::new(1536, Policy::LEGACY);
    let w0 = legacy.source("w0", 0);
    push(
        &mut legacy,
        w0,
        0,
        r#"[{"type":"BlockStored","hashes":[1],"block_size":1536,"medium":"GPU","group_idx":3,"kind":"mla_attention"}]"#,
    );
    let v = push(&mut legacy, w0, 1, r#"[{"type":"BlockStored","hashes":[1],"block_size":12288,"medium":"cpu","group_idx":3}]"#);
    assert_eq!(codes(&v), ["block_size_mismatch device +unknown_medium_fallback"]);
    assert_eq!(legacy.counters(w0).first_fatal.as_ref().map(|l| l.seq), Some(1));
}

/// The fix must not hide a real misconfiguration: a non-empty Device store whose block size is
/// not the configured one means the indexer would compute wrong prefix hashes for every request,
/// so it stays fatal under `fixed` (and `legacy`), and the first fatal says which `--block-size`
/// to use. (An empty store carries no blocks and is never fatal. `dynamo-1.6.1` reproduces the
/// published indexer, which applies such a store with no blocks: see
/// `test_dynamo_preset_never_stops_and_shares_one_warning_budget`.)
#[test]
fn test_normalizer_keeps_device_block_size_mismatch_fatal() {
    for policy in [Policy::FIXED, Policy::LEGACY] {
        let mut n = Normalizer::new(12288, policy);
        let w0 = n.source("w0", 0);
        let v = push(
            &mut n,
            w0,
            4711,
            r#"[{"type":"BlockStored","hashes":[],"tokens":0,"block_size":1536,"medium":"GPU"},
                {"type":"BlockStored","hashes":[9],"block_size":1536,"medium":"GPU","group_idx":3,"kind":"mla_attention"},
                {"type":"BlockStored","hashes":[10],"block_size":1536,"medium":"gpu","group_idx":3,"kind":"mla_attention"}]"#,
        );
        let gpu_code =
            if policy.name == "legacy" { "block_size_mismatch device +unknown_medium_fallback" } else { "block_size_mismatch device" };
        assert_eq!(codes(&v), ["store device 0", "block_size_mismatch device", gpu_code], "{policy}");
        assert!(v[1].is_fatal());
        let c = n.counters(w0);
        assert_eq!(c.fatal_count, 2, "{policy}");
        let first = c.first_fatal.as_ref().expect("a fatal verdict is recorded");
        assert_eq!((first.seq, first.event_index), (4711, 1));
        assert_eq!(
            first.text,
            format!(
                "w0:0 seq 4711 event 1: medium \"GPU\" -> Device ({}); kind \"mla_attention\" is main attention; \
                 block_size 1536 != 12288 on the Device tier -> fatal block_size_mismatch; Device stores have \
                 block_size 1536, not 12288; try --block-size 1536",
                policy.medium_match.describe()
            )
        );
        assert_eq!(c.blocks_applied, 0);
    }
}

/// Before the fix the medium match was exact and its table had neither `CPU` nor `STORAGE`:
/// vLLM's offload connectors and Mooncake write `cpu` in lower case, vLLM 0.28 on writes
/// `STORAGE`, and both fell back to Device, so host- and disk-tier events edited the GPU tree.
/// Policy `fixed` matches every row of the table ASCII case-insensitively; `legacy` keeps the
/// old exact table for comparison. Absent and empty media are Device; anything else that matches
/// no row falls back to Device and says so.
#[test]
fn test_storage_tier_accepts_vllm_medium_names() {
    let fixed = Policy::FIXED;
    let legacy = Policy::LEGACY;
    let expected = [
        ("GPU", StorageTier::Device),
        ("DEVICE", StorageTier::Device),
        ("CPU", StorageTier::HostPinned),
        ("CPU_PINNED", StorageTier::HostPinned),
        ("CPU_TIER1", StorageTier::HostPinned),
        ("CPU_TIER2", StorageTier::Disk),
        ("DISK", StorageTier::Disk),
        ("NVME", StorageTier::Disk),
        ("STORAGE", StorageTier::Disk),
        ("EXTERNAL", StorageTier::External),
        ("NETWORK", StorageTier::External),
        ("REMOTE", StorageTier::External),
        ("SHARED", StorageTier::External),
    ];
    assert_eq!(MEDIUM_TABLE.len(), expected.len());
    for (name, tier) in expected {
        let lower = name.to_ascii_lowercase();
        let mixed: String = name.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c } else { c.to_ascii_lowercase() }).collect();
        for spelling in [name, lower.as_str(), mixed.as_str()] {
            assert_eq!(StorageTier::from_kv_medium(spelling, &fixed), Some(tier), "fixed {spelling:?}");
            assert_eq!(resolve_tier(Some(spelling), &fixed).source, TierSource::Table);
        }
        let in_legacy = !matches!(name, "CPU" | "STORAGE");
        assert_eq!(StorageTier::from_kv_medium(name, &legacy), in_legacy.then_some(tier), "legacy {name:?}");
        assert_eq!(StorageTier::from_kv_medium(&lower, &legacy), None, "legacy is case-sensitive: {lower:?}");
    }
    // The media vLLM and SGLang actually send, as the corpus holds them.
    for (medium, tier) in [("cpu", StorageTier::HostPinned), ("CPU", StorageTier::HostPinned), ("STORAGE", StorageTier::Disk)] {
        assert_eq!(resolve_tier(Some(medium), &fixed).tier, tier, "{medium:?}");
        let old = resolve_tier(Some(medium), &legacy);
        assert_eq!((old.tier, old.source), (StorageTier::Device, TierSource::Fallback), "legacy {medium:?}");
    }
    for policy in Policy::PRESETS {
        assert_eq!(resolve_tier(None, policy).tier, StorageTier::Device);
        assert_eq!(resolve_tier(Some(""), policy).tier, StorageTier::Device);
        assert!(!resolve_tier(Some(""), policy).is_fallback());
        for unknown in ["tape", "cpu ", "FS", "OBJ", "GPU0"] {
            let choice = resolve_tier(Some(unknown), policy);
            assert_eq!((choice.tier, choice.source), (StorageTier::Device, TierSource::Fallback), "{unknown:?}");
        }
    }
    // The fallback is visible on the verdict and counted.
    let mut n = Normalizer::new(16, fixed);
    let w0 = n.source("w0", 0);
    let v = push(&mut n, w0, 0, r#"[{"type":"BlockStored","hashes":[1],"block_size":16,"medium":"cpu "}]"#);
    assert_eq!(codes(&v), ["store device 1 +unknown_medium_fallback"]);
    assert!(v[0].to_string().starts_with("medium \"cpu \" matches no tier (case-insensitive) -> falls back to Device"));
    assert_eq!(n.counters(w0).unknown_medium_fallbacks, 1);
}

/// Offload skips are expected traffic (Kimi-K3 sends one per eight GPU blocks), conversion
/// warnings (short token_ids, a wrong-size block) mean something is wrong. If skips were charged
/// to the shared budget of 3, the first three CPU stores would spend it within seconds and the
/// first real conversion warning would never be printed. Each has its own budget.
#[test]
fn test_offload_skips_do_not_spend_the_shared_warning_budget() {
    let mut n = Normalizer::new(1536, Policy::FIXED);
    let w0 = n.source("w0", 0);
    for seq in 0..10 {
        let v = push(&mut n, w0, seq, r#"[{"type":"BlockStored","hashes":[7],"block_size":12288,"medium":"cpu"}]"#);
        assert_eq!(codes(&v), ["offload_block_size_mismatch host_pinned"]);
    }
    let c = n.counters(w0);
    assert_eq!((c.offload.emitted, c.offload.suppressed), (3, 7));
    assert_eq!((c.conversion.emitted, c.conversion.suppressed), (0, 0));

    let v = push(&mut n, w0, 10, r#"[{"type":"BlockStored","hashes":[1,2],"tokens":2000,"block_size":1536,"medium":"GPU"}]"#);
    assert_eq!(codes(&v), ["store device 2 +short_token_ids"]);
    assert!(
        v[0].to_string().ends_with("token_ids has 2000 tokens, fewer than 2 blocks x 1536 -> warning short_token_ids (logged, 1 of 3)")
    );
    let c = n.counters(w0);
    assert_eq!((c.conversion.emitted, c.conversion.suppressed), (1, 0));
    assert_eq!(
        c.conversion.lines[0].text,
        "w0:0 seq 10 event 0: BlockStored token_ids has 2000 tokens for 2 blocks of 1536 (short_token_ids)"
    );
    assert_eq!((c.offload.emitted, c.offload.suppressed), (3, 7), "a conversion warning does not touch the offload budget");
    let log: Vec<u64> = c.log().iter().map(|l| l.seq).collect();
    assert_eq!(log, [0, 1, 2, 10]);
}

/// Dynamo 1.6.1 reads a batch as a strict `(f64, events, i32)` tuple whose hashes are i64/u64.
/// vLLM 0.13-0.23's CPU offload connector writes 32-byte bin hashes for its offloaded blocks, in
/// the same batch as the GPU stores of the same chunk, so the published indexer loses the whole
/// batch, GPU stores included, and logs one "Failed to decode KvEventBatch" line for it. Under
/// `dynamo-1.6.1` every event of such a batch is `batch_decode_rejected`, nothing is learned
/// from it, and the line is in the source's log; `fixed` decodes and applies the same batch.
#[test]
fn test_dynamo_preset_loses_whole_batches_its_decoder_rejects() {
    let events = r#"[{"type":"BlockStored","hashes":[1],"block_size":16,"medium":"GPU","group_idx":1,"kind":"mamba"},
                     {"type":"BlockStored","hashes":[{"bin":32,"value":2}],"block_size":16,"medium":"CPU"}]"#;
    let mut n = Normalizer::new(16, Policy::DYNAMO_1_6_1);
    let w0 = n.source("w0", 0);
    let v = push(&mut n, w0, 3, events);
    assert_eq!(codes(&v), ["batch_decode_rejected", "batch_decode_rejected"]);
    assert_eq!(v[0].tier, None);
    assert_eq!(
        v[0].to_string(),
        "events[1] has a bin (bytes) block hash; Dynamo 1.6.1's decoder rejects the whole batch (\"data did not \
         match any variant of untagged enum BlockHashValue\"), and every event of it is lost -> skip \
         batch_decode_rejected"
    );
    let c = n.counters(w0);
    assert_eq!((c.batches, c.batches_rejected, c.fatal_count), (1, 1, 0));
    assert_eq!(c.verdicts_by_label(VerdictLabel::BatchDecodeRejected), 2);
    assert!(n.groups(w0).is_empty(), "a lost batch teaches nothing");
    assert_eq!(
        c.log().iter().map(|l| l.to_string()).collect::<Vec<_>>(),
        ["WARN w0:0 seq 3: Failed to decode KvEventBatch: data did not match any variant of untagged enum BlockHashValue"]
    );
    assert_eq!(c.summaries()[0].2, "2 events lost with batches the decoder rejects");
    // normalize_batch on an already decoded batch (as the server and the dashboard call it)
    // gives the same verdicts.
    let batch = decode_batch(&payload(events)).unwrap();
    let mut again = Vec::new();
    n.normalize_batch(w0, 4, &batch, &mut again);
    assert_eq!(codes(&again), ["batch_decode_rejected", "batch_decode_rejected"]);

    let mut fixed = Normalizer::new(16, Policy::FIXED);
    let w0 = fixed.source("w0", 0);
    assert_eq!(codes(&push(&mut fixed, w0, 3, events)), ["non_main_attention_kind device", "store host_pinned 1"]);
}

/// The Kimi-K3 incident does not happen in Dynamo 1.6.1: nothing an event contains stops its
/// listener. A store at another block size is applied with no blocks, on whatever tier it names,
/// and every conversion warning (another block size, short token_ids) spends one shared budget
/// of 3 that is never reset, so after three such stores the log goes quiet while the index keeps
/// missing blocks. `dynamo-1.6.1` reproduces that, including Dynamo's log lines.
#[test]
fn test_dynamo_preset_never_stops_and_shares_one_warning_budget() {
    let mut n = Normalizer::new(1536, Policy::DYNAMO_1_6_1);
    let w0 = n.source("w0", 0);
    let v = push(
        &mut n,
        w0,
        0,
        r#"[{"type":"BlockStored","hashes":[1],"block_size":12288,"medium":"CPU"},
            {"type":"BlockStored","hashes":[2],"block_size":12288,"medium":"GPU"},
            {"type":"BlockStored","hashes":[3,4],"tokens":2000,"block_size":1536,"medium":"GPU"},
            {"type":"BlockStored","hashes":[5],"block_size":0,"tokens":0,"medium":"STORAGE"},
            {"type":"BlockStored","hashes":[6],"block_size":1536,"medium":"GPU"}]"#,
    );
    assert_eq!(
        codes(&v),
        [
            "store host_pinned 0 +block_size_differs",
            "store device 0 +block_size_differs",
            "store device 1 +short_token_ids",
            "store disk 0 +block_size_differs",
            "store device 1",
        ]
    );
    assert!(v[3].to_string().ends_with("warning block_size_differs (not logged: the budget of 3 is spent)"), "{}", v[3]);
    let c = n.counters(w0);
    assert_eq!((c.fatal_count, c.conversion.emitted, c.conversion.suppressed), (0, 3, 1));
    assert_eq!((c.offload.emitted, c.offload.suppressed), (0, 0), "no separate offload budget");
    let log: Vec<String> = c.log().iter().map(|l| l.to_string()).collect();
    assert_eq!(
        log,
        [
            "WARN w0:0 seq 0 event 0: Block not published. Block size must be 1536 tokens to be published. Block size is: 12288",
            "WARN w0:0 seq 0 event 1: Block not published. Block size must be 1536 tokens to be published. Block size is: 12288",
            "WARN w0:0 seq 0 event 2: Block not published. token_ids too short: need 3072, got 2000",
        ]
    );
    assert_eq!(c.blocks_applied, 2);
}
