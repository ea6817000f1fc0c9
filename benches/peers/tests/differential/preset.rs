//! kvscope's `dynamo-1.6.1` preset against Dynamo's `ZmqEventNormalizer`, event by event.
//!
//! The preset is the oracle test of issue 5: for every corpus event, the same verdict as the
//! published crate (applied on the same tier with the same number of blocks, or skipped for the
//! same reason), every event of a batch Dynamo's decoder rejects given the batch-level verdict,
//! and the same count of conversion warnings per source. docs/dynamo-1.6.1.md is the spec.

use kvscope_normalize::{BudgetKind, Normalizer, Policy};
use kvscope_peer_bench::dynamo::{self, BatchOutcome, DynamoListener};

use crate::common::{configured_block_size, corpus};

/// The label the preset gives every event of a batch Dynamo's decoder rejects (docs/dynamo-1.6.1.md,
/// section 10). Change it here if the preset names it otherwise.
const BATCH_REJECTED: &str = "batch_decode_rejected";

/// (label, tier label, blocks) for a Dynamo verdict, in kvscope's vocabulary.
fn expected(v: &dynamo::Verdict) -> (String, Option<&'static str>, u32) {
    match v {
        dynamo::Verdict::Skipped(reason) => ((*reason).to_owned(), None, 0),
        dynamo::Verdict::DroppedInConversion => {
            panic!("convert_event dropped an event preprocessing let through")
        }
        dynamo::Verdict::Stored {
            tier,
            blocks_published,
            ..
        } => ("store".into(), Some(tier), *blocks_published as u32),
        dynamo::Verdict::SelfReferencingStore { tier } => {
            ("self_referencing_store".into(), Some(tier), 0)
        }
        dynamo::Verdict::Removed { tier, blocks } => ("remove".into(), Some(tier), *blocks as u32),
        dynamo::Verdict::Cleared => ("clear".into(), None, 0),
    }
}

#[test]
#[ignore = "needs the `dynamo-1.6.1` preset in kvscope-normalize (issue 5); remove this line when it lands"]
fn dynamo_preset_gives_dynamos_verdict_for_every_corpus_event() {
    let policy: Policy = "dynamo-1.6.1".parse().unwrap_or_else(|e| {
        panic!("kvscope-normalize has no `dynamo-1.6.1` preset yet: {e}; docs/dynamo-1.6.1.md specifies it")
    });
    let mut compared = 0usize;
    let mut lost_events = 0usize;
    let mut mismatches = Vec::new();
    let mut check_stream = |name: &str, block_size: u32, messages: Vec<(u64, &'static [u8])>| {
        let mut listener = DynamoListener::new(1, 0, block_size);
        let mut ours = Normalizer::new(block_size, policy);
        let source = ours.source("w1", 0);
        for (seq, payload) in messages {
            let mut verdicts = Vec::new();
            ours.push_payload(source, seq, payload, &mut verdicts)
                .unwrap_or_else(|e| panic!("{name} seq {seq}: kvscope cannot decode it: {e}"));
            match listener.apply(seq, payload) {
                BatchOutcome::Lost { error } => {
                    for v in &verdicts {
                        lost_events += 1;
                        if v.label().as_str() != BATCH_REJECTED {
                            mismatches.push(format!(
                                "{name} seq {seq} events[{}]: Dynamo loses the batch ({error}); preset says {}",
                                v.event_index,
                                v.code()
                            ));
                        }
                    }
                }
                BatchOutcome::Events {
                    verdicts: theirs, ..
                } => {
                    assert_eq!(
                        theirs.len(),
                        verdicts.len(),
                        "{name} seq {seq}: event counts differ"
                    );
                    for (d, k) in theirs.iter().zip(&verdicts) {
                        compared += 1;
                        let want = expected(d);
                        let got = (
                            k.label().as_str().to_owned(),
                            k.tier.map(|t| t.label()),
                            k.blocks_applied(),
                        );
                        // Clears touch every tier, and a skip files nothing: compare labels only.
                        let same = if want.0 == "clear" || want.1.is_none() {
                            got.0 == want.0
                        } else {
                            got == want
                        };
                        if !same {
                            mismatches.push(format!(
                                "{name} seq {seq} events[{}]: Dynamo {d:?}, preset {}",
                                k.event_index,
                                k.code()
                            ));
                        }
                    }
                }
            }
        }
        let theirs = u64::from(listener.warnings());
        let ours_total = ours.counters(source).budget(BudgetKind::Conversion).total();
        if theirs != ours_total {
            mismatches.push(format!(
                "{name}: Dynamo counted {theirs} conversion warnings, the preset {ours_total}"
            ));
        }
    };
    for entry in corpus().iter().filter(|e| e.scenario != "kimi_k3_agg") {
        check_stream(
            &entry.file,
            configured_block_size(entry),
            vec![(0, entry.payload())],
        );
    }
    for worker in 0..kvscope_corpus::KIMI_K3_WORKERS {
        let messages = kvscope_corpus::kimi_k3_stream(worker)
            .into_iter()
            .map(|m| (m.seq, m.payload))
            .collect();
        check_stream(&format!("kimi_k3 worker {worker}"), 1536, messages);
    }
    println!("{compared} events compared, {lost_events} events in batches Dynamo rejects");
    assert!(compared > 0 && lost_events > 0, "nothing was compared");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
