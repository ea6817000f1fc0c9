//! `kvscope demo`: a simulated fleet of engines publishing real ZMQ on loopback, then served.
//!
//! Each simulated worker is an [`engine::Engine`] (a PUB socket with a per-rank seq from 0 and
//! a ROUTER replay socket) fed by a scenario's generator, in the byte layout of a chosen release
//! ([`payload`]). The server side is the same as `kvscope serve`: it subscribes to the engines
//! over TCP like to any other, so the demo exercises the real intake.
//!
//! Each worker also has Dynamo 1.6.1's relay ([`relay`]): the RouterEvents its
//! `KvEventPublisher` would publish, on an embedded ZMQ-plane publisher per worker (default) or
//! onto a NATS server, which the demo's server reads as event-plane sources like any other.
//!
//! Scenarios:
//! - `kimi-k3` (default, the incident of docs/rules.md): groups 0-2 `mamba` and group 3
//!   `mla_attention` at block_size 1536 on `GPU`; every 8 GPU blocks a `cpu` store of one
//!   12288-token block; evictions on both tiers. Block size 1536, so `legacy` shows the fatal cpu
//!   stores and `fixed` the offload skips.
//! - `sglang-tiers`: SGLang pages of 16 tokens on `GPU`, written through to `CPU_PINNED`, `DISK`
//!   and `EXTERNAL`, with evictions on every tier and an occasional clear.
//! - `lmcache-relay`: vLLM GPU blocks of 16 plus LMCache chunk stores relayed by vLLM's LMCache
//!   connector: medium `cpu`, block_size 256, signed chunk hashes.
//! - `fleet`: 64 workers (or `--workers N`, each with `--dp-ranks` engines) of vLLM GPU blocks
//!   of 16, most healthy and a few not ([`cast::Role`]): behind a CPU-offload connector at
//!   block size 256, restarting, losing frames replay cannot fill, on an older release.
//!
//! Engines tick independently, as real ones do: each its own rate (the fleet's, within
//! +/-20%) and phase.

pub mod cast;
pub mod engine;
pub mod payload;
pub mod relay;

use std::time::Duration;

use bytes::Bytes;
use payload::{Batch, Event, Hash, Release, Removed, Stored};

/// A named scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    KimiK3,
    SglangTiers,
    LmcacheRelay,
    Fleet,
}

impl Scenario {
    pub const ALL: [(&'static str, Scenario); 4] = [
        ("kimi-k3", Scenario::KimiK3),
        ("sglang-tiers", Scenario::SglangTiers),
        ("lmcache-relay", Scenario::LmcacheRelay),
        ("fleet", Scenario::Fleet),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::KimiK3 => "kimi-k3",
            Scenario::SglangTiers => "sglang-tiers",
            Scenario::LmcacheRelay => "lmcache-relay",
            Scenario::Fleet => "fleet",
        }
    }

    pub fn parse(s: &str) -> Result<Scenario, String> {
        Scenario::ALL.iter().find(|(n, _)| *n == s).map(|(_, sc)| *sc).ok_or_else(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown scenario {s:?}; pass one of: {}", names.join(", "))
        })
    }

    /// The main (Device) block size of the scenario, the demo's default `--block-size`.
    pub fn block_size(self) -> u32 {
        match self {
            Scenario::KimiK3 => 1536,
            Scenario::SglangTiers | Scenario::LmcacheRelay | Scenario::Fleet => 16,
        }
    }

    pub fn default_workers(self) -> u32 {
        match self {
            Scenario::KimiK3 => 3,
            Scenario::SglangTiers | Scenario::LmcacheRelay => 2,
            Scenario::Fleet => 64,
        }
    }

    pub fn default_release(self) -> Release {
        match self {
            Scenario::KimiK3 | Scenario::LmcacheRelay | Scenario::Fleet => Release::Vllm033,
            Scenario::SglangTiers => Release::Sglang0523,
        }
    }

    /// Releases whose layout can express the scenario.
    pub fn releases(self) -> &'static [Release] {
        match self {
            Scenario::KimiK3 | Scenario::LmcacheRelay | Scenario::Fleet => &[Release::Vllm033, Release::Vllm023],
            Scenario::SglangTiers => &[Release::Sglang0523],
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Scenario::KimiK3 => "Kimi-K3 incident: mamba groups 0-2 + mla group 3 at 1536 on GPU, cpu offload stores at 12288",
            Scenario::SglangTiers => "SGLang multi-tier: GPU, CPU_PINNED, DISK, EXTERNAL",
            Scenario::LmcacheRelay => "LMCache chunks relayed by vLLM: medium cpu, block_size 256, signed hashes",
            Scenario::Fleet => "a fleet of vLLM GPU workers at block size 16, most healthy, a few not",
        }
    }
}

/// xorshift64*: deterministic per worker, no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Token ids with a heavy head, like real text: half from the 1000 most common.
    pub fn tokens(&mut self, n: usize, vocab: u64) -> Vec<u32> {
        (0..n).map(|_| if self.below(2) == 0 { self.below(1000) as u32 } else { self.below(vocab) as u32 }).collect()
    }
}

/// An engine's cached GPU blocks by request, evicted the way vLLM's block pool does: a
/// finished request's blocks go back to the free queue tail first, so the least recently used
/// request loses its last block first and a parent outlives its children. (Evicting chain heads
/// would cut Dynamo's index below them: a fault the corpus's Kimi-K3 stream has, not a healthy
/// engine.)
#[derive(Debug, Default)]
struct CachedRequests {
    requests: std::collections::VecDeque<Vec<u64>>,
    blocks: usize,
}

impl CachedRequests {
    fn push(&mut self, hash: u64, new_request: bool) {
        if new_request || self.requests.is_empty() {
            self.requests.push_back(Vec::new());
        }
        if let Some(request) = self.requests.back_mut() {
            request.push(hash);
            self.blocks += 1;
        }
    }

    fn len(&self) -> usize {
        self.blocks
    }

    /// The last block of the oldest finished request; the request still being written keeps
    /// its blocks.
    fn evict(&mut self) -> Option<u64> {
        if self.requests.len() < 2 {
            return None;
        }
        let oldest = self.requests.front_mut()?;
        let hash = oldest.pop();
        if oldest.is_empty() {
            self.requests.pop_front();
        }
        self.blocks -= usize::from(hash.is_some());
        hash
    }
}

/// Produces one worker's batches.
#[derive(Debug)]
pub struct Generator {
    scenario: Scenario,
    /// `fleet`: whether this worker is behind a CPU-offload connector.
    offload: bool,
    rng: Rng,
    chain: Vec<(u64, Vec<u32>)>,
    request_len: usize,
    pending_offload: Option<Stored>,
    gpu_live: CachedRequests,
    offload_live: std::collections::VecDeque<u64>,
    tiers_live: [std::collections::VecDeque<u64>; 4],
    tick: u64,
}

const SGLANG_MEDIA: [&str; 4] = ["GPU", "CPU_PINNED", "DISK", "EXTERNAL"];

impl Generator {
    pub fn new(scenario: Scenario, worker: u32) -> Self {
        Generator::with_offload(scenario, worker, false)
    }

    /// A `fleet` worker behind a CPU-offload connector (or not).
    pub fn with_offload(scenario: Scenario, worker: u32, offload: bool) -> Self {
        Generator {
            scenario,
            offload,
            rng: Rng::new(u64::from(worker) + 1),
            chain: Vec::new(),
            request_len: 0,
            pending_offload: None,
            gpu_live: Default::default(),
            offload_live: Default::default(),
            tiers_live: Default::default(),
            tick: 0,
        }
    }

    /// The events of the next batch.
    pub fn next_batch(&mut self) -> Vec<Event> {
        self.tick += 1;
        match self.scenario {
            Scenario::KimiK3 => self.kimi(),
            Scenario::SglangTiers => self.sglang(),
            Scenario::LmcacheRelay => self.lmcache(true),
            Scenario::Fleet => self.lmcache(self.offload),
        }
    }

    /// Starts a new request chain when the current one is done; returns (hash, parent, tokens).
    fn next_block(&mut self, block: usize, vocab: u64, max_len: u64) -> (u64, Option<u64>, Vec<u32>) {
        if self.chain.len() >= self.request_len {
            self.chain.clear();
            self.request_len = 8 + self.rng.below(max_len) as usize;
        }
        let hash = self.rng.next_u64();
        let parent = self.chain.last().map(|(h, _)| *h);
        let tokens = self.rng.tokens(block, vocab);
        self.chain.push((hash, tokens.clone()));
        (hash, parent, tokens)
    }

    fn kimi(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        if let Some(store) = self.pending_offload.take() {
            events.push(Event::Stored(store));
        }
        let (hash, parent, tokens) = self.next_block(1536, 163_840, 24);
        for group in 0..4u32 {
            let store = Stored::new([Hash::U64(hash)], 1536)
                .parent(parent.map(Hash::U64))
                .tokens(tokens.iter().copied())
                .medium(Some("GPU"))
                .extra_keys_nil_per_block()
                .group_idx(Some(group))
                .kind(Some(if group < 3 { "mamba" } else { "mla_attention" }));
            events.push(store.into());
        }
        self.gpu_live.push(hash, parent.is_none());
        // Every 8 GPU blocks of a request, the offload connector stores one 8 x 1536 block on
        // the cpu tier, under the hash of the last GPU block it covers, in the next batch.
        if self.chain.len().is_multiple_of(8) {
            let covered = &self.chain[self.chain.len() - 8..];
            let token_ids: Vec<u32> = covered.iter().flat_map(|(_, t)| t.iter().copied()).collect();
            self.pending_offload = Some(Stored::new([Hash::U64(hash)], 12288).tokens(token_ids).medium(Some("cpu")).group_idx(Some(3)));
            self.offload_live.push_back(hash);
        }
        // The cache is full at 16 blocks: each new one evicts one (vLLM allocates from the free
        // queue's head).
        while self.gpu_live.len() > 16
            && let Some(old) = self.gpu_live.evict()
        {
            for group in 0..4u32 {
                events.push(Removed::new([Hash::U64(old)]).medium(Some("GPU")).group_idx(Some(group)).into());
            }
        }
        if self.tick.is_multiple_of(11)
            && self.offload_live.len() > 4
            && let Some(old) = self.offload_live.pop_front()
        {
            events.push(Removed::new([Hash::U64(old)]).medium(Some("cpu")).group_idx(Some(3)).into());
        }
        events
    }

    fn sglang(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let (hash, parent, tokens) = self.next_block(16, 152_064, 40);
        let signed = |h: u64| Hash::I64(h as i64);
        for (tier, medium) in SGLANG_MEDIA.iter().enumerate() {
            // GPU every page; write-through to host every 2nd, disk every 4th, external every 8th.
            if !self.tick.is_multiple_of(1 << tier) {
                continue;
            }
            let store = Stored::new([signed(hash)], 16)
                .parent(if tier == 0 { parent.map(signed) } else { None })
                .tokens(tokens.iter().copied())
                .medium(Some(medium));
            events.push(store.into());
            self.tiers_live[tier].push_back(hash);
        }
        for (tier, every) in [(0usize, 3u64), (1, 5), (2, 9), (3, 17)] {
            if self.tick.is_multiple_of(every)
                && self.tiers_live[tier].len() > 8
                && let Some(old) = self.tiers_live[tier].pop_front()
            {
                events.push(Removed::new([signed(old)]).medium(Some(SGLANG_MEDIA[tier])).into());
            }
        }
        if self.tick.is_multiple_of(2000) {
            events.push(Event::cleared());
            self.tiers_live = Default::default();
            self.chain.clear();
        }
        events
    }

    /// vLLM GPU blocks of 16, and with `chunks` LMCache's 256-token chunk stores on `cpu`.
    fn lmcache(&mut self, chunks: bool) -> Vec<Event> {
        let mut events = Vec::new();
        let (hash, parent, tokens) = self.next_block(16, 152_064, 48);
        let store = Stored::new([Hash::U64(hash)], 16)
            .parent(parent.map(Hash::U64))
            .tokens(tokens)
            .medium(Some("GPU"))
            .extra_keys_nil_per_block()
            .group_idx(Some(0))
            .kind(Some("full_attention"));
        events.push(store.into());
        self.gpu_live.push(hash, parent.is_none());
        // LMCache stores a 256-token chunk once 16 blocks of the request are in.
        if chunks && self.chain.len().is_multiple_of(16) {
            let chunk = self.rng.next_u64() as i64;
            let token_ids: Vec<u32> = self.chain[self.chain.len() - 16..].iter().flat_map(|(_, t)| t.iter().copied()).collect();
            let parent = self.offload_live.back().map(|h| Hash::I64(*h as i64)).filter(|_| self.chain.len() > 16);
            events.push(Stored::new([Hash::I64(chunk)], 256).parent(parent).tokens(token_ids).medium(Some("cpu")).into());
            self.offload_live.push_back(chunk as u64);
        }
        while self.gpu_live.len() > 32
            && let Some(old) = self.gpu_live.evict()
        {
            events.push(Removed::new([Hash::U64(old)]).medium(Some("GPU")).group_idx(Some(0)).into());
        }
        events
    }
}

/// What the demo fleet looks like.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub scenario: Scenario,
    pub release: Release,
    pub workers: u32,
    /// Engines per worker, one per data-parallel rank (`worker:rank`).
    pub dp_ranks: u32,
    /// Batches per second per engine, on average; 0 publishes as fast as possible.
    pub rate: f64,
    /// Stop after this many batches per engine (None: run until stopped).
    pub batches: Option<u64>,
    /// Where the workers' simulated Dynamo relays publish.
    pub plane: relay::DemoPlane,
    /// The relays' `kv_block_size`.
    pub block_size: u32,
}

/// One simulated engine's endpoints.
#[derive(Clone, Debug)]
pub struct EngineEndpoints {
    pub worker: u32,
    pub dp_rank: u32,
    pub endpoint: String,
    pub replay_endpoint: String,
}

/// A running fleet: its engines' endpoints and their publishing tasks.
#[derive(Debug)]
pub struct Fleet {
    pub engines: Vec<EngineEndpoints>,
    /// The event-plane URLs the relays publish on (one `zmq://` per engine, or the `nats://`).
    pub planes: Vec<String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    start: tokio::sync::watch::Sender<bool>,
}

/// How one engine ticks: its own period (the fleet's rate within +/-20%) and phase, so that
/// engines are not in lockstep. The rates are spread evenly (the golden-ratio sequence over
/// worker ids, shifted per rank), so that a fleet's rates average to `rate` and what a benchmark
/// offers is exactly workers x ranks x rate.
fn pacing(rate: f64, worker: u32, dp_rank: u32) -> Option<(Duration, Duration)> {
    (rate > 0.0).then(|| {
        let mut rng = Rng::new(0x7061_6365 ^ (u64::from(worker) << 16) ^ u64::from(dp_rank));
        let spread = ((f64::from(worker) + 0.5 + 0.37 * f64::from(dp_rank)) * 0.618_033_988_749_895).fract();
        let jitter = 0.8 + 0.4 * spread;
        let period = Duration::from_secs_f64(1.0 / (rate * jitter));
        let phase = period.mul_f64(rng.below(1_000) as f64 / 1_000.0);
        (period, phase)
    })
}

impl Fleet {
    /// Binds every engine on loopback; publishing waits for [`Fleet::start`].
    pub async fn bind(opts: &FleetOptions) -> Result<Fleet, String> {
        let (start, start_rx) = tokio::sync::watch::channel(false);
        let mut engines = Vec::new();
        let mut tasks = Vec::new();
        let mut planes = Vec::new();
        let nats = match &opts.plane {
            relay::DemoPlane::Nats(url) => {
                let client = tokio::time::timeout(crate::plane::nats::CONNECT_WAIT, async_nats::connect(url.as_str()))
                    .await
                    .map_err(|_| format!("--event-plane {url}: no NATS server answered within 5 s"))?
                    .map_err(|e| format!("--event-plane {url}: {e} (is nats-server up?)"))?;
                planes.push(url.clone());
                Some(client)
            }
            _ => None,
        };
        for worker in 0..opts.workers {
            let role = if opts.scenario == Scenario::Fleet { cast::Role::of(worker, opts.workers) } else { cast::Role::Healthy };
            let release = role.release(opts.release);
            for dp_rank in 0..opts.dp_ranks.max(1) {
                let mut engine = engine::Engine::bind("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", false, release.replay_has_topic()).await?;
                engines.push(EngineEndpoints {
                    worker,
                    dp_rank,
                    endpoint: engine.endpoint.clone(),
                    replay_endpoint: engine.replay_endpoint.clone(),
                });
                let mut relay = match (&opts.plane, &nats) {
                    (relay::DemoPlane::Embedded, _) => {
                        let (relay, url) = relay::Relay::bind_zmq(worker, dp_rank, opts.block_size).await?;
                        planes.push(url);
                        Some(relay)
                    }
                    (relay::DemoPlane::Nats(_), Some(client)) => Some(relay::Relay::nats(worker, dp_rank, opts.block_size, client.clone())),
                    _ => None,
                };
                let seed = worker * opts.dp_ranks.max(1) + dp_rank;
                let mut generator = Generator::with_offload(opts.scenario, seed, role == cast::Role::Offload);
                let scenario = opts.scenario;
                let pacing = pacing(opts.rate, worker, dp_rank);
                let rate = opts.rate;
                let batches = opts.batches;
                let mut start_rx = start_rx.clone();
                tasks.push(tokio::spawn(async move {
                    while !*start_rx.borrow() {
                        if start_rx.changed().await.is_err() {
                            return;
                        }
                    }
                    if let Some(r) = &mut relay {
                        r.wait_subscribed(Duration::from_secs(3)).await;
                    }
                    let topic = Bytes::from_static(b"kv-events");
                    let mut tick = match pacing {
                        Some((period, phase)) => {
                            tokio::time::sleep(phase).await;
                            let mut t = tokio::time::interval(period);
                            // The rate is an average: a tick that came late (a busy machine, the
                            // timer's 1 ms grain) is made up, not dropped.
                            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                            Some(t)
                        }
                        None => None,
                    };
                    let mut sent = 0u64;
                    loop {
                        if batches.is_some_and(|b| sent >= b) {
                            // Keep the engine (and its replay socket) up after the last batch.
                            std::future::pending::<()>().await;
                        }
                        match &mut tick {
                            Some(t) => {
                                t.tick().await;
                            }
                            None => tokio::task::yield_now().await,
                        }
                        if role.misbehaves_at(sent, rate) {
                            match role {
                                cast::Role::Restarts => {
                                    engine.restart();
                                    generator = Generator::with_offload(scenario, seed, false);
                                }
                                cast::Role::LosesFrames => {
                                    // The engine made these batches and the network lost them:
                                    // their blocks are cached, and the next stores chain below
                                    // blocks no reader saw.
                                    for _ in 0..cast::Role::LOST_FRAMES {
                                        generator.next_batch();
                                    }
                                    engine.lose(cast::Role::LOST_FRAMES);
                                }
                                _ => {}
                            }
                        }
                        let ts = crate::time::unix_nanos() as f64 / 1e9;
                        let dp = Some(dp_rank).filter(|_| release != Release::Sglang0523);
                        let batch = Batch { ts, events: generator.next_batch(), dp_rank: dp };
                        let payload = match payload::encode_batch(release, &batch) {
                            Ok(payload) => payload,
                            Err(e) => {
                                tracing::error!("demo: batch not published: {e}");
                                continue;
                            }
                        };
                        let seq = engine.next_seq();
                        let payload = Bytes::from(payload);
                        engine.publish(&topic, payload.clone()).await;
                        if let Some(r) = &mut relay {
                            r.relay(seq, &payload).await;
                        }
                        sent += 1;
                    }
                }));
            }
        }
        Ok(Fleet { engines, planes, tasks, start })
    }

    /// Starts publishing.
    pub fn start(&self) {
        let _ = self.start.send(true);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvscope_normalize::{Normalizer, Policy, VerdictLabel};

    fn run(scenario: Scenario, policy: Policy, batches: usize) -> kvscope_normalize::SourceCounters {
        let mut g = Generator::new(scenario, 0);
        let mut n = Normalizer::new(scenario.block_size(), policy);
        let id = n.source("0", 0);
        let mut out = Vec::new();
        for _ in 0..batches {
            let batch = Batch { ts: 1.0, events: g.next_batch(), dp_rank: Some(0) };
            for release in scenario.releases() {
                let payload = payload::encode_batch(*release, &batch).unwrap();
                kvscope_wire::decode_batch(&payload).expect("demo payloads decode");
            }
            let payload = payload::encode_batch(scenario.default_release(), &batch).unwrap();
            n.push_payload(id, 0, &payload, &mut out).unwrap();
        }
        n.counters(id).clone()
    }

    #[test]
    fn kimi_k3_is_fatal_under_legacy_and_skips_offload_under_fixed() {
        // The generator is deterministic: in 200 batches, 21 CPU-offload stores (one per 8 GPU
        // blocks) and one store per batch in each of the 3 mamba groups.
        let fixed = run(Scenario::KimiK3, Policy::FIXED, 200);
        assert_eq!(fixed.fatal_count, 0);
        assert_eq!(fixed.verdicts_by_label(VerdictLabel::OffloadBlockSizeMismatch), 21);
        assert_eq!(fixed.verdicts_by_label(VerdictLabel::NonMainAttentionKind), 3 * 200);
        // Legacy takes each of those offload stores for a Device store at the wrong size.
        let legacy = run(Scenario::KimiK3, Policy::LEGACY, 200);
        assert_eq!(legacy.fatal_count, 21);
    }

    #[test]
    fn lmcache_relay_is_fatal_under_legacy_only() {
        assert_eq!(run(Scenario::LmcacheRelay, Policy::FIXED, 300).fatal_count, 0);
        assert_eq!(run(Scenario::LmcacheRelay, Policy::LEGACY, 300).fatal_count, 17);
    }

    #[test]
    fn a_healthy_fleet_worker_is_clear_under_both_policies_and_an_offload_one_only_under_fixed() {
        assert_eq!(run(Scenario::Fleet, Policy::LEGACY, 300).fatal_count, 0);
        let offload = |policy| {
            let mut g = Generator::with_offload(Scenario::Fleet, 5, true);
            let mut n = Normalizer::new(16, policy);
            let id = n.source("5", 0);
            let mut out = Vec::new();
            for seq in 0..300 {
                let batch = Batch { ts: 1.0, events: g.next_batch(), dp_rank: Some(0) };
                n.push_payload(id, seq, &payload::encode_batch(Release::Vllm033, &batch).unwrap(), &mut out).unwrap();
            }
            n.counters(id).clone()
        };
        // The same 12 offload stores: fatal under legacy, skipped under fixed.
        assert_eq!(offload(Policy::LEGACY).fatal_count, 12);
        let fixed = offload(Policy::FIXED);
        assert_eq!(fixed.fatal_count, 0);
        assert_eq!(fixed.verdicts_by_label(VerdictLabel::OffloadBlockSizeMismatch), 12);
    }

    #[test]
    fn engines_tick_at_their_own_rate_and_phase() {
        let paces: Vec<_> = (0..64).map(|w| pacing(300.0, w, 0).unwrap()).collect();
        let periods: std::collections::BTreeSet<_> = paces.iter().map(|(p, _)| p.as_micros()).collect();
        assert!(periods.len() > 40, "{} distinct periods", periods.len());
        let mean_rate: f64 = paces.iter().map(|(p, _)| 1.0 / p.as_secs_f64()).sum::<f64>() / 64.0;
        assert!((297.0..303.0).contains(&mean_rate), "64 workers offer 300 batches/s each on average, not {mean_rate}");
        assert!(paces.iter().all(|(p, phase)| phase < p));
        let ranked: Vec<_> = (0..64).flat_map(|w| (0..8).map(move |r| pacing(20.0, w, r).unwrap())).collect();
        let mean_rate: f64 = ranked.iter().map(|(p, _)| 1.0 / p.as_secs_f64()).sum::<f64>() / 512.0;
        assert!((19.8..20.2).contains(&mean_rate), "512 ranked engines offer 20 batches/s each on average, not {mean_rate}");
        assert_eq!(pacing(0.0, 1, 0), None);
    }

    #[test]
    fn a_vllm_engine_evicts_the_oldest_request_tail_first_and_keeps_the_one_being_written() {
        let mut cached = CachedRequests::default();
        for (hash, new_request) in [(1, true), (2, false), (3, false), (4, true), (5, false)] {
            cached.push(hash, new_request);
        }
        let evicted: Vec<u64> = std::iter::from_fn(|| cached.evict()).collect();
        assert_eq!(evicted, [3, 2, 1], "a parent outlives its children; request 4 is still written");
        assert_eq!(cached.len(), 2);
    }

    /// Dynamo's index of a healthy fleet worker holds everything its engine caches: vLLM's
    /// eviction order never removes a block whose children are cached.
    #[test]
    fn a_healthy_fleet_worker_s_index_holds_every_block_its_engine_caches() {
        let mut g = Generator::new(Scenario::Fleet, 7);
        // Block hash -> parent, by their debug spelling (the encoder's Hash has no Hash impl).
        let key = |h: &Hash| format!("{h:?}");
        let mut live: std::collections::HashMap<String, Option<String>> = std::collections::HashMap::new();
        for _ in 0..2_000 {
            for event in g.next_batch() {
                match event {
                    Event::Stored(s) => {
                        let parent = s.parent.as_ref().map(key);
                        assert!(parent.as_ref().is_none_or(|p| live.contains_key(p)), "a store under an evicted parent: {s:?}");
                        for h in &s.hashes {
                            live.insert(key(h), parent.clone());
                        }
                    }
                    Event::Removed(r) => {
                        for h in r.hashes.iter().map(key) {
                            assert!(!live.values().any(|p| p.as_ref() == Some(&h)), "{h} evicted before its children");
                            live.remove(&h);
                        }
                    }
                    _ => {}
                }
            }
        }
        assert!((32..=32 + 56).contains(&live.len()), "{} blocks cached: the cache holds 32 and the request being written", live.len());
    }

    #[test]
    fn sglang_tiers_fill_every_tier() {
        let c = run(Scenario::SglangTiers, Policy::FIXED, 300);
        assert_eq!(c.fatal_count, 0);
        let applied: Vec<u64> = kvscope_normalize::StorageTier::ALL.iter().map(|t| c.blocks_applied_on(*t)).collect();
        // Device, HostPinned, Disk, External: each tier below holds fewer blocks than the one above.
        assert_eq!(applied, [398, 207, 105, 50]);
    }
}
