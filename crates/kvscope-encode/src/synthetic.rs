//! A synthetic vLLM 0.33 fleet, for benches: many small events per batch, as a busy fleet of
//! short requests publishes them (the Kimi-K3 corpus stream is the large-batch case).

use std::collections::VecDeque;

use crate::{Batch, EncodeError, Event, Hash, Removed, Stored, encode_batch_lossy, release};

/// One published batch of a synthetic worker.
#[derive(Clone, Debug)]
pub struct SyntheticBatch {
    pub worker: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
    pub events: u32,
}

/// `workers` workers (ids from 0, dp rank 0), `batches` batches each of about 8 events, one
/// worker's batches after another's: chained GPU stores of 1-4 blocks of 16 tokens (a new chain
/// every 16 stores) and, once a worker holds 400 blocks, a removal of its 4 oldest per store.
/// Block hashes are splitmix64 of (worker, counter), so no two workers share one, and each
/// block's 16 tokens are drawn from its hash, so no two blocks share their tokens: a real
/// engine's hash covers the tokens, and the same tokens under two hashes would land on one node
/// of Dynamo's tree (keyed by tokens), where a removal of one cuts the other off.
pub fn fleet(workers: u32, batches: u64) -> Result<Vec<SyntheticBatch>, EncodeError> {
    let mut out = Vec::with_capacity(workers as usize * batches as usize);
    for w in 0..workers {
        let mut next = 0u64;
        let mut live: VecDeque<u64> = VecDeque::new();
        let mut parent: Option<u64> = None;
        let mut stores = 0u32;
        for seq in 0..batches {
            let mut events: Vec<Event> = Vec::new();
            while events.len() < 8 {
                let n = 1 + (stores % 4) as usize;
                if stores.is_multiple_of(16) {
                    parent = None;
                }
                stores += 1;
                let hashes: Vec<u64> = (0..n)
                    .map(|_| {
                        next += 1;
                        splitmix(u64::from(w) << 40 | next)
                    })
                    .collect();
                let tokens = hashes.iter().flat_map(|&h| (0..16).map(move |t| (splitmix(h ^ t) % 50_000) as u32));
                let store =
                    Stored::new(hashes.iter().map(|&h| Hash::U64(h)), 16).parent(parent.map(Hash::U64)).tokens(tokens).medium(Some("GPU"));
                events.push(store.into());
                parent = hashes.last().copied();
                live.extend(&hashes);
                if live.len() > 400 {
                    let old: Vec<u64> = (0..4).filter_map(|_| live.pop_front()).collect();
                    events.push(Removed::new(old.into_iter().map(Hash::U64)).into());
                }
            }
            let n = events.len() as u32;
            let payload = encode_batch_lossy(&release::VLLM_0_33.layout, &Batch { ts: 1.0, events, dp_rank: Some(0) })?;
            out.push(SyntheticBatch { worker: w, seq, payload, events: n });
        }
    }
    Ok(out)
}

/// splitmix64: distinct, well-spread block hashes from a counter.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_batch_decodes_to_its_events_and_stores_chain() {
        let fleet = fleet(2, 100).unwrap();
        assert_eq!(fleet.len(), 200);
        for b in &fleet {
            let decoded = kvscope_wire::decode_batch(&b.payload).unwrap();
            assert_eq!(decoded.events.len() as u32, b.events, "worker {} seq {}", b.worker, b.seq);
        }
        // No two blocks carry the same tokens (the router's index keys its tree by them).
        let mut seen = std::collections::HashSet::new();
        for b in &fleet {
            for e in kvscope_wire::decode_batch(&b.payload).unwrap().events {
                if let kvscope_wire::KvEvent::BlockStored(s) = e {
                    let tokens = s.token_ids.values(&b.payload).unwrap();
                    assert_eq!(tokens.len(), s.block_hashes.len() * 16);
                    for block in tokens.chunks(16) {
                        assert!(seen.insert(block.to_vec()), "worker {} seq {}: a block repeats another's tokens", b.worker, b.seq);
                    }
                }
            }
        }
        // Past 400 live blocks, batches remove the oldest.
        let last = kvscope_wire::decode_batch(&fleet[99].payload).unwrap();
        assert!(last.events.iter().any(|e| matches!(e, kvscope_wire::KvEvent::BlockRemoved(_))));
    }
}
