//! The `#[wasm_bindgen]` API: argument conversion in, plain JS objects out.
//!
//! ```js
//! import init, { KvScope } from "./pkg/kvscope_wasm.js";
//! await init();
//! const kv = new KvScope(1536, "fixed");
//! const r = kv.push_frames("w0", 0, [topic, seqBytes, payload]);   // Uint8Arrays
//! r.verdicts[0].code   // "offload_block_size_mismatch host_pinned"
//! r.verdicts[0].text   // "medium \"cpu\" -> HostPinned (case-insensitive); ..."
//! kv.counters("w0", 0).warnings.offload.emitted
//! kv.tree_summary("w0", 0, "device", 5).largest
//! ```
//!
//! Every method that can fail throws a JS `Error` whose message says what to pass instead.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::session::{self, Session};

/// Serializes with maps as plain objects (serde-wasm-bindgen's default is `Map`).
fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsError> {
    let serializer = serde_wasm_bindgen::Serializer::new().serialize_maps_as_objects(true);
    value.serialize(&serializer).map_err(|e| JsError::new(&format!("internal: result not representable in JS: {e}")))
}

fn err(message: String) -> JsError {
    JsError::new(&message)
}

/// A seq given as a number (a safe integer) or a BigInt.
fn seq_from_js(seq: &JsValue) -> Result<u64, JsError> {
    if let Some(n) = seq.as_f64() {
        if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 {
            return Ok(n as u64);
        }
        return Err(err(format!("seq {n} is not a non-negative safe integer; pass a BigInt for larger values")));
    }
    if seq.is_bigint() {
        return u64::try_from(seq.clone()).map_err(|_| err("seq BigInt does not fit u64".to_owned()));
    }
    Err(err("seq must be a number or a BigInt".to_owned()))
}

/// The normalizer (one block size, one policy) and its tier trees, for JavaScript.
#[wasm_bindgen]
#[derive(Debug)]
pub struct KvScope {
    session: Session,
}

#[wasm_bindgen]
impl KvScope {
    /// `new KvScope(blockSize, policy)`; throws for an unknown policy, listing the valid ones.
    #[wasm_bindgen(constructor)]
    pub fn new(block_size: u32, policy: &str) -> Result<KvScope, JsError> {
        Ok(KvScope { session: Session::new(block_size, policy).map_err(|e| err(e.to_string()))? })
    }

    /// The configured block size.
    #[wasm_bindgen(getter)]
    pub fn block_size(&self) -> u32 {
        self.session.normalizer().block_size()
    }

    /// The policy name.
    #[wasm_bindgen(getter)]
    pub fn policy(&self) -> String {
        self.session.normalizer().policy().name.to_owned()
    }

    /// Every policy preset: `[{name, about}]`.
    pub fn policies() -> Result<JsValue, JsError> {
        to_js(&session::policies())
    }

    /// The rules in evaluation order: `[{step, label, sentence, checks, decides, labels}]`.
    pub fn rules() -> Result<JsValue, JsError> {
        to_js(&session::rules())
    }

    /// Every verdict label: `[{label, outcome, rule}]`, the strings `label` fields carry.
    pub fn labels() -> Result<JsValue, JsError> {
        to_js(&session::labels())
    }

    /// Pushes a live message: an array of three `Uint8Array`s `[topic, seq, payload]`. Returns
    /// `{source, seq, ok, error, batch, verdicts}`; a malformed message is counted, not thrown.
    pub fn push_frames(&mut self, worker_id: &str, dp_rank: u32, frames: js_sys::Array) -> Result<JsValue, JsError> {
        let owned: Vec<Vec<u8>> = frames.iter().map(|f| js_sys::Uint8Array::new(&f).to_vec()).collect();
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        to_js(&self.session.push_frames(worker_id, dp_rank, &borrowed))
    }

    /// Pushes one payload with its seq (a number or a BigInt).
    pub fn push_payload(&mut self, worker_id: &str, dp_rank: u32, seq: JsValue, payload: &[u8]) -> Result<JsValue, JsError> {
        let seq = seq_from_js(&seq)?;
        to_js(&self.session.push_payload(worker_id, dp_rank, seq, payload))
    }

    /// Every source pushed so far: `[{worker_id, dp_rank, key}]`.
    pub fn sources(&self) -> Result<JsValue, JsError> {
        to_js(&self.session.sources())
    }

    /// Counters, warning budgets, the indexer log and live blocks of one source.
    pub fn counters(&self, worker_id: &str, dp_rank: u32) -> Result<JsValue, JsError> {
        to_js(&self.session.counters(worker_id, dp_rank).map_err(err)?)
    }

    /// `{blocks, roots, max_depth, largest, counters, limit_hit, ...}` of one tier
    /// (`device`, `host_pinned`, `disk`, `external`).
    pub fn tree_summary(&self, worker_id: &str, dp_rank: u32, tier: &str, top_n: u32) -> Result<JsValue, JsError> {
        to_js(&self.session.tree_summary(worker_id, dp_rank, tier, top_n as usize).map_err(err)?)
    }

    /// An icicle drill-down: nodes in pre-order below `root` (a hex hash, or `undefined` for
    /// the whole tier), children largest first, at most `max_children` per node and `max_depth`
    /// levels.
    pub fn subtree(
        &self,
        worker_id: &str,
        dp_rank: u32,
        tier: &str,
        root: Option<String>,
        max_depth: u32,
        max_children: u32,
    ) -> Result<JsValue, JsError> {
        let nodes = self.session.subtree(worker_id, dp_rank, tier, root.as_deref(), max_depth, max_children as usize).map_err(err)?;
        to_js(&nodes)
    }

    /// One block (hex hash) for a hover, or `null`.
    pub fn block(&self, worker_id: &str, dp_rank: u32, tier: &str, hash: &str) -> Result<JsValue, JsError> {
        to_js(&self.session.block(worker_id, dp_rank, tier, hash).map_err(err)?)
    }
}
