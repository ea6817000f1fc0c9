//! [`SessionHost`]: the vector table's host over [`Session`], the code behind the JS API; shared
//! by `native.rs` and `web.rs` (test code, so the package ships none of it).
//!
//! It runs natively (`cargo test -p kvscope-wasm`) and in the browser (`wasm-pack test`), and
//! checks tree sizes too, since a session keeps trees. The browser tests add a third host that
//! goes through the `#[wasm_bindgen]` methods and reads the `JsValue`s back.

use std::collections::BTreeMap;

use kvscope_corpus::vectors::{OutSource, OutVerdict, VectorCase, VectorHost, VectorOutput};

use kvscope_wasm::Session;
use kvscope_wasm::model::{JsCounters, JsPushResult};

/// Runs vectors through [`Session`].
#[derive(Debug, Clone, Copy)]
pub struct SessionHost {
    corpus: fn(&str) -> Option<&'static [u8]>,
}

impl SessionHost {
    /// `corpus` looks payloads up by manifest path (`kvscope_corpus::payload`).
    pub fn new(corpus: fn(&str) -> Option<&'static [u8]>) -> Self {
        SessionHost { corpus }
    }
}

/// The vector runner's view of one push result.
pub fn push_outputs(r: &JsPushResult) -> Vec<OutVerdict> {
    match &r.error {
        Some(e) => vec![OutVerdict { code: format!("{}_error {}", e.kind, e.class), text: e.message.clone() }],
        None => r.verdicts.iter().map(|v| OutVerdict { code: v.code.clone(), text: v.text.clone() }).collect(),
    }
}

/// The vector runner's view of one source's counters.
pub fn source_output(c: &JsCounters) -> OutSource {
    let budget = |name: &str| c.warnings.get(name).map_or([0, 0], |b| [b.emitted, b.suppressed]);
    OutSource {
        source: c.source.key.clone(),
        fatal_count: c.fatal_count,
        first_fatal_seq: c.first_fatal.as_ref().map(|l| l.seq),
        conversion: budget("conversion"),
        offload: budget("offload"),
        notices: c.notices,
        trees: Some(c.trees.iter().map(|(k, v)| (k.clone(), *v)).collect::<BTreeMap<_, _>>()),
    }
}

impl VectorHost for SessionHost {
    fn name(&self) -> &str {
        "session"
    }

    fn corpus_payload(&self, file: &str) -> Option<Vec<u8>> {
        (self.corpus)(file).map(<[u8]>::to_vec)
    }

    fn run(&mut self, case: &VectorCase<'_>) -> Result<VectorOutput, String> {
        let mut s = Session::new(case.block_size, case.policy).map_err(|e| e.to_string())?;
        let mut out = VectorOutput::default();
        for (i, frame) in case.frames.iter().enumerate() {
            // Alternate the two entry points so both are covered.
            let r = if i % 2 == 0 {
                s.push_payload(&frame.worker_id, frame.dp_rank, frame.seq, &frame.payload)
            } else {
                let seq = frame.seq.to_be_bytes();
                s.push_frames(&frame.worker_id, frame.dp_rank, &[b"kv-events".as_slice(), &seq, &frame.payload])
            };
            out.verdicts.extend(push_outputs(&r));
        }
        for src in s.sources() {
            out.sources.push(source_output(&s.counters(&src.worker_id, src.dp_rank)?));
        }
        Ok(out)
    }
}
