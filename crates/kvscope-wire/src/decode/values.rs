//! Field values that are more than one msgpack read: block hashes, `token_ids` (counted, and
//! written out as bytes only for a decode that keeps them), and the cache namespace
//! (`extra_keys`, SGLang's position-7 map).
//!
//! Each reader is called by [`mod@super::event`] with the cursor at the field's value and leaves it
//! after the value; the field's path segment is added by the caller.

use super::event::EVENT_DEPTH;
use crate::cursor::{Container, Cursor, Fail, MAX_DEPTH, Seg, Within};
use crate::error::DecodeErrorKind;
use crate::event::*;
use crate::skip::{count_token_ids, count_token_ids_le};

// ---------------------------------------------------------------------------------------------
// Hashes and token ids

#[inline]
pub(super) fn hashes(c: &mut Cursor<'_>) -> Result<(Hashes, HashReprs), Fail> {
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

/// Counts `token_ids` with the tight loop of `skip.rs`; the ids themselves are built only into a
/// decode's [`TokenBytes`](crate::skip::TokenBytes), when it keeps them.
#[inline]
pub(super) fn token_ids(c: &mut Cursor<'_>) -> Result<TokenIds, Fail> {
    let start = c.pos;
    if start >= c.buf.len() {
        return Err(Fail::at(start, DecodeErrorKind::Truncated, "unexpected end of input".into()));
    }
    let counted = match c.tokens.as_mut() {
        Some(out) => count_token_ids_le(c.buf, start, out),
        None => count_token_ids(c.buf, start),
    };
    match counted {
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
pub(super) fn extra_keys(c: &mut Cursor<'_>) -> Result<Option<Vec<String>>, Fail> {
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
pub(super) fn lora_name_or_salt(c: &mut Cursor<'_>, s: &mut BlockStored) -> Result<(), Fail> {
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
