//! Every payload of the real-release corpus decodes to exactly what its manifest says.
//!
//! The list of entries comes from `tests/fixtures/kv-events/manifest.json` itself (through
//! `kvscope-corpus`), so a payload added to the corpus is checked with no change here. The same
//! check runs in headless Chromium from `crates/kvscope-wasm`.

#[test]
fn every_manifest_entry_decodes_as_expected() {
    let report = kvscope_corpus::check_manifest();
    report.assert_ok();
    assert_eq!(report.checked, kvscope_corpus::manifest().len());
    eprintln!("corpus: {} entries decoded and matched", report.checked);
}

/// Every truncation of every payload returns an error, never a panic and never a batch: a batch
/// is complete only when its last byte is read.
#[test]
fn every_truncation_of_every_payload_is_an_error() {
    let mut cut_count = 0usize;
    for entry in kvscope_corpus::manifest() {
        let bytes = entry.payload();
        for cut in 0..bytes.len() {
            let err =
                kvscope_wire::decode_batch(&bytes[..cut]).expect_err(&format!("{} cut at {cut} of {} decoded", entry.file, bytes.len()));
            assert!(err.offset() <= cut, "{}: offset {} beyond the {cut} bytes given", entry.file, err.offset());
            cut_count += 1;
        }
    }
    assert!(cut_count > 100_000, "only {cut_count} truncations tried");
}

/// A payload with a byte appended is rejected as trailing bytes, at the right offset.
#[test]
fn trailing_bytes_are_rejected_with_their_offset() {
    for entry in kvscope_corpus::manifest().iter().take(20) {
        let mut bytes = entry.payload().to_vec();
        bytes.push(0xc0);
        let err = kvscope_wire::decode_batch(&bytes).unwrap_err();
        assert_eq!(err.to_string(), format!("byte {}: 1 trailing bytes after the batch", bytes.len() - 1));
    }
}

/// The ids as a generic msgpack reader sees them: every item a value, read and range-checked.
fn ids_read_item_by_item(payload: &[u8], ids: &kvscope_wire::TokenIds) -> Option<Vec<u32>> {
    let bytes = &payload[ids.span.start as usize..ids.span.end as usize];
    kvscope_wire::msgpack::Reader::read(bytes, |r| {
        let n = r.array("token_ids")?;
        let mut out = Vec::new();
        let mut last_second = None;
        for _ in 0..n {
            if ids.is_bigram {
                if r.array("token pair")? != 2 {
                    return Err(r.mismatch("a pair"));
                }
                out.push(r.u32("token id")?);
                last_second = Some(r.u32("token id")?);
            } else {
                out.push(r.u32("token id")?);
            }
        }
        out.extend(last_second);
        Ok(out)
    })
    .ok()
}

/// `TokenIds::values` (the router's tokens hashes read every store's ids through it) reads what
/// an item-by-item reader reads, on every store of the corpus.
#[test]
fn token_id_values_equal_an_item_by_item_read_on_every_store() {
    let mut stores = 0;
    let mut ids = 0;
    for entry in kvscope_corpus::manifest() {
        let bytes = entry.payload();
        let Ok(batch) = kvscope_wire::decode_batch(bytes) else { continue };
        for event in &batch.events {
            if let kvscope_wire::KvEvent::BlockStored(s) = event {
                let fast = s.token_ids.values(bytes);
                assert_eq!(fast, ids_read_item_by_item(bytes, &s.token_ids), "{}", entry.file);
                assert_eq!(fast.is_none(), s.token_ids.outside_u32, "{}", entry.file);
                let le = fast.as_ref().map(|v| v.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>());
                assert_eq!(s.token_ids.le_bytes(bytes), le, "{}", entry.file);
                stores += 1;
                ids += fast.map_or(0, |v| v.len());
            }
        }
    }
    assert!(stores > 300 && ids > 10_000, "only {stores} stores, {ids} ids");
}
