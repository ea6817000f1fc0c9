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

use kvscope_peer_bench::dynamo::{self, BatchOutcome, DynamoListener};
use kvscope_encode::raw::Writer;

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
    Ev(vec![
        ("type", Val::Str("BlockRemoved")),
        ("block_hashes", Val::Hashes(hashes.to_vec())),
    ])
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
        dynamo::Verdict::Stored {
            tier,
            blocks_in_event,
            blocks_published,
        } => {
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
            BatchOutcome::Events { verdicts, .. } => {
                verdicts.iter().map(code).collect::<Vec<_>>().join(", ")
            }
        });
    }
    parts.push(format!("warnings {}", listener.warnings()));
    parts.join(" | ")
}

/// Cases where kvscope's `dynamo-1.6.1` preset cannot give Dynamo's verdict, because
/// `kvscope-wire` decodes the payload differently (docs/dynamo-1.6.1.md, section 10, "Known
/// gaps"). None of them occurs in the corpus.
const PRESET_GAPS: &[(&str, &str)] = &[
    (
        "trailing bytes after the batch",
        "kvscope-wire rejects bytes after the batch; Dynamo's rmp_serde::from_slice ignores them",
    ),
    (
        "dp_rank -1 becomes 4294967295",
        "kvscope-wire reads dp_rank as u32 and rejects -1; Dynamo reads i32 and bit-casts it",
    ),
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
        let messages: Vec<(u64, &[u8])> = batches
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u64, b.as_slice()))
            .collect();
        let preset = crate::preset::compare_stream(name, 16, &messages);
        match PRESET_GAPS.iter().find(|(gap, _)| gap == name) {
            Some((_, why)) if preset.mismatches.is_empty() => failures.push(format!(
                "{name}: listed in PRESET_GAPS ({why}) but the preset now agrees with Dynamo; remove it from the list"
            )),
            Some(_) => {}
            None => {
                for m in preset.mismatches {
                    failures.push(format!("{name}: preset dynamo-1.6.1: {m}"));
                }
            }
        }
    }
    assert!(!cases.is_empty());
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn raw(build: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    build(&mut w);
    w.into_bytes()
}

#[test]
fn decoding_rejects_whole_batches() {
    let unknown = "unknown variant `Foo`, expected one of `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `Ignored`";
    check(&[
        (
            "2-element batch",
            vec![raw(|w| {
                w.array(2).f64(1.0).array(0);
            })],
            "lost: invalid length 2, expected a tuple of size 3 | warnings 0",
        ),
        (
            "map batch",
            vec![raw(|w| {
                w.map(3)
                    .str("ts")
                    .f64(1.0)
                    .str("events")
                    .array(0)
                    .str("data_parallel_rank")
                    .uint(0);
            })],
            "lost: invalid type: map, expected a tuple of size 3 | warnings 0",
        ),
        (
            "1-element batch",
            vec![raw(|w| {
                w.array(1).f64(1.0);
            })],
            "lost: invalid length 1, expected a tuple of size 3 | warnings 0",
        ),
        (
            "known keys are type-checked whatever the tag",
            vec![batch(&[remove(&[1]).with("block_size", Val::Nil)])],
            "lost: invalid type: unit value, expected usize | warnings 0",
        ),
        (
            "4-element batch",
            vec![raw(|w| {
                w.array(4).f64(1.0).array(0).uint(0).uint(0);
            })],
            "lost: array had incorrect length, expected 3 | warnings 0",
        ),
        (
            "events are read before the batch length is judged: 2 elements",
            vec![raw(|w| {
                w.array(2).f64(1.0).array(1);
                store(&[]).with("block_hashes", Val::BinHash(16)).write(w);
            })],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "events are read before the batch length is judged: 4 elements",
            vec![raw(|w| {
                w.array(4).f64(1.0).array(1);
                store(&[]).with("block_hashes", Val::BinHash(16)).write(w);
                w.uint(0).uint(0);
            })],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "the first bad value in byte order names the batch's error",
            vec![batch(&[
                store(&[1]).with("token_ids", Val::Signed(vec![-1])),
                store(&[]).with("block_hashes", Val::BinHash(32)),
            ])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "bin(32) block hash, GPU store before it lost too",
            vec![batch(&[
                store(&[1]),
                store(&[])
                    .with("block_hashes", Val::BinHash(32))
                    .medium("CPU"),
            ])],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "bin(16) parent",
            vec![batch(
                &[store(&[1]).with("parent_block_hash", Val::Bin(16))],
            )],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "unknown tag fails the batch",
            vec![batch(&[store(&[1]), tagged("Foo")])],
            &format!("lost: {unknown} | warnings 0"),
        ),
        (
            "missing block_size",
            vec![batch(&[remove(&[1])
                .with("type", Val::Str("BlockStored"))
                .with("token_ids", Val::Tokens(0))])],
            "lost: missing field `block_size` | warnings 0",
        ),
        (
            "nil block_size",
            vec![batch(&[store(&[1]).with("block_size", Val::Nil)])],
            "lost: invalid type: unit value, expected usize | warnings 0",
        ),
        (
            "negative token id",
            vec![batch(&[
                store(&[1]).with("token_ids", Val::Signed(vec![-1]))
            ])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "token id beyond u32",
            vec![batch(&[
                store(&[1]).with("token_ids", Val::Hashes(vec![1 << 32]))
            ])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "a string hash",
            vec![batch(&[
                store(&[1]).with("parent_block_hash", Val::Str("1"))
            ])],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "dp_rank beyond i32",
            vec![batch_dp(Val::U(1 << 31), &[store(&[1])])],
            "lost: invalid value: integer `2147483648`, expected i32 | warnings 0",
        ),
        (
            "negative group_idx",
            vec![batch(&[store(&[1]).with("group_idx", Val::I(-1))])],
            "lost: invalid value: integer `-1`, expected u32 | warnings 0",
        ),
        (
            "non-string medium",
            vec![batch(&[store(&[1]).with("medium", Val::U(3))])],
            "lost: invalid type: integer `3`, expected a string | warnings 0",
        ),
    ]);
}

#[test]
fn decoding_accepts() {
    check(&[
        (
            "trailing bytes after the batch",
            vec![{
                let mut b = batch(&[store(&[1])]);
                b.push(0xc0);
                b
            }],
            "store device 1/1 | warnings 0",
        ),
        (
            "unknown map keys",
            vec![batch(&[
                store(&[1]).with("lookahead_token_ids", Val::Tokens(3))
            ])],
            "store device 1/1 | warnings 0",
        ),
        (
            "an integer ts",
            vec![raw(|w| {
                w.array(3).uint(5).array(1);
                store(&[1]).write(w);
                w.uint(0);
            })],
            "store device 1/1 | warnings 0",
        ),
        (
            "nil dp_rank",
            vec![batch_dp(Val::Nil, &[store(&[1])])],
            "store device 1/1 | warnings 0",
        ),
        (
            "signed hashes",
            vec![batch(&[store(&[1])
                .with("block_hashes", Val::Signed(vec![-5]))
                .with("parent_block_hash", Val::I(-6))])],
            "store device 1/1 | warnings 0",
        ),
        (
            "dp_rank -1 becomes 4294967295",
            vec![batch_dp(Val::I(-1), &[store(&[1])])],
            "store device 1/1 | warnings 0",
        ),
    ]);
}

#[test]
fn preprocessing_order_ownership_ignored_locality_medium() {
    check(&[
        (
            "ownership kvcr",
            vec![batch(&[store(&[1]).with("ownership", Val::Str("kvcr"))])],
            "unsupported_ownership | warnings 0",
        ),
        (
            "ownership other",
            vec![batch(&[
                store(&[1]).with("ownership", Val::Str("framework"))
            ])],
            "unknown_ownership | warnings 0",
        ),
        (
            "ownership nil is framework",
            vec![batch(&[store(&[1]).with("ownership", Val::Nil)])],
            "store device 1/1 | warnings 0",
        ),
        (
            "clear with ownership kvcr",
            vec![batch(&[clear().with("ownership", Val::Str("kvcr"))])],
            "unsupported_ownership | warnings 0",
        ),
        (
            "ownership before locality",
            vec![batch(&[store(&[1])
                .with("ownership", Val::Str("kvcr"))
                .with("locality", Val::Str("REMOTE"))])],
            "unsupported_ownership | warnings 0",
        ),
        (
            "Ignored tag",
            vec![batch(&[tagged("Ignored")])],
            "ignored_event | warnings 0",
        ),
        (
            "locality REMOTE",
            vec![batch(&[store(&[1])
                .medium("STORAGE")
                .with("locality", Val::Str("REMOTE"))])],
            "non_local_locality | warnings 0",
        ),
        (
            "locality is case-sensitive",
            vec![batch(&[store(&[1]).with("locality", Val::Str("local"))])],
            "non_local_locality | warnings 0",
        ),
        (
            "locality LOCAL",
            vec![batch(&[store(&[1]).with("locality", Val::Str("LOCAL"))])],
            "store device 1/1 | warnings 0",
        ),
        (
            "locality before medium",
            vec![batch(&[store(&[1])
                .medium("tape")
                .with("locality", Val::Str("GLOBAL"))])],
            "non_local_locality | warnings 0",
        ),
        (
            "remove with REMOTE locality",
            vec![batch(&[remove(&[1]).with("locality", Val::Str("REMOTE"))])],
            "non_local_locality | warnings 0",
        ),
    ]);
}

#[test]
fn medium_table_is_exact() {
    let m = |medium: &'static str| batch(&[store(&[1]).medium(medium)]);
    check(&[
        (
            "absent",
            vec![batch(&[store(&[1])])],
            "store device 1/1 | warnings 0",
        ),
        (
            "empty is absent",
            vec![m("")],
            "store device 1/1 | warnings 0",
        ),
        ("GPU", vec![m("GPU")], "store device 1/1 | warnings 0"),
        ("DEVICE", vec![m("DEVICE")], "store device 1/1 | warnings 0"),
        ("CPU", vec![m("CPU")], "store host_pinned 1/1 | warnings 0"),
        (
            "CPU_PINNED",
            vec![m("CPU_PINNED")],
            "store host_pinned 1/1 | warnings 0",
        ),
        (
            "CPU_TIER1",
            vec![m("CPU_TIER1")],
            "store host_pinned 1/1 | warnings 0",
        ),
        (
            "CPU_TIER2",
            vec![m("CPU_TIER2")],
            "store disk 1/1 | warnings 0",
        ),
        ("DISK", vec![m("DISK")], "store disk 1/1 | warnings 0"),
        ("NVME", vec![m("NVME")], "store disk 1/1 | warnings 0"),
        ("STORAGE", vec![m("STORAGE")], "store disk 1/1 | warnings 0"),
        (
            "EXTERNAL",
            vec![m("EXTERNAL")],
            "store external 1/1 | warnings 0",
        ),
        (
            "NETWORK",
            vec![m("NETWORK")],
            "store external 1/1 | warnings 0",
        ),
        (
            "REMOTE",
            vec![m("REMOTE")],
            "store external 1/1 | warnings 0",
        ),
        (
            "SHARED",
            vec![m("SHARED")],
            "store external 1/1 | warnings 0",
        ),
        (
            "lowercase cpu",
            vec![m("cpu")],
            "unknown_medium | warnings 0",
        ),
        ("Gpu", vec![m("Gpu")], "unknown_medium | warnings 0"),
        (
            "FS (vLLM 0.26)",
            vec![m("FS")],
            "unknown_medium | warnings 0",
        ),
        (
            "trailing space",
            vec![m("GPU ")],
            "unknown_medium | warnings 0",
        ),
        (
            "removal on cpu",
            vec![batch(&[remove(&[1]).medium("cpu")])],
            "unknown_medium | warnings 0",
        ),
        (
            "medium before group filter",
            vec![batch(&[store(&[1]).medium("cpu").group(0).kind("mamba")])],
            "unknown_medium | warnings 0",
        ),
    ]);
}

#[test]
fn group_filter_learns_from_device_and_host_stores_only() {
    check(&[
        (
            "kind decides first",
            vec![batch(&[
                store(&[1]).group(0).kind("mamba"),
                store(&[2]).group(9).kind("sink_full_attention"),
            ])],
            "non_main_attention_kind, store device 1/1 | warnings 0",
        ),
        (
            "main kinds",
            vec![batch(&[
                store(&[1]).kind("full_attention"),
                store(&[2]).kind("mla_attention"),
                store(&[3]).kind("sink_full_attention"),
            ])],
            "store device 1/1, store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "non-main kinds",
            vec![batch(&[
                store(&[1]).kind("sliding_window"),
                store(&[2]).kind("sliding_window_mla"),
                store(&[3]).kind("chunked_local_attention"),
                store(&[4]).kind("encoder_only_attention"),
                store(&[5]).kind("cross_attention"),
            ])],
            "non_main_attention_kind, non_main_attention_kind, non_main_attention_kind, non_main_attention_kind, non_main_attention_kind | warnings 0",
        ),
        (
            "unknown kind",
            vec![batch(&[store(&[1]).kind("Mamba")])],
            "unknown_kind | warnings 0",
        ),
        (
            "learned non-main group",
            vec![batch(&[
                store(&[1]).group(5).kind("mamba"),
                remove(&[1]).group(5),
                store(&[2]).group(5),
            ])],
            "non_main_attention_kind, non_main_attention_group, non_main_attention_group | warnings 0",
        ),
        (
            "learned main group",
            vec![batch(&[
                store(&[1]).group(3).kind("mla_attention"),
                remove(&[1]).group(3),
            ])],
            "store device 1/1, remove device 1 | warnings 0",
        ),
        (
            "learned unknown kind",
            vec![batch(&[
                store(&[1]).group(4).kind("weird"),
                remove(&[1]).group(4),
            ])],
            "unknown_kind, unknown_kind | warnings 0",
        ),
        (
            "unlearned group",
            vec![batch(&[
                remove(&[1]).group(6),
                remove(&[1]).group(0),
                remove(&[1]),
            ])],
            "unlearned_group_idx, remove device 1, remove device 1 | warnings 0",
        ),
        (
            "removals never teach",
            vec![batch(&[
                remove(&[1]).group(7).kind("mla_attention"),
                remove(&[1]).group(7),
            ])],
            "remove device 1, unlearned_group_idx | warnings 0",
        ),
        (
            "learning needs group and kind",
            vec![batch(&[
                store(&[1]).kind("mla_attention"),
                store(&[2]).group(8),
                remove(&[2]).group(8),
            ])],
            "store device 1/1, unlearned_group_idx, unlearned_group_idx | warnings 0",
        ),
        (
            "last store wins",
            vec![batch(&[
                store(&[1]).group(2).kind("mamba"),
                store(&[2]).group(2).kind("full_attention"),
                remove(&[2]).group(2),
            ])],
            "non_main_attention_kind, store device 1/1, remove device 1 | warnings 0",
        ),
        (
            "learned across batches, kept after a clear",
            vec![
                batch(&[store(&[1]).group(5).kind("mamba")]),
                batch(&[clear(), remove(&[1]).group(5)]),
            ],
            "non_main_attention_kind | clear, non_main_attention_group | warnings 0",
        ),
        (
            "learned per dp rank",
            vec![
                batch_dp(Val::U(0), &[store(&[1]).group(3).kind("mla_attention")]),
                batch_dp(Val::U(1), &[remove(&[1]).group(3)]),
                batch_dp(Val::Nil, &[remove(&[1]).group(3)]),
            ],
            "store device 1/1 | unlearned_group_idx | remove device 1 | warnings 0",
        ),
        (
            "host tier stores teach",
            vec![batch(&[
                store(&[1]).medium("CPU").group(3).kind("mla_attention"),
                remove(&[1]).group(3),
            ])],
            "store host_pinned 1/1, remove device 1 | warnings 0",
        ),
        (
            "disk and external bypass the filter and never teach",
            vec![batch(&[
                store(&[1]).medium("STORAGE").group(3).kind("mamba"),
                store(&[2])
                    .medium("EXTERNAL")
                    .group(4)
                    .kind("mla_attention"),
                remove(&[2]).group(4),
            ])],
            "store disk 1/1, store external 1/1, unlearned_group_idx | warnings 0",
        ),
    ]);
}

#[test]
fn conversion_never_stops_the_listener() {
    check(&[
        (
            "device store at another block size: applied with no blocks",
            vec![batch(&[sized_store(&[1, 2], 32, 64).medium("GPU")])],
            "store device 0/2 | warnings 1",
        ),
        (
            "offload placeholder: applied with no blocks",
            vec![batch(&[sized_store(&[1], 0, 0).medium("CPU")])],
            "store host_pinned 0/1 | warnings 1",
        ),
        (
            "storage placeholder: applied with no blocks",
            vec![batch(&[sized_store(&[1], 0, 0).medium("STORAGE")])],
            "store disk 0/1 | warnings 1",
        ),
        (
            "short token_ids: the blocks that fit",
            vec![batch(&[sized_store(&[1, 2, 3], 16, 40)])],
            "store device 2/3 | warnings 1",
        ),
        (
            "extra token_ids are ignored",
            vec![batch(&[sized_store(&[1], 16, 20)])],
            "store device 1/1 | warnings 0",
        ),
        (
            "empty store",
            vec![batch(&[store(&[])])],
            "store device 0/0 | warnings 0",
        ),
        (
            "bigram pages need block_size + 1 tokens",
            vec![batch(&[
                store(&[1]).with("token_ids", Val::Pairs(16)),
                store(&[2]).with("token_ids", Val::Pairs(15)),
            ])],
            "store device 1/1, store device 0/1 | warnings 1",
        ),
        (
            "one warning per event, one counter for every kind, never reset",
            vec![
                batch(&[
                    sized_store(&[1, 2], 32, 64),
                    sized_store(&[3], 0, 0).medium("CPU"),
                ]),
                batch(&[
                    sized_store(&[4, 5, 6], 16, 20),
                    clear(),
                    sized_store(&[7], 8, 8),
                ]),
            ],
            "store device 0/2, store host_pinned 0/1 | store device 1/3, clear, store device 0/1 | warnings 4",
        ),
        (
            "self-referencing: parent among the hashes",
            vec![batch(&[store(&[1, 2]).parent(2)])],
            "self_referencing_store device | warnings 0",
        ),
        (
            "self-referencing: a hash twice",
            vec![batch(&[store(&[3, 3])])],
            "self_referencing_store device | warnings 0",
        ),
        (
            "self-reference before the block-size check",
            vec![batch(&[sized_store(&[4], 0, 0).medium("CPU").parent(4)])],
            "self_referencing_store host_pinned | warnings 0",
        ),
    ]);
}

#[test]
fn cache_namespaces_on_device_and_host_tiers() {
    let salted =
        |hashes: &[u64], salt: &'static str| store(hashes).with("cache_salt", Val::Str(salt));
    check(&[
        (
            "a child inherits its parent's namespace",
            vec![batch(&[salted(&[1], "t1"), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "a hash stored salted and unsalted becomes ambiguous",
            vec![batch(&[
                salted(&[1], "t1"),
                store(&[1]),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "two namespaces on one hash",
            vec![batch(&[
                salted(&[1], "t1"),
                salted(&[1], "t2"),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "a salted child of an ambiguous parent is fine",
            vec![batch(&[
                salted(&[1], "t1"),
                store(&[1]),
                salted(&[2], "t1").parent(1),
            ])],
            "store device 1/1, store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "removing an ambiguous hash keeps it ambiguous",
            vec![batch(&[
                salted(&[1], "t1"),
                store(&[1]),
                remove(&[1]),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store device 1/1, remove device 1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "a clear forgets namespaces",
            vec![batch(&[
                salted(&[1], "t1"),
                store(&[1]),
                clear(),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store device 1/1, clear, store device 1/1 | warnings 0",
        ),
        (
            "empty salt is no salt",
            vec![batch(&[
                salted(&[1], ""),
                salted(&[1], "t1"),
                store(&[1]),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "namespaces are per tier family, not per tier",
            vec![batch(&[
                salted(&[1], "t1").medium("CPU"),
                store(&[1]),
                store(&[2]).parent(1),
            ])],
            "store host_pinned 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "disk stores neither record nor check",
            vec![batch(&[
                salted(&[1], "t1"),
                store(&[1]).medium("DISK"),
                store(&[2]).parent(1),
            ])],
            "store device 1/1, store disk 1/1, store device 1/1 | warnings 0",
        ),
    ]);
}

#[test]
fn positional_events_by_slot() {
    // [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys, ...]
    let positional = |tail: &dyn Fn(&mut Writer), n: usize| {
        raw(|w| {
            w.array(3)
                .f64(1.0)
                .array(1)
                .array(9 + n)
                .str("BlockStored")
                .array(1)
                .uint(9)
                .nil()
                .array(16);
            for i in 0..16 {
                w.uint(i);
            }
            w.uint(16).nil().str("GPU").nil().nil();
            tail(w);
            w.uint(0);
        })
    };
    check(&[
        (
            "vLLM 0.22: group, kind, sliding window",
            vec![positional(
                &|w| {
                    w.uint(3).str("mamba").nil();
                },
                3,
            )],
            "non_main_attention_kind | warnings 0",
        ),
        (
            "a nil group with a sliding window reads the window as the group (legacy tail)",
            vec![positional(
                &|w| {
                    w.nil().nil().uint(128);
                },
                3,
            )],
            "unlearned_group_idx | warnings 0",
        ),
        (
            "negative lora_id rejects the batch",
            vec![raw(|w| {
                w.array(3)
                    .f64(1.0)
                    .array(1)
                    .array(6)
                    .str("BlockStored")
                    .array(1)
                    .uint(9)
                    .nil()
                    .array(0)
                    .uint(16)
                    .int(-1);
                w.uint(0);
            })],
            "lost: invalid value: integer `-1`, expected u64 | warnings 0",
        ),
        (
            "too short",
            vec![raw(|w| {
                w.array(3)
                    .f64(1.0)
                    .array(1)
                    .array(4)
                    .str("BlockStored")
                    .array(1)
                    .uint(9)
                    .nil()
                    .array(0);
                w.uint(0);
            })],
            "lost: invalid length 4, expected missing block_size | warnings 0",
        ),
    ]);
}

#[test]
fn dp_rank_comes_from_the_batch_or_the_listener() {
    let mut listener = DynamoListener::new(1, 2, 16);
    let rank = |outcome: BatchOutcome| match outcome {
        BatchOutcome::Events { dp_rank, .. } => dp_rank,
        BatchOutcome::Lost { error } => panic!("{error}"),
    };
    assert_eq!(rank(listener.apply(0, &batch_dp(Val::U(3), &[]))), 3);
    assert_eq!(
        rank(listener.apply(1, &batch_dp(Val::Nil, &[]))),
        2,
        "nil: the listener's own rank"
    );
    assert_eq!(
        rank(listener.apply(2, &batch_dp(Val::I(-1), &[]))),
        u32::MAX,
        "bit-cast from i32"
    );
}
