//! A simulated engine endpoint: a PUB socket publishing `[topic, seq, payload]` with its own
//! sequence counter from 0, and a ROUTER replay socket answering `["", start_seq]` from a bounded
//! buffer of recent messages, the way vLLM's `ZmqEventPublisher` does.
//!
//! `demo` uses a plain PUB, as engines do (messages sent before a subscriber's subscription
//! arrives are dropped, which the intake handles). `publish` uses an XPUB, which is the same
//! on the wire for a SUB but lets it wait until a subscriber is there before replaying a
//! capture, so an indexer under test sees the recording from its first frame.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::FutureExt;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, XPubSocket, ZmqMessage};

/// Messages the replay buffer keeps (vLLM's default `buffer_steps` is 10 000).
pub const REPLAY_BUFFER_MESSAGES: usize = 10_000;

/// Payload bytes the replay buffer keeps, whichever bound is reached first. vLLM bounds steps
/// only, which one engine of 50 KB batches can afford (500 MB); 64 simulated in one process
/// cannot (32 GB: `demo --workers 64 --rate 40` grew by 116 MB/s until the bound of steps).
/// 2 MiB is a second of Kimi-K3 batches at 40/s, and about vLLM's 10,000 steps of small events.
pub const REPLAY_BUFFER_BYTES: usize = 2 << 20;

type Buffer = Arc<Mutex<ReplayBuffer>>;

/// Recent messages for replay, oldest first, bounded by [`REPLAY_BUFFER_MESSAGES`] and
/// [`REPLAY_BUFFER_BYTES`].
#[derive(Default)]
struct ReplayBuffer {
    messages: VecDeque<(u64, Bytes, Bytes)>,
    bytes: usize,
}

impl ReplayBuffer {
    fn push(&mut self, seq: u64, topic: Bytes, payload: Bytes) {
        self.bytes += payload.len();
        self.messages.push_back((seq, topic, payload));
        while self.messages.len() > REPLAY_BUFFER_MESSAGES || (self.bytes > REPLAY_BUFFER_BYTES && self.messages.len() > 1) {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, _, payload)) = self.messages.pop_front() {
            self.bytes -= payload.len();
        }
    }

    fn clear(&mut self) {
        *self = ReplayBuffer::default();
    }
}

enum Publisher {
    Pub(PubSocket),
    XPub { socket: XPubSocket, subscribers: usize },
}

/// One engine endpoint (one data-parallel rank).
pub struct Engine {
    publisher: Publisher,
    buffer: Buffer,
    next_seq: u64,
    /// `tcp://127.0.0.1:PORT` of the PUB socket.
    pub endpoint: String,
    /// `tcp://127.0.0.1:PORT` of the replay ROUTER.
    pub replay_endpoint: String,
    router_task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("endpoint", &self.endpoint).field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.router_task.abort();
    }
}

fn endpoint_string(e: &zeromq::Endpoint) -> String {
    e.to_string()
}

impl Engine {
    /// Binds a PUB (or XPUB with `xpub`) and a replay ROUTER. `bind`/`replay_bind` are
    /// `tcp://host:port` (port 0 picks a free one). `replay_topic`: whether replies carry the
    /// topic frame (`[topic, seq, payload]`) or not (`[seq, payload]`).
    pub async fn bind(bind: &str, replay_bind: &str, xpub: bool, replay_topic: bool) -> Result<Engine, String> {
        let (publisher, endpoint) = if xpub {
            let mut socket = XPubSocket::new();
            let ep = socket.bind(bind).await.map_err(|e| bind_error(bind, &e))?;
            (Publisher::XPub { socket, subscribers: 0 }, endpoint_string(&ep))
        } else {
            let mut socket = PubSocket::new();
            let ep = socket.bind(bind).await.map_err(|e| bind_error(bind, &e))?;
            (Publisher::Pub(socket), endpoint_string(&ep))
        };
        let mut router = RouterSocket::new();
        let replay_ep = router.bind(replay_bind).await.map_err(|e| bind_error(replay_bind, &e))?;
        let buffer: Buffer = Arc::default();
        let router_task = tokio::spawn(serve_replay(router, buffer.clone(), replay_topic));
        Ok(Engine { publisher, buffer, next_seq: 0, endpoint, replay_endpoint: endpoint_string(&replay_ep), router_task })
    }

    /// The sequence number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// XPUB only: waits until `n` subscriptions arrived.
    pub async fn wait_subscribers(&mut self, n: usize) {
        if let Publisher::XPub { socket, subscribers } = &mut self.publisher {
            while *subscribers < n {
                if let Ok(m) = socket.recv().await
                    && m.get(0).is_some_and(|f| f.first() == Some(&1))
                {
                    *subscribers += 1;
                }
            }
        }
    }

    /// Publishes one payload with the next sequence number.
    pub async fn publish(&mut self, topic: &Bytes, payload: Bytes) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.publish_with_seq(topic, seq, payload).await;
    }

    /// Publishes with a given sequence number (re-publishing a capture keeps its seqs).
    pub async fn publish_with_seq(&mut self, topic: &Bytes, seq: u64, payload: Bytes) {
        {
            let mut buffer = self.buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            buffer.push(seq, topic.clone(), payload.clone());
        }
        self.next_seq = seq + 1;
        self.send(vec![topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload]).await;
    }

    /// Sends frames as they are (tests use it for malformed messages).
    pub async fn send(&mut self, frames: Vec<Bytes>) {
        // A ZMQ message has at least one frame; no frames is nothing to send.
        let Ok(message) = ZmqMessage::try_from(frames) else { return };
        match &mut self.publisher {
            Publisher::Pub(socket) => {
                let _ = socket.send(message).await;
            }
            Publisher::XPub { socket, subscribers } => {
                // Take in subscriptions that arrived meanwhile (a SUB that reconnected) without
                // waiting: XPUB registers them only when they are read.
                while let Some(Ok(m)) = socket.recv().now_or_never() {
                    if m.get(0).is_some_and(|f| f.first() == Some(&1)) {
                        *subscribers += 1;
                    }
                }
                let _ = socket.send(message).await;
            }
        }
    }

    /// The engine restarts (a new process on the same endpoint): its seq starts again from 0
    /// and its replay buffer is empty, as vLLM's publisher is after a restart.
    pub fn restart(&mut self) {
        self.next_seq = 0;
        self.buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// Skips `n` seqs that are never published nor kept for replay: a gap replay cannot fill.
    pub fn lose(&mut self, n: u64) {
        self.next_seq += n;
    }

    /// Drops the oldest `n` messages from the replay buffer (a test makes a gap unrecoverable).
    pub fn forget_oldest(&mut self, n: usize) {
        let mut buffer = self.buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for _ in 0..n {
            buffer.pop_front();
        }
    }

    /// Stores a message in the replay buffer without publishing it (a test makes a gap that
    /// replay can fill).
    pub fn buffer_only(&mut self, topic: &Bytes, payload: Bytes) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut buffer = self.buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        buffer.push(seq, topic.clone(), payload);
    }
}

fn bind_error(addr: &str, e: &zeromq::ZmqError) -> String {
    format!("cannot bind {addr}: {e}; pick another port, or port 0 for a free one")
}

/// Answers replay requests until the task is aborted.
async fn serve_replay(mut router: RouterSocket, buffer: Buffer, replay_topic: bool) {
    const END: [u8; 8] = u64::MAX.to_be_bytes();
    loop {
        let Ok(request) = router.recv().await else { continue };
        let frames = request.into_vec();
        // [identity, "", start_seq]
        let (Some(identity), Some(start)) = (frames.first(), frames.last()) else { continue };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else { continue };
        let start = u64::from_be_bytes(start);
        let replies: Vec<(u64, Bytes, Bytes)> = {
            let buffer = buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            buffer.messages.iter().filter(|(seq, _, _)| *seq >= start).cloned().collect()
        };
        for item in replies.into_iter().map(Some).chain([None]) {
            let mut out = vec![identity.clone(), Bytes::new()];
            match item {
                Some((seq, topic, payload)) => {
                    if replay_topic {
                        out.push(topic);
                    }
                    out.push(Bytes::copy_from_slice(&seq.to_be_bytes()));
                    out.push(payload);
                }
                None => {
                    if replay_topic {
                        out.push(Bytes::new());
                    }
                    out.push(Bytes::from_static(&END));
                    out.push(Bytes::new());
                }
            }
            // `out` starts with the identity frame, so it is never empty.
            let Ok(reply) = ZmqMessage::try_from(out) else { break };
            if router.send(reply).await.is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_buffer_keeps_the_newest_messages_within_its_bytes() {
        let mut buffer = ReplayBuffer::default();
        let batch = Bytes::from(vec![0u8; 48 << 10]);
        for seq in 0..200 {
            buffer.push(seq, Bytes::new(), batch.clone());
        }
        assert!(buffer.bytes <= REPLAY_BUFFER_BYTES, "{} bytes kept", buffer.bytes);
        assert_eq!(buffer.bytes, buffer.messages.len() * batch.len());
        assert_eq!(buffer.messages.back().map(|m| m.0), Some(199));
        assert_eq!(buffer.messages.len(), REPLAY_BUFFER_BYTES / batch.len());
        // One message larger than the bound is still there to replay, alone.
        buffer.push(200, Bytes::new(), Bytes::from(vec![0u8; REPLAY_BUFFER_BYTES + 1]));
        assert_eq!(buffer.messages.iter().map(|m| m.0).collect::<Vec<_>>(), [200]);
        // Small messages: the bound of steps, as vLLM's.
        buffer.clear();
        for seq in 0..(REPLAY_BUFFER_MESSAGES as u64 + 5) {
            buffer.push(seq, Bytes::new(), Bytes::from_static(b"x"));
        }
        assert_eq!(buffer.messages.len(), REPLAY_BUFFER_MESSAGES);
        assert_eq!(buffer.messages.front().map(|m| m.0), Some(5));
    }
}
