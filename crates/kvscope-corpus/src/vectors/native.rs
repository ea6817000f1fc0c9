//! The reference host: [`NativeHost`], a [`Normalizer`] called directly, and the helpers other
//! hosts share to report what a normalizer did.

use kvscope_normalize::{Normalizer, Policy};

use super::{OutSource, OutVerdict, VectorCase, VectorHost, VectorOutput};

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
