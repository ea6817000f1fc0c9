//! Captures opened in the page, read and analysed by the engine with no server: a `.kvcap` from
//! disk (the page's file picker or a drop hands the `File` over).
//!
//! Opening reads the file in 4 MiB slices (`Blob::slice` + `array_buffer`), [`READ_AHEAD`]
//! ahead, and classifies the records of each slice as it arrives, in slices of about 12 ms of
//! work, yielding between them so that the page's requests are answered meanwhile: the browser
//! reads the next slices while the engine classifies (reading first, then classifying, spent
//! 44% of a Kimi-K3 capture's opening on reading alone). The WebSocket is closed first: a
//! capture is analysed on its own, never mixed with live frames.

use std::collections::VecDeque;
use std::rc::Rc;

use kvscope_engine_protocol::view::CaptureProgress;
use kvscope_normalize::{Policy, StorageTier, resolve_tier};
use kvscope_protocol as proto;
use kvscope_wire::KvEvent;
use wasm_bindgen_futures::JsFuture;

use crate::host::Host;
use crate::scope::{js_text, now_ms, yield_now};

const CHUNK_BYTES: f64 = 4.0 * 1024.0 * 1024.0;
const SLICE_MS: f64 = 12.0;

/// Slices of the file asked for ahead of the one being classified.
const READ_AHEAD: usize = 2;

/// Records, and their bytes, looked at for the block size before the capture starts without
/// one: they are held until it starts.
const INFER_RECORDS: usize = 10_000;
const INFER_BYTES: u64 = 32 * 1024 * 1024;

/// The block size an operator would pass for this capture, from one of its records: that of
/// a non-empty store on the Device tier (no medium, or one the medium table maps to Device).
pub fn device_block_size(record: &proto::capture::CaptureRecord) -> Option<u32> {
    let msg = kvscope_wire::frame::parse_live(&record.frames).ok()?;
    let batch = kvscope_wire::decode_batch(msg.payload).ok()?;
    batch.events.iter().find_map(|ev| match ev {
        KvEvent::BlockStored(s) => {
            // The medium table as the fix reads it (any case); a medium it does not know is
            // not taken for Device here, though a policy may fall back to it.
            let tier = resolve_tier(s.medium.as_deref(), &Policy::FIXED);
            (tier.tier == StorageTier::Device && !tier.is_fallback() && !s.block_hashes.is_empty())
                .then_some(s.block_size.filter(|&b| b > 0))
                .flatten()
        }
        _ => None,
    })
}

/// Reads `len` bytes at `offset` of a file: one capture record, read again on request.
pub async fn read_span(file: &web_sys::File, offset: u64, len: u32) -> Result<Vec<u8>, String> {
    let blob = file.slice_with_f64_and_f64(offset as f64, offset as f64 + f64::from(len)).map_err(|e| js_text(&e))?;
    let buf = JsFuture::from(blob.array_buffer()).await.map_err(|e| js_text(&e))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// Asks the browser for bytes `from..to` of a file; it reads them while the engine works.
fn read_slice(file: &web_sys::File, from: f64, to: f64) -> Result<JsFuture, String> {
    let blob = file.slice_with_f64_and_f64(from, to).map_err(|e| js_text(&e))?;
    Ok(JsFuture::from(blob.array_buffer()))
}

/// Opens a capture file: reads it slice by slice, classifying each slice's records as it comes.
pub async fn open(host: Rc<Host>, file: web_sys::File) {
    host.disconnect();
    host.keep_capture_file(None);
    let mut opening = Opening::new(file.name(), file.size());
    host.capture_progress(opening.progress());
    let mut reads = VecDeque::new();
    let mut asked = 0.0;
    loop {
        while reads.len() < READ_AHEAD && asked < opening.total {
            let to = (asked + CHUNK_BYTES).min(opening.total);
            match read_slice(&file, asked, to) {
                Ok(read) => reads.push_back(read),
                Err(error) => return opening.fail(&host, format!("could not read the file: {error}")),
            }
            asked = to;
        }
        let Some(read) = reads.pop_front() else { break };
        match read.await {
            Ok(buf) => {
                let bytes = js_sys::Uint8Array::new(&buf);
                opening.feed.push_with(bytes.length() as usize, |dst| bytes.copy_to(dst));
                opening.read += f64::from(bytes.length());
            }
            Err(error) => return opening.fail(&host, format!("could not read the file: {}", js_text(&error))),
        }
        if !opening.classify(&host).await {
            return;
        }
    }
    opening.feed.finish();
    if !opening.classify(&host).await {
        return;
    }
    opening.done(&host);
    // Kept after opening: the engine reads a record's raw bytes again from it on request.
    host.keep_capture_file(Some(file));
}

/// A capture being opened: what is read, and what is classified.
struct Opening {
    name: String,
    total: f64,
    read: f64,
    feed: proto::capture::CaptureFeed,
    /// Until the engine starts the capture: the records looked at for its block size.
    early: Option<Vec<(proto::capture::CaptureRecord, u64, u32)>>,
    early_bytes: u64,
}

impl Opening {
    fn new(name: String, total: f64) -> Opening {
        Opening { name, total, read: 0.0, feed: proto::capture::CaptureFeed::new(), early: Some(Vec::new()), early_bytes: 0 }
    }

    fn progress(&self) -> CaptureProgress {
        let phase = if self.read < self.total { "reading and classifying" } else { "classifying" };
        CaptureProgress::Running { name: self.name.clone(), phase: phase.into(), done: self.feed.offset() as f64, total: self.total }
    }

    fn fail(&self, host: &Host, error: String) {
        host.capture_progress(CaptureProgress::Failed { name: self.name.clone(), error });
    }

    /// Classifies the whole records read so far (all of them once the feed is finished), in
    /// slices of [`SLICE_MS`]; false when the file turned out unreadable (said on the page).
    async fn classify(&mut self, host: &Host) -> bool {
        loop {
            let deadline = now_ms() + SLICE_MS;
            let mut waiting = false;
            let mut failure = None;
            while now_ms() < deadline || cfg!(not(target_arch = "wasm32")) {
                match self.feed.next_record() {
                    Ok(Some(record)) if self.early.is_some() => self.look(host, record),
                    Ok(Some((record, offset, len))) => {
                        host.with_engine(|e| e.model_mut().apply_capture_record(record, offset, len, now_ms()))
                    }
                    Ok(None) => {
                        waiting = true;
                        break;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            if let Some(error) = failure {
                // The records before the corrupt one are shown, whether or not their block size
                // was found yet; before the header is in, there is nothing to show.
                self.begin(host, None);
                let (name, records) = (&self.name, self.feed.records_read());
                let shown = if self.early.is_some() { String::new() } else { format!(" ({records} records before it are shown)") };
                self.fail(host, format!("{name}: {error}{shown}"));
                return false;
            }
            if waiting {
                // At the file's end, a capture whose records had no Device-tier store starts
                // without a block size.
                if self.read >= self.total {
                    self.begin(host, None);
                }
                host.capture_progress(self.progress());
                return true;
            }
            host.capture_progress(self.progress());
            yield_now().await;
        }
    }

    /// A record read before the capture started: kept until its block size is known.
    fn look(&mut self, host: &Host, record: (proto::capture::CaptureRecord, u64, u32)) {
        let found = device_block_size(&record.0);
        let Some(early) = &mut self.early else { return };
        self.early_bytes += u64::from(record.2);
        early.push(record);
        if found.is_some() || early.len() >= INFER_RECORDS || self.early_bytes >= INFER_BYTES {
            self.begin(host, found);
        }
    }

    /// Starts the capture in the engine (once), then applies the records kept until then.
    fn begin(&mut self, host: &Host, inferred_block_size: Option<u32>) {
        if self.early.is_none() {
            return;
        }
        let Ok(Some(header)) = self.feed.header() else { return };
        host.begin_capture(&self.name, header, inferred_block_size);
        let early = self.early.take().unwrap_or_default();
        host.with_engine(|e| {
            let m = e.model_mut();
            for (record, offset, len) in early {
                m.apply_capture_record(record, offset, len, now_ms());
            }
        });
    }

    fn done(&mut self, host: &Host) {
        let note = self.feed.truncated().map(|t| t.to_string());
        host.with_engine(|e| {
            let m = e.model_mut();
            if let crate::model::Origin::Capture { truncated, .. } = &mut m.origin {
                *truncated = note.clone();
            }
            m.dirty = true;
        });
        host.capture_progress(CaptureProgress::Done { name: self.name.clone(), records: self.feed.records_read(), note });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_size_is_that_of_the_first_device_store() {
        let kimi = kvscope_corpus::kimi_k3_stream(0);
        let record = |payload: &[u8]| proto::capture::CaptureRecord {
            source: 0,
            recv_time_nanos: 0,
            replayed: false,
            frames: [b"kv".as_slice(), &0u64.to_be_bytes(), payload].map(|f| serde_bytes::ByteBuf::from(f.to_vec())).to_vec(),
        };
        let found: Vec<Option<u32>> = kimi.iter().map(|m| device_block_size(&record(m.payload))).collect();
        assert_eq!(found.iter().flatten().next(), Some(&1536));
        assert_eq!(device_block_size(&record(b"not msgpack")), None);
    }
}
