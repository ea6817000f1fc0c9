//! One table of normalizer vectors, one runner, any number of hosts.
//!
//! The table (`vectors/normalizer.json`, embedded) lists inputs (events described as data,
//! encoded here into real msgpack payloads, and corpus payloads by file name), a configuration
//! (block size) and the expected verdicts under each policy. A vector states its expectation
//! under every preset ([`Policy::PRESETS`]), or lists in `policies` the presets it is
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
//!
//! This module holds the table's format and its counts; `run.rs` the runner and what hosts
//! report, `encode.rs` the frames built from the table, `native.rs` the reference host.

mod encode;
mod native;
mod run;

use std::collections::BTreeMap;

use kvscope_normalize::Policy;
use serde::Deserialize;

pub use encode::{Frame, encode_batch, encode_batch_with, parse_source};
pub use native::{NativeHost, decode_error_code, source_outputs};
pub use run::{OutSource, OutVerdict, VectorCase, VectorHost, VectorOutput, VectorReport, run_vectors};

/// The embedded vector table.
pub const VECTORS_JSON: &str = include_str!("../../vectors/normalizer.json");

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
        encode::build_frames(self, &corpus)
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut v: Vector =
            serde_json::from_str(r#"{"name": "v", "about": "", "block_size": 16, "frames": [], "expect": {"fixed": {"verdicts": []}}}"#)
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
