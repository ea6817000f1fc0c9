//! Dynamo 1.6.1's tree sweeps its empty leaves every 5 minutes, and the model sweeps on the
//! stream's clock (the batches' publish times): until the sweep, a block stored with the tokens
//! of an emptied leaf lands on it, and the index lists the leaf's first hash for it (a block the
//! engine evicted); after it, the store makes a node of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch_lossy, release};
use kvscope_index::{IndexConfig, IndexModel, IndexSourceId, SWEEP_INTERVAL_SECS};
use kvscope_normalize::Policy;

const START: f64 = 1_765_000_000.0;

fn payload(ts: f64, events: Vec<Event>) -> Vec<u8> {
    encode_batch_lossy(&release::VLLM_0_33.layout, &Batch { ts, events, dp_rank: Some(0) }).unwrap()
}

/// A device store of one 16-token block at the root, its tokens chosen by `tokens`.
fn store(hash: u64, tokens: u32) -> Event {
    Stored::new([Hash::U64(hash)], 16).tokens((0..16).map(move |t| tokens * 100 + t)).medium(Some("GPU")).into()
}

fn remove(hash: u64) -> Event {
    Removed::new([Hash::U64(hash)]).medium(Some("GPU")).into()
}

struct Fleet {
    model: IndexModel,
    id: IndexSourceId,
    seq: u64,
}

impl Fleet {
    fn new() -> Fleet {
        let mut model = IndexModel::new(IndexConfig::new(16, Policy::DYNAMO_1_6_1));
        let id = model.add_source("7:0", "7", 0);
        Fleet { model, id, seq: 0 }
    }

    fn push(&mut self, at: f64, events: Vec<Event>) {
        self.model.push(self.id, self.seq, &payload(START + at, events), false).unwrap();
        self.seq += 1;
    }

    fn nodes(&self) -> usize {
        self.model.index().device().nodes()
    }

    /// The device tier's blocks only the engine holds and only the index holds, by cause.
    fn differences(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let device = self.model.report().totals.tiers.remove("device").unwrap_or_default();
        (device.engine_only, device.router_only)
    }
}

#[test]
fn before_the_sweep_an_emptied_leaf_takes_a_store_of_its_tokens_under_its_first_hash() {
    let mut f = Fleet::new();
    f.push(0.0, vec![store(11, 1)]);
    f.push(10.0, vec![remove(11)]);
    assert_eq!(f.nodes(), 2, "the root and the emptied leaf, which the root still links");
    // The same tokens under another hash, 4 minutes later: no sweep yet.
    f.push(240.0, vec![store(12, 1)]);
    assert_eq!(f.model.index().sweeps(), 0);
    let (engine_only, router_only) = f.differences();
    assert_eq!(engine_only, BTreeMap::from([("under_other_hash".to_owned(), 1)]), "the engine's 12");
    assert_eq!(router_only, BTreeMap::from([("listed_for_other_hash".to_owned(), 1)]), "the leaf's 11, which the engine evicted");
}

#[test]
fn after_the_sweep_a_store_of_an_emptied_leaf_s_tokens_makes_its_own_node() {
    let mut f = Fleet::new();
    f.push(0.0, vec![store(11, 1)]);
    f.push(10.0, vec![remove(11)]);
    // A batch that changes nothing, just before the interval ends, then one at its end.
    f.push(SWEEP_INTERVAL_SECS - 1.0, vec![remove(99)]);
    assert_eq!((f.model.index().sweeps(), f.nodes()), (0, 2));
    f.push(SWEEP_INTERVAL_SECS, vec![remove(99)]);
    assert_eq!((f.model.index().sweeps(), f.nodes()), (1, 1), "the sweep unlinked the emptied leaf");
    f.push(SWEEP_INTERVAL_SECS + 10.0, vec![store(12, 1)]);
    let (engine_only, router_only) = f.differences();
    assert!(engine_only.is_empty() && router_only.is_empty(), "{engine_only:?} {router_only:?}");
}

#[test]
fn a_clock_that_goes_back_or_is_not_a_time_does_not_sweep() {
    let mut f = Fleet::new();
    f.push(0.0, vec![store(11, 1)]);
    f.push(10.0, vec![remove(11)]);
    f.push(-1_000.0, vec![remove(99)]);
    f.push(f64::NAN, vec![remove(99)]);
    f.push(SWEEP_INTERVAL_SECS - 1.0, vec![remove(99)]);
    assert_eq!(f.model.index().sweeps(), 0);
}

#[test]
fn a_long_stream_of_prompts_that_come_and_go_keeps_a_bounded_tree() {
    // Every batch stores a new prompt of 4 blocks and evicts the one before: at 10 batches a
    // second for 30 minutes, 18,000 prompts pass through a tree that holds one at a time.
    let mut f = Fleet::new();
    let mut most = 0;
    for i in 0..18_000u64 {
        let at = i as f64 / 10.0;
        let hashes: Vec<u64> = (0..4).map(|b| 1_000 + i * 4 + b).collect();
        let mut events: Vec<Event> = Vec::new();
        let mut parent = None;
        for (b, &h) in hashes.iter().enumerate() {
            let tokens = (i * 4 + b as u64) as u32;
            let s = Stored::new([Hash::U64(h)], 16).parent(parent.map(Hash::U64)).tokens((0..16).map(move |t| tokens * 100 + t));
            events.push(s.medium(Some("GPU")).into());
            parent = Some(h);
        }
        if i > 0 {
            events.push(Removed::new((0..4).map(|b| Hash::U64(1_000 + (i - 1) * 4 + b))).medium(Some("GPU")).into());
        }
        f.push(at, events);
        most = most.max(f.nodes());
    }
    assert_eq!(f.model.index().sweeps(), 5, "one sweep per 5 minutes of the stream");
    // Between two sweeps the emptied leaves of 3,000 prompts wait; never more.
    assert!(most <= 2 + 3_001, "the tree kept {most} nodes");
    let (engine_only, router_only) = f.differences();
    assert!(engine_only.is_empty() && router_only.is_empty(), "{engine_only:?} {router_only:?}");
}

#[test]
fn the_node_bound_counts_what_the_index_keeps_so_the_sweep_lifts_it() {
    let mut config = IndexConfig::new(16, Policy::DYNAMO_1_6_1);
    config.max_blocks = 8;
    let mut f = Fleet { model: IndexModel::new(config), ..Fleet::new() };
    f.id = f.model.add_source("7:0", "7", 0);
    // Prompts that come and go: each leaves an emptied leaf, until the tree keeps 8 nodes.
    for i in 0..10u64 {
        f.push(i as f64, vec![store(100 + i, 1 + i as u32), remove(100 + i)]);
    }
    assert_eq!(f.nodes(), 8, "the root and 7 emptied leaves");
    assert_eq!(f.model.report().refused_blocks, 3, "the stores past the bound are refused and counted");
    f.push(SWEEP_INTERVAL_SECS, vec![remove(99)]);
    assert_eq!(f.nodes(), 1);
    f.push(SWEEP_INTERVAL_SECS + 1.0, vec![store(200, 50)]);
    let (engine_only, router_only) = f.differences();
    assert!(engine_only.is_empty() && router_only.is_empty(), "{engine_only:?} {router_only:?}");
    assert_eq!(f.model.report().refused_blocks, 3, "no store refused after the sweep");
}
