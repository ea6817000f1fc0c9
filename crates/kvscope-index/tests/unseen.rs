//! A batch kvscope itself did not model (the server's router queue dropped it) is kvscope's blind
//! spot, not frames the indexer lost: a chain that began in it is missing as
//! `orphan:kvscope_dropped`, where the same gap in the stream reads `orphan:lost_frames`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use kvscope_index::{IndexConfig, IndexModel};
use kvscope_normalize::Policy;
use support::{payload, store};

/// A store, a batch kvscope never sees (its child's parent), a store under that batch's block,
/// and a store of its own. The missing batch is noted as kvscope's loss (`note_unseen`) or not
/// at all (a gap in the stream). What the device tier's index lacks of what the engine holds,
/// by cause, and how many batches kvscope did not model.
fn missing_when_the_second_batch_is(noted_as_unseen: bool) -> (BTreeMap<String, u64>, u64) {
    let mut m = IndexModel::new(IndexConfig::new(16, Policy::DYNAMO_1_6_1));
    let id = m.add_source("7:0", "7", 0);
    m.push(id, 0, &payload(vec![store(10, None)]), false).unwrap();
    // Batch 1 stores 11 under 10; then batch 2 stores 12 under 11.
    if noted_as_unseen {
        m.note_unseen(id, 1, 1, false);
    }
    m.push(id, 2, &payload(vec![store(12, Some(11))]), false).unwrap();
    m.push(id, 3, &payload(vec![store(13, None)]), false).unwrap();
    let device = m.report().totals.tiers.remove("device").unwrap_or_default();
    (device.engine_only, m.unseen_batches())
}

#[test]
fn a_chain_that_began_in_a_batch_kvscope_dropped_is_kvscope_s_blind_spot() {
    let (missing, unseen) = missing_when_the_second_batch_is(true);
    assert_eq!(unseen, 1);
    assert_eq!(missing, BTreeMap::from([("orphan:kvscope_dropped".to_owned(), 1)]));
}

#[test]
fn the_same_gap_unexplained_is_the_indexer_s_lost_frames() {
    let (missing, unseen) = missing_when_the_second_batch_is(false);
    assert_eq!(unseen, 0);
    assert_eq!(missing, BTreeMap::from([("orphan:lost_frames".to_owned(), 1)]));
}
