//! One event: its tag, its fields (by position in a tagged array, by key in a tagged map), and
//! the [`KvEvent`] they build.
//!
//! Every field any event type may carry is read into the store it would become ([`Fields`]);
//! the tag then decides which ones the event keeps. Keys are matched by [`super::key`], field
//! values with more than one shape are read by [`super::values`]; the batch around the event is
//! [`super`]'s business.

use super::key::Key;
use super::values::{extra_keys, hashes, lora_name_or_salt, token_ids};
use crate::cursor::{Container, Cursor, Fail, MAX_DEPTH, Seg, Within};
use crate::error::DecodeErrorKind;
use crate::event::*;

/// Containers around an event's fields: the batch, `events`, the event.
pub(super) const EVENT_DEPTH: usize = 3;

pub(super) fn event(c: &mut Cursor<'_>) -> Result<KvEvent, Fail> {
    let start = c.pos;
    match c.container(&"array or map for event")? {
        Container::Array(len) => array_event(c, start, len),
        Container::Map(len) => map_event(c, start, len),
    }
}

/// An event's tag, allocated only when it is not one of the three known tags (and then inline
/// when short).
#[derive(Clone, PartialEq, Eq)]
enum Tag {
    Stored,
    Removed,
    Cleared,
    Other(WireStr),
}

impl Tag {
    fn name(&self) -> &str {
        match self {
            Tag::Stored => "BlockStored",
            Tag::Removed => "BlockRemoved",
            Tag::Cleared => "AllBlocksCleared",
            Tag::Other(name) => name,
        }
    }
}

#[inline]
fn tag(c: &mut Cursor<'_>) -> Result<Tag, Fail> {
    match c.str_bytes()? {
        Some(b"BlockStored") => Ok(Tag::Stored),
        Some(b"BlockRemoved") => Ok(Tag::Removed),
        Some(b"AllBlocksCleared") => Ok(Tag::Cleared),
        Some(other) => match std::str::from_utf8(other) {
            Ok(s) => Ok(Tag::Other(WireStr::new(s))),
            Err(_) => Err(Fail::not_utf8()),
        },
        None => Err(c.mismatch(&"string event tag")),
    }
}

/// Positional fields of array-encoded events, after the tag (index 0).
const STORED_POSITIONS: [Key; 11] = [
    Key::BlockHashes,
    Key::ParentBlockHash,
    Key::TokenIds,
    Key::BlockSize,
    Key::LoraId,
    Key::Medium,
    // A string (vLLM's lora_name) or SGLang's `{cache_salt: str}` map.
    Key::LoraNameOrSalt,
    Key::ExtraKeys,
    Key::GroupIdx,
    Key::KvCacheSpecKind,
    Key::KvCacheSpecSlidingWindow,
];
const REMOVED_POSITIONS: [Key; 3] = [Key::BlockHashes, Key::Medium, Key::GroupIdx];
/// Fields an array-encoded `BlockStored` must have: tag through block_size.
const STORED_MIN_LEN: usize = 5;
const REMOVED_MIN_LEN: usize = 2;

fn array_event(c: &mut Cursor<'_>, start: usize, len: usize) -> Result<KvEvent, Fail> {
    if len == 0 {
        return Err(Fail::at(start, DecodeErrorKind::MissingField, "event array is empty; expected a tag".into()));
    }
    let tag_start = c.pos;
    let tag = tag(c).within(tag_start, Seg::Index(0))?;
    let (positions, min_len): (&[Key], usize) = match tag {
        Tag::Stored => (&STORED_POSITIONS, STORED_MIN_LEN),
        Tag::Removed => (&REMOVED_POSITIONS, REMOVED_MIN_LEN),
        Tag::Cleared | Tag::Other(_) => (&[], 1),
    };
    if len < min_len {
        return Err(Fail::at(
            start,
            DecodeErrorKind::MissingField,
            format!(
                "{} array has {len} elements; expected at least {min_len} (tag, {})",
                tag.name(),
                positions[..min_len - 1].iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let mut fields = Fields::default();
    let read = positions.len().min(len - 1);
    for key in &positions[..read] {
        read_field(c, *key, &mut fields)?;
    }
    for _ in read + 1..len {
        c.skip(MAX_DEPTH - EVENT_DEPTH)?;
    }
    build(tag, fields, EventEncoding::Array { len: len as u32 }, start)
}

fn map_event(c: &mut Cursor<'_>, start: usize, len: usize) -> Result<KvEvent, Fail> {
    let mut fields = Fields::default();
    let mut tag_seen = None;
    for _ in 0..len {
        let key = c.key()?;
        match Key::from_bytes(key) {
            Key::Type => {
                let tag_start = c.pos;
                tag_seen = Some(tag(c).within(tag_start, Seg::Field("type"))?);
            }
            Key::Other => {
                Cursor::check_utf8(key)?;
                c.skip(MAX_DEPTH - EVENT_DEPTH)?;
            }
            // One arm per key, each with its key as a constant: the reader is specialised per
            // field, so each key costs one dispatch (on its bytes), not a second one on `Key`.
            Key::BlockHashes => read_field(c, Key::BlockHashes, &mut fields)?,
            Key::ParentBlockHash => read_field(c, Key::ParentBlockHash, &mut fields)?,
            Key::TokenIds => read_field(c, Key::TokenIds, &mut fields)?,
            Key::BlockSize => read_field(c, Key::BlockSize, &mut fields)?,
            Key::LoraId => read_field(c, Key::LoraId, &mut fields)?,
            Key::Medium => read_field(c, Key::Medium, &mut fields)?,
            Key::LoraName => read_field(c, Key::LoraName, &mut fields)?,
            Key::ExtraKeys => read_field(c, Key::ExtraKeys, &mut fields)?,
            Key::GroupIdx => read_field(c, Key::GroupIdx, &mut fields)?,
            Key::KvCacheSpecKind => read_field(c, Key::KvCacheSpecKind, &mut fields)?,
            Key::KvCacheSpecSlidingWindow => read_field(c, Key::KvCacheSpecSlidingWindow, &mut fields)?,
            Key::Locality => read_field(c, Key::Locality, &mut fields)?,
            Key::Ownership => read_field(c, Key::Ownership, &mut fields)?,
            Key::CacheSalt => read_field(c, Key::CacheSalt, &mut fields)?,
            Key::SessionId => read_field(c, Key::SessionId, &mut fields)?,
            Key::LoraNameOrSalt => read_field(c, Key::LoraNameOrSalt, &mut fields)?,
        }
    }
    let Some(tag) = tag_seen else {
        return Err(Fail::at(start, DecodeErrorKind::MissingField, "event map has no \"type\" key".into()));
    };
    build(tag, fields, EventEncoding::Map, start)
}

/// Every field any event type may carry, read into the store it would become; the tag decides
/// which ones the event keeps.
#[derive(Default)]
struct Fields {
    /// Allocated at the first field read, in place: a store then becomes its event without
    /// being moved (a move of the whole struct per event was a sixth of the decode time), and
    /// a clear or an unknown tag with no fields allocates nothing.
    stored: Option<Box<BlockStored>>,
    has_hashes: bool,
    has_tokens: bool,
    /// The parent hash's representation, counted only for stores.
    parent_repr: HashReprs,
}

impl Fields {
    #[inline(always)]
    fn stored(&mut self) -> &mut BlockStored {
        self.stored.get_or_insert_with(Box::default)
    }
}

/// Reads the value of field `key` into `fields`; fields of no interest are skipped.
#[inline(always)]
fn read_field(c: &mut Cursor<'_>, key: Key, fields: &mut Fields) -> Result<(), Fail> {
    let start = c.pos;
    read_value(c, key, fields).within(start, Seg::Field(key.name()))
}

#[inline(always)]
fn read_value(c: &mut Cursor<'_>, key: Key, f: &mut Fields) -> Result<(), Fail> {
    match key {
        Key::BlockHashes => {
            let (hashes, reprs) = hashes(c)?;
            let s = f.stored();
            (s.block_hashes, s.hash_reprs) = (hashes, reprs);
            f.has_hashes = true;
            return Ok(());
        }
        Key::ParentBlockHash => {
            let (parent, repr) = if c.nil() {
                (None, HashReprs::default())
            } else {
                let (hash, repr) = c.hash(&"block hash (int or 16/32-byte bin) or nil")?;
                (Some(hash), repr)
            };
            f.stored().parent_block_hash = parent;
            f.parent_repr = repr;
            return Ok(());
        }
        Key::TokenIds => {
            f.stored().token_ids = token_ids(c)?;
            f.has_tokens = true;
            return Ok(());
        }
        Key::Type | Key::Other => return c.skip(MAX_DEPTH - EVENT_DEPTH),
        _ => {}
    }
    let s = f.stored();
    match key {
        Key::BlockSize => s.block_size = c.opt_u32("block_size")?,
        Key::LoraId => s.lora_id = c.opt_i64("lora_id")?,
        Key::Medium => s.medium = c.opt_str("medium")?,
        Key::LoraName => s.lora_name = c.opt_str("lora_name")?,
        Key::GroupIdx => s.group_idx = c.opt_u32("group_idx")?,
        Key::KvCacheSpecKind => s.kv_cache_spec_kind = c.opt_str("kv_cache_spec_kind")?,
        Key::KvCacheSpecSlidingWindow => s.kv_cache_spec_sliding_window = c.opt_u32("kv_cache_spec_sliding_window")?,
        Key::Locality => s.locality = c.opt_str("locality")?,
        Key::Ownership => s.ownership = c.opt_str("ownership")?,
        Key::CacheSalt => s.cache_salt = c.opt_str("cache_salt")?,
        Key::SessionId => s.session_id = c.opt_str("session_id")?,
        Key::ExtraKeys => s.extra_key_strings = extra_keys(c)?,
        Key::LoraNameOrSalt => lora_name_or_salt(c, s)?,
        Key::BlockHashes | Key::ParentBlockHash | Key::TokenIds | Key::Type | Key::Other => {}
    }
    Ok(())
}

fn build(tag: Tag, fields: Fields, encoding: EventEncoding, start: usize) -> Result<KvEvent, Fail> {
    let missing = |what: &str| Fail::at(start, DecodeErrorKind::MissingField, format!("{} has no {what}", tag.name()));
    let Fields { stored, has_hashes, has_tokens, parent_repr } = fields;
    Ok(match tag {
        Tag::Stored => {
            if !has_hashes {
                return Err(missing("block_hashes"));
            }
            if !has_tokens {
                return Err(missing("token_ids"));
            }
            // Reading block_hashes allocated the store.
            let Some(mut stored) = stored else { return Err(missing("block_hashes")) };
            if stored.block_size.is_none() {
                return Err(missing("block_size"));
            }
            stored.hash_reprs.insert(parent_repr);
            stored.encoding = Some(encoding);
            KvEvent::BlockStored(stored)
        }
        Tag::Removed => {
            let (true, Some(stored)) = (has_hashes, stored) else { return Err(missing("block_hashes")) };
            let BlockStored {
                block_hashes,
                medium,
                group_idx,
                kv_cache_spec_kind,
                kv_cache_spec_sliding_window,
                locality,
                ownership,
                hash_reprs,
                ..
            } = *stored;
            KvEvent::BlockRemoved(Box::new(BlockRemoved {
                block_hashes,
                medium,
                group_idx,
                kv_cache_spec_kind,
                kv_cache_spec_sliding_window,
                locality,
                ownership,
                hash_reprs,
                encoding: Some(encoding),
            }))
        }
        Tag::Cleared => KvEvent::AllBlocksCleared { encoding, ownership: stored.and_then(|s| s.ownership) },
        Tag::Other(tag) => KvEvent::Unknown(UnknownEvent { tag, encoding }),
    })
}
