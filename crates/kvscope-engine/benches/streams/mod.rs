//! The recorded streams the engine benchmarks replay, natively (`engine.rs`, criterion) and in
//! Chromium (`tests/wasm_bench.rs`): one definition, so both time the same frames.

use kvscope_encode::router::{encode_envelope, relay_envelope};
use kvscope_protocol as proto;
use kvscope_router::{Predictor, RelayConfig};
use kvscope_wire::{EventSink, KvEvent};

/// A recorded stream: per frame (source, seq, payload), and the same frames as the server
/// sends them.
pub struct Stream {
    pub name: &'static str,
    pub workers: u32,
    pub block_size: u32,
    pub frames: Vec<(u32, u64, Vec<u8>)>,
    pub events: u64,
}

impl Stream {
    pub fn bytes(&self) -> u64 {
        self.frames.iter().map(|f| f.2.len() as u64).sum()
    }

    pub fn hello(&self, event_plane: bool) -> Vec<u8> {
        let mut sources: Vec<proto::SourceInfo> = (0..self.workers)
            .map(|i| proto::SourceInfo::engine(i, &i.to_string(), 0, &format!("tcp://127.0.0.1:{}", 5557 + i), None))
            .collect();
        if event_plane {
            sources.push(proto::SourceInfo::event_plane(self.workers, "nats://127.0.0.1:4222", Some("namespace.>".into())));
        }
        proto::encode(&proto::Message::Hello(proto::Hello {
            protocol_version: proto::PROTOCOL_VERSION,
            server_version: "bench".into(),
            mode: proto::ServerMode::Demo,
            mode_detail: self.name.into(),
            sources,
            defaults: proto::Defaults {
                block_size: self.block_size,
                policy_a: "legacy".into(),
                policy_b: "fixed".into(),
                relay_policy: "dynamo-1.6.1".into(),
                index_max_nodes: None,
            },
            history_bytes: 1 << 20,
            client_queue_bytes: 1 << 20,
            started_unix_nanos: 0,
            discovery: Vec::new(),
        }))
    }

    /// The frames as WebSocket messages, 10 ms apart per round of workers; with `event_plane`,
    /// each followed by what its worker's Dynamo 1.6.1 relay publishes for it on the plane
    /// source [`Stream::hello`] lists, as `kvscope demo` runs by default, so that the router
    /// side reconciles what arrives rather than waiting for it.
    pub fn messages(&self, event_plane: bool) -> Vec<Vec<u8>> {
        let mut relays: Vec<Predictor> =
            (0..self.workers).map(|w| Predictor::new(RelayConfig::dynamo_1_6_1(u64::from(w), 0, self.block_size))).collect();
        let mut sequences = vec![0u64; self.workers as usize];
        let mut out = Vec::with_capacity(self.frames.len() * (1 + usize::from(event_plane)));
        for (i, (source, seq, payload)) in self.frames.iter().enumerate() {
            let at = 1_000_000_000 + (i as u64 / u64::from(self.workers)) * 10_000_000;
            out.push(proto::encode(&proto::Message::Frame(proto::Frame {
                source: *source,
                seq: *seq,
                recv_time_nanos: at,
                replayed: false,
                topic: b"kv-events".to_vec(),
                payload: payload.clone(),
            })));
            if !event_plane {
                continue;
            }
            let w = *source as usize;
            let predictions = relays[w].predict(*seq, payload).expect("the relay reads its engine's batch");
            let sequence = sequences[w];
            let Some(envelope) = relay_envelope(1_000 + u64::from(*source), sequence, at / 1_000_000, &predictions).expect("an envelope")
            else {
                continue;
            };
            sequences[w] += 1;
            out.push(proto::encode(&proto::Message::Frame(proto::Frame {
                source: self.workers,
                seq: 0,
                recv_time_nanos: at + 1,
                replayed: false,
                topic: PLANE_SUBJECT.to_vec(),
                payload: encode_envelope(&envelope).expect("the envelope's bytes"),
            })));
        }
        out
    }
}

/// The subject the relays publish on (Dynamo's form: namespace, component, endpoint).
const PLANE_SUBJECT: &[u8] = b"namespace.bench.component.backend.endpoint.generate.kv-events";

/// Kimi-K3's three workers, interleaved batch by batch.
pub fn kimi() -> Stream {
    let streams: Vec<_> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(kvscope_corpus::kimi_k3_stream).collect();
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut frames = Vec::new();
    for i in 0..longest {
        for (w, s) in streams.iter().enumerate() {
            if let Some(m) = s.get(i) {
                frames.push((w as u32, m.seq, m.payload.to_vec()));
            }
        }
    }
    let events = frames.iter().map(|f| kvscope_wire::decode_batch(&f.2).map_or(0, |b| b.events.len() as u64)).sum();
    Stream { name: "kimi_k3", workers: kvscope_corpus::KIMI_K3_WORKERS, block_size: 1536, frames, events }
}

/// 16 synthetic workers, their batches interleaved round by round.
pub fn fleet16() -> Stream {
    let batches = kvscope_encode::synthetic::fleet(16, 200).unwrap();
    let events = batches.iter().map(|b| u64::from(b.events)).sum();
    let mut frames: Vec<(u32, u64, Vec<u8>)> = batches.into_iter().map(|b| (b.worker, b.seq, b.payload)).collect();
    frames.sort_by_key(|f| (f.1, f.0));
    Stream { name: "fleet16", workers: 16, block_size: 16, frames, events }
}

pub struct Count(pub u64);

impl EventSink for Count {
    fn event(&mut self, _: u32, _: &KvEvent) {
        self.0 += 1;
    }
}
