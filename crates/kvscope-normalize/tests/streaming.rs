//! The streaming path (`push_payload_with`) classifies exactly like the collecting one
//! (`push_payload`): same verdicts, same counters, under every policy, for every corpus payload,
//! for batches bigger than the decoder's chunk, and for payloads that fail at their last byte.

// Test code: a failed expect is a failed test, with its location.
#![allow(clippy::expect_used)]

use kvscope_corpus::vectors::{EventSpec, encode_batch};
use kvscope_normalize::{Normalizer, Policy, Verdict};
use kvscope_wire::STREAM_CHUNK;

/// Pushes `payloads` through a collecting and a streaming normalizer and compares everything.
fn assert_same(policy: Policy, payloads: &[Vec<u8>]) {
    let (mut collect, mut stream) = (Normalizer::new(16, policy), Normalizer::new(16, policy));
    let (a, b) = (collect.source("w0", 0), stream.source("w0", 0));
    for (seq, payload) in payloads.iter().enumerate() {
        let seq = seq as u64;
        let mut collected = Vec::new();
        let batch = collect.push_payload(a, seq, payload, &mut collected);
        let mut streamed: Vec<Verdict> = Vec::new();
        let mut kinds = Vec::new();
        let header = stream.push_payload_with(b, seq, payload, |event, v| {
            kinds.push(event.event_type());
            streamed.push(v);
        });
        match (&batch, &header) {
            (Ok(batch), Ok(header)) => {
                assert_eq!(batch.header(), *header, "{} seq {seq}", policy.name);
                let types: Vec<_> = batch.events.iter().map(|e| e.event_type()).collect();
                assert_eq!(types, kinds, "{} seq {seq}: events handed over", policy.name);
            }
            (Err(x), Err(y)) => assert_eq!(x, y),
            _ => panic!("{} seq {seq}: collect {:?} vs stream {:?}", policy.name, batch.is_ok(), header.is_ok()),
        }
        assert_eq!(collected, streamed, "{} seq {seq}: verdicts", policy.name);
    }
    assert_eq!(collect.counters(a), stream.counters(b), "{}: counters", policy.name);
}

fn events(json: &str) -> Vec<EventSpec> {
    serde_json::from_str(json).expect("test events are valid JSON")
}

#[test]
fn every_corpus_payload_classifies_the_same_streamed() {
    let payloads: Vec<Vec<u8>> = kvscope_corpus::manifest().iter().map(|e| e.payload().to_vec()).collect();
    for policy in Policy::PRESETS {
        assert_same(*policy, &payloads);
    }
}

/// A batch bigger than the chunk the decoder keeps is decoded twice; nothing changes.
#[test]
fn batches_bigger_than_the_chunk_classify_the_same() {
    let store = r#"{"type": "BlockStored", "hashes": [1], "block_size": 16, "medium": "GPU"}"#;
    let bin = r#"{"type": "BlockStored", "hashes": [{"bin": 32, "value": 7}], "block_size": 16}"#;
    let n = STREAM_CHUNK * 3 + 5;
    let plain = events(&format!("[{}]", vec![store; n].join(",")));
    // The offending event comes after the chunk: the rejection must still reach event 0.
    let mut late = plain.clone();
    late.extend(events(&format!("[{bin}]")));
    let payloads = vec![
        encode_batch(1.0, &plain, Some(0), false).unwrap(),
        encode_batch(1.0, &late, Some(0), true).unwrap(),
        encode_batch(1.0, &plain, Some(1 << 31), true).unwrap(),
    ];
    for policy in Policy::PRESETS {
        assert_same(*policy, &payloads);
    }
}

/// A payload whose last byte is wrong teaches nothing and hands over no event.
#[test]
fn a_payload_failing_at_its_end_hands_over_nothing() {
    let store = r#"{"type": "BlockStored", "hashes": [1], "block_size": 16, "medium": "GPU"}"#;
    for n in [3, STREAM_CHUNK + 3] {
        let mut bad = encode_batch(1.0, &events(&format!("[{}]", vec![store; n].join(","))), Some(0), false).unwrap();
        *bad.last_mut().unwrap() = 0xa1; // dp_rank becomes a string cut short
        for policy in Policy::PRESETS {
            let mut stream = Normalizer::new(16, *policy);
            let id = stream.source("w0", 0);
            let mut handed = 0;
            let err = stream.push_payload_with(id, 7, &bad, |_, _| handed += 1).unwrap_err();
            assert_eq!(handed, 0, "{}: {err}", policy.name);
            let counters = stream.counters(id);
            assert_eq!((counters.decode_errors, counters.batches), (1, 0), "{}", policy.name);
            assert_same(*policy, std::slice::from_ref(&bad));
        }
    }
}
