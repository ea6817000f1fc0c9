//! Batch-level checks: what a decoder stricter than kvscope's rejects as a whole batch.
//!
//! kvscope's decoder accepts every released layout (2-element batches, map batches, bin hashes,
//! unknown tags) because an operator must see them. NVIDIA Dynamo 1.6.1's `decode_event_batch`
//! is `rmp_serde::from_slice::<KvEventBatch>`: the batch is a strict `(f64, Vec<RawKvEvent>,
//! Option<i32>)` tuple, a hash is an `i64 | u64` untagged enum, token ids are `u32`, and a tag
//! other than its four fails the batch. When it fails, its listener logs "Failed to decode
//! KvEventBatch: {error}" and every event of the batch is lost, GPU stores included
//! (docs/dynamo-1.6.1.md, section 2). Under `dynamo-1.6.1` [`dynamo_1_6_1_rejection`] predicts
//! that failure from kvscope's decode of the same payload, and rule `batch_decode_rejected`
//! gives every event of the batch the same verdict.
//!
//! The order is Dynamo's byte order: a map batch fails at its first byte; otherwise events are
//! read in order (within an event: tag of an array event, hashes, parent, token ids, array
//! position 5's `lora_id`; the tag of a map event is judged after its fields); then the
//! `dp_rank`; then the batch length, which serde checks only after reading the elements.

use std::fmt;

use kvscope_wire::{BatchHeader, BatchLayout, EventBatch, EventEncoding, KvEvent};

use crate::small::SmallStr;

/// Why Dynamo 1.6.1's decoder rejects a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// `{ts, events, data_parallel_rank}`: the batch is read as a tuple only.
    MapBatch,
    /// An event tag other than `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `Ignored`.
    UnknownTag,
    /// A block or parent hash that is a bin (16 or 32 bytes): vLLM 0.10-0.33 offload hashes.
    BinHash,
    /// A token id outside `u32` (negative or wider), or a bigram item that is not a pair.
    TokenIdsOutsideU32,
    /// A negative `lora_id` at position 5 of an array-encoded store (read as `u64`).
    NegativeLoraId,
    /// A `dp_rank` beyond `i32::MAX` (read as `i32`).
    DpRankBeyondI32,
    /// `[ts, events]`: vLLM 0.9.0's batch.
    TwoElements,
    /// `[ts, events, dp_rank, ...]` with more than three elements.
    LongerArray,
}

/// A rejected batch: why, and at which event. 8 bytes: every verdict carries a slot for one. The
/// `lora_id` or `dp_rank` a message quotes travels beside it ([`dynamo_1_6_1_rejection`]
/// returns it; a verdict keeps it in [`crate::Facts::parent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchRejection {
    pub reason: RejectReason,
    /// The offending event, or [`BatchRejection::WHOLE_BATCH`].
    event: u32,
}

impl BatchRejection {
    /// `event` when the batch itself is at fault.
    const WHOLE_BATCH: u32 = u32::MAX;

    /// A rejection at event `event_index`, or of the whole batch (`None`).
    pub fn new(reason: RejectReason, event_index: Option<u32>) -> Self {
        BatchRejection { reason, event: event_index.unwrap_or(BatchRejection::WHOLE_BATCH) }
    }

    /// The offending event, or `None` when the batch itself is at fault.
    pub fn event_index(self) -> Option<u32> {
        (self.event != BatchRejection::WHOLE_BATCH).then_some(self.event)
    }

    /// Dynamo's error text, exactly as its listener logs it after "Failed to decode
    /// KvEventBatch: ". `tag` is the offending tag ([`RejectReason::UnknownTag`]), `value` the
    /// quoted `lora_id` or `dp_rank`.
    pub fn message(self, tag: &SmallStr, value: i64) -> impl fmt::Display + '_ {
        Message { rejection: self, tag, value }
    }

    /// The verdict sentence: what Dynamo's decoder saw and what it lost.
    pub fn sentence(self, tag: &SmallStr, value: i64) -> impl fmt::Display + '_ {
        Sentence { rejection: self, tag, value }
    }

    /// Whether Dynamo's decoder read event `index` completely before it failed (it logs, for
    /// example, an unknown kind of such an event at decode time).
    pub fn decoded_before_failure(self, index: u32) -> bool {
        match self.event_index() {
            Some(at) => index < at,
            None => self.reason != RejectReason::MapBatch,
        }
    }
}

struct Message<'a> {
    rejection: BatchRejection,
    tag: &'a SmallStr,
    value: i64,
}

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rejection.reason {
            RejectReason::MapBatch => f.write_str("invalid type: map, expected a tuple of size 3"),
            RejectReason::UnknownTag => {
                write!(f, "unknown variant `{}`, expected one of `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `Ignored`", self.tag)
            }
            RejectReason::BinHash => f.write_str("data did not match any variant of untagged enum BlockHashValue"),
            RejectReason::TokenIdsOutsideU32 => f.write_str("data did not match any variant of untagged enum KvTokenIds"),
            RejectReason::NegativeLoraId => write!(f, "invalid value: integer `{}`, expected u64", self.value),
            RejectReason::DpRankBeyondI32 => write!(f, "invalid value: integer `{}`, expected i32", self.value),
            RejectReason::TwoElements => f.write_str("invalid length 2, expected a tuple of size 3"),
            RejectReason::LongerArray => f.write_str("array had incorrect length, expected 3"),
        }
    }
}

struct Sentence<'a> {
    rejection: BatchRejection,
    tag: &'a SmallStr,
    value: i64,
}

impl fmt::Display for Sentence<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.rejection;
        let at = r.event_index().unwrap_or(0);
        match r.reason {
            RejectReason::MapBatch => f.write_str("the batch is a map, not a [ts, events, dp_rank] array")?,
            RejectReason::UnknownTag => write!(f, "events[{at}] has the tag {:?}, which it does not know", self.tag)?,
            RejectReason::BinHash => write!(f, "events[{at}] has a bin (bytes) block hash")?,
            RejectReason::TokenIdsOutsideU32 => write!(f, "events[{at}] has token ids that are not u32")?,
            RejectReason::NegativeLoraId => write!(f, "events[{at}] has lora_id {} at position 5", self.value)?,
            RejectReason::DpRankBeyondI32 => write!(f, "dp_rank {} does not fit i32", self.value)?,
            RejectReason::TwoElements => f.write_str("the batch has 2 elements (vLLM 0.9.0), not 3")?,
            RejectReason::LongerArray => f.write_str("the batch has more than 3 elements")?,
        }
        write!(
            f,
            "; Dynamo 1.6.1's decoder rejects the whole batch (\"{}\"), and every event of it is lost",
            Message { rejection: r, tag: self.tag, value: self.value }
        )
    }
}

/// Why Dynamo 1.6.1's `decode_event_batch` would reject this batch, if it would, with the value
/// its message quotes (0 unless the reason is a `lora_id` or `dp_rank`).
pub fn dynamo_1_6_1_rejection(batch: &EventBatch) -> Option<(BatchRejection, i64)> {
    let mut scan = RejectionScan::default();
    for (i, event) in batch.events.iter().enumerate() {
        scan.observe(i as u32, event);
    }
    scan.finish(&batch.header()).map(|(rejection, value, _)| (rejection, value))
}

/// [`dynamo_1_6_1_rejection`] one event at a time, in constant memory: the streaming decoder
/// shows each event once ([`RejectionScan::observe`]) before the first one is classified, and
/// the header, known only after the last event, decides the rest ([`RejectionScan::finish`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct RejectionScan {
    /// The first event Dynamo's decoder fails on: why, the value quoted, the offending tag.
    first: Option<(BatchRejection, i64, SmallStr)>,
}

impl RejectionScan {
    /// Looks at event `index`; only the first offending event counts (Dynamo stops there).
    #[inline]
    pub fn observe(&mut self, index: u32, event: &KvEvent) {
        if self.first.is_some() {
            return;
        }
        let at = |reason, value| Some((BatchRejection::new(reason, Some(index)), value, SmallStr::EMPTY));
        self.first = match event {
            KvEvent::Unknown(u) if u.tag != "Ignored" => {
                Some((BatchRejection::new(RejectReason::UnknownTag, Some(index)), 0, SmallStr::new(&u.tag)))
            }
            KvEvent::BlockStored(s) => {
                if s.hash_reprs.has_bin() {
                    at(RejectReason::BinHash, 0)
                } else if s.token_ids.outside_u32 {
                    at(RejectReason::TokenIdsOutsideU32, 0)
                } else if let (Some(EventEncoding::Array { .. }), Some(v)) = (s.encoding, s.lora_id.filter(|v| *v < 0)) {
                    at(RejectReason::NegativeLoraId, v)
                } else {
                    None
                }
            }
            KvEvent::BlockRemoved(r) if r.hash_reprs.has_bin() => at(RejectReason::BinHash, 0),
            _ => None,
        };
    }

    /// The verdict on the whole batch once every event was observed: the rejection, the value
    /// its message quotes, and the offending tag (empty unless [`RejectReason::UnknownTag`]).
    pub fn finish(&self, header: &BatchHeader) -> Option<(BatchRejection, i64, SmallStr)> {
        let whole = |reason, value| Some((BatchRejection::new(reason, None), value, SmallStr::EMPTY));
        if header.layout == BatchLayout::Map {
            return whole(RejectReason::MapBatch, 0);
        }
        if self.first.is_some() {
            return self.first;
        }
        match header.layout {
            BatchLayout::Array2 => whole(RejectReason::TwoElements, 0),
            _ => match header.dp_rank {
                Some(rank) if i32::try_from(rank).is_err() => whole(RejectReason::DpRankBeyondI32, i64::from(rank)),
                _ if matches!(header.layout, BatchLayout::ArrayLonger { .. }) => whole(RejectReason::LongerArray, 0),
                _ => None,
            },
        }
    }
}

/// The tag of the event a rejection names, for [`RejectReason::UnknownTag`] messages.
pub fn rejected_tag(batch: &EventBatch, rejection: BatchRejection) -> SmallStr {
    match (rejection.reason, rejection.event_index().and_then(|i| batch.events.get(i as usize))) {
        (RejectReason::UnknownTag, Some(KvEvent::Unknown(u))) => SmallStr::new(&u.tag),
        _ => SmallStr::EMPTY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvscope_corpus::vectors::{EventSpec, encode_batch};

    fn batch(events: &str, layout: &str) -> EventBatch {
        let events: Vec<EventSpec> = serde_json::from_str(events).unwrap();
        let bytes = kvscope_corpus::vectors::encode_batch_with(0.0, &events, Some(0), false, layout).unwrap();
        kvscope_wire::decode_batch(&bytes).unwrap()
    }

    fn message(batch: &EventBatch) -> Option<String> {
        dynamo_1_6_1_rejection(batch).map(|(r, v)| r.message(&rejected_tag(batch, r), v).to_string())
    }

    #[test]
    fn rejections_follow_dynamos_byte_order() {
        let gpu = r#"{"type": "BlockStored", "hashes": [1], "block_size": 16}"#;
        let bin = r#"{"type": "BlockStored", "hashes": [{"bin": 32, "value": 7}], "block_size": 16}"#;
        let bad_tokens = r#"{"type": "BlockStored", "hashes": [2], "block_size": 16, "token_ids": [-1]}"#;
        assert_eq!(message(&batch(&format!("[{gpu}]"), "array3")), None);
        assert_eq!(
            message(&batch(&format!("[{gpu}, {bin}]"), "array3")).as_deref(),
            Some("data did not match any variant of untagged enum BlockHashValue")
        );
        // The first bad value in byte order decides.
        assert_eq!(
            message(&batch(&format!("[{bad_tokens}, {bin}]"), "array3")).as_deref(),
            Some("data did not match any variant of untagged enum KvTokenIds")
        );
        // Events are read before the batch length is judged.
        assert_eq!(
            message(&batch(&format!("[{bin}]"), "array2")).as_deref(),
            Some("data did not match any variant of untagged enum BlockHashValue")
        );
        assert_eq!(message(&batch("[]", "array2")).as_deref(), Some("invalid length 2, expected a tuple of size 3"));
        assert_eq!(message(&batch("[]", "array4")).as_deref(), Some("array had incorrect length, expected 3"));
        // A map batch fails before any event is read.
        assert_eq!(message(&batch(&format!("[{bin}]"), "map")).as_deref(), Some("invalid type: map, expected a tuple of size 3"));
        let foo = batch(r#"[{"type": "Ignored"}, {"type": "Foo"}]"#, "array3");
        assert_eq!(
            message(&foo).as_deref(),
            Some("unknown variant `Foo`, expected one of `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `Ignored`")
        );
        let (r, _) = dynamo_1_6_1_rejection(&foo).unwrap();
        assert!(r.decoded_before_failure(0) && !r.decoded_before_failure(1));
    }

    #[test]
    fn dp_rank_beyond_i32_and_negative_lora_id_in_arrays() {
        let events: Vec<EventSpec> = serde_json::from_str(r#"[{"type": "BlockStored", "hashes": [1], "block_size": 16}]"#).unwrap();
        let b = kvscope_wire::decode_batch(&encode_batch(0.0, &events, Some(1 << 31), false).unwrap()).unwrap();
        assert_eq!(message(&b).as_deref(), Some("invalid value: integer `2147483648`, expected i32"));
        let lora = r#"[{"type": "BlockStored", "hashes": [1], "block_size": 16, "lora_id": -1}]"#;
        let events: Vec<EventSpec> = serde_json::from_str(lora).unwrap();
        let array = kvscope_wire::decode_batch(&encode_batch(0.0, &events, Some(0), true).unwrap()).unwrap();
        assert_eq!(message(&array).as_deref(), Some("invalid value: integer `-1`, expected u64"));
        // Map events: Dynamo never reads lora_id.
        let map = kvscope_wire::decode_batch(&encode_batch(0.0, &events, Some(0), false).unwrap()).unwrap();
        assert_eq!(message(&map), None);
    }
}
