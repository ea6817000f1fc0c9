//! Captures in the page: open a `.kvcap` from disk (file picker or drag and drop) and analyse it
//! with no server, and download what the page holds as a capture or as JSON lines.
//!
//! Opening reads the file in 4 MiB slices (`Blob::slice` + `array_buffer`), so the progress bar
//! moves and no single task holds the main thread, then applies records in slices of about
//! 12 ms of work, yielding to the event loop between slices. The WebSocket is closed first: a
//! capture is analysed on its own, never mixed with live frames.

use std::io::Cursor;

use leptos::prelude::*;

use kvscope_protocol as proto;
use kvscope_wire::KvEvent;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::contexts::{CaptureProgress, Fleet, config_from, now_ms};

const CHUNK_BYTES: f64 = 4.0 * 1024.0 * 1024.0;
const SLICE_MS: f64 = 12.0;

/// Lets the browser run other tasks (paint, input) before continuing.
pub async fn yield_now() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0);
        }
    });
    let _ = JsFuture::from(promise).await;
}

fn js_error(e: JsValue) -> String {
    e.as_string().or_else(|| e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message()))).unwrap_or_else(|| format!("{e:?}"))
}

/// Reads a whole file with progress.
async fn read_file(fleet: Fleet, file: &web_sys::File) -> Result<Vec<u8>, String> {
    let name = file.name();
    let total = file.size();
    let mut bytes = Vec::with_capacity(total as usize);
    let mut offset = 0.0;
    while offset < total {
        let end = (offset + CHUNK_BYTES).min(total);
        let blob = file.slice_with_f64_and_f64(offset, end).map_err(js_error)?;
        let buf = JsFuture::from(blob.array_buffer()).await.map_err(js_error)?;
        bytes.extend_from_slice(&js_sys::Uint8Array::new(&buf).to_vec());
        offset = end;
        fleet.capture.set(CaptureProgress::Running { name: name.clone(), phase: "reading", done: offset, total });
    }
    Ok(bytes)
}

/// The block size an operator would pass for this capture: that of the first non-empty store on
/// the Device tier (no medium, or GPU/DEVICE in any case). `None` when the capture has none.
pub fn infer_block_size(bytes: &[u8], max_records: usize) -> Option<u32> {
    let mut reader = proto::capture::CaptureReader::new(Cursor::new(bytes)).ok()?;
    for _ in 0..max_records {
        let record = reader.next_record().ok()??;
        let Ok(msg) = kvscope_wire::frame::parse_live(&record.frames) else { continue };
        let Ok(batch) = kvscope_wire::decode_batch(msg.payload) else { continue };
        for ev in &batch.events {
            if let KvEvent::BlockStored(s) = ev {
                let device = match s.medium.as_deref() {
                    None | Some("") => true,
                    Some(m) => m.eq_ignore_ascii_case("gpu") || m.eq_ignore_ascii_case("device"),
                };
                if device
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
    let blob = file.slice_with_f64_and_f64(offset as f64, offset as f64 + f64::from(len)).map_err(js_error)?;
    let buf = JsFuture::from(blob.array_buffer()).await.map_err(js_error)?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

/// Opens a capture file in the page.
pub async fn open_file(fleet: Fleet, file: web_sys::File) {
    let name = file.name();
    fleet.disconnect();
    fleet.capture.set(CaptureProgress::Running { name: name.clone(), phase: "reading", done: 0.0, total: file.size() });
    let bytes = match read_file(fleet, &file).await {
        Ok(b) => b,
        Err(error) => {
            fleet.capture.set(CaptureProgress::Failed { name, error: format!("could not read the file: {error}") });
            return;
        }
    };
    fleet.keep_capture_file(None);
    open_bytes(fleet, name, bytes).await;
    // Kept after opening: the page reads a record's raw bytes again from it on request.
    fleet.keep_capture_file(Some(file));
}

/// Analyses capture bytes already in memory (also used by the component tests).
pub async fn open_bytes(fleet: Fleet, name: String, bytes: Vec<u8>) {
    let total = bytes.len() as f64;
    let mut reader = match proto::capture::CaptureReader::new(Cursor::new(&bytes[..])) {
        Ok(r) => r,
        Err(e) => {
            fleet.capture.set(CaptureProgress::Failed { name: name.clone(), error: format!("{}: {e}", name) });
            return;
        }
    };
    let inferred = infer_block_size(&bytes, 10_000);
    let header = reader.header().clone();
    fleet.selected.set(None);
    fleet.update_model(|m| {
        m.begin_capture(&name, &header);
        let settings = fleet.settings.get_untracked();
        let d = crate::model::Config::default();
        m.server_defaults = Some(proto::Defaults {
            block_size: inferred.unwrap_or(d.block_size),
            policy_a: d.policy_a.clone(),
            policy_b: d.policy_b.clone(),
        });
        m.defaults_note = inferred.map(|bs| format!("block size {bs} inferred from the capture's first Device-tier store"));
        m.reconfigure(config_from(&settings, m.server_defaults.as_ref()));
    });
    loop {
        let deadline = now_ms() + SLICE_MS;
        let mut finished = false;
        let mut failure = None;
        fleet.update_model(|m| {
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
            fleet.capture.set(CaptureProgress::Failed {
                name: name.clone(),
                error: format!("{name}: {error} ({records} records before it are shown)"),
            });
            fleet.flush();
            return;
        }
        if finished {
            break;
        }
        fleet.capture.set(CaptureProgress::Running { name: name.clone(), phase: "classifying", done: reader.offset() as f64, total });
        fleet.flush();
        yield_now().await;
    }
    let note = reader.truncated().map(|t| t.to_string());
    fleet.update_model(|m| {
        if let crate::model::Origin::Capture { truncated, .. } = &mut m.origin {
            *truncated = note.clone();
        }
        m.dirty = true;
    });
    fleet.capture.set(CaptureProgress::Done { name, records: reader.records_read(), note });
    fleet.flush();
}

/// Offers bytes as a download.
pub fn download(name: &str, mime: &str, bytes: &[u8]) -> Result<(), String> {
    let window = web_sys::window().ok_or("no window")?;
    let document = window.document().ok_or("no document")?;
    let parts = js_sys::Array::new();
    parts.push(&js_sys::Uint8Array::from(bytes));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let blob = web_sys::Blob::new_with_u8_array_sequence_and_options(&parts, &opts).map_err(js_error)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(js_error)?;
    let a: web_sys::HtmlAnchorElement = document.create_element("a").map_err(js_error)?.dyn_into().map_err(|_| "not an anchor")?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    let _ = web_sys::Url::revoke_object_url(&url);
    Ok(())
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
