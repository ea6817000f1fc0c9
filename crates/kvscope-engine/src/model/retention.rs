//! Retention, under two bounds: compact per-event records ([`EventRecord`], bounded in count by
//! `Config::retain_events`, 5 million by default) and the frames' raw bytes ([`RetainedFrame`],
//! bounded in bytes by `Config::retain_bytes`). Minutes of a fleet's events fit in the first;
//! the second, which re-classification, the inspector's hex view and downloads need, holds the
//! most recent part. An event whose frame is gone keeps its record: the inspector shows what
//! the record holds and fetches the bytes from the server's history on request.

use kvscope_wire::{EventType, KvEvent};

use super::Model;
use super::classes::ClassCode;
use super::trees::Trees;

/// Bytes a retained frame costs besides its payload and topic.
const FRAME_OVERHEAD_BYTES: usize = 96;

/// What one retained event costs at least: its record and its timeline mark (time, two
/// classes, id); [`MemoryUse::event_bytes`] is what is reserved, fine buckets included.
pub const MIN_BYTES_PER_EVENT: usize = std::mem::size_of::<EventRecord>() + 8 + 2 + 8;

/// Media beyond this many distinct strings share the last id ("another medium").
const MAX_MEDIA: usize = u8::MAX as usize;

/// What a retained frame holds.
#[derive(Clone, Debug)]
pub enum FrameBody {
    /// A well-formed `[topic, seq, payload]` message.
    Message { topic: Vec<u8>, payload: Vec<u8> },
    /// A message that was not shaped like an engine's; its frames as received.
    Malformed { frames: Vec<Vec<u8>>, error: String },
    /// An event-plane message: `[subject, envelope]`, or the frames as recorded.
    Plane { frames: Vec<Vec<u8>> },
    /// Another shard's engine payload, kept by a shard that models an index of the router
    /// ([`super::shard::index_sides`]) so that a re-classification indexes it again; nothing
    /// else reads it.
    IndexOnly { payload: Vec<u8> },
}

/// A frame kept for the inspector, for re-classification and for download.
#[derive(Clone, Debug)]
pub struct RetainedFrame {
    pub id: u64,
    /// Its place in the stream, counting other shards' frames ([`super::Model::position`]).
    pub position: u64,
    pub source: u32,
    pub seq: u64,
    pub recv_time_nanos: u64,
    pub replayed: bool,
    pub body: FrameBody,
    /// Id of its first event; its events are `first_event..first_event + num_events`.
    pub first_event: u64,
    pub num_events: u32,
    /// The decode error, when the payload did not decode.
    pub decode_error: Option<String>,
}

impl RetainedFrame {
    fn cost_bytes(&self) -> usize {
        let body = match &self.body {
            FrameBody::Message { topic, payload } => topic.len() + payload.len(),
            FrameBody::Malformed { frames, error } => frames.iter().map(Vec::len).sum::<usize>() + error.len(),
            FrameBody::Plane { frames } => frames.iter().map(Vec::len).sum::<usize>(),
            FrameBody::IndexOnly { payload } => payload.len(),
        };
        FRAME_OVERHEAD_BYTES + body
    }

    pub fn payload(&self) -> Option<&[u8]> {
        match &self.body {
            FrameBody::Message { payload, .. } => Some(payload),
            FrameBody::Malformed { .. } | FrameBody::Plane { .. } | FrameBody::IndexOnly { .. } => None,
        }
    }
}

/// Where one capture record sits in its file (length prefix included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureSpan {
    pub recv_time_nanos: u64,
    pub offset: u64,
    pub len: u32,
    pub source: u32,
}

/// One retained event, compact: where it came from, what it was and how each policy decided,
/// without its bytes. 48 bytes, so 5 million of them take 240 MB less than their payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// When its frame was received: with `source` and `seq`, what names the frame in the
    /// server's history once its bytes are gone here (a restarted engine reuses seqs).
    pub recv_time_nanos: u64,
    /// The engine's sequence number of its frame.
    pub seq: u64,
    /// The first block hash of a store or removal (none when `blocks` is 0).
    pub first_hash: u64,
    pub source: u32,
    /// Position in its batch.
    pub index: u32,
    /// Block hashes the event carries.
    pub blocks: u32,
    /// The store's own `block_size`, 0 when it named none.
    pub block_size: u32,
    /// The verdict class under policy A and B.
    pub class: [ClassCode; 2],
    pub kind: EventType,
    /// The medium string's id in [`Model::medium_name`]; 0 when the event named none.
    pub medium: u8,
}

const _: () = assert!(std::mem::size_of::<EventRecord>() <= 48);

impl EventRecord {
    /// The record of `event`, the `index`-th of frame `frame` (`seq`) on `source`.
    pub(super) fn of(event: &KvEvent, recv_time_nanos: u64, seq: u64, source: u32, index: u32, class: [ClassCode; 2], medium: u8) -> Self {
        let (hashes, block_size) = match event {
            KvEvent::BlockStored(s) => (&s.block_hashes[..], s.block_size.unwrap_or(0)),
            KvEvent::BlockRemoved(r) => (&r.block_hashes[..], 0),
            _ => (&[][..], 0),
        };
        EventRecord {
            recv_time_nanos,
            seq,
            first_hash: hashes.first().map_or(0, |h| h.0),
            source,
            index,
            blocks: hashes.len() as u32,
            block_size,
            class,
            kind: event.event_type(),
            medium,
        }
    }
}

/// Medium strings seen, each once; a record holds an id into it.
#[derive(Clone, Debug, Default)]
pub struct MediumTable {
    names: Vec<String>,
}

impl MediumTable {
    /// The id of `medium` (1-based; 0 is "none"), interning it on first sight.
    pub fn intern(&mut self, medium: Option<&str>) -> u8 {
        let Some(m) = medium else { return 0 };
        if let Some(i) = self.names.iter().position(|n| n == m) {
            return (i + 1) as u8;
        }
        if self.names.len() < MAX_MEDIA - 1 {
            self.names.push(m.to_owned());
            self.names.len() as u8
        } else {
            MAX_MEDIA as u8
        }
    }

    /// The string an id stands for.
    pub fn name(&self, id: u8) -> Option<&str> {
        match id {
            0 => None,
            i if i as usize == MAX_MEDIA => Some("(another medium: more than 254 distinct media seen)"),
            i => self.names.get(i as usize - 1).map(String::as_str),
        }
    }
}

/// Memory and bound figures for the fleet bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemoryUse {
    /// Raw frames: bytes kept, their bound, how many, how many dropped.
    pub retained_bytes: usize,
    pub bound_bytes: usize,
    pub retained_frames: usize,
    pub evicted_frames: u64,
    pub bound_reached: bool,
    /// Event records: how many, their bound, what they cost, how many dropped.
    pub retained_events: usize,
    pub event_bound: usize,
    pub event_bytes: usize,
    pub evicted_events: u64,
    pub event_bound_reached: bool,
    pub tree_blocks: u64,
    pub tree_bytes: usize,
    pub tree_bound_reached: bool,
    /// Blocks the tier trees did not take past their bound (a quarter of `?mem=` each).
    pub tree_refused_blocks: u64,
    /// The router indexes modelled: nodes kept, the bound on each index (`?indexnodes=`), and
    /// what reaching it kept out.
    pub index_nodes: u64,
    pub index_bound: usize,
    pub index_refused_stores: u64,
    pub index_refused_blocks: u64,
}

impl MemoryUse {
    /// Another engine worker's (a shard's) memory beside this one's: the page holds both.
    pub fn add(&mut self, o: &MemoryUse) {
        self.retained_bytes += o.retained_bytes;
        self.bound_bytes += o.bound_bytes;
        self.retained_frames += o.retained_frames;
        self.evicted_frames += o.evicted_frames;
        self.bound_reached |= o.bound_reached;
        self.retained_events += o.retained_events;
        self.event_bound += o.event_bound;
        self.event_bytes += o.event_bytes;
        self.evicted_events += o.evicted_events;
        self.event_bound_reached |= o.event_bound_reached;
        self.tree_blocks += o.tree_blocks;
        self.tree_bytes += o.tree_bytes;
        self.tree_bound_reached |= o.tree_bound_reached;
        self.tree_refused_blocks += o.tree_refused_blocks;
        self.index_nodes += o.index_nodes;
        self.index_bound = self.index_bound.max(o.index_bound);
        self.index_refused_stores += o.index_refused_stores;
        self.index_refused_blocks += o.index_refused_blocks;
    }
}

impl Model {
    pub fn memory(&self) -> MemoryUse {
        let (index_nodes, index_bound, (index_refused_stores, index_refused_blocks)) = self.index.bound_use();
        MemoryUse {
            index_nodes,
            index_bound,
            index_refused_stores,
            index_refused_blocks,
            retained_bytes: self.retained_bytes,
            bound_bytes: self.config.retain_bytes,
            retained_frames: self.frames.len(),
            evicted_frames: self.evicted_frames,
            bound_reached: self.bound_reached,
            retained_events: self.events.len(),
            event_bound: self.config.retain_events,
            event_bytes: self.events.capacity_bytes()
                + self.lanes.iter().map(super::timeline::Lane::reserved_bytes).sum::<usize>()
                + self.capture_spans.capacity_bytes(),
            evicted_events: self.first_event_id - super::shard::first_event_id(self.config.shard),
            event_bound_reached: self.first_event_id > super::shard::first_event_id(self.config.shard),
            tree_blocks: self.trees.iter().map(Trees::total_blocks).sum(),
            tree_bytes: self.trees.iter().map(Trees::approx_bytes).sum(),
            tree_bound_reached: self.trees.iter().any(Trees::bound_reached),
            tree_refused_blocks: self.trees.iter().map(Trees::refused_blocks).sum(),
        }
    }

    pub fn bound_reached(&self) -> bool {
        self.bound_reached
    }

    pub fn retained_frames(&self) -> impl Iterator<Item = &RetainedFrame> {
        self.frames.iter()
    }

    /// Total events retained.
    pub fn retained_events(&self) -> usize {
        self.events.len()
    }

    /// Keeps a frame's bytes; past `retain_bytes` the oldest frames go (their events' records
    /// stay, under their own bound).
    pub(super) fn retain(&mut self, frame: RetainedFrame) {
        self.retained_bytes += frame.cost_bytes();
        if matches!(frame.body, FrameBody::Message { .. }) {
            self.frame_index.insert((frame.source, frame.seq), frame.id);
        }
        self.frames.push_back(frame);
        if self.retained_bytes > self.config.retain_bytes {
            self.bound_reached = true;
            // Evict down to 95% so that eviction runs once per twentieth of the bound, not on
            // every frame.
            let target = self.config.retain_bytes / 20 * 19;
            while self.retained_bytes > target && self.frames.len() > 1 {
                let Some(old) = self.frames.pop_front() else { break };
                self.retained_bytes -= old.cost_bytes();
                // A restarted engine reuses seqs: the index may already name a newer frame.
                if self.frame_index.get(&(old.source, old.seq)) == Some(&old.id) {
                    self.frame_index.remove(&(old.source, old.seq));
                }
                // Another shard's frame kept for the index: that shard counts it.
                self.evicted_frames += u64::from(!matches!(old.body, FrameBody::IndexOnly { .. }));
            }
        }
        self.evict_events();
    }

    /// Past `retain_events`, drops the oldest records down to 95% of the bound, with their
    /// timeline marks and the router's links to them.
    fn evict_events(&mut self) {
        let bound = self.config.retain_events.max(1);
        if self.events.len() <= bound {
            return;
        }
        let drop = self.events.len() - bound / 20 * 19;
        self.events.drop_front(drop);
        self.first_event_id += drop as u64;
        let first_kept = self.first_event_id;
        for lane in &mut self.lanes {
            lane.evict_below(first_kept);
        }
        if let Some(r) = &mut self.router {
            r.evict_below(first_kept);
        }
    }

    /// Where the capture record of frame `key` sits in the opened file, if this page keeps it.
    pub fn capture_span(&self, key: super::FrameKey) -> Option<CaptureSpan> {
        let is_it = |s: &CaptureSpan| s.recv_time_nanos == key.recv_time_nanos && s.source == key.source;
        if !self.capture_spans_sorted {
            return self.capture_spans.iter().copied().find(is_it);
        }
        let first = self.capture_spans.partition_point(|s| s.recv_time_nanos < key.recv_time_nanos);
        (first..self.capture_spans.len())
            .map(|i| self.capture_spans[i])
            .take_while(|s| s.recv_time_nanos == key.recv_time_nanos)
            .find(is_it)
    }

    /// Events whose records were evicted (the oldest ids): 0 until the event bound is reached.
    pub fn evicted_events(&self) -> u64 {
        self.first_event_id - super::shard::first_event_id(self.config.shard)
    }

    /// The name of a record's medium id.
    pub fn medium_name(&self, id: u8) -> Option<&str> {
        self.media.name(id)
    }

    pub fn event_loc(&self, id: u64) -> Option<EventRecord> {
        if id < self.first_event_id {
            return None;
        }
        self.events.get((id - self.first_event_id) as usize).copied()
    }

    /// The seq of the frame that carried event `id`, while its record is retained.
    pub fn event_seq(&self, id: u64) -> Option<u64> {
        self.event_loc(id).map(|r| r.seq)
    }

    /// The newest retained frame `source` sent as `seq`, by its index (no scan: the tier
    /// tree's tooltips ask for one per block they show, at every refresh).
    pub(super) fn frame_by_seq(&self, source: u32, seq: u64) -> Option<&RetainedFrame> {
        let id = *self.frame_index.get(&(source, seq))?;
        let first = self.frames.front()?.id;
        self.frames.get(id.checked_sub(first)? as usize).filter(|f| f.id == id)
    }

    /// The retained frame that carried event `id`, while its bytes are kept here. Frames are in
    /// event order, so this is a binary search.
    pub(super) fn frame_of_event(&self, id: u64) -> Option<&RetainedFrame> {
        let i = self.frames.partition_point(|f| f.first_event + u64::from(f.num_events) <= id);
        let f = self.frames.get(i)?;
        (f.first_event <= id && id < f.first_event + u64::from(f.num_events)).then_some(f)
    }
}
