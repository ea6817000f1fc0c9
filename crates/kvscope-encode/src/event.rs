//! The events to encode, typed the way the engines type them.
//!
//! These are not `kvscope_wire`'s decoded events: an encoder needs what a decoder may throw away
//! (every token id, the bytes of a bin hash, whether a hash was a signed int, each block's
//! `extra_keys`). A field set to `None` is written as nil or left out, as the layout says; a
//! field the layout has no place for must stay `None` ([`crate::encode_batch`] rejects it).

use serde::{Serialize, Serializer};

/// One batch: what an engine publishes under one sequence number.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Batch {
    pub ts: f64,
    pub events: Vec<Event>,
    /// `data_parallel_rank` (vLLM) or `attn_dp_rank` (SGLang); nil when `None`.
    pub dp_rank: Option<u32>,
}

/// One event of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Stored(Stored),
    Removed(Removed),
    /// `AllBlocksCleared`, or a tag no release defines (written with nothing but its tag and,
    /// where the layout has one, `ownership`).
    Other(Other),
}

/// A block hash as the engine typed it: msgpack writes each form differently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hash {
    /// vLLM's u64 hashes (0.10.2 on).
    U64(u64),
    /// Python's builtin `hash()` (vLLM up to 0.10.1, LMCache, SGLang): a signed int64.
    I64(i64),
    /// sha256 (32 bytes) or xxhash-128 (16 bytes) digests, as `bin`.
    Bin(Vec<u8>),
}

/// `token_ids`: plain ids, or SGLang EAGLE bigram pages (pairs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tokens {
    /// Ids as ints. `i64`, not `u32`, so tests can write ids engines never do (`-1`, `2^32`).
    Ids(Vec<i64>),
    Pairs(Vec<[i64; 2]>),
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens::Ids(Vec::new())
    }
}

impl Tokens {
    /// Number of items (pairs count once).
    pub fn len(&self) -> usize {
        match self {
            Tokens::Ids(ids) => ids.len(),
            Tokens::Pairs(pairs) => pairs.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One block's `extra_keys`: nil, or its list of keys (vLLM writes the LoRA name and tagged
/// cache salts there).
pub type BlockKeys = Option<Vec<String>>;

/// `BlockStored`: every field any release writes.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Stored {
    pub hashes: Vec<Hash>,
    pub parent: Option<Hash>,
    pub tokens: Tokens,
    pub block_size: Option<u32>,
    pub lora_id: Option<i64>,
    pub medium: Option<String>,
    pub lora_name: Option<String>,
    /// `extra_keys`: `None` for nil or absent, else one entry per block (as vLLM writes it) or
    /// fewer (any list is written as given).
    pub extra_keys: Option<Vec<BlockKeys>>,
    /// SGLang's `cache_salt` (a map key, or the `{cache_salt}` map at array position 7).
    pub cache_salt: Option<String>,
    pub group_idx: Option<u32>,
    pub kind: Option<String>,
    pub sliding_window: Option<u32>,
    pub locality: Option<String>,
    pub session_id: Option<String>,
    pub ownership: Option<String>,
}

/// `BlockRemoved`: every field any release writes.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Removed {
    pub hashes: Vec<Hash>,
    pub medium: Option<String>,
    pub group_idx: Option<u32>,
    pub kind: Option<String>,
    pub sliding_window: Option<u32>,
    pub locality: Option<String>,
    pub ownership: Option<String>,
}

/// An event that carries only its tag (and maybe `ownership`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Other {
    pub tag: String,
    pub ownership: Option<String>,
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Hash::U64(v) => s.serialize_u64(*v),
            // rmp-serde writes a non-negative i64 as an unsigned int, as msgspec does.
            Hash::I64(v) => s.serialize_i64(*v),
            Hash::Bin(bytes) => s.serialize_bytes(bytes),
        }
    }
}

impl Serialize for Tokens {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tokens::Ids(ids) => ids.serialize(s),
            Tokens::Pairs(pairs) => pairs.serialize(s),
        }
    }
}
