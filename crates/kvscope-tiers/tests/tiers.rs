//! Integration tests of the tier trees, one module per area:
//! - `host_tier`: the regression that made this crate's tiers matter (cpu events on HostPinned);
//! - `vectors`: the shared normalizer vector table, run with trees, checking tree sizes too;
//! - `bounds`: the memory bound and a million live blocks.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod host_tier {
    use kvscope_corpus::vectors::{EventSpec, encode_batch};
    use kvscope_normalize::{Normalizer, Policy, StorageTier};
    use kvscope_tiers::{Forest, ForestConfig};

    fn payload(events: &str) -> Vec<u8> {
        let events: Vec<EventSpec> = serde_json::from_str(events).unwrap();
        encode_batch(1.0, &events, Some(0), false).unwrap()
    }

    /// Pushes payloads through a normalizer and applies the verdicts to a forest.
    fn run(policy: Policy, block_size: u32, frames: &[(u64, Vec<u8>)]) -> (Normalizer, Forest, Vec<String>) {
        let mut n = Normalizer::new(block_size, policy);
        let mut forest = Forest::new(ForestConfig::unbounded());
        let w0 = n.source("w0", 0);
        let mut codes = Vec::new();
        let mut verdicts = Vec::new();
        for (seq, bytes) in frames {
            verdicts.clear();
            let batch = n.push_payload(w0, *seq, bytes, &mut verdicts).unwrap();
            forest.apply_batch(&batch, &verdicts);
            codes.extend(verdicts.iter().map(|v| v.code().to_string()));
        }
        (n, forest, codes)
    }

    /// Before the fix, medium `cpu` matched no tier and fell back to Device: the offload
    /// connector's BlockStored landed in the GPU tree, and its BlockRemoved (same hash, since a
    /// CPU block is named after the last GPU block it covers) evicted the block from the GPU tree
    /// while the GPU still held it. Now cpu stores and removes land on HostPinned and the Device
    /// tree keeps its block.
    #[test]
    fn test_normalizer_keeps_cpu_events_on_the_host_tier() {
        let frames = vec![
            (
                0,
                payload(
                    r#"[{"type":"BlockStored","hashes":[100,200],"block_size":16,"medium":"GPU","group_idx":0,"kind":"full_attention"}]"#,
                ),
            ),
            (1, payload(r#"[{"type":"BlockStored","hashes":[200],"block_size":16,"tokens":16,"medium":"cpu","group_idx":0}]"#)),
            (2, payload(r#"[{"type":"BlockRemoved","hashes":[200],"medium":"cpu","group_idx":0}]"#)),
        ];
        let (n, forest, codes) = run(Policy::FIXED, 16, &frames);
        assert_eq!(codes, ["store device 2", "store host_pinned 1", "remove host_pinned 1"]);
        let w0 = n.find_source("w0", 0).unwrap();
        let device = forest.tree(w0, StorageTier::Device).unwrap();
        let host = forest.tree(w0, StorageTier::HostPinned).unwrap();
        assert!(device.contains(200), "the host-tier remove must not evict the GPU block");
        assert_eq!(device.len(), 2);
        assert_eq!(host.len(), 0);
        assert_eq!((host.counters().stores_applied, host.counters().removes_applied), (1, 1));
        assert_eq!(forest.counters(w0, StorageTier::Device).block_not_found, 0);

        // The same stream under legacy reproduces the bug: the cpu remove evicts block 200 from
        // the Device tree, and the cpu store was a duplicate there.
        let (n, forest, codes) = run(Policy::LEGACY, 16, &frames);
        assert_eq!(codes, ["store device 2", "store device 1 +unknown_medium_fallback", "remove device 1 +unknown_medium_fallback"]);
        let w0 = n.find_source("w0", 0).unwrap();
        let device = forest.tree(w0, StorageTier::Device).unwrap();
        assert!(!device.contains(200));
        assert_eq!(device.counters().duplicate_store, 1);
        assert_eq!(forest.blocks(w0), [1, 0, 0, 0]);
    }

    /// The same story on the real Kimi-K3 stream of worker 0 at --block-size 1536: the cpu
    /// removal at seq 12 names 1186014664663200524, the hash of the GPU block stored at seq 7
    /// (the GPU never removes it in this stream). Under fixed it stays in the Device tree; under
    /// legacy the removal, filed on Device, evicts it.
    #[test]
    fn test_kimi_k3_cpu_removal_leaves_the_gpu_block_in_place() {
        const GPU_BLOCK: u64 = 1186014664663200524;
        let frames: Vec<(u64, Vec<u8>)> = kvscope_corpus::kimi_k3_stream(0).iter().map(|m| (m.seq, m.payload.to_vec())).collect();
        assert_eq!(frames.len(), 20);
        let (n, forest, _) = run(Policy::FIXED, 1536, &frames);
        let w0 = n.find_source("w0", 0).unwrap();
        assert!(forest.tree(w0, StorageTier::Device).unwrap().contains(GPU_BLOCK));
        assert_eq!(forest.blocks(w0), [16, 0, 0, 0], "20 group-3 GPU blocks stored, 4 removed; cpu stores skipped");
        // Both cpu removals name blocks whose stores were skipped (12288 != 1536): not found.
        assert_eq!(forest.counters(w0, StorageTier::HostPinned).block_not_found, 2);

        let (n, forest, _) = run(Policy::LEGACY, 1536, &frames);
        let w0 = n.find_source("w0", 0).unwrap();
        assert!(!forest.tree(w0, StorageTier::Device).unwrap().contains(GPU_BLOCK));
    }
}

mod vectors {
    use std::collections::BTreeMap;

    use kvscope_corpus::vectors::{
        OutVerdict, VectorCase, VectorHost, VectorOutput, case_count, decode_error_code, run_vectors, source_outputs,
    };
    use kvscope_normalize::{Normalizer, Policy, StorageTier};
    use kvscope_tiers::{Forest, ForestConfig};

    /// A normalizer and a forest: also checks the vectors' expected tree sizes.
    struct TreeHost;

    impl VectorHost for TreeHost {
        fn name(&self) -> &str {
            "native+tiers"
        }

        fn corpus_payload(&self, file: &str) -> Option<Vec<u8>> {
            kvscope_corpus::payload(file).map(<[u8]>::to_vec)
        }

        fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
            let policy: Policy = case.policy.parse().map_err(|e| format!("{e}"))?;
            let mut n = Normalizer::new(case.block_size, policy);
            let mut forest = Forest::new(ForestConfig::unbounded());
            let mut out = VectorOutput::default();
            let mut verdicts = Vec::new();
            for frame in case.frames {
                let id = n.source(&frame.worker_id, frame.dp_rank);
                verdicts.clear();
                match n.push_payload(id, frame.seq, &frame.payload, &mut verdicts) {
                    Ok(batch) => {
                        forest.apply_batch(&batch, &verdicts);
                        out.verdicts.extend(verdicts.iter().map(OutVerdict::from_verdict));
                    }
                    Err(e) => out.verdicts.push(OutVerdict { code: decode_error_code(&e), text: e.to_string() }),
                }
            }
            out.sources = source_outputs(&n);
            for (s, (id, _)) in out.sources.iter_mut().zip(n.sources()) {
                let blocks = forest.blocks(id);
                s.trees =
                    Some(StorageTier::ALL.iter().map(|t| (t.label().to_owned(), blocks[t.index()] as u64)).collect::<BTreeMap<_, _>>());
            }
            Ok(out)
        }
    }

    #[test]
    fn test_vectors_pass_with_tier_trees() {
        let report = run_vectors(&mut TreeHost);
        report.assert_ok(case_count());
        assert_eq!(report.tree_checks_skipped, 0, "this host keeps trees, so every tree expectation is checked");
    }
}

mod bounds {
    use kvscope_corpus::vectors::{EventSpec, HashSpec, encode_batch};
    use kvscope_normalize::{Normalizer, Policy, StorageTier};
    use kvscope_tiers::{Forest, ForestConfig};

    fn store_payload(hashes: std::ops::Range<u64>, parent: Option<u64>) -> Vec<u8> {
        let spec = EventSpec {
            tag: "BlockStored".into(),
            hashes: hashes.map(HashSpec::Unsigned).collect(),
            parent: parent.map(HashSpec::Unsigned),
            tokens: None,
            block_size: Some(16),
            medium: Some("GPU".into()),
            group_idx: None,
            kind: None,
            ..Default::default()
        };
        encode_batch(0.0, &[spec], Some(0), false).unwrap()
    }

    /// The bound stops growth, counts what it refused and says when it was first hit; removals
    /// make room again.
    #[test]
    fn test_memory_bound_stops_growth_and_reports_refused_stores() {
        let mut n = Normalizer::new(16, Policy::FIXED);
        let mut forest = Forest::new(ForestConfig { max_blocks_per_tier: Some(10), ..Default::default() });
        let w0 = n.source("w0", 0);
        let mut verdicts = Vec::new();
        for (seq, range) in [(0, 0..6), (1, 6..12), (2, 12..14)] {
            verdicts.clear();
            let batch = n.push_payload(w0, seq, &store_payload(range, None), &mut verdicts).unwrap();
            forest.apply_batch(&batch, &verdicts);
        }
        assert_eq!(forest.blocks(w0), [10, 0, 0, 0]);
        let limit = *forest.limit();
        assert!(limit.hit);
        assert_eq!((limit.first_hit_seq, limit.refused_stores, limit.refused_blocks), (Some(1), 2, 4));
        let c = forest.counters(w0, StorageTier::Device);
        assert_eq!((c.refused_stores, c.refused_blocks), (2, 4));
        assert_eq!(n.counters(w0).blocks_applied, 14, "the normalizer applied them; the forest refused 4");

        let total = Forest::new(ForestConfig::with_max_bytes(10 * ForestConfig::BYTES_PER_BLOCK));
        assert_eq!(total.config().max_total_blocks, Some(10));
    }

    /// A million live blocks in one tier, as one long chain (the deepest shape, a stress for any
    /// recursive walk) plus a wide fan: insert, summarise and drill down without recursion, and
    /// stay near the per-block byte estimate.
    #[test]
    fn test_a_million_live_blocks_per_worker_fit() {
        use kvscope_tiers::{OrphanPolicy, TierTree};
        const N: u64 = 1_000_000;
        let mut t = TierTree::new();
        let chain: Vec<u64> = (1..=N / 2).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        t.store(&chain, None, 0, 0.0, usize::MAX, OrphanPolicy::KeepAsRoot);
        for i in 0..N / 2 {
            t.store(&[N * 4 + i], Some(chain[(i % 1000) as usize]), 1, 0.0, usize::MAX, OrphanPolicy::KeepAsRoot);
        }
        assert_eq!(t.len(), N as usize);
        let s = t.summary(3);
        assert_eq!((s.blocks, s.roots, s.max_depth), (N as usize, 1, (N / 2) as u32));
        assert_eq!(s.largest[0].blocks, N as usize);
        let icicle = t.subtree(None, 3, 4).unwrap();
        assert_eq!(icicle[0].blocks, N as usize);
        let bytes = t.approx_bytes();
        eprintln!("{N} live blocks: {} MB", bytes / 1_000_000);
        assert!(bytes < 100 * N as usize, "{bytes} bytes for {N} blocks");
        t.remove(&chain[..10]);
        assert_eq!(t.len(), N as usize - 10);
    }
}
