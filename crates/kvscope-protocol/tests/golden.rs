//! Golden bytes: every message kind and the capture format, compared with committed files.
//!
//! The dashboard and recorded captures depend on these exact bytes. If a test here fails, the
//! wire format changed: bump `PROTOCOL_VERSION` in `src/lib.rs`, then re-bless with
//! `KVSCOPE_BLESS=1 cargo test -p kvscope-protocol --test golden` and commit the new files.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use kvscope_protocol as proto;
use proto::capture::{self, CaptureHeader, CaptureReader, CaptureRecord};
use serde_bytes::ByteBuf;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn blessing() -> bool {
    std::env::var_os("KVSCOPE_BLESS").is_some_and(|v| v == "1")
}

fn hex(bytes: &[u8]) -> String {
    bytes.chunks(32).map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>()).collect::<Vec<_>>().join("\n")
}

/// Compares `bytes` with `tests/golden/NAME.hex` (hex, 32 bytes a line, so diffs are readable).
fn check(name: &str, bytes: &[u8]) {
    let path = golden_dir().join(format!("{name}.hex"));
    let text = hex(bytes) + "\n";
    if blessing() {
        std::fs::write(&path, &text).unwrap();
        std::fs::write(golden_dir().join("VERSION"), format!("{}\n", proto::PROTOCOL_VERSION)).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; bless with KVSCOPE_BLESS=1 cargo test -p kvscope-protocol --test golden", path.display()));
    let blessed_version: u16 = std::fs::read_to_string(golden_dir().join("VERSION")).unwrap().trim().parse().unwrap();
    if committed != text {
        if blessed_version == proto::PROTOCOL_VERSION {
            panic!(
                "golden bytes of {name} changed (tests/golden/{name}.hex) but PROTOCOL_VERSION is still {}: \
                 bump the version and re-bless (KVSCOPE_BLESS=1 cargo test -p kvscope-protocol --test golden)\n\
                 committed:\n{committed}\nnow:\n{text}",
                proto::PROTOCOL_VERSION
            );
        }
        panic!(
            "golden bytes of {name} were blessed for version {blessed_version}, this is version {}: \
             re-bless (KVSCOPE_BLESS=1 cargo test -p kvscope-protocol --test golden)",
            proto::PROTOCOL_VERSION
        );
    }
}

fn source(index: u32, replay: bool) -> proto::SourceInfo {
    proto::SourceInfo {
        index,
        key: format!("{index}:0"),
        worker_id: index.to_string(),
        dp_rank: 0,
        endpoint: format!("tcp://127.0.0.1:{}", 5557 + index),
        replay_endpoint: replay.then(|| format!("tcp://127.0.0.1:{}", 5657 + index)),
        kind: proto::SourceKind::Engine,
        event_plane: None,
        block_size: None,
    }
}

fn plane_source(index: u32) -> proto::SourceInfo {
    let url = "nats://127.0.0.1:4222".to_owned();
    proto::SourceInfo {
        index,
        key: format!("plane:{url}"),
        worker_id: String::new(),
        dp_rank: 0,
        endpoint: url.clone(),
        replay_endpoint: None,
        kind: proto::SourceKind::EventPlane,
        event_plane: Some(proto::EventPlaneInfo { url, subject: Some("namespace.>".into()) }),
        block_size: None,
    }
}

fn samples() -> Vec<(&'static str, proto::Message)> {
    use proto::*;
    vec![
        (
            "hello",
            Message::Hello(Hello {
                protocol_version: PROTOCOL_VERSION,
                server_version: "0.1.0".into(),
                mode: ServerMode::Demo,
                mode_detail: "scenario kimi-k3 (vLLM 0.33.0)".into(),
                sources: vec![source(0, true), source(1, false), plane_source(2)],
                defaults: Defaults {
                    block_size: 1536,
                    policy_a: "legacy".into(),
                    policy_b: "fixed".into(),
                    relay_policy: "dynamo-1.6.1".into(),
                    index_max_nodes: Some(2_000_000),
                },
                history_bytes: 64 << 20,
                client_queue_bytes: 16 << 20,
                started_unix_nanos: 1_700_000_000_000_000_000,
                discovery: vec!["etcd://10.0.0.1:2379".into()],
            }),
        ),
        ("source_changed", Message::SourceChanged(SourceInfo::discovered_relay(3, "7", 1, "zmq://10.0.0.7:5600"))),
        (
            "discovery_status",
            Message::DiscoveryStatus(DiscoveryStatus {
                stores: vec![StoreStatus {
                    url: "etcd://10.0.0.1:2379".into(),
                    error: Some("cannot connect to 10.0.0.1:2379: Connection refused (next try in 4.0 s; backing off to 10 s)".into()),
                    failures: 3,
                    bad_records: 0,
                }],
                sources: 12,
                left: 1,
            }),
        ),
        (
            "recording_status",
            Message::RecordingStatus(RecordingStatus {
                path: "incident.kvcap".into(),
                state: RecordingState::Failed,
                error: Some("incident.kvcap: No space left on device (os error 28); the relay goes on without the capture".into()),
                records: 1200,
                bytes: 5_242_880,
                dropped_records: 17,
            }),
        ),
        (
            "frame",
            Message::Frame(Frame {
                source: 1,
                seq: 4711,
                recv_time_nanos: 1_700_000_000_123_456_789,
                replayed: true,
                topic: b"kv-events".to_vec(),
                payload: vec![0x93, 0xcb, 0x41, 0xd9, 0, 0, 0, 0, 0, 0, 0x90, 0xc0],
            }),
        ),
        (
            "frame_error",
            Message::FrameError(FrameError {
                source: 0,
                kind: "seq_length".into(),
                decode_kind: None,
                text: "0:0: expected an 8-byte big-endian sequence number in frame 1, got 2 bytes".into(),
                seq: None,
                recv_time_nanos: 5,
                replayed: false,
                frames: vec![ByteBuf::from(b"kv".to_vec()), ByteBuf::from(vec![1, 2]), ByteBuf::from(vec![0x90])],
            }),
        ),
        (
            "source_status",
            Message::SourceStatus(SourceStatus {
                source: 0,
                state: ConnState::Live,
                error: None,
                since_unix_nanos: 10,
                last_seq: Some(99),
                last_recv_unix_nanos: Some(11),
                counters: SourceCounters {
                    frames: 100,
                    payload_bytes: 12345,
                    replayed_frames: 3,
                    frame_errors: 1,
                    decode_errors: 2,
                    gaps: 2,
                    lost_frames: 4,
                    restarts: 1,
                    reconnects: 1,
                },
                gaps: vec![
                    Gap {
                        from_seq: 10,
                        to_seq: 12,
                        recovered_frames: 3,
                        lost_frames: 0,
                        publisher_id: None,
                        state: GapState::Recovered,
                        reason: None,
                        detected_unix_nanos: 7,
                    },
                    Gap {
                        from_seq: 50,
                        to_seq: 53,
                        recovered_frames: 0,
                        lost_frames: 4,
                        publisher_id: Some(7_046_931_046_437_410_853),
                        state: GapState::Unrecovered,
                        reason: Some("no replay endpoint configured for 0:0".into()),
                        detected_unix_nanos: 8,
                    },
                ],
            }),
        ),
        (
            "lag_notice",
            Message::LagNotice(LagNotice {
                frames_lost: 1200,
                messages_lost: 1201,
                bytes_lost: 3_000_000,
                sources: vec![SourceLoss { source: 2, frames: 1200, first_seq: 100, last_seq: 1299 }],
                queue_bytes: 16 << 20,
                flag: "--client-queue-bytes".into(),
            }),
        ),
        ("history_complete", Message::HistoryComplete(HistoryComplete { frames: 5000, evicted_frames: 12, bytes: 1 << 20 })),
        ("history_start", Message::HistoryStart(HistoryStart { frames: 5000, bytes: 1 << 20 })),
        (
            "batch",
            Message::Batch(Batch {
                messages: vec![
                    ByteBuf::from(encode(&Message::HistoryStart(HistoryStart { frames: 1, bytes: 12 }))),
                    ByteBuf::from(encode(&Message::HistoryComplete(HistoryComplete { frames: 1, evicted_frames: 0, bytes: 12 }))),
                ],
            }),
        ),
    ]
}

#[test]
fn every_message_kind_matches_its_golden_bytes_and_round_trips() {
    let samples = samples();
    // One sample per variant: a new variant must get a golden file too.
    assert_eq!(samples.len(), 11);
    for (name, message) in samples {
        let bytes = proto::encode(&message);
        assert_eq!(&bytes[..4], b"KVSW");
        check(name, &bytes);
        assert_eq!(proto::encode_ref((&message).into()), bytes, "{name}: encode_ref and encode differ");
        assert_eq!(proto::decode(&bytes).unwrap(), message, "{name} round trip");
        if let proto::Message::Batch(batch) = &message {
            assert_eq!(proto::encode_batch(&batch.messages), bytes, "encode_batch and encode differ");
        }
    }
}

#[test]
fn capture_format_matches_its_golden_bytes() {
    let header = CaptureHeader {
        created_unix_nanos: 1_700_000_000_000_000_000,
        kvscope_version: "0.1.0".into(),
        sources: vec![source(0, true), plane_source(1), discovery_source(2)],
        note: Some(
            "kvscope record --workers 0=tcp://127.0.0.1:5557 --event-plane nats://127.0.0.1:4222 --discover etcd://127.0.0.1:2379".into(),
        ),
    };
    let found = proto::SourceInfo::discovered_relay(3, "7", 0, "zmq://127.0.0.1:5600");
    let records = [
        CaptureRecord {
            source: 0,
            recv_time_nanos: 1_700_000_000_000_000_001,
            replayed: false,
            frames: vec![
                ByteBuf::from(b"kv-events".to_vec()),
                ByteBuf::from(0u64.to_be_bytes().to_vec()),
                ByteBuf::from(vec![0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0]),
            ],
        },
        CaptureRecord {
            source: 0,
            recv_time_nanos: 1_700_000_000_000_000_002,
            replayed: true,
            frames: vec![ByteBuf::from(Vec::new()), ByteBuf::from(1u64.to_be_bytes().to_vec()), ByteBuf::from(vec![0x90])],
        },
        // An event-plane record: the NATS subject and the message body (a Dynamo envelope).
        CaptureRecord {
            source: 1,
            recv_time_nanos: 1_700_000_000_000_000_003,
            replayed: false,
            frames: vec![
                ByteBuf::from(b"namespace.dynamo.component.backend.endpoint.generate.kv-events".to_vec()),
                ByteBuf::from(vec![0x81, 0xa8, b's', b'e', b'q', b'u', b'e', b'n', b'c', b'e', 0x00]),
            ],
        },
        // A relay found while recording, then gone (format 4).
        discovery_record(2, 4, &capture::DiscoveryEvent::Source(found.clone())),
        discovery_record(2, 5, &capture::DiscoveryEvent::Left { source: 3 }),
    ];
    for r in &records[3..] {
        let event = capture::DiscoveryEvent::parse(&r.frames).unwrap();
        assert!(
            matches!(&event, capture::DiscoveryEvent::Source(i) if *i == found) || event == capture::DiscoveryEvent::Left { source: 3 }
        );
    }
    let mut bytes = Vec::new();
    capture::write_header(&mut bytes, &header).unwrap();
    for r in &records {
        bytes.extend_from_slice(&capture::encode_record(r));
    }
    check("capture", &bytes);
    let reader = CaptureReader::new(bytes.as_slice()).unwrap();
    assert_eq!(reader.header(), &header);
    assert_eq!(reader.map(Result::unwrap).collect::<Vec<_>>(), records);
}

fn discovery_source(index: u32) -> proto::SourceInfo {
    proto::SourceInfo {
        index,
        key: "discovery".into(),
        worker_id: String::new(),
        dp_rank: 0,
        endpoint: "etcd://127.0.0.1:2379".into(),
        replay_endpoint: None,
        kind: proto::SourceKind::Discovery,
        event_plane: None,
        block_size: None,
    }
}

fn discovery_record(source: u32, at: u64, event: &capture::DiscoveryEvent) -> CaptureRecord {
    let frames = event.frames().into_iter().map(ByteBuf::from).collect();
    CaptureRecord { source, recv_time_nanos: 1_700_000_000_000_000_000 + at, replayed: false, frames }
}

/// A capture written by the version-3 layout (no discovery source), as committed before
/// version 4: it still opens.
#[test]
fn a_version_3_capture_still_opens() {
    let text = std::fs::read_to_string(golden_dir().join("capture_v3.hex")).unwrap();
    let hex: String = text.split_whitespace().collect();
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    assert_eq!(&bytes[8..10], &[0, 3], "the fixture is a version-3 file");
    let mut reader = CaptureReader::new(bytes.as_slice()).unwrap();
    assert_eq!(reader.format_version(), 3);
    assert_eq!(reader.header().sources.len(), 2);
    assert_eq!(reader.by_ref().count(), 3);
    assert!(reader.truncated().is_none());
}

/// A capture written by the version-1 layout (engine sources only, no `kind`), as committed
/// before version 2: it still opens, and its sources read as engines.
#[test]
fn a_version_1_capture_still_opens_with_engine_sources() {
    let text = std::fs::read_to_string(golden_dir().join("capture_v1.hex")).unwrap();
    let hex: String = text.split_whitespace().collect();
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    assert_eq!(&bytes[8..10], &[0, 1], "the fixture is a version-1 file");
    let mut reader = CaptureReader::new(bytes.as_slice()).unwrap();
    assert_eq!(reader.format_version(), 1);
    let sources = &reader.header().sources;
    assert_eq!(sources.len(), 1);
    assert_eq!((sources[0].kind, sources[0].event_plane.clone()), (proto::SourceKind::Engine, None));
    assert_eq!(sources[0].replay_endpoint.as_deref(), Some("tcp://127.0.0.1:5657"));
    let records: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
    assert_eq!(records.len(), 2);
    assert_eq!((records[0].replayed, records[1].replayed), (false, true));
    assert!(reader.truncated().is_none());
}

/// A capture written by the version-2 layout (engines and event planes, no router-index
/// sources), as committed before version 3: it still opens, sources and records unchanged.
#[test]
fn a_version_2_capture_still_opens_with_its_event_plane() {
    let text = std::fs::read_to_string(golden_dir().join("capture_v2.hex")).unwrap();
    let hex: String = text.split_whitespace().collect();
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    assert_eq!(&bytes[8..10], &[0, 2], "the fixture is a version-2 file");
    let mut reader = CaptureReader::new(bytes.as_slice()).unwrap();
    assert_eq!(reader.format_version(), 2);
    let kinds: Vec<_> = reader.header().sources.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [proto::SourceKind::Engine, proto::SourceKind::EventPlane]);
    assert!(reader.by_ref().all(|r| r.is_ok()));
    assert!(reader.truncated().is_none());
}
