//! The messages on `/ws`, server to browser.
//!
//! A client receives, in this order: one [`Hello`]; the latest [`SourceStatus`] of every source;
//! one [`HistoryStart`] (how much history follows, so the page can say how far it has caught
//! up); the history ring ([`Frame`]s and [`FrameError`]s, oldest first); one [`HistoryComplete`];
//! then live messages as they happen. A server that records (`--record`) also sends its
//! [`RecordingStatus`] with the source statuses and whenever it changes. A [`LagNotice`] appears in the stream where the client
//! lost messages because it read too slowly.

use serde::{Deserialize, Serialize};

use crate::Defaults;

/// One message on `/ws`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Message {
    Hello(Hello),
    Frame(Frame),
    FrameError(FrameError),
    SourceStatus(SourceStatus),
    LagNotice(LagNotice),
    HistoryComplete(HistoryComplete),
    RecordingStatus(RecordingStatus),
    HistoryStart(HistoryStart),
    Batch(Batch),
    /// A source that appeared after the hello (`--discover`), or one that now reads somewhere
    /// else (a relay that restarted on a new port): the same index keeps its history.
    SourceChanged(SourceInfo),
    DiscoveryStatus(DiscoveryStatus),
}

/// [`Message`] by reference, for [`crate::encode_ref`]: same variant names, same bytes.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRef<'a> {
    Hello(&'a Hello),
    Frame(&'a Frame),
    FrameError(&'a FrameError),
    SourceStatus(&'a SourceStatus),
    LagNotice(&'a LagNotice),
    HistoryComplete(&'a HistoryComplete),
    RecordingStatus(&'a RecordingStatus),
    HistoryStart(&'a HistoryStart),
    Batch(&'a Batch),
    SourceChanged(&'a SourceInfo),
    DiscoveryStatus(&'a DiscoveryStatus),
}

impl<'a> From<&'a Message> for MessageRef<'a> {
    fn from(m: &'a Message) -> Self {
        match m {
            Message::Hello(x) => MessageRef::Hello(x),
            Message::Frame(x) => MessageRef::Frame(x),
            Message::FrameError(x) => MessageRef::FrameError(x),
            Message::SourceStatus(x) => MessageRef::SourceStatus(x),
            Message::LagNotice(x) => MessageRef::LagNotice(x),
            Message::HistoryComplete(x) => MessageRef::HistoryComplete(x),
            Message::HistoryStart(x) => MessageRef::HistoryStart(x),
            Message::RecordingStatus(x) => MessageRef::RecordingStatus(x),
            Message::Batch(x) => MessageRef::Batch(x),
            Message::SourceChanged(x) => MessageRef::SourceChanged(x),
            Message::DiscoveryStatus(x) => MessageRef::DiscoveryStatus(x),
        }
    }
}

/// What the server is and what it listens to; the first message on every connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`crate::PROTOCOL_VERSION`] of the server (also in every message's prefix).
    pub protocol_version: u16,
    /// The `kvscope` binary's version, for bug reports.
    pub server_version: String,
    /// Where the frames come from.
    pub mode: ServerMode,
    /// One line on the mode: the demo scenario and engine release, the replayed file, or the
    /// number of live endpoints.
    pub mode_detail: String,
    /// Every source, indexed by [`SourceInfo::index`]; frames name their source by that index.
    pub sources: Vec<SourceInfo>,
    /// Block size and the two policies the dashboard should compare.
    pub defaults: Defaults,
    /// The history ring's bound in bytes (`--history-bytes`). A newcomer receives at most this
    /// much history; older frames were evicted.
    pub history_bytes: u64,
    /// This client's queue bound in bytes (`--client-queue-bytes`). A client that falls this far
    /// behind loses messages and receives a [`LagNotice`].
    pub client_queue_bytes: u64,
    /// When the server started, in nanoseconds since the Unix epoch.
    pub started_unix_nanos: u64,
    /// The discovery stores the server reads its fleet from (`--discover`, as given); empty
    /// when every source was named on the command line. With discovery, sources appear after
    /// the hello ([`Message::SourceChanged`]).
    #[serde(default)]
    pub discovery: Vec<String>,
}

/// How the server gets its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerMode {
    /// `kvscope serve`: real engines.
    Live,
    /// `kvscope demo`: a simulated fleet on loopback, still real ZMQ.
    Demo,
    /// `kvscope replay`: a capture file played back.
    Replay,
}

/// One engine endpoint: a worker's data-parallel rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// Position in [`Hello::sources`] and the `source` of every message about this endpoint.
    pub index: u32,
    /// `worker_id:dp_rank`, the name used in logs, metrics labels and error messages.
    pub key: String,
    /// The worker id as written in `--workers` (a string: Dynamo ids are often numbers, but not
    /// always).
    pub worker_id: String,
    /// The data-parallel rank (0 when `--workers` named none).
    pub dp_rank: u32,
    /// The engine's PUB endpoint the server subscribes to, e.g. `tcp://10.0.0.5:5557`.
    pub endpoint: String,
    /// The engine's replay ROUTER endpoint (`--replay`), or `None`: gaps on this source then cannot
    /// be recovered and are reported as lost.
    pub replay_endpoint: Option<String>,
    /// What the source is: an engine's KV-event stream, or a Dynamo event plane (what the
    /// router receives). Absent in captures of format version 1, which held engines only.
    #[serde(default)]
    pub kind: SourceKind,
    /// For an event-plane source, what it reads; `None` for an engine.
    #[serde(default)]
    pub event_plane: Option<EventPlaneInfo>,
    /// An engine's own KV block size, when its model says (a source found by `--discover`: the
    /// standalone indexer's or the model card's); `None`: the block size the page or `check`
    /// classifies at. Two models of one fleet are each classified at their own size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
}

impl SourceInfo {
    /// The block size the source is classified, relayed and indexed at: its model's own, else
    /// `default` (the page's or `--block-size`).
    pub fn block_size_or(&self, default: u32) -> u32 {
        self.block_size.unwrap_or(default)
    }

    /// An engine source at `index`, keyed [`engine_key`].
    pub fn engine(index: u32, worker_id: &str, dp_rank: u32, endpoint: &str, replay_endpoint: Option<String>) -> SourceInfo {
        SourceInfo {
            index,
            key: engine_key(worker_id, dp_rank),
            worker_id: worker_id.to_owned(),
            dp_rank,
            endpoint: endpoint.to_owned(),
            replay_endpoint,
            kind: SourceKind::Engine,
            event_plane: None,
            block_size: None,
        }
    }

    /// An event-plane source at `index` reading `url` (credentials already left out), keyed
    /// [`plane_key`]; `subject` for NATS.
    pub fn event_plane(index: u32, url: &str, subject: Option<String>) -> SourceInfo {
        SourceInfo {
            index,
            key: plane_key(url),
            worker_id: String::new(),
            dp_rank: 0,
            endpoint: url.to_owned(),
            replay_endpoint: None,
            kind: SourceKind::EventPlane,
            event_plane: Some(EventPlaneInfo { url: url.to_owned(), subject }),
            block_size: None,
        }
    }
}

impl SourceInfo {
    /// A relay found in a discovery store: an event-plane source filed under its engine's
    /// `(worker_id, dp_rank)`, keyed [`relay_key`], so it stays one source across restarts.
    pub fn discovered_relay(index: u32, worker_id: &str, dp_rank: u32, url: &str) -> SourceInfo {
        SourceInfo {
            index,
            key: relay_key(worker_id, dp_rank),
            worker_id: worker_id.to_owned(),
            dp_rank,
            endpoint: url.to_owned(),
            replay_endpoint: None,
            kind: SourceKind::EventPlane,
            event_plane: Some(EventPlaneInfo { url: url.to_owned(), subject: None }),
            block_size: None,
        }
    }
}

/// `relay:worker_id:dp_rank`: how logs, metrics labels and errors name a discovered relay.
pub fn relay_key(worker_id: &str, dp_rank: u32) -> String {
    format!("relay:{worker_id}:{dp_rank}")
}

/// `worker_id:dp_rank`: how logs, metrics labels and errors name an engine source.
pub fn engine_key(worker_id: &str, dp_rank: u32) -> String {
    format!("{worker_id}:{dp_rank}")
}

/// `plane:URL`: how logs, metrics labels and errors name an event-plane source.
pub fn plane_key(url: &str) -> String {
    format!("plane:{url}")
}

/// What a source reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// An engine's ZMQ PUB (`--workers`): frames are `[topic, seq, msgpack batch]` and their
    /// payload is the engine's batch.
    #[default]
    Engine,
    /// A Dynamo event plane (`--event-plane`): what Dynamo's relay (`KvEventPublisher`) published
    /// for the router. A frame's topic is the NATS subject or the ZMQ topic, its payload the
    /// envelope (a msgpack map `{publisher_id, sequence, published_at, topic, payload}` whose
    /// payload holds the `RouterEvent`s), and its `seq` the source's arrival counter; gaps are
    /// tracked per publisher on the envelope's `sequence`.
    EventPlane,
    /// A router's index read from outside (`--router-index`, Dynamo's standalone indexer): its
    /// `endpoint` is the indexer's base URL, and each record holds one read, as two frames:
    /// `workers` or `dump` and the JSON body it answered, or `error` and what went wrong. Only in
    /// captures (format 3 on); never in a hello.
    RouterIndex,
    /// The discovery stores a recording server read (`--discover`): its `endpoint` names them,
    /// and each record is one discovery event ([`crate::capture::DiscoveryEvent`]): a source
    /// that appeared or moved, or one that left. Only in captures (format 4 on); never in a
    /// hello.
    Discovery,
}

/// Where an event-plane source reads from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPlaneInfo {
    /// `nats://HOST:PORT` (a NATS core subscription, never a JetStream consumer) or
    /// `zmq://HOST:PORT` (a SUB to one publisher of Dynamo's ZMQ plane).
    pub url: String,
    /// The NATS subject subscribed to (`namespace.>` by default, keeping subjects that end in
    /// `.kv-events`; `--event-plane-subject` narrows it); `None` on the ZMQ plane.
    pub subject: Option<String>,
}

/// One engine message, relayed as received. The payload is opaque here: decode it with
/// `kvscope-wire`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Index into [`Hello::sources`].
    pub source: u32,
    /// The engine's sequence number (frame 1 of the ZMQ message, 8 bytes big-endian).
    pub seq: u64,
    /// When the server received it, in nanoseconds since the Unix epoch (the capture's time when
    /// replaying a file).
    pub recv_time_nanos: u64,
    /// True when the frame came from the engine's replay socket to fill a gap, not from the live
    /// PUB stream. Replayed frames are relayed in seq order, before the live frame that revealed
    /// the gap.
    pub replayed: bool,
    /// The ZMQ topic frame exactly as sent (often `kv-events` or empty).
    #[serde(with = "serde_bytes")]
    pub topic: Vec<u8>,
    /// The msgpack payload exactly as sent.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// A message from an engine that could not be taken as a frame (wrong frame count, a sequence
/// number that is not 8 bytes), or a payload that did not decode. Kept with its bytes so the
/// inspector can show them; the stream goes on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameError {
    /// Index into [`Hello::sources`].
    pub source: u32,
    /// Stable label: `frame_count` and `seq_length` for framing errors, [`FRAME_TOO_LARGE`] for
    /// a payload refused before decoding, `decode` for a payload that failed to decode.
    pub kind: String,
    /// For `decode`: the decoder's own group (`truncated`, `type_mismatch`, ...); otherwise `None`.
    pub decode_kind: Option<String>,
    /// The whole message a person reads, with source, seq and byte offset where known:
    /// `"0:0 seq 17: byte 3: expected array or map for batch, found str"`.
    pub text: String,
    /// The sequence number when the framing was good enough to read one.
    pub seq: Option<u64>,
    /// When the server received it, in nanoseconds since the Unix epoch.
    pub recv_time_nanos: u64,
    /// True when it came from the replay socket.
    pub replayed: bool,
    /// The ZMQ frames exactly as received, for framing errors. Empty for `decode` errors: their
    /// bytes are in the [`Frame`] with the same source and seq, which is relayed as usual.
    pub frames: Vec<serde_bytes::ByteBuf>,
}

/// [`FrameError::kind`] of a payload larger than the server's `--max-frame-bytes` (or the page's
/// own bound for a capture opened from disk): refused before decoding, its bytes not relayed.
pub const FRAME_TOO_LARGE: &str = "frame_too_large";

/// A source's connection state and counters. Sent whenever something changes (at most a few
/// times a second per source) and to every newcomer; never evicted from the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// Index into [`Hello::sources`].
    pub source: u32,
    /// Where the connection stands.
    pub state: ConnState,
    /// The last connection or replay problem in words, with what to do; `None` when healthy.
    pub error: Option<String>,
    /// When `state` last changed, in nanoseconds since the Unix epoch.
    pub since_unix_nanos: u64,
    /// The highest sequence number relayed so far in the current engine run; `None` before the
    /// first frame.
    pub last_seq: Option<u64>,
    /// When the last frame arrived, in nanoseconds since the Unix epoch.
    pub last_recv_unix_nanos: Option<u64>,
    /// Running totals since the server started.
    pub counters: SourceCounters,
    /// The most recent gaps (at most 32), oldest first; `counters.gaps` counts all of them.
    pub gaps: Vec<Gap>,
}

/// Connection state of one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// Not connected yet, or reconnecting after the engine went away; retried with capped backoff.
    Connecting,
    /// Connected, and frames arrived recently.
    Live,
    /// Connected, but no frame for longer than `--stale-after`: the engine may be idle or hung.
    Stale,
    /// The endpoint cannot be used as given (for example a host name that does not resolve);
    /// still retried, see `error`.
    Error,
    /// Gone from the discovery store (`--discover`: its lease or TTL expired); not read until
    /// it registers again, when it resumes as the same source. It keeps its history and counts;
    /// `since_unix_nanos` says when it left.
    Left,
}

/// Per-source totals. Every count is since the server started, across engine restarts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCounters {
    /// Frames relayed, live and replayed.
    pub frames: u64,
    /// Payload bytes relayed.
    pub payload_bytes: u64,
    /// Frames that came from the replay socket. Non-zero means gaps were filled; compare with
    /// `gaps` to see how often the live stream dropped.
    pub replayed_frames: u64,
    /// Messages with a wrong frame count or a sequence number that is not 8 bytes. Non-zero means
    /// the endpoint is not an engine's KV-event PUB, or a proxy re-framed it: check `--workers`.
    pub frame_errors: u64,
    /// Payloads that did not decode. Non-zero means an engine release whose layout kvscope does
    /// not know, or corrupted bytes: open the error in the inspector and report it with the bytes.
    pub decode_errors: u64,
    /// Gaps in the sequence numbers (a jump forward). Non-zero is normal right after a reconnect
    /// (PUB/SUB loses the first messages); see `lost_frames` for what replay could not recover.
    pub gaps: u64,
    /// Frames missing in gaps that the replay socket did not deliver. Non-zero means events the
    /// indexer never saw: pass `--replay` for this source, or raise the engine's replay buffer.
    pub lost_frames: u64,
    /// Times the sequence number went back (to 0 after an engine restart). Non-zero means the
    /// engine restarted: its caches started empty.
    pub restarts: u64,
    /// Times the connection was re-established after it had been up.
    pub reconnects: u64,
}

/// A run of missing sequence numbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// First missing sequence number.
    pub from_seq: u64,
    /// Last missing sequence number (inclusive).
    pub to_seq: u64,
    /// How many of them the replay socket delivered.
    pub recovered_frames: u64,
    /// How many were not recovered. Non-zero means events were lost for good.
    pub lost_frames: u64,
    /// On an event-plane source, the Dynamo publisher whose envelope `sequence` jumped (gaps
    /// are per publisher there); `None` on an engine source, whose gaps are on the frame's seq.
    #[serde(default)]
    pub publisher_id: Option<u64>,
    /// Where recovery stands.
    pub state: GapState,
    /// Why frames were lost, in words, with what to do (for example "no replay endpoint
    /// configured for 0:0; pass --replay \"0=tcp://host:5558\""); `None` when recovered.
    pub reason: Option<String>,
    /// When the gap was seen, in nanoseconds since the Unix epoch.
    pub detected_unix_nanos: u64,
}

/// Recovery state of a [`Gap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapState {
    /// Every missing frame was replayed.
    Recovered,
    /// Some were replayed, some lost.
    Partial,
    /// None could be replayed.
    Unrecovered,
}

/// This client read too slowly and lost messages. Sent in the stream at the point of the loss,
/// as soon as the client's queue has room again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagNotice {
    /// Frames this client did not receive since the previous lag notice. Non-zero means the
    /// dashboard's counters are short by this much: raise the bound with `flag`, or close other
    /// tabs and reload to start again from the history.
    pub frames_lost: u64,
    /// All messages lost since the previous lag notice (frames, errors, status updates).
    pub messages_lost: u64,
    /// Bytes of the lost messages.
    pub bytes_lost: u64,
    /// Which frames were lost, per source.
    pub sources: Vec<SourceLoss>,
    /// The per-client queue bound that was exceeded, in bytes.
    pub queue_bytes: u64,
    /// The server flag that raises that bound: `--client-queue-bytes`.
    pub flag: String,
}

/// The frames one source lost in a [`LagNotice`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLoss {
    /// Index into [`Hello::sources`].
    pub source: u32,
    /// How many frames of this source were lost.
    pub frames: u64,
    /// The lowest lost sequence number.
    pub first_seq: u64,
    /// The highest lost sequence number.
    pub last_seq: u64,
}

/// The history replay to a newcomer starts: this much follows before [`HistoryComplete`]. A
/// page shows "catching up: 12,000 of 40,000 frames" from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryStart {
    /// Frames (and frame errors) about to be sent as history.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Several messages in one WebSocket message (protocol 5). The server's writer bundles what is
/// already queued for a client (the history, a burst of live frames) instead of sending
/// thousands of small WebSocket messages a second: a browser pays for each message it
/// dispatches, whatever its size. Each element is a whole message, prefix included, exactly as
/// it would have been sent alone; a batch never holds a batch. Read one with [`crate::unbatch`]
/// or [`crate::decode_all`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The messages, in stream order.
    pub messages: Vec<serde_bytes::ByteBuf>,
}

/// The history replay to a newcomer ended; what follows is live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryComplete {
    /// Frames sent as history.
    pub frames: u64,
    /// Frames evicted from the ring since the server started, which this client will never see.
    /// Non-zero means the history is not the whole stream: raise `--history-bytes` to keep more.
    pub evicted_frames: u64,
    /// Bytes of history sent.
    pub bytes: u64,
}

/// Where the server's capture file stands (`serve --record`, `demo --record`, `record`). The
/// relay never waits for the disk to fail: when writing stops, frames still flow to every
/// browser and this says why the capture ended and how much it is missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingStatus {
    /// The capture file as given on the command line.
    pub path: String,
    /// Whether records are still being written.
    pub state: RecordingState,
    /// Why writing stopped, in words, with what to do; `None` while recording or after a clean
    /// finish.
    pub error: Option<String>,
    /// Records written so far (complete ones; a reader keeps every one of them).
    pub records: u64,
    /// Bytes written so far, header included.
    pub bytes: u64,
    /// Records that arrived after writing stopped and are not in the file.
    pub dropped_records: u64,
}

impl RecordingStatus {
    /// One line for a person: where the capture stands and, when it stopped early, why and what
    /// it is missing. The dashboard shows it; the server logs the same error text.
    pub fn summary(&self) -> String {
        match self.state {
            RecordingState::Recording => format!("recording to {}: {} records", self.path, self.records),
            RecordingState::Finished => format!("capture {} finished: {} records", self.path, self.records),
            RecordingState::Failed => format!(
                "recording stopped: {} ({} later frames are not in the capture; the relay and this page go on)",
                self.error.as_deref().unwrap_or("writing failed"),
                self.dropped_records
            ),
        }
    }
}

/// Where the server's discovery stands (`--discover`): every store's last read, and the sources
/// found. Sent whenever it changes and to every newcomer, like a source's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveryStatus {
    pub stores: Vec<StoreStatus>,
    /// Sources found through discovery, live or left.
    pub sources: u32,
    /// Of those, the ones whose registration expired.
    pub left: u32,
}

/// One discovery store's last read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// As given to `--discover`.
    pub url: String,
    /// Why the last read failed, with when it is tried again; `None` when it succeeded.
    pub error: Option<String>,
    /// Reads that failed since the server started.
    pub failures: u64,
    /// Records the last read could not use (the server's log names each key).
    pub bad_records: u32,
}

impl DiscoveryStatus {
    /// One line for a person: what was found and, for each store that cannot be read, why. The
    /// dashboard shows it.
    pub fn summary(&self) -> String {
        let mut line = format!("discovered {} sources", self.sources);
        if self.left > 0 {
            line.push_str(&format!(", {} left", self.left));
        }
        for s in &self.stores {
            match &s.error {
                Some(e) => line.push_str(&format!(" · {} cannot be read: {e}", s.url)),
                None if s.bad_records > 0 => line.push_str(&format!(" · {}: {} records not understood", s.url, s.bad_records)),
                None => {}
            }
        }
        line
    }

    /// Whether a store cannot be read now.
    pub fn failing(&self) -> bool {
        self.stores.iter().any(|s| s.error.is_some())
    }
}

/// [`RecordingStatus::state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordingState {
    /// Writing every record.
    Recording,
    /// Writing failed (see `error`); the relay goes on without the capture.
    Failed,
    /// The server stopped and closed the file.
    Finished,
}
