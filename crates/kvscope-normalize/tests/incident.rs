//! The Kimi-K3 incident (docs/rules.md), replayed from the corpus: three workers of an aggregated
//! Kimi-K3 deployment on vLLM 0.33.0 with a CPU offload connector. Per worker, groups 0-2 are
//! `mamba` and group 3 `mla_attention`, all GPU stores at block_size 1536; every 8 GPU blocks a
//! `cpu` store of one 12288-token block (group 3, no kind) follows.
//!
//! The Dynamo standalone indexer exited on the first `BlockStored` whose block_size differed from
//! `--block-size`: with 1536 it died on the cpu events, with 12288 on the GPU ones. These tests
//! push the three workers' streams, interleaved in seq order as they arrive, through the
//! normalizer under every policy and both block sizes. The published Dynamo 1.6.1
//! (`dynamo-1.6.1`) no longer dies, but drops the lowercase `cpu` events and, at the wrong block
//! size, indexes nothing while warning three times.

// Test code: a failed expect is a failed test, with its location.
#![allow(clippy::expect_used)]

use kvscope_normalize::{Normalizer, Policy, SourceId, StorageTier, Verdict, VerdictLabel};
use kvscope_wire::KvEvent;

/// One event with its seq and verdict.
struct Seen {
    seq: u64,
    event: KvEvent,
    verdict: Verdict,
}

/// Pushes every worker's stream, interleaved by seq (w0 seq 0, w1 seq 0, w2 seq 0, w0 seq 1,
/// ...), and returns the normalizer and, per worker, what it saw.
fn replay(block_size: u32, policy: Policy) -> (Normalizer, Vec<(SourceId, Vec<Seen>)>) {
    replay_at(block_size, None, policy)
}

/// [`replay`] with every worker at its own block size `own` (its model's), if given.
fn replay_at(block_size: u32, own: Option<u32>, policy: Policy) -> (Normalizer, Vec<(SourceId, Vec<Seen>)>) {
    let mut n = Normalizer::new(block_size, policy);
    let streams: Vec<_> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(kvscope_corpus::kimi_k3_stream).collect();
    let mut per_worker: Vec<(SourceId, Vec<Seen>)> = (0..streams.len()).map(|w| (n.source(&format!("w{w}"), 0), Vec::new())).collect();
    for (id, _) in &per_worker {
        n.set_block_size(*id, own);
    }
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    assert!(longest > 0, "the corpus has no Kimi-K3 messages");
    let mut verdicts = Vec::new();
    for i in 0..longest {
        for (w, stream) in streams.iter().enumerate() {
            let Some(msg) = stream.get(i) else { continue };
            if i > 0 {
                assert!(msg.seq > stream[i - 1].seq, "w{w}: stream is not in seq order at {}", msg.seq);
            }
            let (id, seen) = &mut per_worker[w];
            verdicts.clear();
            let batch = n.push_payload(*id, msg.seq, msg.payload, &mut verdicts).expect("corpus payloads decode");
            assert_eq!(verdicts.len(), batch.events.len(), "one verdict per event");
            for (event, verdict) in batch.events.into_iter().zip(verdicts.iter().copied()) {
                seen.push(Seen { seq: msg.seq, event, verdict });
            }
        }
    }
    assert_eq!(per_worker.len(), 3);
    (n, per_worker)
}

fn is_cpu_store(e: &KvEvent) -> bool {
    matches!(e, KvEvent::BlockStored(s) if s.medium.as_deref() == Some("cpu"))
}

fn is_gpu_main_store(e: &KvEvent) -> bool {
    matches!(e, KvEvent::BlockStored(s) if s.medium.as_deref() == Some("GPU") && s.kv_cache_spec_kind.as_deref() == Some("mla_attention"))
}

/// With `--block-size 1536` under `fixed`: nothing is fatal; every cpu store is skipped as
/// `offload_block_size_mismatch` on HostPinned; the mamba groups (stores by kind, removals by
/// learned group) are filtered as non-main; group 3's GPU stores are applied on Device.
#[test]
fn test_kimi_k3_at_1536_under_fixed_skips_cpu_stores_and_applies_group_3() {
    let (n, workers) = replay(1536, Policy::FIXED);
    for (id, seen) in &workers {
        let c = n.counters(*id);
        let who = n.source_key(*id).to_string();
        assert_eq!(c.fatal_count, 0, "{who}: {:?}", c.first_fatal);
        let mut cpu_stores = 0;
        let mut group3_stores = 0;
        let mut mamba = 0;
        for s in seen {
            let code = s.verdict.code().to_string();
            match &s.event {
                e if is_cpu_store(e) => {
                    cpu_stores += 1;
                    assert_eq!(code, "offload_block_size_mismatch host_pinned", "{who} seq {}", s.seq);
                }
                e if is_gpu_main_store(e) => {
                    group3_stores += 1;
                    assert_eq!(code, "store device 1", "{who} seq {}", s.seq);
                }
                KvEvent::BlockStored(st) if st.kv_cache_spec_kind.as_deref() == Some("mamba") => {
                    mamba += 1;
                    assert_eq!(code, "non_main_attention_kind device", "{who} seq {}", s.seq);
                }
                KvEvent::BlockRemoved(r) if r.medium.as_deref() == Some("GPU") => {
                    let want = if r.group_idx == Some(3) { "remove device 1" } else { "non_main_attention_group device" };
                    assert_eq!(code, want, "{who} seq {}", s.seq);
                }
                KvEvent::BlockRemoved(r) if r.medium.as_deref() == Some("cpu") => {
                    assert_eq!(code, "remove host_pinned 1", "{who} seq {}", s.seq);
                }
                other => panic!("{who} seq {}: unexpected event in the Kimi-K3 stream: {other:?}", s.seq),
            }
        }
        assert_eq!((cpu_stores, group3_stores, mamba), (2, 20, 60), "{who}");
        assert_eq!(c.verdicts_by_label(VerdictLabel::OffloadBlockSizeMismatch), 2);
        assert_eq!(c.verdicts(Some(StorageTier::Device), VerdictLabel::Store), 20);
        assert_eq!(c.verdicts_by_label(VerdictLabel::NonMainAttentionKind), 60);
        assert_eq!(c.verdicts_by_label(VerdictLabel::NonMainAttentionGroup), 12);
        assert_eq!((c.offload.emitted, c.offload.suppressed), (2, 0));
        assert_eq!((c.conversion.emitted, c.conversion.suppressed), (0, 0));
        assert_eq!(c.unknown_medium_fallbacks, 0);
        assert_eq!(c.total_events(), seen.len() as u64);
    }
}

/// With `--block-size 1536` under `legacy` (the indexer before the fix): `cpu` is not in the
/// exact table, falls back to Device, and the first cpu store (seq 8 on every worker) is fatal.
#[test]
fn test_kimi_k3_at_1536_under_legacy_dies_at_the_first_cpu_store() {
    let (n, workers) = replay(1536, Policy::LEGACY);
    for (id, seen) in &workers {
        let who = n.source_key(*id).to_string();
        let first_cpu = seen.iter().find(|s| is_cpu_store(&s.event)).expect("the stream has cpu stores");
        assert_eq!(first_cpu.seq, 8, "{who}: the corpus README puts the first cpu store after 8 GPU blocks");
        assert_eq!(first_cpu.verdict.code().to_string(), "block_size_mismatch device +unknown_medium_fallback");
        let c = n.counters(*id);
        let first = c.first_fatal.as_ref().expect("legacy dies");
        assert_eq!((first.seq, first.event_index), (first_cpu.seq, first_cpu.verdict.event_index), "{who}");
        assert!(first.text.contains("medium \"cpu\" matched no tier and was filed on Device"), "{}", first.text);
        assert_eq!(c.fatal_count, 2, "{who}: both cpu stores");
        // Nothing before it was fatal.
        assert!(seen.iter().take_while(|s| s.seq < 8).all(|s| !s.verdict.is_fatal()));
    }
}

/// With `--block-size 12288`, under either policy: the first group 3 GPU store (seq 0, event 3
/// on every worker) is fatal. Under fixed the cpu stores are then applied on HostPinned.
#[test]
fn test_kimi_k3_at_12288_dies_at_the_first_gpu_main_group_store_under_either_policy() {
    for policy in [Policy::FIXED, Policy::LEGACY] {
        let (n, workers) = replay(12288, policy);
        for (id, seen) in &workers {
            let who = format!("{} [{policy}]", n.source_key(*id));
            let first_main = seen.iter().find(|s| is_gpu_main_store(&s.event)).expect("group 3 stores exist");
            assert_eq!((first_main.seq, first_main.verdict.event_index), (0, 3), "{who}");
            let c = n.counters(*id);
            let first = c.first_fatal.as_ref().expect("dies on the GPU stores");
            assert_eq!((first.seq, first.event_index), (0, 3), "{who}");
            assert!(first.text.ends_with("try --block-size 1536"), "{}", first.text);
            assert_eq!(c.fatal_count, 20, "{who}: every group 3 GPU store");
            let cpu_codes: Vec<String> = seen.iter().filter(|s| is_cpu_store(&s.event)).map(|s| s.verdict.code().to_string()).collect();
            let want = if policy.name == "fixed" { "store host_pinned 1" } else { "store device 1 +unknown_medium_fallback" };
            assert_eq!(cpu_codes, [want, want], "{who}");
        }
    }
}

/// Under `dynamo-1.6.1` (the published indexer an operator runs today) nothing is fatal at either
/// block size, but the host tier is invisible: `cpu` is not in its case-sensitive table, so every
/// cpu store and removal is skipped as `unknown_medium`. At 12288 every group 3 GPU store is
/// applied with no blocks, and only the first 3 of those 20 warnings are logged: the Device tree
/// stays empty while the log shows three lines.
#[test]
fn test_kimi_k3_under_dynamo_1_6_1_never_dies_and_never_sees_the_cpu_tier() {
    for block_size in [1536, 12288] {
        let (n, workers) = replay(block_size, Policy::DYNAMO_1_6_1);
        for (id, seen) in &workers {
            let who = format!("{} at {block_size}", n.source_key(*id));
            let c = n.counters(*id);
            assert_eq!((c.fatal_count, c.first_fatal.as_ref()), (0, None), "{who}");
            let cpu: Vec<String> = seen.iter().filter(|s| s.event.medium() == Some("cpu")).map(|s| s.verdict.code().to_string()).collect();
            assert_eq!(cpu, ["unknown_medium"; 4], "{who}: 2 stores and 2 removals");
            assert_eq!(c.verdicts_by_label(VerdictLabel::UnknownMedium), 4, "{who}");
            let main: Vec<String> = seen.iter().filter(|s| is_gpu_main_store(&s.event)).map(|s| s.verdict.code().to_string()).collect();
            assert_eq!(main.len(), 20, "{who}");
            if block_size == 1536 {
                assert!(main.iter().all(|c| c == "store device 1"), "{who}: {main:?}");
                // 20 group 3 stores and 4 group 3 removals (docs/dynamo-1.6.1.md, section 8).
                assert_eq!(c.verdicts(Some(StorageTier::Device), VerdictLabel::Store), 20, "{who}");
                assert_eq!(c.verdicts(Some(StorageTier::Device), VerdictLabel::Remove), 4, "{who}");
                assert_eq!(c.verdicts_by_label(VerdictLabel::NonMainAttentionKind), 60, "{who}");
                assert_eq!(c.verdicts_by_label(VerdictLabel::NonMainAttentionGroup), 12, "{who}");
                assert_eq!(c.conversion.total(), 0, "{who}");
            } else {
                assert!(main.iter().all(|c| c == "store device 0 +block_size_differs"), "{who}: {main:?}");
                // Nothing is indexed; the only blocks applied are group 3's 4 removals, of blocks
                // that were never stored.
                assert_eq!(c.blocks_applied, 4, "{who}");
                assert_eq!((c.conversion.emitted, c.conversion.suppressed), (3, 17), "{who}");
                assert_eq!(
                    c.log()[0].to_string(),
                    format!(
                        "WARN {} seq 0 event 3: Block not published. Block size must be 12288 tokens to be published. \
                         Block size is: 1536",
                        n.source_key(*id)
                    )
                );
            }
        }
    }
}

/// A source at its own block size (a fleet of two models) is classified exactly as a normalizer
/// at that size classifies it, whatever the normalizer's own size.
#[test]
fn a_source_s_own_block_size_is_the_one_it_is_classified_at() {
    for policy in [Policy::LEGACY, Policy::FIXED, Policy::DYNAMO_1_6_1] {
        let (_, want) = replay(1536, policy);
        let (n, got) = replay_at(16, Some(1536), policy);
        for ((id, got), (_, want)) in got.iter().zip(&want) {
            assert_eq!(n.block_size_of(*id), 1536);
            let labels = |seen: &[Seen]| seen.iter().map(|s| (s.seq, s.verdict.label())).collect::<Vec<_>>();
            assert_eq!(labels(got), labels(want), "{}", policy.name);
        }
    }
}
