//! Engine batch decoder and normalizer: `kvscope_wire::decode_batch` on each payload of the
//! input, and `Normalizer::push_payload` of the same payloads, in order, on one source under
//! each of the `fixed`, `legacy` and `dynamo-1.6.1` policies. Checks that nothing panics, that
//! `push_payload` agrees with `decode_batch`, one verdict per event, and renders every verdict,
//! error and log line the way the server and dashboard do.
#![no_main]

use kvscope_fuzz::split;
use kvscope_normalize::{Normalizer, Policy};
use kvscope_wire::{KvEvent, decode_batch};
use libfuzzer_sys::fuzz_target;

const POLICIES: [&str; 3] = ["fixed", "legacy", "dynamo-1.6.1"];

fuzz_target!(|data: &[u8]| {
    let payloads = split(data, 8);
    let decoded: Vec<_> = payloads.iter().map(|p| decode_batch(p)).collect();

    // The configured block size: the first store's own, so stores reach the rules past the
    // block-size check; 16 when no payload stores anything.
    let block_size = decoded
        .iter()
        .filter_map(|d| d.as_ref().ok())
        .flat_map(|b| b.events.iter())
        .find_map(|e| match e {
            KvEvent::BlockStored(s) => s.block_size,
            _ => None,
        })
        .unwrap_or(16);

    for (payload, d) in payloads.iter().zip(&decoded) {
        match d {
            Ok(batch) => {
                for e in &batch.events {
                    let _ = (
                        e.event_type(),
                        e.medium(),
                        e.group_idx(),
                        e.block_hashes().len(),
                    );
                }
            }
            Err(e) => {
                assert!(
                    e.offset() <= payload.len(),
                    "error offset {} past the {}-byte payload",
                    e.offset(),
                    payload.len()
                );
                let _ = (e.to_string(), e.classify());
            }
        }
    }

    for name in POLICIES {
        let policy: Policy = name.parse().expect("a shipped policy");
        let mut n = Normalizer::new(block_size, policy);
        let id = n.source("w0", 0);
        let mut out = Vec::new();
        for (seq, (payload, d)) in payloads.iter().zip(&decoded).enumerate() {
            let before = out.len();
            let got = n.push_payload(id, seq as u64, payload, &mut out);
            match (d, &got) {
                (Ok(want), Ok(got)) => {
                    // `ts` may be NaN, which `==` never equals: compare its bits.
                    assert_eq!(
                        want.ts.to_bits(),
                        got.ts.to_bits(),
                        "push_payload decoded another ts"
                    );
                    assert_eq!(
                        (&want.events, want.dp_rank, want.layout),
                        (&got.events, got.dp_rank, got.layout),
                        "push_payload decoded differently from decode_batch"
                    );
                    assert_eq!(
                        out.len() - before,
                        want.events.len(),
                        "one verdict per event"
                    );
                }
                (Err(want), Err(got)) => {
                    assert_eq!(want.to_string(), got.to_string());
                    assert_eq!(out.len(), before, "a failed payload adds no verdicts");
                }
                _ => panic!("push_payload and decode_batch disagree: {d:?} vs {got:?}"),
            }
            for v in &out[before..] {
                let _ = (
                    v.to_string(),
                    v.code().to_string(),
                    v.fatal_hint(),
                    v.label(),
                    v.blocks_applied(),
                );
            }
        }
        let c = n.counters(id);
        for line in c.log() {
            let _ = line.to_string();
        }
        let _ = (c.summaries(), c.total_events());
    }
});
