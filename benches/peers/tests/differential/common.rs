//! Shared by every module: the corpus runs, the configured block size per payload, and both
//! decoders' events in one comparable shape.

use kvscope_corpus::Entry;
use kvscope_peer_bench::dynamo;
use kvscope_wire::{EventBatch, KvEvent};

/// The `--block-size` a router for this payload's deployment would be started with: 1536 for the
/// hybrid Kimi-K3-shaped payloads, 16 for everything else (the GPU block size of every other
/// scenario).
pub fn configured_block_size(entry: &Entry) -> u32 {
    match entry.scenario.as_str() {
        "hybrid_groups" | "kimi_k3_agg" => 1536,
        _ => 16,
    }
}

/// Why Dynamo 1.6.1's `decode_event_batch` rejects a batch kvscope decodes. Each is documented in
/// docs/dynamo-1.6.1.md, "Decoding"; the message is rmp-serde's, exactly as the listener logs it
/// after "Failed to decode KvEventBatch: ".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejection {
    /// Some hash (block or parent) is a bin: `BlockHashValue` is an untagged `i64 | u64`.
    BinBlockHash,
    /// A 2-element batch `[ts, events]` (vLLM 0.9.0): the batch is read as a 3-tuple.
    TwoElementBatch,
}

impl Rejection {
    pub fn message(self) -> &'static str {
        match self {
            Rejection::BinBlockHash => "data did not match any variant of untagged enum BlockHashValue",
            Rejection::TwoElementBatch => "invalid length 2, expected a tuple of size 3",
        }
    }

    /// The rejection kvscope's decode of the same payload predicts, if any. Order matters the way
    /// it does in Dynamo: the batch length is checked when the tuple ends, after every event was
    /// read, so a 2-element batch with a bin hash reports the hash.
    pub fn predicted(batch: &EventBatch) -> Option<Rejection> {
        let has_bin = batch.events.iter().any(|e| match e {
            KvEvent::BlockStored(s) => s.hash_reprs.has_bin(),
            KvEvent::BlockRemoved(r) => r.hash_reprs.has_bin(),
            _ => false,
        });
        if has_bin {
            Some(Rejection::BinBlockHash)
        } else if batch.layout == kvscope_wire::BatchLayout::Array2 {
            Some(Rejection::TwoElementBatch)
        } else {
            None
        }
    }
}

/// One event in the shape both decoders can be compared in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    pub event_type: String,
    pub block_hashes: Vec<u64>,
    pub parent_block_hash: Option<u64>,
    pub token_count: Option<usize>,
    pub is_bigram: Option<bool>,
    pub block_size: Option<u64>,
    pub medium: Option<String>,
    pub lora_name: Option<String>,
    pub group_idx: Option<u32>,
    pub kv_cache_spec_kind: Option<String>,
    pub kv_cache_spec_sliding_window: Option<u32>,
    pub locality: Option<String>,
    pub ownership: Option<String>,
    /// The namespace Dynamo derives for a store (`cache_salt`, else a `dynamo-cache-salt:` item of
    /// the first block's `extra_keys`).
    pub cache_namespace: Option<String>,
}

pub const FIELD_NAMES: [&str; 14] = [
    "type",
    "block_hashes",
    "parent_block_hash",
    "token_count",
    "is_bigram",
    "block_size",
    "medium",
    "lora_name",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "cache_namespace",
];

impl Fields {
    /// Each field rendered for comparison, in [`FIELD_NAMES`] order.
    pub fn columns(&self) -> [String; 14] {
        [
            self.event_type.clone(),
            format!("{:?}", self.block_hashes),
            format!("{:?}", self.parent_block_hash),
            format!("{:?}", self.token_count),
            format!("{:?}", self.is_bigram),
            format!("{:?}", self.block_size),
            format!("{:?}", self.medium),
            format!("{:?}", self.lora_name),
            format!("{:?}", self.group_idx),
            format!("{:?}", self.kv_cache_spec_kind),
            format!("{:?}", self.kv_cache_spec_sliding_window),
            format!("{:?}", self.locality),
            format!("{:?}", self.ownership),
            format!("{:?}", self.cache_namespace),
        ]
    }
}

/// kvscope's event in the comparable shape. Locality is folded the way Dynamo folds it (`LOCAL`,
/// `REMOTE`, anything else `unknown`) because Dynamo keeps no other value to compare with.
pub fn ours(event: &KvEvent) -> Fields {
    let fold_locality = |l: &Option<kvscope_wire::WireStr>| {
        l.as_deref().map(|l| match l {
            "LOCAL" | "REMOTE" => l.to_owned(),
            _ => "unknown".to_owned(),
        })
    };
    let base = Fields {
        event_type: event.event_type().as_str().to_owned(),
        block_hashes: event.block_hashes().iter().map(|h| h.0).collect(),
        parent_block_hash: None,
        token_count: None,
        is_bigram: None,
        block_size: None,
        medium: None,
        lora_name: None,
        group_idx: None,
        kv_cache_spec_kind: None,
        kv_cache_spec_sliding_window: None,
        locality: None,
        ownership: event.ownership().map(str::to_owned),
        cache_namespace: None,
    };
    match event {
        KvEvent::BlockStored(s) => Fields {
            parent_block_hash: s.parent_block_hash.map(|h| h.0),
            token_count: Some(s.token_ids.count as usize),
            is_bigram: Some(s.token_ids.is_bigram),
            block_size: s.block_size.map(u64::from),
            medium: s.medium.as_deref().map(str::to_owned),
            lora_name: s.lora_name.as_deref().map(str::to_owned),
            group_idx: s.group_idx,
            kv_cache_spec_kind: s.kv_cache_spec_kind.as_deref().map(str::to_owned),
            kv_cache_spec_sliding_window: s.kv_cache_spec_sliding_window,
            locality: fold_locality(&s.locality),
            cache_namespace: dynamo_namespace(s),
            ..base
        },
        KvEvent::BlockRemoved(r) => Fields {
            medium: r.medium.as_deref().map(str::to_owned),
            group_idx: r.group_idx,
            kv_cache_spec_kind: r.kv_cache_spec_kind.as_deref().map(str::to_owned),
            kv_cache_spec_sliding_window: r.kv_cache_spec_sliding_window,
            locality: fold_locality(&r.locality),
            ..base
        },
        KvEvent::AllBlocksCleared { .. } | KvEvent::Unknown(_) => base,
    }
}

/// The cache namespace Dynamo's decoder derives for a store, computed from kvscope's fields
/// (`deserialize.rs` 137-139 and 215-240, `extra_keys.rs` 43-62): the map key `cache_salt` as sent
/// (`""` included), or a non-empty `cache_salt` from SGLang's array position 7; else the first
/// string item of the first block's `extra_keys` that starts with `dynamo-cache-salt:` and has
/// something after it, skipping the first item equal to a non-empty `lora_name`.
pub fn dynamo_namespace(s: &kvscope_wire::BlockStored) -> Option<String> {
    let salt = match s.encoding {
        Some(kvscope_wire::EventEncoding::Map) => s.cache_salt.as_deref().map(str::to_owned),
        _ => s.cache_salt.as_deref().filter(|salt| !salt.is_empty()).map(str::to_owned),
    };
    salt.or_else(|| {
        let mut lora = s.lora_name.as_deref().filter(|name| !name.is_empty());
        s.extra_key_strings.as_ref()?.iter().find_map(|item| {
            if lora == Some(item.as_str()) {
                lora = None;
                return None;
            }
            item.strip_prefix("dynamo-cache-salt:").filter(|ns| !ns.is_empty()).map(str::to_owned)
        })
    })
}

/// Dynamo's event in the comparable shape.
pub fn theirs(view: &dynamo::EventView) -> Fields {
    Fields {
        event_type: view.event_type.to_owned(),
        block_hashes: view.block_hashes.clone(),
        parent_block_hash: view.parent_block_hash,
        token_count: view.token_count,
        is_bigram: view.is_bigram,
        block_size: view.block_size,
        medium: view.medium.clone(),
        lora_name: view.lora_name.clone(),
        group_idx: view.group_idx,
        kv_cache_spec_kind: view.kv_cache_spec_kind.map(str::to_owned),
        kv_cache_spec_sliding_window: view.kv_cache_spec_sliding_window,
        locality: view.locality.map(str::to_owned),
        ownership: view.ownership.clone(),
        cache_namespace: view.cache_namespace.clone(),
    }
}

/// Every manifest entry, in manifest order.
pub fn corpus() -> &'static [Entry] {
    let entries = kvscope_corpus::manifest();
    assert!(!entries.is_empty(), "the corpus manifest is empty: is tests/fixtures/kv-events there?");
    entries
}
