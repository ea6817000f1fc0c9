//! msgpack payload -> events, by a hand-written cursor over the payload slice.
//!
//! One recursive-descent reader accepts both event encodings (tagged arrays and tagged maps) and
//! every hash representation. Keys and tags are compared as raw bytes, strings are kept in inline
//! [`WireStr`](crate::WireStr)s (the ones engines repeat, such as `GPU`, come from constants),
//! `token_ids` is counted by `skip.rs`, and unknown values are skipped without being built: a
//! small event costs a few branches per field and one allocation, its boxed store or removal.
//!
//! Error positions cost nothing until something fails: a reader that fails returns a [`Fail`]
//! without an offset, and each enclosing value adds its start offset (innermost wins) and its
//! path segment on the way up, so the error says `byte 17 ... (events[3].block_hashes[0])`.
//!
//! The reader hands each event to a [`Sink`] as soon as it is decoded; [`decode_batch`] collects
//! them, [`crate::decode_each`] streams them.
//!
//! This module reads the batch around the events; [`mod@event`] reads one event, [`key`] matches
//! map keys, [`values`] reads the fields that are more than one msgpack value.

mod event;
mod key;
mod values;

use crate::cursor::{Container, Cursor, Fail, MAX_DEPTH, Seg, Within};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::event::{BatchHeader, BatchLayout, EventBatch, KvEvent};
use crate::skip::TokenBytes;
use event::event;

/// Room for decode options, empty today: [`decode_batch`] takes none, and every known engine
/// decodes without one (docs/dynamo-1.6.1.md, "Known gaps", names what one would hold).
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

    /// True when the sink keeps the stores' token ids as bytes ([`Sink::token_bytes`]).
    fn wants_token_bytes(&self) -> bool {
        false
    }

    /// The token ids the decode read, after the batch (only when [`Sink::wants_token_bytes`]).
    fn token_bytes(&mut self, bytes: TokenBytes) {
        let _ = bytes;
    }
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
    if sink.wants_token_bytes() {
        c.tokens = Some(Box::default());
    }
    let result = batch(&mut c, sink);
    if let Some(tokens) = c.tokens.take() {
        sink.token_bytes(*tokens);
    }
    match result {
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
            b"data_parallel_rank" | b"dp_rank" | b"attn_dp_rank" => dp_rank = c.opt_u32("dp_rank").within(start, Seg::Field("dp_rank"))?,
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
    let mut walk = Cursor { buf: c.buf, pos: c.pos, tokens: None };
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
