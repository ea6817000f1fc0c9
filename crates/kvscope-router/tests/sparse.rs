//! `Predictor::predict_sparse` is the dense prediction with the skipped events left out, and
//! nothing else: on every corpus payload and every recorded stream, under every policy a relay
//! can run, and on a flood of skipped events it keeps nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kvscope_normalize::{Outcome, Policy};
use kvscope_router::{BatchPredicted, Predicted, Prediction, Predictor, RelayConfig};

const POLICIES: [(&str, Policy); 3] = [("dynamo-1.6.1", Policy::DYNAMO_1_6_1), ("fixed", Policy::FIXED), ("legacy", Policy::LEGACY)];

/// A skipped event's prediction: what a sparse pass may leave out.
fn is_skip(p: &Prediction) -> bool {
    matches!(&p.outcome, Predicted::Dropped { label, .. } if label.outcome() == Outcome::Skip)
}

/// Feeds `batches` through three fresh relays of one config: dense, sparse keeping every drop,
/// sparse keeping none; each must agree with the dense pass batch by batch.
fn assert_sparse_matches_dense(what: &str, config: RelayConfig, batches: &[(u64, &[u8])]) {
    let mut dense = Predictor::new(config);
    let mut all = Predictor::new(config);
    let mut none = Predictor::new(config);
    for &(seq, payload) in batches {
        let expected = dense.predict(seq, payload);
        let (mut kept_all, mut kept_none) = (Vec::new(), Vec::new());
        let batch_all = all.predict_sparse(seq, payload, |_, _| true, &mut kept_all);
        let batch_none = none.predict_sparse(seq, payload, |_, _| false, &mut kept_none);
        let expected = match expected {
            Ok(p) => p,
            Err(e) => {
                assert_eq!(batch_all.err(), Some(e.clone()), "{what} seq {seq}");
                assert_eq!(batch_none.err(), Some(e), "{what} seq {seq}");
                assert!(kept_all.is_empty() && kept_none.is_empty(), "{what} seq {seq}: an undecodable batch leaves nothing behind");
                continue;
            }
        };
        let batch = batch_all.unwrap();
        assert_eq!(batch, batch_none.unwrap(), "{what} seq {seq}");
        assert_eq!(batch.events as usize, expected.len(), "{what} seq {seq}");
        assert_eq!(kept_all, expected, "{what} seq {seq}: keeping every drop is the dense pass");
        let unskipped: Vec<Prediction> = expected.iter().filter(|p| !is_skip(p)).cloned().collect();
        assert_eq!(kept_none, unskipped, "{what} seq {seq}: keeping no drop leaves out exactly the skips");
    }
}

#[test]
fn every_corpus_payload_predicts_the_same_sparse_as_dense() {
    let manifest = kvscope_corpus::manifest();
    assert!(manifest.len() > 300, "the corpus is embedded whole");
    for (name, policy) in POLICIES {
        for block_size in [16, 32] {
            // Each payload alone, with a fresh relay, and all of them through one relay in
            // manifest order (learned groups and the publisher's counts carry over).
            for entry in manifest {
                let config = RelayConfig::relay(7, 0, block_size, policy);
                assert_sparse_matches_dense(&format!("{name}/{block_size} {}", entry.file), config, &[(0, entry.payload())]);
            }
            let batches: Vec<(u64, &[u8])> = manifest.iter().zip(0..).map(|(e, seq)| (seq, e.payload())).collect();
            assert_sparse_matches_dense(
                &format!("{name}/{block_size} whole manifest"),
                RelayConfig::relay(7, 0, block_size, policy),
                &batches,
            );
            let listener = RelayConfig::listener(7, 0, block_size, policy);
            assert_sparse_matches_dense(&format!("{name}/{block_size} whole manifest, listener"), listener, &batches);
        }
    }
}

#[test]
fn every_recorded_stream_predicts_the_same_sparse_as_dense() {
    let names: Vec<&str> = kvscope_corpus::stream_names().collect();
    assert!(names.iter().any(|n| n.contains("kimi_k3")), "the Kimi-K3 streams are among them");
    for name in names {
        let batches: Vec<(u64, &[u8])> = kvscope_corpus::stream(name).unwrap().iter().map(|m| (m.seq, m.payload)).collect();
        for (policy_name, policy) in POLICIES {
            assert_sparse_matches_dense(&format!("{policy_name} {name}"), RelayConfig::relay(0, 0, 16, policy), &batches);
        }
    }
}

#[test]
fn a_flood_of_skipped_events_keeps_nothing_but_its_count() {
    let events = 200_000;
    let flood = kvscope_encode::raw::unknown_event_flood(events);
    // Dynamo 1.6.1's decoder rejects the whole batch: an indexer's cursor does not move.
    let mut relay = Predictor::new(RelayConfig::dynamo_1_6_1(7, 0, 16));
    let mut kept = Vec::new();
    let batch = relay.predict_sparse(1, &flood, |_, _| false, &mut kept).unwrap();
    assert_eq!(batch, BatchPredicted { events: events as u32, rejected: events as u32 });
    assert!(!batch.taken(), "a batch the decoder rejects does not move an indexer's cursor");
    assert!(kept.is_empty(), "no skipped event is kept: {} were", kept.len());
    // kvscope's fixed policy skips each event and takes the batch.
    let mut fixed = Predictor::new(RelayConfig::relay(7, 0, 16, Policy::FIXED));
    let batch = fixed.predict_sparse(1, &flood, |_, _| false, &mut kept).unwrap();
    assert_eq!(batch, BatchPredicted { events: events as u32, rejected: 0 });
    assert!(batch.taken(), "a batch of skipped events still moves an indexer's cursor");
    assert!(kept.is_empty(), "no skipped event is kept: {} were", kept.len());
    // Asked for, the drops are there, one per event asked, in order.
    let batch = fixed.predict_sparse(2, &flood, |i, _| i % 1000 == 0, &mut kept).unwrap();
    assert_eq!(batch.events as usize, events);
    assert_eq!(kept.len(), events / 1000);
    assert!(kept.iter().zip((0..).step_by(1000)).all(|(p, i)| p.origin.event_index == i && p.origin.seq == 2 && is_skip(p)));
}
