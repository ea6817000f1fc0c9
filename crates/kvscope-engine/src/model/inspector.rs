//! The inspector and the log: one event's detail (re-running fresh normalizers for its rule
//! sentences), event references, the next marked event, and an indexer's log lines.

use kvscope_engine_protocol::Severity;
use kvscope_protocol as proto;
use kvscope_wire::KvEvent;

use super::classes;
use super::policy_run::{Classified, PolicyRun};
use super::settings::{EventRef, Side};
use super::{EventRecord, FrameBody, Model, RetainedFrame};

/// Frames fetched from the server's history kept at once (the inspector shows one at a time).
const FETCHED_FRAMES: usize = 16;

/// Names one frame in the server's history: an engine that restarted reuses its seqs, so the
/// receive time is part of the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameKey {
    pub source: u32,
    pub seq: u64,
    pub recv_time_nanos: u64,
}

/// Where the bytes the inspector shows came from, in words the inspector uses.
#[derive(Clone, Debug, PartialEq)]
pub enum BytesFrom {
    /// This page still keeps the frame.
    Page,
    /// The page had dropped them; they came from the server's history on request.
    Server,
    /// The page had dropped them; they were read again from the opened capture file.
    Capture,
    /// Neither this page nor (yet) the server: see the fetch state.
    Gone(FetchState),
}

/// Asking the server's history for a frame whose bytes this page dropped.
#[derive(Clone, Debug, PartialEq)]
pub enum FetchState {
    /// Not asked yet; the inspector offers to.
    NotAsked,
    /// The request is on its way.
    Asking,
    /// The server could not give them, in its words (or the network's).
    Failed(String),
    /// There is no server to ask (`?offline=1`, or a capture whose file the page no longer
    /// holds).
    NoServer,
}

impl BytesFrom {
    /// One line for the inspector; `capture` when the page shows a capture opened from a file
    /// (the bytes are then read again from it, not asked of a server).
    pub fn sentence(&self, retain_mib: usize, capture: bool) -> String {
        match self {
            BytesFrom::Page => "Raw bytes: kept on this page.".to_owned(),
            BytesFrom::Server => "Raw bytes: fetched from the server's history on request (this page had dropped them). \
                 The rule sentences are re-run over this frame alone, without what earlier frames taught the \
                 normalizer (attention groups), so they can differ from the verdict decided live, shown above them."
                .to_owned(),
            BytesFrom::Capture => "Raw bytes: read again from the capture file on request (this page had dropped them). \
                 The rule sentences are re-run over this frame alone, without what earlier frames taught the \
                 normalizer (attention groups), so they can differ from the verdict decided when the capture was opened, shown above them."
                .to_owned(),
            BytesFrom::Gone(state) => {
                let why = format!(
                    "This page no longer keeps this event's raw bytes: it keeps every event's record, but \
                     the bytes only of its most recent frames ({retain_mib} MiB; raise with ?mem=MiB)."
                );
                match state {
                    FetchState::NotAsked if capture => format!("{why} The capture file still has them."),
                    FetchState::Asking if capture => format!("{why} Reading them from the capture file…"),
                    FetchState::NotAsked => format!("{why} The server's history may still have them."),
                    FetchState::Asking => format!("{why} Asking the server's history…"),
                    FetchState::Failed(e) => format!("{why} The raw bytes are gone: {e}"),
                    FetchState::NoServer => {
                        format!("{why} The raw bytes are gone: there is no server to ask (reopen the capture to see them).")
                    }
                }
            }
        }
    }
}

/// Where an event sits in the fleet's stream, as every shard can tell from its record: its
/// frame's receive time, source and seq, and its place in the batch. (Event ids are in stream
/// order within a shard, not across shards.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct StreamOrder {
    pub recv_time_nanos: u64,
    pub source: u32,
    pub seq: u64,
    pub index: u32,
}

impl StreamOrder {
    fn of(e: &EventRecord) -> StreamOrder {
        StreamOrder { recv_time_nanos: e.recv_time_nanos, source: e.source, seq: e.seq, index: e.index }
    }
}

/// One indexer log line.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogLine {
    pub source: u32,
    /// `u64::MAX` for the "counted, not logged" summary lines.
    pub seq: u64,
    pub event_index: u32,
    /// `WARN w0:0 seq 8 event 4: ...`.
    pub text: String,
    /// The line of the first fatal verdict: a real indexer exits after printing it.
    pub fatal: bool,
    /// A line after that fatal one, which a real indexer would never have printed.
    pub after_exit: bool,
}

/// An event opened in the inspector.
#[derive(Clone, Debug)]
pub struct EventDetail {
    pub id: u64,
    pub source_key: String,
    pub seq: u64,
    pub index: u32,
    pub recv_time_nanos: u64,
    pub replayed: bool,
    pub topic: Vec<u8>,
    pub payload: Vec<u8>,
    pub event: Option<KvEvent>,
    pub batch_ts: Option<f64>,
    pub batch_dp_rank: Option<u32>,
    /// Per policy: policy name, class, and the rule sentence (empty when the bytes are gone).
    pub verdicts: [(String, Option<classes::Class>, String); 2],
    /// What the event's record holds, bytes or not.
    pub record: EventRecord,
    /// The record's medium, by name.
    pub medium: Option<String>,
    /// Where `topic` and `payload` came from; both are empty when gone.
    pub bytes_from: BytesFrom,
}

impl Model {
    /// The lines an indexer following `side`'s policy would print, per source in source order,
    /// each source's lines in (seq, event) order, with the warnings each budget counted
    /// silently after its limit.
    pub fn log(&self, side: Side) -> Vec<LogLine> {
        let run = &self.runs[side as usize];
        let mut out = Vec::new();
        for src in &self.sources {
            let Some(id) = run.source_id(src.index) else { continue };
            let counters = run.normalizer().counters(id);
            let fatal_seq = counters.first_fatal.as_ref().map(|l| (l.seq, l.event_index));
            for line in counters.log() {
                let after_exit = fatal_seq.is_some_and(|f| (line.seq, line.event_index) > f);
                out.push(LogLine {
                    source: src.index,
                    seq: line.seq,
                    event_index: line.event_index,
                    text: line.to_string(),
                    fatal: counters.first_fatal.as_ref() == Some(line),
                    after_exit,
                });
            }
            for (budget, name) in [(&counters.conversion, "conversion"), (&counters.offload, "offload")] {
                if budget.suppressed > 0 {
                    out.push(LogLine {
                        source: src.index,
                        seq: u64::MAX,
                        event_index: 0,
                        text: format!(
                            "({} more {name} warnings on {} counted, not logged: the budget of {} is spent)",
                            budget.suppressed, src.key, budget.limit
                        ),
                        fatal: false,
                        after_exit: false,
                    });
                }
            }
        }
        out
    }

    /// The event an [`EventRef`] names, if retained (the latest frame with that source and seq).
    pub fn find_event(&self, r: &EventRef) -> Option<u64> {
        let src = self.source_by_key(&r.source)?.index;
        if let Some(f) = self.frame_by_seq(src, r.seq) {
            return (r.index < f.num_events).then(|| f.first_event + u64::from(r.index));
        }
        // Its frame's bytes are gone; its record may not be.
        let back = self.events.iter().rev().position(|e| e.source == src && e.seq == r.seq && e.index == r.index)?;
        Some(self.first_event_id + (self.events.len() - 1 - back) as u64)
    }

    pub fn event_ref(&self, id: u64) -> Option<EventRef> {
        let loc = self.event_loc(id)?;
        Some(EventRef { source: self.sources.get(loc.source as usize)?.key.clone(), seq: loc.seq, index: loc.index })
    }

    /// The name of event `id`'s frame in the server's history.
    pub fn frame_key(&self, id: u64) -> Option<FrameKey> {
        let r = self.event_loc(id)?;
        Some(FrameKey { source: r.source, seq: r.seq, recv_time_nanos: r.recv_time_nanos })
    }

    /// Event `id`'s frame with its bytes and where they came from: this page's retained
    /// frames, or one fetched from the server.
    pub(super) fn bytes_of_event(&self, id: u64) -> Option<(&RetainedFrame, BytesFrom)> {
        if let Some(f) = self.frame_of_event(id) {
            return Some((f, BytesFrom::Page));
        }
        let key = self.frame_key(id)?;
        self.fetched
            .iter()
            .find(|f| f.source == key.source && f.seq == key.seq && f.recv_time_nanos == key.recv_time_nanos)
            .map(|f| (f, if matches!(self.origin, super::Origin::Capture { .. }) { BytesFrom::Capture } else { BytesFrom::Server }))
    }

    /// Where event `id`'s raw bytes would come from now, without decoding anything: what the
    /// inspector's detail depends on besides the event itself.
    pub fn bytes_from(&self, id: u64) -> Option<BytesFrom> {
        if let Some((_, from)) = self.bytes_of_event(id) {
            return Some(from);
        }
        let key = self.frame_key(id)?;
        Some(BytesFrom::Gone(self.fetch_state(key)))
    }

    /// Where asking the server for `key` stands.
    pub fn fetch_state(&self, key: FrameKey) -> FetchState {
        if let Some((k, state)) = &self.fetch
            && *k == key
        {
            return state.clone();
        }
        match &self.origin {
            super::Origin::Server { .. } => FetchState::NotAsked,
            super::Origin::Capture { .. } if self.capture_file_kept && self.capture_span(key).is_some() => FetchState::NotAsked,
            _ => FetchState::NoServer,
        }
    }

    /// The request for `key` went out.
    pub fn fetch_started(&mut self, key: FrameKey) {
        self.fetch = Some((key, FetchState::Asking));
        self.dirty = true;
    }

    /// The request for `key` failed; `why` is the server's (or the network's) words.
    pub fn fetch_failed(&mut self, key: FrameKey, why: String) {
        self.fetch = Some((key, FetchState::Failed(why)));
        self.dirty = true;
    }

    /// The server answered with `bytes` for `key`: one protocol `Frame` message, checked to be
    /// that frame before it is kept.
    pub fn accept_fetched(&mut self, key: FrameKey, bytes: &[u8]) -> Result<(), String> {
        let result = match proto::decode(bytes) {
            Ok(proto::Message::Frame(f)) if f.source == key.source && f.seq == key.seq && f.recv_time_nanos == key.recv_time_nanos => {
                self.keep_fetched(key, f.replayed, f.topic, f.payload);
                Ok(())
            }
            Ok(_) => Err("the server answered with another frame than the one asked for".to_owned()),
            Err(e) => Err(format!("the server's answer is not a kvscope frame: {e}")),
        };
        self.fetch_done(key, result)
    }

    /// The capture file gave `bytes` at [`Model::capture_span`]`(key)`: one record, checked to be
    /// that frame before it is kept.
    pub fn accept_capture_record(&mut self, key: FrameKey, bytes: &[u8]) -> Result<(), String> {
        let result = proto::capture::decode_record(bytes)
            .map_err(|e| format!("the capture file no longer holds this record where it was read: {e}; was it changed on disk?"))
            .and_then(|record| {
                let frames: Vec<Vec<u8>> = record.frames.into_iter().map(|b| b.into_vec()).collect();
                let msg = kvscope_wire::frame::parse_live(&frames).map_err(|e| format!("the record read again is not a frame: {e}"))?;
                if record.source != key.source || msg.seq != key.seq || record.recv_time_nanos != key.recv_time_nanos {
                    return Err("the capture file holds another frame there than the one asked for; was it changed on disk?".to_owned());
                }
                let (topic, payload) = (msg.topic.to_vec(), msg.payload.to_vec());
                self.keep_fetched(key, record.replayed, topic, payload);
                Ok(())
            });
        self.fetch_done(key, result)
    }

    fn keep_fetched(&mut self, key: FrameKey, replayed: bool, topic: Vec<u8>, payload: Vec<u8>) {
        if self.fetched.len() >= FETCHED_FRAMES {
            self.fetched.pop_front();
        }
        self.fetched.push_back(RetainedFrame {
            id: u64::MAX,
            position: u64::MAX,
            source: key.source,
            seq: key.seq,
            recv_time_nanos: key.recv_time_nanos,
            replayed,
            body: FrameBody::Message { topic, payload },
            first_event: 0,
            num_events: 0,
            decode_error: None,
        });
    }

    fn fetch_done(&mut self, key: FrameKey, result: Result<(), String>) -> Result<(), String> {
        self.fetch = match &result {
            Ok(()) => None,
            Err(e) => Some((key, FetchState::Failed(e.clone()))),
        };
        self.dirty = true;
        result
    }

    /// The first retained event of the given class severity or above under `side`, after
    /// `after` (exclusive), optionally on one source.
    pub fn next_marked(&self, side: Side, after: Option<u64>, min_severity: Severity) -> Option<u64> {
        let start = after.map_or(self.first_event_id, |a| a + 1).max(self.first_event_id);
        let skip = (start - self.first_event_id) as usize;
        (skip..self.events.len())
            .find(|&i| self.classes.severity(self.events[i].class[side as usize]) >= min_severity)
            .map(|i| self.first_event_id + i as u64)
    }

    /// Where event `id` sits in the fleet's stream ([`StreamOrder`]), while its record is kept.
    pub fn stream_order(&self, id: u64) -> Option<StreamOrder> {
        self.event_loc(id).map(|e| StreamOrder::of(&e))
    }

    /// The first retained event after `after` in the fleet's stream marked under either policy
    /// with at least `min_severity` (from the start when `after` is `None`), with its id: what
    /// each shard answers when the page asks for the next fatal.
    pub fn next_marked_in_stream(&self, after: Option<StreamOrder>, min_severity: Severity) -> Option<(StreamOrder, u64)> {
        self.events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.class.iter().any(|c| self.classes.severity(*c) >= min_severity))
            .map(|(i, e)| (StreamOrder::of(e), self.first_event_id + i as u64))
            .filter(|(o, _)| after.is_none_or(|a| *o > a))
            .min_by_key(|(o, _)| *o)
    }

    /// Everything the inspector shows for one event. The rule sentences come from running
    /// fresh normalizers over this source's retained frames up to the event (or over the
    /// fetched frame alone): a verdict is about 120 bytes, too much to keep for millions of
    /// events, and the run is the same code that decided. If older frames of the source were
    /// evicted, the sentence may differ from the live verdict (the group metadata learned from
    /// them is gone); the stored class is shown next to it, so a difference is visible. When
    /// the bytes are gone, the detail holds what the event's record holds.
    pub fn event_detail(&self, id: u64) -> Option<EventDetail> {
        let record = self.event_loc(id)?;
        let src = self.sources.get(record.source as usize)?;
        let medium = self.medium_name(record.medium).map(str::to_owned);
        let mut verdicts: [(String, Option<classes::Class>, String); 2] = Default::default();
        for side in [Side::A, Side::B] {
            let i = side as usize;
            verdicts[i] = (self.runs[i].name().to_owned(), self.classes.get(record.class[i]).cloned(), String::new());
        }
        let Some((frame, bytes_from)) = self.bytes_of_event(id) else {
            let key = FrameKey { source: record.source, seq: record.seq, recv_time_nanos: record.recv_time_nanos };
            return Some(EventDetail {
                id,
                source_key: src.key.clone(),
                seq: record.seq,
                index: record.index,
                recv_time_nanos: record.recv_time_nanos,
                replayed: false,
                topic: Vec::new(),
                payload: Vec::new(),
                event: None,
                batch_ts: None,
                batch_dp_rank: None,
                verdicts,
                record,
                medium,
                bytes_from: BytesFrom::Gone(self.fetch_state(key)),
            });
        };
        let FrameBody::Message { topic, payload } = &frame.body else { return None };
        let batch = kvscope_wire::decode_batch(payload).ok();
        for side in [Side::A, Side::B] {
            let i = side as usize;
            let mut run = PolicyRun::new(self.runs[i].name(), self.config.block_size).unwrap_or_else(|_| self.runs[i].fresh());
            let mut out = Vec::new();
            let mut rule = String::new();
            let mut classify = |f: &RetainedFrame, this: bool| {
                let Some(b) = f.payload().and_then(|p| kvscope_wire::decode_batch(p).ok()) else { return };
                out.clear();
                run.classify(f.source, &src.worker_id, src.dp_rank, src.block_size, f.seq, &b, &mut out);
                if this {
                    rule = out.get(record.index as usize).map(Classified::rule).unwrap_or_default();
                }
            };
            if bytes_from == BytesFrom::Page {
                for f in self.frames.iter().filter(|f| f.source == frame.source && f.id <= frame.id) {
                    classify(f, f.id == frame.id);
                }
            } else {
                classify(frame, true);
            }
            verdicts[i].2 = rule;
        }
        Some(EventDetail {
            id,
            source_key: src.key.clone(),
            seq: frame.seq,
            index: record.index,
            recv_time_nanos: frame.recv_time_nanos,
            replayed: frame.replayed,
            topic: topic.clone(),
            payload: payload.clone(),
            event: batch.as_ref().and_then(|b| b.events.get(record.index as usize).cloned()),
            batch_ts: batch.as_ref().map(|b| b.ts),
            batch_dp_rank: batch.as_ref().and_then(|b| b.dp_rank),
            verdicts,
            record,
            medium,
            bytes_from,
        })
    }

    /// The block size of the store that put `hash` in a tree: found in the retained frame with
    /// that source and seq (the trees keep no block size). `None` when evicted.
    pub fn block_size_of(&self, source: u32, seq: u64, hash: u64) -> Option<u32> {
        let f = self.frame_by_seq(source, seq)?;
        let batch = kvscope_wire::decode_batch(f.payload()?).ok()?;
        batch.events.iter().find_map(|e| match e {
            KvEvent::BlockStored(s) if s.block_hashes.iter().any(|h| h.0 == hash) => s.block_size,
            _ => None,
        })
    }
}
