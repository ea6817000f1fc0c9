//! Dynamo's normalizer and kvscope's `fixed` policy: the same tier for every event both apply,
//! and every other pairing of verdicts named.
//!
//! Each corpus payload runs through a fresh Dynamo listener and a fresh kvscope normalizer at the
//! payload's configured block size; the Kimi-K3 streams run as streams (one listener and one
//! source per worker, batches in seq order), because learned groups carry across batches.

use std::collections::BTreeMap;

use kvscope_normalize::{Normalizer, Outcome, Policy, Verdict, VerdictLabel};
use kvscope_peer_bench::dynamo::{self, BatchOutcome, DynamoListener};

use crate::common::{configured_block_size, corpus};

/// Dynamo's verdict as a label in kvscope's vocabulary (`store`, `remove`, `clear`, a skip
/// reason), with `+empty` for a store Dynamo applied with none of its blocks.
pub fn dynamo_label(v: &dynamo::Verdict) -> String {
    match v {
        dynamo::Verdict::Skipped(reason) => (*reason).to_owned(),
        dynamo::Verdict::DroppedInConversion => "dropped_in_conversion".to_owned(),
        dynamo::Verdict::Stored { blocks_in_event, blocks_published: 0, .. } if *blocks_in_event > 0 => "store+empty".to_owned(),
        dynamo::Verdict::Stored { blocks_in_event, blocks_published, .. } if blocks_published < blocks_in_event => {
            "store+partial".to_owned()
        }
        dynamo::Verdict::Stored { .. } => "store".to_owned(),
        dynamo::Verdict::SelfReferencingStore { .. } => "self_referencing_store".to_owned(),
        dynamo::Verdict::Removed { .. } => "remove".to_owned(),
        dynamo::Verdict::Cleared => "clear".to_owned(),
    }
}

/// One event under both normalizers.
pub struct Pair {
    pub place: String,
    /// The event's medium as sent (kvscope's decode).
    pub medium: Option<String>,
    pub dynamo: dynamo::Verdict,
    pub kvscope: Verdict,
}

/// Runs every corpus payload (Kimi-K3 as streams) through Dynamo's listener and a kvscope
/// normalizer under `policy`, and returns the event pairs plus how many batches Dynamo lost.
pub fn run_corpus(policy: Policy) -> (Vec<Pair>, usize) {
    let mut pairs = Vec::new();
    let mut lost = 0;
    let mut run = |label: String, listener: &mut DynamoListener, ours: &mut Normalizer, seq: u64, payload: &[u8]| {
        let source = ours.source("w1", 0);
        let mut verdicts = Vec::new();
        let batch =
            ours.push_payload(source, seq, payload, &mut verdicts).unwrap_or_else(|e| panic!("{label}: kvscope cannot decode it: {e}"));
        match listener.apply(seq, payload) {
            BatchOutcome::Lost { .. } => lost += 1,
            BatchOutcome::Events { verdicts: theirs, .. } => {
                assert_eq!(theirs.len(), verdicts.len(), "{label}: event counts differ");
                for (i, (d, k)) in theirs.into_iter().zip(verdicts).enumerate() {
                    let medium = batch.events[i].medium().map(str::to_owned);
                    pairs.push(Pair { place: format!("{label} events[{i}]"), medium, dynamo: d, kvscope: k });
                }
            }
        }
    };
    for entry in corpus().iter().filter(|e| e.scenario != "kimi_k3_agg") {
        let block_size = configured_block_size(entry);
        let mut listener = DynamoListener::new(1, 0, block_size);
        let mut ours = Normalizer::new(block_size, policy);
        run(entry.file.clone(), &mut listener, &mut ours, 0, entry.payload());
    }
    for worker in 0..kvscope_corpus::KIMI_K3_WORKERS {
        let mut listener = DynamoListener::new(1, 0, 1536);
        let mut ours = Normalizer::new(1536, policy);
        for m in kvscope_corpus::kimi_k3_stream(worker) {
            run(m.file.to_owned(), &mut listener, &mut ours, m.seq, m.payload);
        }
    }
    (pairs, lost)
}

/// Why a (Dynamo, kvscope `fixed`) pairing differs, in the words of docs/dynamo-1.6.1.md
/// ("kvscope `fixed` against Dynamo 1.6.1").
fn difference(p: &Pair, theirs: &str, ours: VerdictLabel) -> &'static str {
    let medium = p.medium.as_deref().unwrap_or_default();
    match (theirs, ours) {
        ("unknown_medium", _) if medium.eq_ignore_ascii_case("cpu") && medium != "CPU" => "lowercase_cpu",
        ("unknown_medium", _) => "medium_outside_table",
        ("non_local_locality", _) => "non_local_locality",
        ("unsupported_ownership", _) => "kvcr_ownership",
        ("store+empty", VerdictLabel::OffloadBlockSizeMismatch) => "offload_store_applied_empty",
        ("store+empty", VerdictLabel::BlockSizeMismatch) => "device_mismatch_not_fatal",
        _ => "UNDOCUMENTED",
    }
}

/// Every (Dynamo, kvscope `fixed`) pairing whose labels differ, with its documented case and how
/// many corpus events show it.
///
/// - `lowercase_cpu`: Dynamo matches media case-sensitively and drops `cpu` (Kimi-K3 offload,
///   Mooncake, LMCache relays) as `unknown_medium`; `fixed` files it on HostPinned (then skips
///   it as `offload_block_size_mismatch` when its block size differs).
/// - `medium_outside_table`: `tape` and vLLM 0.26's `FS`/`OBJ`: Dynamo drops them as
///   `unknown_medium`; `fixed` falls back to Device (`+unknown_medium_fallback`), which makes
///   0.26's `OBJ` placeholder (block_size 0) a fatal Device `block_size_mismatch`.
/// - `non_local_locality`: `REMOTE` stores (0.26 on): Dynamo drops them; `fixed` has no locality
///   rule.
/// - `kvcr_ownership`: `ownership: "kvcr"` (0.29 on): Dynamo's `preprocess_with_reason` drops
///   them as `unsupported_ownership`; `fixed` has no ownership rule.
/// - `offload_store_applied_empty`: an offload store at another block size (0.24+ CPU
///   placeholders): Dynamo applies it on HostPinned with none of its blocks (one warning from
///   the shared budget of 3); `fixed` skips it as `offload_block_size_mismatch`.
/// - `device_mismatch_not_fatal`: a Device store at another block size (edge-3's partial block,
///   SGLang's 11-token page): Dynamo 1.6.1 applies it with none of its blocks and a warning,
///   never stops; `fixed` is fatal.
const FIXED_DIFFERENCES: &[(&str, &str, &str, usize)] = &[
    ("non_local_locality", "block_size_mismatch", "non_local_locality", 1),
    ("non_local_locality", "offload_block_size_mismatch", "non_local_locality", 6),
    ("store+empty", "block_size_mismatch", "device_mismatch_not_fatal", 24),
    ("store+empty", "offload_block_size_mismatch", "offload_store_applied_empty", 9),
    ("unknown_medium", "block_size_mismatch", "medium_outside_table", 1),
    ("unknown_medium", "offload_block_size_mismatch", "lowercase_cpu", 87),
    ("unknown_medium", "remove", "lowercase_cpu", 6),
    ("unknown_medium", "remove", "medium_outside_table", 21),
    ("unknown_medium", "store", "lowercase_cpu", 36),
    ("unknown_medium", "store", "medium_outside_table", 21),
    ("unsupported_ownership", "offload_block_size_mismatch", "kvcr_ownership", 5),
    ("unsupported_ownership", "remove", "kvcr_ownership", 5),
];

#[test]
fn fixed_policy_and_dynamo_file_every_event_both_apply_on_the_same_tier() {
    let (pairs, lost) = run_corpus(Policy::FIXED);
    assert!(!pairs.is_empty(), "no events were compared");
    let mut tier_disagreements = Vec::new();
    let mut both_applied = 0;
    let mut differences: BTreeMap<(String, &str, &str), (usize, String)> = BTreeMap::new();
    for p in &pairs {
        let ours = p.kvscope.label();
        let theirs = dynamo_label(&p.dynamo);
        if theirs != ours.as_str() {
            let case = difference(p, &theirs, ours);
            let e = differences.entry((theirs.clone(), ours.as_str(), case)).or_insert((0, p.place.clone()));
            e.0 += 1;
        }
        if p.dynamo.tier().is_none() || ours.outcome() != Outcome::Apply {
            continue;
        }
        both_applied += 1;
        let same_tier = match ours {
            VerdictLabel::Clear => matches!(p.dynamo, dynamo::Verdict::Cleared),
            _ => p.kvscope.tier.map(|t| t.label()) == p.dynamo.tier(),
        };
        let same_blocks = match p.dynamo {
            dynamo::Verdict::Stored { blocks_published: n, .. } | dynamo::Verdict::Removed { blocks: n, .. } => {
                p.kvscope.blocks_applied() as usize == n
            }
            _ => true,
        };
        if !same_tier || !same_blocks {
            tier_disagreements.push(format!("{}: kvscope {}, Dynamo {:?}", p.place, p.kvscope.code(), p.dynamo));
        }
    }

    println!("{} events, {both_applied} applied by both; {} batches lost by Dynamo", pairs.len(), lost);
    println!("{:<22} {:<28} {:<28} {:>6}  first example", "Dynamo 1.6.1", "kvscope fixed", "case", "events");
    for ((d, k, case), (n, example)) in &differences {
        println!("{d:<22} {k:<28} {case:<28} {n:>6}  {example}");
    }
    assert!(both_applied > 0, "no event was applied by both");
    assert!(
        tier_disagreements.is_empty(),
        "events both apply, on another tier or with other block counts:\n{}",
        tier_disagreements.join("\n")
    );
    let found: Vec<(&str, &str, &str, usize)> = differences.iter().map(|((d, k, case), (n, _))| (d.as_str(), *k, *case, *n)).collect();
    assert_eq!(found, FIXED_DIFFERENCES, "the (Dynamo, fixed) differences moved; update docs/dynamo-1.6.1.md");
}
