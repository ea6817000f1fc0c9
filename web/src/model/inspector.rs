//! The inspector and the log: one event's detail (re-running fresh normalizers for its rule
//! sentences), event references, the next marked event, and an indexer's log lines.

use kvscope_wire::KvEvent;

use super::classes;
use super::policy_run::{Classified, PolicyRun};
use super::settings::{EventRef, Side};
use super::{FrameBody, Model};

/// One indexer log line.
#[derive(Clone, Debug, PartialEq)]
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
    /// Per policy: policy name, class, and the rule sentence.
    pub verdicts: [(String, Option<classes::Class>, String); 2],
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
        let f = self.frames.iter().rev().find(|f| f.source == src && f.seq == r.seq)?;
        (r.index < f.num_events).then(|| f.first_event + u64::from(r.index))
    }

    pub fn event_ref(&self, id: u64) -> Option<EventRef> {
        let loc = self.event_loc(id)?;
        let f = self.frame_by_id(loc.frame)?;
        Some(EventRef { source: self.sources[f.source as usize].key.clone(), seq: f.seq, index: loc.index })
    }

    /// The first retained event of the given class severity or above under `side`, after
    /// `after` (exclusive), optionally on one source.
    pub fn next_marked(&self, side: Side, after: Option<u64>, min_severity: u8) -> Option<u64> {
        let start = after.map_or(self.first_event_id, |a| a + 1).max(self.first_event_id);
        let skip = (start - self.first_event_id) as usize;
        self.events
            .iter()
            .skip(skip)
            .position(|l| self.classes.severity(l.class[side as usize]) >= min_severity)
            .map(|p| start + p as u64)
    }

    /// Everything the inspector shows for one event. The rule sentences come from running
    /// fresh normalizers over this source's retained frames up to the event: a verdict is
    /// about 120 bytes, too much to keep for a million events, and the run is the same code
    /// that decided. If older frames of the source were evicted, the sentence may differ from
    /// the live verdict (the group metadata learned from them is gone); the stored class is
    /// shown next to it, so a difference is visible.
    pub fn event_detail(&self, id: u64) -> Option<EventDetail> {
        let loc = self.event_loc(id)?;
        let frame = self.frame_by_id(loc.frame)?;
        let FrameBody::Message { topic, payload } = &frame.body else { return None };
        let batch = kvscope_wire::decode_batch(payload).ok();
        let src = &self.sources[frame.source as usize];
        let mut verdicts: [(String, Option<classes::Class>, String); 2] = Default::default();
        for side in [Side::A, Side::B] {
            let i = side as usize;
            let mut run = PolicyRun::new(self.runs[i].name(), self.config.block_size).unwrap_or_else(|_| self.runs[i].fresh());
            let mut out = Vec::new();
            let mut rule = String::new();
            for f in self.frames.iter().filter(|f| f.source == frame.source && f.id <= frame.id) {
                let Some(p) = f.payload() else { continue };
                let Ok(b) = kvscope_wire::decode_batch(p) else { continue };
                out.clear();
                run.classify(f.source, &src.worker_id, src.dp_rank, f.seq, &b, &mut out);
                if f.id == frame.id {
                    rule = out.get(loc.index as usize).map(Classified::rule).unwrap_or_default();
                }
            }
            verdicts[i] = (self.runs[i].name().to_owned(), self.classes.get(loc.class[i]).cloned(), rule);
        }
        Some(EventDetail {
            id,
            source_key: src.key.clone(),
            seq: frame.seq,
            index: loc.index,
            recv_time_nanos: frame.recv_time_nanos,
            replayed: frame.replayed,
            topic: topic.clone(),
            payload: payload.clone(),
            event: batch.as_ref().and_then(|b| b.events.get(loc.index as usize).cloned()),
            batch_ts: batch.as_ref().map(|b| b.ts),
            batch_dp_rank: batch.as_ref().and_then(|b| b.dp_rank),
            verdicts,
        })
    }

    /// The block size of the store that put `hash` in a tree: found in the retained frame with
    /// that source and seq (the trees keep no block size). `None` when evicted.
    pub fn block_size_of(&self, source: u32, seq: u64, hash: u64) -> Option<u32> {
        let f = self.frames.iter().rev().find(|f| f.source == source && f.seq == seq)?;
        let batch = kvscope_wire::decode_batch(f.payload()?).ok()?;
        batch.events.iter().find_map(|e| match e {
            KvEvent::BlockStored(s) if s.block_hashes.iter().any(|h| h.0 == hash) => s.block_size,
            _ => None,
        })
    }
}
