//! Sides whose policies give their indexers the same events share one index, and fork it where
//! they part (an event, a batch taken or not, an indexer's exit): each side of a model with
//! several policies reports exactly what a model of that policy alone reports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch_lossy, release};
use kvscope_index::{IndexConfig, IndexModel, IndexSide};
use kvscope_normalize::Policy;

/// One source's batches: its key, worker id, and (seq, payload) in the order received.
type SourceStream = (String, String, Vec<(u64, Vec<u8>)>);

fn feed(policies: &[Policy], block_size: u32, streams: &[SourceStream]) -> IndexModel {
    let mut m = IndexModel::new(IndexConfig::sides(block_size, policies));
    let ids: Vec<_> = streams.iter().map(|(key, worker, _)| m.add_source(key, worker, 0)).collect();
    // Round-robin over the sources, as a fleet interleaves.
    let longest = streams.iter().map(|s| s.2.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (id, (_, _, batches)) in ids.iter().zip(streams) {
            if let Some((seq, payload)) = batches.get(i) {
                let _ = m.push(*id, *seq, payload, false);
            }
        }
    }
    m
}

/// Every side of the model of all `policies` against a model of its policy alone; returns the
/// forks the shared model made.
fn each_side_reports_what_its_policy_alone_does(policies: &[Policy], block_size: u32, streams: &[SourceStream]) -> u64 {
    let all = feed(policies, block_size, streams);
    for (k, &policy) in policies.iter().enumerate() {
        let alone = feed(&[policy], block_size, streams);
        let side = IndexSide(k);
        assert_eq!(all.report_of(side), alone.report(), "{}: the report", policy.name);
        assert_eq!(all.index_of(side).block_sets(), alone.index().block_sets(), "{}: the blocks", policy.name);
        assert_eq!(all.index_of(side).device().nodes(), alone.index().device().nodes(), "{}: the nodes", policy.name);
        assert_eq!(all.index_of(side).sweeps(), alone.index().sweeps(), "{}: the sweeps", policy.name);
    }
    all.forks()
}

fn corpus(name: &str, key: &str, worker: &str) -> SourceStream {
    let batches = kvscope_corpus::stream(name).unwrap().into_iter().map(|m| (m.seq, m.payload.to_vec())).collect();
    (key.to_owned(), worker.to_owned(), batches)
}

#[test]
fn the_kimi_k3_incident_under_legacy_fixed_and_dynamo() {
    let streams: Vec<SourceStream> = (0..kvscope_corpus::KIMI_K3_WORKERS)
        .map(|w| corpus(&format!("vllm-0.33.0/streams/kimi_k3_worker{w}.jsonl"), &format!("w{w}:0"), &format!("w{w}")))
        .collect();
    // Legacy, which owns the shared index, exits on the first offload store (a block-size
    // mismatch it holds fatal): fixed inherits the index, dynamo reads it from fixed.
    let policies = [Policy::LEGACY, Policy::FIXED, Policy::DYNAMO_1_6_1];
    each_side_reports_what_its_policy_alone_does(&policies, 1536, &streams);
    assert!(feed(&policies, 1536, &streams).report_of(IndexSide(0)).indexer_exits > 0);
    // Legacy reads fixed's index until it exits.
    each_side_reports_what_its_policy_alone_does(&[Policy::FIXED, Policy::LEGACY], 1536, &streams);
}

#[test]
fn every_corpus_stream_under_every_preset() {
    for name in kvscope_corpus::stream_names().filter(|n| !n.contains("kimi_k3")) {
        let streams = [corpus(name, "7:0", "7")];
        each_side_reports_what_its_policy_alone_does(Policy::PRESETS, 16, &streams);
        each_side_reports_what_its_policy_alone_does(&[Policy::DYNAMO_1_6_1, Policy::FIXED, Policy::LEGACY], 16, &streams);
    }
}

fn payload(ts: f64, events: Vec<Event>) -> Vec<u8> {
    encode_batch_lossy(&release::VLLM_0_33.layout, &Batch { ts, events, dp_rank: Some(0) }).unwrap()
}

/// Prompts that come and go for 20 minutes at 2 batches a second, on two workers: each batch
/// stores a prompt of 3 device blocks (and `odd` some of them on `cpu` instead) and evicts the
/// one before. The trees sweep three times (at 5, 10 and 15 minutes).
fn prompts(odd: bool) -> Vec<SourceStream> {
    (0..2u64)
        .map(|w| {
            let batches = (0..2_400u64)
                .map(|i| {
                    let hash = |i: u64, b: u64| w * 1_000_000 + i * 3 + b;
                    let medium = if odd && i % 97 == 5 { "cpu" } else { "GPU" };
                    let mut parent = None;
                    let mut events: Vec<Event> = (0..3)
                        .map(|b| {
                            // Tokens repeat across workers (same prompts, other hashes).
                            let tokens = ((i % 50) * 3 + b) as u32;
                            let s = Stored::new([Hash::U64(hash(i, b))], 16)
                                .parent(parent.map(Hash::U64))
                                .tokens((0..16).map(move |t| tokens * 100 + t))
                                .medium(Some(medium));
                            parent = Some(hash(i, b));
                            s.into()
                        })
                        .collect();
                    if i > 0 {
                        events.push(Removed::new((0..3).map(|b| Hash::U64(hash(i - 1, b)))).medium(Some("GPU")).into());
                    }
                    (i, payload(1_765_000_000.0 + i as f64 / 2.0, events))
                })
                .collect();
            (format!("{w}:0"), w.to_string(), batches)
        })
        .collect()
}

#[test]
fn policies_that_agree_keep_one_tree_through_its_sweeps() {
    let forks = each_side_reports_what_its_policy_alone_does(&[Policy::LEGACY, Policy::FIXED], 16, &prompts(false));
    assert_eq!(forks, 0, "legacy and fixed read GPU stores alike");
    let m = feed(&[Policy::LEGACY, Policy::FIXED], 16, &prompts(false));
    assert_eq!(m.index().sweeps(), 3);
}

#[test]
fn policies_that_part_on_one_batch_fork_there_and_stay_exact() {
    // Legacy reads lowercase `cpu` as Device (fixed: host_pinned): the first such batch forks.
    let forks = each_side_reports_what_its_policy_alone_does(&[Policy::LEGACY, Policy::FIXED], 16, &prompts(true));
    assert_eq!(forks, 1);
}

#[test]
fn a_batch_one_indexer_takes_and_the_other_rejects_parts_them_where_their_clocks_would() {
    // Dynamo 1.6.1's decoder rejects a batch with an unknown event whole; fixed takes it and
    // skips the event. Neither indexer gets an event from it, but only fixed's clock sees it.
    let unknown = || Event::Other(kvscope_encode::Other { tag: "BlockPinned".into(), ownership: None });
    let store =
        |h: u64| -> Event { Stored::new([Hash::U64(h)], 16).tokens((0..16).map(move |t| h as u32 * 100 + t)).medium(Some("GPU")).into() };
    let remove = |h: u64| -> Event { Removed::new([Hash::U64(h)]).medium(Some("GPU")).into() };
    let at = |s: f64| 1_765_000_000.0 + s;
    let batches = vec![
        // Only fixed starts its clock here, at 0 s; dynamo's starts at 10 s.
        (0, payload(at(0.0), vec![unknown()])),
        (1, payload(at(10.0), vec![store(11)])),
        (2, payload(at(20.0), vec![remove(11)])),
        // Harmless: no clock would change.
        (3, payload(at(100.0), vec![unknown()])),
        // Fixed sweeps at 300 s (the emptied leaf goes); dynamo's sweep is not due until 310 s.
        (4, payload(at(305.0), vec![store(12)])),
        // Same tokens as 11 under 13: on dynamo's side they land on the emptied leaf.
        (5, payload(at(306.0), vec![Stored::new([Hash::U64(13)], 16).tokens((0..16).map(|t| 1_100 + t)).medium(Some("GPU")).into()])),
    ];
    let streams = [("7:0".to_owned(), "7".to_owned(), batches)];
    let forks = each_side_reports_what_its_policy_alone_does(&[Policy::FIXED, Policy::DYNAMO_1_6_1], 16, &streams);
    assert_eq!(forks, 1, "the first batch starts one clock only");
    let m = feed(&[Policy::FIXED, Policy::DYNAMO_1_6_1], 16, &streams);
    let device = |k| m.report_of(IndexSide(k)).totals.tiers["device"].clone();
    assert_eq!((device(0).router_blocks, device(1).router_blocks), (2, 2));
    assert!(device(0).router_only.is_empty() && device(1).router_only.contains_key("listed_for_other_hash"));
}
