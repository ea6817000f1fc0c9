//! Two engines that hash the same tokens differently (vLLM seeds its block hashes per process
//! unless PYTHONHASHSEED is set): Dynamo 1.6.1's index keeps the first writer's hashes for
//! those tokens (docs/dynamo-1.6.1-index.md, 2.5 and 9.1). The second worker's blocks are
//! missing as `under_other_hash`; on the device tier the index lists the first writer's hashes
//! for it instead, `listed_for_other_hash`, which its removals cannot take out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch_lossy, release};
use kvscope_index::{IndexConfig, IndexModel};
use kvscope_normalize::Policy;

fn payload(events: Vec<Event>) -> Vec<u8> {
    encode_batch_lossy(&release::VLLM_0_33.layout, &Batch { ts: 1.0, events, dp_rank: Some(0) }).unwrap()
}

/// A chain of 16-token blocks from the root: block `i` has tokens `tokens[i]` and hash
/// `salt + i`.
fn chain(salt: u64, tokens: &[u32], medium: &str) -> Event {
    let hashes: Vec<Hash> = (0..tokens.len() as u64).map(|i| Hash::U64(salt + i)).collect();
    let ids: Vec<u32> = tokens.iter().flat_map(|&t| (0..16).map(move |i| t * 100 + i)).collect();
    Stored::new(hashes, 16).tokens(ids).medium(Some(medium)).into()
}

fn remove(hashes: &[u64], medium: &str) -> Event {
    Removed::new(hashes.iter().map(|&h| Hash::U64(h))).medium(Some(medium)).into()
}

type ByCause = BTreeMap<String, u64>;

/// Worker 7's and worker 8's batches, in turns: each one's blocks only the engine holds and
/// only the index holds, on `tier`, by cause.
fn differences(batches: Vec<(u8, Vec<Event>)>, tier: &str) -> BTreeMap<String, (ByCause, ByCause)> {
    let mut m = IndexModel::new(IndexConfig::new(16, Policy::DYNAMO_1_6_1));
    let ids = [m.add_source("7:0", "7", 0), m.add_source("8:0", "8", 0)];
    let mut seq = [0u64; 2];
    for (worker, events) in batches {
        let i = usize::from(worker - 7);
        m.push(ids[i], seq[i], &payload(events), false).unwrap();
        seq[i] += 1;
    }
    m.report()
        .sources
        .into_iter()
        .map(|s| {
            let t = s.counts.tiers.get(tier).cloned().unwrap_or_default();
            (s.key, (t.engine_only, t.router_only))
        })
        .collect()
}

fn by(cause: &str, n: u64) -> ByCause {
    BTreeMap::from([(cause.to_owned(), n)])
}

#[test]
fn the_second_writer_of_the_same_tokens_is_listed_under_the_first_writer_s_hashes() {
    let d = differences(vec![(7, vec![chain(100, &[1, 2], "GPU")]), (8, vec![chain(200, &[1, 2, 3], "GPU")])], "device");
    assert_eq!(d["7:0"], (ByCause::new(), ByCause::new()), "the first writer holds its own");
    // 8's [1, 2] land on 7's node, listed under 100 and 101; its block 3 is rejected there
    // (the walk looks for 201 on that node).
    let engine_only = BTreeMap::from([("foreign_edge".to_owned(), 1), ("under_other_hash".to_owned(), 2)]);
    assert_eq!(d["8:0"], (engine_only, by("listed_for_other_hash", 2)));
}

#[test]
fn the_second_writer_s_removals_cannot_take_the_first_writer_s_hashes_out() {
    let d = differences(
        vec![(7, vec![chain(100, &[1, 2], "GPU")]), (8, vec![chain(200, &[1, 2], "GPU")]), (8, vec![remove(&[200, 201], "GPU")])],
        "device",
    );
    assert_eq!(d["8:0"], (ByCause::new(), by("listed_for_other_hash", 2)), "evicted by the engine, still listed for 8");
}

#[test]
fn on_a_lower_tier_the_first_writer_s_edge_stops_the_second_writer_s_store() {
    let d = differences(vec![(7, vec![chain(100, &[1, 2], "CPU")]), (8, vec![chain(200, &[1, 2, 3], "CPU")])], "host_pinned");
    assert_eq!(d["7:0"], (ByCause::new(), ByCause::new()));
    // The edge (root, 1) leads to 100: 8's walk stops at its first block, and the rest go too.
    assert_eq!(d["8:0"], (by("under_other_hash", 3), ByCause::new()));
}
