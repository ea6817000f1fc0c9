//! Tier-tree throughput and memory: applying stores and removes to a [`Forest`] for 1 and 64
//! workers, up to a million live blocks per worker, against a plain
//! `std::collections::HashMap<u64, u64>` doing the same inserts and removes of the same hashes.
//!
//! ```text
//! cargo bench -p kvscope-tiers --bench trees               # everything: ~3 min, ~8 GB peak
//! cargo bench -p kvscope-tiers --bench trees -- tiers_1w   # the criterion part only
//! cargo bench -p kvscope-tiers --bench trees -- oneshot    # the one-shot part only
//! ```
//!
//! The stream, per worker: stores of 1, 2, 3, 4 blocks in turn (16-token blocks, medium `GPU`),
//! each chained to the previous store's last block, a new root every 16 stores (a request's
//! prefix, 40 blocks); removes take the oldest live blocks first, in the same 1-4 sizes. Block
//! hashes are splitmix64 of (worker, index), spread like vLLM's. Events come in batches of 32
//! (80 blocks). Verdicts come from kvscope's `Normalizer` (policy `fixed`) once per worker and
//! batch shape; each batch is then refilled in place with new hashes, so the timed loop is
//! `Forest::apply_batch` and nothing else. The baselines walk the same batches and do
//! `insert(hash, parent)` per stored block and `remove(hash)` per removed block.
//!
//! Two phases: *fill* (from empty to N live blocks per worker, stores only) and *churn* (at N
//! live, a batch of stores then a batch of removes of as many blocks, so N stays constant). One
//! operation is one block inserted or removed.
//!
//! - One worker (criterion, groups `tiers_1w_{fill,churn}_{10k,1M}`): fill to, and churn at,
//!   10 k and 1 M live blocks.
//! - One-shot runs (`BENCH tiers {json}` lines) in fresh child processes, 1 and 64 workers at
//!   1 M live blocks per worker (64 M blocks, ~6 GB for the forest): `forest` and `std-hashmap`
//!   share a process, `blockhasher-hashmap` runs alone. Each implementation is filled once (timed,
//!   with its own resident-set delta from `/proc/self/statm`, its `approx_bytes()`, and for the
//!   forest one `summary(8)` walk of a 1 M-block tier); then 7 rounds of churn, one slice of ~2 M
//!   operations per implementation per round in a rotating order, so that a change in the
//!   machine's load hits both alike; the forest's line carries the median over rounds of its
//!   paired speed ratio against std's map. Criterion's repetition is not used there: one 64-worker
//!   fill takes ~30 s and ~6 GB (mostly first-touch page faults, which a repetition would not see
//!   again), so it is timed once.
//!
//! Three implementations: `forest` (kvscope), `std-hashmap` (the baseline: `HashMap<u64, u64>`
//! with std's default SipHash), and `blockhasher-hashmap` (the same map with kvscope's
//! `BuildBlockHasher`, to separate the hasher's share from the tree's bookkeeping).
//!
//! Under `cargo test --benches` the one-shots run in-process at 2 workers x 8 000 blocks, as a
//! check that the code works.

// Benchmark code: a failed expect aborts the measurement, with its location.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use kvscope_normalize::{Apply, Normalizer, Policy, StorageTier, Verdict, VerdictKind};
use kvscope_tiers::{BuildBlockHasher, Forest, ForestConfig};
use kvscope_wire::{BatchLayout, BlockHash, BlockRemoved, BlockStored, EventBatch, KvEvent, TokenIds};

/// Events per batch; sizes cycle through [`SIZES`], so a batch holds [`BLOCKS_PER_BATCH`] blocks.
const EVENTS_PER_BATCH: usize = 32;
const SIZES: [usize; 4] = [1, 2, 3, 4];
const BLOCKS_PER_BATCH: u64 = 80;
/// Stores per chain: a new root every 16 stores (40 blocks).
const STORES_PER_CHAIN: u64 = 16;
const BLOCK_SIZE: u32 = 16;
/// Env var naming a one-shot run for a child process: `IMPL:WORKERS:LIVE_PER_WORKER`.
const ONESHOT_ENV: &str = "KVSCOPE_TREES_ONESHOT";

/// A vLLM-like block hash: splitmix64 of (worker, index).
fn block_hash(worker: u32, index: u64) -> u64 {
    let mut z = ((u64::from(worker) << 40) | index).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One worker's stream: a store batch and a remove batch refilled in place, with their verdicts.
struct WorkerStream {
    worker: u32,
    store: EventBatch,
    remove: EventBatch,
    store_verdicts: Vec<Verdict>,
    remove_verdicts: Vec<Verdict>,
    /// Index of the next block to store.
    next_insert: u64,
    /// Index of the oldest live block (the next to remove).
    next_remove: u64,
    /// Stores so far (a new chain every [`STORES_PER_CHAIN`]).
    stores: u64,
}

impl WorkerStream {
    fn new(n: &mut Normalizer, worker: u32) -> WorkerStream {
        let source = n.source(&format!("w{worker}"), 0);
        let batch = |events| EventBatch { ts: 1.7e9, events, dp_rank: Some(0), layout: BatchLayout::Array3 };
        let store = batch(
            (0..EVENTS_PER_BATCH)
                .map(|e| {
                    let k = SIZES[e % SIZES.len()];
                    KvEvent::BlockStored(Box::new(BlockStored {
                        block_hashes: vec![BlockHash(0); k].into(),
                        token_ids: TokenIds { count: k as u32 * BLOCK_SIZE, ..Default::default() },
                        block_size: Some(BLOCK_SIZE),
                        medium: Some("GPU".into()),
                        ..Default::default()
                    }))
                })
                .collect(),
        );
        let remove = batch(
            (0..EVENTS_PER_BATCH)
                .map(|e| {
                    KvEvent::BlockRemoved(Box::new(BlockRemoved {
                        block_hashes: vec![BlockHash(0); SIZES[e % SIZES.len()]].into(),
                        medium: Some("GPU".into()),
                        ..Default::default()
                    }))
                })
                .collect(),
        );
        let (mut store_verdicts, mut remove_verdicts) = (Vec::new(), Vec::new());
        n.normalize_batch(source, 0, &store, &mut store_verdicts);
        n.normalize_batch(source, 1, &remove, &mut remove_verdicts);
        for (i, (s, r)) in store_verdicts.iter().zip(&remove_verdicts).enumerate() {
            let k = SIZES[i % SIZES.len()] as u32;
            assert_eq!(s.kind, VerdictKind::Apply(Apply::Store { blocks: k }), "store verdict {i}: {}", s.code());
            assert_eq!(r.kind, VerdictKind::Apply(Apply::Remove { blocks: k }), "remove verdict {i}: {}", r.code());
            assert_eq!((s.tier, r.tier), (Some(StorageTier::Device), Some(StorageTier::Device)));
        }
        WorkerStream { worker, store, remove, store_verdicts, remove_verdicts, next_insert: 0, next_remove: 0, stores: 0 }
    }

    fn live(&self) -> u64 {
        self.next_insert - self.next_remove
    }

    /// Refills the store batch with the next 80 blocks.
    fn next_stores(&mut self) {
        for event in &mut self.store.events {
            let KvEvent::BlockStored(s) = event else { unreachable!() };
            s.parent_block_hash = (!self.stores.is_multiple_of(STORES_PER_CHAIN) && self.next_insert > 0)
                .then(|| BlockHash(block_hash(self.worker, self.next_insert - 1)));
            for h in &mut s.block_hashes {
                *h = BlockHash(block_hash(self.worker, self.next_insert));
                self.next_insert += 1;
            }
            self.stores += 1;
        }
    }

    /// Refills the remove batch with the 80 oldest live blocks.
    fn next_removes(&mut self) {
        for event in &mut self.remove.events {
            let KvEvent::BlockRemoved(r) = event else { unreachable!() };
            for h in &mut r.block_hashes {
                *h = BlockHash(block_hash(self.worker, self.next_remove));
                self.next_remove += 1;
            }
        }
    }
}

/// Something the streams' batches are applied to.
trait Sink {
    fn store(&mut self, w: &WorkerStream);
    fn remove(&mut self, w: &WorkerStream);
    /// Heap bytes by the structure's own estimate, if it has one.
    fn approx_bytes(&self) -> Option<usize>;
    fn live(&self) -> usize;
    /// The forest, for its tree walks; `None` for the maps.
    fn forest(&self) -> Option<&Forest> {
        None
    }
}

impl Sink for Forest {
    fn store(&mut self, w: &WorkerStream) {
        self.apply_batch(&w.store, &w.store_verdicts);
    }
    fn remove(&mut self, w: &WorkerStream) {
        self.apply_batch(&w.remove, &w.remove_verdicts);
    }
    fn approx_bytes(&self) -> Option<usize> {
        Some(Forest::approx_bytes(self))
    }
    fn live(&self) -> usize {
        self.total_blocks()
    }
    fn forest(&self) -> Option<&Forest> {
        Some(self)
    }
}

/// One map per worker, like one tree per worker.
struct Maps<S>(Vec<HashMap<u64, u64, S>>);

impl<S: BuildHasher + Default> Maps<S> {
    fn new(workers: usize) -> Self {
        Maps((0..workers).map(|_| HashMap::default()).collect())
    }
}

impl<S: BuildHasher> Sink for Maps<S> {
    fn store(&mut self, w: &WorkerStream) {
        let map = &mut self.0[w.worker as usize];
        for event in &w.store.events {
            if let KvEvent::BlockStored(s) = event {
                let mut parent = s.parent_block_hash.map_or(0, |h| h.0);
                for h in &s.block_hashes {
                    map.insert(h.0, parent);
                    parent = h.0;
                }
            }
        }
    }
    fn remove(&mut self, w: &WorkerStream) {
        let map = &mut self.0[w.worker as usize];
        for event in &w.remove.events {
            if let KvEvent::BlockRemoved(r) = event {
                for h in &r.block_hashes {
                    map.remove(&h.0);
                }
            }
        }
    }
    fn approx_bytes(&self) -> Option<usize> {
        None
    }
    fn live(&self) -> usize {
        self.0.iter().map(HashMap::len).sum()
    }
}

fn streams(workers: u32) -> Vec<WorkerStream> {
    let mut n = Normalizer::new(BLOCK_SIZE, Policy::FIXED);
    (0..workers).map(|w| WorkerStream::new(&mut n, w)).collect()
}

/// Stores round-robin until every worker holds `live` blocks; returns block operations.
fn fill<S: Sink + ?Sized>(sink: &mut S, streams: &mut [WorkerStream], live: u64) -> u64 {
    assert_eq!(live % BLOCKS_PER_BATCH, 0, "live blocks must be a multiple of {BLOCKS_PER_BATCH}");
    let mut ops = 0;
    while streams.iter().any(|w| w.live() < live) {
        for w in streams.iter_mut().filter(|w| w.live() < live) {
            w.next_stores();
            sink.store(w);
            ops += BLOCKS_PER_BATCH;
        }
    }
    ops
}

/// One churn round on one worker: 80 blocks stored, the 80 oldest removed; returns operations.
fn churn_round<S: Sink + ?Sized>(sink: &mut S, w: &mut WorkerStream) -> u64 {
    w.next_stores();
    sink.store(w);
    w.next_removes();
    sink.remove(w);
    2 * BLOCKS_PER_BATCH
}

/// Resident set size of this process, from `/proc/self/statm` (pages of 4 KiB on x86_64 Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm (Linux only)");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("statm's second field");
    pages * 4096
}

const IMPLS: [&str; 3] = ["forest", "std-hashmap", "blockhasher-hashmap"];

/// Criterion, one worker: fill to and churn at 10 k and 1 M live blocks.
fn bench_one_worker(c: &mut Criterion) {
    for live in [10_000u64, 1_000_000] {
        let label = if live >= 1_000_000 { format!("{}M", live / 1_000_000) } else { format!("{}k", live / 1_000) };
        let mut group = c.benchmark_group(format!("tiers_1w_fill_{label}"));
        group.throughput(Throughput::Elements(live));
        if live >= 1_000_000 {
            // One fill takes ~0.1-0.3 s: ten samples of a few fills each.
            group.sampling_mode(SamplingMode::Flat).sample_size(10).warm_up_time(Duration::from_secs(1));
            group.measurement_time(Duration::from_secs(4));
        }
        for imp in IMPLS {
            group.bench_function(BenchmarkId::from_parameter(imp), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut s = streams(1);
                        total += match imp {
                            "forest" => timed_fill(&mut Forest::new(ForestConfig::unbounded()), &mut s, live),
                            "std-hashmap" => timed_fill(&mut Maps::<std::hash::RandomState>::new(1), &mut s, live),
                            _ => timed_fill(&mut Maps::<BuildBlockHasher>::new(1), &mut s, live),
                        };
                    }
                    total
                })
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("tiers_1w_churn_{label}"));
        group.throughput(Throughput::Elements(2 * BLOCKS_PER_BATCH));
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30);
        for imp in IMPLS {
            match imp {
                "forest" => churn_bench(&mut group, imp, Forest::new(ForestConfig::unbounded()), live),
                "std-hashmap" => churn_bench(&mut group, imp, Maps::<std::hash::RandomState>::new(1), live),
                _ => churn_bench(&mut group, imp, Maps::<BuildBlockHasher>::new(1), live),
            }
        }
        group.finish();
    }
}

/// Fills `sink` and returns the time taken; the structure is dropped outside the timing.
fn timed_fill(sink: &mut impl Sink, s: &mut [WorkerStream], live: u64) -> Duration {
    let t = Instant::now();
    black_box(fill(sink, s, live));
    let d = t.elapsed();
    assert_eq!(sink.live() as u64, live);
    d
}

fn churn_bench<S: Sink>(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, imp: &str, mut sink: S, live: u64) {
    let mut s = streams(1);
    fill(&mut sink, &mut s, live);
    group.bench_function(BenchmarkId::from_parameter(imp), |b| b.iter(|| churn_round(&mut sink, &mut s[0])));
    assert_eq!(sink.live() as u64, live, "churn keeps the live count");
}

/// One implementation's state in a one-shot run.
struct Contender {
    imp: &'static str,
    sink: Box<dyn Sink>,
    streams: Vec<WorkerStream>,
    fill_ops: u64,
    fill_s: f64,
    rss_fill: u64,
    approx_fill: Option<usize>,
    summary_ms: Option<f64>,
    slices_s: Vec<f64>,
}

fn new_sink(imp: &str, workers: u32) -> Box<dyn Sink> {
    match imp {
        "forest" => Box::new(Forest::new(ForestConfig::unbounded())),
        "std-hashmap" => Box::new(Maps::<std::hash::RandomState>::new(workers as usize)),
        "blockhasher-hashmap" => Box::new(Maps::<BuildBlockHasher>::new(workers as usize)),
        other => panic!("{ONESHOT_ENV}: unknown implementation {other:?}; expected one of {IMPLS:?}"),
    }
}

/// One fill per implementation (one after the other, each with its own RSS delta), then churn
/// slices of ~2 M operations, interleaved across the implementations in a rotating order so that
/// a change in the machine's load hits all of them alike; prints one `BENCH tiers` line each,
/// with, for the first implementation, the median over rounds of the paired speed ratio against
/// the second.
fn oneshot(imps: &[&'static str], workers: u32, live: u64, rounds: usize) {
    let mut cs: Vec<Contender> = Vec::new();
    for &imp in imps {
        let mut sink = new_sink(imp, workers);
        let mut streams = streams(workers);
        let rss0 = rss_bytes();
        let t = Instant::now();
        let fill_ops = fill(&mut *sink, &mut streams, live);
        let fill_s = t.elapsed().as_secs_f64();
        let rss_fill = rss_bytes().saturating_sub(rss0);
        assert_eq!(sink.live() as u64, live * u64::from(workers));
        let approx_fill = sink.approx_bytes();
        // The view's walk of one 1 M-block tier (forest only).
        let summary_ms = sink.forest().map(|f| {
            let tree = f.tree(streams[0].store_verdicts[0].source, StorageTier::Device).expect("worker 0's device tree");
            let t = Instant::now();
            let summary = black_box(tree.summary(8));
            let ms = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(summary.blocks as u64, live);
            assert_eq!(summary.roots as u64, live / 40, "one root per 16 stores (40 blocks)");
            ms
        });
        cs.push(Contender { imp, sink, streams, fill_ops, fill_s, rss_fill, approx_fill, summary_ms, slices_s: Vec::new() });
    }

    // Churn: rounds of one ~2 M-operation slice per implementation, round-robin over the workers.
    let rounds_per_worker = (12_800 / workers as usize).max(1);
    let slice_ops = rounds_per_worker as u64 * u64::from(workers) * 2 * BLOCKS_PER_BATCH;
    let rss_before_churn = rss_bytes();
    let n = cs.len();
    for round in 0..rounds {
        for k in 0..n {
            let c = &mut cs[(round + k) % n];
            let t = Instant::now();
            for _ in 0..rounds_per_worker {
                for w in c.streams.iter_mut() {
                    churn_round(&mut *c.sink, w);
                }
            }
            c.slices_s.push(t.elapsed().as_secs_f64());
        }
    }
    let churn_rss_growth = rss_bytes().saturating_sub(rss_before_churn);
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // Paired ratio, first implementation against the second: ops/s ratio per round.
    let paired = (cs.len() >= 2).then(|| {
        let r: Vec<f64> = cs[1].slices_s.iter().zip(&cs[0].slices_s).map(|(b, a)| b / a).collect();
        median(&r)
    });
    for (i, c) in cs.iter().enumerate() {
        assert_eq!(c.sink.live() as u64, live * u64::from(workers), "churn keeps the live count");
        let line = serde_json::json!({
            "kind": "oneshot", "impl": c.imp, "workers": workers, "live_per_worker": live,
            "live_total": live * u64::from(workers), "process_impls": imps,
            "fill_ops": c.fill_ops, "fill_s": c.fill_s,
            "churn_ops_per_slice": slice_ops, "churn_slices_s": c.slices_s, "churn_s_median": median(&c.slices_s),
            "churn_paired_ratio_vs": if i == 0 { imps.get(1).copied() } else { None },
            "churn_paired_ratio_median": if i == 0 { paired } else { None },
            "rss_delta_after_fill_bytes": c.rss_fill, "churn_rss_growth_bytes_all_impls": churn_rss_growth,
            "approx_bytes_after_fill": c.approx_fill, "approx_bytes_after_churn": c.sink.approx_bytes(),
            "summary_ms": c.summary_ms,
        });
        println!("BENCH tiers {line}");
    }
}

fn main() {
    if let Ok(spec) = std::env::var(ONESHOT_ENV) {
        let parts: Vec<&str> = spec.split(':').collect();
        let [imps, workers, live] = parts[..] else {
            panic!("{ONESHOT_ENV}={spec:?}: expected IMPL[,IMPL]:WORKERS:LIVE_PER_WORKER, e.g. forest,std-hashmap:64:1000000")
        };
        let parse =
            |what: &str, s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("{ONESHOT_ENV}={spec:?}: {what} {s:?} is not a number")) };
        let imps: Vec<&'static str> = imps
            .split(',')
            .map(|i| {
                IMPLS
                    .iter()
                    .copied()
                    .find(|k| *k == i)
                    .unwrap_or_else(|| panic!("{ONESHOT_ENV}={spec:?}: unknown implementation {i:?}; expected one of {IMPLS:?}"))
            })
            .collect();
        oneshot(&imps, parse("workers", workers) as u32, parse("live blocks", live), 7);
        return;
    }

    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let listing = args.iter().any(|a| a == "--list");
    // A positional argument is a criterion filter: then only the criterion part runs, unless the
    // filter is `oneshot`.
    let filter = args.iter().find(|a| !a.starts_with('-'));

    let mut c = Criterion::default().configure_from_args();
    if filter.map(String::as_str) != Some("oneshot") {
        bench_one_worker(&mut c);
        c.final_summary();
    }
    if listing {
        return;
    }
    if !bench_mode {
        // `cargo test --benches`: a small in-process check of the one-shot path.
        oneshot(&["forest", "std-hashmap"], 2, 8_000, 2);
        oneshot(&["blockhasher-hashmap"], 2, 8_000, 2);
        return;
    }
    if filter.is_some_and(|f| f != "oneshot") {
        return;
    }
    let exe = std::env::current_exe().expect("the bench binary's own path");
    // The forest and its baseline share a process (their churn slices interleave); the third map
    // runs alone, which keeps the 64-worker peak near 8 GB rather than 11.
    for workers in [1u32, 64] {
        for imps in ["forest,std-hashmap", "blockhasher-hashmap"] {
            let spec = format!("{imps}:{workers}:1000000");
            eprintln!("one-shot {spec} (a child process) ...");
            let out = Command::new(&exe).env(ONESHOT_ENV, &spec).output().expect("run the bench binary as a child");
            print!("{}", String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
                panic!("one-shot {spec} failed: {}", out.status);
            }
        }
    }
}
