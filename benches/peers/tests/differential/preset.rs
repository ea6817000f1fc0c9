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
        dynamo::Verdict::Stored { tier, blocks_published, .. } => ("store".into(), Some(tier), *blocks_published as u32),
        dynamo::Verdict::SelfReferencingStore { tier } => ("self_referencing_store".into(), Some(tier), 0),
        dynamo::Verdict::Removed { tier, blocks } => ("remove".into(), Some(tier), *blocks as u32),
        dynamo::Verdict::Cleared => ("clear".into(), None, 0),
    }
}

/// What one stream under both normalizers came to.
#[derive(Debug, Default)]
pub struct StreamComparison {
    /// Events both decoded and compared verdict by verdict.
    pub compared: usize,
    /// Events of batches Dynamo's decoder rejects (each must carry [`BATCH_REJECTED`]).
    pub lost_events: usize,
    /// Batches neither decoder accepts (kvscope's decode error, Dynamo's rejection).
    pub lost_by_both: usize,
    pub mismatches: Vec<String>,
}

/// Runs `messages` through a Dynamo listener and a kvscope normalizer under the `dynamo-1.6.1`
/// preset (worker `w1`, rank 0, `--block-size block_size`) and compares every verdict and the
/// conversion-warning count.
pub fn compare_stream(name: &str, block_size: u32, messages: &[(u64, &[u8])]) -> StreamComparison {
    let policy: Policy = "dynamo-1.6.1"
        .parse()
        .unwrap_or_else(|e| panic!("kvscope-normalize has no `dynamo-1.6.1` preset: {e}; docs/dynamo-1.6.1.md specifies it"));
    let mut out = StreamComparison::default();
    let mut listener = DynamoListener::new(1, 0, block_size);
    let mut ours = Normalizer::new(block_size, policy);
    let source = ours.source("w1", 0);
    for &(seq, payload) in messages {
        let mut verdicts = Vec::new();
        let decoded = ours.push_payload(source, seq, payload, &mut verdicts);
        match (listener.apply(seq, payload), decoded) {
            (BatchOutcome::Lost { .. }, Err(_)) => out.lost_by_both += 1,
            (BatchOutcome::Events { .. }, Err(e)) => {
                out.mismatches.push(format!("{name} seq {seq}: Dynamo decodes it, kvscope cannot: {e}"))
            }
            (BatchOutcome::Lost { error }, Ok(_)) => {
                for v in &verdicts {
                    out.lost_events += 1;
                    if v.label().as_str() != BATCH_REJECTED {
                        out.mismatches.push(format!(
                            "{name} seq {seq} events[{}]: Dynamo loses the batch ({error}); preset says {}",
                            v.event_index,
                            v.code()
                        ));
                    }
                }
            }
            (BatchOutcome::Events { verdicts: theirs, .. }, Ok(_)) => {
                if theirs.len() != verdicts.len() {
                    out.mismatches.push(format!("{name} seq {seq}: Dynamo has {} events, kvscope {}", theirs.len(), verdicts.len()));
                    continue;
                }
                for (d, k) in theirs.iter().zip(&verdicts) {
                    out.compared += 1;
                    let want = expected(d);
                    let got = (k.label().as_str().to_owned(), k.tier.map(|t| t.label()), k.blocks_applied());
                    // Clears touch every tier, and a skip files nothing: compare labels only.
                    let same = if want.0 == "clear" || want.1.is_none() { got.0 == want.0 } else { got == want };
                    if !same {
                        out.mismatches.push(format!("{name} seq {seq} events[{}]: Dynamo {d:?}, preset {}", k.event_index, k.code()));
                    }
                }
            }
        }
    }
    let theirs = u64::from(listener.warnings());
    let ours_total = ours.counters(source).budget(BudgetKind::Conversion).total();
    if theirs != ours_total {
        out.mismatches.push(format!("{name}: Dynamo counted {theirs} conversion warnings, the preset {ours_total}"));
    }
    out
}

#[test]
fn dynamo_preset_gives_dynamos_verdict_for_every_corpus_event() {
    let mut total = StreamComparison::default();
    let mut add = |c: StreamComparison| {
        total.compared += c.compared;
        total.lost_events += c.lost_events;
        total.lost_by_both += c.lost_by_both;
        total.mismatches.extend(c.mismatches);
    };
    for entry in corpus().iter().filter(|e| e.scenario != "kimi_k3_agg") {
        add(compare_stream(&entry.file, configured_block_size(entry), &[(0, entry.payload())]));
    }
    for worker in 0..kvscope_corpus::KIMI_K3_WORKERS {
        let messages: Vec<(u64, &[u8])> = kvscope_corpus::kimi_k3_stream(worker).into_iter().map(|m| (m.seq, m.payload)).collect();
        add(compare_stream(&format!("kimi_k3 worker {worker}"), 1536, &messages));
    }
    println!("{} events compared, {} events in batches Dynamo rejects", total.compared, total.lost_events);
    assert_eq!(total.lost_by_both, 0, "kvscope decodes every corpus payload");
    assert_eq!((total.compared, total.lost_events), (910, 116), "every corpus event was compared");
    assert!(total.mismatches.is_empty(), "{} mismatches:\n{}", total.mismatches.len(), total.mismatches.join("\n"));
}
