//! A capture read as its bytes arrive. The page reads a file in slices (`Blob::slice`), and
//! classifying the records already in while the browser reads the next slice takes the two
//! apart: on a Kimi-K3 capture, reading was 44% of the opening when it came first.
//!
//! [`CaptureFeed`] is [`CaptureReader`] over the bytes pushed so far: it hands out a record only
//! once the whole of it is in, so the reader's rules (limits, a cut last record, corrupt bytes)
//! stay in one place, and a record cut by a slice boundary is never taken for a cut file.

use std::io::{self, Read};

use super::{CaptureError, CaptureHeader, CaptureReader, CaptureRecord, MAX_HEADER_BYTES, MAX_RECORD_BYTES, Truncation};

/// Bytes consumed before the buffer drops them: the feed holds what is not yet read, plus at
/// most this much, not the whole file.
const COMPACT_BYTES: usize = 4 * 1024 * 1024;

/// The bytes pushed so far, read from `pos`.
#[derive(Debug, Default)]
struct Pushed {
    bytes: Vec<u8>,
    pos: usize,
}

impl Pushed {
    fn unread(&self) -> &[u8] {
        &self.bytes[self.pos..]
    }
}

impl Read for Pushed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.unread().read(buf)?;
        self.pos += n;
        Ok(n)
    }
}

/// How many bytes the item at the start of `bytes` takes once its big-endian u32 length
/// (after `skip` bytes) is in, or `None` before. A length over `limit` counts as whole: the
/// reader refuses it at once, with its offset, rather than waiting for bytes that never come.
fn whole(bytes: &[u8], skip: usize, limit: u32) -> Option<usize> {
    let prefix: [u8; 4] = bytes.get(skip..skip + 4)?.try_into().ok()?;
    let len = u32::from_be_bytes(prefix);
    if len > limit {
        return Some(0);
    }
    let need = skip + 4 + len as usize;
    (bytes.len() >= need).then_some(need)
}

/// A capture fed in slices: [`CaptureFeed::push`] the bytes as they arrive, take records with
/// [`CaptureFeed::next_record`] until it says none is whole yet, and [`CaptureFeed::finish`] at
/// the end of the file, when what remains is read as the reader reads a file's end.
#[derive(Debug)]
pub struct CaptureFeed {
    /// Before the header is in, the bytes pushed; then `None`.
    early: Option<Pushed>,
    reader: Option<CaptureReader<Pushed>>,
    ended: bool,
}

/// A feed waiting for a file's first bytes (a derived default would be one that takes none).
impl Default for CaptureFeed {
    fn default() -> CaptureFeed {
        CaptureFeed::new()
    }
}

impl CaptureFeed {
    pub fn new() -> CaptureFeed {
        CaptureFeed { early: Some(Pushed::default()), reader: None, ended: false }
    }

    /// The next bytes of the file.
    pub fn push(&mut self, bytes: &[u8]) {
        self.push_with(bytes.len(), |dst| dst.copy_from_slice(bytes));
    }

    /// The next `len` bytes of the file, written by `fill` into the feed's own buffer (the
    /// page copies a slice from JS straight in).
    pub fn push_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) {
        let pushed = match (&mut self.early, &mut self.reader) {
            (Some(early), _) => early,
            (None, Some(reader)) => reader.get_mut(),
            (None, None) => return,
        };
        if pushed.pos >= COMPACT_BYTES {
            pushed.bytes.drain(..pushed.pos);
            pushed.pos = 0;
        }
        let at = pushed.bytes.len();
        pushed.bytes.resize(at + len, 0);
        fill(&mut pushed.bytes[at..]);
    }

    /// The file has ended: what is left is its last record, whole or cut.
    pub fn finish(&mut self) {
        self.ended = true;
    }

    /// The header, once enough of the file is in (`Ok(None)` before); the errors are the
    /// reader's (not a capture, a version this build does not read, a cut header).
    pub fn header(&mut self) -> Result<Option<&CaptureHeader>, CaptureError> {
        if let Some(early) = &self.early {
            // magic (8), version (2), then the header's length and the header.
            let bytes = early.unread();
            let magic_wrong = bytes.len() >= 8 && bytes[..8] != super::KVCAP_MAGIC;
            if whole(bytes, 10, MAX_HEADER_BYTES).is_none() && !self.ended && !magic_wrong {
                return Ok(None);
            }
            let early = self.early.take().unwrap_or_default();
            self.reader = Some(CaptureReader::new(early)?);
        }
        Ok(self.reader.as_ref().map(CaptureReader::header))
    }

    /// The next whole record and where it sits in the file (offset, length with its prefix);
    /// `Ok(None)` when none is whole yet, or at the end once finished.
    pub fn next_record(&mut self) -> Result<Option<(CaptureRecord, u64, u32)>, CaptureError> {
        if self.header()?.is_none() {
            return Ok(None);
        }
        let Some(reader) = &mut self.reader else { return Ok(None) };
        if !self.ended && whole(reader.get_mut().unread(), 0, MAX_RECORD_BYTES).is_none() {
            return Ok(None);
        }
        let offset = reader.offset();
        Ok(reader.next_record()?.map(|record| (record, offset, (reader.offset() - offset) as u32)))
    }

    /// Records handed out so far.
    pub fn records_read(&self) -> u64 {
        self.reader.as_ref().map_or(0, CaptureReader::records_read)
    }

    /// The file's offset of the next record.
    pub fn offset(&self) -> u64 {
        self.reader.as_ref().map_or(0, CaptureReader::offset)
    }

    /// Set once the file ended in a cut record (see [`CaptureReader::truncated`]).
    pub fn truncated(&self) -> Option<&Truncation> {
        self.reader.as_ref().and_then(CaptureReader::truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{encode_record, write_header};
    use serde_bytes::ByteBuf;

    fn file(records: usize) -> (Vec<u8>, Vec<CaptureRecord>) {
        let header = CaptureHeader { created_unix_nanos: 1, kvscope_version: "test".into(), sources: vec![], note: None };
        let mut out = Vec::new();
        write_header(&mut out, &header).unwrap();
        let records: Vec<CaptureRecord> = (0..records)
            .map(|i| CaptureRecord {
                source: 0,
                recv_time_nanos: i as u64,
                replayed: false,
                frames: vec![ByteBuf::from(vec![i as u8; 100 + (i % 50) * 37])],
            })
            .collect();
        for r in &records {
            out.extend(encode_record(r));
        }
        (out, records)
    }

    /// Feeds `bytes` in slices of `slice` bytes, taking records after each; the records with
    /// their offsets, and the feed at the end.
    fn feed(bytes: &[u8], slice: usize) -> (Vec<(CaptureRecord, u64, u32)>, CaptureFeed) {
        let mut f = CaptureFeed::new();
        let mut got = Vec::new();
        for chunk in bytes.chunks(slice) {
            f.push(chunk);
            while let Some(r) = f.next_record().unwrap() {
                got.push(r);
            }
        }
        f.finish();
        while let Some(r) = f.next_record().unwrap() {
            got.push(r);
        }
        (got, f)
    }

    #[test]
    fn slices_of_any_size_give_the_readers_records_and_offsets() {
        let (bytes, records) = file(40);
        let mut reader = CaptureReader::new(&bytes[..]).unwrap();
        let mut want = Vec::new();
        loop {
            let offset = reader.offset();
            let Some(r) = reader.next_record().unwrap() else { break };
            want.push((r, offset, (reader.offset() - offset) as u32));
        }
        assert_eq!(want.iter().map(|w| &w.0).collect::<Vec<_>>(), records.iter().collect::<Vec<_>>());
        for slice in [1, 3, 7, 100, 4096, bytes.len()] {
            let (got, f) = feed(&bytes, slice);
            assert_eq!(got, want, "slices of {slice} bytes");
            assert_eq!(f.records_read(), 40);
            assert!(f.truncated().is_none());
        }
    }

    #[test]
    fn a_record_cut_by_a_slice_waits_and_one_cut_by_the_files_end_is_the_readers_truncation() {
        let (bytes, _) = file(5);
        let cut = &bytes[..bytes.len() - 10];
        let mut f = CaptureFeed::new();
        f.push(cut);
        let mut n = 0;
        while f.next_record().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 4, "the fifth record is not whole yet");
        assert!(f.truncated().is_none(), "a slice boundary is not the file's end");
        f.finish();
        assert!(f.next_record().unwrap().is_none());
        let t = f.truncated().expect("the file's end cut the last record");
        assert_eq!(t.records_read, 4);
        assert_eq!(t.found_bytes + 10, t.expected_bytes.unwrap());
    }

    #[test]
    fn a_default_feed_reads_as_a_new_one() {
        let (bytes, records) = file(3);
        let mut f = CaptureFeed::default();
        f.push(&bytes);
        f.finish();
        let mut n = 0;
        while f.next_record().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, records.len());
    }

    #[test]
    fn what_is_not_a_capture_is_the_readers_error_as_soon_as_the_magic_is_in() {
        let mut f = CaptureFeed::new();
        f.push(b"{\"not\": \"a capture\"}");
        let err = f.next_record().unwrap_err().to_string();
        assert!(err.contains("not a kvscope capture"), "{err}");
        let mut f = CaptureFeed::new();
        f.push(&super::super::KVCAP_MAGIC[..5]);
        assert!(f.next_record().unwrap().is_none(), "five bytes of the magic: wait");
        f.finish();
        assert!(f.next_record().is_err(), "the file ended inside the magic");
    }

    #[test]
    fn a_length_over_the_limit_fails_at_once_and_read_bytes_are_dropped() {
        let (mut bytes, _) = file(0);
        let start = bytes.len() as u64;
        bytes.extend((MAX_RECORD_BYTES + 1).to_be_bytes());
        let mut f = CaptureFeed::new();
        f.push(&bytes);
        let err = f.next_record().unwrap_err().to_string();
        assert!(err.contains("exceeds") && err.contains(&start.to_string()), "{err}");

        let (bytes, records) = file(2000);
        let (got, f) = feed(&bytes, 64 * 1024);
        assert_eq!(got.len(), records.len());
        let held = f.reader.as_ref().map_or(0, |r| r.get_ref().bytes.len());
        assert!(held < COMPACT_BYTES + 64 * 1024 + 4096, "held {held} of {}", bytes.len());
    }
}
