//! Retained frames: what is kept for the inspector, re-classification and downloads, what each
//! costs, and eviction of the oldest past the bound (`Config::retain_bytes`).

use super::trees::Trees;
use super::classes::ClassCode;
use super::Model;

/// Bytes a retained event costs besides its frame (index entry and timeline mark).
const EVENT_OVERHEAD_BYTES: usize = 48;

/// Bytes a retained frame costs besides its payload and topic.
const FRAME_OVERHEAD_BYTES: usize = 96;

/// What a retained frame holds.
#[derive(Clone, Debug)]
pub enum FrameBody {
    /// A well-formed `[topic, seq, payload]` message.
    Message { topic: Vec<u8>, payload: Vec<u8> },
    /// A message that was not shaped like an engine's; its frames as received.
    Malformed { frames: Vec<Vec<u8>>, error: String },
    /// An event-plane message: `[subject, envelope]`, or the frames as recorded.
    Plane { frames: Vec<Vec<u8>> },
}

/// A frame kept for the inspector, for re-classification and for download.
#[derive(Clone, Debug)]
pub struct RetainedFrame {
    pub id: u64,
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
        };
        FRAME_OVERHEAD_BYTES + body + self.num_events as usize * EVENT_OVERHEAD_BYTES
    }

    pub fn payload(&self) -> Option<&[u8]> {
        match &self.body {
            FrameBody::Message { payload, .. } => Some(payload),
            FrameBody::Malformed { .. } | FrameBody::Plane { .. } => None,
        }
    }
}

/// Where an event id points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLoc {
    pub frame: u64,
    pub index: u32,
    pub source: u32,
    pub class: [ClassCode; 2],
}

/// Memory and bound figures for the fleet bar.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryUse {
    pub retained_bytes: usize,
    pub bound_bytes: usize,
    pub retained_frames: usize,
    pub retained_events: usize,
    pub evicted_frames: u64,
    pub bound_reached: bool,
    pub tree_blocks: u64,
    pub tree_bytes: usize,
    pub tree_bound_reached: bool,
}

impl Model {
    pub fn memory(&self) -> MemoryUse {
        MemoryUse {
            retained_bytes: self.retained_bytes,
            bound_bytes: self.config.retain_bytes,
            retained_frames: self.frames.len(),
            retained_events: self.events.len(),
            evicted_frames: self.evicted_frames,
            bound_reached: self.bound_reached,
            tree_blocks: self.trees.iter().map(Trees::total_blocks).sum(),
            tree_bytes: self.trees.iter().map(Trees::approx_bytes).sum(),
            tree_bound_reached: self.trees.iter().any(Trees::bound_reached),
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

    pub(super) fn retain(&mut self, frame: RetainedFrame) {
        self.retained_bytes += frame.cost_bytes();
        self.frames.push_back(frame);
        if self.retained_bytes > self.config.retain_bytes {
            self.bound_reached = true;
            // Evict down to 95% so that eviction (and the lane drains it causes) runs once per
            // twentieth of the bound, not on every frame, and each run stays short.
            let target = self.config.retain_bytes / 20 * 19;
            let mut first_kept_event = self.first_event_id;
            while self.retained_bytes > target && self.frames.len() > 1 {
                let Some(old) = self.frames.pop_front() else { break };
                self.retained_bytes -= old.cost_bytes();
                self.evicted_frames += 1;
                first_kept_event = old.first_event + u64::from(old.num_events);
            }
            let drop_events = (first_kept_event - self.first_event_id) as usize;
            self.events.drain(..drop_events.min(self.events.len()));
            self.first_event_id = first_kept_event;
            for lane in &mut self.lanes {
                lane.evict_below(first_kept_event);
            }
            if let Some(r) = &mut self.router {
                r.evict_below(first_kept_event);
            }
        }
    }

    pub fn event_loc(&self, id: u64) -> Option<EventLoc> {
        if id < self.first_event_id {
            return None;
        }
        self.events.get((id - self.first_event_id) as usize).copied()
    }

    /// The seq of the frame that carried event `id`, while it is retained.
    pub fn event_seq(&self, id: u64) -> Option<u64> {
        self.frame_by_id(self.event_loc(id)?.frame).map(|f| f.seq)
    }

    pub(super) fn frame_by_id(&self, id: u64) -> Option<&RetainedFrame> {
        let first = self.frames.front()?.id;
        let f = self.frames.get(id.checked_sub(first)? as usize)?;
        (f.id == id).then_some(f)
    }
}
