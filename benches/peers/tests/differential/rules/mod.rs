//! The rules of docs/dynamo-1.6.1.md, each asserted against Dynamo 1.6.1 itself.
//!
//! Every case is a hand-built payload (tagged-map events in a `[ts, events, dp_rank]` batch, as
//! vLLM 0.24+ writes them, unless the case is about another shape) run through a fresh
//! [`DynamoListener`] configured with `--block-size 16`. The expected outcome is written in a
//! compact code, one entry per batch:
//! `lost: <decoder message>`, or per event `store <tier> <published>/<in event>`,
//! `remove <tier> <n>`, `clear`, `self_referencing_store <tier>`, or the skip reason; then
//! `warnings <n>` (the normalizer's shared conversion-warning counter after the last batch).
//! The section names match the document's headings, so a failing case points at the sentence
//! that went stale. These cases double as test vectors for kvscope's `dynamo-1.6.1` preset.

//!
//! This module holds the case builders and the runner; the cases are in `decoding.rs`,
//! `tiers.rs` and `groups.rs`, by the document's sections.

mod decoding;
mod groups;
mod tiers;

use kvscope_encode::raw::Writer;
use kvscope_peer_bench::dynamo::{self, BatchOutcome, DynamoListener};

#[derive(Clone, Debug)]
enum Val {
    Str(&'static str),
    U(u64),
    I(i64),
    Nil,
    Hashes(Vec<u64>),
    /// An array of signed ints.
    Signed(Vec<i64>),
    /// A bin of this many bytes.
    Bin(usize),
    /// A bin of this many bytes as the only block hash.
    BinHash(usize),
    /// This many token ids (small ints).
    Tokens(usize),
    /// This many SGLang bigram pairs.
    Pairs(usize),
    Map(Vec<(&'static str, Val)>),
}

impl Val {
    fn write(&self, w: &mut Writer) {
        match self {
            Val::Str(s) => {
                w.str(s);
            }
            Val::U(v) => {
                w.uint(*v);
            }
            Val::I(v) => {
                w.int(*v);
            }
            Val::Nil => {
                w.nil();
            }
            Val::Hashes(hs) => {
                w.array(hs.len());
                for h in hs {
                    w.uint(*h);
                }
            }
            Val::Signed(vs) => {
                w.array(vs.len());
                for v in vs {
                    w.int(*v);
                }
            }
            Val::Bin(n) => {
                w.bin(&vec![7u8; *n]);
            }
            Val::BinHash(n) => {
                w.array(1).bin(&vec![7u8; *n]);
            }
            Val::Tokens(n) => {
                w.array(*n);
                for i in 0..*n {
                    w.uint(i as u64 % 100);
                }
            }
            Val::Pairs(n) => {
                w.array(*n);
                for i in 0..*n {
                    w.array(2).uint(i as u64).uint(i as u64 + 1);
                }
            }
            Val::Map(fields) => {
                w.map(fields.len());
                for (k, v) in fields {
                    w.str(k);
                    v.write(w);
                }
            }
        }
    }
}

/// A tagged-map event under construction.
#[derive(Clone, Debug)]
struct Ev(Vec<(&'static str, Val)>);

impl Ev {
    fn with(mut self, key: &'static str, val: Val) -> Ev {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = val,
            None => self.0.push((key, val)),
        }
        self
    }
    fn medium(self, m: &'static str) -> Ev {
        self.with("medium", Val::Str(m))
    }
    fn group(self, g: u64) -> Ev {
        self.with("group_idx", Val::U(g))
    }
    fn kind(self, k: &'static str) -> Ev {
        self.with("kv_cache_spec_kind", Val::Str(k))
    }
    fn parent(self, p: u64) -> Ev {
        self.with("parent_block_hash", Val::U(p))
    }
    fn write(&self, w: &mut Writer) {
        Val::Map(self.0.clone()).write(w);
    }
}

/// A `BlockStored` of `hashes` full 16-token blocks, no medium, no parent.
fn store(hashes: &[u64]) -> Ev {
    sized_store(hashes, 16, 16 * hashes.len())
}

fn sized_store(hashes: &[u64], block_size: u64, tokens: usize) -> Ev {
    Ev(vec![
        ("type", Val::Str("BlockStored")),
        ("block_hashes", Val::Hashes(hashes.to_vec())),
        ("parent_block_hash", Val::Nil),
        ("token_ids", Val::Tokens(tokens)),
        ("block_size", Val::U(block_size)),
    ])
}

fn remove(hashes: &[u64]) -> Ev {
    Ev(vec![("type", Val::Str("BlockRemoved")), ("block_hashes", Val::Hashes(hashes.to_vec()))])
}

fn clear() -> Ev {
    Ev(vec![("type", Val::Str("AllBlocksCleared"))])
}

fn tagged(tag: &'static str) -> Ev {
    Ev(vec![("type", Val::Str(tag))])
}

/// `[1.0, events, dp_rank]`.
fn batch_dp(dp_rank: Val, events: &[Ev]) -> Vec<u8> {
    let mut w = Writer::new();
    w.array(3).f64(1.0).array(events.len());
    for e in events {
        e.write(&mut w);
    }
    dp_rank.write(&mut w);
    w.into_bytes()
}

fn batch(events: &[Ev]) -> Vec<u8> {
    batch_dp(Val::U(0), events)
}

fn code(v: &dynamo::Verdict) -> String {
    match v {
        dynamo::Verdict::Skipped(reason) => (*reason).to_owned(),
        dynamo::Verdict::DroppedInConversion => "dropped_in_conversion".to_owned(),
        dynamo::Verdict::Stored { tier, blocks_in_event, blocks_published } => {
            format!("store {tier} {blocks_published}/{blocks_in_event}")
        }
        dynamo::Verdict::SelfReferencingStore { tier } => format!("self_referencing_store {tier}"),
        dynamo::Verdict::Removed { tier, blocks } => format!("remove {tier} {blocks}"),
        dynamo::Verdict::Cleared => "clear".to_owned(),
    }
}

/// Runs `batches` through one listener (worker 1, rank 0, block size 16) and renders the outcome.
fn run(batches: &[Vec<u8>]) -> String {
    let mut listener = DynamoListener::new(1, 0, 16);
    let mut parts = Vec::new();
    for (seq, payload) in batches.iter().enumerate() {
        parts.push(match listener.apply(seq as u64, payload) {
            BatchOutcome::Lost { error } => format!("lost: {error}"),
            BatchOutcome::Events { verdicts, .. } => verdicts.iter().map(code).collect::<Vec<_>>().join(", "),
        });
    }
    parts.push(format!("warnings {}", listener.warnings()));
    parts.join(" | ")
}

/// Cases where kvscope's `dynamo-1.6.1` preset cannot give Dynamo's verdict, because
/// `kvscope-wire` decodes the payload differently (docs/dynamo-1.6.1.md, section 10, "Known
/// gaps"). None of them occurs in the corpus.
const PRESET_GAPS: &[(&str, &str)] = &[
    ("trailing bytes after the batch", "kvscope-wire rejects bytes after the batch; Dynamo's rmp_serde::from_slice ignores them"),
    ("dp_rank -1 becomes 4294967295", "kvscope-wire reads dp_rank as u32 and rejects -1; Dynamo reads i32 and bit-casts it"),
    (
        "known keys are type-checked whatever the tag",
        "kvscope-wire reads a nil block_size as absent (only stores need one); Dynamo wants a usize on every event",
    ),
];

/// Asserts each case's Dynamo outcome, and that kvscope's `dynamo-1.6.1` preset gives the same
/// verdict as Dynamo for every event of it (so every vector here is also a preset vector).
fn check(cases: &[(&str, Vec<Vec<u8>>, &str)]) {
    let mut failures = Vec::new();
    for (name, batches, want) in cases {
        let got = run(batches);
        if got != *want {
            failures.push(format!("{name}:\n  want {want}\n  got  {got}"));
        }
        let messages: Vec<(u64, &[u8])> = batches.iter().enumerate().map(|(i, b)| (i as u64, b.as_slice())).collect();
        let preset = crate::preset::compare_stream(name, 16, &messages);
        match PRESET_GAPS.iter().find(|(gap, _)| gap == name) {
            Some((_, why)) if preset.mismatches.is_empty() => failures
                .push(format!("{name}: listed in PRESET_GAPS ({why}) but the preset now agrees with Dynamo; remove it from the list")),
            Some(_) => {}
            None => {
                for m in preset.mismatches {
                    failures.push(format!("{name}: preset dynamo-1.6.1: {m}"));
                }
            }
        }
    }
    assert!(!cases.is_empty());
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

fn raw(build: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    build(&mut w);
    w.into_bytes()
}
