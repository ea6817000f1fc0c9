//! Messages between the kvscope server and browser, and the .kvcap capture format; engine payloads travel as opaque bytes.
//!
//! What this crate is: serde types, the [`PROTOCOL_VERSION`] constant, and the few functions
//! that put a magic prefix and the version in front of every message and capture file and
//! check them on the way back in ([`encode`], [`decode`], [`capture`]).
//!
//! What it is not: it never looks inside an engine payload. Topic and payload bytes are carried
//! exactly as the engine sent them; decoding and classifying them is the job of `kvscope-wire`
//! and `kvscope-normalize`, on whichever side wants to. It depends on no other kvscope crate, does
//! no I/O of its own beyond `std::io::{Read, Write}` and compiles for `wasm32-unknown-unknown`,
//! because the browser links it.
//!
//! Neighbours: the server (`server/`) builds these messages from its intake types; the web app
//! (`web/`) converts them into its own model. Call sites write `use kvscope_protocol as proto;`.
//!
//! Every WebSocket binary message is `WS_MAGIC` (4 bytes) + version (u16, big-endian) + one
//! [`Message`] as msgpack with named fields (maps), so the browser's devtools show readable keys
//! and a field added later does not shift the others.

pub mod capture;
mod message;
pub mod time;

pub use message::*;

use serde::{Deserialize, Serialize};

/// The version of the WebSocket messages. Bump it whenever the bytes of any message change (the
/// golden-bytes tests say so); the `.kvcap` format has its own, [`capture::FORMAT_VERSION`].
pub const PROTOCOL_VERSION: u16 = 8;

/// Opens every WebSocket message.
pub const WS_MAGIC: [u8; 4] = *b"KVSW";

/// Bytes before the msgpack body of a WebSocket message: magic + version.
pub const WS_PREFIX_LEN: usize = WS_MAGIC.len() + 2;

/// Why bytes could not be read as a kvscope message or capture.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error(
        "not a kvscope message: expected the magic {expected:?} in the first 4 bytes, found {found}; \
         is the peer a kvscope server of this project?"
    )]
    BadMagic { expected: &'static str, found: String },
    #[error(
        "kvscope protocol version {found}, this build speaks version {supported}: the server and \
         the dashboard come from different kvscope builds; reload the page, or rebuild both from one checkout"
    )]
    Version { found: u16, supported: u16 },
    #[error("message of {len} bytes is shorter than the {WS_PREFIX_LEN}-byte prefix (magic + version)")]
    TooShort { len: usize },
    #[error("message body (after the {WS_PREFIX_LEN}-byte prefix) is not a valid kvscope message: {0}")]
    Body(#[from] rmp_serde::decode::Error),
    #[error("message {index} of a batch is itself a batch; a kvscope server never nests them")]
    NestedBatch { index: usize },
}

/// Shows the first bytes of something that should have started with a magic.
pub(crate) fn show_prefix(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing (empty input)".to_owned();
    }
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{:?} (hex {})", String::from_utf8_lossy(bytes), hex.join(" "))
}

/// Encodes one message with its prefix. Infallible: every type here serializes.
pub fn encode(message: &Message) -> Vec<u8> {
    encode_body(message, 64)
}

/// Encodes a borrowed message, to the same bytes as [`encode`] (the server relays frames
/// without cloning their payloads first).
pub fn encode_ref(message: MessageRef<'_>) -> Vec<u8> {
    let hint = match message {
        MessageRef::Frame(f) => f.payload.len() + f.topic.len() + 96,
        _ => 256,
    };
    encode_body(&message, hint)
}

#[allow(clippy::expect_used, reason = "a Vec never fails to write, and every message type here serializes (golden tests)")]
fn encode_body(message: &impl Serialize, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(&WS_MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    // Writing into a Vec cannot fail and every field type is serializable.
    rmp_serde::encode::write_named(&mut out, message).expect("kvscope messages always serialize");
    out
}

/// Encodes several already-encoded messages as one [`Message::Batch`], to the same bytes as
/// `encode(&Message::Batch(..))` without copying each message into a `ByteBuf` first.
pub fn encode_batch<B: AsRef<[u8]>>(messages: &[B]) -> Vec<u8> {
    let framing = BatchFraming::of(messages);
    if messages.is_empty() {
        return framing.bytes;
    }
    let mut out = Vec::with_capacity(framing.len_with(messages));
    for (head, message) in framing.heads().zip(messages) {
        out.extend_from_slice(head);
        out.extend_from_slice(message.as_ref());
    }
    out
}

/// The bytes a [`Message::Batch`] adds around its messages: the prefix and the batch's head
/// before the first, and each message's msgpack `bin` length before it. A batch is these heads
/// and the messages' own bytes, interleaved ([`BatchFraming::heads`]), so a writer can send it
/// as slices of bytes it already holds (`writev`) instead of copying every message into one
/// buffer; [`encode_batch`] is the same bytes, copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFraming {
    bytes: Vec<u8>,
    /// Where each message's head ends in `bytes`.
    ends: Vec<u32>,
}

impl BatchFraming {
    #[allow(clippy::expect_used, reason = "a Vec never fails to write")]
    pub fn of<B: AsRef<[u8]>>(messages: &[B]) -> BatchFraming {
        let mut bytes = Vec::with_capacity(WS_PREFIX_LEN + 24 + 5 * messages.len());
        bytes.extend_from_slice(&WS_MAGIC);
        bytes.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        bytes.extend_from_slice(BATCH_HEAD);
        rmp::encode::write_map_len(&mut bytes, 1).expect("Vec write");
        rmp::encode::write_str(&mut bytes, "messages").expect("Vec write");
        rmp::encode::write_array_len(&mut bytes, messages.len() as u32).expect("Vec write");
        let mut ends = Vec::with_capacity(messages.len());
        for m in messages {
            rmp::encode::write_bin_len(&mut bytes, m.as_ref().len() as u32).expect("Vec write");
            ends.push(bytes.len() as u32);
        }
        BatchFraming { bytes, ends }
    }

    /// The head before each message, in order (the first carries the batch's own head; a batch
    /// of no messages has none, and is [`encode_batch`]'s bytes alone).
    pub fn heads(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, end)| &self.bytes[start as usize..*end as usize])
    }

    /// The bytes of the heads: what sending the batch as slices copies.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The whole batch's length, with these messages.
    pub fn len_with<B: AsRef<[u8]>>(&self, messages: &[B]) -> usize {
        self.bytes.len() + messages.iter().map(|m| m.as_ref().len()).sum::<usize>()
    }
}

/// How a batch's body starts: a map of one key, `"batch"` (the variant's name).
const BATCH_HEAD: &[u8] = b"\x81\xa5batch";

#[derive(Deserialize)]
struct BorrowedBatch<'a> {
    #[serde(borrow)]
    messages: Vec<&'a serde_bytes::Bytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum BorrowedBatchMessage<'a> {
    #[serde(borrow)]
    Batch(BorrowedBatch<'a>),
}

/// The messages one WebSocket message carries, borrowed: the message itself, or a batch's
/// elements in order (each still with its prefix, for [`decode`]). Checks the prefix of the
/// outer message and that no element is a batch.
pub fn unbatch(bytes: &[u8]) -> Result<Vec<&[u8]>, ProtocolError> {
    let body = check_prefix(bytes)?;
    if !body.starts_with(BATCH_HEAD) {
        return Ok(vec![bytes]);
    }
    let BorrowedBatchMessage::Batch(batch) = rmp_serde::from_slice::<BorrowedBatchMessage<'_>>(body)?;
    let messages: Vec<&[u8]> = batch.messages.into_iter().map(|m| &m[..]).collect();
    if let Some(index) = messages.iter().position(|m| m.get(WS_PREFIX_LEN..).is_some_and(|b| b.starts_with(BATCH_HEAD))) {
        return Err(ProtocolError::NestedBatch { index });
    }
    Ok(messages)
}

/// Decodes every message one WebSocket message carries (see [`unbatch`]), for clients that
/// want messages rather than bytes.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Message>, ProtocolError> {
    unbatch(bytes)?.into_iter().map(decode).collect()
}

/// Checks magic and version, then decodes the body.
pub fn decode(bytes: &[u8]) -> Result<Message, ProtocolError> {
    let body = check_prefix(bytes)?;
    Ok(rmp_serde::from_slice(body)?)
}

/// Checks magic and version and returns the msgpack body.
pub fn check_prefix(bytes: &[u8]) -> Result<&[u8], ProtocolError> {
    if bytes.len() >= WS_MAGIC.len() && bytes[..WS_MAGIC.len()] != WS_MAGIC {
        return Err(ProtocolError::BadMagic { expected: "KVSW", found: show_prefix(&bytes[..WS_MAGIC.len()]) });
    }
    if bytes.len() < WS_PREFIX_LEN {
        return Err(ProtocolError::TooShort { len: bytes.len() });
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != PROTOCOL_VERSION {
        return Err(ProtocolError::Version { found: version, supported: PROTOCOL_VERSION });
    }
    Ok(&bytes[WS_PREFIX_LEN..])
}

/// The two policies the dashboard compares, and the block size both run at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defaults {
    /// The configured block size (`--block-size`): Device-tier stores at another size are fatal.
    pub block_size: u32,
    /// Policy A, by preset name (`legacy` unless `--policy-a` says otherwise): the behaviour
    /// being compared against.
    pub policy_a: String,
    /// Policy B, by preset name (`fixed` unless `--policy-b`/`--policy` says otherwise): the
    /// candidate normalizer.
    pub policy_b: String,
    /// The policy Dynamo's relays are predicted to run (`--relay-policy`, by preset name), for
    /// the reconciliation with the event plane: the page's router rows predict what `/metrics`
    /// and `check` predict.
    pub relay_policy: String,
    /// The bound on the nodes each modelled router index keeps (`--index-max-nodes`): the page
    /// models the index under the bound `/metrics` does, unless `?indexnodes=` says otherwise.
    /// `None` from a capture, which names no server.
    #[serde(default)]
    pub index_max_nodes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_errors_say_what_was_found_and_what_to_do() {
        let rows: &[(&[u8], &str)] = &[
            (
                b"{\"a\":1}",
                "not a kvscope message: expected the magic \"KVSW\" in the first 4 bytes, found \
                 \"{\\\"a\\\"\" (hex 7b 22 61 22); is the peer a kvscope server of this project?",
            ),
            (b"KVS", "message of 3 bytes is shorter than the 6-byte prefix (magic + version)"),
            (
                b"KVSW\x00\x63\x80",
                "kvscope protocol version 99, this build speaks version 8: the server and the \
                 dashboard come from different kvscope builds; reload the page, or rebuild both \
                 from one checkout",
            ),
        ];
        for (bytes, want) in rows {
            assert_eq!(decode(bytes).unwrap_err().to_string(), *want, "input {bytes:?}");
        }
    }

    #[test]
    fn a_body_that_is_not_a_message_is_an_error_not_a_panic() {
        let mut bytes = WS_MAGIC.to_vec();
        bytes.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        bytes.push(0xc1); // never used in msgpack
        let err = decode(&bytes).unwrap_err().to_string();
        assert!(err.starts_with("message body (after the 6-byte prefix) is not a valid kvscope message"), "{err}");
    }

    fn status(source: u32) -> Vec<u8> {
        encode(&Message::HistoryStart(HistoryStart { frames: u64::from(source), bytes: 1 }))
    }

    #[test]
    fn a_batch_splits_back_into_its_messages_in_order_and_a_lone_message_into_itself() {
        let parts = [status(1), status(2), status(3)];
        let batch = encode_batch(&parts);
        let owned = Message::Batch(Batch { messages: parts.iter().map(|p| serde_bytes::ByteBuf::from(p.clone())).collect() });
        assert_eq!(batch, encode(&owned), "encode_batch writes what serde writes");
        assert_eq!(unbatch(&batch).unwrap(), parts.iter().map(|p| &p[..]).collect::<Vec<_>>());
        assert_eq!(decode_all(&batch).unwrap().len(), 3);
        assert_eq!(unbatch(&parts[0]).unwrap(), vec![&parts[0][..]]);
        assert_eq!(unbatch(&encode_batch::<Vec<u8>>(&[])).unwrap(), Vec::<&[u8]>::new());
    }

    /// A batch's framing and its messages' own bytes, interleaved, are the batch serde writes,
    /// across msgpack's bin8, bin16 and bin32 lengths.
    #[test]
    fn a_batch_s_framing_around_its_messages_is_the_batch() {
        let parts: Vec<Vec<u8>> = [0usize, 1, 255, 256, 65_535, 65_536, 70_000].iter().map(|n| vec![7u8; *n]).collect();
        let owned = Message::Batch(Batch { messages: parts.iter().map(|p| serde_bytes::ByteBuf::from(p.clone())).collect() });
        let framing = BatchFraming::of(&parts);
        let mut sliced = Vec::new();
        for (head, part) in framing.heads().zip(&parts) {
            sliced.extend_from_slice(head);
            sliced.extend_from_slice(part);
        }
        assert_eq!(sliced, encode(&owned));
        assert_eq!(framing.len_with(&parts), sliced.len());
        assert_eq!(framing.heads().count(), parts.len());
        assert!(framing.len() < 64, "the framing is {} bytes", framing.len());
    }

    #[test]
    fn a_batch_in_a_batch_is_refused_with_its_place() {
        let inner = encode_batch(&[status(1)]);
        let err = unbatch(&encode_batch(&[status(0), inner])).unwrap_err().to_string();
        assert_eq!(err, "message 1 of a batch is itself a batch; a kvscope server never nests them");
    }

    #[test]
    fn a_cut_batch_is_an_error_not_a_panic() {
        let batch = encode_batch(&[status(1), status(2)]);
        for len in WS_PREFIX_LEN..batch.len() {
            assert!(unbatch(&batch[..len]).is_err() || len < WS_PREFIX_LEN + BATCH_HEAD.len(), "cut at {len}");
        }
    }
}
