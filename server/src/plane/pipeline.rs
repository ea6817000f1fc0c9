//! One event-plane source's stream, socket-free: what arrived (a NATS message `[subject, body]`
//! or Dynamo's ZMQ-plane 4 frames), its envelope's publisher and sequence, gaps per publisher,
//! framing errors, counters and status. The live intake (`plane::nats`, `intake::run_subscribed`), `replay`
//! and `check` drive it alike, so a capture is counted as the live server counted it.
//!
//! Rules:
//! - every arrival takes the next `seq` of the source (its arrival counter), relayed or not, so
//!   a frame error names a position too;
//! - an envelope that does not decode is a counted `envelope` frame error with its bytes kept
//!   (and recorded); the source goes on;
//! - per publisher, the first sequence is taken as is (a core subscription has no history to
//!   ask for); a jump forward from `next` to `s` is a gap `[next, s-1]`, lost for good, since
//!   Dynamo's event plane has no replay; a jump back is a publisher restart.

use std::collections::HashMap;

use bytes::Bytes;
use kvscope_protocol as proto;

use crate::metrics::SourceMetrics;
use crate::source_state::{Silence, SourceState, TrackedSource};
use crate::stream::Output;
use crate::time::unix_nanos;
use kvscope_router::{Envelope, split_zmq_plane};

/// What a quiet event-plane source is quiet about.
const SILENCE: Silence = Silence { nothing: "event-plane message", maybe: "the relays may be idle" };

/// The frame-error kind of an envelope that does not decode.
pub const ENVELOPE_ERROR: &str = "envelope";

/// One event-plane source's stream state.
pub struct PlanePipeline<O: Output> {
    pub index: u32,
    pub key: String,
    max_frame_bytes: usize,
    arrivals: u64,
    /// Next expected envelope sequence, per publisher.
    publishers: HashMap<u64, u64>,
    /// Status, counters and gaps: what the page and `/metrics` see of this source.
    source: SourceState,
    /// The live reconciler, when the server runs one.
    router: Option<crate::router::Tap>,
    pub output: O,
}

impl<O: Output> std::fmt::Debug for PlanePipeline<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanePipeline").field("key", &self.key).field("arrivals", &self.arrivals).finish_non_exhaustive()
    }
}

crate::source_state::tracked_source!(PlanePipeline);

impl<O: Output> PlanePipeline<O> {
    pub fn new(info: &proto::SourceInfo, max_frame_bytes: usize, metrics: Option<SourceMetrics>, output: O) -> Self {
        PlanePipeline {
            index: info.index,
            key: info.key.clone(),
            max_frame_bytes,
            arrivals: 0,
            publishers: HashMap::new(),
            source: SourceState::new(info.index, metrics, SILENCE),
            router: None,
            output,
        }
    }

    /// Sends every decoded envelope to the live reconciler (then [`PlanePipeline::message`]
    /// returns `None`).
    pub fn with_router(mut self, tap: Option<crate::router::Tap>) -> Self {
        self.router = tap;
        self
    }

    /// Publishers seen so far.
    pub fn num_publishers(&self) -> usize {
        self.publishers.len()
    }

    /// One message as it arrived: `[subject, body]` from NATS, the 4 frames from the ZMQ plane.
    /// Returns the decoded envelope when the message was relayed and no live reconciler takes it
    /// (`check` feeds its own); its RouterEvents are not decoded here.
    pub fn message(&mut self, frames: Vec<Bytes>, recv_time_nanos: u64) -> Option<Envelope> {
        let seq = self.arrivals;
        self.arrivals += 1;
        self.source.received(seq, recv_time_nanos);
        // NATS: the body is the envelope. ZMQ plane: kvscope-router checks the 4 frames, and that
        // the envelope names the frames' publisher and sequence.
        let parts: Vec<&[u8]> = frames.iter().map(|f| f.as_ref()).collect();
        let zmq = match frames.len() {
            2 => None,
            _ => match split_zmq_plane(&parts) {
                Ok(m) => Some(m),
                Err(e) => return self.frame_error("zmq_plane_framing", e.to_string(), seq, recv_time_nanos, &frames),
            },
        };
        let envelope = match &zmq {
            Some(m) => frames[3].slice(frames[3].len() - m.envelope.len()..),
            None => frames[1].clone(),
        };
        if envelope.len() > self.max_frame_bytes {
            let what = format!(
                "envelope of {} bytes is larger than --max-frame-bytes {}; refused before decoding",
                envelope.len(),
                self.max_frame_bytes
            );
            return self.frame_error(proto::FRAME_TOO_LARGE, what, seq, recv_time_nanos, &frames);
        }
        let decoded = match &zmq {
            Some(m) => m.decode_envelope(),
            None => kvscope_router::decode_envelope(&envelope),
        };
        let env = match decoded {
            Ok(env) => env,
            Err(e) => return self.frame_error(ENVELOPE_ERROR, e.to_string(), seq, recv_time_nanos, &frames),
        };
        self.track(env.publisher_id, env.sequence);
        let c = &mut self.source.status.counters;
        c.frames += 1;
        c.payload_bytes += envelope.len() as u64;
        if let Some(m) = &self.source.metrics {
            m.frames.inc();
            m.payload_bytes.inc_by(envelope.len() as u64);
        }
        let frame = proto::Frame {
            source: self.index,
            seq,
            recv_time_nanos,
            replayed: false,
            topic: frames[0].to_vec(),
            payload: envelope.to_vec(),
        };
        self.output.frame(&frame, &frames, None);
        match &self.router {
            Some(tap) => {
                tap.send(crate::router::Input::Plane(env));
                None
            }
            None => Some(env),
        }
    }

    fn track(&mut self, publisher: u64, sequence: u64) {
        let next = self.publishers.insert(publisher, sequence.saturating_add(1));
        match next {
            // The first heard is the start, past 0 or not (`kvscope_router::subscribed_late`).
            None => {}
            Some(n) if sequence == n => {}
            Some(n) if sequence > n => self.record_gap(publisher, n, sequence - 1),
            Some(_) => {
                self.source.count_restart();
                tracing::info!(source = %self.key, "publisher {publisher} restarted its sequence at {sequence}");
            }
        }
    }

    fn record_gap(&mut self, publisher: u64, from: u64, to: u64) {
        let lost = to - from + 1;
        self.source.count_gap(lost);
        let reason = format!(
            "publisher {publisher}: envelope sequence {from}..={to} never arrived here; Dynamo's event plane has no \
             replay (a NATS core subscription or ZMQ SUB loses what was published while it was away)"
        );
        tracing::warn!(source = %self.key, "{reason}");
        self.source.push_gap(proto::Gap {
            from_seq: from,
            to_seq: to,
            recovered_frames: 0,
            lost_frames: lost,
            publisher_id: Some(publisher),
            state: proto::GapState::Unrecovered,
            reason: Some(reason),
            detected_unix_nanos: unix_nanos(),
        });
        self.flush_status();
    }

    fn frame_error(&mut self, kind: &str, what: String, seq: u64, recv_time_nanos: u64, frames: &[Bytes]) -> Option<Envelope> {
        self.source.count_frame_error(kind);
        let text = format!("{} seq {seq}: {what}", self.key);
        tracing::debug!("{text}");
        let error = proto::FrameError {
            source: self.index,
            kind: kind.to_owned(),
            decode_kind: None,
            text,
            seq: Some(seq),
            recv_time_nanos,
            replayed: false,
            frames: frames.iter().map(|f| serde_bytes::ByteBuf::from(f.to_vec())).collect(),
        };
        self.output.frame_error(&error, frames);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        frames: Vec<u64>,
        errors: Vec<String>,
    }

    impl Output for Collect {
        fn frame(&mut self, f: &proto::Frame, _: &[Bytes], _: Option<kvscope_wire::Decoded>) {
            self.frames.push(f.seq);
        }
        fn frame_error(&mut self, e: &proto::FrameError, _: &[Bytes]) {
            self.errors.push(e.text.clone());
        }
        fn status(&mut self, _: &proto::SourceStatus) {}
    }

    fn envelope(publisher: u64, sequence: u64) -> Bytes {
        #[derive(serde::Serialize)]
        struct E {
            publisher_id: u64,
            sequence: u64,
            published_at: u64,
            topic: &'static str,
            #[serde(with = "serde_bytes")]
            payload: Vec<u8>,
        }
        let e = E { publisher_id: publisher, sequence, published_at: 1, topic: "kv-events", payload: vec![0x90] };
        Bytes::from(rmp_serde::to_vec_named(&e).unwrap())
    }

    fn nats(publisher: u64, sequence: u64) -> Vec<Bytes> {
        vec![Bytes::from_static(b"namespace.ns.component.backend.kv-events"), envelope(publisher, sequence)]
    }

    fn info() -> proto::SourceInfo {
        proto::SourceInfo {
            index: 3,
            key: "plane:nats://127.0.0.1:4222".into(),
            worker_id: String::new(),
            dp_rank: 0,
            endpoint: "nats://127.0.0.1:4222".into(),
            replay_endpoint: None,
            kind: proto::SourceKind::EventPlane,
            event_plane: None,
            block_size: None,
        }
    }

    #[test]
    fn gaps_are_per_publisher_and_a_corrupt_envelope_does_not_stop_the_stream() {
        let mut p = PlanePipeline::new(&info(), 1 << 20, None, Collect::default());
        p.message(nats(7, 0), 0);
        p.message(nats(9, 5), 0); // a second publisher joins mid-stream: taken as is
        p.message(nats(7, 1), 0);
        p.message(vec![Bytes::from_static(b"x.kv-events"), Bytes::from_static(b"\xc1\xc1")], 0);
        p.message(nats(7, 4), 0); // 2..=3 of publisher 7 never came
        p.message(nats(9, 6), 0);
        p.message(nats(9, 0), 0); // publisher 9 restarted
        assert_eq!(p.output.frames, vec![0, 1, 2, 4, 5, 6]);
        assert_eq!(p.output.errors.len(), 1);
        assert!(p.output.errors[0].starts_with("plane:nats://127.0.0.1:4222 seq 3: envelope: byte 0"), "{}", p.output.errors[0]);
        let c = p.counters();
        assert_eq!((c.frames, c.frame_errors, c.gaps, c.lost_frames, c.restarts), (6, 1, 1, 2, 1));
        let g = p.gaps().next().unwrap();
        assert_eq!((g.publisher_id, g.from_seq, g.to_seq, g.lost_frames), (Some(7), 2, 3, 2));
        assert_eq!(p.num_publishers(), 2);
    }

    #[test]
    fn zmq_plane_frames_relay_the_envelope_alone() {
        let mut p = PlanePipeline::new(&info(), 1 << 20, None, Collect::default());
        let env = envelope(7, 0);
        let mut last = vec![1u8];
        last.extend_from_slice(&(env.len() as u32).to_be_bytes());
        last.extend_from_slice(&env);
        let frames = vec![
            Bytes::from_static(b"kv-events"),
            Bytes::copy_from_slice(&7u64.to_be_bytes()),
            Bytes::copy_from_slice(&0u64.to_be_bytes()),
            Bytes::from(last),
        ];
        p.message(frames, 0);
        p.message(vec![Bytes::from_static(b"kv-events"), Bytes::new(), Bytes::new()], 0);
        assert_eq!(p.output.frames, vec![0]);
        assert_eq!(p.counters().payload_bytes, env.len() as u64);
        assert_eq!(
            p.output.errors,
            vec![
                "plane:nats://127.0.0.1:4222 seq 1: ZMQ plane frames: expected 4 frames [topic, publisher id, sequence, envelope], got 3"
                    .to_owned()
            ]
        );
    }
}
