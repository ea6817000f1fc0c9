//! A removal of a block the engine still holds another copy of, as vLLM 0.33 writes it, against
//! Dynamo 1.6.1's standalone indexer (it counts no copies, so it drops the block): missing as
//! `removed_while_held` when the index held it, under its first cause when it never did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use kvscope_encode::{Event, Hash, Removed};
use kvscope_index::{IndexConfig, IndexModel};
use kvscope_normalize::Policy;
use support::{payload, store};

fn remove(hash: u64) -> Event {
    Removed::new([Hash::U64(hash)]).medium(Some("GPU")).into()
}

/// The device tier's blocks the engine holds and the index does not, by cause.
fn missing_on_device(batches: Vec<Vec<Event>>) -> (BTreeMap<String, u64>, u64, u64) {
    let mut m = IndexModel::new(IndexConfig::new(16, Policy::DYNAMO_1_6_1));
    let id = m.add_source("7:0", "7", 0);
    for (seq, events) in batches.into_iter().enumerate() {
        m.push(id, seq as u64, &payload(events), false).unwrap();
    }
    let device = m.report().totals.tiers.remove("device").unwrap_or_default();
    (device.engine_only, device.engine_blocks, device.router_blocks)
}

#[test]
fn a_held_block_removed_once_of_two_copies_is_missing_as_removed_while_held() {
    // Stored twice (two copies), removed once: the engine still holds it, the index dropped it.
    let (missing, engine, router) = missing_on_device(vec![vec![store(11, None)], vec![store(11, None)], vec![remove(11)]]);
    assert_eq!((engine, router), (1, 0));
    assert_eq!(missing, BTreeMap::from([("removed_while_held".to_owned(), 1)]));
    // Removed as often as stored: neither holds it, nothing is missing.
    let (missing, engine, _) = missing_on_device(vec![vec![store(11, None)], vec![store(11, None)], vec![remove(11)], vec![remove(11)]]);
    assert_eq!((engine, missing.len()), (0, 0));
}

#[test]
fn a_block_the_index_never_held_keeps_its_first_cause_through_such_a_removal() {
    // Its parent was never announced, so the index dropped both stores.
    let (missing, engine, router) = missing_on_device(vec![vec![store(12, Some(99))], vec![store(12, Some(99))], vec![remove(12)]]);
    assert_eq!((engine, router), (1, 0));
    assert_eq!(missing.len(), 1, "{missing:?}");
    let (cause, n) = missing.iter().next().unwrap();
    assert!(cause.starts_with("orphan:") && *n == 1, "{missing:?}");
}
