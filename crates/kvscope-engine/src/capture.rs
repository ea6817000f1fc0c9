//! Captures opened in the page, read and analysed by the engine with no server: a `.kvcap` from
//! disk (the page's file picker or a drop hands the `File` over), or bytes already in memory.
//!
//! Opening reads the file in 4 MiB slices (`Blob::slice` + `array_buffer`), so the progress bar
//! moves, then applies records in slices of about 12 ms of work, yielding between slices so the
//! page's requests are answered meanwhile. The WebSocket is closed first: a capture is analysed
//! on its own, never mixed with live frames.

use std::io::Cursor;
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

/// Reads a whole file with progress.
async fn read_file(host: &Host, file: &web_sys::File) -> Result<Vec<u8>, String> {
    let name = file.name();
    let total = file.size();
    let mut bytes = Vec::with_capacity(total as usize);
    let mut offset = 0.0;
    while offset < total {
        let end = (offset + CHUNK_BYTES).min(total);
        let blob = file.slice_with_f64_and_f64(offset, end).map_err(|e| js_text(&e))?;
        let buf = JsFuture::from(blob.array_buffer()).await.map_err(|e| js_text(&e))?;
        bytes.extend_from_slice(&js_sys::Uint8Array::new(&buf).to_vec());
        offset = end;
        host.capture_progress(CaptureProgress::Running { name: name.clone(), phase: "reading".into(), done: offset, total });
    }
    Ok(bytes)
}

/// The block size an operator would pass for this capture: that of the first non-empty store on
/// the Device tier (no medium, or one the medium table maps to Device). `None` when the capture
/// has none.
pub fn infer_block_size(bytes: &[u8], max_records: usize) -> Option<u32> {
    let mut reader = proto::capture::CaptureReader::new(Cursor::new(bytes)).ok()?;
    for _ in 0..max_records {
        let record = reader.next_record().ok()??;
        let Ok(msg) = kvscope_wire::frame::parse_live(&record.frames) else { continue };
        let Ok(batch) = kvscope_wire::decode_batch(msg.payload) else { continue };
        for ev in &batch.events {
            if let KvEvent::BlockStored(s) = ev {
                // The medium table as the fix reads it (any case); a medium it does not know is
                // not taken for Device here, though a policy may fall back to it.
                let tier = resolve_tier(s.medium.as_deref(), &Policy::FIXED);
                if tier.tier == StorageTier::Device
                    && !tier.is_fallback()
                    && !s.block_hashes.is_empty()
                    && let Some(bs) = s.block_size.filter(|&b| b > 0)
                {
                    return Some(bs);
                }
            }
        }
    }
    None
}

/// Reads `len` bytes at `offset` of a file: one capture record, read again on request.
pub async fn read_span(file: &web_sys::File, offset: u64, len: u32) -> Result<Vec<u8>, String> {
    let blob = file.slice_with_f64_and_f64(offset as f64, offset as f64 + f64::from(len)).map_err(|e| js_text(&e))?;
    let buf = JsFuture::from(blob.array_buffer()).await.map_err(|e| js_text(&e))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// Opens a capture file: reads it, then analyses it record by record.
pub async fn open(host: Rc<Host>, file: web_sys::File) {
    host.disconnect();
    host.keep_capture_file(None);
    let name = file.name();
    host.capture_progress(CaptureProgress::Running { name: name.clone(), phase: "reading".into(), done: 0.0, total: file.size() });
    let bytes = match read_file(&host, &file).await {
        Ok(b) => b,
        Err(error) => {
            host.capture_progress(CaptureProgress::Failed { name, error: format!("could not read the file: {error}") });
            return;
        }
    };
    open_bytes(&host, name, bytes).await;
    // Kept after opening: the engine reads a record's raw bytes again from it on request.
    host.keep_capture_file(Some(file));
}

/// Analyses capture bytes already in memory.
async fn open_bytes(host: &Host, name: String, bytes: Vec<u8>) {
    let total = bytes.len() as f64;
    let mut reader = match proto::capture::CaptureReader::new(Cursor::new(&bytes[..])) {
        Ok(r) => r,
        Err(e) => {
            host.capture_progress(CaptureProgress::Failed { name: name.clone(), error: format!("{name}: {e}") });
            return;
        }
    };
    let inferred = infer_block_size(&bytes, 10_000);
    let header = reader.header().clone();
    host.begin_capture(&name, &header, inferred);
    loop {
        let deadline = now_ms() + SLICE_MS;
        let mut finished = false;
        let mut failure = None;
        host.with_engine(|e| {
            let m = e.model_mut();
            while now_ms() < deadline || cfg!(not(target_arch = "wasm32")) {
                let offset = reader.offset();
                match reader.next_record() {
                    Ok(Some(record)) => {
                        let len = (reader.offset() - offset) as u32;
                        m.apply_capture_record(record, offset, len, now_ms());
                    }
                    Ok(None) => {
                        finished = true;
                        break;
                    }
                    Err(e) => {
                        failure = Some(e.to_string());
                        break;
                    }
                }
            }
        });
        if let Some(error) = failure {
            let records = reader.records_read();
            host.capture_progress(CaptureProgress::Failed {
                name: name.clone(),
                error: format!("{name}: {error} ({records} records before it are shown)"),
            });
            return;
        }
        if finished {
            break;
        }
        host.capture_progress(CaptureProgress::Running {
            name: name.clone(),
            phase: "classifying".into(),
            done: reader.offset() as f64,
            total,
        });
        yield_now().await;
    }
    let note = reader.truncated().map(|t| t.to_string());
    host.with_engine(|e| {
        let m = e.model_mut();
        if let crate::model::Origin::Capture { truncated, .. } = &mut m.origin {
            *truncated = note.clone();
        }
        m.dirty = true;
    });
    host.capture_progress(CaptureProgress::Done { name, records: reader.records_read(), note });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture_of(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        proto::capture::write_header(
            &mut out,
            &proto::capture::CaptureHeader { created_unix_nanos: 0, kvscope_version: "test".into(), sources: vec![], note: None },
        )
        .unwrap();
        for (i, p) in payloads.iter().enumerate() {
            out.extend(proto::capture::encode_record_parts(0, i as u64, false, &[b"kv".as_slice(), &(i as u64).to_be_bytes(), p]));
        }
        out
    }

    #[test]
    fn the_block_size_is_inferred_from_the_first_device_store() {
        let kimi = kvscope_corpus::kimi_k3_stream(0);
        let payloads: Vec<&[u8]> = kimi.iter().map(|m| m.payload).collect();
        assert_eq!(infer_block_size(&capture_of(&payloads), 100), Some(1536));
        assert_eq!(infer_block_size(&capture_of(&[]), 100), None);
    }
}
