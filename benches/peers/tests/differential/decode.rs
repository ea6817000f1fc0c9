//! The two decoders, field by field, on every corpus payload.

use std::collections::BTreeMap;

use kvscope_peer_bench::dynamo;
use kvscope_wire::{KvEvent, decode_batch};

use crate::common::{FIELD_NAMES, Rejection, corpus, ours, theirs};

/// A field where the decoders differ by design, named in docs/dynamo-1.6.1.md ("Decoding").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Documented {
    /// `medium: ""`: kvscope keeps the string as sent; Dynamo's `normalize_medium` makes it
    /// absent. Both then file the event on Device.
    EmptyMediumIsAbsent,
    /// SGLang bigram pages: kvscope counts n pairs; Dynamo's `normalize_token_ids` flattens them
    /// into n + 1 tokens (first of each pair, then the last pair's second).
    BigramPairsBecomeTokens,
}

fn documented(field: &str, ours: &crate::common::Fields, theirs: &crate::common::Fields) -> Option<Documented> {
    match field {
        "medium" if ours.medium.as_deref() == Some("") && theirs.medium.is_none() => Some(Documented::EmptyMediumIsAbsent),
        "token_count"
            if ours.is_bigram == Some(true) && ours.token_count.zip(theirs.token_count).is_some_and(|(n, t)| n > 0 && t == n + 1) =>
        {
            Some(Documented::BigramPairsBecomeTokens)
        }
        _ => None,
    }
}

#[test]
fn decoders_agree_on_every_field_both_understand() {
    let mut payloads_compared = 0usize;
    let mut events_compared = 0usize;
    let mut rejected = 0usize;
    let mut documented_cases: BTreeMap<Documented, Vec<String>> = BTreeMap::new();
    let mut disagreements = Vec::new();

    for entry in corpus() {
        let file = &entry.file;
        let batch = decode_batch(entry.payload()).unwrap_or_else(|e| panic!("{file}: kvscope cannot decode it: {e}"));
        let predicted = Rejection::predicted(&batch);
        let decoded = dynamo::decode(entry.payload());
        let theirs_batch = match (decoded, predicted) {
            (Err(err), Some(rejection)) => {
                if err.to_string() != rejection.message() {
                    disagreements.push(format!(
                        "{file}: Dynamo rejects it ({rejection:?} predicted) but says {:?}, not {:?}",
                        err.to_string(),
                        rejection.message()
                    ));
                }
                rejected += 1;
                continue;
            }
            (Err(err), None) => {
                disagreements.push(format!("{file}: Dynamo rejects it for an undocumented reason: {err}"));
                continue;
            }
            (Ok(_), Some(rejection)) => {
                disagreements.push(format!("{file}: {rejection:?} predicted, but Dynamo decoded it"));
                continue;
            }
            (Ok(b), None) => b,
        };
        payloads_compared += 1;

        if theirs_batch.ts.to_bits() != batch.ts.to_bits() {
            disagreements.push(format!("{file}: ts: kvscope {}, Dynamo {}", batch.ts, theirs_batch.ts));
        }
        let their_rank = theirs_batch.data_parallel_rank.map(i64::from);
        if their_rank != batch.dp_rank.map(i64::from) {
            disagreements.push(format!("{file}: dp_rank: kvscope {:?}, Dynamo {their_rank:?}", batch.dp_rank));
        }
        if theirs_batch.events.len() != batch.events.len() {
            disagreements.push(format!("{file}: kvscope decodes {} events, Dynamo {}", batch.events.len(), theirs_batch.events.len()));
            continue;
        }
        for (i, (our_event, their_event)) in batch.events.iter().zip(&theirs_batch.events).enumerate() {
            events_compared += 1;
            assert!(!matches!(our_event, KvEvent::Unknown(_)), "{file}: the corpus has no unknown tags");
            let (a, b) = (ours(our_event), theirs(&dynamo::view(their_event)));
            for ((name, x), y) in FIELD_NAMES.iter().zip(a.columns()).zip(b.columns()) {
                if x == y {
                    continue;
                }
                let place = format!("{file}: events[{i}].{name}: kvscope {x}, Dynamo {y}");
                match documented(name, &a, &b) {
                    Some(case) => documented_cases.entry(case).or_default().push(place),
                    None => disagreements.push(place),
                }
            }
        }
    }

    println!("compared {payloads_compared} payloads ({events_compared} events); {rejected} rejected by Dynamo");
    for (case, places) in &documented_cases {
        println!("documented difference {case:?}: {} fields", places.len());
        for p in places {
            println!("  {p}");
        }
    }
    assert!(payloads_compared > 0 && events_compared > 0, "nothing was compared");
    assert!(disagreements.is_empty(), "{} undocumented disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
    assert_eq!(payloads_compared + rejected, corpus().len());
    // The counts pin the documented differences to the corpus: a new corpus case or a decoder
    // change that moves them shows up here, not silently.
    let count = |case| documented_cases.get(&case).map_or(0, Vec::len);
    assert_eq!(count(Documented::EmptyMediumIsAbsent), EMPTY_MEDIUM_FIELDS);
    assert_eq!(count(Documented::BigramPairsBecomeTokens), 1, "sglang-3 is the one bigram page");
}

/// `edge-2` (medium `""` on a store and a removal) in the 20 releases from 0.10.2 on.
const EMPTY_MEDIUM_FIELDS: usize = 40;

/// The claim, checked: Dynamo 1.6.1 rejects 54 of the 381 corpus payloads outright,
/// every batch with a bin hash (bytes_hashes from 0.10.2, CPU-offload placeholders of 0.13-0.23,
/// whose GPU stores are lost with them) and vLLM 0.9.0's 2-element batches.
#[test]
fn dynamo_rejects_every_bin_hash_batch_and_every_two_element_batch() {
    let mut by_rejection: BTreeMap<Rejection, Vec<&str>> = BTreeMap::new();
    let mut lost_events: BTreeMap<String, usize> = BTreeMap::new();
    for entry in corpus() {
        let Err(err) = dynamo::decode(entry.payload()) else {
            continue;
        };
        let batch = decode_batch(entry.payload()).expect("kvscope decodes every corpus payload");
        let rejection =
            Rejection::predicted(&batch).unwrap_or_else(|| panic!("{}: rejected for an undocumented reason: {err}", entry.file));
        assert_eq!(err.to_string(), rejection.message(), "{}", entry.file);
        by_rejection.entry(rejection).or_default().push(&entry.file);
        for event in &batch.events {
            let medium = event.medium().unwrap_or("(none)");
            *lost_events.entry(format!("{} medium {medium}", event.event_type())).or_default() += 1;
        }
    }
    for (rejection, files) in &by_rejection {
        println!("{rejection:?} ({:?}): {} payloads", rejection.message(), files.len());
        for f in files {
            println!("  {f}");
        }
    }
    println!("events lost with them: {lost_events:?}");

    let total: usize = by_rejection.values().map(Vec::len).sum();
    assert_eq!(total, 54, "Dynamo 1.6.1 rejects 54 of the 381 corpus payloads");
    let two = &by_rejection[&Rejection::TwoElementBatch];
    assert_eq!(two.len(), 5);
    assert!(two.iter().all(|f| f.starts_with("vllm-0.9.0/")), "only vLLM 0.9.0 writes 2-element batches");
    let bins = &by_rejection[&Rejection::BinBlockHash];
    let offload: Vec<_> = bins.iter().filter(|f| f.contains("cpu_offload_placeholder")).collect();
    assert_eq!(offload.len(), 10, "CPU-offload placeholders of 0.13, 0.14, 0.15, 0.16, 0.17, 0.19, 0.20-0.23");
    assert_eq!(bins.iter().filter(|f| f.contains("bytes_hashes")).count(), 39, "bytes_hashes of 0.10.2-0.33");
    assert_eq!(bins.len(), 49);
    // Whole batches are lost: the GPU stores that precede each CPU placeholder go with it.
    assert_eq!(lost_events.values().sum::<usize>(), 116, "events in the 54 rejected batches");
    assert_eq!(lost_events["BlockStored medium GPU"], 49, "GPU stores lost with their batch");
    assert_eq!(lost_events["BlockStored medium CPU"], 10, "one CPU placeholder per 0.13-0.23 offload batch");

    // Conversely, every payload with a bin hash and every 2-element batch is rejected.
    for entry in corpus() {
        let batch = decode_batch(entry.payload()).expect("kvscope decodes every corpus payload");
        if Rejection::predicted(&batch).is_some() {
            assert!(dynamo::decode(entry.payload()).is_err(), "{}: Dynamo accepted it", entry.file);
        }
    }
}
