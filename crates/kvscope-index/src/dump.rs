//! A real index read back: Dynamo's `GET /dump` (`{"model:group": {"block_size": N, "events":
//! [RouterEvent JSON…]}}`) as RouterEvents, rebuilt into a [`DynamoIndex`] so that it can be
//! compared with the model block for block and scored as the real one scores.

use kvscope_router::{EventData, KvCacheEvent, PlaneTier, RouterEvent, StoredBlock, StoredData};
use serde_json::Value;

use crate::dynamo::{BlockSets, DynamoIndex, storage_tier};

/// One partition of a dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpPart {
    /// `model:routing_group`.
    pub name: String,
    pub block_size: Option<u64>,
    pub events: Vec<RouterEvent>,
}

fn field<'a>(v: &'a Value, path: &str, at: &str) -> Result<&'a Value, String> {
    path.split('.').try_fold(v, |v, k| v.get(k).ok_or_else(|| format!("{at}: no {k:?} (in {path})")))
}

fn u64_at(v: &Value, path: &str, at: &str) -> Result<u64, String> {
    field(v, path, at)?.as_u64().ok_or_else(|| format!("{at}: {path} is not an unsigned integer"))
}

/// Parses a `/dump` body. An event that is not a store (the dump lists only stores) is an error
/// naming its position, as is anything that is not the documented shape.
pub fn parse_dump(bytes: &[u8]) -> Result<Vec<DumpPart>, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("/dump is not JSON: {e}"))?;
    let parts = v.as_object().ok_or("/dump is not a JSON object of partitions")?;
    let mut out = Vec::new();
    for (name, part) in parts {
        let events =
            part.get("events").and_then(Value::as_array).ok_or_else(|| format!("/dump partition {name:?} has no \"events\" array"))?;
        let mut parsed = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            let at = format!("/dump {name:?} event {i}");
            let stored = field(e, "event.data.stored", &at)?;
            let blocks = stored.get("blocks").and_then(Value::as_array).ok_or_else(|| format!("{at}: stored has no \"blocks\" array"))?;
            let blocks = blocks
                .iter()
                .map(|b| Ok(StoredBlock { block_hash: u64_at(b, "block_hash", &at)?, tokens_hash: u64_at(b, "tokens_hash", &at)? }))
                .collect::<Result<Vec<_>, String>>()?;
            let parent_hash = match stored.get("parent_hash") {
                None | Some(Value::Null) => None,
                Some(p) => Some(p.as_u64().ok_or_else(|| format!("{at}: parent_hash is not an unsigned integer"))?),
            };
            let tier = e.get("storage_tier").and_then(Value::as_str).unwrap_or("device");
            parsed.push(RouterEvent {
                worker_id: u64_at(e, "worker_id", &at)?,
                storage_tier: PlaneTier::from_wire(tier),
                residency_domain: e.get("residency_domain").and_then(Value::as_str).map(kvscope_router::residency_domain),
                event: KvCacheEvent {
                    event_id: u64_at(e, "event.event_id", &at).unwrap_or(0),
                    data: EventData::Stored(StoredData { parent_hash, start_position: None, blocks }),
                    dp_rank: u64_at(e, "event.dp_rank", &at).unwrap_or(0) as u32,
                },
            });
        }
        out.push(DumpPart { name: name.clone(), block_size: part.get("block_size").and_then(Value::as_u64), events: parsed });
    }
    Ok(out)
}

/// The blocks a dump lists, per worker and tier.
pub fn dump_block_sets(parts: &[DumpPart]) -> BlockSets {
    let mut out = BlockSets::new();
    for e in parts.iter().flat_map(|p| &p.events) {
        let (Some(tier), EventData::Stored(s)) = (storage_tier(&e.storage_tier), &e.event.data) else { continue };
        out.entry(((e.worker_id, e.event.dp_rank), tier)).or_default().extend(s.blocks.iter().map(|b| b.block_hash));
    }
    out.retain(|_, s| !s.is_empty());
    out
}

impl DynamoIndex {
    /// The index a dump describes: its stores applied in dump order (parents before children,
    /// as the dump lists them), every partition together.
    pub fn from_dump(parts: &[DumpPart]) -> DynamoIndex {
        let mut index = DynamoIndex::new();
        for e in parts.iter().flat_map(|p| &p.events) {
            let _ = index.apply(e);
        }
        index
    }
}
