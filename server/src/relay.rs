//! The relay hub: the history ring and every client's bounded queue.
//!
//! The intake calls [`Hub::publish`] with an encoded protocol message. Under one short lock the
//! hub appends it to the history ring and offers it to every client queue with `try_send`; it
//! never waits for a client. A client whose queue is over its byte bound loses the message; the
//! loss is counted and a [`proto::LagNotice`] is queued at that point in its stream as soon as
//! there is room again (so the notice sits exactly where the hole is).
//!
//! A newcomer registers its queue and takes a snapshot of the history under the same lock, so it
//! sees every message exactly once: the snapshot holds everything before the registration, the
//! queue everything after. Taking the snapshot copies `Arc`s to sealed chunks of 256 messages
//! plus the open chunk, so the lock is held for microseconds however large the history; the
//! newcomer's writer then sends the snapshot without any lock. (A history behind a lock that is
//! held while a newcomer is served is the problem Rerun's `re_ws_comms` notes in its TODO.)
//!
//! The ring is bounded in bytes (`--history-bytes`) and evicts oldest frames first; it logs once
//! when eviction starts. Hello and source status are never in the ring: the hello is built per
//! client and the latest status of each source is kept aside, so they are never evicted.
//!
//! Live messages are fanned out as shared bytes: the hub gathers what is published for
//! [`HubConfig::batch_window`] (or until a batch is full) into one pending batch, frames it once
//! ([`Outgoing`]: its messages' own bytes and a few bytes of framing, never copied into one
//! buffer) and offers the same batch to every client. A browser pays per WebSocket message it
//! dispatches, so batches are what let a page keep up. Building a batch copies its framing
//! only, once whatever the number of clients (`kvscope_ws_live_bytes_copied_total`), and the
//! socket writes it from these same bytes (`ws`).
//!
//! Neighbours: `intake` and `replay` publish; `http` subscribes one client per WebSocket; the
//! app runs [`Hub::run_flusher`], which closes a pending batch when its window is over.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kvscope_protocol as proto;
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// Messages per sealed history chunk.
const CHUNK_MESSAGES: usize = 256;

/// Bookkeeping bytes charged per history entry on top of the message itself, so that the bound
/// is about memory and not only payload (a `Bytes` handle, the deque slot, the allocation).
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Capacity of a client's channel in messages; the real bound is in bytes.
const CLIENT_CHANNEL_MESSAGES: usize = 1 << 16;

/// At most this many messages go into one live batch ([`proto::Batch`]).
pub const BATCH_MESSAGES: usize = 256;

/// A batch is closed once it holds this many bytes; a larger message still goes alone.
pub const BATCH_BYTES: usize = 1 << 20;

/// What a published message is, for history and loss accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Frame {
        source: u32,
        seq: u64,
    },
    FrameError {
        source: u32,
    },
    Status {
        source: u32,
    },
    /// The capture's [`proto::RecordingStatus`]: kept like a source status, never evicted.
    Recording,
    /// A [`proto::Message::SourceChanged`]: sent by [`Hub::add_source`] and
    /// [`Hub::update_source`] only, kept like a status.
    Source {
        source: u32,
    },
    /// The server's [`proto::DiscoveryStatus`]: kept like the recording's.
    Discovery,
}

#[derive(Clone, Debug)]
struct Entry {
    bytes: Bytes,
    kind: Kind,
}

impl Entry {
    fn cost(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD_BYTES
    }
}

#[derive(Debug)]
struct Chunk {
    entries: Vec<Entry>,
    bytes: usize,
    frames: usize,
}

#[derive(Debug, Default)]
struct History {
    sealed: VecDeque<Arc<Chunk>>,
    open: VecDeque<Entry>,
    open_bytes: usize,
    open_frames: usize,
    bytes: usize,
    frames: usize,
}

impl History {
    fn push(&mut self, entry: Entry) {
        let cost = entry.cost();
        let frame = matches!(entry.kind, Kind::Frame { .. }) as usize;
        self.bytes += cost;
        self.frames += frame;
        self.open_bytes += cost;
        self.open_frames += frame;
        self.open.push_back(entry);
        if self.open.len() >= CHUNK_MESSAGES {
            let entries: Vec<Entry> = self.open.drain(..).collect();
            self.sealed.push_back(Arc::new(Chunk { entries, bytes: self.open_bytes, frames: self.open_frames }));
            self.open_bytes = 0;
            self.open_frames = 0;
        }
    }

    /// Evicts oldest entries until within `bound`; returns frames evicted.
    fn evict(&mut self, bound: usize) -> usize {
        let mut evicted = 0;
        while self.bytes > bound {
            if let Some(chunk) = self.sealed.pop_front() {
                self.bytes -= chunk.bytes;
                self.frames -= chunk.frames;
                evicted += chunk.frames;
            } else if let Some(entry) = self.open.pop_front() {
                let frame = matches!(entry.kind, Kind::Frame { .. }) as usize;
                self.bytes -= entry.cost();
                self.open_bytes -= entry.cost();
                self.frames -= frame;
                self.open_frames -= frame;
                evicted += frame;
            } else {
                break;
            }
        }
        evicted
    }

    fn snapshot(&self) -> HistorySnapshot {
        HistorySnapshot {
            sealed: self.sealed.iter().cloned().collect(),
            open: self.open.iter().map(|e| e.bytes.clone()).collect(),
            frames: self.frames as u64,
            bytes: self.bytes as u64,
        }
    }
}

/// The history as it was when a client registered.
#[derive(Debug)]
pub struct HistorySnapshot {
    sealed: Vec<Arc<Chunk>>,
    open: Vec<Bytes>,
    pub frames: u64,
    pub bytes: u64,
}

impl HistorySnapshot {
    /// Every message, oldest first.
    pub fn messages(&self) -> impl Iterator<Item = &Bytes> {
        self.sealed.iter().flat_map(|c| c.entries.iter().map(|e| &e.bytes)).chain(self.open.iter())
    }
}

/// Frames a client lost since its last lag notice.
#[derive(Debug, Default)]
struct Loss {
    frames: u64,
    messages: u64,
    bytes: u64,
    statuses: bool,
    sources: BTreeMap<u32, (u64, u64, u64)>,
}

impl Loss {
    fn add(&mut self, entry: &Entry) {
        self.messages += 1;
        self.bytes += entry.bytes.len() as u64;
        match entry.kind {
            Kind::Frame { source, seq } => {
                self.frames += 1;
                let s = self.sources.entry(source).or_insert((0, seq, seq));
                s.0 += 1;
                s.1 = s.1.min(seq);
                s.2 = s.2.max(seq);
            }
            Kind::Status { .. } | Kind::Recording | Kind::Source { .. } | Kind::Discovery => self.statuses = true,
            Kind::FrameError { .. } => {}
        }
    }

    fn notice(&self, queue_bytes: u64) -> proto::Message {
        proto::Message::LagNotice(proto::LagNotice {
            frames_lost: self.frames,
            messages_lost: self.messages,
            bytes_lost: self.bytes,
            sources: self
                .sources
                .iter()
                .map(|(&source, &(frames, first_seq, last_seq))| proto::SourceLoss { source, frames, first_seq, last_seq })
                .collect(),
            queue_bytes,
            flag: "--client-queue-bytes".to_owned(),
        })
    }
}

/// One WebSocket message a client is sent: a message as it was published, or a batch of them,
/// shared by every client. A batch is kept as its framing and its messages' own bytes
/// ([`proto::BatchFraming`]), never copied into one buffer: the socket writes them as slices
/// (`ws`), so fanning a batch out copies only its framing, once.
#[derive(Debug, Clone)]
pub enum Outgoing {
    One(Bytes),
    Batch(Arc<SharedBatch>),
}

/// A batch's framing and its messages.
#[derive(Debug)]
pub struct SharedBatch {
    framing: proto::BatchFraming,
    messages: Vec<Bytes>,
    len: usize,
}

impl Outgoing {
    /// Several messages as one batch, or one as itself.
    pub fn of(mut messages: Vec<Bytes>) -> Outgoing {
        if messages.len() == 1 {
            return Outgoing::One(messages.remove(0));
        }
        let framing = proto::BatchFraming::of(&messages);
        let len = framing.len_with(&messages);
        Outgoing::Batch(Arc::new(SharedBatch { framing, messages, len }))
    }

    /// The message's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Outgoing::One(b) => b.len(),
            Outgoing::Batch(b) => b.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes copied to build it: a batch's framing (its messages are shared, not copied).
    pub fn copied(&self) -> usize {
        match self {
            Outgoing::One(_) => 0,
            Outgoing::Batch(b) => b.framing.len(),
        }
    }

    /// The message's bytes, in order, as slices of what is already held ([`Outgoing::len`] in
    /// all).
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let (one, batch) = match self {
            Outgoing::One(b) => (Some(&b[..]), None),
            Outgoing::Batch(b) => (None, Some(b.framing.heads().zip(&b.messages).flat_map(|(head, message)| [head, &message[..]]))),
        };
        one.into_iter().chain(batch.into_iter().flatten())
    }

    /// The message in one buffer, as the client receives it (a copy, for a batch).
    #[cfg(test)]
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(self.slices().collect::<Vec<_>>().concat())
    }
}

#[derive(Debug)]
struct ClientSlot {
    id: u64,
    tx: mpsc::Sender<Outgoing>,
    queued: Arc<AtomicU64>,
    loss: Option<Loss>,
    /// Mirrors `loss.is_some()` for the writer, which checks it without the lock.
    lossy: Arc<AtomicBool>,
}

/// Messages that say how things stand now rather than what happened: never evicted, sent to
/// every newcomer, and sent again to a client after it lost messages.
#[derive(Debug, Default)]
struct Sticky {
    /// The hello as it stands now: the sources a newcomer is told about include every source
    /// added since the start.
    hello: Bytes,
    /// The latest [`proto::Message::SourceChanged`] of each source added or changed after the
    /// start; a newcomer's hello holds them already.
    changed: BTreeMap<u32, Bytes>,
    /// The latest status of each source.
    statuses: Vec<Option<Bytes>>,
    recording: Option<Bytes>,
    discovery: Option<Bytes>,
}

impl Sticky {
    /// What a newcomer gets after the hello.
    fn for_newcomer(&self) -> Vec<Bytes> {
        self.statuses.iter().flatten().chain(&self.recording).chain(&self.discovery).cloned().collect()
    }

    /// What a client that lost messages gets again: where each source reads, then the statuses.
    fn after_loss(&self) -> impl Iterator<Item = &Bytes> {
        self.changed.values().chain(self.statuses.iter().flatten()).chain(&self.recording).chain(&self.discovery)
    }
}

/// Live messages published since the last flush, in order: the next shared batch.
#[derive(Debug, Default)]
struct Pending {
    entries: Vec<Entry>,
    bytes: usize,
}

impl Pending {
    fn is_full(&self) -> bool {
        self.entries.len() >= BATCH_MESSAGES || self.bytes >= BATCH_BYTES
    }
}

#[derive(Debug)]
struct HubState {
    history: History,
    pending: Pending,
    sticky: Sticky,
    /// The hello's fields, kept to re-encode it when a source is added.
    hello: proto::Hello,
    clients: Vec<ClientSlot>,
    next_client_id: u64,
    evicted_frames: u64,
    eviction_logged: bool,
}

/// Bounds and the hello every client gets.
#[derive(Clone, Debug)]
pub struct HubConfig {
    pub history_bytes: usize,
    pub client_queue_bytes: usize,
    pub hello: proto::Hello,
    /// How long live messages are gathered into one shared batch after the first
    /// (`--ws-batch-window`); zero offers each message as it is published.
    pub batch_window: std::time::Duration,
}

/// Shared by the intake tasks (publish) and the WebSocket handlers (subscribe).
#[derive(Debug)]
pub struct Hub {
    state: Mutex<HubState>,
    config: HubConfig,
    metrics: Arc<Metrics>,
    /// Wakes [`Hub::run_flusher`] when a pending batch gets its first message (and when the
    /// hub is dropped, so that the flusher ends).
    batch_opened: Arc<tokio::sync::Notify>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.batch_opened.notify_one();
    }
}

/// What a newcomer needs: its queue and what happened before it arrived.
#[derive(Debug)]
pub struct Subscription {
    pub id: u64,
    pub hello: Bytes,
    pub statuses: Vec<Bytes>,
    pub history: HistorySnapshot,
    pub evicted_frames: u64,
    pub rx: mpsc::Receiver<Outgoing>,
    /// Bytes in `rx` not yet taken; the writer subtracts what it takes.
    pub queued: Arc<AtomicU64>,
    /// True while this client owes a lag notice.
    pub lossy: Arc<AtomicBool>,
}

impl Subscription {
    /// Takes the next live message, keeping the byte accounting right.
    pub async fn recv(&mut self, metrics: &Metrics) -> Option<Outgoing> {
        let bytes = self.rx.recv().await?;
        self.queued.fetch_sub(bytes.len() as u64, Ordering::Relaxed);
        metrics.client_queued_bytes.dec_by(bytes.len() as i64);
        Some(bytes)
    }

    /// The next live message if one is queued already, with the same accounting.
    pub fn try_recv(&mut self, metrics: &Metrics) -> Option<Outgoing> {
        let bytes = self.rx.try_recv().ok()?;
        self.queued.fetch_sub(bytes.len() as u64, Ordering::Relaxed);
        metrics.client_queued_bytes.dec_by(bytes.len() as i64);
        Some(bytes)
    }

    /// The marker that starts the history: how much follows.
    pub fn history_start(&self) -> Bytes {
        Bytes::from(proto::encode(&proto::Message::HistoryStart(proto::HistoryStart {
            frames: self.history.frames,
            bytes: self.history.bytes,
        })))
    }

    /// The marker that ends the history.
    pub fn history_complete(&self) -> Bytes {
        Bytes::from(proto::encode(&proto::Message::HistoryComplete(proto::HistoryComplete {
            frames: self.history.frames,
            evicted_frames: self.evicted_frames,
            bytes: self.history.bytes,
        })))
    }
}

impl Hub {
    pub fn new(config: HubConfig, metrics: Arc<Metrics>) -> Self {
        let sticky = Sticky {
            hello: Bytes::from(proto::encode(&proto::Message::Hello(config.hello.clone()))),
            statuses: vec![None; config.hello.sources.len()],
            ..Sticky::default()
        };
        Hub {
            state: Mutex::new(HubState {
                history: History::default(),
                pending: Pending::default(),
                sticky,
                hello: config.hello.clone(),
                clients: Vec::new(),
                next_client_id: 0,
                evicted_frames: 0,
                eviction_logged: false,
            }),
            config,
            metrics,
            batch_opened: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The bounds and the hello the server started with (sources added since are in
    /// [`Hub::sources`]).
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// Every source now: the hello's, then those added since.
    pub fn sources(&self) -> Vec<proto::SourceInfo> {
        self.lock().hello.sources.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a source after the start: it takes the next index (`make` builds its info from it),
    /// every newcomer's hello lists it, and clients connected now are told with a
    /// [`proto::Message::SourceChanged`].
    pub fn add_source(&self, make: impl FnOnce(u32) -> proto::SourceInfo) -> proto::SourceInfo {
        let mut guard = self.lock();
        let state = &mut *guard;
        let info = make(state.hello.sources.len() as u32);
        state.hello.sources.push(info.clone());
        state.sticky.statuses.push(None);
        self.announce_source(state, &info);
        info
    }

    /// Says that a source now reads elsewhere (a relay that restarted on a new port).
    pub fn update_source(&self, info: proto::SourceInfo) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(slot) = state.hello.sources.get_mut(info.index as usize) else { return };
        *slot = info.clone();
        self.announce_source(state, &info);
    }

    fn announce_source(&self, state: &mut HubState, info: &proto::SourceInfo) {
        state.sticky.hello = Bytes::from(proto::encode(&proto::Message::Hello(state.hello.clone())));
        let bytes = Bytes::from(proto::encode_ref(proto::MessageRef::SourceChanged(info)));
        self.publish_locked(state, Entry { bytes, kind: Kind::Source { source: info.index } });
    }

    /// Offers a message to the history (frames and errors) and to every client. Never waits.
    pub fn publish(&self, bytes: Bytes, kind: Kind) {
        let mut guard = self.lock();
        self.publish_locked(&mut guard, Entry { bytes, kind });
    }

    fn publish_locked(&self, state: &mut HubState, entry: Entry) {
        let kind = entry.kind;
        match kind {
            Kind::Status { source } => {
                if let Some(slot) = state.sticky.statuses.get_mut(source as usize) {
                    *slot = Some(entry.bytes.clone());
                }
            }
            Kind::Recording => state.sticky.recording = Some(entry.bytes.clone()),
            Kind::Discovery => state.sticky.discovery = Some(entry.bytes.clone()),
            Kind::Source { source } => {
                state.sticky.changed.insert(source, entry.bytes.clone());
            }
            Kind::Frame { .. } | Kind::FrameError { .. } => {
                state.history.push(entry.clone());
                let evicted = state.history.evict(self.config.history_bytes);
                if evicted > 0 {
                    state.evicted_frames += evicted as u64;
                    self.metrics.history_evicted_frames.inc_by(evicted as u64);
                    if !state.eviction_logged && self.config.history_bytes > 0 {
                        state.eviction_logged = true;
                        tracing::info!(
                            history_bytes = self.config.history_bytes,
                            "history ring is full; evicting the oldest frames from now on \
                             (newcomers see the most recent {} bytes; raise --history-bytes to keep more)",
                            self.config.history_bytes
                        );
                    }
                }
                self.metrics.history_bytes.set(state.history.bytes as i64);
                self.metrics.history_frames.set(state.history.frames as i64);
            }
        }
        let opened = state.pending.entries.is_empty();
        state.pending.bytes += entry.bytes.len();
        state.pending.entries.push(entry);
        if self.config.batch_window.is_zero() || state.pending.is_full() {
            self.flush_locked(state);
        } else if opened {
            self.batch_opened.notify_one();
        }
    }

    /// Offers the pending batch to every client: encoded once, the same bytes for all (a lone
    /// message as itself). A client without room loses the whole batch, counted per message.
    fn flush_locked(&self, state: &mut HubState) {
        let pending = std::mem::take(&mut state.pending);
        if pending.entries.is_empty() {
            return;
        }
        let message = Outgoing::of(pending.entries.iter().map(|e| e.bytes.clone()).collect());
        self.metrics.ws_live_bytes_copied.inc_by(message.copied() as u64);
        let messages = pending.entries.len() as u64;
        let queue_bound = self.config.client_queue_bytes as u64;
        let sticky = &state.sticky;
        state.clients.retain_mut(|client| {
            match deliver_notice(client, sticky, queue_bound, &self.metrics) {
                Offer::Sent => {}
                Offer::Full => {
                    // A notice that did not fit means the client still owes one: count into it.
                    lose(client, &pending.entries, &self.metrics);
                    return true;
                }
                Offer::Closed => return false,
            }
            match offer(client, message.clone(), messages, queue_bound, &self.metrics) {
                Offer::Sent => true,
                Offer::Full => {
                    lose(client, &pending.entries, &self.metrics);
                    client.lossy.store(true, Ordering::Relaxed);
                    true
                }
                Offer::Closed => false,
            }
        });
        self.metrics.clients.set(state.clients.len() as i64);
    }

    /// Closes each pending batch once its window is over; the app runs it for the hub's life
    /// (it holds no reference while it waits, and ends when the hub is dropped). It sleeps
    /// while nothing is pending.
    pub async fn run_flusher(hub: std::sync::Weak<Hub>) {
        loop {
            let Some(opened) = hub.upgrade().map(|h| h.batch_opened.clone()) else { return };
            opened.notified().await;
            let Some(window) = hub.upgrade().map(|h| h.config.batch_window) else { return };
            tokio::time::sleep(window).await;
            let Some(h) = hub.upgrade() else { return };
            h.flush();
        }
    }

    /// Offers what is pending now (the app does before it stops).
    pub fn flush(&self) {
        self.flush_locked(&mut self.lock());
    }

    /// Registers a client and takes its snapshot, atomically with respect to `publish`.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(CLIENT_CHANNEL_MESSAGES);
        let queued = Arc::new(AtomicU64::new(0));
        let mut state = self.lock();
        // What is pending is in the history already: the clients before this one get it now,
        // and the newcomer gets it in its snapshot, never twice.
        self.flush_locked(&mut state);
        let id = state.next_client_id;
        state.next_client_id += 1;
        let lossy = Arc::new(AtomicBool::new(false));
        state.clients.push(ClientSlot { id, tx, queued: queued.clone(), loss: None, lossy: lossy.clone() });
        self.metrics.clients.set(state.clients.len() as i64);
        self.metrics.clients_total.inc();
        Subscription {
            id,
            hello: state.sticky.hello.clone(),
            statuses: state.sticky.for_newcomer(),
            history: state.history.snapshot(),
            evicted_frames: state.evicted_frames,
            rx,
            queued,
            lossy,
        }
    }

    /// A writer whose queue ran dry calls this when it owes a lag notice, so the notice does not
    /// wait for the next published message (there may be none for a while).
    pub fn deliver_pending_notice(&self, id: u64) {
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let state = &mut *guard;
        let queue_bound = self.config.client_queue_bytes as u64;
        if let Some(client) = state.clients.iter_mut().find(|c| c.id == id) {
            let _ = deliver_notice(client, &state.sticky, queue_bound, &self.metrics);
        }
    }

    /// Forgets a client (its socket closed). Its queued bytes leave the gauge.
    pub fn unsubscribe(&self, id: u64) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(pos) = state.clients.iter().position(|c| c.id == id) {
            let slot = state.clients.swap_remove(pos);
            self.metrics.client_queued_bytes.dec_by(slot.queued.load(Ordering::Relaxed) as i64);
        }
        self.metrics.clients.set(state.clients.len() as i64);
    }

    /// The encoded [`proto::Frame`] that `source` relayed as `seq` at `recv_time_nanos`, while
    /// it is in the history (the page asks for the raw bytes of an event it no longer keeps).
    /// The lock is held only to copy `Arc`s to the chunks; the search runs without it.
    pub fn find_frame(&self, source: u32, seq: u64, recv_time_nanos: u64) -> Option<Bytes> {
        let (sealed, open): (Vec<Arc<Chunk>>, Vec<Entry>) = {
            let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (state.history.sealed.iter().cloned().collect(), state.history.open.iter().cloned().collect())
        };
        let wanted = |e: &Entry| {
            e.kind == Kind::Frame { source, seq }
                && matches!(proto::decode(&e.bytes), Ok(proto::Message::Frame(f)) if f.recv_time_nanos == recv_time_nanos)
        };
        open.iter()
            .rev()
            .find(|e| wanted(e))
            .or_else(|| sealed.iter().rev().find_map(|c| c.entries.iter().rev().find(|e| wanted(e))))
            .map(|e| e.bytes.clone())
    }

    /// Clients connected now.
    pub fn client_count(&self) -> usize {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clients.len()
    }
}

/// Queues the lag notice a client owes, if any; `Sent` also when it owed none.
fn deliver_notice(client: &mut ClientSlot, sticky: &Sticky, queue_bound: u64, metrics: &Metrics) -> Offer {
    let Some(loss) = client.loss.take() else { return Offer::Sent };
    let notice = Outgoing::One(Bytes::from(proto::encode(&loss.notice(queue_bound))));
    let result = offer(client, notice, 1, queue_bound, metrics);
    let Offer::Sent = result else {
        // Not delivered: the client still owes this notice.
        client.loss = Some(loss);
        return result;
    };
    client.lossy.store(false, Ordering::Relaxed);
    metrics.lag_notices.inc();
    // Statuses are "latest state": resend the current ones after a loss so the client is
    // not left with a stale view.
    if loss.statuses {
        for status in sticky.after_loss() {
            let _ = offer(client, Outgoing::One(status.clone()), 1, u64::MAX, metrics);
        }
    }
    result
}

enum Offer {
    Sent,
    Full,
    Closed,
}

/// Queues one WebSocket message holding `messages` protocol messages, if the client has room.
fn offer(client: &ClientSlot, bytes: Outgoing, messages: u64, bound: u64, metrics: &Metrics) -> Offer {
    let len = bytes.len() as u64;
    let queued = client.queued.load(Ordering::Relaxed);
    // An empty queue takes any one message, so a message larger than the bound still flows.
    if queued > 0 && queued + len > bound {
        return Offer::Full;
    }
    match client.tx.try_send(bytes) {
        Ok(()) => {
            client.queued.fetch_add(len, Ordering::Relaxed);
            metrics.client_queued_bytes.inc_by(len as i64);
            metrics.client_ws_messages.inc();
            metrics.client_protocol_messages.inc_by(messages);
            Offer::Sent
        }
        Err(mpsc::error::TrySendError::Full(_)) => Offer::Full,
        Err(mpsc::error::TrySendError::Closed(_)) => Offer::Closed,
    }
}

/// Counts a batch a client had no room for into the loss its next notice reports.
fn lose(client: &mut ClientSlot, entries: &[Entry], metrics: &Metrics) {
    let loss = client.loss.get_or_insert_with(Loss::default);
    for entry in entries {
        loss.add(entry);
        if matches!(entry.kind, Kind::Frame { .. }) {
            metrics.lagged_frames.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hub(history_bytes: usize, client_queue_bytes: usize) -> Hub {
        batching_hub(history_bytes, client_queue_bytes, Duration::ZERO)
    }

    fn batching_hub(history_bytes: usize, client_queue_bytes: usize, batch_window: Duration) -> Hub {
        let hello = proto::Hello {
            protocol_version: proto::PROTOCOL_VERSION,
            server_version: "test".into(),
            mode: proto::ServerMode::Live,
            mode_detail: String::new(),
            sources: vec![],
            defaults: proto::Defaults {
                block_size: 16,
                policy_a: "legacy".into(),
                policy_b: "fixed".into(),
                relay_policy: "dynamo-1.6.1".into(),
                index_max_nodes: None,
            },
            history_bytes: history_bytes as u64,
            client_queue_bytes: client_queue_bytes as u64,
            started_unix_nanos: 0,
            discovery: Vec::new(),
        };
        Hub::new(HubConfig { history_bytes, client_queue_bytes, hello, batch_window }, Arc::new(Metrics::new()))
    }

    fn frame(seq: u64) -> (Bytes, Kind) {
        (Bytes::from(vec![seq as u8; 100]), Kind::Frame { source: 0, seq })
    }

    #[test]
    fn newcomer_sees_history_then_queue_without_overlap() {
        let hub = hub(1 << 20, 1 << 20);
        for seq in 0..1000 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        let mut sub = hub.subscribe();
        for seq in 1000..1010 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        let history: Vec<u8> = sub.history.messages().map(|b| b[0]).collect();
        assert_eq!(history.len(), 1000);
        assert!(history.iter().copied().enumerate().all(|(i, b)| b == i as u8));
        let mut live = Vec::new();
        while let Ok(b) = sub.rx.try_recv() {
            live.push(b.to_bytes()[0]);
        }
        assert_eq!(live, (1000u64..1010).map(|s| s as u8).collect::<Vec<_>>());
    }

    #[test]
    fn ring_stays_within_its_byte_bound_and_counts_evictions() {
        let hub = hub(10 * (100 + ENTRY_OVERHEAD_BYTES), 1 << 20);
        for seq in 0..1000 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        let sub = hub.subscribe();
        assert!(sub.history.bytes <= 10 * 164);
        assert_eq!(sub.history.frames, 10);
        assert_eq!(sub.evicted_frames, 990);
        let first = sub.history.messages().next().unwrap()[0];
        assert_eq!(first, 990u64 as u8);
    }

    #[test]
    fn a_full_client_gets_a_lag_notice_where_the_hole_is() {
        let hub = hub(1 << 20, 250);
        let mut sub = hub.subscribe();
        for seq in 0..5 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        // 250-byte bound: seq 0 and 1 fit (200 bytes), 2..=4 are lost.
        let a = sub.rx.try_recv().unwrap().to_bytes();
        sub.queued.fetch_sub(a.len() as u64, Ordering::Relaxed);
        let b = sub.rx.try_recv().unwrap().to_bytes();
        sub.queued.fetch_sub(b.len() as u64, Ordering::Relaxed);
        assert_eq!((a[0], b[0]), (0, 1));
        let (f, k) = frame(5);
        hub.publish(f, k);
        let notice = proto::decode(&sub.rx.try_recv().unwrap().to_bytes()).unwrap();
        let proto::Message::LagNotice(notice) = notice else { panic!("{notice:?}") };
        assert_eq!(notice.frames_lost, 3);
        assert_eq!(notice.sources, vec![proto::SourceLoss { source: 0, frames: 3, first_seq: 2, last_seq: 4 }]);
        assert_eq!(notice.flag, "--client-queue-bytes");
        assert_eq!(sub.rx.try_recv().unwrap().to_bytes()[0], 5);
    }

    #[test]
    fn ten_clients_are_sent_one_shared_batch_copied_once() {
        let hub = batching_hub(1 << 20, 1 << 20, Duration::from_secs(3600));
        let mut subs: Vec<Subscription> = (0..10).map(|_| hub.subscribe()).collect();
        let mut published = Vec::new();
        for seq in 0..40 {
            let (b, k) = frame(seq);
            published.push(b.clone());
            hub.publish(b, k);
        }
        assert!(subs.iter_mut().all(|s| s.rx.try_recv().is_err()), "nothing is sent before the window closes");
        hub.flush();
        let batches: Vec<Outgoing> = subs.iter_mut().map(|s| s.rx.try_recv().unwrap()).collect();
        // The same batch for every client, and in it the frames as they were published: only
        // the framing was copied, once.
        let Outgoing::Batch(shared) = &batches[0] else { panic!("a batch") };
        assert!(batches.iter().all(|b| matches!(b, Outgoing::Batch(other) if Arc::ptr_eq(other, shared))));
        assert!(shared.messages.iter().zip(&published).all(|(m, p)| m.as_ptr() == p.as_ptr()), "the frames' own bytes");
        let frames_bytes = batches[0].to_bytes();
        let frames = proto::unbatch(&frames_bytes).unwrap();
        assert_eq!(frames.iter().map(|f| f[0]).collect::<Vec<_>>(), (0..40).collect::<Vec<u8>>());
        let framing = (batches[0].len() - 40 * 100) as u64;
        assert!(framing < 200, "{framing} bytes of framing");
        assert_eq!(hub.metrics.ws_live_bytes_copied.get(), framing);
        assert_eq!(hub.metrics.client_protocol_messages.get(), 400);
        assert_eq!(hub.metrics.client_ws_messages.get(), 10);
        // A lone message goes as itself, uncopied.
        let (b, k) = frame(40);
        hub.publish(b.clone(), k);
        hub.flush();
        assert!(subs.iter_mut().all(|s| matches!(s.rx.try_recv().unwrap(), Outgoing::One(o) if o.as_ptr() == b.as_ptr())));
        assert_eq!(hub.metrics.ws_live_bytes_copied.get(), framing);
    }

    #[test]
    fn a_full_batch_is_offered_without_waiting_for_the_window() {
        let hub = batching_hub(1 << 20, 1 << 20, Duration::from_secs(3600));
        let mut sub = hub.subscribe();
        for seq in 0..BATCH_MESSAGES as u64 + 1 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        assert_eq!(proto::unbatch(&sub.rx.try_recv().unwrap().to_bytes()).unwrap().len(), BATCH_MESSAGES);
        assert!(sub.rx.try_recv().is_err(), "the 257th waits for the window");
    }

    #[test]
    fn a_newcomer_gets_what_was_pending_once_in_its_history() {
        let hub = batching_hub(1 << 20, 1 << 20, Duration::from_secs(3600));
        let mut first = hub.subscribe();
        for seq in 0..3 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        let mut second = hub.subscribe();
        assert_eq!(second.history.messages().count(), 3);
        assert!(second.rx.try_recv().is_err(), "pending messages are not sent again live");
        assert_eq!(proto::unbatch(&first.rx.try_recv().unwrap().to_bytes()).unwrap().len(), 3);
    }

    #[test]
    fn a_client_without_room_loses_the_whole_batch_and_is_told_which_frames() {
        let hub = batching_hub(1 << 20, 1000, Duration::from_secs(3600));
        let mut sub = hub.subscribe();
        for seq in 0..8 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        hub.flush();
        for seq in 8..20 {
            let (b, k) = frame(seq);
            hub.publish(b, k);
        }
        hub.flush();
        let first = sub.try_recv(&hub.metrics).unwrap();
        assert_eq!(proto::unbatch(&first.to_bytes()).unwrap().len(), 8);
        let (b, k) = frame(20);
        hub.publish(b, k);
        hub.flush();
        let proto::Message::LagNotice(notice) = proto::decode(&sub.rx.try_recv().unwrap().to_bytes()).unwrap() else { panic!("a notice") };
        assert_eq!(notice.sources, vec![proto::SourceLoss { source: 0, frames: 12, first_seq: 8, last_seq: 19 }]);
        assert_eq!(hub.metrics.lagged_frames.get(), 12);
        assert_eq!(sub.rx.try_recv().unwrap().to_bytes()[0], 20);
    }
}
