//! The relay's WebSocket: the upgrade, and frames written from the hub's shared bytes.
//!
//! Every client is sent the same `Bytes` (the hub's batches, the history's messages). A
//! WebSocket library that frames into its own write buffer copies each message once per client:
//! axum's (tungstenite) did, 43 KB per Kimi-K3 batch per client, uncounted. Here a message of
//! [`WRITE_SHARED_FROM`] bytes or more goes out as its frame header and the shared bytes in one
//! vectored write (fastwebsockets), straight from the hub's buffer to the kernel; smaller ones
//! are copied into the socket's buffer, where several make one write, and counted
//! (`kvscope_ws_socket_bytes_copied_total`).
//!
//! Clients have nothing to send but control frames: a task reads them and the writer answers
//! ([`Socket::client_says`]): a pong for a ping, a close for a close, close code 1009 for a
//! message over the cap (`--max-ws-message-bytes`); an error ends the socket.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use bytes::Bytes;
use fastwebsockets::{Frame, OpCode, Payload, WebSocket, WebSocketError, WebSocketRead, WebSocketWrite};
use hyper_util::rt::TokioIo;
use tokio::io::{BufWriter, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// Messages of this many bytes or more are written from the shared bytes, uncopied; smaller ones
/// are copied into the socket's buffer, where several small messages make one write.
pub const WRITE_SHARED_FROM: usize = 8 * 1024;

type Io = TokioIo<hyper::upgrade::Upgraded>;

/// Why a request to `/ws` was not upgraded.
#[derive(Debug)]
pub struct NotAnUpgrade(String);

impl std::fmt::Display for NotAnUpgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Answers a WebSocket upgrade (101 Switching Protocols) and hands the socket, once the
/// connection is switched, to `serve`.
pub fn upgrade<F, Fut>(mut request: Request<Body>, max_message_bytes: usize, serve: F) -> Result<Response, NotAnUpgrade>
where
    F: FnOnce(Socket) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if !fastwebsockets::upgrade::is_upgrade_request(&request) {
        return Err(NotAnUpgrade(
            "this is kvscope's WebSocket endpoint: open it with a WebSocket client (the dashboard does), \
             with Connection: Upgrade and Upgrade: websocket"
                .to_owned(),
        ));
    }
    let (response, upgraded) =
        fastwebsockets::upgrade::upgrade(&mut request).map_err(|e| NotAnUpgrade(format!("WebSocket upgrade refused: {e}")))?;
    tokio::spawn(async move {
        match upgraded.await {
            Ok(ws) => serve(Socket::new(ws, max_message_bytes)).await,
            Err(e) => tracing::debug!("WebSocket upgrade did not complete: {e}"),
        }
    });
    Ok(response.map(Body::new))
}

/// One client's socket: the writer here, the reader in a task of its own that tells the writer
/// what the client asked for ([`Socket::client_says`]).
pub struct Socket {
    write: WebSocketWrite<BufWriter<WriteHalf<Io>>>,
    said: mpsc::Receiver<ClientSays>,
    reader: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").field("closed", &self.write.is_closed()).finish_non_exhaustive()
    }
}

/// What the client's side of the socket asks of the writer.
#[derive(Debug)]
pub enum ClientSays {
    /// A ping, to be answered with this payload.
    Ping(Vec<u8>),
    /// A close (1000), or a message over the cap (1009): answered with this code, then gone.
    Close(u16),
    /// The connection ended (an error, or the reader gone): nothing to answer.
    Gone,
}

impl Socket {
    fn new(ws: WebSocket<Io>, max_message_bytes: usize) -> Socket {
        let (mut read, mut write) = ws.split(|io| {
            let (r, w) = tokio::io::split(io);
            (r, BufWriter::with_capacity(WRITE_SHARED_FROM, w))
        });
        // Every frame goes out as its header and payload in one vectored write, which the
        // BufWriter copies (once) below its capacity and passes through at or above it.
        write.set_writev(true);
        write.set_writev_threshold(0);
        read.set_max_message_size(max_message_bytes);
        // The writer answers pings and closes, in its own order with the data.
        read.set_auto_pong(false);
        read.set_auto_close(false);
        let (tell, said) = mpsc::channel(4);
        let reader = tokio::spawn(async move { read_until_closed(&mut read, &tell).await });
        Socket { write, said, reader }
    }

    /// The next thing the client asks for. Cancel-safe: answer it with [`Socket::answer`].
    pub async fn client_says(&mut self) -> ClientSays {
        self.said.recv().await.unwrap_or(ClientSays::Gone)
    }

    /// Answers what the client said; false when the client is gone.
    pub async fn answer(&mut self, said: ClientSays) -> bool {
        match said {
            ClientSays::Ping(payload) => {
                self.write.write_frame(Frame::pong(Payload::Owned(payload))).await.is_ok() && self.flush().await.is_ok()
            }
            ClientSays::Close(code) => {
                let _ = tokio::time::timeout(CLOSE_WAIT, async {
                    self.write.write_frame(Frame::close(code, b"")).await?;
                    self.flush().await
                })
                .await;
                false
            }
            ClientSays::Gone => false,
        }
    }

    /// Queues one binary message; small ones wait in the socket's buffer for [`Socket::flush`].
    pub async fn send(&mut self, message: &Bytes, metrics: &Metrics) -> Result<(), WebSocketError> {
        if message.len() < WRITE_SHARED_FROM {
            metrics.ws_socket_bytes_copied.inc_by(message.len() as u64);
        }
        self.write.write_frame(Frame::binary(Payload::Borrowed(message))).await
    }

    /// Writes what small messages wait in the socket's buffer.
    pub async fn flush(&mut self) -> Result<(), WebSocketError> {
        self.write.flush().await
    }

    /// Sends a normal close unless one was sent, waiting at most [`CLOSE_WAIT`] for the client
    /// to take it.
    pub async fn close(mut self) {
        if !self.write.is_closed() {
            let _ = tokio::time::timeout(CLOSE_WAIT, async {
                self.write.write_frame(Frame::close(1000, b"")).await?;
                self.flush().await
            })
            .await;
        }
        self.reader.abort();
    }
}

/// How long a close waits for a client that does not read.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

async fn read_until_closed(read: &mut WebSocketRead<ReadHalf<Io>>, tell: &mpsc::Sender<ClientSays>) {
    // With auto pong and close off, nothing is sent from here.
    let mut send_nothing = |_: Frame<'_>| async { Ok::<(), std::convert::Infallible>(()) };
    loop {
        let said = match read.read_frame(&mut send_nothing).await {
            Ok(frame) if frame.opcode == OpCode::Close => ClientSays::Close(1000),
            Ok(frame) if frame.opcode == OpCode::Ping => ClientSays::Ping(frame.payload.to_vec()),
            Ok(_) => continue,
            Err(WebSocketError::FrameTooLarge) => ClientSays::Close(1009),
            Err(e) => {
                tracing::debug!("WebSocket client's read ended: {e}");
                return;
            }
        };
        let last = matches!(said, ClientSays::Close(_));
        if tell.send(said).await.is_err() || last {
            return;
        }
    }
}
