//! kvscope-index's model of Dynamo 1.6.1's index against Dynamo's own (`dynamo-kv-router`'s
//! compressed radix tree and lower-tier indexer, [`kvscope_peer_bench::dynamo_index`]), on
//! random event streams: after every stream, the blocks each worker holds per tier (what
//! `/dump` lists) and the device scores of every prefix the stream named are equal.
//!
//! The streams are small on purpose (a few tokens hashes, a few block hashes, three workers and
//! ranks) so that shared prefixes, same tokens under other block hashes, removals mid-edge,
//! stores under removed or uncovered parents and clears all happen often.

use std::collections::BTreeMap;

use kvscope_index::DynamoIndex;
use kvscope_peer_bench::dynamo_index::DynamoOracle;
use kvscope_router::{EventData, KvCacheEvent, PlaneTier, RemovedData, RouterEvent, StoredBlock, StoredData};
use proptest::prelude::*;

const WORKERS: [(u64, u32); 3] = [(1, 0), (2, 0), (1, 1)];

#[derive(Clone, Debug)]
enum Op {
    /// worker, tier (0 device, 1 host), parent pick, blocks as (tokens, block-hash salt).
    Store(usize, u8, Option<usize>, Vec<(u64, u64)>),
    Remove(usize, u8, Vec<usize>),
    Clear(usize),
    /// The device tree's sweep of stale leaves, which the real indexer runs every 5 minutes.
    Sweep,
}

/// What an op does to both indexes.
#[derive(Debug)]
enum Step {
    Apply(RouterEvent),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, prop_oneof![4 => Just(0u8), 1 => Just(1u8)], proptest::option::weighted(0.7, 0..64usize), proptest::collection::vec((0..5u64, 0..3u64), 0..5))
            .prop_map(|(w, t, p, b)| Op::Store(w, t, p, b)),
        3 => (0..3usize, prop_oneof![4 => Just(0u8), 1 => Just(1u8)], proptest::collection::vec(0..64usize, 1..4)).prop_map(|(w, t, h)| Op::Remove(w, t, h)),
        1 => (0..3usize).prop_map(Op::Clear),
        1 => Just(Op::Sweep),
    ]
}

fn event(w: (u64, u32), tier: u8, data: EventData, id: u64) -> RouterEvent {
    let storage_tier = if tier == 0 || matches!(data, EventData::Cleared) { PlaneTier::Device } else { PlaneTier::HostPinned };
    RouterEvent {
        worker_id: w.0,
        storage_tier,
        residency_domain: Some("worker".into()),
        event: KvCacheEvent { event_id: id, data, dp_rank: w.1 },
    }
}

/// Turns ops into events. Block hashes chain like an engine's (parent and tokens, plus a salt
/// that makes "same tokens, other hash" happen); the pool of hashes named so far gives parents
/// and removals. Also returns every prefix a store named, as tokens hashes from the root.
fn events(ops: &[Op]) -> (Vec<Step>, Vec<Vec<u64>>) {
    let mut pool: Vec<u64> = Vec::new();
    let mut path: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut prefixes = Vec::new();
    for (id, op) in ops.iter().enumerate() {
        let id = id as u64;
        match op {
            Op::Store(w, tier, parent, blocks) => {
                let parent = parent.and_then(|i| pool.get(i % pool.len().max(1)).copied());
                let mut tokens = parent.and_then(|p| path.get(&p).cloned()).unwrap_or_default();
                let mut prev = parent.unwrap_or(0);
                let mut stored = Vec::new();
                for &(t, salt) in blocks {
                    let hash = prev.wrapping_mul(31).wrapping_add(t * 7 + salt * 1000 + 1) % 1_000_003;
                    tokens.push(t);
                    path.entry(hash).or_insert_with(|| tokens.clone());
                    if !pool.contains(&hash) {
                        pool.push(hash);
                    }
                    stored.push(StoredBlock { block_hash: hash, tokens_hash: t });
                    prev = hash;
                }
                if !tokens.is_empty() {
                    prefixes.push(tokens);
                }
                out.push(Step::Apply(event(
                    WORKERS[*w],
                    *tier,
                    EventData::Stored(StoredData { parent_hash: parent, start_position: None, blocks: stored }),
                    id,
                )));
            }
            Op::Remove(w, tier, picks) => {
                let hashes = picks.iter().filter_map(|i| pool.get(i % pool.len().max(1)).copied()).collect();
                out.push(Step::Apply(event(WORKERS[*w], *tier, EventData::Removed(RemovedData { block_hashes: hashes }), id)));
            }
            Op::Clear(w) => out.push(Step::Apply(event(WORKERS[*w], 0, EventData::Cleared, id))),
            Op::Sweep => out.push(Step::Sweep),
        }
    }
    (out, prefixes)
}

fn compare(ops: &[Op]) -> Result<(), TestCaseError> {
    let (events, prefixes) = events(ops);
    let mut model = DynamoIndex::new();
    let mut real = DynamoOracle::new(16);
    for step in &events {
        match step {
            Step::Apply(e) => {
                let _ = model.apply(e);
                real.apply(e);
            }
            Step::Sweep => {
                model.sweep();
                real.sweep();
            }
        }
    }
    prop_assert_eq!(model.block_sets(), real.block_sets(), "block sets after {:#?}", events);
    for p in &prefixes {
        prop_assert_eq!(model.find_matches(p), real.find_matches(p), "scores of {:?} after {:#?}", p, events);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn index_model_holds_and_scores_what_dynamos_index_does(ops in proptest::collection::vec(op(), 1..24)) {
        compare(&ops)?;
    }
}

/// The cases the spec names, one by one (docs/dynamo-1.6.1-index.md), so a failure names the
/// rule: each is a list of ops the property test might never draw together.
#[test]
fn index_model_named_cases() {
    use Op::*;
    let cases: Vec<(&str, Vec<Op>)> = vec![
        ("leaf extension", vec![Store(0, 0, None, vec![(1, 0), (2, 0)]), Store(0, 0, Some(1), vec![(3, 0)])]),
        ("unknown parent", vec![Store(0, 0, None, vec![(1, 0)]), Store(1, 0, Some(0), vec![(2, 0)])]),
        ("mid-edge removal cuts the rest", vec![Store(0, 0, None, vec![(1, 0), (2, 0), (3, 0)]), Remove(0, 0, vec![1])]),
        ("same tokens, other hashes", vec![Store(0, 0, None, vec![(1, 0), (2, 0)]), Store(1, 0, None, vec![(1, 1), (2, 1), (3, 1)])]),
        (
            "removal with children",
            vec![
                Store(0, 0, None, vec![(1, 0)]),
                Store(0, 0, Some(0), vec![(2, 0)]),
                Store(0, 0, Some(0), vec![(3, 0)]),
                Remove(0, 0, vec![0]),
            ],
        ),
        ("clear", vec![Store(0, 0, None, vec![(1, 0), (2, 0)]), Store(1, 0, None, vec![(1, 0)]), Clear(0)]),
        ("host tier under an unknown parent", vec![Store(0, 1, Some(5), vec![(1, 0), (2, 0)])]),
        // W1 holds [A, X], W2 holds [A, B] and then drops A: at B the walk has as many active
        // workers (W1) as B has full ones (W2), so it checks nobody and W1 scores [A, B].
        (
            "equal-size skip overcount",
            vec![Store(0, 0, None, vec![(1, 0), (4, 0)]), Store(1, 0, None, vec![(1, 0), (2, 0)]), Remove(1, 0, vec![0])],
        ),
        // An emptied leaf stays linked until the sweep: the same tokens under another hash land
        // on it (and /dump lists its first hash); after the sweep they make a node of their own.
        ("an emptied leaf before the sweep", vec![Store(0, 0, None, vec![(1, 0)]), Remove(0, 0, vec![0]), Store(1, 0, None, vec![(1, 1)])]),
        (
            "an emptied leaf after the sweep",
            vec![Store(0, 0, None, vec![(1, 0)]), Remove(0, 0, vec![0]), Sweep, Store(1, 0, None, vec![(1, 1)])],
        ),
        (
            "a sweep keeps a cut-off child a lookup holds",
            vec![
                Store(0, 0, None, vec![(1, 0), (2, 0)]),
                Store(0, 0, Some(0), vec![(3, 0)]),
                Remove(0, 0, vec![0]),
                Sweep,
                Store(0, 0, Some(1), vec![(4, 0)]),
                Store(1, 0, None, vec![(1, 1)]),
            ],
        ),
        (
            "same hash under two parents",
            vec![
                Store(0, 0, None, vec![(1, 0), (2, 0)]),
                Store(0, 0, Some(0), vec![(3, 0)]),
                Store(0, 0, Some(1), vec![(3, 0)]),
                Remove(0, 0, vec![3]),
            ],
        ),
    ];
    for (name, ops) in cases {
        compare(&ops).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
