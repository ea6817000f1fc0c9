//! The demo's Dynamo relay: what Dynamo 1.6.1's `KvEventPublisher` would publish for each
//! simulated worker, on a real event plane.
//!
//! Per worker, kvscope-router's [`Predictor`] (policy `dynamo-1.6.1`, the worker's id and block
//! size) turns each engine batch into the RouterEvents 1.6.1's relay keeps, and kvscope-encode
//! writes them as the relay does: one envelope per batch that keeps an event, `sequence` from 0
//! per publisher. Embedded (the default), each worker's relay binds a ZMQ-plane publisher on
//! loopback (an XPUB, so it starts once kvscope has subscribed; 4 frames per message); with
//! `--event-plane nats://...` every relay publishes onto that NATS server under
//! [`DEMO_SUBJECT`].

use bytes::Bytes;
use futures_util::FutureExt;
use kvscope_router::{Predictor, RelayConfig};
use std::time::Duration;
use zeromq::{Socket, SocketRecv, SocketSend, XPubSocket, ZmqMessage};

/// The subject the demo's relays publish on with `--event-plane nats://...` (Dynamo's form for
/// namespace `demo`, component `backend`, endpoint `generate`).
pub const DEMO_SUBJECT: &str = "namespace.demo.component.backend.endpoint.generate.kv-events";

/// Where the demo's relays publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoPlane {
    /// No relay (`--no-event-plane`).
    Off,
    /// One ZMQ-plane publisher per worker on loopback (the default).
    Embedded,
    /// Onto this NATS server (`--event-plane nats://HOST:PORT`).
    Nats(String),
}

enum Out {
    Zmq { socket: XPubSocket, subscribed: bool },
    Nats(async_nats::Client),
}

/// One worker's relay.
pub struct Relay {
    predictor: Predictor,
    publisher_id: u64,
    sequence: u64,
    out: Out,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("publisher_id", &self.publisher_id).field("sequence", &self.sequence).finish_non_exhaustive()
    }
}

/// A publisher id per engine, as a relay process would draw one (fixed, for reproducible demos).
pub fn publisher_id(worker: u32, dp_rank: u32) -> u64 {
    0x6b76_7363_6f70_6500 ^ u64::from(worker).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (u64::from(dp_rank) << 48)
}

impl Relay {
    /// Binds the ZMQ-plane publisher of worker `worker`'s rank `dp_rank` on loopback; returns it
    /// and `zmq://HOST:PORT`.
    pub async fn bind_zmq(worker: u32, dp_rank: u32, block_size: u32) -> Result<(Relay, String), String> {
        let mut socket = XPubSocket::new();
        let ep = socket.bind("tcp://127.0.0.1:0").await.map_err(|e| format!("demo relay: cannot bind a ZMQ-plane publisher: {e}"))?;
        let url = ep.to_string().replacen("tcp://", "zmq://", 1);
        Ok((Relay::new(worker, dp_rank, block_size, Out::Zmq { socket, subscribed: false }), url))
    }

    /// The relay of worker `worker`'s rank `dp_rank` onto a NATS client.
    pub fn nats(worker: u32, dp_rank: u32, block_size: u32, client: async_nats::Client) -> Relay {
        Relay::new(worker, dp_rank, block_size, Out::Nats(client))
    }

    fn new(worker: u32, dp_rank: u32, block_size: u32, out: Out) -> Relay {
        let predictor = Predictor::new(RelayConfig::dynamo_1_6_1(u64::from(worker), dp_rank, block_size));
        Relay { predictor, publisher_id: publisher_id(worker, dp_rank), sequence: 0, out }
    }

    /// Embedded plane: waits (up to `timeout`) until kvscope's SUB has subscribed, since a
    /// publisher drops what it sends before that and the event plane has no replay.
    pub async fn wait_subscribed(&mut self, timeout: Duration) {
        if let Out::Zmq { socket, subscribed } = &mut self.out {
            let wait = async {
                while !*subscribed {
                    match socket.recv().await {
                        Ok(m) if m.get(0).is_some_and(|f| f.first() == Some(&1)) => *subscribed = true,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            };
            let _ = tokio::time::timeout(timeout, wait).await;
        }
    }

    /// Relays one engine batch published under `seq`: the RouterEvents 1.6.1's relay keeps, in
    /// one envelope, or nothing when it keeps none.
    pub async fn relay(&mut self, seq: u64, payload: &[u8]) {
        let predictions = match self.predictor.predict(seq, payload) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("demo relay: batch seq {seq} not relayed: {e}");
                return;
            }
        };
        let published_at = crate::time::unix_nanos() / 1_000_000;
        let envelope = match kvscope_encode::router::relay_envelope(self.publisher_id, self.sequence, published_at, &predictions) {
            Ok(Some(env)) => env,
            Ok(None) => return,
            Err(e) => {
                tracing::error!("demo relay: envelope not written: {e}");
                return;
            }
        };
        self.sequence += 1;
        match &mut self.out {
            Out::Zmq { socket, .. } => {
                // Take in subscriptions that arrived meanwhile (a SUB that reconnected).
                while let Some(Ok(_)) = socket.recv().now_or_never() {}
                let frames = match kvscope_encode::router::zmq_plane_frames(&envelope) {
                    Ok(f) => f,
                    Err(e) => return tracing::error!("demo relay: frames not written: {e}"),
                };
                let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
                if let Ok(message) = ZmqMessage::try_from(frames) {
                    let _ = socket.send(message).await;
                }
            }
            Out::Nats(client) => {
                let body = match kvscope_encode::router::encode_envelope(&envelope) {
                    Ok(b) => b,
                    Err(e) => return tracing::error!("demo relay: envelope not written: {e}"),
                };
                if let Err(e) = client.publish(DEMO_SUBJECT, body.into()).await {
                    tracing::warn!("demo relay: publish to NATS failed: {e}");
                }
            }
        }
    }
}
