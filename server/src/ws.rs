//! The relay's WebSocket: the upgrade, and frames written from the hub's shared bytes.
//!
//! Every client is sent the same messages: the hub's batches, as their messages' own bytes and a
//! few bytes of framing ([`Outgoing`]). A WebSocket library frames a message from one buffer of
//! its own: axum's (tungstenite) copied every message into its write buffer, per client (43 KB per
//! Kimi-K3 frame per client, uncounted), and none writes a message from many slices. So the
//! writer here is ours: a server's frame is a 2-10 byte header and the payload, unmasked (RFC
//! 6455, 5.2), written as that header and the message's slices in vectored writes. A message of
//! [`WRITE_SHARED_FROM`] bytes or more goes from the shared bytes to the kernel uncopied; a
//! smaller one is copied into the socket's buffer, where several make one write, and counted
//! (`kvscope_ws_socket_bytes_copied_total`).
//!
//! The upgrade and the reading are fastwebsockets': clients send nothing but control frames,
//! which a task reads and the writer answers ([`Socket::client_says`]): a pong for a ping, a close
//! for a close, close code 1009 for a message over the cap (`--max-ws-message-bytes`); an error
//! ends the socket.

use std::io::IoSlice;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use fastwebsockets::{Frame, OpCode, Role, WebSocketError, WebSocketRead};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::relay::Outgoing;

/// Messages of this many bytes or more are written from the shared bytes, uncopied; smaller ones
/// are copied into the socket's buffer, where several small messages make one write.
pub const WRITE_SHARED_FROM: usize = 8 * 1024;

/// How long a close waits for a client that does not read.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

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
            Ok(ws) => serve(Socket::new(ws.into_inner(), max_message_bytes)).await,
            Err(e) => tracing::debug!("WebSocket upgrade did not complete: {e}"),
        }
    });
    Ok(response.map(Body::new))
}

/// One client's socket: the writer here, the reader in a task of its own that tells the writer
/// what the client asked for ([`Socket::client_says`]).
pub struct Socket {
    write: BufWriter<WriteHalf<Io>>,
    said: mpsc::Receiver<ClientSays>,
    reader: tokio::task::JoinHandle<()>,
    /// A close was sent: nothing more may be.
    closed: bool,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").field("closed", &self.closed).finish_non_exhaustive()
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

/// The opcodes the server sends (RFC 6455, 5.2).
#[derive(Debug, Clone, Copy)]
enum Sends {
    Binary = 0x2,
    Close = 0x8,
    Pong = 0xa,
}

impl Socket {
    fn new(io: Io, max_message_bytes: usize) -> Socket {
        let (read, write) = tokio::io::split(io);
        // The read half only: this module writes its own frames.
        let (mut read, _) = fastwebsockets::after_handshake_split(read, tokio::io::sink(), Role::Server);
        read.set_max_message_size(max_message_bytes);
        // The writer answers pings and closes, in its own order with the data.
        read.set_auto_pong(false);
        read.set_auto_close(false);
        let (tell, said) = mpsc::channel(4);
        let reader = tokio::spawn(async move { read_until_closed(&mut read, &tell).await });
        Socket { write: BufWriter::with_capacity(WRITE_SHARED_FROM, write), said, reader, closed: false }
    }

    /// The next thing the client asks for. Cancel-safe: answer it with [`Socket::answer`].
    pub async fn client_says(&mut self) -> ClientSays {
        self.said.recv().await.unwrap_or(ClientSays::Gone)
    }

    /// Answers what the client said; false when the client is gone.
    pub async fn answer(&mut self, said: ClientSays) -> bool {
        match said {
            ClientSays::Ping(payload) => {
                self.write_frame(Sends::Pong, payload.len(), [&payload[..]]).await.is_ok() && self.flush().await.is_ok()
            }
            ClientSays::Close(code) => {
                self.send_close(code).await;
                false
            }
            ClientSays::Gone => false,
        }
    }

    /// Queues one message; one under [`WRITE_SHARED_FROM`] bytes waits in the socket's buffer
    /// for [`Socket::flush`].
    pub async fn send(&mut self, message: &Outgoing, metrics: &Metrics) -> std::io::Result<()> {
        if message.len() < WRITE_SHARED_FROM {
            metrics.ws_socket_bytes_copied.inc_by(message.len() as u64);
        }
        self.write_frame(Sends::Binary, message.len(), message.slices()).await
    }

    /// Writes what small messages wait in the socket's buffer.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.write.flush().await
    }

    /// Sends a normal close unless one was sent, and stops reading.
    pub async fn close(mut self) {
        self.send_close(1000).await;
        self.reader.abort();
    }

    /// Sends a close with `code`, once, waiting at most [`CLOSE_WAIT`] for the client to take it.
    async fn send_close(&mut self, code: u16) {
        if self.closed {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            self.write_frame(Sends::Close, 2, [&code.to_be_bytes()[..]]).await?;
            self.flush().await
        })
        .await;
        self.closed = true;
    }

    /// One frame of `len` bytes, `payload` in slices: its header and the slices in vectored
    /// writes (one allocation, for the slices' list).
    async fn write_frame<'a>(&mut self, opcode: Sends, len: usize, payload: impl IntoIterator<Item = &'a [u8]>) -> std::io::Result<()> {
        if self.closed {
            return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "the WebSocket was closed"));
        }
        let (head, head_len) = frame_head(opcode, len);
        let mut slices: Vec<IoSlice<'_>> = vec![IoSlice::new(&head[..head_len])];
        #[allow(clippy::redundant_closure, reason = "the closure reborrows each slice for the header's shorter lifetime")]
        slices.extend(payload.into_iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)));
        debug_assert_eq!(slices.iter().map(|s| s.len()).sum::<usize>(), head_len + len, "the frame's length is its payload's");
        write_all_vectored(&mut self.write, &mut slices).await
    }
}

/// A server's frame header: FIN, the opcode, the payload's length; a server does not mask.
fn frame_head(opcode: Sends, len: usize) -> ([u8; 10], usize) {
    let mut head = [0u8; 10];
    head[0] = 0x80 | opcode as u8;
    let n = if len < 126 {
        head[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        head[1] = 126;
        head[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    (head, n)
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(write: &mut W, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = write.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The three length forms of RFC 6455's header, at their edges, as a client reads them.
    #[test]
    fn a_frame_head_spells_its_length_in_the_shortest_form() {
        let cases: [(usize, &[u8]); 6] = [
            (0, &[0x82, 0]),
            (125, &[0x82, 125]),
            (126, &[0x82, 126, 0, 126]),
            (65_535, &[0x82, 126, 0xff, 0xff]),
            (65_536, &[0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
            (43_000_000_000, &[0x82, 127, 0, 0, 0, 0x0a, 0x02, 0xff, 0xee, 0x00]),
        ];
        for (len, want) in cases {
            let (head, n) = frame_head(Sends::Binary, len);
            assert_eq!(&head[..n], want, "{len} bytes");
        }
        assert_eq!(frame_head(Sends::Close, 2).0[..2], [0x88, 2]);
        assert_eq!(frame_head(Sends::Pong, 0).0[..2], [0x8a, 0]);
    }
}
