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

use bytes::Bytes;
use kvscope_protocol as proto;
use kvscope_wire::Decoded;
use kvscope_wire::frame::parse_live;

use crate::classify::Classifier;
use crate::metrics::SourceMetrics;
use crate::source_state::{Silence, SourceState};

mod gaps;

/// What a quiet engine source is quiet about.
const SILENCE: Silence = Silence { nothing: "frame", maybe: "the engine may be idle or hung" };

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
    /// replay reply) for recording; `decoded`, its payload as the classifier decoded it, when
    /// [`Output::takes_decoded`].
    fn frame(&mut self, frame: &proto::Frame, raw: &[Bytes], decoded: Option<Decoded>);
    /// Whether this output decodes payloads again (the live router task, `check`'s reconciler
    /// and index model): the pipeline then hands it the classifier's decode.
    fn takes_decoded(&self) -> bool {
        false
    }
    /// A framing or decode error.
    fn frame_error(&mut self, error: &proto::FrameError, raw: &[Bytes]);
    /// The source's current status.
    fn status(&mut self, status: &proto::SourceStatus);
}

/// An output that drops everything (`check`).
#[derive(Debug, Default)]
pub struct NoOutput;

impl Output for NoOutput {
    fn frame(&mut self, _: &proto::Frame, _: &[Bytes], _: Option<Decoded>) {}
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
    /// The engine's replay socket, for gaps (none: gaps are lost).
    replay_endpoint: Option<String>,
    replay_hint: String,
    next: Option<u64>,
    /// No frame was taken yet since the pipeline started (engine restarts do not reset it).
    first_frame: bool,
    options: StreamOptions,
    /// A capture's replayed run is open (file mode only).
    replay_run: bool,
    /// Status, counters and gaps: what the page and `/metrics` see of this source.
    source: SourceState,
    classifier: Option<Classifier>,
    pub output: O,
}

impl<O: Output> std::fmt::Debug for Pipeline<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("key", &self.key).field("next", &self.next).finish_non_exhaustive()
    }
}

crate::source_state::tracked_source!(Pipeline);

impl<O: Output> Pipeline<O> {
    pub fn new(info: &proto::SourceInfo, classifier: Option<Classifier>, metrics: Option<SourceMetrics>, output: O) -> Self {
        Pipeline {
            index: info.index,
            key: info.key.clone(),
            replay_endpoint: info.replay_endpoint.clone(),
            replay_hint: format!(
                "no replay endpoint configured for {}; pass --replay \"{}=tcp://HOST:PORT\" with the engine's replay port",
                info.key, info.key
            ),
            next: None,
            first_frame: true,
            options: StreamOptions::default(),
            replay_run: false,
            source: SourceState::new(info.index, metrics, SILENCE),
            classifier,
            output,
        }
    }

    /// Replaces the default [`StreamOptions`].
    pub fn with_options(mut self, options: StreamOptions) -> Self {
        self.options = options;
        self
    }

    pub fn classifier(&self) -> Option<&Classifier> {
        self.classifier.as_ref()
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
        let c = &mut self.source.status.counters;
        c.frames += 1;
        c.payload_bytes += payload.len() as u64;
        if replayed {
            c.replayed_frames += 1;
        }
        if let Some(m) = &self.source.metrics {
            m.frames.inc();
            m.payload_bytes.inc_by(payload.len() as u64);
            if replayed {
                m.replayed_frames.inc();
            }
        }
        self.source.received(seq, recv_time_nanos);
        // One decode for the classifier and what the output feeds next (the router task, check),
        // whose tokens hashes read the ids this walk writes out as it counts them.
        let decoded = self.output.takes_decoded().then(|| Decoded::with_token_bytes(&payload));
        let decode_error = match &mut self.classifier {
            Some(c) => c.classify(seq, &payload, decoded.as_ref()).err(),
            None => None,
        };
        let frame = proto::Frame { source: self.index, seq, recv_time_nanos, replayed, topic, payload };
        self.output.frame(&frame, raw, decoded);
        if let Some(err) = decode_error {
            self.source.status.counters.decode_errors += 1;
            if let Some(m) = &self.source.metrics {
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
        self.source.received(seq, recv_time_nanos);
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
        self.source.count_frame_error(kind);
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

#[cfg(test)]
mod tests;
