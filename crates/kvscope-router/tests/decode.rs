//! Decoding the event plane: error messages with offset and path (a table), the ZMQ frame
//! checks, the JSON envelope, and no panic on any truncation of any fixture or on arbitrary bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kvscope_corpus::dynamo_plane;
use kvscope_encode::raw::Writer;
use kvscope_router::{EnvelopeForm, PlaneTier, ZmqFrameError, decode_envelope, decode_router_events, split_zmq_plane};
use proptest::prelude::*;

/// A RouterEvent map with a block whose tokens_hash is `tokens_hash` written by `f`.
fn one_store(tier: &str, tokens_hash: impl Fn(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    w.array(1).map(4);
    w.str("worker_id").uint(42).str("storage_tier").str(tier).str("residency_domain").nil();
    w.str("event").map(3).str("event_id").uint(1).str("data").map(1).str("stored").map(3);
    w.str("parent_hash").nil().str("start_position").nil().str("blocks").array(2);
    w.map(2).str("block_hash").uint(1).str("tokens_hash").uint(2);
    w.map(3).str("block_hash").uint(3).str("tokens_hash");
    tokens_hash(&mut w);
    w.str("mm_extra_info").nil();
    w.str("dp_rank").uint(0);
    w.into_bytes()
}

#[test]
fn payload_errors_name_offset_and_path() {
    let cases: &[(Vec<u8>, &str)] = &[
        (
            one_store("device", |w| {
                w.str("x");
            }),
            "payload: byte 170: expected u64 for tokens_hash, found string \"x\" ([0].event.data.stored.blocks[1].tokens_hash)",
        ),
        (
            one_store("device", |w| {
                w.int(-1);
            }),
            "payload: byte 170: expected u64 for tokens_hash, found -1 ([0].event.data.stored.blocks[1].tokens_hash)",
        ),
        (vec![0x91, 0x80], "payload: byte 1: RouterEvent has no \"worker_id\" key ([0])"),
        (vec![0x81], "payload: byte 0: expected array for RouterEvents, found map"),
        (vec![0x91], "payload: byte 1: unexpected end of input ([0])"),
        (vec![0x90, 0x00], "payload: byte 1: 1 trailing bytes after the value"),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_router_events(bytes).unwrap_err().to_string(), *want);
    }
    // An unknown tier is kept, not rejected.
    let ok = one_store("gpu_hbm", |w| {
        w.uint(4);
    });
    assert_eq!(decode_router_events(&ok).unwrap()[0].storage_tier, PlaneTier::Other("gpu_hbm".into()));
}

#[test]
fn data_variants_and_optional_fields() {
    let mut w = Writer::new();
    // Keys in another order, unknown keys, no residency_domain, no dp_rank.
    w.array(2);
    w.map(3).str("event").map(2).str("data").str("cleared").str("event_id").uint(9);
    w.str("extra").array(1).uint(1).str("worker_id").uint(7);
    w.map(2).str("worker_id").uint(7).str("event");
    w.map(2).str("event_id").uint(10).str("data").map(1).str("removed").map(1).str("block_hashes").array(1).uint(5);
    let events = decode_router_events(&w.into_bytes()).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event.data, kvscope_router::EventData::Cleared);
    assert_eq!((events[0].worker_id, events[0].event.dp_rank, events[0].storage_tier.clone()), (7, 0, PlaneTier::Device));
    assert_eq!(events[1].event.data.kind(), "removed");
    let mut bad = Writer::new();
    bad.array(1).map(2).str("worker_id").uint(7).str("event").map(2).str("event_id").uint(1).str("data").str("wiped");
    assert_eq!(
        decode_router_events(&bad.into_bytes()).unwrap_err().to_string(),
        "payload: byte 35: unknown data variant \"wiped\"; expected \"cleared\" (or a map for stored/removed) ([0].event.data)"
    );
}

#[test]
fn envelope_errors_and_the_json_form() {
    let mut w = Writer::new();
    w.map(4).str("publisher_id").uint(1).str("sequence").str("0").str("published_at").uint(2).str("topic").str("kv-events");
    assert_eq!(
        decode_envelope(&w.into_bytes()).unwrap_err().to_string(),
        "envelope: byte 24: expected u64 for sequence, found string \"0\" (sequence)"
    );
    let mut w = Writer::new();
    w.map(4).str("publisher_id").uint(1).str("sequence").uint(0).str("published_at").uint(2).str("topic").str("kv-events");
    assert_eq!(decode_envelope(&w.into_bytes()).unwrap_err().to_string(), "envelope: byte 0: envelope has no \"payload\" key");
    let json = br#"{"topic":"kv-events","publisher_id":5,"sequence":3,"published_at":17,"payload":[145,192]}"#;
    let env = decode_envelope(json).unwrap();
    assert_eq!((env.publisher_id, env.sequence, env.payload.as_slice(), env.form), (5, 3, &[145u8, 192][..], EnvelopeForm::Json));
    let err = decode_envelope(br#"{"topic":"kv-events"}"#).unwrap_err().to_string();
    assert!(err.starts_with("JSON envelope: missing field"), "{err}");
}

#[test]
fn zmq_frames_are_checked_part_by_part() {
    let frames = &dynamo_plane::zmq_frames("zmq_file_media_loopback").unwrap()[0];
    let f: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let ok = split_zmq_plane(&f).unwrap();
    assert_eq!((ok.topic, ok.sequence), (&b"kv-events"[..], 0));
    let err = |frames: &[&[u8]]| match split_zmq_plane(frames).unwrap_err() {
        kvscope_router::PlaneError::Frames(e) => e,
        other => panic!("{other}"),
    };
    assert_eq!(err(&f[..3]), ZmqFrameError::FrameCount { got: 3 });
    assert_eq!(err(&[f[0], &f[1][..7], f[2], f[3]]), ZmqFrameError::PublisherIdLength { got: 7 });
    assert_eq!(err(&[f[0], f[1], &[], f[3]]), ZmqFrameError::SequenceLength { got: 0 });
    assert_eq!(err(&[f[0], f[1], f[2], &f[3][..4]]), ZmqFrameError::EnvelopeHeader { got: 4 });
    let mut v2 = f[3].to_vec();
    v2[0] = 2;
    assert_eq!(err(&[f[0], f[1], f[2], &v2]), ZmqFrameError::Version { got: 2 });
    let short = &f[3][..f[3].len() - 1];
    let e = err(&[f[0], f[1], f[2], short]);
    assert_eq!(e.to_string(), format!("envelope frame declares {} bytes, but {} follow the header", f[3].len() - 5, f[3].len() - 6));
    let seq1 = 1u64.to_be_bytes();
    let m = split_zmq_plane(&[f[0], f[1], &seq1, f[3]]).unwrap();
    assert_eq!(m.decode_envelope().unwrap_err().to_string(), "ZMQ plane frames: frame 2 says sequence 1, the envelope says 0");
}

/// Every prefix of every fixture message and payload fails cleanly (or decodes), never panics.
#[test]
fn every_truncation_of_every_fixture_is_an_error_not_a_panic() {
    let mut tried = 0;
    for tag in dynamo_plane::tags() {
        for bytes in dynamo_plane::messages(tag).unwrap() {
            let envelope = if dynamo_plane::is_zmq(tag) { &bytes[5..] } else { bytes };
            let payload = decode_envelope(envelope).unwrap().payload;
            for n in 0..envelope.len() {
                assert!(decode_envelope(&envelope[..n]).is_err(), "{tag}: prefix {n} decoded");
                tried += 1;
            }
            for n in 0..payload.len() {
                assert!(decode_router_events(&payload[..n]).is_err(), "{tag}: payload prefix {n} decoded");
                tried += 1;
            }
            for n in 0..bytes.len() {
                let _ = split_zmq_plane(&[b"kv-events", &[0; 8], &[0; 8], &bytes[..n]]);
            }
        }
        for b in dynamo_plane::sent(tag).unwrap() {
            for n in 0..b.payload.len() {
                let _ = kvscope_router::predict(&b.payload[..n], 42, 0, 16, kvscope_normalize::Policy::DYNAMO_1_6_1);
                tried += 1;
            }
        }
    }
    assert!(tried > 10_000, "{tried}");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_envelope(&bytes);
        let _ = decode_router_events(&bytes);
        let _ = split_zmq_plane(&[&bytes[..bytes.len().min(3)], &bytes, &bytes, &bytes]);
        let _ = kvscope_router::predict(&bytes, 1, 0, 16, kvscope_normalize::Policy::DYNAMO_1_6_1);
    }

    /// Valid fixture payloads with one byte changed: decoding may fail, never panic.
    #[test]
    fn mutated_fixture_payloads_never_panic(msg in 0usize..41, at in any::<usize>(), byte in any::<u8>()) {
        let all: Vec<&[u8]> = dynamo_plane::tags().into_iter().flat_map(|t| dynamo_plane::messages(t).unwrap()).collect();
        let mut bytes = all[msg % all.len()].to_vec();
        let i = at % bytes.len();
        bytes[i] = byte;
        let _ = decode_envelope(&bytes).map(|e| decode_router_events(&e.payload));
        let _ = decode_envelope(bytes.get(5..).unwrap_or(&[])).map(|e| decode_router_events(&e.payload));
    }
}
