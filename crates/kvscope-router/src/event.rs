//! `RouterEvent`: what Dynamo's relay publishes per kept engine event, and its msgpack decoder.
//!
//! The shape is Dynamo 1.6.1's (`dynamo-kv-router`'s `RouterEvent`, `KvCacheEvent`), as the
//! fixtures show it on the wire: maps with named keys, `data` an externally tagged enum
//! (`{"stored": {...}}`, `{"removed": {...}}` or the bare string `"cleared"`). The decoder is
//! kvscope-wire's reader ([`kvscope_wire::msgpack`]), so errors read like engine-payload errors
//! and no length prefix is trusted. Unknown keys are skipped and key order is free, as serde's
//! derived maps allow; a tier name this build does not know is kept ([`PlaneTier::Other`])
//! rather than failing the message, so a newer Dynamo's tier shows up as a mismatch, not as a
//! lost message.

use std::borrow::Cow;
use std::fmt;

use kvscope_normalize::StorageTier;
use kvscope_wire::DecodeError;
use kvscope_wire::msgpack::{ReadError, Reader, Seg, missing};
use serde::Serialize;

use crate::error::PlaneError;

/// A `storage_tier` as the plane names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PlaneTier {
    Device,
    HostPinned,
    Disk,
    External,
    /// A name this build does not know, as sent.
    Other(String),
}

impl PlaneTier {
    /// The wire name: `device`, `host_pinned`, `disk`, `external`, or the unknown name.
    pub fn as_str(&self) -> &str {
        match self {
            PlaneTier::Device => "device",
            PlaneTier::HostPinned => "host_pinned",
            PlaneTier::Disk => "disk",
            PlaneTier::External => "external",
            PlaneTier::Other(name) => name,
        }
    }

    pub fn from_wire(name: &str) -> PlaneTier {
        match StorageTier::from_label(name) {
            Some(tier) => tier.into(),
            None => PlaneTier::Other(name.to_owned()),
        }
    }
}

/// kvscope's tier labels are Dynamo's `storage_tier` names.
impl From<StorageTier> for PlaneTier {
    fn from(tier: StorageTier) -> PlaneTier {
        match tier {
            StorageTier::Device => PlaneTier::Device,
            StorageTier::HostPinned => PlaneTier::HostPinned,
            StorageTier::Disk => PlaneTier::Disk,
            StorageTier::External => PlaneTier::External,
        }
    }
}

impl fmt::Display for PlaneTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for PlaneTier {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One event as the router receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouterEvent {
    /// The engine, by the relay's `worker_id`.
    pub worker_id: u64,
    /// The tier the event concerns (`device` for clears).
    pub storage_tier: PlaneTier,
    /// `worker` in Dynamo 1.6.1; `None` when absent or nil. Borrowed when it is that one value
    /// ([`residency_domain`]): every event the relay's prediction builds carries it.
    pub residency_domain: Option<Cow<'static, str>>,
    pub event: KvCacheEvent,
}

/// What Dynamo's `residency_domain` says for a worker-local event.
pub const RESIDENCY_WORKER: &str = "worker";

/// A `residency_domain` as read: Dynamo 1.6.1's one value ([`RESIDENCY_WORKER`]) borrowed, any
/// other owned.
pub fn residency_domain(domain: &str) -> Cow<'static, str> {
    if domain == RESIDENCY_WORKER { Cow::Borrowed(RESIDENCY_WORKER) } else { Cow::Owned(domain.to_owned()) }
}

/// The event inside a [`RouterEvent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KvCacheEvent {
    /// The relay's counter: 1 for the first event it published, +1 per published event (a
    /// filtered event burns none).
    pub event_id: u64,
    pub data: EventData,
    /// 0 when absent.
    pub dp_rank: u32,
}

/// What happened to the cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventData {
    Stored(StoredData),
    Removed(RemovedData),
    Cleared,
}

impl EventData {
    /// `stored`, `removed` or `cleared`.
    pub fn kind(&self) -> &'static str {
        match self {
            EventData::Stored(_) => "stored",
            EventData::Removed(_) => "removed",
            EventData::Cleared => "cleared",
        }
    }
}

/// `data.stored`.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize)]
pub struct StoredData {
    pub parent_hash: Option<u64>,
    /// Always nil from the ZMQ relay; kept when a producer sets it.
    pub start_position: Option<i64>,
    /// The blocks the relay published: none at another block size, and only the leading blocks
    /// whose tokens are all there.
    pub blocks: Vec<StoredBlock>,
}

/// One published block. `mm_extra_info` is skipped on decode (the encoder writes nil).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct StoredBlock {
    /// The engine's block hash, as a u64 bit pattern.
    pub block_hash: u64,
    /// XXH3-64 of the block's token ids (little-endian u32), seed 1337 (plus LoRA and cache
    /// namespace salts).
    pub tokens_hash: u64,
}

/// `data.removed`.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize)]
pub struct RemovedData {
    pub block_hashes: Vec<u64>,
}

/// Decodes an envelope's payload: a msgpack array of `RouterEvent` maps.
pub fn decode_router_events(payload: &[u8]) -> Result<Vec<RouterEvent>, PlaneError> {
    decode_events(payload).map_err(PlaneError::Payload)
}

fn decode_events(payload: &[u8]) -> Result<Vec<RouterEvent>, DecodeError> {
    Reader::read(payload, |r| {
        let n = r.array("RouterEvents")?;
        // A RouterEvent takes far more than 8 bytes; never trust a length prefix beyond that.
        let mut out = Vec::with_capacity(n.min(payload.len() / 8));
        for i in 0..n {
            let start = r.pos();
            out.push(router_event(r).map_err(|e| e.within(start, Seg::Index(i as u32)))?);
        }
        Ok(out)
    })
}

/// Reads the value of one map entry, adding the key to a failure's path.
fn field<'a, T>(
    r: &mut Reader<'a>,
    name: &'static str,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    let start = r.pos();
    read(r).map_err(|e| e.within(start, Seg::Field(name)))
}

fn required<T>(value: Option<T>, start: usize, map: &str, key: &str) -> Result<T, ReadError> {
    value.ok_or_else(|| missing(start, format!("{map} has no {key:?} key")))
}

fn router_event(r: &mut Reader<'_>) -> Result<RouterEvent, ReadError> {
    let start = r.pos();
    let n = r.map("RouterEvent")?;
    let (mut worker_id, mut tier, mut domain, mut event) = (None, None, None, None);
    for _ in 0..n {
        match r.key()? {
            b"worker_id" => worker_id = Some(field(r, "worker_id", |r| r.u64("worker_id"))?),
            b"storage_tier" => tier = Some(field(r, "storage_tier", |r| r.str("storage_tier").map(PlaneTier::from_wire))?),
            b"residency_domain" => {
                domain = field(r, "residency_domain", |r| {
                    if r.nil() { Ok(None) } else { r.str("residency_domain").map(|s| Some(residency_domain(s))) }
                })?
            }
            b"event" => event = Some(field(r, "event", kv_cache_event)?),
            other => {
                Reader::check_utf8(other)?;
                r.skip()?;
            }
        }
    }
    Ok(RouterEvent {
        worker_id: required(worker_id, start, "RouterEvent", "worker_id")?,
        // Dynamo's serde default for a RouterEvent without a tier.
        storage_tier: tier.unwrap_or(PlaneTier::Device),
        residency_domain: domain,
        event: required(event, start, "RouterEvent", "event")?,
    })
}

fn kv_cache_event(r: &mut Reader<'_>) -> Result<KvCacheEvent, ReadError> {
    let start = r.pos();
    let n = r.map("event")?;
    let (mut event_id, mut data, mut dp_rank) = (None, None, None);
    for _ in 0..n {
        match r.key()? {
            b"event_id" => event_id = Some(field(r, "event_id", |r| r.u64("event_id"))?),
            b"data" => data = Some(field(r, "data", event_data)?),
            b"dp_rank" => dp_rank = Some(field(r, "dp_rank", |r| r.u32("dp_rank"))?),
            other => {
                Reader::check_utf8(other)?;
                r.skip()?;
            }
        }
    }
    Ok(KvCacheEvent {
        event_id: required(event_id, start, "event", "event_id")?,
        data: required(data, start, "event", "data")?,
        dp_rank: dp_rank.unwrap_or(0),
    })
}

const DATA_EXPECTED: &str = "map {\"stored\": ...} or {\"removed\": ...}, or string \"cleared\" for data";

fn event_data(r: &mut Reader<'_>) -> Result<EventData, ReadError> {
    if let Some(name) = r.str_bytes()? {
        return match name {
            b"cleared" => Ok(EventData::Cleared),
            other => Err(kvscope_wire::msgpack::invalid(format!(
                "unknown data variant {:?}; expected \"cleared\" (or a map for stored/removed)",
                String::from_utf8_lossy(other)
            ))),
        };
    }
    let n = match r.peek()? {
        0x80..=0x8f | 0xde | 0xdf => r.map("data")?,
        _ => return Err(r.mismatch(DATA_EXPECTED)),
    };
    if n != 1 {
        return Err(kvscope_wire::msgpack::invalid(format!("expected data to be a map of one variant, found {n} entries")));
    }
    let data = match r.key()? {
        b"stored" => EventData::Stored(field(r, "stored", stored)?),
        b"removed" => EventData::Removed(field(r, "removed", removed)?),
        b"cleared" => {
            field(r, "cleared", |r| r.skip())?;
            EventData::Cleared
        }
        other => {
            return Err(kvscope_wire::msgpack::invalid(format!(
                "unknown data variant {:?}; expected stored, removed or cleared",
                String::from_utf8_lossy(other)
            )));
        }
    };
    Ok(data)
}

fn stored(r: &mut Reader<'_>) -> Result<StoredData, ReadError> {
    let start = r.pos();
    let n = r.map("stored")?;
    let mut out = StoredData::default();
    let mut blocks_seen = false;
    for _ in 0..n {
        match r.key()? {
            b"parent_hash" => {
                out.parent_hash = field(r, "parent_hash", |r| if r.nil() { Ok(None) } else { r.u64("parent_hash").map(Some) })?
            }
            b"start_position" => {
                out.start_position = field(r, "start_position", |r| if r.nil() { Ok(None) } else { r.i64("start_position").map(Some) })?
            }
            b"blocks" => {
                blocks_seen = true;
                out.blocks = field(r, "blocks", |r| {
                    let n = r.array("blocks")?;
                    let mut blocks = Vec::with_capacity(n.min(r.remaining() / 8));
                    for i in 0..n {
                        let start = r.pos();
                        blocks.push(block(r).map_err(|e| e.within(start, Seg::Index(i as u32)))?);
                    }
                    Ok(blocks)
                })?
            }
            other => {
                Reader::check_utf8(other)?;
                r.skip()?;
            }
        }
    }
    if !blocks_seen {
        return Err(missing(start, "stored has no \"blocks\" key".to_owned()));
    }
    Ok(out)
}

fn block(r: &mut Reader<'_>) -> Result<StoredBlock, ReadError> {
    let start = r.pos();
    let n = r.map("block")?;
    let (mut block_hash, mut tokens_hash) = (None, None);
    for _ in 0..n {
        match r.key()? {
            b"block_hash" => block_hash = Some(field(r, "block_hash", |r| r.u64("block_hash"))?),
            b"tokens_hash" => tokens_hash = Some(field(r, "tokens_hash", |r| r.u64("tokens_hash"))?),
            other => {
                Reader::check_utf8(other)?;
                r.skip()?;
            }
        }
    }
    Ok(StoredBlock {
        block_hash: required(block_hash, start, "block", "block_hash")?,
        tokens_hash: required(tokens_hash, start, "block", "tokens_hash")?,
    })
}

fn removed(r: &mut Reader<'_>) -> Result<RemovedData, ReadError> {
    let start = r.pos();
    let n = r.map("removed")?;
    let mut hashes = None;
    for _ in 0..n {
        match r.key()? {
            b"block_hashes" => {
                hashes = Some(field(r, "block_hashes", |r| {
                    let n = r.array("block_hashes")?;
                    let mut out = Vec::with_capacity(n.min(r.remaining()));
                    for i in 0..n {
                        let start = r.pos();
                        out.push(r.u64("block hash").map_err(|e| e.within(start, Seg::Index(i as u32)))?);
                    }
                    Ok(out)
                })?)
            }
            other => {
                Reader::check_utf8(other)?;
                r.skip()?;
            }
        }
    }
    Ok(RemovedData { block_hashes: required(hashes, start, "removed", "block_hashes")? })
}
