//! Dynamo 1.6.1 (`dynamo-kv-router`, module `zmq_wire`) driven the way its standalone indexer's
//! ZMQ listener drives it, with every outcome turned into plain data a test can compare.
//!
//! The listener (`src/services/indexer/listener.rs`, `apply_live_batch`, lines 329-369) decodes
//! a payload with `decode_event_batch`; on an error it logs "Failed to decode KvEventBatch:
//! {error}" and drops the whole batch. Otherwise it calls `ZmqEventNormalizer::normalize(raw,
//! seq, worker)` on each event, with `worker.dp_rank` = the batch's `data_parallel_rank` (bit-cast
//! to u32) or, when that is nil, the listener's own rank. [`DynamoListener`] does the same, but
//! calls the two halves of `normalize` (`preprocess_with_reason`, `normalize_preprocessed`)
//! itself so that a skip carries its reason. docs/dynamo-1.6.1.md describes the rules.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dynamo_kv_router::protocols::{KvCacheEventData, StorageTier, WorkerWithDpRank};
use dynamo_kv_router::zmq_wire::{
    BlockHashValue, KvCacheSpecKind, KvEventBatch, Locality, RawKvEvent, ZmqEventNormalizer, decode_event_batch,
};

pub use dynamo_kv_router::zmq_wire::ZmqEventFilterReason;

/// Dynamo's decode error: rmp-serde's, shown by its `Display` text.
pub type DecodeError = rmp_serde::decode::Error;

/// Decodes one payload with Dynamo's decoder (`zmq_wire::decode_event_batch`).
pub fn decode(payload: &[u8]) -> Result<KvEventBatch, DecodeError> {
    decode_event_batch(payload)
}

/// One event as Dynamo decoded it, reduced to the fields kvscope also decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventView {
    /// The wire tag: `BlockStored`, `BlockRemoved`, `AllBlocksCleared` or `Ignored`.
    pub event_type: &'static str,
    pub block_hashes: Vec<u64>,
    pub parent_block_hash: Option<u64>,
    /// Length of Dynamo's `token_ids` after `normalize_token_ids` (for a bigram page of n pairs
    /// that is n + 1 tokens).
    pub token_count: Option<usize>,
    pub is_bigram: Option<bool>,
    pub block_size: Option<u64>,
    /// After Dynamo's `normalize_medium` (an empty string becomes `None`).
    pub medium: Option<String>,
    pub lora_name: Option<String>,
    pub group_idx: Option<u32>,
    pub kv_cache_spec_kind: Option<&'static str>,
    pub kv_cache_spec_sliding_window: Option<u32>,
    /// `LOCAL`, `REMOTE`, or `unknown` for any other string.
    pub locality: Option<&'static str>,
    pub ownership: Option<String>,
    pub cache_namespace: Option<String>,
}

/// Dynamo's spec-kind names; `KvCacheSpecKind::as_wire` is crate-private, so it is repeated here.
pub fn kind_name(kind: KvCacheSpecKind) -> &'static str {
    match kind {
        KvCacheSpecKind::FullAttention => "full_attention",
        KvCacheSpecKind::MlaAttention => "mla_attention",
        KvCacheSpecKind::SlidingWindow => "sliding_window",
        KvCacheSpecKind::SlidingWindowMla => "sliding_window_mla",
        KvCacheSpecKind::Mamba => "mamba",
        KvCacheSpecKind::ChunkedLocalAttention => "chunked_local_attention",
        KvCacheSpecKind::SinkFullAttention => "sink_full_attention",
        KvCacheSpecKind::EncoderOnlyAttention => "encoder_only_attention",
        KvCacheSpecKind::CrossAttention => "cross_attention",
        KvCacheSpecKind::Unknown => "unknown",
    }
}

fn locality_name(locality: Locality) -> &'static str {
    match locality {
        Locality::Local => "LOCAL",
        Locality::Remote => "REMOTE",
        Locality::Unknown => "unknown",
    }
}

fn hashes(values: &[BlockHashValue]) -> Vec<u64> {
    values.iter().map(|h| h.into_u64()).collect()
}

/// Reduces one decoded Dynamo event to an [`EventView`].
pub fn view(raw: &RawKvEvent) -> EventView {
    let empty = EventView {
        event_type: "",
        block_hashes: Vec::new(),
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
        ownership: None,
        cache_namespace: None,
    };
    match raw {
        RawKvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            medium,
            lora_name,
            cache_namespace,
            is_eagle,
            group_idx,
            kv_cache_spec_kind,
            kv_cache_spec_sliding_window,
            locality,
            ownership,
            ..
        } => EventView {
            event_type: "BlockStored",
            block_hashes: hashes(block_hashes),
            parent_block_hash: parent_block_hash.map(|h| h.into_u64()),
            token_count: Some(token_ids.len()),
            is_bigram: *is_eagle,
            block_size: Some(*block_size as u64),
            medium: medium.clone(),
            lora_name: lora_name.clone(),
            group_idx: *group_idx,
            kv_cache_spec_kind: kv_cache_spec_kind.map(kind_name),
            kv_cache_spec_sliding_window: *kv_cache_spec_sliding_window,
            locality: locality.map(locality_name),
            ownership: ownership.clone(),
            cache_namespace: cache_namespace.clone(),
        },
        RawKvEvent::BlockRemoved {
            block_hashes,
            medium,
            group_idx,
            kv_cache_spec_kind,
            kv_cache_spec_sliding_window,
            locality,
            ownership,
        } => EventView {
            event_type: "BlockRemoved",
            block_hashes: hashes(block_hashes),
            medium: medium.clone(),
            group_idx: *group_idx,
            kv_cache_spec_kind: kv_cache_spec_kind.map(kind_name),
            kv_cache_spec_sliding_window: *kv_cache_spec_sliding_window,
            locality: locality.map(locality_name),
            ownership: ownership.clone(),
            ..empty
        },
        RawKvEvent::AllBlocksCleared { ownership } => EventView { event_type: "AllBlocksCleared", ownership: ownership.clone(), ..empty },
        RawKvEvent::Ignored => EventView { event_type: "Ignored", ..empty },
    }
}

/// Storage tier names shared with kvscope's verdicts.
pub fn tier_name(tier: StorageTier) -> &'static str {
    match tier {
        StorageTier::Device => "device",
        StorageTier::HostPinned => "host_pinned",
        StorageTier::Disk => "disk",
        StorageTier::External => "external",
    }
}

/// What the indexer did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `preprocess_with_reason` returned this reason; nothing reached the index.
    Skipped(&'static str),
    /// `convert_event` returned `None` after preprocessing let the event through (its locality
    /// and unknown-medium backstops; unreachable after preprocessing, kept to prove it).
    DroppedInConversion,
    /// A `BlockStored` reached the index on `tier` with `blocks_published` of its
    /// `blocks_in_event` blocks (`create_stored_blocks` stops at the first block whose size is
    /// not the configured one, or whose tokens run short).
    Stored {
        tier: &'static str,
        blocks_in_event: usize,
        blocks_published: usize,
    },
    /// A `BlockStored` whose hashes (parent included) repeat: `convert_event` sends an empty
    /// `Removed` instead (a no-op in the index).
    SelfReferencingStore {
        tier: &'static str,
    },
    Removed {
        tier: &'static str,
        blocks: usize,
    },
    /// Clears every tier of the worker and rank (`Indexer::apply_event_routed`).
    Cleared,
}

impl Verdict {
    /// The tier the event was applied on, if it was applied.
    pub fn tier(&self) -> Option<&'static str> {
        match self {
            Verdict::Stored { tier, .. } | Verdict::SelfReferencingStore { tier } | Verdict::Removed { tier, .. } => Some(tier),
            Verdict::Cleared => Some("device"),
            Verdict::Skipped(_) | Verdict::DroppedInConversion => None,
        }
    }
}

/// What the listener did with one payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// `decode_event_batch` failed: the listener logs "Failed to decode KvEventBatch: {error}"
    /// and every event of the batch is lost.
    Lost { error: String },
    /// One verdict per event, in order, and the dp rank the events were filed under.
    Events { dp_rank: u32, verdicts: Vec<Verdict> },
}

/// One ZMQ listener of the standalone indexer: one worker, one rank, one normalizer.
#[derive(Debug)]
pub struct DynamoListener {
    worker_id: u64,
    dp_rank: u32,
    normalizer: ZmqEventNormalizer,
    warnings: Arc<AtomicU32>,
}

impl DynamoListener {
    /// A listener for `worker_id` on `dp_rank` with `--block-size block_size`.
    pub fn new(worker_id: u64, dp_rank: u32, block_size: u32) -> Self {
        let warnings = Arc::new(AtomicU32::new(0));
        DynamoListener {
            worker_id,
            dp_rank,
            normalizer: ZmqEventNormalizer::with_warning_count(block_size, Arc::clone(&warnings)),
            warnings,
        }
    }

    /// How many conversion warnings the normalizer has counted (it logs the first 3).
    pub fn warnings(&self) -> u32 {
        self.warnings.load(Ordering::Relaxed)
    }

    /// Decodes and normalizes one payload as `apply_live_batch` does, and says what happened.
    pub fn apply(&mut self, seq: u64, payload: &[u8]) -> BatchOutcome {
        let batch = match decode_event_batch(payload) {
            Ok(batch) => batch,
            Err(error) => {
                return BatchOutcome::Lost { error: error.to_string() };
            }
        };
        let dp_rank = batch.data_parallel_rank.map_or(self.dp_rank, |rank| rank.cast_unsigned());
        let worker = WorkerWithDpRank::new(self.worker_id, dp_rank);
        let verdicts = batch.events.into_iter().map(|raw| self.classify(raw, seq, worker)).collect();
        BatchOutcome::Events { dp_rank, verdicts }
    }

    fn classify(&mut self, raw: RawKvEvent, seq: u64, worker: WorkerWithDpRank) -> Verdict {
        let was_store = matches!(raw, RawKvEvent::BlockStored { .. });
        let blocks_in_event = raw_block_count(&raw);
        let raw = match self.normalizer.preprocess_with_reason(raw, worker) {
            Ok(raw) => raw,
            Err(reason) => return Verdict::Skipped(reason.as_label()),
        };
        let Some(placement) = self.normalizer.normalize_preprocessed(raw, seq, worker) else {
            return Verdict::DroppedInConversion;
        };
        let tier = tier_name(placement.placement.tier);
        match placement.event.data {
            KvCacheEventData::Stored(store) => Verdict::Stored { tier, blocks_in_event, blocks_published: store.blocks.len() },
            KvCacheEventData::Removed(_) if was_store => Verdict::SelfReferencingStore { tier },
            KvCacheEventData::Removed(remove) => Verdict::Removed { tier, blocks: remove.block_hashes.len() },
            KvCacheEventData::Cleared => Verdict::Cleared,
        }
    }

    /// The benchmark path: decode and `normalize` every event, as the listener does, without
    /// the bookkeeping of [`DynamoListener::apply`]. Returns how many events reached the index.
    pub fn decode_and_normalize(&mut self, seq: u64, payload: &[u8]) -> usize {
        let Ok(batch) = decode_event_batch(payload) else {
            return 0;
        };
        let dp_rank = batch.data_parallel_rank.map_or(self.dp_rank, |rank| rank.cast_unsigned());
        let worker = WorkerWithDpRank::new(self.worker_id, dp_rank);
        let mut applied = 0;
        for raw in batch.events {
            if let Some(event) = self.normalizer.normalize(raw, seq, worker) {
                std::hint::black_box(&event);
                applied += 1;
            }
        }
        applied
    }
}

fn raw_block_count(raw: &RawKvEvent) -> usize {
    match raw {
        RawKvEvent::BlockStored { block_hashes, .. } | RawKvEvent::BlockRemoved { block_hashes, .. } => block_hashes.len(),
        RawKvEvent::AllBlocksCleared { .. } | RawKvEvent::Ignored => 0,
    }
}
