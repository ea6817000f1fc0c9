//! The ZMQ intake: one task per SUB-read source (an engine's stream, or a publisher of
//! Dynamo's ZMQ event plane), each with its own connection loop, [`run_subscribed`].
//!
//! zeromq 0.7's built-in SUB reconnect backs off to 30 s and cannot be tuned, and `connect()`
//! blocks until the peer is up or the connect timeout passes. So each task runs its own loop:
//! a fresh SUB with a 200 ms connect timeout, capped exponential backoff (100 ms to 2 s) while
//! the peer is away (shown as `connecting`), and the socket monitor watched for
//! `Disconnected`, upon which the socket is dropped and a new one made. A source that is down
//! at start is simply retried; the server never exits because a peer is away.
//!
//! A gap found by [`crate::stream::Pipeline`] is replayed through a fresh DEALER per request
//! (zeromq's DEALER does not reconnect), with a timeout on the connect and on every receive.
//! The held live frame waits until the replay ends, so frames leave in seq order; the SUB
//! socket buffers meanwhile.
//!
//! Neighbours: `stream` decides; [`RelayOutput`] hands results to the `relay` hub and the
//! `capture` recorder.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use kvscope_protocol as proto;
use kvscope_wire::Decoded;
use tokio::sync::watch;
use zeromq::{DealerSocket, Socket, SocketEvent, SocketOptions, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::capture::Recorder;
use crate::plane::PlanePipeline;
use crate::relay::{Hub, Kind};
use crate::source_state::TrackedSource;
use crate::stream::{Held, LiveOutcome, Output, Pipeline, StreamOptions};
use crate::time::unix_nanos;

/// Timeouts and intervals of the intake.
#[derive(Clone, Debug)]
pub struct IntakeOptions {
    /// Per connection attempt.
    pub connect_timeout: Duration,
    /// First retry delay; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Per replay receive (and for the DEALER's connect).
    pub replay_timeout: Duration,
    /// A connected source with no frame for this long is shown as stale.
    pub stale_after: Duration,
    /// How often counters are sent as status when they changed.
    pub status_interval: Duration,
    /// Frame size bound and late-join replay.
    pub stream: StreamOptions,
}

impl Default for IntakeOptions {
    fn default() -> Self {
        IntakeOptions {
            connect_timeout: Duration::from_millis(200),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            replay_timeout: Duration::from_millis(500),
            stale_after: Duration::from_secs(10),
            status_interval: Duration::from_millis(250),
            stream: StreamOptions::default(),
        }
    }
}

/// Relays to the hub and records to the capture, in relay order.
#[derive(Debug)]
pub struct RelayOutput {
    pub hub: Arc<Hub>,
    pub recorder: Option<Recorder>,
    /// Records the writer had no room for yet; sent (waiting) after the current message.
    pending: Vec<Vec<u8>>,
    /// An engine source's handle on the live reconciler (event-plane sources hand theirs to
    /// their pipeline).
    router: Option<crate::router::EngineTap>,
    /// The source's index in the capture when it differs from the server's: a source found by
    /// discovery after the capture's header was written (`crate::fleet`).
    capture_index: Option<u32>,
}

impl RelayOutput {
    pub fn new(hub: Arc<Hub>, recorder: Option<Recorder>) -> Self {
        RelayOutput { hub, recorder, pending: Vec::new(), router: None, capture_index: None }
    }

    /// Records under `index` in the capture (see [`RelayOutput::capture_index`]).
    pub fn with_capture_index(mut self, index: Option<u32>) -> Self {
        self.capture_index = index;
        self
    }

    /// Also hands every relayed engine batch to the live reconciler.
    pub fn with_router(mut self, router: Option<crate::router::EngineTap>) -> Self {
        self.router = router;
        self
    }

    fn record(&mut self, source: u32, recv_time_nanos: u64, replayed: bool, raw: &[Bytes]) {
        if let Some(recorder) = &self.recorder {
            let source = self.capture_index.unwrap_or(source);
            let bytes = kvscope_protocol::capture::encode_record_parts(source, recv_time_nanos, replayed, raw);
            if self.pending.is_empty() {
                if let Err(bytes) = recorder.try_record(bytes) {
                    self.pending.push(bytes);
                }
            } else {
                self.pending.push(bytes);
            }
        }
    }

    /// Sends records that found the writer's channel full (the disk is behind).
    pub async fn flush_pending(&mut self) {
        if let Some(recorder) = &self.recorder {
            for bytes in self.pending.drain(..) {
                recorder.send(bytes).await;
            }
        }
    }
}

impl Output for RelayOutput {
    fn frame(&mut self, frame: &proto::Frame, raw: &[Bytes], decoded: Option<Decoded>) {
        self.record(frame.source, frame.recv_time_nanos, frame.replayed, raw);
        if let Some(r) = &self.router {
            // The payload is the last frame as received (no copy); a refcount and a try_send.
            let payload = match raw.last() {
                Some(last) if last.len() == frame.payload.len() => last.clone(),
                _ => Bytes::copy_from_slice(&frame.payload),
            };
            // The events and their ids as bytes ride along when they hold at most twice the
            // payload (long prompts): a full queue of small events' decodes would hold several
            // times their payloads.
            let decoded = decoded.filter(Decoded::worth_handing_on);
            r.tap.send(crate::router::Input::Engine { source: r.source, seq: frame.seq, payload, replayed: frame.replayed, decoded });
        }
        let bytes = Bytes::from(proto::encode_ref(proto::MessageRef::Frame(frame)));
        self.hub.publish(bytes, Kind::Frame { source: frame.source, seq: frame.seq });
    }

    fn takes_decoded(&self) -> bool {
        self.router.is_some()
    }

    fn frame_error(&mut self, error: &proto::FrameError, raw: &[Bytes]) {
        if !raw.is_empty() {
            self.record(error.source, error.recv_time_nanos, error.replayed, raw);
        }
        let bytes = Bytes::from(proto::encode_ref(proto::MessageRef::FrameError(error)));
        self.hub.publish(bytes, Kind::FrameError { source: error.source });
    }

    fn status(&mut self, status: &proto::SourceStatus) {
        let bytes = Bytes::from(proto::encode_ref(proto::MessageRef::SourceStatus(status)));
        self.hub.publish(bytes, Kind::Status { source: status.source });
    }
}

/// Capped exponential backoff between connection attempts: the one retry rule of every intake
/// loop (engines, Dynamo's ZMQ plane, NATS), from `backoff_min` doubling to `backoff_max`.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(opts: &IntakeOptions) -> Backoff {
        Backoff { next: opts.backoff_min, min: opts.backoff_min, max: opts.backoff_max }
    }

    /// Waits the current delay, then doubles it (up to the cap). False when `shutdown` changed
    /// first: the caller stops.
    pub async fn wait(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = shutdown.changed() => false,
        }
    }

    /// After a connection succeeded: the next failure waits the shortest delay again.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// A source read through a ZMQ SUB: an engine's stream, or one publisher of Dynamo's ZMQ event
/// plane. [`run_subscribed`] is the one connection loop of both.
pub trait Subscribed: TrackedSource + Send {
    /// What to check when a connection attempt fails.
    const CONNECT_HINT: &'static str;

    /// Takes one message as received, and what it calls for (a replay).
    fn message(&mut self, frames: Vec<Bytes>, opts: &IntakeOptions) -> impl Future<Output = ()> + Send;

    /// Where its frames are relayed and recorded.
    fn relay_output(&mut self) -> &mut RelayOutput;
}

impl Subscribed for Pipeline<RelayOutput> {
    const CONNECT_HINT: &'static str = "is the engine up and started with KV events on this port?";

    async fn message(&mut self, frames: Vec<Bytes>, opts: &IntakeOptions) {
        if let LiveOutcome::Gap(held) = self.live(frames, unix_nanos()) {
            let endpoint = self.replay_endpoint().map(str::to_owned);
            fill_gap(self, held, endpoint.as_deref(), opts).await;
        }
    }

    fn relay_output(&mut self) -> &mut RelayOutput {
        &mut self.output
    }
}

impl Subscribed for PlanePipeline<RelayOutput> {
    const CONNECT_HINT: &'static str = "is the Dynamo relay up, and is this the endpoint its discovery record advertises?";

    async fn message(&mut self, frames: Vec<Bytes>, _: &IntakeOptions) {
        // With a live reconciler the envelope went to it; `check` is the caller that takes it.
        let _ = PlanePipeline::message(self, frames, unix_nanos());
    }

    fn relay_output(&mut self) -> &mut RelayOutput {
        &mut self.output
    }
}

/// Runs one SUB-read source until `shutdown` turns true.
pub async fn run_subscribed<S: Subscribed>(endpoint: String, mut source: S, opts: IntakeOptions, mut shutdown: watch::Receiver<bool>) -> S {
    let mut backoff = Backoff::new(&opts);
    let mut ever_connected = false;
    let mut last_error: Option<String> = None;
    'outer: loop {
        if *shutdown.borrow() {
            break;
        }
        source.set_state(proto::ConnState::Connecting, last_error.clone());
        let mut options = SocketOptions::default();
        options.connect_timeout(opts.connect_timeout);
        let mut socket = SubSocket::with_options(options);
        let mut monitor = socket.monitor();
        // Remembered before connecting, so the subscription goes out in the handshake's wake.
        if let Err(e) = socket.subscribe("").await {
            tracing::warn!(source = %source.key(), "subscribe failed: {e}");
        }
        let connected = tokio::select! {
            r = tokio::time::timeout(opts.connect_timeout * 3, socket.connect(&endpoint)) => r,
            _ = shutdown.changed() => break 'outer,
        };
        if let Some((state, why)) = connect_failure(connected) {
            last_error = Some(format!("{endpoint}: {why}; retrying ({})", S::CONNECT_HINT));
            source.set_state(state, last_error.clone());
            if !backoff.wait(&mut shutdown).await {
                break 'outer;
            }
            continue;
        }
        backoff.reset();
        if ever_connected {
            source.count_reconnect();
        }
        ever_connected = true;
        source.set_state(proto::ConnState::Live, None);
        tracing::info!(source = %source.key(), %endpoint, "connected");
        let mut tick = tokio::time::interval(opts.status_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break 'outer,
                event = monitor.next() => match event {
                    Some(SocketEvent::Disconnected(_)) | None => {
                        last_error = Some(format!("{endpoint}: connection lost; reconnecting"));
                        tracing::info!(source = %source.key(), %endpoint, "disconnected");
                        break;
                    }
                    Some(_) => {}
                },
                message = socket.recv() => match message {
                    Ok(message) => {
                        source.wake();
                        source.message(message.into_vec(), &opts).await;
                        source.relay_output().flush_pending().await;
                    }
                    Err(e) => {
                        last_error = Some(format!("{endpoint}: {e}; reconnecting"));
                        break;
                    }
                },
                _ = tick.tick() => {
                    source.check_stale(opts.stale_after);
                    source.flush_status_if_dirty();
                }
            }
        }
        drop(socket);
        source.set_state(proto::ConnState::Connecting, last_error.clone());
        tokio::select! {
            _ = tokio::time::sleep(opts.backoff_min) => {}
            _ = shutdown.changed() => break 'outer,
        }
    }
    source.flush_status();
    source.relay_output().flush_pending().await;
    source
}

/// A failed connection attempt: the state to show and why, or `None` when it connected. A
/// host that does not resolve will not start resolving by itself soon: it is shown as an
/// error (still retried) rather than as a plain "connecting".
fn connect_failure(attempt: Result<Result<(), zeromq::ZmqError>, tokio::time::error::Elapsed>) -> Option<(proto::ConnState, String)> {
    match attempt {
        Ok(Ok(())) => None,
        Ok(Err(e)) => {
            let text = e.to_string();
            let unusable = text.contains("resolve") || text.contains("Invalid") || text.contains("invalid");
            Some((if unusable { proto::ConnState::Error } else { proto::ConnState::Connecting }, text))
        }
        Err(_) => Some((proto::ConnState::Connecting, "connect timed out".to_owned())),
    }
}

/// Replays a gap through a fresh DEALER and hands the replies to the pipeline.
pub async fn fill_gap<O: Output>(pipeline: &mut Pipeline<O>, mut held: Held, replay_endpoint: Option<&str>, opts: &IntakeOptions) {
    let Some(endpoint) = replay_endpoint else {
        pipeline.finish_gap(held, None);
        return;
    };
    let failure = replay(pipeline, &mut held, endpoint, opts).await.err();
    pipeline.finish_gap(held, failure);
}

async fn replay<O: Output>(pipeline: &mut Pipeline<O>, held: &mut Held, endpoint: &str, opts: &IntakeOptions) -> Result<(), String> {
    let mut options = SocketOptions::default();
    options.connect_timeout(opts.replay_timeout);
    let mut dealer = DealerSocket::with_options(options);
    match tokio::time::timeout(opts.replay_timeout * 2, dealer.connect(endpoint)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("replay endpoint {endpoint}: {e}; is the engine's replay socket enabled on that port?")),
        Err(_) => {
            return Err(format!("replay endpoint {endpoint}: connect timed out; is the engine's replay socket enabled on that port?"));
        }
    }
    let [delimiter, seq] = kvscope_wire::frame::replay_request(held.from_seq);
    let mut request = ZmqMessage::from(Bytes::from(delimiter));
    request.push_back(Bytes::from(seq));
    dealer.send(request).await.map_err(|e| format!("replay endpoint {endpoint}: send failed: {e}"))?;
    let mut replies = 0u64;
    loop {
        match tokio::time::timeout(opts.replay_timeout, dealer.recv()).await {
            Ok(Ok(message)) => {
                replies += 1;
                if !pipeline.replay_reply(held, message.into_vec(), unix_nanos()) {
                    return Ok(());
                }
            }
            Ok(Err(e)) => return Err(format!("replay endpoint {endpoint}: {e} after {replies} replies")),
            Err(_) => {
                return Err(format!(
                    "replay endpoint {endpoint} stopped answering after {replies} replies ({} ms timeout)",
                    opts.replay_timeout.as_millis()
                ));
            }
        }
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[tokio::test]
    async fn backoff_doubles_to_its_cap_resets_and_stops_on_shutdown() {
        let opts =
            IntakeOptions { backoff_min: Duration::from_millis(1), backoff_max: Duration::from_millis(4), ..IntakeOptions::default() };
        let mut b = Backoff::new(&opts);
        let (tx, mut rx) = watch::channel(false);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(b.next.as_millis());
            assert!(b.wait(&mut rx).await);
        }
        assert_eq!(seen, [1, 2, 4, 4]);
        b.reset();
        assert_eq!(b.next, Duration::from_millis(1));
        // A shutdown that arrives while waiting ends the wait with false.
        let mut long = Backoff::new(&IntakeOptions { backoff_min: Duration::from_secs(60), ..opts });
        let _ = tx.send(true);
        assert!(!long.wait(&mut rx).await);
    }
}
