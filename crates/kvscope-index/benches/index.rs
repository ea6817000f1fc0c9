//! What the index model costs, each figure against a baseline measured in the same run:
//!
//! - **events/s**: kvscope's normalizer alone over a stream (`normalize`, the work every page
//!   and server already does) against the index model fed the same stream (`index`: the
//!   engine's truth and one policy's index under Dynamo 1.6.1's rules, as `check` runs it) and
//!   with two policies (`index_a_b`, as the page and the live server run it). Streams: the
//!   Kimi-K3 incident (3 workers, corpus bytes) and a synthetic vLLM 0.33 fleet (16 workers,
//!   chained 1-4 block stores and removals of the oldest blocks, 16-token blocks).
//! - **bytes per block**: Dynamo 1.6.1's index modelled ([`DynamoIndex`]) against kvscope's own
//!   tier tree, each holding the same 1,000,000 device blocks, and the whole model (truth and
//!   index) per block the engines hold: resident bytes (RSS), beside the `approx_bytes`
//!   estimates the page's memory bound uses (one-shot, `BENCH index {json}` lines).
//!
//! ```text
//! cargo bench -p kvscope-index --bench index
//! ```

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use kvscope_encode::synthetic::splitmix;
use kvscope_index::{DynamoIndex, IndexConfig, IndexModel};
use kvscope_normalize::{Normalizer, Policy};
use kvscope_router::{EventData, KvCacheEvent, PlaneTier, RouterEvent, StoredBlock, StoredData};

/// Resident set size of this process, from `/proc/self/statm` (pages of 4 KiB on x86_64 Linux),
/// as table 2's tier-tree fills measure it.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm (Linux only)");
    let pages: usize = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("statm's second field");
    pages * 4096
}

/// What `build`'s result adds to the resident set (kept alive, so the next fill cannot reuse it).
fn rss_of<T>(build: impl FnOnce() -> T) -> (T, usize) {
    let before = rss_bytes();
    let value = build();
    (value, rss_bytes().saturating_sub(before))
}

/// A stream: per message, (source, seq, payload); and its event count.
struct Stream {
    sources: usize,
    messages: Vec<(usize, u64, Vec<u8>)>,
    events: u64,
}

fn kimi() -> Stream {
    let mut messages = Vec::new();
    let mut events = 0;
    for w in 0..kvscope_corpus::KIMI_K3_WORKERS {
        for m in kvscope_corpus::kimi_k3_stream(w) {
            events += kvscope_wire::decode_batch(m.payload).map_or(0, |b| b.events.len() as u64);
            messages.push((w as usize, m.seq, m.payload.to_vec()));
        }
    }
    Stream { sources: kvscope_corpus::KIMI_K3_WORKERS as usize, messages, events }
}

/// 16 workers, 200 batches each of about 8 small events ([`kvscope_encode::synthetic::fleet`]).
fn fleet() -> Stream {
    let batches = kvscope_encode::synthetic::fleet(16, 200).unwrap();
    let events = batches.iter().map(|b| u64::from(b.events)).sum();
    Stream { sources: 16, messages: batches.into_iter().map(|b| (b.worker as usize, b.seq, b.payload)).collect(), events }
}

fn normalize(s: &Stream, block_size: u32) {
    let mut n = Normalizer::new(block_size, Policy::DYNAMO_1_6_1);
    let ids: Vec<_> = (0..s.sources).map(|i| n.source(&i.to_string(), 0)).collect();
    let mut out = Vec::new();
    for (src, seq, payload) in &s.messages {
        out.clear();
        let _ = n.push_payload(ids[*src], *seq, payload, &mut out);
    }
    black_box(out.len());
}

fn model(s: &Stream, block_size: u32, policies: &[Policy]) -> IndexModel {
    let mut m = IndexModel::new(IndexConfig::sides(block_size, policies));
    let ids: Vec<_> = (0..s.sources).map(|i| m.add_source(&format!("{i}:0"), &i.to_string(), 0)).collect();
    for (src, seq, payload) in &s.messages {
        let _ = m.push(ids[*src], *seq, payload, false);
    }
    m
}

fn events_per_second(c: &mut Criterion) {
    for (name, stream, bs) in [("kimi_k3", kimi(), 1536), ("fleet16", fleet(), 16)] {
        println!(
            "BENCH index_stream {{\"stream\":\"{name}\",\"sources\":{},\"messages\":{},\"events\":{}}}",
            stream.sources,
            stream.messages.len(),
            stream.events
        );
        let mut g = c.benchmark_group(format!("index/{name}"));
        g.throughput(Throughput::Elements(stream.events));
        g.bench_function("normalize", |b| b.iter(|| normalize(&stream, bs)));
        g.bench_function("index", |b| b.iter(|| black_box(model(&stream, bs, &[Policy::DYNAMO_1_6_1]))));
        g.bench_function("index_a_b", |b| b.iter(|| black_box(model(&stream, bs, &[Policy::LEGACY, Policy::FIXED]))));
        // A report (what check prints, what the page shows) walks every block once.
        let m = model(&stream, bs, &[Policy::DYNAMO_1_6_1]);
        g.bench_function("report", |b| b.iter(|| black_box(m.report())));
        g.finish();
    }
}

/// The `i`th of 1,000,000 device blocks in chains of 40: its hash and parent.
fn chained_block(i: u64) -> (u64, Option<u64>) {
    (splitmix(i), (!i.is_multiple_of(40)).then(|| splitmix(i - 1)))
}

const BLOCKS: u64 = 1_000_000;

/// 1,000,000 device blocks in chains of 40, in the model's index and in kvscope's tier tree.
fn bytes_per_block() {
    let (index, index_rss) = rss_of(|| {
        let mut index = DynamoIndex::new();
        for i in 0..BLOCKS {
            let (h, parent) = chained_block(i);
            let e = RouterEvent {
                worker_id: 1,
                storage_tier: PlaneTier::Device,
                residency_domain: None,
                event: KvCacheEvent {
                    event_id: i,
                    data: EventData::Stored(StoredData {
                        parent_hash: parent,
                        start_position: None,
                        blocks: vec![StoredBlock { block_hash: h, tokens_hash: splitmix(h) }],
                    }),
                    dp_rank: 0,
                },
            };
            index.apply(&e).unwrap();
        }
        index
    });
    let (tree, tree_rss) = rss_of(|| {
        let mut tree = kvscope_tiers::TierTree::new();
        for i in 0..BLOCKS {
            let (h, parent) = chained_block(i);
            tree.store(&[h], parent, i, 0.0, usize::MAX, kvscope_tiers::OrphanPolicy::Refuse);
        }
        tree
    });
    let held: usize = index.block_sets().values().map(|s| s.len()).sum();
    assert_eq!(held as u64, BLOCKS);
    let per = |bytes: usize| bytes as f64 / BLOCKS as f64;
    println!(
        "BENCH index {{\"blocks\":{BLOCKS},\"index_rss_bytes_per_block\":{:.1},\"tree_rss_bytes_per_block\":{:.1},\"ratio\":{:.2},\"index_estimate_bytes_per_block\":{:.1},\"tree_estimate_bytes_per_block\":{:.1}}}",
        per(index_rss),
        per(tree_rss),
        index_rss as f64 / tree_rss as f64,
        per(index.approx_bytes()),
        per(tree.approx_bytes()),
    );
    // The whole model on the synthetic fleet: truth and index per block the engines hold.
    let stream = fleet();
    let (m, model_rss) = rss_of(|| model(&stream, 16, &[Policy::DYNAMO_1_6_1]));
    let truth = m.truth().len().max(1);
    println!(
        "BENCH index_model {{\"truth_blocks\":{truth},\"model_rss_bytes_per_truth_block\":{:.1},\"model_estimate_bytes_per_truth_block\":{:.1}}}",
        model_rss as f64 / truth as f64,
        m.approx_bytes() as f64 / truth as f64
    );
}

fn main() {
    bytes_per_block();
    let mut c = Criterion::default().configure_from_args();
    events_per_second(&mut c);
    c.final_summary();
}
