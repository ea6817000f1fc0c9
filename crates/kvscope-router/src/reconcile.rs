//! Reconciliation: what the relay should have published (predicted from the engine stream)
//! against what the event plane delivered, per source, with counts and the first differences.
//!
//! A [`Reconciler`] is fed in receive order, in any interleaving: engine batches per source
//! ([`Reconciler::push_engine`]) and decoded envelopes ([`Reconciler::push_envelope`]). The
//! plane may run ahead of or behind the engine stream, so both sides queue per source until
//! they can be aligned; each queue is bounded ([`ReconcilerConfig::max_pending`]), and what
//! overflows is counted (`overflowed_expected`, `overflowed_received`), never dropped silently.
//!
//! # Alignment
//!
//! Events are aligned per `(worker_id, dp_rank)`, the key the router itself files them under:
//! a prediction by the rank its RouterEvent carries (a batch that names another rank than its
//! socket's is the router's event for that rank), a reception by its own. Each key is a lane,
//! owned by the engine source at that key, or else by the first source whose predictions name
//! it; a source's counts are those of the lanes it owns.
//!
//! Within a lane, each engine source predicting under its key has a stream of its own, and each
//! publisher is bound to one stream: the first whose next predictions (up to `BIND_REACH`, 64)
//! hold one of the publisher's parked events, an unbound engine first (a clear is no evidence:
//! every relay sends the same). Receptions parked before that match are a relay's messages for
//! batches before a late-joining reader's window when the engine stream began past seq 0
//! (`before_window`, not compared), else unexpected; predictions before that match are for
//! messages sent before kvscope subscribed to the plane when the publisher was first heard past
//! its sequence 0 (`before_plane_window`, not compared), else missing. Usually a key has one engine,
//! and its relay binds at its first event. Several engines share a key when DP ranks' batches carry no rank (Dynamo's relay files
//! them all under rank 0): their relays' messages interleave on the plane in any order, and are
//! still each aligned with their own engine. A publisher with no match in `BIND_REACH` events
//! (or at [`Reconciler::finish`]) is bound to an engine no publisher has, else the first.
//!
//! Per stream the relay publishes in engine order, so the expected queue `E` and the received
//! queue `R` are aligned front to front:
//!
//! 1. `E[0] == R[0]` (every compared field equal): `matched`, both popped.
//! 2. Otherwise the first exact pair `E[i] == R[j]` within the lookahead (`i, j <=`
//!    [`ReconcilerConfig::lookahead`], smallest `i + j` first) explains the fronts: `E[..i]` and
//!    `R[..j]` are paired position by position as `mismatched`, the rest of the longer side is
//!    `missing` (expected, never arrived: a later match passed it) or `unexpected` (arrived,
//!    never predicted). One lost message, one duplicate, one altered event each cost one count.
//! 3. No exact pair in reach: if both queues hold more than the lookahead (or at
//!    [`Reconciler::finish`]), `E[0]` and `R[0]` are taken as one event that differs
//!    (`mismatched`, with the fields that differ); otherwise wait for more input.
//!
//! At [`Reconciler::finish`] what is left is `missing` and `unexpected`. RouterEvents naming a
//! `(worker_id, dp_rank)` that no source has (and no prediction named) wait in a lane of their
//! own, in case the engine stream is behind, and are counted per pair in
//! [`RouterReport::unknown_workers`] (and in the totals' `received` and `unexpected`); at most
//! [`MAX_UNOWNED_LANES`] such pairs are kept, the rest only counted.
//! `event_id` and `residency_domain` are not compared beyond [`MismatchField::Other`]'s
//! `residency_domain` and `start_position`: the event id is the relay's own counter.
//!
//! Per publisher: messages, the first sequence heard (past 0 when kvscope subscribed after the
//! relay had published: [`subscribed_late`]), gaps on `sequence` after it (a return to 0 is a
//! restart, a repeat or a step back is `out_of_order`), decode errors.

use std::collections::{BTreeMap, VecDeque};

use kvscope_normalize::VerdictLabel;
use kvscope_wire::{DecodeError, Decoded};
use serde::{Deserialize, Serialize};

use crate::error::PlaneError;
use crate::event::{EventData, RouterEvent, decode_router_events};
use crate::plane::{Envelope, decode_envelope, split_zmq_plane};
use crate::predict::{EngineEventRef, Predicted, Predictor, RelayConfig, RelayMark, TokensHashes};

/// Bounds and reach of a [`Reconciler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconcilerConfig {
    /// Pending predictions, and pending receptions, kept per source before the oldest is
    /// given up (counted as overflowed).
    pub max_pending: usize,
    /// How far ahead alignment looks for an exact pair (see the module docs).
    pub lookahead: usize,
    /// Differences kept per source for the UI (the first ones).
    pub details_kept: usize,
    /// This reader's part of the fleet (`--shard`): RouterEvents of another shard's workers
    /// are counted as such ([`RouterReport::other_shard_events`]), not as unknown workers.
    pub shard: crate::Shard,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig { max_pending: 4096, lookahead: 4, details_kept: 16, shard: crate::Shard::ALL }
    }
}

/// Index of a source in a [`Reconciler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouterSourceId(pub u32);

/// Which field of a RouterEvent differed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchField {
    /// `storage_tier`.
    Tier,
    /// The event kind, or the block hashes (stored blocks' `block_hash`es, removed hashes).
    Blocks,
    /// A store's `parent_hash`.
    Parent,
    /// A block's `tokens_hash` (block hashes equal).
    TokensHash,
    /// `residency_domain` or `start_position`.
    Other,
}

impl MismatchField {
    pub const ALL: [MismatchField; 5] =
        [MismatchField::Tier, MismatchField::Blocks, MismatchField::Parent, MismatchField::TokensHash, MismatchField::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            MismatchField::Tier => "tier",
            MismatchField::Blocks => "blocks",
            MismatchField::Parent => "parent",
            MismatchField::TokensHash => "tokens_hash",
            MismatchField::Other => "other",
        }
    }
}

/// The fields in which a received event differs from the predicted one (empty when equal).
pub fn differing_fields(expected: &RouterEvent, received: &RouterEvent) -> Vec<MismatchField> {
    let mut out = Vec::new();
    for_each_difference(expected, received, |f| out.push(f));
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether a received event is the predicted one (no field differs), without collecting.
fn is_exact(expected: &RouterEvent, received: &RouterEvent) -> bool {
    let mut exact = true;
    for_each_difference(expected, received, |_| exact = false);
    exact
}

/// Calls `differs` with each field in which `received` differs from `expected` (a field may
/// come twice): the one comparison both [`differing_fields`] and [`is_exact`] read.
fn for_each_difference(expected: &RouterEvent, received: &RouterEvent, mut differs: impl FnMut(MismatchField)) {
    if expected.storage_tier != received.storage_tier {
        differs(MismatchField::Tier);
    }
    match (&expected.event.data, &received.event.data) {
        (EventData::Stored(a), EventData::Stored(b)) => {
            if !a.blocks.iter().map(|x| x.block_hash).eq(b.blocks.iter().map(|y| y.block_hash)) {
                differs(MismatchField::Blocks);
            } else if a.blocks.iter().zip(&b.blocks).any(|(x, y)| x.tokens_hash != y.tokens_hash) {
                differs(MismatchField::TokensHash);
            }
            if a.parent_hash != b.parent_hash {
                differs(MismatchField::Parent);
            }
            if a.start_position != b.start_position {
                differs(MismatchField::Other);
            }
        }
        (EventData::Removed(a), EventData::Removed(b)) => {
            if a.block_hashes != b.block_hashes {
                differs(MismatchField::Blocks);
            }
        }
        (EventData::Cleared, EventData::Cleared) => {}
        _ => differs(MismatchField::Blocks),
    }
    if expected.residency_domain != received.residency_domain {
        differs(MismatchField::Other);
    }
}

/// Mismatches per field (one mismatched event may count under several).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MismatchCounts {
    pub tier: u64,
    pub blocks: u64,
    pub parent: u64,
    pub tokens_hash: u64,
    pub other: u64,
}

impl MismatchCounts {
    fn add(&mut self, field: MismatchField, n: u64) {
        match field {
            MismatchField::Tier => self.tier += n,
            MismatchField::Blocks => self.blocks += n,
            MismatchField::Parent => self.parent += n,
            MismatchField::TokensHash => self.tokens_hash += n,
            MismatchField::Other => self.other += n,
        }
    }

    fn merge(&mut self, o: &MismatchCounts) {
        self.tier += o.tier;
        self.blocks += o.blocks;
        self.parent += o.parent;
        self.tokens_hash += o.tokens_hash;
        self.other += o.other;
    }
}

/// A source's router-side counts: the `"router"` object of `kvscope check --json`.
///
/// `expected` = `matched + mismatched + missing + before_plane_window` (+ pending and
/// overflowed ones) and `received` = `matched + mismatched + unexpected + before_window` (+
/// pending and overflowed ones). Anything but `matched` and the two windows non-zero means the
/// router's view of this engine differs from what its relay should have published under the
/// policy: look at the source's differences.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterCounts {
    /// Engine batches predicted.
    pub engine_batches: u64,
    /// Engine payloads kvscope could not decode (no prediction made for them).
    pub engine_decode_errors: u64,
    /// RouterEvents the relay should have published.
    pub expected: u64,
    /// RouterEvents that arrived for this source.
    pub received: u64,
    /// Arrived as predicted.
    pub matched: u64,
    /// Predicted, never arrived (a later match passed them, or `finish()`).
    pub missing: u64,
    /// Arrived, never predicted.
    pub unexpected: u64,
    /// Arrived for engine batches before this reader's window: its engine stream began past seq
    /// 0 (a page that joined late, a history that had evicted the start), and a relay's
    /// messages for the batches before it came first. Nothing was predicted for them, so they
    /// are not compared, and not a difference.
    pub before_window: u64,
    /// Predicted for messages the relay published before kvscope's subscription to the plane
    /// began: the first message kvscope received from the stream's relay had a sequence past 0
    /// (a server started while the fleet runs, its event-plane connection made after its engine
    /// sockets'), and these predictions come before it. Never receivable, so not compared, and
    /// not a difference.
    pub before_plane_window: u64,
    /// Arrived in place of a prediction but different; which fields in `mismatched_fields`.
    pub mismatched: u64,
    pub mismatched_fields: MismatchCounts,
    /// Engine events the policy drops (publishes nothing for), by the rule's label.
    pub dropped_by_policy: BTreeMap<VerdictLabel, u64>,
    /// Engine events the relay coalesced into the RouterEvent of an earlier event of their
    /// batch (counted once, in `expected`, with it).
    pub coalesced: u64,
    /// Removals the relay held back: every hash they named is still stored by another copy,
    /// as the relay counts (or they named none).
    pub held_back: u64,
    /// Predictions still waiting for the plane (report before `finish()`).
    pub pending_expected: u64,
    /// Receptions still waiting for the engine stream.
    pub pending_received: u64,
    /// Predictions given up unaligned because `max_pending` was reached; raise the bound if
    /// the plane lags the engine stream by more.
    pub overflowed_expected: u64,
    /// Receptions given up unaligned because `max_pending` was reached.
    pub overflowed_received: u64,
    /// Envelopes that did not decode, from the publishers that delivered this source's
    /// RouterEvents (what the source may have lost on the plane side).
    pub plane_decode_errors: u64,
}

impl RouterCounts {
    /// The alignment's counts by the names `/metrics` (`kvscope_router_events_total{count}`),
    /// `check --json` and the page's router row all use, in that order.
    pub fn alignment(&self) -> [(&'static str, u64); 8] {
        [
            ("expected", self.expected),
            ("received", self.received),
            ("matched", self.matched),
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("mismatched", self.mismatched),
            ("before_window", self.before_window),
            ("before_plane_window", self.before_plane_window),
        ]
    }

    /// "dropped by the relay: unknown_medium 3, …, held back 2": what the relay publishes
    /// nothing for, by rule, and the removals it holds back; `None` when it dropped nothing.
    /// `number` formats a count (the page groups digits, the CLI does not).
    pub fn dropped_by_relay(&self, number: impl Fn(u64) -> String) -> Option<String> {
        let mut parts: Vec<String> = self.dropped_by_policy.iter().map(|(l, n)| format!("{} {}", l.as_str(), number(*n))).collect();
        if self.held_back > 0 {
            parts.push(format!("held back {}", number(self.held_back)));
        }
        (!parts.is_empty()).then(|| format!("dropped by the relay: {}", parts.join(", ")))
    }

    /// Adds `other` to these counts (for totals).
    pub fn merge(&mut self, o: &RouterCounts) {
        self.engine_batches += o.engine_batches;
        self.engine_decode_errors += o.engine_decode_errors;
        self.expected += o.expected;
        self.received += o.received;
        self.matched += o.matched;
        self.missing += o.missing;
        self.unexpected += o.unexpected;
        self.before_window += o.before_window;
        self.before_plane_window += o.before_plane_window;
        self.mismatched += o.mismatched;
        self.mismatched_fields.merge(&o.mismatched_fields);
        for (label, n) in &o.dropped_by_policy {
            *self.dropped_by_policy.entry(*label).or_default() += n;
        }
        self.coalesced += o.coalesced;
        self.held_back += o.held_back;
        self.pending_expected += o.pending_expected;
        self.pending_received += o.pending_received;
        self.overflowed_expected += o.overflowed_expected;
        self.overflowed_received += o.overflowed_received;
        self.plane_decode_errors += o.plane_decode_errors;
    }

    /// The one rule for a source's router view: clean when nothing is missing, unexpected or
    /// mismatched (overflowed counts as unaligned, so as either) and neither side had a
    /// decode error: not the engine stream, nor a publisher that delivered its events. Events
    /// for unknown workers make the fleet's view unclean ([`RouterReport::is_clean`]), not any
    /// one source's.
    pub fn is_clean(&self) -> bool {
        self.missing == 0
            && self.unexpected == 0
            && self.mismatched == 0
            && self.overflowed_expected == 0
            && self.overflowed_received == 0
            && self.engine_decode_errors == 0
            && self.plane_decode_errors == 0
    }
}

/// Where a received RouterEvent came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PlaneEventRef {
    pub publisher_id: u64,
    pub sequence: u64,
    /// Position in the envelope's RouterEvent array.
    pub index: u32,
}

/// What kind of difference a [`Difference`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    Missing,
    Unexpected,
    Mismatched,
    OverflowedExpected,
    OverflowedReceived,
}

/// One difference, for the UI: "engine event X should have become RouterEvent Y; Z arrived".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub kind: DifferenceKind,
    /// The fields that differ (mismatches only).
    pub fields: Vec<MismatchField>,
    pub origin: Option<EngineEventRef>,
    pub expected: Option<RouterEvent>,
    pub received_at: Option<PlaneEventRef>,
    pub received: Option<RouterEvent>,
}

/// One source in a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceReport {
    /// The kvscope source's name (`w0:1`, or the worker id in decimal).
    pub source: String,
    pub worker_id: u64,
    pub dp_rank: u32,
    pub router: RouterCounts,
    /// The first differences ([`ReconcilerConfig::details_kept`]).
    pub differences: Vec<Difference>,
}

/// One event-plane publisher's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PublisherCounts {
    pub publisher_id: u64,
    /// Envelopes received.
    pub messages: u64,
    /// The first `sequence` heard: past 0, kvscope subscribed after the publisher had sent that
    /// many messages ([`subscribed_late`]), which is neither a gap nor a loss.
    pub first_sequence: Option<u64>,
    /// Jumps forward in `sequence` after the first message heard.
    pub gaps: u64,
    /// Messages the gaps skipped.
    pub missed_messages: u64,
    /// Returns to sequence 0: the publisher restarted.
    pub restarts: u64,
    /// A sequence at or below the last one, other than 0.
    pub out_of_order: u64,
    /// Envelopes whose payload did not decode (or, on the ZMQ plane, whose frames named this
    /// publisher and whose envelope did not decode).
    pub decode_errors: u64,
    /// The last sequence seen.
    pub last_sequence: Option<u64>,
}

/// RouterEvents for a `(worker_id, dp_rank)` no source has.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownWorker {
    pub worker_id: u64,
    pub dp_rank: u32,
    pub events: u64,
}

/// Several engine sources whose events the router files under one `(worker_id, dp_rank)`: it
/// holds all their blocks as that one rank's. With Dynamo 1.6.1 this is what a DP deployment
/// whose batches name no rank (SGLang 0.5.23) looks like: the relay files a batch without a
/// rank under rank 0, so every rank's blocks land on rank 0. A finding, not an error: each
/// relay may still publish exactly what it should.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedKey {
    pub worker_id: u64,
    pub dp_rank: u32,
    /// The engine sources, in the order their events first reached the key.
    pub sources: Vec<String>,
}

impl SharedKey {
    /// Sources named in a sentence before "…".
    const NAMED: usize = 4;

    /// The finding in one sentence.
    pub fn sentence(&self) -> String {
        let mut names = self.sources.iter().take(Self::NAMED).cloned().collect::<Vec<_>>().join(", ");
        if self.sources.len() > Self::NAMED {
            names.push_str(&format!(" and {} more", self.sources.len() - Self::NAMED));
        }
        let why = if self.dp_rank == 0 { " (the relay files a batch that names no DP rank under rank 0)" } else { "" };
        format!(
            "{} engines ({names}) share one router key, worker {} rank {}: the router holds all their blocks as that one rank's{why}",
            self.sources.len(),
            self.worker_id,
            self.dp_rank
        )
    }

    /// The findings as lines: the first `listed` keys' sentences, then one line for the rest.
    pub fn lines(keys: &[SharedKey], listed: usize) -> Vec<String> {
        let mut out: Vec<String> = keys.iter().take(listed).map(SharedKey::sentence).collect();
        if keys.len() > listed {
            let rest = &keys[listed..];
            let engines: usize = rest.iter().map(|k| k.sources.len()).sum();
            out.push(format!("and {} more router keys shared the same way, by {engines} engines", rest.len()));
        }
        out
    }
}

/// Everything a [`Reconciler`] counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RouterReport {
    /// The policy the predictions follow.
    pub policy: String,
    pub sources: Vec<SourceReport>,
    /// Every source's counts summed, plus the unknown workers' events as received and
    /// unexpected.
    pub totals: RouterCounts,
    pub publishers: Vec<PublisherCounts>,
    pub unknown_workers: Vec<UnknownWorker>,
    /// RouterEvents of workers that another shard reads (`--shard`): on a shared plane every
    /// shard sees them; they are neither received nor unexpected here.
    pub other_shard_events: u64,
    /// Messages whose envelope did not decode and that named no publisher.
    pub unattributed_decode_errors: u64,
    /// The first few plane decode errors, in words.
    pub first_errors: Vec<String>,
    /// Keys under which the router files several engine sources' events, by key.
    pub shared_keys: Vec<SharedKey>,
}

impl RouterReport {
    /// The fleet's router view is clean when every source's is ([`RouterCounts::is_clean`]),
    /// no RouterEvent named an unknown worker, and no plane message failed to decode.
    pub fn is_clean(&self) -> bool {
        self.sources.iter().all(|s| s.router.is_clean())
            && self.unknown_workers.is_empty()
            && self.unattributed_decode_errors == 0
            && self.publishers.iter().all(|p| p.decode_errors == 0)
    }
}

const FIRST_ERRORS_KEPT: usize = 8;

/// Keys no source has that are kept as lanes, waiting for a prediction; beyond them, unknown
/// workers' events are only counted.
pub const MAX_UNOWNED_LANES: usize = 256;

#[derive(Clone, Debug)]
struct Expected {
    origin: EngineEventRef,
    event: RouterEvent,
}

#[derive(Clone, Debug)]
struct Received {
    at: PlaneEventRef,
    event: RouterEvent,
}

impl Expected {
    /// A difference with no reception.
    fn difference(self, kind: DifferenceKind) -> Difference {
        Difference { kind, fields: Vec::new(), origin: Some(self.origin), expected: Some(self.event), received_at: None, received: None }
    }
}

impl Received {
    /// A difference with no prediction.
    fn difference(self, kind: DifferenceKind) -> Difference {
        Difference { kind, fields: Vec::new(), origin: None, expected: None, received_at: Some(self.at), received: Some(self.event) }
    }
}

/// An engine source: its relay's prediction and the counts that are its own (batches, decode
/// errors, drops); alignment counts live in its lanes.
#[derive(Clone, Debug)]
struct Source {
    name: String,
    predictor: Predictor,
    counts: RouterCounts,
    /// The seq of the first engine batch this reader got: past 0, it joined the stream late.
    first_seq: Option<u64>,
}

impl Source {
    fn key(&self) -> (u64, u32) {
        let c = self.predictor.config();
        (c.worker_id, c.dp_rank)
    }
}

/// One `(worker_id, dp_rank)` as the router files it: predictions and receptions aligned.
///
/// Usually one engine's relay publishes under a key. When several do (DP ranks whose batches
/// carry no rank all file under rank 0), each relay still publishes in its own engine's order,
/// but their messages interleave on the plane. So a key aligns per engine ([`Stream`]), and each
/// publisher with the engine its events match ([`Lane::bind`]).
#[derive(Clone, Debug, Default)]
struct Lane {
    /// The source whose counts these are; `None` while no source has or predicted this key
    /// (an unknown worker, so far).
    owner: Option<usize>,
    /// One per engine source predicting under this key, in the order they first did.
    streams: Vec<Stream>,
    /// Receptions of publishers not bound to a stream yet: until one of their first events
    /// matches a prediction (or, failing that, for [`BIND_REACH`] events).
    unbound: Vec<(u64, VecDeque<Received>)>,
    counts: RouterCounts,
    differences: Vec<Difference>,
    /// The publishers that delivered to this lane (their decode errors are its plane side's).
    publishers: Vec<u64>,
}

/// One engine's predictions under a lane's key, and the receptions of the publishers bound to
/// it, aligned front to front (see the module docs).
#[derive(Clone, Debug)]
struct Stream {
    source: usize,
    /// Its engine stream began past seq 0: a relay's first messages may be for batches before it.
    joined_late: bool,
    /// Publishers bound here: its relay's, and the ids it took after restarts.
    publishers: Vec<u64>,
    expected: VecDeque<Expected>,
    received: VecDeque<Received>,
}

/// Publishers remembered per lane: a worker's rank is one relay, a few after restarts.
const PUBLISHERS_PER_LANE: usize = 8;

/// How deep into a stream's predictions a parked reception is looked for (the plane may lag
/// its engine by this many events and still bind by a match), and how many receptions a
/// publisher parks before it binds without one.
const BIND_REACH: usize = 64;

/// Where a lane's alignment counts and differences go.
struct Tally<'a> {
    counts: &'a mut RouterCounts,
    differences: &'a mut Vec<Difference>,
    kept: usize,
}

impl Tally<'_> {
    fn note(&mut self, d: impl FnOnce() -> Difference) {
        if self.differences.len() < self.kept {
            self.differences.push(d());
        }
    }

    fn missing(&mut self, e: Expected) {
        self.counts.missing += 1;
        self.note(|| e.difference(DifferenceKind::Missing));
    }

    fn unexpected(&mut self, r: Received) {
        self.counts.unexpected += 1;
        self.note(|| r.difference(DifferenceKind::Unexpected));
    }

    fn before_window(&mut self, _: Received) {
        self.counts.before_window += 1;
    }

    fn before_plane_window(&mut self, _: Expected) {
        self.counts.before_plane_window += 1;
    }

    fn overflowed_expected(&mut self, e: Expected) {
        self.counts.overflowed_expected += 1;
        self.note(|| e.difference(DifferenceKind::OverflowedExpected));
    }

    fn overflowed_received(&mut self, r: Received) {
        self.counts.overflowed_received += 1;
        self.note(|| r.difference(DifferenceKind::OverflowedReceived));
    }

    fn pair(&mut self, e: Expected, r: Received) {
        let fields = differing_fields(&e.event, &r.event);
        if fields.is_empty() {
            self.counts.matched += 1;
            return;
        }
        self.counts.mismatched += 1;
        for f in &fields {
            self.counts.mismatched_fields.add(*f, 1);
        }
        self.note(|| Difference {
            kind: DifferenceKind::Mismatched,
            fields,
            origin: Some(e.origin),
            expected: Some(e.event),
            received_at: Some(r.at),
            received: Some(r.event),
        });
    }
}

impl Stream {
    /// Aligns what can be aligned (see the module docs); `flush` when no more input comes.
    fn align(&mut self, cfg: &ReconcilerConfig, flush: bool, tally: &mut Tally) {
        loop {
            if self.expected.is_empty() || self.received.is_empty() {
                break;
            }
            let la = cfg.lookahead;
            let best = (0..=2 * la).flat_map(|sum| (0..=sum.min(la)).map(move |i| (i, sum - i))).filter(|&(_, j)| j <= la).find(
                |&(i, j)| match (self.expected.get(i), self.received.get(j)) {
                    (Some(e), Some(r)) => is_exact(&e.event, &r.event),
                    _ => false,
                },
            );
            let (i, j) = match best {
                Some(p) => p,
                None if flush || (self.expected.len() > la && self.received.len() > la) => (1, 1),
                None => break,
            };
            let paired = i.min(j);
            for _ in 0..paired {
                if let (Some(e), Some(r)) = (self.expected.pop_front(), self.received.pop_front()) {
                    tally.pair(e, r);
                }
            }
            for _ in paired..i {
                if let Some(e) = self.expected.pop_front() {
                    tally.missing(e);
                }
            }
            for _ in paired..j {
                if let Some(r) = self.received.pop_front() {
                    tally.unexpected(r);
                }
            }
            // The exact pair itself.
            if best.is_some()
                && let (Some(e), Some(r)) = (self.expected.pop_front(), self.received.pop_front())
            {
                tally.pair(e, r);
            }
        }
        if flush {
            while let Some(e) = self.expected.pop_front() {
                tally.missing(e);
            }
            while let Some(r) = self.received.pop_front() {
                tally.unexpected(r);
            }
        }
        while self.expected.len() > cfg.max_pending {
            if let Some(e) = self.expected.pop_front() {
                tally.overflowed_expected(e);
            }
        }
        while self.received.len() > cfg.max_pending {
            if let Some(r) = self.received.pop_front() {
                tally.overflowed_received(r);
            }
        }
    }

    /// Where the first of `parked`'s events found among this stream's next predictions is: its
    /// place in `parked` and in the predictions. A clear is no evidence: every engine's relay
    /// sends the same one.
    fn first_match(&self, parked: &VecDeque<Received>) -> Option<(usize, usize)> {
        parked.iter().enumerate().filter(|(_, r)| !matches!(r.event.event.data, EventData::Cleared)).find_map(|(j, r)| {
            let i = self.expected.iter().take(BIND_REACH).position(|e| is_exact(&e.event, &r.event))?;
            Some((j, i))
        })
    }
}

impl Lane {
    /// A prediction of engine source `source` (whose stream began past seq 0 if `joined_late`)
    /// under this key.
    fn expect(&mut self, source: usize, joined_late: bool, e: Expected) {
        self.counts.expected += 1;
        let k = match self.streams.iter().position(|s| s.source == source) {
            Some(k) => k,
            None => self.add_stream(source, joined_late),
        };
        self.streams[k].expected.push_back(e);
    }

    fn add_stream(&mut self, source: usize, joined_late: bool) -> usize {
        self.streams.push(Stream { source, joined_late, publishers: Vec::new(), expected: VecDeque::new(), received: VecDeque::new() });
        self.streams.len() - 1
    }

    /// A reception: on its publisher's stream, or parked until it has one.
    fn receive(&mut self, r: Received) {
        self.counts.received += 1;
        let p = r.at.publisher_id;
        if !self.publishers.contains(&p) && self.publishers.len() < PUBLISHERS_PER_LANE {
            self.publishers.push(p);
        }
        match self.streams.iter_mut().find(|s| s.publishers.contains(&p)) {
            Some(s) => s.received.push_back(r),
            None => self.park(r),
        }
    }

    fn park(&mut self, r: Received) {
        let p = r.at.publisher_id;
        match self.unbound.iter_mut().find(|(id, _)| *id == p) {
            Some((_, q)) => q.push_back(r),
            None => self.unbound.push((p, VecDeque::from([r]))),
        }
    }

    /// Aligns what can be aligned (see the module docs); `flush` when no more input comes.
    fn align(&mut self, cfg: &ReconcilerConfig, flush: bool) {
        let Lane { streams, unbound, counts, differences, .. } = self;
        let mut tally = Tally { counts, differences, kept: cfg.details_kept };
        if !unbound.is_empty() && !streams.is_empty() {
            bind(streams, unbound, cfg, flush, &mut tally);
        }
        for s in streams.iter_mut() {
            s.align(cfg, flush, &mut tally);
        }
        for (_, q) in unbound.iter_mut() {
            while q.len() > cfg.max_pending || (flush && !q.is_empty()) {
                match q.pop_front() {
                    Some(r) if flush => tally.unexpected(r),
                    Some(r) => tally.overflowed_received(r),
                    None => break,
                }
            }
        }
        if flush {
            unbound.clear();
        }
    }

    /// Predictions and receptions not aligned yet.
    fn pending(&self) -> (u64, u64) {
        let expected = self.streams.iter().map(|s| s.expected.len()).sum::<usize>();
        let received =
            self.streams.iter().map(|s| s.received.len()).sum::<usize>() + self.unbound.iter().map(|(_, q)| q.len()).sum::<usize>();
        (expected as u64, received as u64)
    }
}

/// Whether a publisher first heard at `first_sequence` had published before kvscope subscribed
/// to the plane: Dynamo's relay numbers its envelopes from 0, and its plane has no replay. The
/// publisher's counts then take it as their start (no gap), and the predictions before its
/// first match are `before_plane_window`.
pub const fn subscribed_late(first_sequence: u64) -> bool {
    first_sequence > 0
}

/// Binds a lane's parked publishers to its streams: each to the engine whose next predictions
/// hold one of its parked events, an engine no publisher has yet first (a restarted relay's new
/// id goes to its own engine, which has its old one). Every parked event is looked for, not
/// only the first few: a page that joins late, or a server started while the fleet runs,
/// receives a relay's messages for engine batches that came before its window, and they match
/// nothing. What came before the match is aligned at once: receptions as before the window when
/// they are the first a stream that began past seq 0 is bound to (else as unexpected), and
/// predictions as missing, when it is more than the lookahead would pair. One that matches
/// none in [`BIND_REACH`] events, or at the end, goes to an engine no publisher has, else the
/// first: its events are then aligned as differences, as they are.
fn bind(streams: &mut [Stream], unbound: &mut Vec<(u64, VecDeque<Received>)>, cfg: &ReconcilerConfig, flush: bool, tally: &mut Tally) {
    let la = cfg.lookahead;
    let mut i = 0;
    while i < unbound.len() {
        let parked = &unbound[i].1;
        let unclaimed = |s: &Stream| s.publishers.is_empty();
        let first = |claimed: bool| {
            streams.iter().enumerate().filter(|(_, s)| claimed || unclaimed(s)).find_map(|(k, s)| Some((k, s.first_match(parked)?)))
        };
        let target = match first(false).or_else(|| first(true)) {
            Some((k, at)) => Some((k, Some(at))),
            None if flush || parked.len() > BIND_REACH => Some((streams.iter().position(unclaimed).unwrap_or(0), None)),
            None => None,
        };
        let Some((k, at)) = target else {
            i += 1;
            continue;
        };
        let (p, mut q) = unbound.remove(i);
        let s = &mut streams[k];
        // The stream's first publisher, its engine stream begun late: what the relay sent before
        // the match is for batches before the window (a restarted relay's new id is not first).
        let before_window = s.joined_late && s.publishers.is_empty();
        // The stream's first publisher, first heard past its sequence 0: kvscope subscribed to
        // the plane after the relay had published, and predictions before the match are for
        // messages sent before that.
        let before_plane_window = s.publishers.is_empty() && q.front().is_some_and(|r| subscribed_late(r.at.sequence));
        if let Some((j, e)) = at
            && (before_window || before_plane_window || j > la || e > la)
        {
            for r in q.drain(..j) {
                if before_window { tally.before_window(r) } else { tally.unexpected(r) }
            }
            // Predictions another publisher's receptions still wait for are theirs to align.
            if s.received.is_empty() {
                for x in s.expected.drain(..e) {
                    if before_plane_window { tally.before_plane_window(x) } else { tally.missing(x) }
                }
            }
        }
        s.publishers.push(p);
        s.received.extend(q);
    }
}

/// Aligns predicted and received RouterEvents per source (see the module docs).
#[derive(Clone, Debug)]
pub struct Reconciler {
    config: ReconcilerConfig,
    sources: Vec<Source>,
    lanes: BTreeMap<(u64, u32), Lane>,
    publishers: BTreeMap<u64, PublisherCounts>,
    unknown: BTreeMap<(u64, u32), u64>,
    other_shard: u64,
    unattributed_decode_errors: u64,
    first_errors: Vec<String>,
    policy: String,
}

impl Reconciler {
    pub fn new(config: ReconcilerConfig) -> Reconciler {
        Reconciler {
            config,
            sources: Vec::new(),
            lanes: BTreeMap::new(),
            publishers: BTreeMap::new(),
            unknown: BTreeMap::new(),
            other_shard: 0,
            unattributed_decode_errors: 0,
            first_errors: Vec::new(),
            policy: String::new(),
        }
    }

    /// Adds an engine source whose relay runs with `relay`; `name` is the kvscope source's
    /// name. A second source with the same `(worker_id, dp_rank)` returns the first one's id.
    pub fn add_source(&mut self, name: &str, relay: RelayConfig) -> RouterSourceId {
        if let Some(i) = self.sources.iter().position(|s| s.key() == (relay.worker_id, relay.dp_rank)) {
            return RouterSourceId(i as u32);
        }
        if self.policy.is_empty() {
            self.policy = relay.policy.name.to_owned();
        } else if self.policy != relay.policy.name && !self.policy.contains(relay.policy.name) {
            self.policy = format!("{},{}", self.policy, relay.policy.name);
        }
        let index = self.sources.len();
        self.sources.push(Source {
            name: name.to_owned(),
            predictor: Predictor::new(relay),
            counts: RouterCounts::default(),
            first_seq: None,
        });
        let lane = self.lanes.entry((relay.worker_id, relay.dp_rank)).or_default();
        // A lane that received events before its source was added (or that another source's
        // predictions opened) is this source's from now on.
        lane.owner = Some(index);
        RouterSourceId(index as u32)
    }

    /// The source a `(worker_id, dp_rank)` belongs to.
    pub fn find_source(&self, worker_id: u64, dp_rank: u32) -> Option<RouterSourceId> {
        self.lanes.get(&(worker_id, dp_rank))?.owner.map(|i| RouterSourceId(i as u32))
    }

    /// Feeds one engine batch of a source (published under `seq`) and returns what the relay
    /// does with each of its events but those a rule skips (those are counted by label, in
    /// `dropped_by_policy`), in batch order; the RouterEvents it publishes go to the lanes.
    /// A payload that does not decode is counted (`engine_decode_errors`) and returned as the
    /// error.
    ///
    /// The batch is predicted as it decodes: a hostile batch of millions of skipped events
    /// costs memory for what the relay publishes, not a prediction and a sentence per event.
    ///
    /// # Panics
    /// If `id` did not come from this reconciler.
    pub fn push_engine(&mut self, id: RouterSourceId, seq: u64, payload: &[u8]) -> Result<Vec<(EngineEventRef, RelayMark)>, DecodeError> {
        self.push_engine_with(id, seq, payload, |_, _| {})
    }

    /// As [`Reconciler::push_engine`], calling `skipped` with the event index and label of
    /// every event a rule skips, in batch order, as it is judged.
    pub fn push_engine_with(
        &mut self,
        id: RouterSourceId,
        seq: u64,
        payload: &[u8],
        skipped: impl FnMut(u32, VerdictLabel),
    ) -> Result<Vec<(EngineEventRef, RelayMark)>, DecodeError> {
        self.push_engine_decoded(id, seq, payload, &Decoded::with_token_bytes(payload), &mut TokensHashes::default(), skipped)
    }

    /// As [`Reconciler::push_engine_with`], with the payload decoded once, and its stores'
    /// tokens hashes computed once, for other consumers too.
    pub fn push_engine_decoded(
        &mut self,
        id: RouterSourceId,
        seq: u64,
        payload: &[u8],
        decoded: &Decoded,
        hashes: &mut TokensHashes,
        mut skipped: impl FnMut(u32, VerdictLabel),
    ) -> Result<Vec<(EngineEventRef, RelayMark)>, DecodeError> {
        let cfg = self.config;
        let index = id.0 as usize;
        let source = &mut self.sources[index];
        let mut predictions = Vec::new();
        let dropped_by_policy = &mut source.counts.dropped_by_policy;
        let batch = source.predictor.predict_decoded(
            seq,
            payload,
            decoded,
            hashes,
            |i, label| {
                *dropped_by_policy.entry(label).or_default() += 1;
                skipped(i, label);
                false
            },
            &mut predictions,
        );
        if let Err(e) = batch {
            source.counts.engine_decode_errors += 1;
            return Err(e);
        }
        source.counts.engine_batches += 1;
        let joined_late = *source.first_seq.get_or_insert(seq) > 0;
        let mut touched = Vec::new();
        let mut marks = Vec::with_capacity(predictions.len());
        for p in predictions {
            marks.push((p.origin, p.outcome.mark()));
            match p.outcome {
                Predicted::Publish(event) => {
                    let key = (event.worker_id, event.event.dp_rank);
                    let lane = self.lanes.entry(key).or_default();
                    lane.owner.get_or_insert(index);
                    lane.expect(index, joined_late, Expected { origin: p.origin, event });
                    if !touched.contains(&key) {
                        touched.push(key);
                    }
                }
                Predicted::Dropped { label, .. } => *source.counts.dropped_by_policy.entry(label).or_default() += 1,
                Predicted::Coalesced { .. } => source.counts.coalesced += 1,
                Predicted::HeldBack => source.counts.held_back += 1,
            }
        }
        for key in touched {
            if let Some(lane) = self.lanes.get_mut(&key) {
                lane.align(&cfg, false);
            }
        }
        Ok(marks)
    }

    /// Feeds one decoded envelope: counts it on its publisher, decodes its RouterEvents and
    /// queues each on its source (or counts it under unknown workers). A payload that does not
    /// decode is counted on the publisher and returned.
    pub fn push_envelope(&mut self, env: &Envelope) -> Result<(), PlaneError> {
        let publisher = self
            .publishers
            .entry(env.publisher_id)
            .or_insert_with(|| PublisherCounts { publisher_id: env.publisher_id, ..PublisherCounts::default() });
        publisher.messages += 1;
        match publisher.last_sequence {
            None => publisher.first_sequence = Some(env.sequence),
            Some(_) if env.sequence == 0 => publisher.restarts += 1,
            Some(last) if env.sequence <= last => publisher.out_of_order += 1,
            Some(last) if env.sequence > last + 1 => {
                publisher.gaps += 1;
                publisher.missed_messages += env.sequence - last - 1;
            }
            _ => {}
        }
        publisher.last_sequence = Some(env.sequence);
        let events = match decode_router_events(&env.payload) {
            Ok(events) => events,
            Err(e) => {
                publisher.decode_errors += 1;
                self.note_error(format!("publisher {} sequence {}: {e}", env.publisher_id, env.sequence));
                return Err(e);
            }
        };
        let cfg = self.config;
        let mut touched = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let key = (event.worker_id, event.event.dp_rank);
            let unowned = self.lanes.values().filter(|l| l.owner.is_none()).count();
            let lane = match self.lanes.get_mut(&key) {
                Some(lane) => lane,
                None if !cfg.shard.takes_id(event.worker_id) => {
                    self.other_shard += 1;
                    continue;
                }
                None if unowned < MAX_UNOWNED_LANES => self.lanes.entry(key).or_default(),
                None => {
                    *self.unknown.entry(key).or_default() += 1;
                    continue;
                }
            };
            let at = PlaneEventRef { publisher_id: env.publisher_id, sequence: env.sequence, index: i as u32 };
            lane.receive(Received { at, event });
            if !touched.contains(&key) {
                touched.push(key);
            }
        }
        for key in touched {
            if let Some(lane) = self.lanes.get_mut(&key) {
                lane.align(&cfg, false);
            }
        }
        Ok(())
    }

    /// Decodes and feeds one NATS message body (an envelope); a decode error is counted.
    pub fn push_plane_message(&mut self, bytes: &[u8]) -> Result<(), PlaneError> {
        match decode_envelope(bytes) {
            Ok(env) => self.push_envelope(&env),
            Err(e) => {
                self.count_unattributed(&e);
                Err(e)
            }
        }
    }

    /// Splits, decodes and feeds one ZMQ-plane message; errors are counted on the publisher
    /// the frames name, when they name one.
    pub fn push_zmq_frames(&mut self, frames: &[&[u8]]) -> Result<(), PlaneError> {
        let message = match split_zmq_plane(frames) {
            Ok(m) => m,
            Err(e) => {
                self.count_unattributed(&e);
                return Err(e);
            }
        };
        match message.decode_envelope() {
            Ok(env) => self.push_envelope(&env),
            Err(e) => {
                let publisher = self
                    .publishers
                    .entry(message.publisher_id)
                    .or_insert_with(|| PublisherCounts { publisher_id: message.publisher_id, ..PublisherCounts::default() });
                publisher.decode_errors += 1;
                self.note_error(format!("publisher {} sequence {}: {e}", message.publisher_id, message.sequence));
                Err(e)
            }
        }
    }

    /// Counts a plane message that could not be attributed to a publisher.
    pub fn count_unattributed(&mut self, e: &PlaneError) {
        self.unattributed_decode_errors += 1;
        self.note_error(e.to_string());
    }

    fn note_error(&mut self, text: String) {
        if self.first_errors.len() < FIRST_ERRORS_KEPT {
            self.first_errors.push(text);
        }
    }

    /// No more input: everything still pending becomes `missing` or `unexpected`.
    pub fn finish(&mut self) {
        let cfg = self.config;
        for lane in self.lanes.values_mut().filter(|l| l.owner.is_some()) {
            lane.align(&cfg, true);
        }
    }

    /// The counts so far (call [`Reconciler::finish`] first for final ones).
    pub fn report(&self) -> RouterReport {
        let kept = self.config.details_kept;
        let mut sources: Vec<SourceReport> = self
            .sources
            .iter()
            .map(|s| {
                let (worker_id, dp_rank) = s.key();
                SourceReport { source: s.name.clone(), worker_id, dp_rank, router: s.counts.clone(), differences: Vec::new() }
            })
            .collect();
        let mut unknown = self.unknown.clone();
        let mut publishers: Vec<Vec<u64>> = vec![Vec::new(); sources.len()];
        let mut shared_keys = Vec::new();
        for (&key, lane) in &self.lanes {
            if lane.streams.len() > 1 {
                shared_keys.push(SharedKey {
                    worker_id: key.0,
                    dp_rank: key.1,
                    sources: lane.streams.iter().map(|s| self.sources[s.source].name.clone()).collect(),
                });
            }
            let Some(owner) = lane.owner else {
                if lane.counts.received > 0 {
                    *unknown.entry(key).or_default() += lane.counts.received;
                }
                continue;
            };
            let report = &mut sources[owner];
            let mut counts = lane.counts.clone();
            (counts.pending_expected, counts.pending_received) = lane.pending();
            report.router.merge(&counts);
            for id in &lane.publishers {
                if !publishers[owner].contains(id) {
                    publishers[owner].push(*id);
                }
            }
            let room = kept.saturating_sub(report.differences.len());
            report.differences.extend(lane.differences.iter().take(room).cloned());
        }
        let mut totals = RouterCounts::default();
        for (s, ids) in sources.iter_mut().zip(&publishers) {
            s.router.plane_decode_errors = ids.iter().filter_map(|id| self.publishers.get(id)).map(|p| p.decode_errors).sum();
            totals.merge(&s.router);
        }
        let unknown_workers: Vec<UnknownWorker> =
            unknown.iter().map(|(&(worker_id, dp_rank), &events)| UnknownWorker { worker_id, dp_rank, events }).collect();
        for u in &unknown_workers {
            totals.received += u.events;
            totals.unexpected += u.events;
        }
        RouterReport {
            policy: self.policy.clone(),
            sources,
            totals,
            publishers: self.publishers.values().cloned().collect(),
            unknown_workers,
            other_shard_events: self.other_shard,
            unattributed_decode_errors: self.unattributed_decode_errors,
            first_errors: self.first_errors.clone(),
            shared_keys,
        }
    }
}
