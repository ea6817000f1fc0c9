//! The typed events a payload decodes into.
//!
//! Field names follow vLLM's `kv_events.py`; a field the event did not carry is `None`, so a
//! consumer can tell "absent" from "zero". Token ids are kept as a count and a byte span, not a
//! `Vec`: they are most of a payload's bytes and the normalizer only needs how many there were.
//!
//! Sizes matter: a batch of millions of tiny events must not cost hundreds of bytes each.
//! Strings are [`WireStr`] (inline up to 24 bytes, so `medium`, `kind`, `locality` and the like
//! never allocate), a store's hashes are [`Hashes`] (two inline before spilling to the heap),
//! and the two big variants are boxed, so a [`KvEvent`] is 40 bytes.

use std::fmt;
use std::ops::Range;

/// A string from the wire: owned, kept inline up to 24 bytes (every medium, kind, locality and
/// ownership engines write), on the heap beyond.
pub type WireStr = compact_str::CompactString;

/// The wire strings engines repeat in every event (mediums, kinds, localities), as constants:
/// the same [`WireStr`] a copy would make, without building one. Any other string is copied.
#[inline(always)]
pub(crate) fn known_wire_str(bytes: &[u8]) -> Option<WireStr> {
    const fn s(text: &'static str) -> Option<WireStr> {
        Some(WireStr::const_new(text))
    }
    match bytes {
        b"GPU" => s("GPU"),
        b"CPU" => s("CPU"),
        b"cpu" => s("cpu"),
        b"DISK" => s("DISK"),
        b"LOCAL" => s("LOCAL"),
        b"REMOTE" => s("REMOTE"),
        b"mamba" => s("mamba"),
        b"full_attention" => s("full_attention"),
        b"mla_attention" => s("mla_attention"),
        b"sliding_window" => s("sliding_window"),
        _ => None,
    }
}

pub use crate::hashes::Hashes;

/// One decoded payload: the batch an engine published under one sequence number.
#[derive(Clone, Debug, PartialEq)]
pub struct EventBatch {
    /// Publish time in seconds since the epoch, as the engine wrote it.
    pub ts: f64,
    /// The events in publish order, including ones with unknown tags.
    pub events: Vec<KvEvent>,
    /// The data-parallel rank the batch names (`data_parallel_rank` in vLLM, `attn_dp_rank` in
    /// SGLang); `None` when nil or absent (vLLM 0.9.0's batches have no third element).
    pub dp_rank: Option<u32>,
    /// How the batch itself was laid out.
    pub layout: BatchLayout,
}

/// What a batch says about itself: everything but its events. The streaming decoder
/// ([`crate::decode_each`]) hands it over before the first event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchHeader {
    /// Publish time in seconds since the epoch, as the engine wrote it.
    pub ts: f64,
    /// As [`EventBatch::dp_rank`].
    pub dp_rank: Option<u32>,
    pub layout: BatchLayout,
    /// How many events the batch holds.
    pub events: u32,
}

impl EventBatch {
    /// The batch without its events.
    pub fn header(&self) -> BatchHeader {
        BatchHeader { ts: self.ts, dp_rank: self.dp_rank, layout: self.layout, events: self.events.len() as u32 }
    }
}

/// The outer shape of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchLayout {
    /// `[ts, events]`: vLLM 0.9.0.
    Array2,
    /// `[ts, events, dp_rank]`: vLLM 0.9.1 on, SGLang.
    Array3,
    /// `{ts, events, data_parallel_rank}`.
    Map,
    /// `[ts, events, dp_rank, ...]`: more than 3 elements (`len` of them). The elements after
    /// the third are ignored (a later release may append fields), but some consumers read the
    /// batch as an exact 3-tuple and reject it, so the layout says so.
    ArrayLonger { len: u32 },
}

/// How one event was encoded on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventEncoding {
    /// A tagged array of this many elements, tag included (vLLM up to 0.23).
    Array { len: u32 },
    /// A map with a `type` key (vLLM 0.24 on, SGLang).
    Map,
}

/// One event of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum KvEvent {
    /// Boxed: a store is ten times the size of the other variants.
    BlockStored(Box<BlockStored>),
    /// Boxed, like stores.
    BlockRemoved(Box<BlockRemoved>),
    AllBlocksCleared {
        encoding: EventEncoding,
        /// `ownership` of a map-encoded clear (vLLM 0.29 on); `None` when absent or nil.
        ownership: Option<WireStr>,
    },
    /// A tag this decoder does not know. Kept, not dropped, so the normalizer can count it as
    /// `ignored_event` and the inspector can show it.
    Unknown(UnknownEvent),
}

/// 40 bytes: a collected batch of tiny events costs 40 bytes an event, not 300.
const _: () = assert!(std::mem::size_of::<KvEvent>() <= 40);

impl KvEvent {
    pub fn event_type(&self) -> EventType {
        match self {
            KvEvent::BlockStored(_) => EventType::BlockStored,
            KvEvent::BlockRemoved(_) => EventType::BlockRemoved,
            KvEvent::AllBlocksCleared { .. } => EventType::AllBlocksCleared,
            KvEvent::Unknown(_) => EventType::Unknown,
        }
    }

    /// How the event was laid out on the wire, when the decoder recorded it.
    pub fn encoding(&self) -> Option<EventEncoding> {
        match self {
            KvEvent::BlockStored(s) => s.encoding,
            KvEvent::BlockRemoved(r) => r.encoding,
            KvEvent::AllBlocksCleared { encoding, .. } => Some(*encoding),
            KvEvent::Unknown(u) => Some(u.encoding),
        }
    }

    /// The medium string exactly as sent, for events that carry one.
    pub fn medium(&self) -> Option<&str> {
        match self {
            KvEvent::BlockStored(e) => e.medium.as_deref(),
            KvEvent::BlockRemoved(e) => e.medium.as_deref(),
            _ => None,
        }
    }

    /// The KV-cache group index, for events that carry one.
    pub fn group_idx(&self) -> Option<u32> {
        match self {
            KvEvent::BlockStored(e) => e.group_idx,
            KvEvent::BlockRemoved(e) => e.group_idx,
            _ => None,
        }
    }

    /// The `ownership` string, for events that carry one (vLLM 0.29 on).
    pub fn ownership(&self) -> Option<&str> {
        match self {
            KvEvent::BlockStored(e) => e.ownership.as_deref(),
            KvEvent::BlockRemoved(e) => e.ownership.as_deref(),
            KvEvent::AllBlocksCleared { ownership, .. } => ownership.as_deref(),
            KvEvent::Unknown(_) => None,
        }
    }

    /// The `locality` string, for events that carry one (vLLM 0.26 on).
    pub fn locality(&self) -> Option<&str> {
        match self {
            KvEvent::BlockStored(e) => e.locality.as_deref(),
            KvEvent::BlockRemoved(e) => e.locality.as_deref(),
            _ => None,
        }
    }

    /// The `kv_cache_spec_kind` string of a store, or of a map-encoded removal that carries one.
    pub fn kv_cache_spec_kind(&self) -> Option<&str> {
        match self {
            KvEvent::BlockStored(e) => e.kv_cache_spec_kind.as_deref(),
            KvEvent::BlockRemoved(e) => e.kv_cache_spec_kind.as_deref(),
            _ => None,
        }
    }

    /// The block hashes an event names (empty for clears and unknown events).
    pub fn block_hashes(&self) -> &[BlockHash] {
        match self {
            KvEvent::BlockStored(e) => &e.block_hashes,
            KvEvent::BlockRemoved(e) => &e.block_hashes,
            _ => &[],
        }
    }
}

/// The kind of an event, for counters and labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    BlockStored,
    BlockRemoved,
    AllBlocksCleared,
    Unknown,
}

impl EventType {
    pub const ALL: [EventType; 4] = [EventType::BlockStored, EventType::BlockRemoved, EventType::AllBlocksCleared, EventType::Unknown];

    /// The wire tag (`BlockStored`), or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::BlockStored => "BlockStored",
            EventType::BlockRemoved => "BlockRemoved",
            EventType::AllBlocksCleared => "AllBlocksCleared",
            EventType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A block hash normalised to `u64`: unsigned ints as they are, signed ints bit-cast, and
/// 16/32-byte bins by their last 8 bytes, big-endian.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BlockHash(pub u64);

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

impl fmt::Display for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Which hash representations an event used. Several can appear in one stream (vLLM 0.13-0.23
/// mix u64 GPU hashes with 32-byte bin offload hashes in one batch), and some consumers reject
/// bins, so the inspector and the `dynamo-1.6.1` policy need to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HashReprs(u8);

impl HashReprs {
    pub const UNSIGNED: HashReprs = HashReprs(1);
    pub const SIGNED: HashReprs = HashReprs(2);
    pub const BIN16: HashReprs = HashReprs(4);
    pub const BIN32: HashReprs = HashReprs(8);

    pub fn insert(&mut self, other: HashReprs) {
        self.0 |= other.0;
    }
    pub fn contains(self, other: HashReprs) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }
    /// True when any hash was a bin (16 or 32 bytes).
    pub fn has_bin(self) -> bool {
        self.0 & (Self::BIN16.0 | Self::BIN32.0) != 0
    }
}

/// What the decoder kept of a store's `token_ids`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TokenIds {
    /// Number of items; for SGLang bigram pages each item is a pair, so this counts pairs.
    pub count: u32,
    /// True when the items were arrays (SGLang EAGLE bigram pages).
    pub is_bigram: bool,
    /// Where the encoded array sits in the payload, so a viewer can decode it on demand.
    pub span: Range<u32>,
    /// True when some id is negative or wider than 32 bits, or (bigram pages) some item is not a
    /// pair. Engines never write such ids, and decoders that read `u32` token ids reject them.
    /// Free for the markers engines write (positive fixint, uint8/16/32); the values are read only
    /// when some marker may hold such an id (uint64, a signed int, a negative fixint).
    pub outside_u32: bool,
}

impl TokenIds {
    /// The ids themselves, read from the payload they were decoded from at [`TokenIds::span`]:
    /// for SGLang bigram pages the first id of each pair and the last pair's second, as Dynamo
    /// normalizes them. `None` when the span does not hold u32 ids (or another payload is given).
    pub fn values(&self, payload: &[u8]) -> Option<Vec<u32>> {
        let bytes = payload.get(self.span.start as usize..self.span.end as usize)?;
        crate::skip::token_id_values(bytes, self.is_bigram)
    }

    /// The same ids as [`TokenIds::values`], each as 4 little-endian bytes (what Dynamo's
    /// `tokens_hash` hashes), read straight into one buffer.
    pub fn le_bytes(&self, payload: &[u8]) -> Option<Vec<u8>> {
        let bytes = payload.get(self.span.start as usize..self.span.end as usize)?;
        crate::skip::token_id_le_bytes(bytes, self.is_bigram)
    }
}

/// `BlockStored`: blocks entered a cache.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockStored {
    pub block_hashes: Hashes,
    pub parent_block_hash: Option<BlockHash>,
    pub token_ids: TokenIds,
    pub block_size: Option<u32>,
    pub lora_id: Option<i64>,
    pub medium: Option<WireStr>,
    pub lora_name: Option<WireStr>,
    pub group_idx: Option<u32>,
    pub kv_cache_spec_kind: Option<WireStr>,
    pub kv_cache_spec_sliding_window: Option<u32>,
    /// `LOCAL` or `REMOTE` on secondary tiers (vLLM 0.26 on).
    pub locality: Option<WireStr>,
    /// Which component owns the block on a shared tier (vLLM 0.29 on).
    pub ownership: Option<WireStr>,
    /// The cache namespace (salt): the `cache_salt` map key, or the `cache_salt` of the map
    /// SGLang writes at array position 7 instead of `lora_name`. Kept as sent (`""` included).
    pub cache_salt: Option<WireStr>,
    /// The string items of the first block's `extra_keys`, in order (vLLM puts the LoRA name and
    /// a tagged cache salt there; the other blocks repeat or omit them). Other items are not
    /// kept. `None` when `extra_keys` is absent, nil, not an array, or its first block is nil.
    pub extra_key_strings: Option<Vec<String>>,
    /// The session that triggered the store (map key `session_id`, vLLM 0.29 on).
    pub session_id: Option<WireStr>,
    pub hash_reprs: HashReprs,
    pub encoding: Option<EventEncoding>,
}

/// `BlockRemoved`: blocks left a cache.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockRemoved {
    pub block_hashes: Hashes,
    pub medium: Option<WireStr>,
    pub group_idx: Option<u32>,
    /// Map-encoded removals may name their kind like stores do; array-encoded ones never do.
    pub kv_cache_spec_kind: Option<WireStr>,
    pub kv_cache_spec_sliding_window: Option<u32>,
    pub locality: Option<WireStr>,
    pub ownership: Option<WireStr>,
    pub hash_reprs: HashReprs,
    pub encoding: Option<EventEncoding>,
}

/// An event whose tag this decoder does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct UnknownEvent {
    pub tag: WireStr,
    pub encoding: EventEncoding,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant must be the string its bytes spell, and unknown strings must fall through.
    #[test]
    fn known_strings_are_the_strings_they_match() {
        let known = ["GPU", "CPU", "cpu", "DISK", "LOCAL", "REMOTE", "mamba", "full_attention", "mla_attention", "sliding_window"];
        for text in known {
            assert_eq!(known_wire_str(text.as_bytes()).as_deref(), Some(text));
        }
        for other in ["gpu", "GPU ", "", "Cpu", "full_attentio"] {
            assert_eq!(known_wire_str(other.as_bytes()), None);
        }
    }
}
