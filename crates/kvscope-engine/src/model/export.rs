//! Downloads: the retained frames as a `.kvcap` capture, and the retained events as JSON lines.
//! Each shard writes its own frames' part, every piece with its frame's place in the stream
//! ([`ExportPart`]); [`join_export`] puts the shards' parts in stream order behind the header.

use kvscope_engine_protocol::ExportKind;
use kvscope_protocol as proto;
use kvscope_wire::KvEvent;

use super::{FrameBody, Model, Source};

/// A shard's part of a download: (its frame's position in the stream, the bytes) per capture
/// record or JSON line, in stream order.
pub type ExportPart = Vec<(u64, Vec<u8>)>;

/// A download's file name and type.
pub fn download_name(kind: ExportKind) -> (&'static str, &'static str) {
    match kind {
        ExportKind::Capture => ("kvscope.kvcap", "application/octet-stream"),
        ExportKind::VerdictsJsonl => ("kvscope-verdicts.jsonl", "application/x-ndjson"),
    }
}

/// The download of `kind` from every shard's part: the capture's header (any shard's: the
/// hello names every source to each) and the pieces in stream order.
pub fn join_export(kind: ExportKind, header: Vec<u8>, parts: Vec<ExportPart>) -> Vec<u8> {
    let mut pieces: Vec<(u64, Vec<u8>)> = parts.into_iter().flatten().collect();
    // Stable: a frame's lines keep their order.
    pieces.sort_by_key(|(position, _)| *position);
    let mut out = if kind == ExportKind::Capture { header } else { Vec::new() };
    for (_, bytes) in pieces {
        out.extend_from_slice(&bytes);
    }
    out
}

impl Model {
    /// The retained frames as a `.kvcap` file: frames exactly as received.
    pub fn to_kvcap(&self, created_unix_nanos: u64) -> Vec<u8> {
        join_export(ExportKind::Capture, self.kvcap_header(created_unix_nanos), vec![self.export_part(ExportKind::Capture)])
    }

    /// One JSON object per retained event: where it came from, what it was and what each
    /// policy decided.
    pub fn to_jsonl(&self) -> String {
        let bytes = join_export(ExportKind::VerdictsJsonl, Vec::new(), vec![self.export_part(ExportKind::VerdictsJsonl)]);
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// A capture's header naming every source.
    pub fn kvcap_header(&self, created_unix_nanos: u64) -> Vec<u8> {
        let header = proto::capture::CaptureHeader {
            created_unix_nanos,
            kvscope_version: env!("CARGO_PKG_VERSION").to_owned(),
            sources: self.sources.iter().map(Source::info).collect(),
            note: Some("downloaded from the kvscope dashboard".to_owned()),
        };
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = proto::capture::write_header(&mut out, &header);
        out
    }

    /// This shard's part of a download.
    pub fn export_part(&self, kind: ExportKind) -> ExportPart {
        match kind {
            ExportKind::Capture => self.kvcap_records(),
            ExportKind::VerdictsJsonl => self.jsonl_lines(),
        }
    }

    fn kvcap_records(&self) -> ExportPart {
        let mut out = Vec::new();
        // Every shard keeps an event plane's frames (each reconciles its own workers'); the
        // shard that reads the plane writes them.
        let own = |f: &&super::RetainedFrame| self.sources.get(f.source as usize).is_some_and(|s| s.own);
        for f in self.frames.iter().filter(own) {
            let rec = match &f.body {
                FrameBody::Message { topic, payload } => proto::capture::encode_record_parts(
                    f.source,
                    f.recv_time_nanos,
                    f.replayed,
                    &[topic.as_slice(), &f.seq.to_be_bytes(), payload.as_slice()],
                ),
                FrameBody::Malformed { frames, .. } | FrameBody::Plane { frames } => {
                    proto::capture::encode_record_parts(f.source, f.recv_time_nanos, f.replayed, frames)
                }
                // Another shard's frame: that shard writes it.
                FrameBody::IndexOnly { .. } => continue,
            };
            out.push((f.position, rec));
        }
        out
    }

    fn jsonl_lines(&self) -> ExportPart {
        let mut out = Vec::new();
        for f in &self.frames {
            let Some(payload) = f.payload() else { continue };
            let Ok(batch) = kvscope_wire::decode_batch(payload) else { continue };
            let src = &self.sources[f.source as usize];
            for (i, ev) in batch.events.iter().enumerate() {
                let Some(loc) = self.event_loc(f.first_event + i as u64) else { continue };
                let verdict = |side: usize| {
                    let c = self.classes.get(loc.class[side]);
                    serde_json::json!({
                        "policy": self.runs[side].name(),
                        "kind": c.map(|c| c.kind.past_tense()),
                        "reason": c.map(|c| c.reason.as_str()),
                        "tier": c.and_then(|c| c.tier.map(|t| t.to_string())),
                    })
                };
                let line = serde_json::json!({
                    "source": src.key,
                    "worker_id": src.worker_id,
                    "dp_rank": src.dp_rank,
                    "seq": f.seq,
                    "index": i,
                    "recv_time_nanos": f.recv_time_nanos,
                    "type": ev.event_type().as_str(),
                    "medium": ev.medium(),
                    "group_idx": ev.group_idx(),
                    "block_size": match ev { KvEvent::BlockStored(s) => s.block_size, _ => None },
                    "blocks": ev.block_hashes().len(),
                    "a": verdict(0),
                    "b": verdict(1),
                });
                let mut text = line.to_string();
                text.push('\n');
                out.push((f.position, text.into_bytes()));
            }
        }
        out
    }
}
