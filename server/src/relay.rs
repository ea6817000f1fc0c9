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
//! Neighbours: `intake` and `replay` publish; `http` subscribes one client per WebSocket.

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

#[derive(Debug)]
struct ClientSlot {
    id: u64,
    tx: mpsc::Sender<Bytes>,
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

#[derive(Debug)]
struct HubState {
    history: History,
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
}

/// Shared by the intake tasks (publish) and the WebSocket handlers (subscribe).
#[derive(Debug)]
pub struct Hub {
    state: Mutex<HubState>,
    config: HubConfig,
    metrics: Arc<Metrics>,
}

/// What a newcomer needs: its queue and what happened before it arrived.
#[derive(Debug)]
pub struct Subscription {
    pub id: u64,
    pub hello: Bytes,
    pub statuses: Vec<Bytes>,
    pub history: HistorySnapshot,
    pub evicted_frames: u64,
    pub rx: mpsc::Receiver<Bytes>,
    /// Bytes in `rx` not yet taken; the writer subtracts what it takes.
    pub queued: Arc<AtomicU64>,
    /// True while this client owes a lag notice.
    pub lossy: Arc<AtomicBool>,
}

impl Subscription {
    /// Takes the next live message, keeping the byte accounting right.
    pub async fn recv(&mut self, metrics: &Metrics) -> Option<Bytes> {
        let bytes = self.rx.recv().await?;
        self.queued.fetch_sub(bytes.len() as u64, Ordering::Relaxed);
        metrics.client_queued_bytes.dec_by(bytes.len() as i64);
        Some(bytes)
    }

    /// The next live message if one is queued already, with the same accounting.
    pub fn try_recv(&mut self, metrics: &Metrics) -> Option<Bytes> {
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
                sticky,
                hello: config.hello.clone(),
                clients: Vec::new(),
                next_client_id: 0,
                evicted_frames: 0,
                eviction_logged: false,
            }),
            config,
            metrics,
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
        let queue_bound = self.config.client_queue_bytes as u64;
        let sticky = &state.sticky;
        state.clients.retain_mut(|client| {
            match deliver_notice(client, sticky, queue_bound, &self.metrics) {
                Offer::Sent => {}
                Offer::Full => {
                    // A notice that did not fit means the client still owes one: count into it.
                    client.loss.get_or_insert_with(Loss::default).add(&entry);
                    count_lost(&entry, &self.metrics);
                    return true;
                }
                Offer::Closed => return false,
            }
            match offer(client, entry.bytes.clone(), queue_bound, &self.metrics) {
                Offer::Sent => true,
                Offer::Full => {
                    client.loss.get_or_insert_with(Loss::default).add(&entry);
                    client.lossy.store(true, Ordering::Relaxed);
                    count_lost(&entry, &self.metrics);
                    true
                }
                Offer::Closed => false,
            }
        });
        self.metrics.clients.set(state.clients.len() as i64);
    }

    /// Registers a client and takes its snapshot, atomically with respect to `publish`.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(CLIENT_CHANNEL_MESSAGES);
        let queued = Arc::new(AtomicU64::new(0));
        let mut state = self.lock();
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
    let notice = Bytes::from(proto::encode(&loss.notice(queue_bound)));
    let result = offer(client, notice, queue_bound, metrics);
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
            let _ = offer(client, status.clone(), u64::MAX, metrics);
        }
    }
    result
}

enum Offer {
    Sent,
    Full,
    Closed,
}

fn offer(client: &ClientSlot, bytes: Bytes, bound: u64, metrics: &Metrics) -> Offer {
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
            Offer::Sent
        }
        Err(mpsc::error::TrySendError::Full(_)) => Offer::Full,
        Err(mpsc::error::TrySendError::Closed(_)) => Offer::Closed,
    }
}

fn count_lost(entry: &Entry, metrics: &Metrics) {
    if matches!(entry.kind, Kind::Frame { .. }) {
        metrics.lagged_frames.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(history_bytes: usize, client_queue_bytes: usize) -> Hub {
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
            },
            history_bytes: history_bytes as u64,
            client_queue_bytes: client_queue_bytes as u64,
            started_unix_nanos: 0,
            discovery: Vec::new(),
        };
        Hub::new(HubConfig { history_bytes, client_queue_bytes, hello }, Arc::new(Metrics::new()))
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
            live.push(b[0]);
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
        let a = sub.rx.try_recv().unwrap();
        sub.queued.fetch_sub(a.len() as u64, Ordering::Relaxed);
        let b = sub.rx.try_recv().unwrap();
        sub.queued.fetch_sub(b.len() as u64, Ordering::Relaxed);
        assert_eq!((a[0], b[0]), (0, 1));
        let (f, k) = frame(5);
        hub.publish(f, k);
        let notice = proto::decode(&sub.rx.try_recv().unwrap()).unwrap();
        let proto::Message::LagNotice(notice) = notice else { panic!("{notice:?}") };
        assert_eq!(notice.frames_lost, 3);
        assert_eq!(notice.sources, vec![proto::SourceLoss { source: 0, frames: 3, first_seq: 2, last_seq: 4 }]);
        assert_eq!(notice.flag, "--client-queue-bytes");
        assert_eq!(sub.rx.try_recv().unwrap()[0], 5);
    }
}
