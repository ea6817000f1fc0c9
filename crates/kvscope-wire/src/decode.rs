//! msgpack payload -> events, by a hand-written cursor over the payload slice.
//!
//! One recursive-descent reader accepts both event encodings (tagged arrays and tagged maps) and
//! every hash representation. Keys and tags are compared as raw bytes, known strings are copied
//! into inline [`WireStr`]s, `token_ids` is counted by `skip.rs`, and unknown values are skipped
//! without being built: a small event costs a few branches per field and no allocation.
//!
//! Error positions cost nothing until something fails: a reader that fails returns a [`Fail`]
//! without an offset, and each enclosing value adds its start offset (innermost wins) and its
//! path segment on the way up, so the error says `byte 17 ... (events[3].block_hashes[0])`.
//!
//! The reader hands each event to a [`Sink`] as soon as it is decoded; [`decode_batch`] collects
//! them, [`crate::decode_each`] streams them.

use crate::cursor::{Container, Cursor, Fail, Seg, Within, MAX_DEPTH};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::event::*;
use crate::skip::count_token_ids;

/// Options for [`decode_batch`]; the defaults suit every known engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeOptions {}

/// Decodes one payload (the third frame of a live message) into a batch holding every event.
///
/// To classify events without holding them all, use [`crate::decode_each`].
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut events = Vec::new();
    let header = decode_into(payload, &mut events)?;
    Ok(EventBatch { ts: header.ts, events, dp_rank: header.dp_rank, layout: header.layout })
}

/// Where the reader puts each event as it is decoded.
pub(crate) trait Sink {
    /// About `n` events follow (already capped by the bytes left).
    fn reserve(&mut self, n: usize) {
        let _ = n;
    }
    fn event(&mut self, index: u32, event: KvEvent);
}

impl Sink for Vec<KvEvent> {
    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }
    #[inline]
    fn event(&mut self, _index: u32, event: KvEvent) {
        self.push(event);
    }
}

/// Drops every event: the `events` values of a map batch that a later `events` key supersedes.
struct Discard;

impl Sink for Discard {
    fn event(&mut self, _index: u32, _event: KvEvent) {}
}

/// Decodes `payload`, handing each event to `sink` as it is read. On an error the sink may have
/// received the events before it.
pub(crate) fn decode_into<S: Sink>(payload: &[u8], sink: &mut S) -> Result<BatchHeader, DecodeError> {
    let mut c = Cursor::new(payload);
    match batch(&mut c, sink) {
        Ok(header) if c.pos == payload.len() => Ok(header),
        Ok(_) => Err(DecodeError::new(
            c.pos,
            DecodeErrorKind::TrailingBytes,
            format!("{} trailing bytes after the batch", payload.len() - c.pos),
            String::new(),
        )),
        Err(fail) => Err(fail.finish(payload.len())),
    }
}

// ---------------------------------------------------------------------------------------------
// Batch

fn batch<S: Sink>(c: &mut Cursor<'_>, sink: &mut S) -> Result<BatchHeader, Fail> {
    match c.container(&"array [ts, events, dp_rank] or map for the batch")? {
        Container::Array(len) => array_batch(c, sink, len),
        Container::Map(len) => map_batch(c, sink, len),
    }
}

fn array_batch<S: Sink>(c: &mut Cursor<'_>, sink: &mut S, len: usize) -> Result<BatchHeader, Fail> {
    let missing = |what: &str| Fail::at(0, DecodeErrorKind::MissingField, format!("batch array ends before {what}"));
    if len == 0 {
        return Err(missing("ts"));
    }
    let start = c.pos;
    let ts = c.number(&"number for ts").within(start, Seg::Field("ts"))?;
    if len == 1 {
        return Err(missing("events"));
    }
    let start = c.pos;
    let events = events(c, sink).within(start, Seg::Field("events"))?;
    let (dp_rank, layout) = match len {
        2 => (None, BatchLayout::Array2),
        _ => {
            let start = c.pos;
            let rank = c.opt_u32("dp_rank").within(start, Seg::Field("dp_rank"))?;
            // Later releases may append fields; they are not ours to reject, but the layout says
            // they were there.
            for _ in 3..len {
                c.skip(MAX_DEPTH - 1)?;
            }
            (rank, if len == 3 { BatchLayout::Array3 } else { BatchLayout::ArrayLonger { len: len as u32 } })
        }
    };
    Ok(BatchHeader { ts, dp_rank, layout, events })
}

fn map_batch<S: Sink>(c: &mut Cursor<'_>, sink: &mut S, len: usize) -> Result<BatchHeader, Fail> {
    // A duplicated key keeps its last value; for `events` that means only the last one's events
    // reach the sink, so count them first (a walk that builds nothing; map batches are rare).
    let events_keys = count_events_keys(c, len);
    let (mut ts, mut events_seen, mut dp_rank) = (None, 0usize, None);
    let mut count = 0;
    for _ in 0..len {
        let key = c.key()?;
        let start = c.pos;
        match key {
            b"ts" => ts = Some(c.number(&"number for ts").within(start, Seg::Field("ts"))?),
            b"events" => {
                events_seen += 1;
                count = if events_seen >= events_keys {
                    events(c, sink).within(start, Seg::Field("events"))?
                } else {
                    events(c, &mut Discard).within(start, Seg::Field("events"))?
                };
            }
            b"data_parallel_rank" | b"dp_rank" | b"attn_dp_rank" => {
                dp_rank = c.opt_u32("dp_rank").within(start, Seg::Field("dp_rank"))?
            }
            other => {
                Cursor::check_utf8(other)?;
                c.skip(MAX_DEPTH - 1)?;
            }
        }
    }
    let missing = |what: &str| Fail::at(0, DecodeErrorKind::MissingField, format!("batch map has no {what:?} key"));
    let ts = ts.ok_or_else(|| missing("ts"))?;
    if events_seen == 0 {
        return Err(missing("events"));
    }
    Ok(BatchHeader { ts, dp_rank, layout: BatchLayout::Map, events: count })
}

/// How many `events` keys a map batch of `len` entries has (the cursor is left where it was).
/// A malformed map counts what it can; the decode that follows reports the error.
fn count_events_keys(c: &Cursor<'_>, len: usize) -> usize {
    let mut walk = Cursor { buf: c.buf, pos: c.pos };
    let mut n = 0;
    for _ in 0..len {
        let Ok(key) = walk.key() else { break };
        n += usize::from(key == b"events");
        if walk.skip(MAX_DEPTH - 1).is_err() {
            break;
        }
    }
    n
}

fn events<S: Sink>(c: &mut Cursor<'_>, sink: &mut S) -> Result<u32, Fail> {
    let n = c.array(&"array of events")?;
    // An event takes at least two bytes; never trust a length prefix beyond that.
    sink.reserve(n.min((c.buf.len() - c.pos) / 2));
    for i in 0..n {
        let start = c.pos;
        let event = event(c).within(start, Seg::Index(i as u32))?;
        sink.event(i as u32, event);
    }
    Ok(n as u32)
}

// ---------------------------------------------------------------------------------------------
// Events

/// Containers around an event's fields: the batch, `events`, the event.
const EVENT_DEPTH: usize = 3;

fn event(c: &mut Cursor<'_>) -> Result<KvEvent, Fail> {
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
            known => read_field(c, known, &mut fields)?,
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
#[inline]
fn read_field(c: &mut Cursor<'_>, key: Key, fields: &mut Fields) -> Result<(), Fail> {
    let start = c.pos;
    read_value(c, key, fields).within(start, Seg::Field(key.name()))
}

#[inline]
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
        Key::KvCacheSpecSlidingWindow => {
            s.kv_cache_spec_sliding_window = c.opt_u32("kv_cache_spec_sliding_window")?
        }
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

/// A map key, matched against the names this decoder reads as raw bytes: engine maps repeat the
/// same dozen keys in every event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Key {
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
    fn from_bytes(name: &[u8]) -> Key {
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
    fn name(self) -> &'static str {
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

// ---------------------------------------------------------------------------------------------
// Hashes and token ids

#[inline]
fn hashes(c: &mut Cursor<'_>) -> Result<(Hashes, HashReprs), Fail> {
    let n = c.array(&"array of block hashes")?;
    // Each hash takes at least one byte.
    let mut hashes = Hashes::with_capacity(n.min(c.buf.len() - c.pos));
    let mut reprs = HashReprs::default();
    for i in 0..n {
        let start = c.pos;
        let (hash, repr) = c.hash(&"block hash (int or 16/32-byte bin)").within(start, Seg::Index(i as u32))?;
        hashes.push(hash);
        reprs.insert(repr);
    }
    Ok((hashes, reprs))
}

/// Counts `token_ids` with the tight loop of `skip.rs`; the ids themselves are never built.
#[inline]
fn token_ids(c: &mut Cursor<'_>) -> Result<TokenIds, Fail> {
    let start = c.pos;
    if start >= c.buf.len() {
        return Err(Fail::at(start, DecodeErrorKind::Truncated, "unexpected end of input".into()));
    }
    match count_token_ids(c.buf, start) {
        Ok(counted) => {
            c.pos = counted.end;
            Ok(TokenIds {
                count: counted.count,
                is_bigram: counted.is_bigram,
                span: start as u32..counted.end as u32,
                outside_u32: counted.outside_u32,
            })
        }
        Err(err) => {
            let kind = if err.truncated { DecodeErrorKind::Truncated } else { DecodeErrorKind::TypeMismatch };
            let fail = Fail::at(err.offset, kind, err.message);
            Err(match err.item {
                Some(i) => fail.within(err.offset, Seg::Index(i)),
                None => fail,
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cache namespace: extra_keys and SGLang's position-7 map

fn is_array(marker: u8) -> bool {
    matches!(marker, 0x90..=0x9f | 0xdc | 0xdd)
}

fn is_map(marker: u8) -> bool {
    matches!(marker, 0x80..=0x8f | 0xde | 0xdf)
}

fn is_str(marker: u8) -> bool {
    matches!(marker, 0xa0..=0xbf | 0xd9..=0xdb)
}

/// `extra_keys`: per block, nil or a list of keys. Only the first block's string items are kept
/// (that is where vLLM puts the LoRA name and a tagged cache salt). Any other shape is skipped,
/// not rejected: kvscope never depended on this field, and an engine's own changes to it must
/// not cost a batch.
fn extra_keys(c: &mut Cursor<'_>) -> Result<Option<Vec<String>>, Fail> {
    if !is_array(c.peek()?) {
        c.skip(MAX_DEPTH - EVENT_DEPTH)?;
        return Ok(None);
    }
    let blocks = c.array(&"array of per-block extra keys")?;
    if blocks == 0 {
        return Ok(None);
    }
    let first = if is_array(c.peek()?) {
        let items = c.array(&"array of extra keys")?;
        let mut strings = Vec::new();
        for _ in 0..items {
            if is_str(c.peek()?) {
                strings.push(c.str(&"string extra key")?.to_owned());
            } else {
                c.skip(MAX_DEPTH - EVENT_DEPTH - 2)?;
            }
        }
        Some(strings)
    } else {
        c.skip(MAX_DEPTH - EVENT_DEPTH - 1)?;
        None
    };
    for _ in 1..blocks {
        c.skip(MAX_DEPTH - EVENT_DEPTH - 1)?;
    }
    Ok(first)
}

/// Position 7 of an array-encoded `BlockStored`: vLLM's LoRA name (a string or nil), or SGLang's
/// map whose `cache_salt` is the namespace.
fn lora_name_or_salt(c: &mut Cursor<'_>, s: &mut BlockStored) -> Result<(), Fail> {
    if !is_map(c.peek()?) {
        s.lora_name = c.opt_str("lora_name")?;
        return Ok(());
    }
    let len = match c.container(&"map with cache_salt")? {
        Container::Map(len) => len,
        Container::Array(_) => return Err(c.mismatch(&"map with cache_salt")),
    };
    let mut salt = None;
    for _ in 0..len {
        let key = c.key()?;
        if key == b"cache_salt" {
            let start = c.pos;
            salt = c.opt_str("cache_salt").within(start, Seg::Field("cache_salt"))?;
        } else {
            Cursor::check_utf8(key)?;
            c.skip(MAX_DEPTH - EVENT_DEPTH - 1)?;
        }
    }
    s.cache_salt = salt;
    Ok(())
}
