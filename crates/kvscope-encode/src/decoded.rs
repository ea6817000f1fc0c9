//! Events back from what `kvscope_wire` decoded, for checks that re-encode a payload and compare
//! bytes. The only module that reads `kvscope_wire`'s event types, so a change there is a fix
//! here alone.
//!
//! A decoded event does not say everything an encoder needs; what it cannot say is either read
//! back from the payload (token ids, through the span the decoder keeps for viewers) or reported
//! as [`NotKept`].

use kvscope_wire::{BlockHash, EventBatch, HashReprs, KvEvent, TokenIds};

use crate::event::{Batch, Event, Hash, Other, Removed, Stored, Tokens};

/// What a decoded event lacks to be re-encoded byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotKept {
    /// A bin hash: the decoder keeps its last 8 bytes only.
    BinHashBytes,
    /// The token span does not hold a list of ints or of int pairs.
    TokenIds,
}

/// The batch `decoded` came from, rebuilt; `payload` is the bytes it was decoded from.
///
/// `extra_keys` is rebuilt as the first block's strings repeated for every block when there
/// were some, else left unset: the decoder does not say whether the engine wrote nil, nothing,
/// or one nil per block. Callers that know their engine set it (see the corpus test).
pub fn batch_from_decoded(decoded: &EventBatch, payload: &[u8]) -> Result<Batch, NotKept> {
    let events = decoded.events.iter().map(|e| event_from_decoded(e, payload)).collect::<Result<_, _>>()?;
    Ok(Batch { ts: decoded.ts, events, dp_rank: decoded.dp_rank })
}

/// One event, rebuilt (see [`batch_from_decoded`]).
pub fn event_from_decoded(e: &KvEvent, payload: &[u8]) -> Result<Event, NotKept> {
    Ok(match e {
        KvEvent::BlockStored(s) => {
            let hash = |h: BlockHash| hash_of(h, s.hash_reprs);
            let hashes = s.block_hashes.iter().map(|&h| hash(h)).collect::<Result<Vec<_>, _>>()?;
            let extra_keys = s.extra_key_strings.as_ref().map(|keys| vec![Some(keys.clone()); hashes.len()]);
            Event::Stored(Stored {
                parent: s.parent_block_hash.map(hash).transpose()?,
                hashes,
                tokens: tokens_of(&s.token_ids, payload)?,
                block_size: s.block_size,
                lora_id: s.lora_id,
                medium: owned(s.medium.as_deref()),
                lora_name: owned(s.lora_name.as_deref()),
                extra_keys,
                cache_salt: owned(s.cache_salt.as_deref()),
                group_idx: s.group_idx,
                kind: owned(s.kv_cache_spec_kind.as_deref()),
                sliding_window: s.kv_cache_spec_sliding_window,
                locality: owned(s.locality.as_deref()),
                session_id: owned(s.session_id.as_deref()),
                ownership: owned(s.ownership.as_deref()),
            })
        }
        KvEvent::BlockRemoved(r) => Event::Removed(Removed {
            hashes: r.block_hashes.iter().map(|&h| hash_of(h, r.hash_reprs)).collect::<Result<_, _>>()?,
            medium: owned(r.medium.as_deref()),
            group_idx: r.group_idx,
            kind: owned(r.kv_cache_spec_kind.as_deref()),
            sliding_window: r.kv_cache_spec_sliding_window,
            locality: owned(r.locality.as_deref()),
            ownership: owned(r.ownership.as_deref()),
        }),
        KvEvent::AllBlocksCleared { ownership, .. } => {
            Event::Other(Other { tag: "AllBlocksCleared".into(), ownership: owned(ownership.as_deref()) })
        }
        KvEvent::Unknown(u) => Event::Other(Other { tag: u.tag.to_string(), ownership: None }),
    })
}

/// The decoder keeps strings inline (`WireStr`); the encoder's events own plain `String`s.
fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_owned)
}

/// An event that used signed ints wrote every hash with the top bit set as a negative int
/// (Python's `hash()` is an int64); unsigned ones as u64. Bins cannot be rebuilt.
fn hash_of(h: BlockHash, reprs: HashReprs) -> Result<Hash, NotKept> {
    if reprs.has_bin() {
        return Err(NotKept::BinHashBytes);
    }
    let signed = h.0 as i64;
    Ok(if reprs.contains(HashReprs::SIGNED) && signed < 0 { Hash::I64(signed) } else { Hash::U64(h.0) })
}

fn tokens_of(t: &TokenIds, payload: &[u8]) -> Result<Tokens, NotKept> {
    let bytes = payload.get(t.span.start as usize..t.span.end as usize).ok_or(NotKept::TokenIds)?;
    let tokens = if t.is_bigram { rmp_serde::from_slice(bytes).map(Tokens::Pairs) } else { rmp_serde::from_slice(bytes).map(Tokens::Ids) };
    tokens.map_err(|_| NotKept::TokenIds)
}
