//! Every release's layout, from the struct section of its `kv_events.py` (see
//! `tests/fixtures/kv-events/README.md`), and two layouts no release writes that the normalizer's
//! vector table uses.
//!
//! The corpus round-trip test (`tests/corpus.rs`) re-encodes every payload it can in its
//! release's layout and compares bytes, so a wrong field list here fails there.

use crate::layout::Presence::{Always, IfSet};
use crate::layout::{BatchForm, EventForm, Field, Field::*, Layout, MapHeader, Presence};

/// A release an engine's bytes can come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Release {
    /// `vllm` or `sglang`; LMCache relays through vLLM and writes vLLM's layout.
    pub producer: &'static str,
    pub version: &'static str,
    pub layout: Layout,
}

impl Release {
    /// `vllm-0.33.0`, as the corpus folders are named.
    pub fn name(&self) -> &'static str {
        self.layout.name
    }
}

const ARRAY3: BatchForm = BatchForm::Array { len: 3 };

// Tagged arrays (vLLM up to 0.23): each release appended fields at the end.
const STORED_6: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId];
const STORED_7: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium];
const STORED_8: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium, LoraName];
const STORED_9: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium, LoraName, ExtraKeys];
const STORED_10: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium, LoraName, ExtraKeys, GroupIdx];
const STORED_12: &[Field] = &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium, LoraName, ExtraKeys, GroupIdx, Kind, SlidingWindow];
const REMOVED_2: &[Field] = &[Hashes];
const REMOVED_3: &[Field] = &[Hashes, Medium];
const REMOVED_4: &[Field] = &[Hashes, Medium, GroupIdx];

const fn array(name: &'static str, batch_len: u32, stored: &'static [Field], removed: &'static [Field]) -> Layout {
    Layout { name, batch: BatchForm::Array { len: batch_len }, events: EventForm::Array { stored, removed } }
}

// Tagged maps, vLLM 0.24 on: the fields without defaults always, the rest when set.
type MapFields = &'static [(Field, Presence)];
/// vLLM 0.24-0.25: up to `kv_cache_spec_sliding_window`; 0.26 adds `locality`.
const V24_STORED: MapFields = V30_STORED.split_at(11).0;
const V26_STORED: MapFields = V30_STORED.split_at(12).0;
/// 0.29 adds `ownership`.
const V29_STORED: MapFields = &[
    (Hashes, Always),
    (Parent, Always),
    (Tokens, Always),
    (BlockSize, Always),
    (LoraId, Always),
    (Medium, Always),
    (LoraName, Always),
    (ExtraKeys, IfSet),
    (GroupIdx, IfSet),
    (Kind, IfSet),
    (SlidingWindow, IfSet),
    (Locality, IfSet),
    (Ownership, IfSet),
];
/// 0.30 adds `session_id` before `ownership`; 0.33 adds `lookahead_token_ids` between them,
/// which no event here carries (the decoder does not keep it either).
const V30_STORED: MapFields = &[
    (Hashes, Always),
    (Parent, Always),
    (Tokens, Always),
    (BlockSize, Always),
    (LoraId, Always),
    (Medium, Always),
    (LoraName, Always),
    (ExtraKeys, IfSet),
    (GroupIdx, IfSet),
    (Kind, IfSet),
    (SlidingWindow, IfSet),
    (Locality, IfSet),
    (SessionId, IfSet),
    (Ownership, IfSet),
];
const V24_REMOVED: MapFields = V29_REMOVED.split_at(5).0;
const V26_REMOVED: MapFields = V29_REMOVED.split_at(6).0;
const V29_REMOVED: MapFields =
    &[(Hashes, Always), (Medium, Always), (GroupIdx, IfSet), (Kind, IfSet), (SlidingWindow, IfSet), (Locality, IfSet), (Ownership, IfSet)];
const NO_FIELDS: MapFields = &[];
const OWNERSHIP: MapFields = &[(Ownership, IfSet)];

const fn map(name: &'static str, stored: MapFields, removed: MapFields, other: MapFields, stored_header: MapHeader) -> Layout {
    Layout { name, batch: ARRAY3, events: EventForm::Map { stored, removed, other, stored_header } }
}

/// SGLang 0.5.23: vLLM's first seven fields without defaults, then its own optional ones.
const SGLANG_STORED: MapFields = &[
    (Hashes, Always),
    (Parent, Always),
    (Tokens, Always),
    (BlockSize, Always),
    (LoraId, Always),
    (Medium, Always),
    (CacheSalt, IfSet),
    (SessionId, IfSet),
    (LoraName, IfSet),
];
const SGLANG_REMOVED: MapFields = &[(Hashes, Always), (Medium, Always)];

const fn vllm(version: &'static str, layout: Layout) -> Release {
    Release { producer: "vllm", version, layout }
}

use MapHeader::{Map16, Shortest};

/// Every release of the corpus, oldest first.
pub const RELEASES: &[Release] = &[
    vllm("0.9.0", array("vllm-0.9.0", 2, STORED_6, REMOVED_2)),
    vllm("0.9.1", array("vllm-0.9.1", 3, STORED_6, REMOVED_2)),
    vllm("0.10.0", array("vllm-0.10.0", 3, STORED_6, REMOVED_2)),
    vllm("0.10.1", array("vllm-0.10.1", 3, STORED_6, REMOVED_2)),
    vllm("0.10.2", array("vllm-0.10.2", 3, STORED_7, REMOVED_3)),
    vllm("0.13.0", array("vllm-0.13.0", 3, STORED_7, REMOVED_3)),
    vllm("0.14.0", array("vllm-0.14.0", 3, STORED_8, REMOVED_3)),
    vllm("0.15.0", array("vllm-0.15.0", 3, STORED_8, REMOVED_3)),
    vllm("0.16.0", array("vllm-0.16.0", 3, STORED_8, REMOVED_3)),
    vllm("0.17.0", array("vllm-0.17.0", 3, STORED_9, REMOVED_3)),
    vllm("0.19.0", array("vllm-0.19.0", 3, STORED_9, REMOVED_3)),
    vllm("0.20.0", array("vllm-0.20.0", 3, STORED_10, REMOVED_4)),
    vllm("0.21.0", array("vllm-0.21.0", 3, STORED_10, REMOVED_4)),
    vllm("0.22.0", array("vllm-0.22.0", 3, STORED_12, REMOVED_4)),
    VLLM_0_23,
    vllm("0.24.0", map("vllm-0.24.0", V24_STORED, V24_REMOVED, NO_FIELDS, Shortest)),
    vllm("0.25.0", map("vllm-0.25.0", V24_STORED, V24_REMOVED, NO_FIELDS, Shortest)),
    vllm("0.26.0", map("vllm-0.26.0", V26_STORED, V26_REMOVED, NO_FIELDS, Shortest)),
    vllm("0.28.0", map("vllm-0.28.0", V26_STORED, V26_REMOVED, NO_FIELDS, Shortest)),
    vllm("0.29.0", map("vllm-0.29.0", V29_STORED, V29_REMOVED, OWNERSHIP, Shortest)),
    vllm("0.30.0", map("vllm-0.30.0", V30_STORED, V29_REMOVED, OWNERSHIP, Shortest)),
    vllm("0.31.0", map("vllm-0.31.0", V30_STORED, V29_REMOVED, OWNERSHIP, Shortest)),
    vllm("0.32.0", map("vllm-0.32.0", V30_STORED, V29_REMOVED, OWNERSHIP, Shortest)),
    VLLM_0_33,
    SGLANG_0_5_23,
];

/// vLLM 0.23.0: the last tagged-array release (`BlockStored` of 12, `BlockRemoved` of 4).
pub const VLLM_0_23: Release = vllm("0.23.0", array("vllm-0.23.0", 3, STORED_12, REMOVED_4));

/// vLLM 0.33.0: tagged maps, `BlockStored` behind a `map16` header.
pub const VLLM_0_33: Release = vllm("0.33.0", map("vllm-0.33.0", V30_STORED, V29_REMOVED, OWNERSHIP, Map16));

/// SGLang 0.5.23: tagged maps in a 3-element batch whose `attn_dp_rank` is written even when nil.
pub const SGLANG_0_5_23: Release =
    Release { producer: "sglang", version: "0.5.23", layout: map("sglang-0.5.23", SGLANG_STORED, SGLANG_REMOVED, NO_FIELDS, Shortest) };

/// The release a corpus manifest entry names: `producer` (`vllm`, `sglang`, or
/// `lmcache-via-vllm`, which writes vLLM's layout) and `version`.
pub fn release(producer: &str, version: &str) -> Option<&'static Release> {
    let producer = if producer == "lmcache-via-vllm" { "vllm" } else { producer };
    RELEASES.iter().find(|r| r.producer == producer && r.version == version)
}

/// A release by its folder name (`vllm-0.33.0`).
pub fn named(name: &str) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.name() == name)
}

/// No release: every field any map release writes, each left out when unset, in a fixed order.
/// The vector table's map frames use it, so a vector sets exactly the fields it is about.
pub const SPARSE_MAP: Layout = Layout {
    name: "sparse-map",
    batch: ARRAY3,
    events: EventForm::Map {
        stored: &[
            (Hashes, Always),
            (Parent, Always),
            (Tokens, Always),
            (BlockSize, Always),
            (LoraId, IfSet),
            (Medium, IfSet),
            (LoraName, IfSet),
            (ExtraKeys, IfSet),
            (CacheSalt, IfSet),
            (GroupIdx, IfSet),
            (Kind, IfSet),
            (SlidingWindow, IfSet),
            (Locality, IfSet),
            (Ownership, IfSet),
        ],
        removed: &[(Hashes, Always), (Medium, IfSet), (GroupIdx, IfSet), (Kind, IfSet), (Locality, IfSet), (Ownership, IfSet)],
        other: OWNERSHIP,
        stored_header: Shortest,
    },
};

/// No release: vLLM 0.22's 12 array positions, with SGLang's `{cache_salt}` map allowed at
/// position 7 instead of `lora_name`. The vector table's array frames use it.
pub const FULL_ARRAY: Layout = Layout {
    name: "full-array",
    batch: ARRAY3,
    events: EventForm::Array {
        stored: &[Hashes, Parent, Tokens, BlockSize, LoraId, Medium, LoraNameOrSalt, ExtraKeys, GroupIdx, Kind, SlidingWindow],
        removed: REMOVED_4,
    },
};
