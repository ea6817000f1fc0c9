//! The releases the demo publishes as, and their bytes, written by `kvscope-encode`.
//!
//! The simulated engines build one set of events; each release's layout decides which of their
//! fields reach the wire (SGLang has no `group_idx`, vLLM 0.23 writes every array position), as
//! that release's engine would. `kvscope-encode`'s corpus test checks the layouts byte for byte
//! against the real releases' payloads.

use kvscope_encode::{Layout, encode_batch_lossy, release};

pub use kvscope_encode::{Batch, Event, Hash, Removed, Stored};

/// Releases whose layout the demo can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// vLLM 0.33.0: tagged maps; `extra_keys`, `group_idx`, `kv_cache_spec_kind`,
    /// `kv_cache_spec_sliding_window` and `locality` omitted when unset.
    Vllm033,
    /// vLLM 0.23.0: tagged arrays, `BlockStored` of 12 elements, `BlockRemoved` of 4.
    Vllm023,
    /// SGLang 0.5.23: tagged maps with SGLang's own fields, `attn_dp_rank` written even when nil.
    Sglang0523,
}

impl Release {
    pub const ALL: [(&'static str, Release); 3] =
        [("vllm-0.33.0", Release::Vllm033), ("vllm-0.23.0", Release::Vllm023), ("sglang-0.5.23", Release::Sglang0523)];

    pub fn name(self) -> &'static str {
        self.layout().name
    }

    pub fn parse(s: &str) -> Option<Release> {
        Release::ALL.iter().find(|(n, _)| *n == s).map(|(_, r)| *r)
    }

    /// How the release's replay socket frames a reply: `[topic, seq, payload]` from vLLM 0.26
    /// and in SGLang, `[seq, payload]` before.
    pub fn replay_has_topic(self) -> bool {
        !matches!(self, Release::Vllm023)
    }

    /// The release's layout.
    pub fn layout(self) -> &'static Layout {
        match self {
            Release::Vllm033 => &release::VLLM_0_33.layout,
            Release::Vllm023 => &release::VLLM_0_23.layout,
            Release::Sglang0523 => &release::SGLANG_0_5_23.layout,
        }
    }
}

/// Encodes one batch in `release`'s layout, leaving out the fields that release does not have.
pub fn encode_batch(release: Release, batch: &Batch) -> Result<Vec<u8>, kvscope_encode::EncodeError> {
    encode_batch_lossy(release.layout(), batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_are_the_corpus_folders() {
        for (name, r) in Release::ALL {
            assert_eq!(r.name(), name);
            assert_eq!(Release::parse(name), Some(r));
        }
    }

    /// The fields a release lacks are dropped, not refused: one fleet publishes as any release.
    #[test]
    fn fields_a_release_lacks_are_left_out() {
        let store = Stored::new([Hash::I64(-5)], 16).tokens(0..16).medium(Some("GPU")).group_idx(Some(0));
        let batch = Batch { ts: 1.0, events: vec![store.into()], dp_rank: None };
        let decoded = kvscope_wire::decode_batch(&encode_batch(Release::Sglang0523, &batch).unwrap()).unwrap();
        assert_eq!(decoded.events[0].group_idx(), None);
        let decoded = kvscope_wire::decode_batch(&encode_batch(Release::Vllm023, &batch).unwrap()).unwrap();
        assert_eq!(decoded.events[0].group_idx(), Some(0));
    }
}
