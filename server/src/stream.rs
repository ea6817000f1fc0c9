//! One source's stream, independent of where the frames come from: sequence tracking, gaps,
//! restarts, frame and decode errors, counters and status, in the order frames are relayed.
//!
//! Three callers drive it: the live intake (`intake`, which also fetches replays when asked),
//! `kvscope replay` and `kvscope check` (both from a capture). Keeping the rules here, with no
//! sockets, is what lets `check` count gaps and restarts exactly as the live server did, and lets
//! the rules be unit-tested without a network.
//!
//! Rules:
//! - the first frame of a source is taken as is, unless the source has a replay endpoint and
//!   its seq is above 0: then `[0, s-1]` is a late-join gap, replayed like any other, because
//!   whoever joins mid-incident wants what the engine still buffers (Dynamo's newer indexer
//!   does the same); `--no-late-join-replay` turns this off;
//! - a payload larger than `--max-frame-bytes` is refused before decoding (a counted frame
//!   error, its seq still consumed), so one hostile frame cannot make the intake or the page
//!   allocate without bound;
//! - a jump forward from `next` to `s` is a gap `[next, s-1]`: the live intake replays it, then
//!   relays the held frame `s`;
//! - a jump back is an engine restart (its counter starts again at 0); when the first frame
//!   after it is not 0, `[0, s-1]` is a gap of the new run (PUB/SUB lost the first messages
//!   after the reconnect);
//! - in a capture, replayed records sit before the live frame that revealed their gap (the
//!   order they were relayed in), so a run of replayed records opens a gap and the next live
//!   record closes it.
//!
//! Neighbours: `classify` decodes and counts verdicts; the [`Output`] given by the caller
//! relays (hub), records (capture) or ignores what comes out.

use std::collections::VecDeque;

use bytes::Bytes;
use kvscope_protocol as proto;
use kvscope_wire::frame::{ReplayReply, parse_live, parse_replay_reply};

use crate::classify::Classifier;
use crate::metrics::SourceMetrics;
use crate::time::unix_nanos;

/// Gaps kept in a status message.
const MAX_GAPS_IN_STATUS: usize = 32;

/// `--max-frame-bytes` by default: real batches are a few hundred KiB at most (a Kimi-K3 batch
/// of 64 stores is ~43 KB), so 16 MiB leaves room for any engine while bounding a hostile one.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 << 20;

/// The stream rules a flag can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Payloads larger than this are refused before decoding (`--max-frame-bytes`).
    pub max_frame_bytes: usize,
    /// Replay `[0, s-1]` when a source's first frame has seq `s > 0` (off with
    /// `--no-late-join-replay`). Only for sources with a replay endpoint.
    pub late_join_replay: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions { max_frame_bytes: DEFAULT_MAX_FRAME_BYTES, late_join_replay: true }
    }
}

/// Where a pipeline's results go.
pub trait Output: Send {
    /// A frame to relay, in order. `raw` holds the frames as received (a live message or a
    /// replay reply) for recording.
    fn frame(&mut self, frame: &proto::Frame, raw: &[Bytes]);
    /// A framing or decode error.
    fn frame_error(&mut self, error: &proto::FrameError, raw: &[Bytes]);
    /// The source's current status.
    fn status(&mut self, status: &proto::SourceStatus);
}

/// An output that drops everything (`check`).
#[derive(Debug, Default)]
pub struct NoOutput;

impl Output for NoOutput {
    fn frame(&mut self, _: &proto::Frame, _: &[Bytes]) {}
    fn frame_error(&mut self, _: &proto::FrameError, _: &[Bytes]) {}
    fn status(&mut self, _: &proto::SourceStatus) {}
}

/// A live frame that revealed a gap, held while the gap is replayed.
#[derive(Debug)]
pub struct Held {
    frames: Vec<Bytes>,
    seq: u64,
    recv_time_nanos: u64,
    /// The gap, inclusive.
    pub from_seq: u64,
    pub to_seq: u64,
    /// Why the gap exists, when it is not a plain jump: the late join's first seq.
    joined_at: Option<u64>,
    /// Replayed frames relayed so far, and the first one's seq.
    recovered: u64,
    first_recovered: Option<u64>,
}

impl Held {
    fn new(frames: Vec<Bytes>, seq: u64, recv_time_nanos: u64, from_seq: u64) -> Self {
        Held { frames, seq, recv_time_nanos, from_seq, to_seq: seq - 1, joined_at: None, recovered: 0, first_recovered: None }
    }
}

/// What the caller must do after [`Pipeline::live`].
#[derive(Debug)]
pub enum LiveOutcome {
    Done,
    /// Replay `[held.from_seq, held.to_seq]`, feed each reply to [`Pipeline::replay_reply`],
    /// then call [`Pipeline::finish_gap`].
    Gap(Held),
}

/// One source's stream state.
pub struct Pipeline<O: Output> {
    pub index: u32,
    pub key: String,
    has_replay: bool,
    replay_hint: String,
    next: Option<u64>,
    /// No frame was taken yet since the pipeline started (engine restarts do not reset it).
    first_frame: bool,
    options: StreamOptions,
    /// A capture's replayed run is open (file mode only).
    replay_run: bool,
    status: proto::SourceStatus,
    gaps: VecDeque<proto::Gap>,
    status_dirty: bool,
    classifier: Option<Classifier>,
    metrics: Option<SourceMetrics>,
    pub output: O,
}

impl<O: Output> std::fmt::Debug for Pipeline<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("key", &self.key).field("next", &self.next).finish_non_exhaustive()
    }
}

impl<O: Output> Pipeline<O> {
    pub fn new(
        info: &proto::SourceInfo,
        classifier: Option<Classifier>,
        metrics: Option<SourceMetrics>,
        output: O,
    ) -> Self {
        Pipeline {
            index: info.index,
            key: info.key.clone(),
            has_replay: info.replay_endpoint.is_some(),
            replay_hint: format!(
                "no replay endpoint configured for {}; pass --replay \"{}=tcp://HOST:PORT\" with the engine's replay port",
                info.key, info.key
            ),
            next: None,
            first_frame: true,
            options: StreamOptions::default(),
            replay_run: false,
            status: proto::SourceStatus {
                source: info.index,
                state: proto::ConnState::Connecting,
                error: None,
                since_unix_nanos: unix_nanos(),
                last_seq: None,
                last_recv_unix_nanos: None,
                counters: proto::SourceCounters::default(),
                gaps: Vec::new(),
            },
            gaps: VecDeque::new(),
            status_dirty: true,
            classifier,
            metrics,
            output,
        }
    }

    /// Replaces the default [`StreamOptions`].
    pub fn with_options(mut self, options: StreamOptions) -> Self {
        self.options = options;
        self
    }

    pub fn counters(&self) -> &proto::SourceCounters {
        &self.status.counters
    }

    pub fn gaps(&self) -> impl Iterator<Item = &proto::Gap> {
        self.gaps.iter()
    }

    pub fn classifier(&self) -> Option<&Classifier> {
        self.classifier.as_ref()
    }

    pub fn state(&self) -> proto::ConnState {
        self.status.state
    }

    /// Changes the connection state (and error text); sends a status at once when it changed.
    pub fn set_state(&mut self, state: proto::ConnState, error: Option<String>) {
        if self.status.state != state || self.status.error != error {
            if self.status.state != state {
                self.status.since_unix_nanos = unix_nanos();
            }
            self.status.state = state;
            self.status.error = error;
            if let Some(m) = &self.metrics {
                m.connected.set(matches!(state, proto::ConnState::Live | proto::ConnState::Stale) as i64);
            }
            self.flush_status();
        }
    }

    /// The connection came back after having been up.
    pub fn count_reconnect(&mut self) {
        self.status.counters.reconnects += 1;
        if let Some(m) = &self.metrics {
            m.reconnects.inc();
        }
        self.status_dirty = true;
    }

    /// Sends the status if anything changed since the last one.
    pub fn flush_status_if_dirty(&mut self) {
        if self.status_dirty {
            self.flush_status();
        }
    }

    pub fn flush_status(&mut self) {
        self.status.gaps = self.gaps.iter().cloned().collect();
        self.output.status(&self.status);
        self.status_dirty = false;
    }

    /// When the last frame arrived.
    pub fn last_recv_unix_nanos(&self) -> Option<u64> {
        self.status.last_recv_unix_nanos
    }

    /// A live message as received from the PUB socket.
    pub fn live(&mut self, frames: Vec<Bytes>, recv_time_nanos: u64) -> LiveOutcome {
        let seq = match parse_live(&frames) {
            Ok(m) => m.seq,
            Err(e) => {
                self.framing_error(e.classify(), &e.to_string(), None, recv_time_nanos, false, &frames);
                return LiveOutcome::Done;
            }
        };
        if self.replay_run {
            return self.close_replay_run(frames, seq, recv_time_nanos);
        }
        let first = std::mem::replace(&mut self.first_frame, false);
        match self.next {
            None if first && seq > 0 && self.late_join_applies() => {
                let mut held = Held::new(frames, seq, recv_time_nanos, 0);
                held.joined_at = Some(seq);
                return LiveOutcome::Gap(held);
            }
            None => {}
            Some(next) if seq == next => {}
            Some(next) if seq > next => return LiveOutcome::Gap(Held::new(frames, seq, recv_time_nanos, next)),
            Some(_) => {
                self.count_restart();
                if seq > 0 {
                    return LiveOutcome::Gap(Held::new(frames, seq, recv_time_nanos, 0));
                }
            }
        }
        self.accept_live(frames, seq, recv_time_nanos);
        LiveOutcome::Done
    }

    /// One reply from the replay socket while a gap is being filled (live mode). Replies
    /// outside the gap, duplicates and the end marker are dropped; frame errors are counted.
    /// Returns false once the gap is filled or the replay ended (stop reading).
    pub fn replay_reply(&mut self, held: &mut Held, frames: Vec<Bytes>, recv_time_nanos: u64) -> bool {
        let (topic, seq, payload) = match parse_replay_reply(&frames) {
            Ok(ReplayReply::End) => return false,
            Ok(ReplayReply::Message { topic, seq, payload }) => {
                (topic.map(<[u8]>::to_vec).unwrap_or_default(), seq, payload.to_vec())
            }
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
        } else if !self.has_replay {
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
    fn late_join_applies(&self) -> bool {
        self.options.late_join_replay && self.has_replay
    }

    /// Whether a gap can be replayed (the source has a replay endpoint).
    pub fn has_replay(&self) -> bool {
        self.has_replay
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
            Ok(ReplayReply::Message { topic, seq, payload }) => {
                (topic.map(<[u8]>::to_vec).unwrap_or_default(), seq, payload.to_vec())
            }
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
        if let Some(gap) = self.gaps.back_mut() {
            gap.to_seq = seq;
            gap.recovered_frames += 1;
        }
    }

    fn open_gap(&mut self, from: u64) {
        self.status.counters.gaps += 1;
        if let Some(m) = &self.metrics {
            m.gaps.inc();
        }
        self.push_gap(proto::Gap {
            from_seq: from,
            to_seq: from,
            recovered_frames: 0,
            lost_frames: 0,
            state: proto::GapState::Recovered,
            reason: None,
            detected_unix_nanos: unix_nanos(),
        });
    }

    fn close_replay_run(&mut self, frames: Vec<Bytes>, seq: u64, recv_time_nanos: u64) -> LiveOutcome {
        self.replay_run = false;
        let next = self.next.unwrap_or(seq);
        if let Some(gap) = self.gaps.pop_back() {
            // The gap was counted when the run opened; record_gap_inner counts it again in the
            // status, so take it back here, and tell it not to touch the Prometheus counter.
            self.status.counters.gaps -= 1;
            let to = if seq >= next { seq.saturating_sub(1).max(gap.to_seq) } else { gap.to_seq };
            let total = to - gap.from_seq + 1;
            let recovered = gap.recovered_frames.min(total);
            let reason = (recovered < total)
                .then(|| "not in the capture (the recorder could not replay it either)".to_owned());
            self.record_gap_inner(gap.from_seq, to, recovered, reason, false);
        }
        if seq < next {
            self.count_restart();
        }
        self.accept_live(frames, seq, recv_time_nanos);
        LiveOutcome::Done
    }

    fn count_restart(&mut self) {
        self.status.counters.restarts += 1;
        if let Some(m) = &self.metrics {
            m.restarts.inc();
        }
        self.next = None;
        self.status_dirty = true;
    }

    fn record_gap(&mut self, from: u64, to: u64, recovered: u64, reason: Option<String>) {
        self.record_gap_inner(from, to, recovered, reason, true);
    }

    fn record_gap_inner(&mut self, from: u64, to: u64, recovered: u64, reason: Option<String>, count_metric: bool) {
        let total = to - from + 1;
        let lost = total - recovered;
        self.status.counters.gaps += 1;
        self.status.counters.lost_frames += lost;
        if let Some(m) = &self.metrics {
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
        self.push_gap(proto::Gap {
            from_seq: from,
            to_seq: to,
            recovered_frames: recovered,
            lost_frames: lost,
            state,
            reason,
            detected_unix_nanos: unix_nanos(),
        });
        self.flush_status();
    }

    fn push_gap(&mut self, gap: proto::Gap) {
        if self.gaps.len() == MAX_GAPS_IN_STATUS {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
        self.status_dirty = true;
    }

    fn accept_live(&mut self, frames: Vec<Bytes>, seq: u64, recv_time_nanos: u64) {
        let topic = frames[0].to_vec();
        let payload = frames[2].to_vec();
        self.relay(seq, recv_time_nanos, false, topic, payload, &frames);
        self.next = Some(seq + 1);
    }

    fn relay(&mut self, seq: u64, recv_time_nanos: u64, replayed: bool, topic: Vec<u8>, payload: Vec<u8>, raw: &[Bytes]) {
        if payload.len() > self.options.max_frame_bytes {
            self.refuse_oversized(seq, recv_time_nanos, replayed, payload.len(), raw);
            return;
        }
        let c = &mut self.status.counters;
        c.frames += 1;
        c.payload_bytes += payload.len() as u64;
        if replayed {
            c.replayed_frames += 1;
        }
        if let Some(m) = &self.metrics {
            m.frames.inc();
            m.payload_bytes.inc_by(payload.len() as u64);
            if replayed {
                m.replayed_frames.inc();
            }
        }
        self.status.last_seq = Some(seq);
        self.status.last_recv_unix_nanos = Some(recv_time_nanos);
        self.status_dirty = true;
        let decode_error = match &mut self.classifier {
            Some(c) => c.classify(seq, &payload).err(),
            None => None,
        };
        let frame = proto::Frame { source: self.index, seq, recv_time_nanos, replayed, topic, payload };
        self.output.frame(&frame, raw);
        if let Some(err) = decode_error {
            self.status.counters.decode_errors += 1;
            if let Some(m) = &self.metrics {
                m.decode_error(err.classify().as_str());
            }
            let text = format!("{} seq {seq}: {err}", self.key);
            tracing::debug!("{text}");
            let error = proto::FrameError {
                source: self.index,
                kind: "decode".to_owned(),
                decode_kind: Some(err.classify().as_str().to_owned()),
                text,
                seq: Some(seq),
                recv_time_nanos,
                replayed,
                frames: Vec::new(),
            };
            self.output.frame_error(&error, &[]);
        }
    }

    /// A payload over `--max-frame-bytes`: counted and shown, recorded as received, never decoded
    /// or relayed (the browser would have to hold it too).
    fn refuse_oversized(&mut self, seq: u64, recv_time_nanos: u64, replayed: bool, len: usize, raw: &[Bytes]) {
        self.status.last_seq = Some(seq);
        self.status.last_recv_unix_nanos = Some(recv_time_nanos);
        let text = format!(
            "{} seq {seq}: payload of {len} bytes is larger than --max-frame-bytes {}; refused before decoding \
             (raise --max-frame-bytes if this engine's batches are really that large)",
            self.key, self.options.max_frame_bytes
        );
        self.count_frame_error(proto::FRAME_TOO_LARGE, text, Some(seq), recv_time_nanos, replayed, Vec::new(), raw);
    }

    fn framing_error(&mut self, kind: &str, what: &str, seq: Option<u64>, recv_time_nanos: u64, replayed: bool, frames: &[Bytes]) {
        let via = if replayed { " (replay reply)" } else { "" };
        let text = format!("{}{via}: {what}", self.key);
        let bytes = frames.iter().map(|f| serde_bytes::ByteBuf::from(f.to_vec())).collect();
        self.count_frame_error(kind, text, seq, recv_time_nanos, replayed, bytes, frames);
    }

    #[allow(clippy::too_many_arguments)] // one call per kind of framing error; a struct would only rename them
    fn count_frame_error(
        &mut self,
        kind: &str,
        text: String,
        seq: Option<u64>,
        recv_time_nanos: u64,
        replayed: bool,
        bytes: Vec<serde_bytes::ByteBuf>,
        raw: &[Bytes],
    ) {
        self.status.counters.frame_errors += 1;
        self.status_dirty = true;
        if let Some(m) = &self.metrics {
            m.frame_error(kind);
        }
        tracing::debug!("{text}");
        let error = proto::FrameError {
            source: self.index,
            kind: kind.to_owned(),
            decode_kind: None,
            text,
            seq,
            recv_time_nanos,
            replayed,
            frames: bytes,
        };
        self.output.frame_error(&error, raw);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        frames: Vec<(u64, bool)>,
        errors: Vec<String>,
    }

    impl Output for Collect {
        fn frame(&mut self, f: &proto::Frame, _: &[Bytes]) {
            self.frames.push((f.seq, f.replayed));
        }
        fn frame_error(&mut self, e: &proto::FrameError, _: &[Bytes]) {
            self.errors.push(e.text.clone());
        }
        fn status(&mut self, _: &proto::SourceStatus) {}
    }

    fn info(replay: bool) -> proto::SourceInfo {
        proto::SourceInfo {
            index: 0,
            key: "0:0".into(),
            worker_id: "0".into(),
            dp_rank: 0,
            endpoint: "tcp://127.0.0.1:1".into(),
            replay_endpoint: replay.then(|| "tcp://127.0.0.1:2".into()),
        }
    }

    fn live(seq: u64) -> Vec<Bytes> {
        vec![Bytes::from_static(b"kv"), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from_static(b"\x90")]
    }

    fn reply(seq: u64) -> Vec<Bytes> {
        vec![Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from_static(b"\x90")]
    }

    #[test]
    fn a_gap_is_replayed_in_order_before_the_frame_that_revealed_it() {
        let joined_as_is = StreamOptions { late_join_replay: false, ..StreamOptions::default() };
        let mut p = Pipeline::new(&info(true), None, None, Collect::default()).with_options(joined_as_is);
        for seq in [5, 6] {
            assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
        }
        let LiveOutcome::Gap(mut held) = p.live(live(10), 0) else { panic!() };
        assert_eq!((held.from_seq, held.to_seq), (7, 9));
        assert!(p.replay_reply(&mut held, reply(6), 0)); // already seen: dropped
        assert!(p.replay_reply(&mut held, reply(7), 0));
        assert!(p.replay_reply(&mut held, reply(8), 0));
        assert!(!p.replay_reply(&mut held, reply(9), 0));
        p.finish_gap(held, None);
        assert_eq!(p.output.frames, vec![(5, false), (6, false), (7, true), (8, true), (9, true), (10, false)]);
        let c = p.counters();
        assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (1, 0, 3, 6));
    }

    #[test]
    fn a_gap_without_replay_is_lost_and_says_which_flag() {
        let mut p = Pipeline::new(&info(false), None, None, Collect::default());
        p.live(live(0), 0);
        let LiveOutcome::Gap(held) = p.live(live(4), 0) else { panic!() };
        p.finish_gap(held, None);
        let gap = p.gaps().next().unwrap().clone();
        assert_eq!((gap.from_seq, gap.to_seq, gap.lost_frames, gap.state), (1, 3, 3, proto::GapState::Unrecovered));
        assert_eq!(
            gap.reason.unwrap(),
            "no replay endpoint configured for 0:0; pass --replay \"0:0=tcp://HOST:PORT\" with the engine's replay port"
        );
    }

    #[test]
    fn a_late_join_replays_from_zero_and_names_what_the_buffer_no_longer_held() {
        let mut p = Pipeline::new(&info(true), None, None, Collect::default());
        let LiveOutcome::Gap(mut held) = p.live(live(8), 0) else { panic!("a first seq above 0 is a late join") };
        assert_eq!((held.from_seq, held.to_seq), (0, 7));
        // The engine's buffer starts at 3: 0..=2 are gone.
        for seq in 3..7 {
            assert!(p.replay_reply(&mut held, reply(seq), 0));
        }
        assert!(!p.replay_reply(&mut held, reply(7), 0));
        p.finish_gap(held, None);
        assert_eq!(p.output.frames, vec![(3, true), (4, true), (5, true), (6, true), (7, true), (8, false)]);
        let c = p.counters();
        assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (1, 3, 5, 6));
        let gap = p.gaps().next().unwrap().clone();
        assert_eq!((gap.from_seq, gap.to_seq, gap.recovered_frames, gap.state), (0, 7, 5, proto::GapState::Partial));
        assert_eq!(
            gap.reason.unwrap(),
            "joined the stream at seq 8, replayed from 0: the engine's replay buffer no longer held seq 0..=2; \
             raise the engine's replay buffer size"
        );
        // Later jumps are ordinary gaps, and an engine restart is not a late join.
        for seq in [9, 0] {
            assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
        }
    }

    #[test]
    fn a_late_join_is_taken_as_is_without_replay_or_when_turned_off() {
        let mut p = Pipeline::new(&info(false), None, None, Collect::default());
        assert!(matches!(p.live(live(8), 0), LiveOutcome::Done));
        let off = StreamOptions { late_join_replay: false, ..StreamOptions::default() };
        let mut p = Pipeline::new(&info(true), None, None, Collect::default()).with_options(off);
        assert!(matches!(p.live(live(8), 0), LiveOutcome::Done));
        assert_eq!(p.counters().gaps, 0);
    }

    #[test]
    fn a_replay_that_stops_early_reports_the_tail_it_did_not_deliver() {
        let mut p = Pipeline::new(&info(true), None, None, Collect::default());
        p.live(live(0), 0);
        let LiveOutcome::Gap(mut held) = p.live(live(10), 0) else { panic!() };
        assert!(p.replay_reply(&mut held, reply(1), 0));
        assert!(p.replay_reply(&mut held, reply(2), 0));
        p.finish_gap(held, None);
        let gap = p.gaps().next().unwrap().clone();
        assert_eq!((gap.recovered_frames, gap.lost_frames), (2, 7));
        assert!(gap.reason.unwrap().contains("no longer held seq 3..=9;"));
    }

    #[test]
    fn an_oversized_payload_is_refused_before_decoding_and_its_seq_consumed() {
        let small = StreamOptions { max_frame_bytes: 4, ..StreamOptions::default() };
        let mut p = Pipeline::new(&info(false), None, None, Collect::default()).with_options(small);
        p.live(live(0), 0);
        let big = vec![Bytes::from_static(b"kv"), Bytes::copy_from_slice(&1u64.to_be_bytes()), Bytes::from_static(b"\x95\x90\x90\x90\x90\x90")];
        p.live(big, 0);
        p.live(live(2), 0);
        assert_eq!(p.output.frames, vec![(0, false), (2, false)]);
        assert_eq!(
            p.output.errors,
            vec!["0:0 seq 1: payload of 6 bytes is larger than --max-frame-bytes 4; refused before decoding \
                  (raise --max-frame-bytes if this engine's batches are really that large)"
                .to_owned()]
        );
        let c = p.counters();
        assert_eq!((c.frame_errors, c.frames, c.gaps), (1, 2, 0));
    }

    #[test]
    fn seq_back_to_zero_is_a_restart_not_a_gap() {
        let mut p = Pipeline::new(&info(true), None, None, Collect::default());
        for seq in [0, 1, 2, 0, 1] {
            assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
        }
        let c = p.counters();
        assert_eq!((c.restarts, c.gaps, c.frames), (1, 0, 5));
    }

    #[test]
    fn capture_replay_counts_gaps_like_the_live_server() {
        // Live: 0 1 [gap 2..=4, replay delivered 2 and 3] 5, recorded in relay order.
        let mut p = Pipeline::new(&info(true), None, None, Collect::default());
        p.capture_record(live(0), 0, false);
        p.capture_record(live(1), 0, false);
        p.capture_record(reply(2), 0, true);
        p.capture_record(reply(3), 0, true);
        p.capture_record(live(5), 0, false);
        p.capture_record(live(9), 0, false);
        let c = p.counters().clone();
        assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (2, 1 + 3, 2, 6));
        let gaps: Vec<_> = p.gaps().map(|g| (g.from_seq, g.to_seq, g.recovered_frames, g.lost_frames)).collect();
        assert_eq!(gaps, vec![(2, 4, 2, 1), (6, 8, 0, 3)]);
    }

    #[test]
    fn framing_errors_are_counted_and_the_stream_goes_on() {
        let mut p = Pipeline::new(&info(false), None, None, Collect::default());
        p.live(vec![Bytes::from_static(b"kv"), Bytes::from_static(b"\x90")], 0);
        p.live(vec![Bytes::from_static(b"kv"), Bytes::from_static(b"\x01\x02"), Bytes::from_static(b"\x90")], 0);
        p.live(live(0), 0);
        assert_eq!(
            p.output.errors,
            vec![
                "0:0: expected 3 frames [topic, seq, payload], got 2".to_owned(),
                "0:0: expected an 8-byte big-endian sequence number in frame 1, got 2 bytes".to_owned(),
            ]
        );
        assert_eq!((p.counters().frame_errors, p.counters().frames), (2, 1));
    }
}
