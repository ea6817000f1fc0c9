//! Compares kvscope-wire's decode of each corpus payload with the manifest's `expect`.
//!
//! The comparison goes field by field through the manifest's own shape (decimal hash strings,
//! `null` for absent fields), so a mismatch names the file, the field path and both values. It
//! lives here, not in one test file, so that the native `corpus` test and the browser run
//! execute the same check.

use kvscope_wire::{EventBatch, KvEvent, decode_batch};
use serde_json::{Value, json};

use crate::{Entry, manifest};

/// What a run over the manifest found.
#[derive(Debug, Default)]
pub struct CorpusReport {
    /// Entries decoded and compared.
    pub checked: usize,
    /// One line per mismatch: `file: path: expected X, decoded Y`.
    pub failures: Vec<String>,
}

impl CorpusReport {
    /// Panics with every failure listed, or if nothing was checked.
    pub fn assert_ok(&self) {
        assert!(self.checked > 0, "the corpus check ran on no entries: is manifest.json empty?");
        assert!(
            self.failures.is_empty(),
            "{} of {} corpus entries decoded differently from the manifest:\n{}",
            self.failures.len(),
            self.checked,
            self.failures.join("\n")
        );
    }
}

/// Decodes every manifest entry and compares it with its `expect`.
pub fn check_manifest() -> CorpusReport {
    let mut report = CorpusReport::default();
    for entry in manifest() {
        report.checked += 1;
        if let Err(mut lines) = check_entry(entry) {
            report.failures.append(&mut lines);
        }
    }
    report
}

/// Decodes one entry and compares it field by field.
pub fn check_entry(entry: &Entry) -> Result<(), Vec<String>> {
    let batch = decode_batch(entry.payload()).map_err(|e| vec![format!("{}: decode failed: {e}", entry.file)])?;
    let got = batch_as_manifest(&batch);
    let mut failures = Vec::new();
    compare(&entry.file, "", &entry.expect, &got, &mut failures);
    if failures.is_empty() { Ok(()) } else { Err(failures) }
}

/// A decoded batch in the manifest's `expect` shape.
pub fn batch_as_manifest(batch: &EventBatch) -> Value {
    json!({
        "ts": batch.ts,
        "dp_rank": batch.dp_rank,
        "events": batch.events.iter().map(event_as_manifest).collect::<Vec<_>>(),
    })
}

fn hash(h: &kvscope_wire::BlockHash) -> Value {
    Value::String(h.0.to_string())
}

fn event_as_manifest(event: &KvEvent) -> Value {
    match event {
        KvEvent::BlockStored(e) => json!({
            "type": "BlockStored",
            "block_hashes": e.block_hashes.iter().map(hash).collect::<Vec<_>>(),
            "parent_block_hash": e.parent_block_hash.as_ref().map(hash),
            "token_count": e.token_ids.count,
            "is_bigram": e.token_ids.is_bigram,
            "block_size": e.block_size,
            "medium": e.medium.as_deref(),
            "lora_name": e.lora_name.as_deref(),
            "group_idx": e.group_idx,
            "kv_cache_spec_kind": e.kv_cache_spec_kind.as_deref(),
            "locality": e.locality.as_deref(),
        }),
        KvEvent::BlockRemoved(e) => json!({
            "type": "BlockRemoved",
            "block_hashes": e.block_hashes.iter().map(hash).collect::<Vec<_>>(),
            "parent_block_hash": Value::Null,
            "token_count": Value::Null,
            "is_bigram": Value::Null,
            "block_size": Value::Null,
            "medium": e.medium.as_deref(),
            "lora_name": Value::Null,
            "group_idx": e.group_idx,
            "kv_cache_spec_kind": Value::Null,
            "locality": e.locality.as_deref(),
        }),
        KvEvent::AllBlocksCleared { .. } => json!({
            "type": "AllBlocksCleared",
            "block_hashes": null, "parent_block_hash": null, "token_count": null, "is_bigram": null,
            "block_size": null, "medium": null, "lora_name": null, "group_idx": null,
            "kv_cache_spec_kind": null, "locality": null,
        }),
        KvEvent::Unknown(u) => json!({ "type": u.tag.as_str() }),
    }
}

fn compare(file: &str, path: &str, expected: &Value, got: &Value, failures: &mut Vec<String>) {
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            for (key, ev) in e {
                let sub = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                compare(file, &sub, ev, g.get(key).unwrap_or(&Value::Null), failures);
            }
        }
        (Value::Array(e), Value::Array(g)) if e.len() == g.len() => {
            for (i, (ev, gv)) in e.iter().zip(g).enumerate() {
                compare(file, &format!("{path}[{i}]"), ev, gv, failures);
            }
        }
        (Value::Number(e), Value::Number(g)) if e.as_f64() == g.as_f64() => {}
        _ if expected == got => {}
        _ => failures.push(format!("{file}: {path}: expected {expected}, decoded {got}")),
    }
}
