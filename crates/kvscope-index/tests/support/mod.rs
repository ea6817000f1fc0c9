//! Engine batches for the index's tests: vLLM 0.33 map events on the device tier, block size 16.

use kvscope_encode::{Batch, Event, Hash, Stored, encode_batch_lossy, release};

pub fn payload(events: Vec<Event>) -> Vec<u8> {
    encode_batch_lossy(&release::VLLM_0_33.layout, &Batch { ts: 1.0, events, dp_rank: Some(0) }).expect("a vLLM 0.33 batch")
}

/// A one-block GPU store of `hash` under `parent`, with tokens of its own.
pub fn store(hash: u64, parent: Option<u64>) -> Event {
    let tokens = (0..16).map(move |t| (hash as u32).wrapping_mul(31).wrapping_add(t) % 50_000);
    Stored::new([Hash::U64(hash)], 16).parent(parent.map(Hash::U64)).tokens(tokens).medium(Some("GPU")).into()
}
