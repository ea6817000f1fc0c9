//! What every source of the server shares, whichever stream it reads: its status (connection
//! state, counters, gaps), when that status is sent, and the rule that shows a quiet source as
//! stale.
//!
//! An engine's pipeline ([`crate::stream::Pipeline`]) and an event plane's
//! ([`crate::plane::PlanePipeline`]) each hold one [`SourceState`] and implement [`TrackedSource`]. So
//! the connection loops ([`crate::intake::run_subscribed`], `plane::nats`), the capture feed
//! (`app`) and `check` drive both kinds through one interface, and a status rule lives here once.

use std::collections::VecDeque;
use std::time::Duration;

use kvscope_protocol as proto;

use crate::metrics::SourceMetrics;
use crate::stream::{Output, Pipeline};
use crate::time::unix_nanos;

/// Gaps kept in a status message (the oldest go first).
pub const MAX_GAPS_IN_STATUS: usize = 32;

/// What a quiet source is quiet about, in its stale note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Silence {
    /// What did not arrive: "frame".
    pub nothing: &'static str,
    /// What that may mean: "the engine may be idle or hung".
    pub maybe: &'static str,
}

/// One source's status as the page and `/metrics` see it, and when it is sent.
#[derive(Debug)]
pub struct SourceState {
    pub(crate) status: proto::SourceStatus,
    pub(crate) gaps: VecDeque<proto::Gap>,
    /// Something changed since the last status was sent.
    pub(crate) dirty: bool,
    pub(crate) metrics: Option<SourceMetrics>,
    silence: Silence,
}

impl SourceState {
    pub fn new(index: u32, metrics: Option<SourceMetrics>, silence: Silence) -> SourceState {
        SourceState {
            status: proto::SourceStatus {
                source: index,
                state: proto::ConnState::Connecting,
                error: None,
                since_unix_nanos: unix_nanos(),
                last_seq: None,
                last_recv_unix_nanos: None,
                counters: proto::SourceCounters::default(),
                gaps: Vec::new(),
            },
            gaps: VecDeque::new(),
            dirty: true,
            metrics,
            silence,
        }
    }

    /// A frame (or message) at `seq` arrived at `recv_time_nanos`.
    pub(crate) fn received(&mut self, seq: u64, recv_time_nanos: u64) {
        self.status.last_seq = Some(seq);
        self.status.last_recv_unix_nanos = Some(recv_time_nanos);
        self.dirty = true;
    }

    /// Keeps a gap for the status, dropping the oldest beyond [`MAX_GAPS_IN_STATUS`].
    pub(crate) fn push_gap(&mut self, gap: proto::Gap) {
        if self.gaps.len() == MAX_GAPS_IN_STATUS {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
        self.dirty = true;
    }

    /// The stream started over (an engine's seq or a publisher's sequence went back).
    pub(crate) fn count_restart(&mut self) {
        self.status.counters.restarts += 1;
        if let Some(m) = &self.metrics {
            m.restarts.inc();
        }
        self.dirty = true;
    }

    /// A gap of `lost` frames that no replay brought back (yet).
    pub(crate) fn count_gap(&mut self, lost: u64) {
        self.status.counters.gaps += 1;
        self.status.counters.lost_frames += lost;
        if let Some(m) = &self.metrics {
            m.gaps.inc();
            m.lost_frames.inc_by(lost);
        }
        self.dirty = true;
    }

    /// A frame that could not be taken; `kind` is the metric's label.
    pub(crate) fn count_frame_error(&mut self, kind: &str) {
        self.status.counters.frame_errors += 1;
        if let Some(m) = &self.metrics {
            m.frame_error(kind);
        }
        self.dirty = true;
    }

    fn set_conn(&mut self, state: proto::ConnState, error: Option<String>, out: &mut dyn Output) {
        if self.status.state == state && self.status.error == error {
            return;
        }
        if self.status.state != state {
            self.status.since_unix_nanos = unix_nanos();
        }
        self.status.state = state;
        self.status.error = error;
        if let Some(m) = &self.metrics {
            m.connected.set(matches!(state, proto::ConnState::Live | proto::ConnState::Stale) as i64);
        }
        self.flush(out);
    }

    fn flush(&mut self, out: &mut dyn Output) {
        self.status.gaps = self.gaps.iter().cloned().collect();
        out.status(&self.status);
        self.dirty = false;
    }

    /// The stale note when a live source has been quiet for longer than `stale_after`.
    fn stale_note(&self, stale_after: Duration, now: u64) -> Option<String> {
        let last = self.status.last_recv_unix_nanos?;
        let idle = now.saturating_sub(last);
        (self.status.state == proto::ConnState::Live && idle > stale_after.as_nanos() as u64).then(|| {
            format!(
                "no {} for {}s (--stale-after {}s); {}",
                self.silence.nothing,
                idle / 1_000_000_000,
                stale_after.as_secs(),
                self.silence.maybe
            )
        })
    }
}

/// A source the server reads, seen through its status: what the connection loops, the capture
/// feed and `check` need of an engine's pipeline and an event plane's alike.
pub trait TrackedSource {
    /// `worker:…` or `plane:…`, as logs, metrics and errors name the source.
    fn key(&self) -> &str;
    fn source_state(&self) -> &SourceState;
    /// The state and where its status goes.
    fn state_and_output(&mut self) -> (&mut SourceState, &mut dyn Output);

    fn state(&self) -> proto::ConnState {
        self.source_state().status.state
    }

    fn counters(&self) -> &proto::SourceCounters {
        &self.source_state().status.counters
    }

    fn gaps(&self) -> std::collections::vec_deque::Iter<'_, proto::Gap> {
        self.source_state().gaps.iter()
    }

    /// When the last frame arrived.
    fn last_recv_unix_nanos(&self) -> Option<u64> {
        self.source_state().status.last_recv_unix_nanos
    }

    /// Changes the connection state (and error text); sends a status at once when it changed.
    fn set_state(&mut self, state: proto::ConnState, error: Option<String>) {
        let (s, out) = self.state_and_output();
        s.set_conn(state, error, out);
    }

    /// The connection came back after having been up.
    fn count_reconnect(&mut self) {
        let s = self.state_and_output().0;
        s.status.counters.reconnects += 1;
        if let Some(m) = &s.metrics {
            m.reconnects.inc();
        }
        s.dirty = true;
    }

    fn flush_status(&mut self) {
        let (s, out) = self.state_and_output();
        s.flush(out);
    }

    /// Sends the status if anything changed since the last one.
    fn flush_status_if_dirty(&mut self) {
        let (s, out) = self.state_and_output();
        if s.dirty {
            s.flush(out);
        }
    }

    /// Shows a live source as stale after `stale_after` without a frame.
    fn check_stale(&mut self, stale_after: Duration) {
        let (s, out) = self.state_and_output();
        if let Some(note) = s.stale_note(stale_after, unix_nanos()) {
            s.set_conn(proto::ConnState::Stale, Some(note), out);
        }
    }

    /// A frame arrived: a stale source is live again.
    fn wake(&mut self) {
        if self.state() == proto::ConnState::Stale {
            self.set_state(proto::ConnState::Live, None);
        }
    }

    /// The source's name and totals, for the summary printed at exit.
    fn summary(&self) -> SourceSummary {
        SourceSummary { key: self.key().to_owned(), counters: self.counters().clone() }
    }
}

/// Implements [`TrackedSource`] for a pipeline generic over its [`Output`], whose fields
/// `key`, `source` (its [`SourceState`]) and `output` say the rest.
macro_rules! tracked_source {
    ($pipeline:ident) => {
        impl<O: $crate::stream::Output> $crate::source_state::TrackedSource for $pipeline<O> {
            fn key(&self) -> &str {
                &self.key
            }

            fn source_state(&self) -> &$crate::source_state::SourceState {
                &self.source
            }

            fn state_and_output(&mut self) -> (&mut $crate::source_state::SourceState, &mut dyn $crate::stream::Output) {
                (&mut self.source, &mut self.output)
            }
        }
    };
}
pub(crate) use tracked_source;

/// Per-source totals, for the summary printed at exit.
#[derive(Clone, Debug)]
pub struct SourceSummary {
    pub key: String,
    pub counters: proto::SourceCounters,
}

/// An engine's pipeline or an event plane's, for a feed that holds both (a capture, `check`).
/// `P` is the event plane's output when it differs from the engines'.
#[derive(Debug)]
pub enum AnyPipeline<E: Output, P: Output = E> {
    Engine(Pipeline<E>),
    Plane(crate::plane::PlanePipeline<P>),
}

impl<E: Output, P: Output> AnyPipeline<E, P> {
    /// A capture record: an engine's through its stream rules, an event plane's as it arrived.
    /// Returns an event plane's decoded envelope when no live reconciler took it.
    pub fn capture_record(&mut self, frames: Vec<bytes::Bytes>, recv_time_nanos: u64, replayed: bool) -> Option<kvscope_router::Envelope> {
        match self {
            AnyPipeline::Engine(p) => {
                p.capture_record(frames, recv_time_nanos, replayed);
                None
            }
            AnyPipeline::Plane(p) => p.message(frames, recv_time_nanos),
        }
    }
}

impl<E: Output, P: Output> TrackedSource for AnyPipeline<E, P> {
    fn key(&self) -> &str {
        match self {
            AnyPipeline::Engine(p) => p.key(),
            AnyPipeline::Plane(p) => p.key(),
        }
    }

    fn source_state(&self) -> &SourceState {
        match self {
            AnyPipeline::Engine(p) => p.source_state(),
            AnyPipeline::Plane(p) => p.source_state(),
        }
    }

    fn state_and_output(&mut self) -> (&mut SourceState, &mut dyn Output) {
        match self {
            AnyPipeline::Engine(p) => p.state_and_output(),
            AnyPipeline::Plane(p) => p.state_and_output(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: Silence = Silence { nothing: "frame", maybe: "the engine may be idle or hung" };

    #[test]
    fn only_a_live_source_that_received_something_goes_stale() {
        let mut s = SourceState::new(0, None, QUIET);
        let after = Duration::from_secs(10);
        let now = 100_000_000_000;
        assert_eq!(s.stale_note(after, now), None, "nothing received yet: not stale");
        s.received(0, now - 11_000_000_000);
        assert_eq!(s.stale_note(after, now), None, "still connecting: not stale");
        s.status.state = proto::ConnState::Live;
        assert_eq!(s.stale_note(after, now).as_deref(), Some("no frame for 11s (--stale-after 10s); the engine may be idle or hung"));
        assert_eq!(s.stale_note(after, now - 2_000_000_000), None, "9 s quiet is within the bound");
    }

    #[test]
    fn the_status_keeps_the_newest_gaps() {
        let mut s = SourceState::new(0, None, QUIET);
        for i in 0..MAX_GAPS_IN_STATUS as u64 + 3 {
            s.push_gap(proto::Gap {
                from_seq: i,
                to_seq: i,
                recovered_frames: 0,
                lost_frames: 1,
                publisher_id: None,
                state: proto::GapState::Unrecovered,
                reason: None,
                detected_unix_nanos: 0,
            });
        }
        assert_eq!(s.gaps.len(), MAX_GAPS_IN_STATUS);
        assert_eq!(s.gaps.front().map(|g| g.from_seq), Some(3));
    }
}
