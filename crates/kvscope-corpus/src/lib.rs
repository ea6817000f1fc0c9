//! The real-release fixture corpus, embedded so that native, browser and wasm-pack tests read the
//! same bytes, and the checks that compare a decoder with its manifest.
//!
//! What this crate is not: a fixture generator. The bytes are the ones in
//! `tests/fixtures/kv-events` (made by each vLLM and SGLang release's own structs; see its
//! README), embedded at build time. Only test and benchmark targets depend on it.
//!
//! [`dynamo_plane`] holds what NVIDIA Dynamo 1.6.1's relay published for known engine batches
//! (`tests/fixtures/dynamo-event-plane`): the batches, the event-plane messages, discovery.
//!
//! [`vectors`] holds the normalizer's test-vector table (`vectors/normalizer.json`) and its
//! runner, which every host (native, wasm, the JS API) runs; it lives here, with the other test
//! support, so that the core crates export no test scaffolding.

// Test support (only test and bench targets depend on it): its panics are on embedded fixtures, and fail the test that reads them.
#![allow(clippy::expect_used)]

mod check;
pub mod dynamo_plane;
pub mod vectors;

pub use check::{CorpusReport, check_entry, check_manifest};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

use std::sync::OnceLock;

use serde::Deserialize;

/// One manifest entry: a payload and what a correct decoder makes of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    /// Path relative to the corpus root, e.g. `vllm-0.33.0/edge-1.msgpack`.
    pub file: String,
    pub producer: String,
    pub version: String,
    pub scenario: String,
    pub description: String,
    /// `{ts, dp_rank, events: [...]}` as described in the corpus README.
    pub expect: serde_json::Value,
}

impl Entry {
    /// The payload bytes.
    pub fn payload(&self) -> &'static [u8] {
        payload(&self.file).expect("every manifest entry is embedded")
    }
}

/// Every manifest entry, in manifest order.
pub fn manifest() -> &'static [Entry] {
    static MANIFEST: OnceLock<Vec<Entry>> = OnceLock::new();
    MANIFEST.get_or_init(|| serde_json::from_str(embedded::MANIFEST_JSON).expect("manifest.json parses"))
}

/// The bytes of one payload file, by its manifest path.
pub fn payload(file: &str) -> Option<&'static [u8]> {
    embedded::PAYLOADS.iter().find(|(name, _)| *name == file).map(|(_, bytes)| *bytes)
}

/// One message of a recorded stream, in publish order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMessage {
    pub seq: u64,
    pub topic: &'static str,
    pub file: &'static str,
    pub payload: &'static [u8],
}

/// The stream files the corpus holds, e.g. `vllm-0.33.0/streams/kimi_k3_worker0.jsonl`.
pub fn stream_names() -> impl Iterator<Item = &'static str> {
    embedded::STREAMS.iter().map(|(name, _)| *name)
}

/// The messages of one stream file, in publish order.
pub fn stream(name: &str) -> Option<Vec<StreamMessage>> {
    #[derive(Deserialize)]
    struct Line {
        seq: u64,
        topic: String,
        payload_file: String,
    }
    let (_, text) = embedded::STREAMS.iter().find(|(n, _)| *n == name)?;
    let messages = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let line: Line = serde_json::from_str(l).expect("stream lines are JSON");
            let (file, payload) =
                embedded::PAYLOADS.iter().find(|(n, _)| *n == line.payload_file).expect("stream names an embedded payload");
            // Topics are short and few; leak once to hand out &'static like the payloads.
            let topic: &'static str = match line.topic.as_str() {
                "kv-events" => "kv-events",
                other => Box::leak(other.to_owned().into_boxed_str()),
            };
            StreamMessage { seq: line.seq, topic, file, payload }
        })
        .collect();
    Some(messages)
}

/// The Kimi-K3 incident stream of one worker (0, 1 or 2), in seq order.
pub fn kimi_k3_stream(worker: u32) -> Vec<StreamMessage> {
    stream(&format!("vllm-0.33.0/streams/kimi_k3_worker{worker}.jsonl"))
        .unwrap_or_else(|| panic!("the corpus has no kimi_k3 stream for worker {worker}"))
}

/// How many workers the Kimi-K3 incident stream has.
pub const KIMI_K3_WORKERS: u32 = 3;
