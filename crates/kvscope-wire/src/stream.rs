//! Decoding a payload one event at a time, in memory that does not grow with the batch.
//!
//! A server must classify a hostile 12 MB batch of six million two-byte events without holding
//! six million decoded events (and their verdicts). [`decode_each`] hands each event to an
//! [`EventSink`] by reference and drops it; what it holds at once is bounded by
//! [`STREAM_CHUNK`] events, whatever the batch size.
//!
//! A sink sees events only from a payload that decodes completely, as with [`crate::decode_batch`]:
//! a payload that fails at its last byte must not have taught a normalizer anything. So the
//! payload is decoded once, keeping up to [`STREAM_CHUNK`] events (every engine batch fits), and
//! the kept events are handed over once the last byte is read. A bigger batch is decoded a
//! second time to hand its events over: twice the work, but only for batches no engine sends.

use crate::decode::{Sink, decode_into};
use crate::error::DecodeError;
use crate::event::{BatchHeader, KvEvent};
use crate::skip::TokenBytes;

/// Events kept while a payload is checked before they are handed over; a batch with more is
/// decoded twice instead.
pub const STREAM_CHUNK: usize = 256;

/// Receives one payload's events from [`decode_each`].
pub trait EventSink {
    /// Called for every event, in order, while the payload is being checked, before [`begin`]:
    /// a sink that must know whole-batch facts before it judges the first event (a decoder
    /// that rejects the batch for its last event) gathers them here. Called also for a payload
    /// that then fails to decode.
    ///
    /// [`begin`]: EventSink::begin
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        let _ = (index, event);
    }

    /// Called once the whole payload decoded, before the first [`EventSink::event`].
    fn begin(&mut self, header: &BatchHeader) {
        let _ = header;
    }

    /// Called for every event, in order, after [`EventSink::begin`].
    fn event(&mut self, index: u32, event: &KvEvent);
}

/// Every sink of the slice sees every call, in slice order: one decode feeds several consumers
/// (the server classifies each payload under several policies).
impl<S: EventSink> EventSink for [S] {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        self.iter_mut().for_each(|s| s.inspect(index, event));
    }
    fn begin(&mut self, header: &BatchHeader) {
        self.iter_mut().for_each(|s| s.begin(header));
    }
    fn event(&mut self, index: u32, event: &KvEvent) {
        self.iter_mut().for_each(|s| s.event(index, event));
    }
}

impl<S: EventSink + ?Sized> EventSink for &mut S {
    fn inspect(&mut self, index: u32, event: &KvEvent) {
        (**self).inspect(index, event);
    }
    fn begin(&mut self, header: &BatchHeader) {
        (**self).begin(header);
    }
    fn event(&mut self, index: u32, event: &KvEvent) {
        (**self).event(index, event);
    }
}

/// Decodes `payload` and hands its events to `sink` one at a time: [`EventSink::inspect`] for
/// each while checking, then, only if the whole payload decoded, [`EventSink::begin`] with the
/// header and [`EventSink::event`] for each. Returns the header, or the error `decode_batch`
/// would return. Holds at most [`STREAM_CHUNK`] decoded events at once.
pub fn decode_each<S: EventSink + ?Sized>(payload: &[u8], sink: &mut S) -> Result<BatchHeader, DecodeError> {
    let mut check = Check { sink: &mut *sink, keep: Keep::default() };
    let header = decode_into(payload, &mut check)?;
    let Keep { events, overflowed, .. } = check.keep;
    sink.begin(&header);
    if overflowed {
        drop(events);
        decode_into(payload, &mut Deliver { sink })?;
    } else {
        for (i, event) in events.iter().enumerate() {
            sink.event(i as u32, event);
        }
    }
    Ok(header)
}

/// The first pass: inspects every event and keeps the first [`STREAM_CHUNK`]; with more, the
/// payload is decoded again to hand them over.
struct Check<'s, S: ?Sized> {
    sink: &'s mut S,
    keep: Keep,
}

impl<S: EventSink + ?Sized> Sink for Check<'_, S> {
    fn reserve(&mut self, n: usize) {
        self.keep.reserve(n);
    }

    #[inline]
    fn event(&mut self, index: u32, event: KvEvent) {
        self.sink.inspect(index, &event);
        self.keep.event(index, event);
    }
}

/// The second pass of a big batch: hands each event over as it is decoded.
struct Deliver<'s, S: ?Sized> {
    sink: &'s mut S,
}

impl<S: EventSink + ?Sized> Sink for Deliver<'_, S> {
    #[inline]
    fn event(&mut self, index: u32, event: KvEvent) {
        self.sink.event(index, &event);
    }
}

/// One payload decoded once for several consumers that run one after another (the page's engine
/// classifies a frame under two policies, models the router's index and predicts the relay):
/// each [`Decoded::feed`]s its own sink the calls [`decode_each`] would make, without decoding
/// the payload again. On Kimi-K3's long prompts, reading the token ids is most of a decode, and
/// three decodes were three quarters of the engine's time. A payload of more than
/// [`STREAM_CHUNK`] events keeps none, and each feed decodes it, as [`decode_each`] does.
///
/// It holds no borrow of the payload (the engine's frame owns it and is changed in between):
/// each feed is given the same payload again, as the events' spans point into it.
#[derive(Debug)]
pub struct Decoded {
    /// The payload's length, to catch another payload given to [`Decoded::feed`].
    len: usize,
    /// Every event decoded (before the error, for a payload that failed), unless there were
    /// more than [`STREAM_CHUNK`].
    events: Vec<KvEvent>,
    /// `None` when the events did not fit: each feed decodes the payload itself.
    result: Option<Result<BatchHeader, DecodeError>>,
    /// The stores' token ids, for [`Decoded::with_token_bytes`].
    tokens: Option<TokenBytes>,
}

impl Decoded {
    /// Decodes `payload` once.
    pub fn new(payload: &[u8]) -> Decoded {
        Decoded::decode(payload, false)
    }

    /// Decodes `payload` once, keeping its stores' token ids as little-endian bytes
    /// ([`Decoded::token_bytes`]), written by the same walk that counts them: for a consumer that
    /// hashes them next (the router's index model), which then reads no array twice.
    pub fn with_token_bytes(payload: &[u8]) -> Decoded {
        Decoded::decode(payload, true)
    }

    fn decode(payload: &[u8], token_bytes: bool) -> Decoded {
        let mut keep = Keep { token_bytes: token_bytes.then(TokenBytes::default), ..Keep::default() };
        let result = decode_into(payload, &mut keep);
        let result = (!keep.overflowed).then_some(result);
        Decoded { len: payload.len(), events: keep.events, result, tokens: keep.token_bytes }
    }

    /// The token ids kept by [`Decoded::with_token_bytes`] (`None` for [`Decoded::new`]).
    pub fn token_bytes(&self) -> Option<&TokenBytes> {
        self.tokens.as_ref()
    }

    /// Hands `sink` what [`decode_each`] would for `payload`, the one this decoded, in the same
    /// order, and returns what it would.
    pub fn feed<S: EventSink + ?Sized>(&self, payload: &[u8], sink: &mut S) -> Result<BatchHeader, DecodeError> {
        debug_assert_eq!(payload.len(), self.len, "a Decoded is fed the payload it decoded");
        let Some(result) = &self.result else { return decode_each(payload, sink) };
        for (i, event) in self.events.iter().enumerate() {
            sink.inspect(i as u32, event);
        }
        let header = result.clone()?;
        sink.begin(&header);
        for (i, event) in self.events.iter().enumerate() {
            sink.event(i as u32, event);
        }
        Ok(header)
    }

    /// The events it kept, in batch order, for a sink that needs an event again after the
    /// batch (and would otherwise clone each one): `None` when the batch was too big to keep.
    pub fn events(&self) -> Option<&[KvEvent]> {
        self.result.is_some().then_some(self.events.as_slice())
    }

    /// Whether handing it on (to another task, through a queue) saves more than it holds: its
    /// events and the token ids it kept as bytes take at most twice the payload. True for long
    /// prompts (Kimi-K3's token ids, kilobytes an event), where reading the ids is most of a
    /// decode and hashing them reads them again (ids kept as bytes take four each, about 4/3 of
    /// the uint16s most ids are in msgpack); false for small events, which are cheaper to decode
    /// again than to hold a few times their size.
    pub fn worth_handing_on(&self) -> bool {
        self.result.is_some() && self.held_bytes() <= HANDED_ON_PER_PAYLOAD_BYTE * self.len
    }

    /// About the bytes it holds (its events, upper estimate, and the ids kept as bytes), for a
    /// queue's memory bound.
    pub fn held_bytes(&self) -> usize {
        self.events.len() * KEPT_EVENT_BYTES + self.tokens.as_ref().map_or(0, TokenBytes::held_bytes)
    }
}

/// What a decode handed on may hold per byte of its payload ([`Decoded::worth_handing_on`]).
const HANDED_ON_PER_PAYLOAD_BYTE: usize = 2;

/// About what a kept event costs in memory, its boxed store included (an upper estimate: only
/// the few strings and lists a store may carry come on top).
const KEPT_EVENT_BYTES: usize = 512;
const _: () = assert!(std::mem::size_of::<KvEvent>() + std::mem::size_of::<crate::BlockStored>() <= KEPT_EVENT_BYTES);

/// Keeps up to [`STREAM_CHUNK`] events ([`decode_each`]'s first pass, [`Decoded`]); past that,
/// none, and says so.
#[derive(Default)]
struct Keep {
    events: Vec<KvEvent>,
    overflowed: bool,
    /// `Some` when the stores' token ids are kept as bytes.
    token_bytes: Option<TokenBytes>,
}

impl Sink for Keep {
    fn reserve(&mut self, n: usize) {
        self.events.reserve(n.min(STREAM_CHUNK));
    }

    #[inline]
    fn event(&mut self, _: u32, event: KvEvent) {
        if self.overflowed {
            return;
        }
        if self.events.len() < STREAM_CHUNK {
            self.events.push(event);
        } else {
            self.overflowed = true;
            self.events = Vec::new();
        }
    }

    fn wants_token_bytes(&self) -> bool {
        self.token_bytes.is_some()
    }

    fn token_bytes(&mut self, bytes: TokenBytes) {
        self.token_bytes = Some(bytes);
    }
}
