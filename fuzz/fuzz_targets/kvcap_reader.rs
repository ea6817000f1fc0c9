//! `.kvcap` reader: `capture::CaptureReader` over the input as a `&[u8]`, every record read to
//! the end (or the first error). Each record re-encoded with `encode_record` must read back
//! equal, and the reader's offset must stay within the input.
#![no_main]

use kvscope_protocol::capture::{
    CaptureHeader, CaptureReader, CaptureRecord, encode_record, write_header,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = match CaptureReader::new(data) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.with_path("fuzz.kvcap").to_string();
            return;
        }
    };
    let _ = reader.header().sources.len();
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                assert!(
                    reader.offset() <= data.len() as u64,
                    "offset {} past the input",
                    reader.offset()
                );
                let bytes = encode_record(&record);
                let back = read_back(&bytes)
                    .unwrap_or_else(|| panic!("re-encoded record does not read back: {record:?}"));
                assert_eq!(back, record);
            }
            Ok(None) => break,
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        }
    }
    if let Some(t) = reader.truncated() {
        let _ = t.to_string();
    }
    assert!(
        reader.next_record().ok().flatten().is_none(),
        "a finished reader yields nothing more"
    );
});

/// Reads one length-prefixed record back through the public reader, behind an empty header.
fn read_back(record: &[u8]) -> Option<CaptureRecord> {
    let header = CaptureHeader {
        created_unix_nanos: 0,
        kvscope_version: String::new(),
        sources: Vec::new(),
        note: None,
    };
    let mut file = Vec::new();
    write_header(&mut file, &header).ok()?;
    file.extend_from_slice(record);
    CaptureReader::new(&file[..]).ok()?.next_record().ok()?
}
