//! Gap tracking of one source's stream: replay replies filling a gap, the gap's record
//! (recovered, lost, why), engine restarts, and the replayed runs of a capture. The rules are in
//! the parent module's doc; this file holds their bookkeeping, apart from the frame pipeline.

use bytes::Bytes;
use kvscope_protocol as proto;
use kvscope_wire::frame::{ReplayReply, parse_replay_reply};

use super::{Held, LiveOutcome, Output, Pipeline};
use crate::source_state::TrackedSource;
use crate::time::unix_nanos;

impl<O: Output> Pipeline<O> {
    /// One reply from the replay socket while a gap is being filled (live mode). Replies
    /// outside the gap, duplicates and the end marker are dropped; frame errors are counted.
    /// Returns false once the gap is filled or the replay ended (stop reading).
    pub fn replay_reply(&mut self, held: &mut Held, frames: Vec<Bytes>, recv_time_nanos: u64) -> bool {
        let (topic, seq, payload) = match parse_replay_reply(&frames) {
            Ok(ReplayReply::End) => return false,
            Ok(ReplayReply::Message { topic, seq, payload }) => (topic.map(<[u8]>::to_vec).unwrap_or_default(), seq, payload.to_vec()),
            Err(e) => {
                self.framing_error(e.classify(), &e.to_string(), None, recv_time_nanos, true, &frames);
                return true;
            }
        };
        let next = self.next.unwrap_or(held.from_seq).max(held.from_seq);
        if seq < next {
            return true;
        }
        if seq > held.to_seq {
            return false;
        }
        // A replayed topic is absent in the 2-frame framing: relay the live topic instead.
        let topic = if frames.len() <= 3 && topic.is_empty() { held.frames[0].to_vec() } else { topic };
        self.relay(seq, recv_time_nanos, true, topic, payload, &frames);
        self.next = Some(seq + 1);
        held.recovered += 1;
        held.first_recovered.get_or_insert(seq);
        seq < held.to_seq
    }

    /// Ends a gap: records what was recovered and lost, then relays the held frame.
    /// `failure` is why the replay did not deliver (None when it was not tried for lack of an
    /// endpoint; the reason then says so).
    pub fn finish_gap(&mut self, held: Held, failure: Option<String>) {
        let total = held.to_seq - held.from_seq + 1;
        let recovered = held.recovered.min(total);
        let reason = if recovered == total {
            None
        } else if !self.has_replay() {
            Some(self.replay_hint.clone())
        } else {
            Some(failure.unwrap_or_else(|| {
                format!(
                    "the engine's replay buffer no longer held seq {}; raise the engine's replay buffer size",
                    lost_ranges(&held, self.next)
                )
            }))
        };
        let reason = match (held.joined_at, reason) {
            (Some(at), Some(r)) => Some(format!("joined the stream at seq {at}, replayed from 0: {r}")),
            (_, r) => r,
        };
        self.record_gap(held.from_seq, held.to_seq, recovered, reason);
        self.accept_live(held.frames, held.seq, held.recv_time_nanos);
    }

    /// Whether a first frame above seq 0 is a late-join gap.
    pub(super) fn late_join_applies(&self) -> bool {
        self.options.late_join_replay && self.has_replay()
    }

    /// Whether a gap can be replayed (the source has a replay endpoint).
    pub fn has_replay(&self) -> bool {
        self.replay_endpoint.is_some()
    }

    /// Where gaps are replayed from.
    pub fn replay_endpoint(&self) -> Option<&str> {
        self.replay_endpoint.as_deref()
    }

    /// A record from a capture: live records go through [`Pipeline::live`] with no replay
    /// available; replayed records fill the gap their live frame will close.
    pub fn capture_record(&mut self, frames: Vec<Bytes>, recv_time_nanos: u64, replayed: bool) {
        if !replayed {
            if let LiveOutcome::Gap(held) = self.live(frames, recv_time_nanos) {
                let reason = "not in the capture (the recorder could not replay it either)".to_owned();
                let recovered = 0;
                self.record_gap(held.from_seq, held.to_seq, recovered, Some(reason));
                self.accept_live(held.frames, held.seq, held.recv_time_nanos);
            }
            return;
        }
        let (topic, seq, payload) = match parse_replay_reply(&frames) {
            Ok(ReplayReply::End) => return,
            Ok(ReplayReply::Message { topic, seq, payload }) => (topic.map(<[u8]>::to_vec).unwrap_or_default(), seq, payload.to_vec()),
            Err(e) => {
                self.framing_error(e.classify(), &e.to_string(), None, recv_time_nanos, true, &frames);
                return;
            }
        };
        if !self.replay_run {
            self.replay_run = true;
            let from = match self.next {
                Some(next) if seq >= next => next,
                Some(_) => {
                    self.count_restart();
                    0
                }
                // The live server's late join asked for 0 onwards; what did not come is lost.
                None if self.first_frame && self.late_join_applies() => 0,
                None => seq,
            };
            self.first_frame = false;
            self.open_gap(from);
        }
        if let Some(next) = self.next
            && seq < next
        {
            return;
        }
        self.relay(seq, recv_time_nanos, true, topic, payload, &frames);
        self.next = Some(seq + 1);
        if let Some(gap) = self.source.gaps.back_mut() {
            gap.to_seq = seq;
            gap.recovered_frames += 1;
        }
    }

    fn open_gap(&mut self, from: u64) {
        self.source.status.counters.gaps += 1;
        if let Some(m) = &self.source.metrics {
            m.gaps.inc();
        }
        self.source.push_gap(proto::Gap {
            from_seq: from,
            to_seq: from,
            recovered_frames: 0,
            lost_frames: 0,
            publisher_id: None,
            state: proto::GapState::Recovered,
            reason: None,
            detected_unix_nanos: unix_nanos(),
        });
    }

    pub(super) fn close_replay_run(&mut self, frames: Vec<Bytes>, seq: u64, recv_time_nanos: u64) -> LiveOutcome {
        self.replay_run = false;
        let next = self.next.unwrap_or(seq);
        if let Some(gap) = self.source.gaps.pop_back() {
            // The gap was counted when the run opened; record_gap_inner counts it again in the
            // status, so take it back here, and tell it not to touch the Prometheus counter.
            self.source.status.counters.gaps -= 1;
            let to = if seq >= next { seq.saturating_sub(1).max(gap.to_seq) } else { gap.to_seq };
            let total = to - gap.from_seq + 1;
            let recovered = gap.recovered_frames.min(total);
            let reason = (recovered < total).then(|| "not in the capture (the recorder could not replay it either)".to_owned());
            self.record_gap_inner(gap.from_seq, to, recovered, reason, false);
        }
        if seq < next {
            self.count_restart();
        }
        self.accept_live(frames, seq, recv_time_nanos);
        LiveOutcome::Done
    }

    pub(super) fn count_restart(&mut self) {
        self.source.count_restart();
        self.next = None;
    }

    fn record_gap(&mut self, from: u64, to: u64, recovered: u64, reason: Option<String>) {
        self.record_gap_inner(from, to, recovered, reason, true);
    }

    fn record_gap_inner(&mut self, from: u64, to: u64, recovered: u64, reason: Option<String>, count_metric: bool) {
        let total = to - from + 1;
        let lost = total - recovered;
        self.source.status.counters.gaps += 1;
        self.source.status.counters.lost_frames += lost;
        if let Some(m) = &self.source.metrics {
            if count_metric {
                m.gaps.inc();
            }
            m.lost_frames.inc_by(lost);
        }
        let state = match (recovered, lost) {
            (_, 0) => proto::GapState::Recovered,
            (0, _) => proto::GapState::Unrecovered,
            _ => proto::GapState::Partial,
        };
        if lost > 0 {
            tracing::warn!(source = %self.key, "seq {from}..={to}: {lost} of {total} frames lost: {}", reason.as_deref().unwrap_or(""));
        }
        self.source.push_gap(proto::Gap {
            from_seq: from,
            to_seq: to,
            recovered_frames: recovered,
            lost_frames: lost,
            publisher_id: None,
            state,
            reason,
            detected_unix_nanos: unix_nanos(),
        });
        self.flush_status();
    }
}

/// The seq ranges a replay did not deliver, in words: the oldest ones a buffer had dropped
/// (`0..=4`), the newest ones it stopped before, or both.
fn lost_ranges(held: &Held, next: Option<u64>) -> String {
    let mut ranges = Vec::new();
    let first = held.first_recovered.unwrap_or(held.to_seq + 1);
    if first > held.from_seq {
        ranges.push(format!("{}..={}", held.from_seq, first - 1));
    }
    if held.first_recovered.is_some() {
        let resumed = next.unwrap_or(held.to_seq + 1);
        if resumed <= held.to_seq {
            ranges.push(format!("{resumed}..={}", held.to_seq));
        }
    }
    ranges.join(" and ")
}
