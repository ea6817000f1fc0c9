//! The model against what Dynamo 1.6.1's real standalone indexer held after known streams
//! (`tests/fixtures/dynamo-indexer`: its `GET /dump` after vLLM 0.33's own publisher sent
//! corpus payloads as worker 7 at block size 16): the same blocks per worker, rank and tier.
//! The live tests (`server/tests/it/router_index.rs`) run the indexer itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kvscope_index::{IndexConfig, IndexModel};
use kvscope_normalize::{Policy, StorageTier};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dynamo-indexer")
}

fn stream(name: &str) -> Vec<&'static [u8]> {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.stream.jsonl"))).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            kvscope_corpus::payload(v["payload_file"].as_str().unwrap()).unwrap()
        })
        .collect()
}

type Sets = BTreeMap<((u64, u32), StorageTier), BTreeSet<u64>>;

fn dump(name: &str) -> Sets {
    let parts = kvscope_index::parse_dump(&std::fs::read(fixtures().join(format!("{name}.dump.json"))).unwrap()).unwrap();
    let sets = kvscope_index::dump_block_sets(&parts);
    // The index the dump describes, rebuilt, holds the same blocks.
    assert_eq!(kvscope_index::DynamoIndex::from_dump(&parts).block_sets(), sets, "{name}");
    sets
}

/// The model fed the stream from batch `from` on (an indexer that joined there).
fn model(payloads: &[&[u8]], from: usize) -> IndexModel {
    let mut m = IndexModel::new(IndexConfig::new(16, Policy::DYNAMO_1_6_1));
    let id = m.add_source("7:0", "7", 0);
    for (seq, p) in payloads.iter().enumerate().skip(from) {
        let _ = m.push(id, seq as u64, p, false);
    }
    m
}

#[test]
fn the_four_batches_leave_16_host_blocks_and_no_device_block() {
    let m = model(&stream("four"), 0);
    let want = dump("four");
    assert_eq!(want.keys().map(|(w, t)| (*w, t.label())).collect::<Vec<_>>(), [((7, 0), "host_pinned")]);
    assert_eq!(want.values().next().unwrap().len(), 16);
    assert_eq!(m.index().block_sets(), want);
    // Both device stores named a parent the index never saw.
    let r = m.report();
    let device = &r.totals.tiers["device"];
    assert_eq!(device.router_blocks, 0);
    assert!(device.engine_only.keys().all(|k| k.starts_with("orphan:")), "{device:?}");
    assert_eq!(r.totals.visible_prefix_tokens, 0);
}

#[test]
fn the_17_vllm_0_33_batches_leave_what_the_real_index_held() {
    let m = model(&stream("mixed"), 0);
    assert_eq!(m.index().block_sets(), dump("mixed"));
}

#[test]
fn an_indexer_that_joined_late_holds_what_it_saw_from_some_batch_on() {
    let payloads = stream("mixed");
    let want = dump("mixed-late");
    let joins: Vec<usize> = (0..payloads.len()).filter(|&k| model(&payloads, k).index().block_sets() == want).collect();
    // The recording says "6 s late (after about 8 batches)" at 0.4 s a batch.
    assert!(joins.iter().any(|k| (6..=10).contains(k)), "no join point in 6..=10 gives the recorded dump; these do: {joins:?}");
    assert_ne!(want, dump("mixed"));
}

/// Counts cross between the page's engine workers: they read back, and a tier that is none
/// is an error that names it.
#[test]
fn an_index_s_counts_read_back_and_a_tier_that_is_none_is_named() {
    let totals = model(&stream("mixed"), 0).report().totals;
    assert!(totals.tiers.len() >= 2, "{totals:?}");
    let json = serde_json::to_string(&totals).unwrap();
    assert_eq!(serde_json::from_str::<kvscope_index::IndexCounts>(&json).unwrap(), totals);
    let bogus = json.replace("\"host_pinned\":", "\"hbm\":");
    assert_ne!(bogus, json);
    let err = serde_json::from_str::<kvscope_index::IndexCounts>(&bogus).unwrap_err().to_string();
    assert!(err.contains("\"hbm\" is no storage tier"), "{err}");
}
