//! Engine payloads in the byte layout of a chosen release, written the way msgspec writes them.
//!
//! msgspec writes the smallest msgpack form of every value (positive ints as uint, negative as
//! int, floats always as float64), structs with `array_like=True` as tagged arrays carrying every
//! field (vLLM up to 0.23), and tagged structs as maps with a `type` key first, omitting fields
//! whose value equals their default (`omit_defaults=True`; vLLM 0.24 on, SGLang). The unit tests
//! re-encode the corpus's payloads of each supported release from their decoded content and
//! compare bytes, so the demo publishes what those engines publish.

use rmp::encode as enc;

/// Releases whose layout the demo can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// vLLM 0.33.0: tagged maps; `extra_keys`, `group_idx`, `kv_cache_spec_kind`,
    /// `kv_cache_spec_sliding_window` and `locality` omitted when unset.
    Vllm033,
    /// vLLM 0.23.0: tagged arrays, `BlockStored` of 12 elements, `BlockRemoved` of 4.
    Vllm023,
    /// SGLang 0.5.23: tagged maps with SGLang's own fields, `attn_dp_rank` written even when nil.
    Sglang0523,
}

impl Release {
    pub const ALL: [(&'static str, Release); 3] =
        [("vllm-0.33.0", Release::Vllm033), ("vllm-0.23.0", Release::Vllm023), ("sglang-0.5.23", Release::Sglang0523)];

    pub fn name(self) -> &'static str {
        Release::ALL.iter().find(|(_, r)| *r == self).map(|(n, _)| *n).expect("listed")
    }

    pub fn parse(s: &str) -> Option<Release> {
        Release::ALL.iter().find(|(n, _)| *n == s).map(|(_, r)| *r)
    }

    /// How the release's replay socket frames a reply: `[topic, seq, payload]` from vLLM 0.26
    /// and in SGLang, `[seq, payload]` before.
    pub fn replay_has_topic(self) -> bool {
        !matches!(self, Release::Vllm023)
    }
}

/// A block hash as the engine typed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    U64(u64),
    I64(i64),
}

/// One event to encode.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Stored(Stored),
    Removed { hashes: Vec<Hash>, medium: Option<String>, group_idx: Option<u32> },
    Cleared,
}

/// `BlockStored` fields the demo sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    pub hashes: Vec<Hash>,
    pub parent: Option<Hash>,
    pub token_ids: Vec<u32>,
    pub block_size: u32,
    pub medium: Option<String>,
    pub lora_name: Option<String>,
    /// `Some(n)`: `extra_keys` is a list of `n` nils (vLLM's GPU stores); `None`: unset.
    pub extra_keys_nils: Option<usize>,
    pub group_idx: Option<u32>,
    pub kind: Option<String>,
}

fn w_hash(out: &mut Vec<u8>, h: Hash) {
    match h {
        Hash::U64(v) => {
            enc::write_uint(out, v).expect("vec");
        }
        Hash::I64(v) if v >= 0 => {
            enc::write_uint(out, v as u64).expect("vec");
        }
        Hash::I64(v) => {
            enc::write_sint(out, v).expect("vec");
        }
    }
}

fn w_opt_hash(out: &mut Vec<u8>, h: Option<Hash>) {
    match h {
        Some(h) => w_hash(out, h),
        None => enc::write_nil(out).expect("vec"),
    }
}

fn w_str(out: &mut Vec<u8>, s: &str) {
    enc::write_str(out, s).expect("vec");
}

fn w_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => w_str(out, s),
        None => enc::write_nil(out).expect("vec"),
    }
}

fn w_opt_uint(out: &mut Vec<u8>, v: Option<u32>) {
    match v {
        Some(v) => {
            enc::write_uint(out, u64::from(v)).expect("vec");
        }
        None => enc::write_nil(out).expect("vec"),
    }
}

fn w_hashes(out: &mut Vec<u8>, hashes: &[Hash]) {
    enc::write_array_len(out, hashes.len() as u32).expect("vec");
    for &h in hashes {
        w_hash(out, h);
    }
}

fn w_tokens(out: &mut Vec<u8>, tokens: &[u32]) {
    enc::write_array_len(out, tokens.len() as u32).expect("vec");
    for &t in tokens {
        enc::write_uint(out, u64::from(t)).expect("vec");
    }
}

fn w_extra_keys(out: &mut Vec<u8>, nils: Option<usize>) {
    match nils {
        Some(n) => {
            enc::write_array_len(out, n as u32).expect("vec");
            for _ in 0..n {
                enc::write_nil(out).expect("vec");
            }
        }
        None => enc::write_nil(out).expect("vec"),
    }
}

/// Encodes one batch `[ts, events, dp_rank]` in `release`'s layout.
pub fn encode_batch(release: Release, ts: f64, events: &[Event], dp_rank: Option<u32>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + events.len() * 64);
    enc::write_array_len(&mut out, 3).expect("vec");
    enc::write_f64(&mut out, ts).expect("vec");
    enc::write_array_len(&mut out, events.len() as u32).expect("vec");
    for event in events {
        match release {
            Release::Vllm023 => vllm023_event(&mut out, event),
            Release::Vllm033 => vllm033_event(&mut out, event),
            Release::Sglang0523 => sglang_event(&mut out, event),
        }
    }
    w_opt_uint(&mut out, dp_rank);
    out
}

fn vllm023_event(out: &mut Vec<u8>, event: &Event) {
    match event {
        Event::Stored(s) => {
            enc::write_array_len(out, 12).expect("vec");
            w_str(out, "BlockStored");
            w_hashes(out, &s.hashes);
            w_opt_hash(out, s.parent);
            w_tokens(out, &s.token_ids);
            enc::write_uint(out, u64::from(s.block_size)).expect("vec");
            enc::write_nil(out).expect("vec"); // lora_id
            w_opt_str(out, s.medium.as_deref());
            w_opt_str(out, s.lora_name.as_deref());
            w_extra_keys(out, s.extra_keys_nils);
            w_opt_uint(out, s.group_idx);
            w_opt_str(out, s.kind.as_deref());
            enc::write_nil(out).expect("vec"); // kv_cache_spec_sliding_window
        }
        Event::Removed { hashes, medium, group_idx } => {
            enc::write_array_len(out, 4).expect("vec");
            w_str(out, "BlockRemoved");
            w_hashes(out, hashes);
            w_opt_str(out, medium.as_deref());
            w_opt_uint(out, *group_idx);
        }
        Event::Cleared => {
            enc::write_array_len(out, 1).expect("vec");
            w_str(out, "AllBlocksCleared");
        }
    }
}

/// msgspec writes an `omit_defaults` struct's map header as map16 whatever the count: it reserves
/// the header before it knows how many fields it will omit, then patches the count in.
fn map16(out: &mut Vec<u8>, n: u32) {
    out.push(0xde);
    out.extend_from_slice(&(n as u16).to_be_bytes());
}

fn vllm033_event(out: &mut Vec<u8>, event: &Event) {
    match event {
        Event::Stored(s) => {
            let optional =
                s.extra_keys_nils.is_some() as u32 + s.group_idx.is_some() as u32 + s.kind.is_some() as u32;
            map16(out, 8 + optional);
            w_str(out, "type");
            w_str(out, "BlockStored");
            w_str(out, "block_hashes");
            w_hashes(out, &s.hashes);
            w_str(out, "parent_block_hash");
            w_opt_hash(out, s.parent);
            w_str(out, "token_ids");
            w_tokens(out, &s.token_ids);
            w_str(out, "block_size");
            enc::write_uint(out, u64::from(s.block_size)).expect("vec");
            w_str(out, "lora_id");
            enc::write_nil(out).expect("vec");
            w_str(out, "medium");
            w_opt_str(out, s.medium.as_deref());
            w_str(out, "lora_name");
            w_opt_str(out, s.lora_name.as_deref());
            if s.extra_keys_nils.is_some() {
                w_str(out, "extra_keys");
                w_extra_keys(out, s.extra_keys_nils);
            }
            if let Some(g) = s.group_idx {
                w_str(out, "group_idx");
                enc::write_uint(out, u64::from(g)).expect("vec");
            }
            if let Some(k) = &s.kind {
                w_str(out, "kv_cache_spec_kind");
                w_str(out, k);
            }
        }
        Event::Removed { hashes, medium, group_idx } => {
            enc::write_map_len(out, 3 + group_idx.is_some() as u32).expect("vec");
            w_str(out, "type");
            w_str(out, "BlockRemoved");
            w_str(out, "block_hashes");
            w_hashes(out, hashes);
            w_str(out, "medium");
            w_opt_str(out, medium.as_deref());
            if let Some(g) = group_idx {
                w_str(out, "group_idx");
                enc::write_uint(out, u64::from(*g)).expect("vec");
            }
        }
        Event::Cleared => {
            enc::write_map_len(out, 1).expect("vec");
            w_str(out, "type");
            w_str(out, "AllBlocksCleared");
        }
    }
}

fn sglang_event(out: &mut Vec<u8>, event: &Event) {
    match event {
        Event::Stored(s) => {
            enc::write_map_len(out, 7 + s.lora_name.is_some() as u32).expect("vec");
            w_str(out, "type");
            w_str(out, "BlockStored");
            w_str(out, "block_hashes");
            w_hashes(out, &s.hashes);
            w_str(out, "parent_block_hash");
            w_opt_hash(out, s.parent);
            w_str(out, "token_ids");
            w_tokens(out, &s.token_ids);
            w_str(out, "block_size");
            enc::write_uint(out, u64::from(s.block_size)).expect("vec");
            w_str(out, "lora_id");
            enc::write_nil(out).expect("vec");
            w_str(out, "medium");
            w_opt_str(out, s.medium.as_deref());
            if let Some(l) = &s.lora_name {
                w_str(out, "lora_name");
                w_str(out, l);
            }
        }
        Event::Removed { hashes, medium, .. } => {
            enc::write_map_len(out, 3).expect("vec");
            w_str(out, "type");
            w_str(out, "BlockRemoved");
            w_str(out, "block_hashes");
            w_hashes(out, hashes);
            w_str(out, "medium");
            w_opt_str(out, medium.as_deref());
        }
        Event::Cleared => {
            enc::write_map_len(out, 1).expect("vec");
            w_str(out, "type");
            w_str(out, "AllBlocksCleared");
        }
    }
}

#[cfg(test)]
mod tests {
    //! Byte-for-byte against the corpus: decode each payload with kvscope-wire, rebuild the
    //! events, encode them with this module and compare.

    use super::*;
    use kvscope_wire::{BlockHash, KvEvent, decode_batch};

    fn fixture(rel: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kv-events").join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Reads the raw hash back from the payload to know whether the engine wrote it signed.
    fn hash_of(h: BlockHash, signed: bool) -> Hash {
        if signed && (h.0 as i64) < 0 { Hash::I64(h.0 as i64) } else { Hash::U64(h.0) }
    }

    fn tokens(payload: &[u8], span: &std::ops::Range<u32>) -> Vec<u32> {
        let mut rd = &payload[span.start as usize..span.end as usize];
        let n = rmp::decode::read_array_len(&mut rd).unwrap();
        (0..n).map(|_| rmp::decode::read_int::<u32, _>(&mut rd).unwrap()).collect()
    }

    fn rebuild(payload: &[u8], signed: bool) -> (f64, Vec<Event>, Option<u32>) {
        let batch = decode_batch(payload).unwrap();
        let events = batch
            .events
            .iter()
            .map(|e| match e {
                KvEvent::BlockStored(s) => Event::Stored(Stored {
                    hashes: s.block_hashes.iter().map(|h| hash_of(*h, signed)).collect(),
                    parent: s.parent_block_hash.map(|h| hash_of(h, signed)),
                    token_ids: tokens(payload, &s.token_ids.span),
                    block_size: s.block_size.unwrap(),
                    medium: s.medium.clone().map(String::from),
                    lora_name: s.lora_name.clone().map(String::from),
                    // vLLM writes one nil extra key per block on GPU stores, none on offload ones.
                    extra_keys_nils: (s.medium.as_deref() == Some("GPU") && s.group_idx.is_some() || s.kv_cache_spec_kind.is_some())
                        .then_some(s.block_hashes.len()),
                    group_idx: s.group_idx,
                    kind: s.kv_cache_spec_kind.clone().map(String::from),
                }),
                KvEvent::BlockRemoved(r) => Event::Removed {
                    hashes: r.block_hashes.iter().map(|h| hash_of(*h, signed)).collect(),
                    medium: r.medium.clone().map(String::from),
                    group_idx: r.group_idx,
                },
                KvEvent::AllBlocksCleared { .. } => Event::Cleared,
                KvEvent::Unknown(u) => panic!("unknown {u:?}"),
            })
            .collect();
        (batch.ts, events, batch.dp_rank)
    }

    fn check(release: Release, rel: &str, signed: bool) {
        let payload = fixture(rel);
        let (ts, events, dp) = rebuild(&payload, signed);
        let ours = encode_batch(release, ts, &events, dp);
        let at = ours.iter().zip(&payload).position(|(a, b)| a != b).unwrap_or(ours.len().min(payload.len()));
        assert!(
            ours == payload,
            "{rel}: bytes differ from the corpus at byte {at} (ours {} bytes, corpus {}): ours {:02x?}, corpus {:02x?}",
            ours.len(),
            payload.len(),
            &ours[at.saturating_sub(8)..(at + 8).min(ours.len())],
            &payload[at.saturating_sub(8)..(at + 8).min(payload.len())]
        );
    }

    #[test]
    fn kimi_k3_streams_match_the_corpus_byte_for_byte() {
        // The corpus keeps the Kimi-K3 stream for 0.33.0 only; 0.23.0's array layout of the same
        // groups is checked through hybrid_groups below.
        for w in 0..3 {
            for n in 1..=20 {
                check(Release::Vllm033, &format!("vllm-0.33.0/kimi_k3_agg-w{w}-{n:02}.msgpack"), false);
            }
        }
        check(Release::Vllm023, "vllm-0.23.0/hybrid_groups.msgpack", false);
        check(Release::Vllm033, "vllm-0.33.0/hybrid_groups.msgpack", false);
    }

    #[test]
    fn stores_removals_and_clears_match_the_corpus_byte_for_byte() {
        check(Release::Vllm033, "vllm-0.33.0/gpu_basic.msgpack", false);
        check(Release::Vllm023, "vllm-0.23.0/gpu_basic.msgpack", false);
    }

    #[test]
    fn lmcache_relay_matches_the_corpus_byte_for_byte() {
        check(Release::Vllm033, "lmcache-via-vllm-0.33.0/lmcache_relay.msgpack", true);
        check(Release::Vllm023, "lmcache-via-vllm-0.23.0/lmcache_relay.msgpack", true);
    }

    #[test]
    fn sglang_tiers_match_the_corpus_byte_for_byte() {
        check(Release::Sglang0523, "sglang-0.5.23/sglang-1.msgpack", true);
    }
}
