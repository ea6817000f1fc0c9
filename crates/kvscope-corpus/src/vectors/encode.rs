//! Frames from the table: events described as data ([`EventSpec`]) encoded into real msgpack
//! payloads through `kvscope-encode`, corpus payloads by file name, and raw hex.

use kvscope_encode::{BatchForm, Event, Hash, Layout, Removed, Stored, Tokens, encode_batch as encode, release};

use super::{EventSpec, HashSpec, Vector};

/// A payload ready to push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub worker_id: String,
    pub dp_rank: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// Splits `w0:1` into `("w0", 1)`.
pub fn parse_source(s: &str) -> Result<(String, u32), String> {
    let (worker, rank) = s.rsplit_once(':').ok_or_else(|| format!("source {s:?} is not worker:dp_rank"))?;
    let rank = rank.parse().map_err(|_| format!("source {s:?}: dp_rank {rank:?} is not a u32"))?;
    Ok((worker.to_owned(), rank))
}

pub(super) fn build_frames(vector: &Vector, corpus: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<Vec<Frame>, String> {
    vector
        .frames
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let (worker_id, dp_rank) = parse_source(&spec.source)?;
            let payload = match (&spec.events, &spec.corpus, &spec.raw_hex) {
                (Some(events), None, None) => {
                    let rank = spec.batch_dp_rank.unwrap_or(Some(dp_rank));
                    let array = match spec.encoding.as_deref() {
                        None | Some("map") => false,
                        Some("array") => true,
                        Some(other) => return Err(format!("frame {i}: encoding {other:?} is not map or array")),
                    };
                    let layout = spec.layout.as_deref().unwrap_or("array3");
                    encode_batch_with(spec.ts, events, rank, array, layout).map_err(|e| format!("frame {i}: {e}"))?
                }
                (None, Some(file), None) => corpus(file).ok_or_else(|| format!("frame {i}: no corpus payload {file:?}"))?,
                (None, None, Some(hex)) => decode_hex(hex).map_err(|e| format!("frame {i}: raw_hex: {e}"))?,
                _ => return Err(format!("frame {i}: give exactly one of events, corpus, raw_hex")),
            };
            Ok(Frame { worker_id, dp_rank, seq: spec.seq, payload })
        })
        .collect()
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    let hex: String = hex.split_whitespace().collect();
    if !hex.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("at {i}: {e}"))).collect()
}

/// The bytes of a bin hash nobody reads: the decoder keeps a bin's last 8 bytes only.
const BIN_FILL: u8 = 0x5a;

fn hash(h: HashSpec) -> Hash {
    match h {
        HashSpec::Unsigned(v) => Hash::U64(v),
        HashSpec::Signed(v) => Hash::I64(v),
        HashSpec::Bin { bin, value } => Hash::bin_ending(bin, value, BIN_FILL),
    }
}

/// `token_ids`: the explicit ids, or `n` small positive ids (one byte each, realistic enough),
/// as pairs for a bigram page.
fn tokens(e: &EventSpec, n: u32) -> Tokens {
    if let Some(ids) = &e.token_ids {
        return Tokens::Ids(ids.clone());
    }
    let id = |i: u32| i64::from(i % 100) + 1;
    if e.bigram { Tokens::Pairs((0..n).map(|i| [id(i), id(i) + 1]).collect()) } else { Tokens::Ids((0..n).map(id).collect()) }
}

/// The event an [`EventSpec`] describes. Which fields reach the wire is the layout's business:
/// one the layout cannot hold (a `locality` in the array encoding) fails the encode.
fn event(e: &EventSpec) -> Result<Event, String> {
    let hashes = || e.hashes.iter().copied().map(hash);
    Ok(match e.tag.as_str() {
        "BlockStored" => {
            let block_size = e.block_size.ok_or("BlockStored needs block_size")?;
            let n = e.tokens.unwrap_or(e.hashes.len() as u32 * block_size);
            Stored::new(hashes(), block_size)
                .parent(e.parent.map(hash))
                .token_ids(tokens(e, n))
                .lora_id(e.lora_id)
                .medium(e.medium.as_deref())
                .lora_name(e.lora_name.as_deref())
                .extra_keys(e.extra_keys.clone().map(|first| vec![Some(first)]))
                .cache_salt(e.cache_salt.as_deref())
                .group_idx(e.group_idx)
                .kind(e.kind.as_deref())
                .sliding_window(e.sliding_window)
                .locality(e.locality.as_deref())
                .ownership(e.ownership.as_deref())
                .into()
        }
        "BlockRemoved" => Removed::new(hashes())
            .medium(e.medium.as_deref())
            .group_idx(e.group_idx)
            .kind(e.kind.as_deref())
            .locality(e.locality.as_deref())
            .ownership(e.ownership.as_deref())
            .into(),
        // AllBlocksCleared and unknown tags carry nothing the normalizer reads but a clear's
        // ownership.
        tag => Event::other(tag, e.ownership.as_deref()),
    })
}

/// Encodes a batch `[ts, events, dp_rank]` as an engine would: tagged maps (`array == false`,
/// vLLM 0.24 on) or tagged arrays with every position written (vLLM 0.22-0.23 layout).
pub fn encode_batch(ts: f64, events: &[EventSpec], dp_rank: Option<u32>, array: bool) -> Result<Vec<u8>, String> {
    encode_batch_with(ts, events, dp_rank, array, "array3")
}

/// [`encode_batch`] with the batch's outer `layout`: `array3`; `array2` (`[ts, events]`, vLLM
/// 0.9.0, no dp_rank: `dp_rank` is ignored); `array4` (`[ts, events, dp_rank, nil]`); `map`
/// (`{ts, events, data_parallel_rank}`). Events use [`release::FULL_ARRAY`] or
/// [`release::SPARSE_MAP`], so a vector sets exactly the fields it names.
pub fn encode_batch_with(ts: f64, events: &[EventSpec], dp_rank: Option<u32>, array: bool, layout: &str) -> Result<Vec<u8>, String> {
    let (form, dp_rank) = match layout {
        "array3" => (BatchForm::Array { len: 3 }, dp_rank),
        "array2" => (BatchForm::Array { len: 2 }, None),
        "array4" => (BatchForm::Array { len: 4 }, dp_rank),
        "map" => (BatchForm::Map, dp_rank),
        other => return Err(format!("layout {other:?} is not array3, array2, array4 or map")),
    };
    let events_layout: Layout = if array { release::FULL_ARRAY } else { release::SPARSE_MAP };
    let events = events.iter().enumerate().map(|(i, e)| event(e).map_err(|m| format!("event {i}: {m}"))).collect::<Result<_, _>>()?;
    let batch = kvscope_encode::Batch { ts, events, dp_rank };
    encode(&events_layout.with_batch(form), &batch).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_events_decode_to_what_they_describe_in_both_encodings() {
        let events: Vec<EventSpec> = serde_json::from_str(
            r#"[{"type":"BlockStored","hashes":[1,-2],"parent":3,"block_size":16,"medium":"cpu","group_idx":3,"kind":"mamba"},
                {"type":"BlockRemoved","hashes":[18446744073709551615],"medium":"GPU","group_idx":0},
                {"type":"AllBlocksCleared"},{"type":"Mystery"}]"#,
        )
        .unwrap();
        for array in [false, true] {
            let bytes = encode_batch(1.5, &events, Some(2), array).unwrap();
            let batch = kvscope_wire::decode_batch(&bytes).unwrap();
            assert_eq!(batch.dp_rank, Some(2));
            let kvscope_wire::KvEvent::BlockStored(s) = &batch.events[0] else { panic!() };
            assert_eq!(s.block_hashes, [kvscope_wire::BlockHash(1), kvscope_wire::BlockHash(-2i64 as u64)]);
            assert_eq!((s.token_ids.count, s.block_size, s.medium.as_deref()), (32, Some(16), Some("cpu")));
            assert_eq!((s.group_idx, s.kv_cache_spec_kind.as_deref()), (Some(3), Some("mamba")));
            assert_eq!(batch.events[1].block_hashes(), [kvscope_wire::BlockHash(u64::MAX)]);
            assert_eq!(batch.events[2].event_type(), kvscope_wire::EventType::AllBlocksCleared);
            assert_eq!(batch.events[3].event_type(), kvscope_wire::EventType::Unknown);
        }
    }
}
