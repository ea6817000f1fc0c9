//! Every corpus payload this crate can rebuild, rebuilt byte for byte: decode it with
//! `kvscope-wire`, turn the typed events back into encodable ones ([`kvscope_encode::decoded`]),
//! encode them in the layout of the release the manifest names, compare.
//!
//! What cannot round-trip is listed below by class, with why, and counted, so the number of
//! payloads checked cannot shrink without this file changing.

use kvscope_encode::decoded::{NotKept, batch_from_decoded};
use kvscope_encode::{Event, Field, Layout, encode_batch, release};

/// Media of the connectors' stores (OffloadingConnector, Mooncake, LMCache, storage tiers).
const OFFLOAD_MEDIA: [&str; 5] = ["CPU", "cpu", "FS", "OBJ", "STORAGE"];

/// The one inference the test makes: the decoder does not say whether `extra_keys` was nil,
/// absent or one nil per block, so a store whose first block has no key strings gets what the
/// corpus's releases write: one nil per block from vLLM's own block pool (medium `GPU`, or the
/// edge cases' `tape`, `""` and nil), nothing from the connectors' offload stores.
fn infer_extra_keys(layout: &Layout, e: &mut Event) {
    let Event::Stored(s) = e else { return };
    let has_extra_keys = match layout.events {
        kvscope_encode::EventForm::Array { stored, .. } => stored.contains(&Field::ExtraKeys),
        kvscope_encode::EventForm::Map { stored, .. } => stored.iter().any(|(f, _)| *f == Field::ExtraKeys),
    };
    if has_extra_keys && s.extra_keys.is_none() && !s.medium.as_deref().is_some_and(|m| OFFLOAD_MEDIA.contains(&m)) {
        s.extra_keys = Some(vec![None; s.hashes.len()]);
    }
}

/// Payloads whose events carry a field the decoder does not keep at all, so no rebuilt event
/// can hold it: `lookahead_token_ids` (vLLM 0.33's `edge-8`).
const NOT_DECODED: &[&str] = &["vllm-0.33.0/edge-8.msgpack"];

/// How many of the corpus's payloads must round-trip, and how many hold bin hashes (every
/// `bytes_hashes` payload, 0.10.2 on, and the 0.13-0.23 `cpu_offload_placeholder` batches,
/// whose offload store names its chunk by a 32-byte bin).
const ROUND_TRIPS: usize = 331;
const BIN_HASH_PAYLOADS: usize = 49;

#[test]
fn corpus_payloads_re_encode_byte_for_byte() {
    let mut matched = 0;
    let mut bins = Vec::new();
    let mut failures = Vec::new();
    for entry in kvscope_corpus::manifest() {
        let rel = release::release(&entry.producer, &entry.version)
            .unwrap_or_else(|| panic!("{}: no layout for {} {}", entry.file, entry.producer, entry.version));
        let payload = entry.payload();
        let decoded = kvscope_wire::decode_batch(payload).unwrap_or_else(|e| panic!("{}: {e}", entry.file));
        let mut batch = match batch_from_decoded(&decoded, payload) {
            Ok(b) => b,
            Err(NotKept::BinHashBytes) => {
                bins.push(entry.file.as_str());
                continue;
            }
            Err(e) => panic!("{}: {e:?}", entry.file),
        };
        batch.events.iter_mut().for_each(|e| infer_extra_keys(&rel.layout, e));
        let ours = match encode_batch(&rel.layout, &batch) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{}: {e}", entry.file));
                continue;
            }
        };
        let expected_to_differ = NOT_DECODED.contains(&entry.file.as_str());
        if ours == payload {
            matched += 1;
            if expected_to_differ {
                failures.push(format!("{}: listed in NOT_DECODED but round-trips; remove it", entry.file));
            }
        } else if !expected_to_differ {
            let at = ours.iter().zip(payload).position(|(a, b)| a != b).unwrap_or(ours.len().min(payload.len()));
            failures.push(format!(
                "{}: differs at byte {at} (ours {} bytes, corpus {}): ours {:02x?}, corpus {:02x?}",
                entry.file,
                ours.len(),
                payload.len(),
                &ours[at.saturating_sub(4)..(at + 8).min(ours.len())],
                &payload[at.saturating_sub(4)..(at + 8).min(payload.len())]
            ));
        }
    }
    assert!(failures.is_empty(), "{matched} round-trip; {} do not:\n{}", failures.len(), failures.join("\n"));
    for file in &bins {
        let scenario = file.rsplit('/').next().unwrap();
        assert!(
            scenario.starts_with("bytes_hashes") || scenario.starts_with("cpu_offload_placeholder"),
            "{file}: bin hashes outside the scenarios that publish them"
        );
    }
    assert_eq!(bins.len(), BIN_HASH_PAYLOADS, "payloads with bin hashes: {bins:?}");
    assert_eq!(matched, ROUND_TRIPS, "payloads that round-trip byte for byte");
    assert_eq!(matched + bins.len() + NOT_DECODED.len(), kvscope_corpus::manifest().len(), "every payload is accounted for");
}
