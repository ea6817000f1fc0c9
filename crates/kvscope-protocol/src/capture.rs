//! The `.kvcap` capture format: frames exactly as received, with source and receive time.
//!
//! ```text
//! file    = magic version header_len header record*
//! magic   = 89 4b 56 43 41 50 0d 0a            ("\x89KVCAP\r\n", 8 bytes)
//! version = u16 big-endian                     (FORMAT_VERSION; 1 is still read)
//! header_len = u32 big-endian                  (bytes of header)
//! header  = msgpack map: CaptureHeader         (named fields)
//! record  = len:u32 big-endian, then len bytes of msgpack array: CaptureRecord
//!           [source, recv_time_nanos, replayed, [frame bin, ...]]
//! ```
//!
//! The magic's first byte is not ASCII and it holds `\r\n`, so a file that went through a text
//! conversion fails the check instead of decoding to nonsense (the PNG trick). Records are
//! positional arrays: a capture holds millions of them, and field names would add ~50 bytes
//! each. A writer that is killed leaves a cut last record; [`CaptureReader`] stops there and
//! reports it through [`CaptureReader::truncated`] instead of failing the whole file.
//!
//! Version 2 added event-plane sources: a header source has a `kind` (`engine` or `event_plane`)
//! and, for the event plane, what it reads; the records of an event-plane source are the same
//! record type, holding what arrived (NATS: `[subject, body]`; Dynamo's ZMQ plane: its 4 frames).
//! A version-1 file has no `kind`, and every source reads as an engine.
//!
//! Version 3 added router-index sources (`kind` `router_index`, `--router-index`): each record
//! is one read of a Dynamo standalone indexer, two frames `[workers|dump|error, body]`, so that
//! `check` compares the real index with the model at the point of the stream where it was read.
//! Versions 1 and 2 are still read.
//!
//! Version 4 added the discovery source (`kind` `discovery`, `--discover`): its records are the
//! fleet's changes while recording ([`DiscoveryEvent`]), so that readers add the sources found
//! after the header was written, at the indexes the records use, and know when one left.
//!
//! See `docs/kvcap.md` in the repository for the same description with an example.

use std::fmt;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::{SourceInfo, show_prefix};

mod feed;
pub use feed::CaptureFeed;

/// The version of the `.kvcap` format, apart from the WebSocket's `PROTOCOL_VERSION`: a new
/// message kind on `/ws` changes nothing in a capture, and captures outlive servers. Bump it
/// whenever the bytes of the header or of a record change (the golden test says so).
pub const FORMAT_VERSION: u16 = 4;

/// The oldest format version this build still reads (version 1: engine sources only, the same
/// records; version 2: no router-index sources; version 3: no discovery source).
pub const MIN_FORMAT_VERSION: u16 = 1;

/// One record of a discovery source (format 4): two frames, what happened and its subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiscoveryEvent {
    /// `[source, SourceInfo as a msgpack map]`: a source found after the header was written (its
    /// `index` is the next one, and its records follow), or one that now reads elsewhere.
    Source(SourceInfo),
    /// `[left, index as u32 big-endian]`: the source's registration expired; it keeps what it
    /// had, and a later `source` event with its index resumes it.
    Left { source: u32 },
}

impl DiscoveryEvent {
    pub const SOURCE: &'static [u8] = b"source";
    pub const LEFT: &'static [u8] = b"left";

    /// The record's frames.
    pub fn frames(&self) -> [Vec<u8>; 2] {
        match self {
            DiscoveryEvent::Source(info) => [Self::SOURCE.to_vec(), rmp_serde::to_vec_named(info).unwrap_or_default()],
            DiscoveryEvent::Left { source } => [Self::LEFT.to_vec(), source.to_be_bytes().to_vec()],
        }
    }

    /// Reads a discovery record's frames; the error says what was wrong.
    pub fn parse<F: AsRef<[u8]>>(frames: &[F]) -> Result<DiscoveryEvent, String> {
        let [what, body] = frames else { return Err(format!("a discovery record of {} frames (want 2: what, body)", frames.len())) };
        match what.as_ref() {
            Self::SOURCE => rmp_serde::from_slice(body.as_ref())
                .map(DiscoveryEvent::Source)
                .map_err(|e| format!("a discovery record's source does not decode: {e}")),
            Self::LEFT => match <[u8; 4]>::try_from(body.as_ref()) {
                Ok(b) => Ok(DiscoveryEvent::Left { source: u32::from_be_bytes(b) }),
                Err(_) => Err(format!("a discovery record's left index has {} bytes (want 4)", body.as_ref().len())),
            },
            other => Err(format!("a discovery record says {:?} (want source or left)", String::from_utf8_lossy(other))),
        }
    }
}

/// Opens every `.kvcap` file.
pub const KVCAP_MAGIC: [u8; 8] = *b"\x89KVCAP\r\n";

/// A record larger than this is taken as corruption, not allocated.
pub const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;

/// A header larger than this is taken as corruption.
pub const MAX_HEADER_BYTES: u32 = 16 * 1024 * 1024;

/// What a capture holds besides its records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureHeader {
    /// When the recording started, in nanoseconds since the Unix epoch.
    pub created_unix_nanos: u64,
    /// The version of the `kvscope` binary that wrote it.
    pub kvscope_version: String,
    /// The sources recorded; a record's `source` indexes this list.
    pub sources: Vec<SourceInfo>,
    /// The command line or a note from the recorder, for people reading the file later.
    pub note: Option<String>,
}

/// One ZMQ message as received.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRecord {
    /// Index into [`CaptureHeader::sources`].
    pub source: u32,
    /// When it was received, in nanoseconds since the Unix epoch.
    pub recv_time_nanos: u64,
    /// True when it came from the engine's replay socket; its frames are then a replay reply
    /// (`[seq, payload]` or `[topic, seq, payload]`, possibly after an empty delimiter), not a
    /// live `[topic, seq, payload]`.
    pub replayed: bool,
    /// Every frame, as received, malformed ones included.
    pub frames: Vec<serde_bytes::ByteBuf>,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{path}not a kvscope capture: expected the magic \"\\x89KVCAP\\r\\n\", found {found}; was it written by `kvscope record`?")]
    BadMagic { path: String, found: String },
    #[error(
        "{path}capture format version {found}, this build reads versions {MIN_FORMAT_VERSION} to {supported}; \
         open it with the kvscope release that wrote it (its header says which)"
    )]
    Version { path: String, found: u16, supported: u16 },
    #[error("{path}the capture ends inside its header (byte {offset}): the recorder was killed before it wrote anything")]
    TruncatedHeader { path: String, offset: u64 },
    #[error("{path}byte {offset}: {what}; the file is corrupt from here on")]
    Corrupt { path: String, offset: u64, what: String },
    #[error("{path}{source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl CaptureError {
    fn io(source: io::Error) -> Self {
        CaptureError::Io { path: String::new(), source }
    }

    /// Puts `path: ` in front of the message (the reader itself does not know the file name).
    pub fn with_path(mut self, file: &str) -> Self {
        let prefix = format!("{file}: ");
        match &mut self {
            CaptureError::BadMagic { path, .. }
            | CaptureError::Version { path, .. }
            | CaptureError::TruncatedHeader { path, .. }
            | CaptureError::Corrupt { path, .. }
            | CaptureError::Io { path, .. } => *path = prefix,
        }
        self
    }
}

/// A last record cut short: what a killed recorder leaves behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset where the cut record starts.
    pub offset: u64,
    /// Bytes the record should have had, length prefix included (`None` when even the 4-byte
    /// prefix was cut).
    pub expected_bytes: Option<u64>,
    /// Bytes actually present from `offset` to the end of the file.
    pub found_bytes: u64,
    /// Complete records read before it.
    pub records_read: u64,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the last record (byte {}) is cut short: ", self.offset)?;
        match self.expected_bytes {
            Some(expected) => write!(f, "{} of {} bytes present", self.found_bytes, expected)?,
            None => write!(f, "{} of its 4-byte length prefix present", self.found_bytes)?,
        }
        write!(f, "; the recorder was probably killed while writing. The {} complete records before it were read.", self.records_read)
    }
}

/// Writes the magic, version and header.
pub fn write_header(out: &mut impl Write, header: &CaptureHeader) -> io::Result<()> {
    let body = rmp_serde::to_vec_named(header).map_err(io::Error::other)?;
    out.write_all(&KVCAP_MAGIC)?;
    out.write_all(&FORMAT_VERSION.to_be_bytes())?;
    out.write_all(&(body.len() as u32).to_be_bytes())?;
    out.write_all(&body)
}

/// Encodes one record with its length prefix, ready to append to a capture.
pub fn encode_record(record: &CaptureRecord) -> Vec<u8> {
    encode_record_parts(record.source, record.recv_time_nanos, record.replayed, &record.frames)
}

/// Encodes one record from borrowed frames (what a recorder holds), byte-identical to
/// [`encode_record`].
pub fn encode_record_parts<F: AsRef<[u8]>>(source: u32, recv_time_nanos: u64, replayed: bool, frames: &[F]) -> Vec<u8> {
    let body_hint: usize = frames.iter().map(|f| f.as_ref().len() + 5).sum::<usize>() + 24;
    let mut out = rmp::encode::ByteBuf::from(Vec::with_capacity(4 + body_hint));
    out.as_mut_vec().extend_from_slice(&[0; 4]);
    // rmp's ByteBuf cannot fail (its error type is Infallible), so these patterns are irrefutable.
    let Ok(_) = rmp::encode::write_array_len(&mut out, 4);
    let Ok(_) = rmp::encode::write_uint(&mut out, u64::from(source));
    let Ok(_) = rmp::encode::write_uint(&mut out, recv_time_nanos);
    let Ok(()) = rmp::encode::write_bool(&mut out, replayed);
    let Ok(_) = rmp::encode::write_array_len(&mut out, frames.len() as u32);
    for frame in frames {
        let Ok(()) = rmp::encode::write_bin(&mut out, frame.as_ref());
    }
    let mut out = out.into_vec();
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Decodes one record read back from a capture at an offset a [`CaptureReader`] reported (its
/// length prefix included): how the page reads one frame's raw bytes again from an opened file.
pub fn decode_record(bytes: &[u8]) -> Result<CaptureRecord, CaptureError> {
    let corrupt = |what: String| CaptureError::Corrupt { path: String::new(), offset: 0, what };
    let (len, body) =
        bytes.split_first_chunk::<4>().ok_or_else(|| corrupt(format!("a record needs 4 length bytes, found {}", bytes.len())))?;
    let len = u32::from_be_bytes(*len) as usize;
    if body.len() != len {
        return Err(corrupt(format!("the record's length prefix says {len} bytes, {} follow", body.len())));
    }
    rmp_serde::from_slice(body).map_err(|e| corrupt(format!("the record does not decode: {e}")))
}

/// Reads a capture record by record. Works on a file, a socket or a byte slice; the page,
/// which gets a file's bytes slice by slice, reads it through [`CaptureFeed`].
#[derive(Debug)]
pub struct CaptureReader<R> {
    inner: R,
    header: CaptureHeader,
    version: u16,
    offset: u64,
    records_read: u64,
    truncated: Option<Truncation>,
    finished: bool,
}

impl<R: Read> CaptureReader<R> {
    /// Reads and checks magic, version and header.
    pub fn new(mut inner: R) -> Result<Self, CaptureError> {
        let mut prefix = [0u8; 14];
        let got = read_up_to(&mut inner, &mut prefix).map_err(CaptureError::io)?;
        let magic_len = got.min(8);
        if prefix[..magic_len] != KVCAP_MAGIC[..magic_len] || got == 0 {
            return Err(CaptureError::BadMagic { path: String::new(), found: show_prefix(&prefix[..magic_len]) });
        }
        if got < 14 {
            return Err(CaptureError::TruncatedHeader { path: String::new(), offset: got as u64 });
        }
        let version = u16::from_be_bytes([prefix[8], prefix[9]]);
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(CaptureError::Version { path: String::new(), found: version, supported: FORMAT_VERSION });
        }
        let header_len = u32::from_be_bytes([prefix[10], prefix[11], prefix[12], prefix[13]]);
        if header_len > MAX_HEADER_BYTES {
            return Err(CaptureError::Corrupt {
                path: String::new(),
                offset: 10,
                what: format!("header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit"),
            });
        }
        let mut body = Vec::new();
        let got = (&mut inner).take(u64::from(header_len)).read_to_end(&mut body).map_err(CaptureError::io)?;
        if got < header_len as usize {
            return Err(CaptureError::TruncatedHeader { path: String::new(), offset: 14 + got as u64 });
        }
        let header: CaptureHeader = rmp_serde::from_slice(&body).map_err(|e| CaptureError::Corrupt {
            path: String::new(),
            offset: 14,
            what: format!("the header does not decode: {e}"),
        })?;
        Ok(CaptureReader { inner, header, version, offset: 14 + u64::from(header_len), records_read: 0, truncated: None, finished: false })
    }

    /// What the records are read from.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// What the records are read from, to add to it ([`CaptureFeed`] pushes bytes as they come).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The header read by [`CaptureReader::new`].
    pub fn header(&self) -> &CaptureHeader {
        &self.header
    }

    /// The file's format version (1 or [`FORMAT_VERSION`]).
    pub fn format_version(&self) -> u16 {
        self.version
    }

    /// Records returned so far.
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Set once the reader met a cut last record; reading then stops as at the end of the file.
    pub fn truncated(&self) -> Option<&Truncation> {
        self.truncated.as_ref()
    }

    /// The next record, `Ok(None)` at the end (including a cut last record, see
    /// [`CaptureReader::truncated`]).
    pub fn next_record(&mut self) -> Result<Option<CaptureRecord>, CaptureError> {
        if self.finished {
            return Ok(None);
        }
        let start = self.offset;
        let mut len_bytes = [0u8; 4];
        let got = read_up_to(&mut self.inner, &mut len_bytes).map_err(CaptureError::io)?;
        if got == 0 {
            self.finished = true;
            return Ok(None);
        }
        if got < 4 {
            return Ok(self.cut(start, None, got as u64));
        }
        let len = u32::from_be_bytes(len_bytes);
        if len > MAX_RECORD_BYTES {
            self.finished = true;
            return Err(CaptureError::Corrupt {
                path: String::new(),
                offset: start,
                what: format!("record length {len} exceeds the {MAX_RECORD_BYTES}-byte limit"),
            });
        }
        // `take` + `read_to_end` grows with the bytes actually present, so a corrupt length never
        // allocates more than the file holds.
        let mut body = Vec::new();
        let got = (&mut self.inner).take(u64::from(len)).read_to_end(&mut body).map_err(CaptureError::io)?;
        if got < len as usize {
            return Ok(self.cut(start, Some(4 + u64::from(len)), 4 + got as u64));
        }
        let record: CaptureRecord = rmp_serde::from_slice(&body).map_err(|e| {
            self.finished = true;
            CaptureError::Corrupt { path: String::new(), offset: start, what: format!("record {} does not decode: {e}", self.records_read) }
        })?;
        self.offset = start + 4 + u64::from(len);
        self.records_read += 1;
        Ok(Some(record))
    }

    fn cut(&mut self, offset: u64, expected_bytes: Option<u64>, found_bytes: u64) -> Option<CaptureRecord> {
        self.finished = true;
        self.truncated = Some(Truncation { offset, expected_bytes, found_bytes, records_read: self.records_read });
        None
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CaptureRecord, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Fills `buf` as far as the input goes; returns how many bytes were read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_bytes::ByteBuf;

    #[test]
    fn a_record_is_read_back_alone_from_the_span_the_reader_reported() {
        let record = CaptureRecord {
            source: 3,
            recv_time_nanos: 42,
            replayed: false,
            frames: vec![ByteBuf::from(b"kv".to_vec()), ByteBuf::from(vec![9; 300])],
        };
        let encoded = encode_record(&record);
        assert_eq!(decode_record(&encoded).unwrap(), record);
        assert!(decode_record(&encoded[..encoded.len() - 1]).unwrap_err().to_string().contains("says"));
        assert!(decode_record(&encoded[..2]).is_err());
    }

    fn header() -> CaptureHeader {
        CaptureHeader {
            created_unix_nanos: 1,
            kvscope_version: "0.1.0".into(),
            sources: vec![SourceInfo {
                index: 0,
                key: "0:0".into(),
                worker_id: "0".into(),
                dp_rank: 0,
                endpoint: "tcp://127.0.0.1:5557".into(),
                replay_endpoint: None,
                kind: crate::SourceKind::Engine,
                event_plane: None,
                block_size: None,
            }],
            note: None,
        }
    }

    fn record(seq: u64) -> CaptureRecord {
        CaptureRecord {
            source: 0,
            recv_time_nanos: 1000 + seq,
            replayed: seq % 2 == 1,
            frames: vec![ByteBuf::from(b"kv".to_vec()), ByteBuf::from(seq.to_be_bytes().to_vec()), ByteBuf::from(vec![0x90])],
        }
    }

    fn file(records: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, &header()).unwrap();
        for seq in 0..records {
            out.extend_from_slice(&encode_record(&record(seq)));
        }
        out
    }

    #[test]
    fn records_round_trip_and_both_encoders_agree() {
        let r = record(3);
        let frames: Vec<&[u8]> = r.frames.iter().map(|f| f.as_slice()).collect();
        assert_eq!(encode_record(&r), encode_record_parts(0, 1003, true, &frames));
        let bytes = file(5);
        let mut reader = CaptureReader::new(bytes.as_slice()).unwrap();
        assert_eq!(reader.header(), &header());
        let got: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(got, (0..5).map(record).collect::<Vec<_>>());
        assert_eq!(reader.truncated(), None);
        assert_eq!(reader.offset(), bytes.len() as u64);
    }

    #[test]
    fn every_cut_of_the_last_record_is_reported_not_fatal() {
        let whole = file(3);
        let two = file(2).len();
        for cut in two + 1..whole.len() {
            let mut reader = CaptureReader::new(&whole[..cut]).unwrap();
            let got: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
            assert_eq!(got.len(), 2, "cut at {cut}");
            let t = reader.truncated().expect("truncation reported").clone();
            assert_eq!(t.offset, two as u64);
            assert_eq!(t.found_bytes, (cut - two) as u64);
            assert_eq!(t.records_read, 2);
            assert_eq!(t.expected_bytes.is_none(), cut - two < 4);
        }
        let mut reader = CaptureReader::new(&whole[..two + 6]).unwrap();
        reader.by_ref().for_each(drop);
        assert_eq!(
            reader.truncated().unwrap().to_string(),
            format!(
                "the last record (byte {two}) is cut short: 6 of {} bytes present; the recorder was \
                 probably killed while writing. The 2 complete records before it were read.",
                whole.len() - two
            )
        );
    }

    #[test]
    fn header_errors_name_the_problem_and_the_fix() {
        let good = file(0);
        let mut bad_version = good.clone();
        bad_version[9] = 9;
        let rows: Vec<(Vec<u8>, String)> = vec![
            (
                b"PK\x03\x04zipzip".to_vec(),
                "x.kvcap: not a kvscope capture: expected the magic \"\\x89KVCAP\\r\\n\", found \
                 \"PK\\u{3}\\u{4}zipz\" (hex 50 4b 03 04 7a 69 70 7a); was it written by `kvscope record`?"
                    .into(),
            ),
            (Vec::new(), "x.kvcap: not a kvscope capture: expected the magic \"\\x89KVCAP\\r\\n\", found nothing (empty input); was it written by `kvscope record`?".into()),
            (good[..11].to_vec(), "x.kvcap: the capture ends inside its header (byte 11): the recorder was killed before it wrote anything".into()),
            (
                bad_version,
                "x.kvcap: capture format version 9, this build reads versions 1 to 4; open it with the \
                 kvscope release that wrote it (its header says which)"
                    .into(),
            ),
        ];
        for (bytes, want) in rows {
            let err = CaptureReader::new(bytes.as_slice()).unwrap_err().with_path("x.kvcap");
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn an_absurd_record_length_is_corruption_not_an_allocation() {
        let mut bytes = file(1);
        let at = bytes.len();
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        let mut reader = CaptureReader::new(bytes.as_slice()).unwrap();
        assert!(reader.next_record().unwrap().is_some());
        let err = reader.next_record().unwrap_err().to_string();
        assert_eq!(err, format!("byte {at}: record length 4294967295 exceeds the 268435456-byte limit; the file is corrupt from here on"));
        assert!(reader.next_record().unwrap().is_none());
    }
}
