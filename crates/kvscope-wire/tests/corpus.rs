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

/// `TokenIds::values` and `le_bytes` (the router's tokens hashes read every store's ids through
/// one of them) read what an item-by-item reader reads, on every store of the corpus; so does a
/// decode that writes the ids out as it counts them (`Decoded::with_token_bytes`), for every
/// store but bigram pages, which it leaves to `le_bytes`.
#[test]
fn token_id_values_equal_an_item_by_item_read_on_every_store() {
    let mut stores = 0;
    let mut ids = 0;
    let mut kept = 0;
    for entry in kvscope_corpus::manifest() {
        let bytes = entry.payload();
        let Ok(batch) = kvscope_wire::decode_batch(bytes) else { continue };
        let decoded = kvscope_wire::Decoded::with_token_bytes(bytes);
        let tokens = decoded.token_bytes().expect("asked for");
        for event in &batch.events {
            if let kvscope_wire::KvEvent::BlockStored(s) = event {
                let fast = s.token_ids.values(bytes);
                assert_eq!(fast, ids_read_item_by_item(bytes, &s.token_ids), "{}", entry.file);
                assert_eq!(fast.is_none(), s.token_ids.outside_u32, "{}", entry.file);
                let le = fast.as_ref().map(|v| v.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>());
                assert_eq!(s.token_ids.le_bytes(bytes), le, "{}", entry.file);
                let written = tokens.get(&s.token_ids);
                if s.token_ids.is_bigram {
                    assert_eq!(written, None, "{}", entry.file);
                } else {
                    assert_eq!(written, le.as_deref(), "{}", entry.file);
                    kept += usize::from(written.is_some());
                }
                stores += 1;
                ids += fast.map_or(0, |v| v.len());
            }
        }
    }
    assert!(stores > 300 && ids > 10_000, "only {stores} stores, {ids} ids");
    assert!(kept > 300, "only {kept} stores' ids written by the decode");
}

struct Ignore;

impl kvscope_wire::EventSink for Ignore {
    fn event(&mut self, _: u32, _: &kvscope_wire::KvEvent) {}
}

/// Truncations of every payload fail the same way whether or not the decode writes the token ids
/// out as it counts them: the walk that writes them reports what the count does. Every cut of the
/// first 4 KB, every cut near where a store's ids start and end, and every 97th elsewhere (every
/// cut of the long Kimi-K3 payloads would take this test seconds for little more).
#[test]
fn a_decode_that_keeps_token_bytes_fails_truncations_as_the_count_does() {
    let mut cut_count = 0usize;
    for entry in kvscope_corpus::manifest() {
        let bytes = entry.payload();
        let spans: Vec<std::ops::Range<usize>> = match kvscope_wire::decode_batch(bytes) {
            Ok(batch) => batch
                .events
                .iter()
                .filter_map(|e| match e {
                    kvscope_wire::KvEvent::BlockStored(s) => Some(s.token_ids.span.start as usize..s.token_ids.span.end as usize),
                    _ => None,
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let near = |cut: usize| spans.iter().any(|s| cut.abs_diff(s.start) <= 24 || cut.abs_diff(s.end) <= 24);
        for cut in (0..bytes.len()).filter(|&cut| cut < 4096 || cut % 97 == 0 || near(cut)) {
            let counted = kvscope_wire::Decoded::new(&bytes[..cut]);
            let written = kvscope_wire::Decoded::with_token_bytes(&bytes[..cut]);
            let result = |d: &kvscope_wire::Decoded| (d.feed(&bytes[..cut], &mut Ignore), d.events().map(<[_]>::to_vec));
            assert_eq!(result(&written), result(&counted), "{} cut at {cut}", entry.file);
            cut_count += 1;
        }
    }
    assert!(cut_count > 50_000, "only {cut_count} truncations tried");
}
