//! One table of normalizer vectors, one runner, any number of hosts.
//!
//! The table (`vectors/normalizer.json`, embedded) lists inputs (events described as data,
//! encoded here into real msgpack payloads, and corpus payloads by file name), a configuration
//! (block size) and the expected verdicts under each policy. A vector states its expectation
//! under every preset ([`crate::Policy::PRESETS`]), or lists in `policies` the presets it is
//! for and states exactly those. [`run_vectors`] feeds each vector, under each of its policies,
//! through a caller-supplied [`VectorHost`] and compares what comes back; a missing, extra or
//! unknown policy is a failure, not a silent skip. The same table runs:
//!
//! - natively through [`NativeHost`] (`cargo test -p kvscope-normalize`),
//! - natively with tier trees (`kvscope-tiers` tests, which also check tree sizes),
//! - in headless Chromium through `wasm_bindgen_test` (`kvscope-wasm`), and
//! - in headless Chromium through the JS-facing wasm-bindgen API, comparing the `JsValue`s.
//!
//! Every host asserts how many runs it made and fails on zero ([`VectorReport::assert_ok`]): a
//! runner that silently runs nothing is the failure this design exists to prevent.
//!
//! Codes compared per verdict are [`kvscope_normalize::Verdict::code`] (`store device 2`,
//! `offload_block_size_mismatch host_pinned`); a payload that does not decode yields one code
//! `decode_error <kind>` for the whole frame.
//!
//! # Format
//!
//! ```json
//! {"name": "...", "about": "why it exists", "block_size": 1536, "policies": ["fixed", "legacy"],
//!  "frames": [
//!    {"source": "w0:0", "seq": 8, "corpus": "vllm-0.33.0/kimi_k3_agg-w0-09.msgpack"},
//!    {"source": "w0:0", "seq": 9, "encoding": "array", "events": [
//!      {"type": "BlockStored", "hashes": [9], "block_size": 12288, "medium": "cpu", "group_idx": 3}]},
//!    {"source": "w0:0", "seq": 10, "raw_hex": "93 cb"}],
//!  "expect": {
//!    "fixed":  {"verdicts": ["...", "offload_block_size_mismatch host_pinned"],
//!               "text": {"1": "medium \"cpu\" -> HostPinned (case-insensitive); ..."},
//!               "sources": {"w0:0": {"fatal": [0, null], "offload": [1, 0], "conversion": [0, 0],
//!                                    "trees": {"device": 2}}}},
//!    "legacy": {"verdicts": ["..."]}}}
//! ```
//!
//! `policies` is optional (absent: every preset). Frame fields: `layout` (`array3`, the
//! default; `array2` as vLLM 0.9.0 writes; `array4` with one element too many; `map`).
//! Event fields ([`EventSpec`]): `type`, `hashes` (ints, or `{"bin": 32, "value": 7}` for a bin
//! whose last 8 bytes are `value`), `parent`, `tokens` (default: hashes x block_size),
//! `token_ids` (explicit ids, any i64), `bigram` (write `tokens` pairs), `block_size` (required
//! for stores), `lora_id`, `lora_name`, `medium`, `extra_keys` (the first block's keys),
//! `cache_salt` (array encoding: SGLang's `{cache_salt}` map at position 7), `group_idx`,
//! `kind`, `sliding_window`, `locality`, `ownership` (map encoding only); an absent field is
//! absent on the wire (map encoding) or nil (array encoding). `text` keys index `verdicts`.
//! `sources` fields are optional; `trees` (live blocks per tier, unlisted tiers empty) is checked
//! by hosts that keep trees; `notices` counts the lines the indexer prints every time.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kvscope_encode::{encode_batch as encode, release, BatchForm, Event, Hash, Layout, Removed, Stored, Tokens};
use kvscope_normalize::{Normalizer, Policy, Verdict};
use serde::Deserialize;

/// The embedded vector table.
pub const VECTORS_JSON: &str = include_str!("../vectors/normalizer.json");

/// The policies a vector runs under: the ones it lists, or every preset.
pub fn policies_of(vector: &Vector) -> Vec<&str> {
    match &vector.policies {
        Some(listed) => listed.iter().map(String::as_str).collect(),
        None => Policy::names().collect(),
    }
}

/// The parsed table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorTable {
    pub about: String,
    pub vectors: Vec<Vector>,
}

/// One vector: inputs, configuration, expectations per policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    pub name: String,
    /// Why the vector exists (which rule, which incident).
    pub about: String,
    pub block_size: u32,
    /// The presets this vector is for; absent means every preset.
    #[serde(default)]
    pub policies: Option<Vec<String>>,
    pub frames: Vec<FrameSpec>,
    /// Policy name -> what must come out.
    pub expect: BTreeMap<String, Expect>,
}

impl Vector {
    /// The vector's payloads, ready to push; `corpus` looks corpus payloads up by manifest path.
    pub fn frames(&self, corpus: impl Fn(&str) -> Option<Vec<u8>>) -> Result<Vec<Frame>, String> {
        build_frames(self, &corpus)
    }
}

/// One payload pushed for a source: events described as data, or a corpus file, or raw bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameSpec {
    /// `worker:dp_rank`, e.g. `w0:0`.
    pub source: String,
    pub seq: u64,
    /// Events to encode (exclusive with `corpus` and `raw_hex`).
    #[serde(default)]
    pub events: Option<Vec<EventSpec>>,
    /// A corpus payload by manifest path, e.g. `vllm-0.33.0/kimi_k3_agg-w0-09.msgpack`.
    #[serde(default)]
    pub corpus: Option<String>,
    /// Raw payload bytes in hex (for malformed input).
    #[serde(default)]
    pub raw_hex: Option<String>,
    /// `map` (vLLM 0.24 on, the default) or `array` (tagged arrays, vLLM up to 0.23).
    #[serde(default)]
    pub encoding: Option<String>,
    /// The batch's outer shape: `array3` (the default), `array2`, `array4` or `map`.
    #[serde(default)]
    pub layout: Option<String>,
    /// The batch's own dp_rank field; defaults to the source's rank. `null` writes nil.
    #[serde(default, deserialize_with = "present")]
    pub batch_dp_rank: Option<Option<u32>>,
    #[serde(default)]
    pub ts: f64,
}

/// Tells a present `null` (`Some(None)`) from an absent key (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

/// A hash: an unsigned or signed integer (signed ones are written as msgpack ints and bit-cast
/// by the decoder), or a bin of `bin` bytes whose last 8 are `value`, big-endian.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum HashSpec {
    Unsigned(u64),
    Signed(i64),
    Bin { bin: usize, value: u64 },
}

/// One event described as data.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, or any other tag.
    #[serde(rename = "type")]
    pub tag: String,
    #[serde(default)]
    pub hashes: Vec<HashSpec>,
    #[serde(default)]
    pub parent: Option<HashSpec>,
    /// Token count; defaults to `hashes * block_size`.
    #[serde(default)]
    pub tokens: Option<u32>,
    #[serde(default)]
    pub block_size: Option<u32>,
    #[serde(default)]
    pub medium: Option<String>,
    #[serde(default)]
    pub group_idx: Option<u32>,
    #[serde(default)]
    pub kind: Option<String>,
    /// Explicit token ids (overrides `tokens`), e.g. `[-1]` or `[4294967296]`.
    #[serde(default)]
    pub token_ids: Option<Vec<i64>>,
    /// Write `tokens` SGLang bigram pairs instead of ids.
    #[serde(default)]
    pub bigram: bool,
    #[serde(default)]
    pub lora_id: Option<i64>,
    #[serde(default)]
    pub lora_name: Option<String>,
    /// The first block's `extra_keys` (strings); written as `[[...]]`.
    #[serde(default)]
    pub extra_keys: Option<Vec<String>>,
    #[serde(default)]
    pub cache_salt: Option<String>,
    #[serde(default)]
    pub sliding_window: Option<u32>,
    #[serde(default)]
    pub locality: Option<String>,
    #[serde(default)]
    pub ownership: Option<String>,
}

/// What must come out of one vector under one policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// One code per event (per frame for a frame that does not decode), in push order.
    pub verdicts: Vec<String>,
    /// Full sentences for some verdicts: index into `verdicts` -> text.
    #[serde(default)]
    pub text: BTreeMap<usize, String>,
    /// Per-source counters, by `worker:dp_rank`.
    #[serde(default)]
    pub sources: BTreeMap<String, SourceExpect>,
}

/// Expected counters of one source; absent fields are not checked.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SourceExpect {
    /// `[fatal_count, seq of the first fatal]`.
    #[serde(default)]
    pub fatal: Option<(u64, Option<u64>)>,
    /// `[emitted, suppressed]`.
    #[serde(default)]
    pub conversion: Option<[u64; 2]>,
    /// `[emitted, suppressed]`.
    #[serde(default)]
    pub offload: Option<[u64; 2]>,
    /// Live blocks per tier label, checked only by hosts that keep trees.
    #[serde(default)]
    pub trees: Option<BTreeMap<String, u64>>,
    /// Lines printed every time ([`kvscope_normalize::NoticeLog::total`]).
    #[serde(default)]
    pub notices: Option<u64>,
}

/// Parses the embedded table.
///
/// # Panics
/// If the embedded JSON is malformed: a build-time asset, checked by every host's first run.
pub fn table() -> VectorTable {
    serde_json::from_str(VECTORS_JSON).unwrap_or_else(|e| panic!("vectors/normalizer.json: {e}"))
}

/// Number of vectors in the table.
pub fn vector_count() -> usize {
    table().vectors.len()
}

/// A payload ready to push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub worker_id: String,
    pub dp_rank: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// One vector under one policy, as a host receives it.
#[derive(Debug, Clone, Copy)]
pub struct VectorCase<'a> {
    pub vector: &'a str,
    pub policy: &'a str,
    pub block_size: u32,
    pub frames: &'a [Frame],
}

/// One verdict as a host reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutVerdict {
    pub code: String,
    pub text: String,
}

impl OutVerdict {
    pub fn from_verdict(v: &Verdict) -> Self {
        OutVerdict { code: v.code().to_string(), text: v.to_string() }
    }
}

/// One source's counters as a host reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutSource {
    /// `worker:dp_rank`.
    pub source: String,
    pub fatal_count: u64,
    pub first_fatal_seq: Option<u64>,
    pub conversion: [u64; 2],
    pub offload: [u64; 2],
    /// Lines printed every time.
    pub notices: u64,
    /// Live blocks per tier label, if the host keeps trees.
    pub trees: Option<BTreeMap<String, u64>>,
}

/// What a host produced for one case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VectorOutput {
    pub verdicts: Vec<OutVerdict>,
    pub sources: Vec<OutSource>,
}

/// An entry point the vectors run through.
pub trait VectorHost {
    /// For reports: `native`, `wasm`, `wasm-js`.
    fn name(&self) -> &str;
    /// The bytes of a corpus payload by manifest path (hosts link `kvscope-corpus`).
    fn corpus_payload(&self, file: &str) -> Option<Vec<u8>>;
    /// Runs one case from a fresh state: a normalizer for `case.block_size` and `case.policy`,
    /// the frames pushed in order.
    fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String>;
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct VectorReport {
    pub host: String,
    /// Vectors in the table.
    pub vectors: usize,
    /// (vector, policy) cases run.
    pub runs: usize,
    /// Cases with at least one mismatch.
    pub failed_runs: usize,
    /// Tree expectations the host could not check (it keeps no trees).
    pub tree_checks_skipped: usize,
    /// One entry per mismatch, `vector [policy]: what differs`.
    pub failures: Vec<String>,
}

impl VectorReport {
    /// Panics listing every failure, or if no case ran, or if the number of runs is not
    /// `expected_runs`.
    pub fn assert_ok(&self, expected_runs: usize) {
        assert!(self.runs > 0, "host {}: no normalizer vector ran; is vectors/normalizer.json empty?", self.host);
        assert!(
            self.failures.is_empty(),
            "host {}: {} of {} vector runs failed ({} mismatches):\n{}",
            self.host,
            self.failed_runs,
            self.runs,
            self.failures.len(),
            self.failures.join("\n")
        );
        assert_eq!(self.runs, expected_runs, "host {}: ran {} vector cases, expected {expected_runs}", self.host, self.runs);
    }
}

/// The number of (vector, policy) cases in the table: each vector under each of its policies.
pub fn case_count() -> usize {
    table().vectors.iter().map(|v| policies_of(v).len()).sum()
}

/// The number of cases under one policy.
pub fn case_count_for(policy: &str) -> usize {
    table().vectors.iter().filter(|v| policies_of(v).contains(&policy)).count()
}

/// What is wrong with a vector's policy list and expectations, if anything.
fn policy_errors(vector: &Vector) -> Vec<String> {
    let listed = policies_of(vector);
    let mut errors = Vec::new();
    for p in &listed {
        if p.parse::<Policy>().is_err() {
            errors.push(format!("{}: lists policy {p:?}, which is not a preset", vector.name));
        } else if !vector.expect.contains_key(*p) {
            errors.push(format!("{}: no expectation for policy {p:?}", vector.name));
        }
    }
    for p in vector.expect.keys() {
        if !listed.contains(&p.as_str()) {
            errors.push(format!("{}: expectation for policy {p:?}, which the vector does not run under", vector.name));
        }
    }
    errors
}

/// Runs every vector under every policy it lists (or every preset).
pub fn run_vectors(host: &mut impl VectorHost) -> VectorReport {
    let table = table();
    let mut report = VectorReport { host: host.name().to_owned(), vectors: table.vectors.len(), ..Default::default() };
    for vector in &table.vectors {
        report.failures.extend(policy_errors(vector));
        let frames = match build_frames(vector, &|f: &str| host.corpus_payload(f)) {
            Ok(frames) => frames,
            Err(e) => {
                report.failures.push(format!("{}: {e}", vector.name));
                continue;
            }
        };
        for policy in policies_of(vector) {
            let Some(expect) = vector.expect.get(policy) else { continue };
            report.runs += 1;
            let before = report.failures.len();
            let case = VectorCase { vector: &vector.name, policy, block_size: vector.block_size, frames: &frames };
            match host.run(&case) {
                Ok(out) => compare(vector, policy, expect, &out, &mut report),
                Err(e) => report.failures.push(format!("{} [{policy}]: host error: {e}", vector.name)),
            }
            if report.failures.len() > before {
                report.failed_runs += 1;
            }
        }
    }
    report
}

fn compare(vector: &Vector, policy: &str, expect: &Expect, out: &VectorOutput, report: &mut VectorReport) {
    let at = format!("{} [{policy}]", vector.name);
    let got: Vec<&str> = out.verdicts.iter().map(|v| v.code.as_str()).collect();
    if got != expect.verdicts {
        let mut msg = format!("{at}: verdicts differ (expected {}, got {}):", expect.verdicts.len(), got.len());
        for i in 0..got.len().max(expect.verdicts.len()) {
            let e = expect.verdicts.get(i).map_or("<none>", String::as_str);
            let g = got.get(i).copied().unwrap_or("<none>");
            let mark = if e == g { " " } else { "!" };
            let _ = write!(msg, "\n  {mark} [{i}] expected {e:?}, got {g:?}");
        }
        report.failures.push(msg);
    }
    for (&i, text) in &expect.text {
        match out.verdicts.get(i) {
            Some(v) if &v.text == text => {}
            Some(v) => report.failures.push(format!("{at}: verdict [{i}] text:\n  expected {text:?}\n  got      {:?}", v.text)),
            None => report.failures.push(format!("{at}: verdict [{i}] text expected, but only {} verdicts", got.len())),
        }
    }
    for (source, se) in &expect.sources {
        let Some(os) = out.sources.iter().find(|s| &s.source == source) else {
            report.failures.push(format!("{at}: source {source} expected, host reported none"));
            continue;
        };
        if let Some((count, seq)) = se.fatal
            && (os.fatal_count, os.first_fatal_seq) != (count, seq)
        {
            report.failures.push(format!(
                "{at}: {source} fatal: expected count {count} first seq {seq:?}, got {} / {:?}",
                os.fatal_count, os.first_fatal_seq
            ));
        }
        if let Some(c) = se.conversion
            && os.conversion != c
        {
            report.failures.push(format!(
                "{at}: {source} conversion warnings [emitted, suppressed]: expected {c:?}, got {:?}",
                os.conversion
            ));
        }
        if let Some(o) = se.offload
            && os.offload != o
        {
            report.failures.push(format!(
                "{at}: {source} offload warnings [emitted, suppressed]: expected {o:?}, got {:?}",
                os.offload
            ));
        }
        if let Some(n) = se.notices
            && os.notices != n
        {
            report.failures.push(format!("{at}: {source} notices: expected {n}, got {}", os.notices));
        }
        if let Some(trees) = &se.trees {
            match &os.trees {
                None => report.tree_checks_skipped += 1,
                Some(got) => {
                    // Tiers not listed must be empty.
                    let mut want = trees.clone();
                    want.retain(|_, n| *n > 0);
                    let mut have = got.clone();
                    have.retain(|_, n| *n > 0);
                    if want != have {
                        report.failures.push(format!("{at}: {source} live blocks per tier: expected {want:?}, got {have:?}"));
                    }
                }
            }
        }
    }
}

/// Splits `w0:1` into `("w0", 1)`.
pub fn parse_source(s: &str) -> Result<(String, u32), String> {
    let (worker, rank) = s.rsplit_once(':').ok_or_else(|| format!("source {s:?} is not worker:dp_rank"))?;
    let rank = rank.parse().map_err(|_| format!("source {s:?}: dp_rank {rank:?} is not a u32"))?;
    Ok((worker.to_owned(), rank))
}

fn build_frames(vector: &Vector, corpus: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<Vec<Frame>, String> {
    vector
        .frames
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let (worker_id, dp_rank) = parse_source(&spec.source)?;
            let payload = match (&spec.events, &spec.corpus, &spec.raw_hex) {
                (Some(events), None, None) => {
                    let rank = spec.batch_dp_rank.unwrap_or(Some(dp_rank));
                    let array = match spec.encoding.as_deref() {
                        None | Some("map") => false,
                        Some("array") => true,
                        Some(other) => return Err(format!("frame {i}: encoding {other:?} is not map or array")),
                    };
                    let layout = spec.layout.as_deref().unwrap_or("array3");
                    encode_batch_with(spec.ts, events, rank, array, layout).map_err(|e| format!("frame {i}: {e}"))?
                }
                (None, Some(file), None) => corpus(file).ok_or_else(|| format!("frame {i}: no corpus payload {file:?}"))?,
                (None, None, Some(hex)) => decode_hex(hex).map_err(|e| format!("frame {i}: raw_hex: {e}"))?,
                _ => return Err(format!("frame {i}: give exactly one of events, corpus, raw_hex")),
            };
            Ok(Frame { worker_id, dp_rank, seq: spec.seq, payload })
        })
        .collect()
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    let hex: String = hex.split_whitespace().collect();
    if !hex.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("at {i}: {e}")))
        .collect()
}

/// The bytes of a bin hash nobody reads: the decoder keeps a bin's last 8 bytes only.
const BIN_FILL: u8 = 0x5a;

fn hash(h: HashSpec) -> Hash {
    match h {
        HashSpec::Unsigned(v) => Hash::U64(v),
        HashSpec::Signed(v) => Hash::I64(v),
        HashSpec::Bin { bin, value } => Hash::bin_ending(bin, value, BIN_FILL),
    }
}

/// `token_ids`: the explicit ids, or `n` small positive ids (one byte each, realistic enough),
/// as pairs for a bigram page.
fn tokens(e: &EventSpec, n: u32) -> Tokens {
    if let Some(ids) = &e.token_ids {
        return Tokens::Ids(ids.clone());
    }
    let id = |i: u32| i64::from(i % 100) + 1;
    if e.bigram { Tokens::Pairs((0..n).map(|i| [id(i), id(i) + 1]).collect()) } else { Tokens::Ids((0..n).map(id).collect()) }
}

/// The event an [`EventSpec`] describes. Which fields reach the wire is the layout's business:
/// one the layout cannot hold (a `locality` in the array encoding) fails the encode.
fn event(e: &EventSpec) -> Result<Event, String> {
    let hashes = || e.hashes.iter().copied().map(hash);
    Ok(match e.tag.as_str() {
        "BlockStored" => {
            let block_size = e.block_size.ok_or("BlockStored needs block_size")?;
            let n = e.tokens.unwrap_or(e.hashes.len() as u32 * block_size);
            Stored::new(hashes(), block_size)
                .parent(e.parent.map(hash))
                .token_ids(tokens(e, n))
                .lora_id(e.lora_id)
                .medium(e.medium.as_deref())
                .lora_name(e.lora_name.as_deref())
                .extra_keys(e.extra_keys.clone().map(|first| vec![Some(first)]))
                .cache_salt(e.cache_salt.as_deref())
                .group_idx(e.group_idx)
                .kind(e.kind.as_deref())
                .sliding_window(e.sliding_window)
                .locality(e.locality.as_deref())
                .ownership(e.ownership.as_deref())
                .into()
        }
        "BlockRemoved" => Removed::new(hashes())
            .medium(e.medium.as_deref())
            .group_idx(e.group_idx)
            .kind(e.kind.as_deref())
            .locality(e.locality.as_deref())
            .ownership(e.ownership.as_deref())
            .into(),
        // AllBlocksCleared and unknown tags carry nothing the normalizer reads but a clear's
        // ownership.
        tag => Event::other(tag, e.ownership.as_deref()),
    })
}

/// Encodes a batch `[ts, events, dp_rank]` as an engine would: tagged maps (`array == false`,
/// vLLM 0.24 on) or tagged arrays with every position written (vLLM 0.22-0.23 layout).
pub fn encode_batch(ts: f64, events: &[EventSpec], dp_rank: Option<u32>, array: bool) -> Result<Vec<u8>, String> {
    encode_batch_with(ts, events, dp_rank, array, "array3")
}

/// [`encode_batch`] with the batch's outer `layout`: `array3`; `array2` (`[ts, events]`, vLLM
/// 0.9.0, no dp_rank: `dp_rank` is ignored); `array4` (`[ts, events, dp_rank, nil]`); `map`
/// (`{ts, events, data_parallel_rank}`). Events use [`release::FULL_ARRAY`] or
/// [`release::SPARSE_MAP`], so a vector sets exactly the fields it names.
pub fn encode_batch_with(
    ts: f64,
    events: &[EventSpec],
    dp_rank: Option<u32>,
    array: bool,
    layout: &str,
) -> Result<Vec<u8>, String> {
    let (form, dp_rank) = match layout {
        "array3" => (BatchForm::Array { len: 3 }, dp_rank),
        "array2" => (BatchForm::Array { len: 2 }, None),
        "array4" => (BatchForm::Array { len: 4 }, dp_rank),
        "map" => (BatchForm::Map, dp_rank),
        other => return Err(format!("layout {other:?} is not array3, array2, array4 or map")),
    };
    let events_layout: Layout = if array { release::FULL_ARRAY } else { release::SPARSE_MAP };
    let events = events.iter().enumerate().map(|(i, e)| event(e).map_err(|m| format!("event {i}: {m}"))).collect::<Result<_, _>>()?;
    let batch = kvscope_encode::Batch { ts, events, dp_rank };
    encode(&events_layout.with_batch(form), &batch).map_err(|e| e.to_string())
}

/// The reference host: a [`Normalizer`] called directly.
#[derive(Debug, Clone, Copy)]
pub struct NativeHost {
    corpus: fn(&str) -> Option<&'static [u8]>,
}

impl NativeHost {
    /// `corpus` looks payloads up by manifest path (`kvscope_corpus::payload`).
    pub fn new(corpus: fn(&str) -> Option<&'static [u8]>) -> Self {
        NativeHost { corpus }
    }
}

/// Reports a normalizer's sources as [`OutSource`]s (no trees).
pub fn source_outputs(n: &Normalizer) -> Vec<OutSource> {
    n.sources()
        .map(|(id, key)| {
            let c = n.counters(id);
            OutSource {
                source: key.to_string(),
                fatal_count: c.fatal_count,
                first_fatal_seq: c.first_fatal.as_ref().map(|l| l.seq),
                conversion: [c.conversion.emitted, c.conversion.suppressed],
                offload: [c.offload.emitted, c.offload.suppressed],
                notices: c.notices.total,
                trees: None,
            }
        })
        .collect()
}

/// The code a frame that does not decode reports: `decode_error <kind>`.
pub fn decode_error_code(err: &kvscope_wire::DecodeError) -> String {
    format!("decode_error {}", err.classify().as_str())
}

impl VectorHost for NativeHost {
    fn name(&self) -> &str {
        "native"
    }

    fn corpus_payload(&self, file: &str) -> Option<Vec<u8>> {
        (self.corpus)(file).map(<[u8]>::to_vec)
    }

    fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
        let policy: Policy = case.policy.parse().map_err(|e| format!("{e}"))?;
        let mut n = Normalizer::new(case.block_size, policy);
        let mut out = VectorOutput::default();
        let mut verdicts = Vec::new();
        for frame in case.frames {
            let id = n.source(&frame.worker_id, frame.dp_rank);
            verdicts.clear();
            match n.push_payload(id, frame.seq, &frame.payload, &mut verdicts) {
                Ok(_) => out.verdicts.extend(verdicts.iter().map(OutVerdict::from_verdict)),
                Err(e) => out.verdicts.push(OutVerdict { code: decode_error_code(&e), text: e.to_string() }),
            }
        }
        out.sources = source_outputs(&n);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_events_decode_to_what_they_describe_in_both_encodings() {
        let events: Vec<EventSpec> = serde_json::from_str(
            r#"[{"type":"BlockStored","hashes":[1,-2],"parent":3,"block_size":16,"medium":"cpu","group_idx":3,"kind":"mamba"},
                {"type":"BlockRemoved","hashes":[18446744073709551615],"medium":"GPU","group_idx":0},
                {"type":"AllBlocksCleared"},{"type":"Mystery"}]"#,
        )
        .unwrap();
        for array in [false, true] {
            let bytes = encode_batch(1.5, &events, Some(2), array).unwrap();
            let batch = kvscope_wire::decode_batch(&bytes).unwrap();
            assert_eq!(batch.dp_rank, Some(2));
            let kvscope_wire::KvEvent::BlockStored(s) = &batch.events[0] else { panic!() };
            assert_eq!(s.block_hashes, [kvscope_wire::BlockHash(1), kvscope_wire::BlockHash(-2i64 as u64)]);
            assert_eq!((s.token_ids.count, s.block_size, s.medium.as_deref()), (32, Some(16), Some("cpu")));
            assert_eq!((s.group_idx, s.kv_cache_spec_kind.as_deref()), (Some(3), Some("mamba")));
            assert_eq!(batch.events[1].block_hashes(), [kvscope_wire::BlockHash(u64::MAX)]);
            assert_eq!(batch.events[2].event_type(), kvscope_wire::EventType::AllBlocksCleared);
            assert_eq!(batch.events[3].event_type(), kvscope_wire::EventType::Unknown);
        }
    }

    /// The runner must fail a host that returns nothing or the wrong thing, not pass it vacuously.
    #[test]
    fn runner_reports_a_host_that_gets_it_wrong() {
        struct Wrong;
        impl VectorHost for Wrong {
            fn name(&self) -> &str {
                "wrong"
            }
            fn corpus_payload(&self, _file: &str) -> Option<Vec<u8>> {
                Some(b"\x90".to_vec())
            }
            fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
                let mut out = VectorOutput::default();
                for f in case.frames {
                    out.verdicts.push(OutVerdict { code: format!("seq {}", f.seq), text: String::new() });
                }
                Ok(out)
            }
        }
        let report = run_vectors(&mut Wrong);
        assert_eq!(report.runs, case_count());
        assert_eq!(report.failed_runs, report.runs, "every case must fail");
        assert!(report.failures[0].contains("verdicts differ"), "{}", report.failures[0]);
        let panic = std::panic::catch_unwind(|| report.assert_ok(report.runs)).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        let head = format!("host wrong: {0} of {0} vector runs failed ({1} mismatches):", report.runs, report.failures.len());
        assert!(message.starts_with(&head), "{message}");
        let empty = VectorReport { host: "empty".into(), ..Default::default() };
        let panic = std::panic::catch_unwind(|| empty.assert_ok(0)).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert_eq!(message, "host empty: no normalizer vector ran; is vectors/normalizer.json empty?");
    }

    #[test]
    fn every_vector_states_every_policy_it_runs_under() {
        let t = table();
        assert!(!t.vectors.is_empty());
        for v in &t.vectors {
            assert_eq!(policy_errors(v), Vec::<String>::new());
        }
        // Every preset has cases, and the per-policy counts add up.
        let per_policy: usize = Policy::names().map(case_count_for).sum();
        assert_eq!(per_policy, case_count());
        for name in Policy::names() {
            assert!(case_count_for(name) > 0, "no vector runs under {name}");
        }
    }

    #[test]
    fn a_vector_with_a_missing_extra_or_unknown_policy_fails() {
        let mut v: Vector = serde_json::from_str(
            r#"{"name": "v", "about": "", "block_size": 16, "frames": [], "expect": {"fixed": {"verdicts": []}}}"#,
        )
        .unwrap();
        let errors = policy_errors(&v);
        assert!(errors.iter().any(|e| e == "v: no expectation for policy \"legacy\""), "{errors:?}");
        v.policies = Some(vec!["fixed".into(), "dynamo-1.5".into()]);
        assert_eq!(policy_errors(&v), ["v: lists policy \"dynamo-1.5\", which is not a preset"]);
        v.policies = Some(vec!["legacy".into()]);
        assert_eq!(
            policy_errors(&v),
            ["v: no expectation for policy \"legacy\"", "v: expectation for policy \"fixed\", which the vector does not run under"]
        );
    }
}
