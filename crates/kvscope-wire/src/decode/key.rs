//! The map keys the decoder reads, matched as raw bytes, and the field names errors show.

/// A map key, matched against the names this decoder reads as raw bytes: engine maps repeat the
/// same dozen keys in every event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Key {
    Type,
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
    ExtraKeys,
    GroupIdx,
    KvCacheSpecKind,
    KvCacheSpecSlidingWindow,
    Locality,
    Ownership,
    CacheSalt,
    SessionId,
    /// Position 7 of an array-encoded `BlockStored`: vLLM's lora_name or SGLang's
    /// `{cache_salt: str}` map. Read only by position, never from a map key.
    LoraNameOrSalt,
    Other,
}

impl Key {
    /// Dispatches on the length first: one compare of a known size per key, not a scan of
    /// every name.
    #[inline]
    pub(super) fn from_bytes(name: &[u8]) -> Key {
        let is = |known: &[u8], key: Key| if name == known { key } else { Key::Other };
        match name.len() {
            4 => is(b"type", Key::Type),
            6 => is(b"medium", Key::Medium),
            7 => is(b"lora_id", Key::LoraId),
            8 => is(b"locality", Key::Locality),
            9 => match name[0] {
                b't' => is(b"token_ids", Key::TokenIds),
                b'l' => is(b"lora_name", Key::LoraName),
                b'g' => is(b"group_idx", Key::GroupIdx),
                _ => is(b"ownership", Key::Ownership),
            },
            10 => match name[0] {
                b'b' => is(b"block_size", Key::BlockSize),
                b'e' => is(b"extra_keys", Key::ExtraKeys),
                b'c' => is(b"cache_salt", Key::CacheSalt),
                _ => is(b"session_id", Key::SessionId),
            },
            12 => is(b"block_hashes", Key::BlockHashes),
            17 => is(b"parent_block_hash", Key::ParentBlockHash),
            18 => is(b"kv_cache_spec_kind", Key::KvCacheSpecKind),
            28 => is(b"kv_cache_spec_sliding_window", Key::KvCacheSpecSlidingWindow),
            _ => Key::Other,
        }
    }

    /// The field name used in error paths and messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Type => "type",
            Key::BlockHashes => "block_hashes",
            Key::ParentBlockHash => "parent_block_hash",
            Key::TokenIds => "token_ids",
            Key::BlockSize => "block_size",
            Key::LoraId => "lora_id",
            Key::Medium => "medium",
            Key::LoraName | Key::LoraNameOrSalt => "lora_name",
            Key::ExtraKeys => "extra_keys",
            Key::GroupIdx => "group_idx",
            Key::KvCacheSpecKind => "kv_cache_spec_kind",
            Key::KvCacheSpecSlidingWindow => "kv_cache_spec_sliding_window",
            Key::Locality => "locality",
            Key::Ownership => "ownership",
            Key::CacheSalt => "cache_salt",
            Key::SessionId => "session_id",
            Key::Other => "?",
        }
    }
}
