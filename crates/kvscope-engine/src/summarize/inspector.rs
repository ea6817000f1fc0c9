//! The event inspector (decoded fields, raw bytes, the verdict under A and B with the rule that
//! decided each, the router's side) and the indexer log.

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::view::{BytesFromLine, BytesSource, Inspector, LogLine, Logs, RouterLines, VerdictBox};
use kvscope_wire::KvEvent;

use super::clock;
use crate::model::{BytesFrom, EventDetail, FetchState, Model, Origin};

/// The inspector as last built, and what it was built from: an event's detail re-runs the
/// normalizers over its source's retained frames, too much to redo at every flush, so it is
/// rebuilt only when the event, the classification or where its bytes come from changed.
#[derive(Debug, Default)]
pub struct InspectorCache {
    key: Option<(u64, u64, BytesFrom)>,
    view: Option<InspectorPart>,
}

/// The inspector as the shard that reads the event's source builds it: all but the index's
/// lines, and the question for the shards that model an index ([`event_index_lines`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InspectorPart {
    pub inspector: Inspector,
    pub index_query: Option<IndexQuery>,
}

impl InspectorPart {
    /// The inspector with the index shards' lines (each side from the shard that models it).
    pub fn with_index_lines(self, mut lines: Vec<(Side, String)>) -> Inspector {
        lines.sort_by_key(|(side, _)| *side as u8);
        Inspector { index_lines: lines, ..self.inspector }
    }
}

impl InspectorCache {
    /// The inspector for event `id` (`None`: nothing selected, or the event is not this
    /// model's, or is gone), given the classification's `epoch` (bumped by every
    /// re-classification and hello).
    pub fn get(&mut self, m: &Model, id: Option<u64>, epoch: u64) -> Option<InspectorPart> {
        let Some((id, from)) = id.and_then(|id| Some((id, m.bytes_from(id)?))) else {
            self.key = None;
            self.view = None;
            return None;
        };
        let key = (id, epoch, from);
        if self.key.as_ref() != Some(&key) {
            self.view = m.event_detail(id).map(|d| InspectorPart { inspector: detail_view(m, &d), index_query: index_query(m, &d) });
            self.key = Some(key);
        }
        // The router's side of the event changes as the reconciliation goes on: cheap, always new.
        let mut part = self.view.clone()?;
        part.inspector.router = router_lines(m, id);
        Some(part)
    }
}

fn detail_view(m: &Model, d: &EventDetail) -> Inspector {
    let capture = matches!(m.origin, Origin::Capture { .. });
    let retain_mib = m.config().retain_bytes / (1024 * 1024);
    let verdicts = d.verdicts.clone().map(|(policy, class, rule)| VerdictBox {
        policy,
        kind: class.as_ref().map(|c| c.kind),
        label: class.as_ref().map_or("no verdict".to_owned(), |c| c.describe()),
        rule,
    });
    let kind = match &d.bytes_from {
        BytesFrom::Page => BytesSource::Page,
        BytesFrom::Server => BytesSource::Server,
        BytesFrom::Capture => BytesSource::Capture,
        BytesFrom::Gone(FetchState::Failed(_) | FetchState::NoServer) => BytesSource::Gone,
        BytesFrom::Gone(_) => BytesSource::NotKept,
    };
    let ask = matches!(d.bytes_from, BytesFrom::Gone(FetchState::NotAsked))
        .then(|| if capture { "Read the raw bytes from the capture file" } else { "Fetch the raw bytes from the server" }.to_owned());
    Inspector {
        index_lines: Vec::new(),
        id: d.id,
        verdicts,
        router: None,
        fields: fields(d).into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        bytes_from: BytesFromLine { kind, sentence: d.bytes_from.sentence(retain_mib, capture), ask },
        payload: d.payload.clone(),
    }
}

/// What an event asks of the router's indexes: its worker and rank, tier and blocks. The
/// shard that reads the event's source makes it; each shard that models an index answers it
/// ([`event_index_lines`]), as the index stands at each summary.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndexQuery {
    worker_id: String,
    dp_rank: u32,
    tier: kvscope_normalize::StorageTier,
    hashes: Vec<u64>,
}

/// The index question of a store or a removal (the tier as the engine means it, its medium
/// case-insensitively); `None` for any other event.
pub fn index_query(m: &Model, d: &EventDetail) -> Option<IndexQuery> {
    let src = m.source_by_key(&d.source_key)?;
    let (hashes, medium) = match &d.event {
        Some(KvEvent::BlockStored(s)) => (s.block_hashes.iter().map(|h| h.0).collect::<Vec<_>>(), s.medium.as_deref()),
        Some(KvEvent::BlockRemoved(r)) => (r.block_hashes.iter().map(|h| h.0).collect(), r.medium.as_deref()),
        _ => return None,
    };
    let tier = match medium.filter(|m| !m.is_empty()) {
        None => kvscope_normalize::StorageTier::Device,
        Some(m) => kvscope_normalize::StorageTier::from_kv_medium(m, &kvscope_normalize::Policy::ENGINE)?,
    };
    Some(IndexQuery { worker_id: src.worker_id.clone(), dp_rank: d.batch_dp_rank.unwrap_or(src.dp_rank), tier, hashes })
}

/// Per side this model has an index of, what the router's index holds of the event's blocks
/// and why not.
pub fn event_index_lines(m: &Model, q: &IndexQuery) -> Vec<(Side, String)> {
    [Side::A, Side::B]
        .into_iter()
        .filter_map(|side| {
            let line = m.index().event_line(side, &q.worker_id, q.dp_rank, q.tier, &q.hashes)?;
            Some((side, format!("{}: {line}", m.policy_name(side))))
        })
        .collect()
}

/// The engine event beside the RouterEvent it became on the event plane, or the rule that
/// dropped it (only with an event plane).
fn router_lines(m: &Model, id: u64) -> Option<RouterLines> {
    let r = m.router_detail(id)?;
    let mut became = match (&r.published, &r.dropped) {
        (Some(e), _) => format!("became: {}", crate::model::router::describe(e)),
        (None, Some((label, sentence))) => format!("became nothing: {}'s relay drops it ({label}): {sentence}", r.policy),
        (None, None) => "became nothing".to_owned(),
    };
    if let Some(note) = &r.relay_note {
        became.push_str(&format!(" ({note})"));
    }
    let arrived = match (&r.difference, &r.published) {
        (Some(d), _) => format!("on the event plane: {d}"),
        (None, Some(_)) => "on the event plane: no difference recorded for it".to_owned(),
        (None, None) => "on the event plane: nothing expected".to_owned(),
    };
    let received = r.received.as_ref().map(|e| format!("arrived instead: {}", crate::model::router::describe(e)));
    Some(RouterLines { policy: r.policy.to_owned(), became, arrived, received })
}

/// The decoded fields as (name, value) rows; wire strings in `{:?}` so `"cpu "` shows its space.
pub fn fields(d: &EventDetail) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("source", d.source_key.clone()),
        ("seq", d.seq.to_string()),
        ("event index", d.index.to_string()),
        ("received", format!("{}{}", clock(d.recv_time_nanos), if d.replayed { " (replayed)" } else { "" })),
        ("topic", format!("{:?}", String::from_utf8_lossy(&d.topic))),
    ];
    if let Some(ts) = d.batch_ts {
        out.push(("batch ts", format!("{ts:.6} s")));
    }
    out.push(("batch dp_rank", d.batch_dp_rank.map_or("none".into(), |r| r.to_string())));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "absent".into());
    match &d.event {
        Some(KvEvent::BlockStored(s)) => {
            out.push(("type", "BlockStored".into()));
            out.push(("block_hashes", hashes(&s.block_hashes)));
            out.push(("parent_block_hash", opt(s.parent_block_hash.map(|h| h.to_string()))));
            out.push(("token_ids", format!("{} {}", s.token_ids.count, if s.token_ids.is_bigram { "pairs" } else { "tokens" })));
            out.push(("block_size", opt(s.block_size.map(|b| format!("{b} tokens")))));
            out.push(("medium", opt(s.medium.as_ref().map(|m| format!("{m:?}")))));
            out.push(("group_idx", opt(s.group_idx.map(|g| g.to_string()))));
            out.push(("kv_cache_spec_kind", opt(s.kv_cache_spec_kind.as_ref().map(|k| format!("{k:?}")))));
            out.push(("lora_id", opt(s.lora_id.map(|l| l.to_string()))));
            out.push(("lora_name", opt(s.lora_name.as_ref().map(|l| format!("{l:?}")))));
            out.push(("locality", opt(s.locality.as_ref().map(|l| format!("{l:?}")))));
            out.push(("encoding", opt(s.encoding.map(|e| format!("{e:?}")))));
        }
        Some(KvEvent::BlockRemoved(r)) => {
            out.push(("type", "BlockRemoved".into()));
            out.push(("block_hashes", hashes(&r.block_hashes)));
            out.push(("medium", opt(r.medium.as_ref().map(|m| format!("{m:?}")))));
            out.push(("group_idx", opt(r.group_idx.map(|g| g.to_string()))));
            out.push(("locality", opt(r.locality.as_ref().map(|l| format!("{l:?}")))));
        }
        Some(KvEvent::AllBlocksCleared { .. }) => out.push(("type", "AllBlocksCleared".into())),
        Some(KvEvent::Unknown(u)) => out.push(("type", format!("unknown tag {:?}", u.tag))),
        None if matches!(d.bytes_from, BytesFrom::Gone(_)) => record_fields(d, &mut out),
        None => out.push(("type", "payload did not decode".into())),
    }
    out
}

/// What the event's record holds, for an event whose bytes are gone.
fn record_fields(d: &EventDetail, out: &mut Vec<(&'static str, String)>) {
    let r = &d.record;
    out.retain(|(k, _)| !matches!(*k, "topic" | "batch dp_rank"));
    out.push(("type", r.kind.as_str().to_owned()));
    if r.blocks > 0 {
        let first = kvscope_wire::BlockHash(r.first_hash).to_string();
        out.push(("block_hashes", if r.blocks > 1 { format!("{first} (+{} more)", r.blocks - 1) } else { first }));
    }
    if r.block_size > 0 {
        out.push(("block_size", format!("{} tokens", r.block_size)));
    }
    if let Some(m) = &d.medium {
        out.push(("medium", format!("{m:?}")));
    }
}

fn hashes(h: &[kvscope_wire::BlockHash]) -> String {
    let shown: Vec<String> = h.iter().take(8).map(|h| h.to_string()).collect();
    if h.len() > 8 { format!("{} (+{} more)", shown.join(" "), h.len() - 8) } else { shown.join(" ") }
}

/// One shard's part of the log ([`crate::model::shard`]): the lines of its own sources, per
/// policy.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LogsPart {
    lines: [Vec<crate::model::LogLine>; 2],
}

pub fn logs_part(m: &Model) -> LogsPart {
    LogsPart { lines: [m.log(Side::A), m.log(Side::B)] }
}

/// The lines an indexer following each policy would print, source by source, from the shards'
/// parts.
pub fn logs_of(parts: &[&LogsPart]) -> Logs {
    let side = |side: Side| {
        let mut lines: Vec<&crate::model::LogLine> = parts.iter().flat_map(|p| &p.lines[side as usize]).collect();
        // Stable: each source's lines stay in their order.
        lines.sort_by_key(|l| l.source);
        lines
            .into_iter()
            .map(|l| LogLine { summary: l.seq == u64::MAX, text: l.text.clone(), fatal: l.fatal, after_exit: l.after_exit })
            .collect()
    };
    Logs { lines: [side(Side::A), side(Side::B)] }
}

/// The lines an indexer following each policy would print.
pub fn logs(m: &Model) -> Logs {
    logs_of(&[&logs_part(m)])
}
