//! msgpack payload -> [`EventBatch`], through serde and rmp-serde.
//!
//! Every value is read with `deserialize_any` and a visitor of ours, so one code path accepts
//! both event encodings (tagged arrays and tagged maps) and every hash representation. Each
//! nested value is wrapped in [`At`], which remembers where the value started and, if decoding
//! it fails, adds its path segment to the shared [`Ctx`]: the error then says `byte 17 ...
//! (events[3].block_hashes[0])` without any visitor having to know its own position.
//!
//! The reader shares its position through a `Cell`, which lets [`TokenIdsSeed`] walk
//! `token_ids` with a tight loop and jump the reader past it instead of visiting every token
//! through serde (rmp-serde's `ReadReader` reads exactly what it needs and buffers nothing
//! ahead, so moving the shared position between two elements is safe).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, Read};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::{DecodeError, DecodeErrorKind};
use crate::event::*;
use crate::skip::count_token_ids;

/// Deeper than any engine writes; caps what unknown map values may nest.
const MAX_DEPTH: usize = 32;

/// Options for [`decode_batch`]; the defaults suit every known engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeOptions {}

/// Decodes one payload (the third frame of a live message).
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let pos = Cell::new(0);
    let ctx = Ctx { buf: payload, pos: &pos, failure: RefCell::new(None) };
    let mut de = rmp_serde::Deserializer::new(SliceReader { buf: payload, pos: &pos });
    de.set_max_depth(MAX_DEPTH);
    match (BatchSeed { ctx: &ctx }).deserialize(&mut de) {
        Ok(batch) if pos.get() == payload.len() => Ok(batch),
        Ok(_) => Err(DecodeError::new(
            pos.get(),
            DecodeErrorKind::TrailingBytes,
            format!("{} trailing bytes after the batch", payload.len() - pos.get()),
            String::new(),
        )),
        Err(err) => Err(ctx.finish(err)),
    }
}

/// A `Read` over the payload whose position lives in a shared `Cell`.
struct SliceReader<'a> {
    buf: &'a [u8],
    pos: &'a Cell<usize>,
}

impl Read for SliceReader<'_> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let at = self.pos.get();
        let rest = &self.buf[at..];
        let n = rest.len().min(out.len());
        out[..n].copy_from_slice(&rest[..n]);
        self.pos.set(at + n);
        Ok(n)
    }

    #[inline]
    fn read_exact(&mut self, out: &mut [u8]) -> io::Result<()> {
        let at = self.pos.get();
        match self.buf.get(at..at + out.len()) {
            Some(bytes) => {
                out.copy_from_slice(bytes);
                self.pos.set(at + out.len());
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Seg {
    Index(u32),
    Field(&'static str),
}

#[derive(Debug)]
struct Failure {
    offset: usize,
    kind: Option<DecodeErrorKind>,
    message: Option<String>,
    /// Innermost first.
    path: Vec<Seg>,
}

/// Shared by every visitor of one decode: the input, the position, and the first failure.
struct Ctx<'a> {
    buf: &'a [u8],
    pos: &'a Cell<usize>,
    failure: RefCell<Option<Failure>>,
}

impl Ctx<'_> {
    /// Records that the value starting at `offset` failed; the first (innermost) call wins the
    /// offset, every call adds its segment.
    fn fail_at(&self, offset: usize, seg: Seg) {
        let mut failure = self.failure.borrow_mut();
        failure
            .get_or_insert_with(|| Failure { offset, kind: None, message: None, path: Vec::new() })
            .path
            .push(seg);
    }

    /// Builds an error of ours with a known kind; the offset is the enclosing value's start,
    /// unless `offset` names a more precise one.
    fn error<E: de::Error>(&self, kind: DecodeErrorKind, message: String, offset: Option<usize>) -> E {
        let mut failure = self.failure.borrow_mut();
        let failure = failure.get_or_insert_with(|| Failure {
            offset: offset.unwrap_or(usize::MAX),
            kind: None,
            message: None,
            path: Vec::new(),
        });
        failure.kind.get_or_insert(kind);
        if failure.message.is_none() {
            failure.message = Some(message.clone());
        }
        E::custom(message)
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos.get()
    }

    fn finish(&self, err: rmp_serde::decode::Error) -> DecodeError {
        let failure = self.failure.borrow_mut().take();
        let (kind, message) = describe(&err);
        let (offset, kind, message, path) = match failure {
            Some(f) => (
                if f.offset == usize::MAX { 0 } else { f.offset },
                f.kind.unwrap_or(kind),
                f.message.unwrap_or(message),
                f.path,
            ),
            None => (0, kind, message, Vec::new()),
        };
        let mut text = String::new();
        for seg in path.iter().rev() {
            match seg {
                Seg::Index(i) => text.push_str(&format!("[{i}]")),
                Seg::Field(name) if text.is_empty() => text.push_str(name),
                Seg::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
            }
        }
        DecodeError::new(offset.min(self.buf.len()), kind, message, text)
    }
}

/// Turns an rmp-serde error (or serde's own message inside one) into a kind and a sentence
/// of the form "expected X, found Y".
fn describe(err: &rmp_serde::decode::Error) -> (DecodeErrorKind, String) {
    use rmp_serde::decode::Error as E;
    match err {
        E::InvalidMarkerRead(_) | E::InvalidDataRead(_) => {
            (DecodeErrorKind::Truncated, "unexpected end of input".to_owned())
        }
        E::DepthLimitExceeded => (DecodeErrorKind::TooDeep, format!("nesting deeper than {MAX_DEPTH}")),
        E::Utf8Error(_) => (DecodeErrorKind::Malformed, "string is not valid UTF-8".to_owned()),
        E::TypeMismatch(rmp::Marker::Reserved) => (DecodeErrorKind::Malformed, "reserved msgpack marker 0xc1".to_owned()),
        E::TypeMismatch(marker) => (DecodeErrorKind::Malformed, format!("unexpected msgpack marker {marker:?}")),
        E::OutOfRange => (DecodeErrorKind::InvalidValue, "number out of range".to_owned()),
        E::LengthMismatch(n) => (DecodeErrorKind::Malformed, format!("array length mismatch ({n})")),
        E::Uncategorized(msg) => (DecodeErrorKind::Malformed, msg.clone()),
        E::Syntax(msg) => {
            // serde's wording is "invalid type: A, expected B"; ours leads with the expectation.
            if let Some((found, expected)) =
                msg.strip_prefix("invalid type: ").and_then(|rest| rest.split_once(", expected "))
            {
                let found = found.replace("unit value", "nil").replace("sequence", "array").replace("byte array", "bin");
                return (DecodeErrorKind::TypeMismatch, format!("expected {expected}, found {found}"));
            }
            (DecodeErrorKind::InvalidValue, msg.clone())
        }
    }
}

/// Wraps a seed so that a failure inside it records its start offset and path segment.
struct At<'c, S> {
    ctx: &'c Ctx<'c>,
    seg: Seg,
    seed: S,
}

impl<'de, 'c, S: DeserializeSeed<'de>> DeserializeSeed<'de> for At<'c, S> {
    type Value = S::Value;

    #[inline]
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let start = self.ctx.pos.get();
        let result = self.seed.deserialize(d);
        if result.is_err() {
            self.ctx.fail_at(start, self.seg);
        }
        result
    }
}

fn at<'c, S>(ctx: &'c Ctx<'c>, seg: Seg, seed: S) -> At<'c, S> {
    At { ctx, seg, seed }
}

/// Skips a value of no interest.
struct Ignore;

impl<'de> DeserializeSeed<'de> for Ignore {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        <IgnoredAny as de::Deserialize>::deserialize(d).map(|_| ())
    }
}

// ---------------------------------------------------------------------------------------------
// Batch

struct BatchSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for BatchSeed<'_> {
    type Value = EventBatch;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<EventBatch, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BatchSeed<'_> {
    type Value = EventBatch;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array [ts, events, dp_rank] or map for the batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventBatch, A::Error> {
        let ctx = self.ctx;
        let missing = |what: &str| {
            ctx.error(DecodeErrorKind::MissingField, format!("batch array ends before {what}"), Some(0))
        };
        let ts = seq.next_element_seed(at(ctx, Seg::Field("ts"), Timestamp))?.ok_or_else(|| missing("ts"))?;
        let events =
            seq.next_element_seed(at(ctx, Seg::Field("events"), EventsSeed { ctx }))?.ok_or_else(|| missing("events"))?;
        let (dp_rank, mut layout) = match seq.next_element_seed(at(ctx, Seg::Field("dp_rank"), OptU32 { what: "dp_rank" }))? {
            Some(rank) => (rank, BatchLayout::Array3),
            None => (None, BatchLayout::Array2),
        };
        // Later releases may append fields; they are not ours to reject, but the layout says
        // they were there.
        let mut len = 3u32;
        while seq.next_element_seed(Ignore)?.is_some() {
            len = len.saturating_add(1);
            layout = BatchLayout::ArrayLonger { len };
        }
        Ok(EventBatch { ts, events, dp_rank, layout })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventBatch, A::Error> {
        let ctx = self.ctx;
        let (mut ts, mut events, mut dp_rank) = (None, None, None);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key {
                Key::Ts => ts = Some(map.next_value_seed(at(ctx, Seg::Field("ts"), Timestamp))?),
                Key::Events => events = Some(map.next_value_seed(at(ctx, Seg::Field("events"), EventsSeed { ctx }))?),
                Key::DpRank => {
                    dp_rank = map.next_value_seed(at(ctx, Seg::Field("dp_rank"), OptU32 { what: "dp_rank" }))?
                }
                _ => map.next_value_seed(Ignore)?,
            }
        }
        let missing = |what: &str| ctx.error(DecodeErrorKind::MissingField, format!("batch map has no {what:?} key"), Some(0));
        Ok(EventBatch {
            ts: ts.ok_or_else(|| missing("ts"))?,
            events: events.ok_or_else(|| missing("events"))?,
            dp_rank,
            layout: BatchLayout::Map,
        })
    }
}

/// A timestamp: any number, as f64.
struct Timestamp;

impl<'de> DeserializeSeed<'de> for Timestamp {
    type Value = f64;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Timestamp {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("number for ts")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
}

struct EventsSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = Vec<KvEvent>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<KvEvent>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = Vec<KvEvent>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<KvEvent>, A::Error> {
        // An event takes at least two bytes; never trust a length prefix beyond that.
        let cap = seq.size_hint().unwrap_or(0).min(self.ctx.remaining() / 2);
        let mut events = Vec::with_capacity(cap);
        let mut i = 0u32;
        while let Some(event) = seq.next_element_seed(at(self.ctx, Seg::Index(i), EventSeed { ctx: self.ctx }))? {
            events.push(event);
            i += 1;
        }
        Ok(events)
    }
}

// ---------------------------------------------------------------------------------------------
// Events

struct EventSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = KvEvent;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<KvEvent, D::Error> {
        d.deserialize_any(self)
    }
}

/// Every field any event type may carry; the tag decides which ones the event keeps.
#[derive(Default)]
struct Fields {
    block_hashes: Option<(Vec<BlockHash>, HashReprs)>,
    parent_block_hash: Option<(BlockHash, HashReprs)>,
    token_ids: Option<TokenIds>,
    block_size: Option<u32>,
    lora_id: Option<i64>,
    medium: Option<String>,
    lora_name: Option<String>,
    group_idx: Option<u32>,
    kv_cache_spec_kind: Option<String>,
    kv_cache_spec_sliding_window: Option<u32>,
    locality: Option<String>,
    ownership: Option<String>,
    cache_salt: Option<String>,
    extra_key_strings: Option<Vec<String>>,
    session_id: Option<String>,
}

#[derive(Clone, PartialEq, Eq)]
enum Tag {
    Stored,
    Removed,
    Cleared,
    Other(String),
}

fn tag_of(name: &str) -> Tag {
    match name {
        "BlockStored" => Tag::Stored,
        "BlockRemoved" => Tag::Removed,
        "AllBlocksCleared" => Tag::Cleared,
        other => Tag::Other(other.to_owned()),
    }
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
const STORED_MIN_LEN: u32 = 5;
const REMOVED_MIN_LEN: u32 = 2;

impl<'c> EventSeed<'c> {
    /// Reads the value of field `name` into `fields`; unknown names are skipped.
    fn read_field<'de, F>(&self, key: Key, fields: &mut Fields, mut next: F) -> Result<(), F::Error>
    where
        F: FieldReader<'de>,
    {
        let ctx = self.ctx;
        match key {
            Key::BlockHashes => fields.block_hashes = Some(next.read(at(ctx, Seg::Field("block_hashes"), HashesSeed { ctx }))?),
            Key::ParentBlockHash => {
                fields.parent_block_hash = next.read(at(ctx, Seg::Field("parent_block_hash"), OptHash))?
            }
            Key::TokenIds => fields.token_ids = Some(next.read(at(ctx, Seg::Field("token_ids"), TokenIdsSeed { ctx }))?),
            Key::BlockSize => fields.block_size = next.read(at(ctx, Seg::Field("block_size"), OptU32 { what: "block_size" }))?,
            Key::LoraId => fields.lora_id = next.read(at(ctx, Seg::Field("lora_id"), OptI64 { what: "lora_id" }))?,
            Key::Medium => fields.medium = next.read(at(ctx, Seg::Field("medium"), OptString { what: "medium" }))?,
            Key::LoraName => fields.lora_name = next.read(at(ctx, Seg::Field("lora_name"), OptString { what: "lora_name" }))?,
            Key::GroupIdx => fields.group_idx = next.read(at(ctx, Seg::Field("group_idx"), OptU32 { what: "group_idx" }))?,
            Key::KvCacheSpecKind => {
                fields.kv_cache_spec_kind =
                    next.read(at(ctx, Seg::Field("kv_cache_spec_kind"), OptString { what: "kv_cache_spec_kind" }))?
            }
            Key::KvCacheSpecSlidingWindow => {
                fields.kv_cache_spec_sliding_window = next.read(at(
                    ctx,
                    Seg::Field("kv_cache_spec_sliding_window"),
                    OptU32 { what: "kv_cache_spec_sliding_window" },
                ))?
            }
            Key::Locality => fields.locality = next.read(at(ctx, Seg::Field("locality"), OptString { what: "locality" }))?,
            Key::Ownership => fields.ownership = next.read(at(ctx, Seg::Field("ownership"), OptString { what: "ownership" }))?,
            Key::CacheSalt => fields.cache_salt = next.read(at(ctx, Seg::Field("cache_salt"), OptString { what: "cache_salt" }))?,
            Key::SessionId => fields.session_id = next.read(at(ctx, Seg::Field("session_id"), OptString { what: "session_id" }))?,
            Key::ExtraKeys => fields.extra_key_strings = next.read(at(ctx, Seg::Field("extra_keys"), ExtraKeysSeed { ctx }))?,
            Key::LoraNameOrSalt => match next.read(at(ctx, Seg::Field("lora_name"), LoraNameOrSalt { ctx }))? {
                LoraOrSalt::LoraName(name) => fields.lora_name = name,
                LoraOrSalt::Salt(salt) => fields.cache_salt = salt,
            },
            _ => next.read(Ignore)?,
        }
        Ok(())
    }

    fn build<E: de::Error>(&self, tag: Tag, fields: Fields, encoding: EventEncoding, start: usize) -> Result<KvEvent, E> {
        let tag_name = tag.name();
        let missing = |what: &str| {
            self.ctx.error::<E>(
                DecodeErrorKind::MissingField,
                format!("{tag_name} has no {what}"),
                Some(start),
            )
        };
        Ok(match tag {
            Tag::Stored => {
                let (block_hashes, hash_reprs) = fields.block_hashes.ok_or_else(|| missing("block_hashes"))?;
                let mut hash_reprs = hash_reprs;
                if let Some((_, repr)) = fields.parent_block_hash {
                    hash_reprs.insert(repr);
                }
                KvEvent::BlockStored(BlockStored {
                    block_hashes,
                    parent_block_hash: fields.parent_block_hash.map(|(hash, _)| hash),
                    token_ids: fields.token_ids.ok_or_else(|| missing("token_ids"))?,
                    block_size: Some(fields.block_size.ok_or_else(|| missing("block_size"))?),
                    lora_id: fields.lora_id,
                    medium: fields.medium,
                    lora_name: fields.lora_name,
                    group_idx: fields.group_idx,
                    kv_cache_spec_kind: fields.kv_cache_spec_kind,
                    kv_cache_spec_sliding_window: fields.kv_cache_spec_sliding_window,
                    locality: fields.locality,
                    ownership: fields.ownership,
                    cache_salt: fields.cache_salt,
                    extra_key_strings: fields.extra_key_strings,
                    session_id: fields.session_id,
                    hash_reprs,
                    encoding: Some(encoding),
                })
            }
            Tag::Removed => {
                let (block_hashes, hash_reprs) = fields.block_hashes.ok_or_else(|| missing("block_hashes"))?;
                KvEvent::BlockRemoved(BlockRemoved {
                    block_hashes,
                    medium: fields.medium,
                    group_idx: fields.group_idx,
                    kv_cache_spec_kind: fields.kv_cache_spec_kind,
                    kv_cache_spec_sliding_window: fields.kv_cache_spec_sliding_window,
                    locality: fields.locality,
                    ownership: fields.ownership,
                    hash_reprs,
                    encoding: Some(encoding),
                })
            }
            Tag::Cleared => KvEvent::AllBlocksCleared { encoding, ownership: fields.ownership },
            Tag::Other(name) => KvEvent::Unknown(UnknownEvent { tag: name, encoding }),
        })
    }
}

/// Reads the next value of an array or a map the same way.
trait FieldReader<'de> {
    type Error: de::Error;
    fn read<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Self::Error>;
}

struct SeqField<'a, A>(&'a mut A);

impl<'de, A: SeqAccess<'de>> FieldReader<'de> for SeqField<'_, A> {
    type Error = A::Error;
    fn read<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        // The caller checked the length, so the element is there.
        self.0
            .next_element_seed(seed)?
            .ok_or_else(|| de::Error::custom("array ended early"))
    }
}

struct MapField<'a, A>(&'a mut A);

impl<'de, A: MapAccess<'de>> FieldReader<'de> for MapField<'_, A> {
    type Error = A::Error;
    fn read<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(seed)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = KvEvent;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array or map for event")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KvEvent, A::Error> {
        let ctx = self.ctx;
        // The marker and length were read already; the event began before them.
        let len = seq.size_hint().unwrap_or(0) as u32;
        let start = ctx.pos.get().saturating_sub(header_len(len));
        let tag = seq
            .next_element_seed(at(ctx, Seg::Index(0), TagSeed))?
            .ok_or_else(|| ctx.error::<A::Error>(DecodeErrorKind::MissingField, "event array is empty; expected a tag".into(), Some(start)))?;
        let (positions, min_len): (&[Key], u32) = match tag {
            Tag::Stored => (&STORED_POSITIONS, STORED_MIN_LEN),
            Tag::Removed => (&REMOVED_POSITIONS, REMOVED_MIN_LEN),
            Tag::Cleared | Tag::Other(_) => (&[], 1),
        };
        if len < min_len {
            return Err(ctx.error(
                DecodeErrorKind::MissingField,
                format!(
                    "{} array has {len} elements; expected at least {min_len} (tag, {})",
                    tag.name(),
                    positions[..(min_len - 1) as usize].iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
                ),
                Some(start),
            ));
        }
        let mut fields = Fields::default();
        for name in positions.iter().take(len as usize - 1) {
            self.read_field(*name, &mut fields, SeqField(&mut seq))?;
        }
        while seq.next_element_seed(Ignore)?.is_some() {}
        self.build(tag, fields, EventEncoding::Array { len }, start)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KvEvent, A::Error> {
        let ctx = self.ctx;
        let len = map.size_hint().unwrap_or(0) as u32;
        let start = ctx.pos.get().saturating_sub(header_len(len));
        let mut fields = Fields::default();
        let mut tag = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key == Key::Type {
                tag = Some(map.next_value_seed(at(ctx, Seg::Field("type"), TagSeed))?);
            } else {
                self.read_field(key, &mut fields, MapField(&mut map))?;
            }
        }
        let tag = tag.ok_or_else(|| {
            ctx.error::<A::Error>(DecodeErrorKind::MissingField, "event map has no \"type\" key".into(), Some(start))
        })?;
        self.build(tag, fields, EventEncoding::Map, start)
    }
}

/// Bytes taken by an array or map header holding `len` items (fix, 16- or 32-bit length).
fn header_len(len: u32) -> usize {
    match len {
        0..=15 => 1,
        16..=0xffff => 3,
        _ => 5,
    }
}

/// A map key, matched against the names this decoder reads without allocating: engine maps
/// repeat the same dozen keys in every event, and a `String` per key was most of the decode
/// time for small events.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Key {
    Type,
    Ts,
    Events,
    DpRank,
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
    fn from_name(name: &str) -> Key {
        match name {
            "type" => Key::Type,
            "ts" => Key::Ts,
            "events" => Key::Events,
            "data_parallel_rank" | "dp_rank" | "attn_dp_rank" => Key::DpRank,
            "block_hashes" => Key::BlockHashes,
            "parent_block_hash" => Key::ParentBlockHash,
            "token_ids" => Key::TokenIds,
            "block_size" => Key::BlockSize,
            "lora_id" => Key::LoraId,
            "medium" => Key::Medium,
            "lora_name" => Key::LoraName,
            "extra_keys" => Key::ExtraKeys,
            "group_idx" => Key::GroupIdx,
            "kv_cache_spec_kind" => Key::KvCacheSpecKind,
            "kv_cache_spec_sliding_window" => Key::KvCacheSpecSlidingWindow,
            "locality" => Key::Locality,
            "ownership" => Key::Ownership,
            "cache_salt" => Key::CacheSalt,
            "session_id" => Key::SessionId,
            _ => Key::Other,
        }
    }

    /// The field name used in error paths and messages.
    fn name(self) -> &'static str {
        match self {
            Key::Type => "type",
            Key::Ts => "ts",
            Key::Events => "events",
            Key::DpRank => "dp_rank",
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

/// A map key: always a string in engine payloads.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("string map key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key::from_name(v))
    }
}

/// An event tag: a string, allocated only when it is not one of the three known tags.
struct TagSeed;

impl<'de> DeserializeSeed<'de> for TagSeed {
    type Value = Tag;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Tag, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TagSeed {
    type Value = Tag;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("string event tag")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tag, E> {
        Ok(tag_of(v))
    }
}

// ---------------------------------------------------------------------------------------------
// Hashes

struct HashesSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for HashesSeed<'_> {
    type Value = (Vec<BlockHash>, HashReprs);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for HashesSeed<'_> {
    type Value = (Vec<BlockHash>, HashReprs);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array of block hashes")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Each hash takes at least one byte.
        let cap = seq.size_hint().unwrap_or(0).min(self.ctx.remaining());
        let mut hashes = Vec::with_capacity(cap);
        let mut reprs = HashReprs::default();
        let mut i = 0u32;
        while let Some((hash, repr)) = seq.next_element_seed(at(self.ctx, Seg::Index(i), HashSeed))? {
            hashes.push(hash);
            reprs.insert(repr);
            i += 1;
        }
        Ok((hashes, reprs))
    }
}

/// One hash: u64, i64 (bit-cast) or a 16/32-byte bin (its last 8 bytes, big-endian).
struct HashSeed;

impl<'de> DeserializeSeed<'de> for HashSeed {
    type Value = (BlockHash, HashReprs);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for HashSeed {
    type Value = (BlockHash, HashReprs);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("block hash (int or 16/32-byte bin)")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok((BlockHash(v), HashReprs::UNSIGNED))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        let repr = if v < 0 { HashReprs::SIGNED } else { HashReprs::UNSIGNED };
        Ok((BlockHash(v as u64), repr))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        let repr = match v.len() {
            16 => HashReprs::BIN16,
            32 => HashReprs::BIN32,
            n => return Err(E::custom(format!("expected a 16- or 32-byte bin block hash, found {n} bytes"))),
        };
        let tail: [u8; 8] = v[v.len() - 8..].try_into().expect("length checked above");
        Ok((BlockHash(u64::from_be_bytes(tail)), repr))
    }
}

/// A parent hash: a hash or nil.
struct OptHash;

impl<'de> DeserializeSeed<'de> for OptHash {
    type Value = Option<(BlockHash, HashReprs)>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptHash {
    type Value = Option<(BlockHash, HashReprs)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("block hash (int or 16/32-byte bin) or nil")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        HashSeed.visit_u64(v).map(Some)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        HashSeed.visit_i64(v).map(Some)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        HashSeed.visit_bytes(v).map(Some)
    }
}

// ---------------------------------------------------------------------------------------------
// Token ids

/// Counts `token_ids` by walking the raw bytes and moving the shared reader position past them;
/// the deserializer is never asked for the items (see the module docs).
struct TokenIdsSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for TokenIdsSeed<'_> {
    type Value = TokenIds;
    fn deserialize<D: de::Deserializer<'de>>(self, _d: D) -> Result<TokenIds, D::Error> {
        let ctx = self.ctx;
        let start = ctx.pos.get();
        if start >= ctx.buf.len() {
            return Err(ctx.error(DecodeErrorKind::Truncated, "unexpected end of input".into(), Some(start)));
        }
        match count_token_ids(ctx.buf, start) {
            Ok(counted) => {
                ctx.pos.set(counted.end);
                Ok(TokenIds {
                    count: counted.count,
                    is_bigram: counted.is_bigram,
                    span: start as u32..counted.end as u32,
                    outside_u32: counted.outside_u32,
                })
            }
            Err(err) => {
                let kind = if err.truncated { DecodeErrorKind::Truncated } else { DecodeErrorKind::TypeMismatch };
                let e = ctx.error(kind, err.message, Some(err.offset));
                if let Some(i) = err.item {
                    ctx.fail_at(err.offset, Seg::Index(i));
                }
                Err(e)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scalars

/// A non-negative integer that fits u32, or nil.
struct OptU32 {
    what: &'static str,
}

impl<'de> DeserializeSeed<'de> for OptU32 {
    type Value = Option<u32>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<u32>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptU32 {
    type Value = Option<u32>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "u32 or nil for {}", self.what)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u32>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u32>, E> {
        u32::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("expected u32 for {}, found {v}", self.what)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u32>, E> {
        u32::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("expected u32 for {}, found {v}", self.what)))
    }
}

struct OptI64 {
    what: &'static str,
}

impl<'de> DeserializeSeed<'de> for OptI64 {
    type Value = Option<i64>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptI64 {
    type Value = Option<i64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "int or nil for {}", self.what)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<i64>, E> {
        i64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("expected i64 for {}, found {v}", self.what)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<i64>, E> {
        Ok(Some(v))
    }
}

struct OptString {
    what: &'static str,
}

impl<'de> DeserializeSeed<'de> for OptString {
    type Value = Option<String>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptString {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "string or nil for {}", self.what)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(Some(v.to_owned()))
    }
}

// ---------------------------------------------------------------------------------------------
// Cache namespace: extra_keys and SGLang's position-7 map

/// True when the value at the reader's position starts with an array marker. The reader has not
/// read the value's marker yet when a seed is called (see the module docs), so this peeks at it.
fn next_is(ctx: &Ctx<'_>, array: bool) -> bool {
    match ctx.buf.get(ctx.pos.get()) {
        Some(0x90..=0x9f | 0xdc | 0xdd) => array,
        Some(0x80..=0x8f | 0xde | 0xdf) => !array,
        _ => false,
    }
}

/// `extra_keys`: per block, nil or a list of keys. Only the first block's string items are kept
/// (that is where vLLM puts the LoRA name and a tagged cache salt). Any other shape is skipped,
/// not rejected: kvscope never depended on this field, and an engine's own changes to it must
/// not cost a batch.
struct ExtraKeysSeed<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for ExtraKeysSeed<'_> {
    type Value = Option<Vec<String>>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if next_is(self.ctx, true) {
            d.deserialize_any(self)
        } else {
            Ignore.deserialize(d).map(|()| None)
        }
    }
}

impl<'de> Visitor<'de> for ExtraKeysSeed<'_> {
    type Value = Option<Vec<String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array of per-block extra keys")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element_seed(FirstBlockKeys { ctx: self.ctx })?.flatten();
        while seq.next_element_seed(Ignore)?.is_some() {}
        Ok(first)
    }
}

/// The first block's keys: its string items, or `None` when the block is not a list.
struct FirstBlockKeys<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for FirstBlockKeys<'_> {
    type Value = Option<Vec<String>>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if next_is(self.ctx, true) {
            d.deserialize_any(self)
        } else {
            Ignore.deserialize(d).map(|()| None)
        }
    }
}

impl<'de> Visitor<'de> for FirstBlockKeys<'_> {
    type Value = Option<Vec<String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("array of extra keys")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut strings = Vec::new();
        while let Some(item) = seq.next_element_seed(StringItem { ctx: self.ctx })? {
            strings.extend(item);
        }
        Ok(Some(strings))
    }
}

/// A string item, or `None` for an item of any other type (skipped).
struct StringItem<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for StringItem<'_> {
    type Value = Option<String>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.ctx.buf.get(self.ctx.pos.get()) {
            Some(0xa0..=0xbf | 0xd9..=0xdb) => d.deserialize_any(self),
            _ => Ignore.deserialize(d).map(|()| None),
        }
    }
}

impl<'de> Visitor<'de> for StringItem<'_> {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("string extra key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }
}

/// Position 7 of an array-encoded `BlockStored`.
enum LoraOrSalt {
    /// vLLM: the LoRA name, a string or nil.
    LoraName(Option<String>),
    /// SGLang: a map whose `cache_salt` is the namespace (`None` when the map has none).
    Salt(Option<String>),
}

struct LoraNameOrSalt<'c> {
    ctx: &'c Ctx<'c>,
}

impl<'de> DeserializeSeed<'de> for LoraNameOrSalt<'_> {
    type Value = LoraOrSalt;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<LoraOrSalt, D::Error> {
        if next_is(self.ctx, false) {
            d.deserialize_any(self)
        } else {
            OptString { what: "lora_name" }.deserialize(d).map(LoraOrSalt::LoraName)
        }
    }
}

impl<'de> Visitor<'de> for LoraNameOrSalt<'_> {
    type Value = LoraOrSalt;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("map with cache_salt")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LoraOrSalt, A::Error> {
        let mut salt = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key == Key::CacheSalt {
                salt = map.next_value_seed(at(self.ctx, Seg::Field("cache_salt"), OptString { what: "cache_salt" }))?;
            } else {
                map.next_value_seed(Ignore)?;
            }
        }
        Ok(LoraOrSalt::Salt(salt))
    }
}
