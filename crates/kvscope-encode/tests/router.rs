//! Re-encodes every decoded Dynamo event-plane fixture message and compares it with the bytes
//! Dynamo 1.6.1's relay published, byte for byte; and the relay the demo plays publishes what
//! the fixtures' relay did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kvscope_corpus::dynamo_plane::{self, DP_RANK, KV_BLOCK_SIZE, WORKER_ID};
use kvscope_encode::router::{encode_envelope, encode_envelope_json, encode_router_events, relay_envelope, zmq_plane_frames};
use kvscope_router::{Predictor, RelayConfig, decode_envelope, decode_router_events, split_zmq_plane};

#[test]
fn every_fixture_message_re_encodes_to_its_bytes() {
    let mut checked = 0;
    for tag in dynamo_plane::tags() {
        let frames = dynamo_plane::zmq_frames(tag);
        for (i, bytes) in dynamo_plane::messages(tag).unwrap().into_iter().enumerate() {
            let env = match &frames {
                Some(all) => {
                    let f: Vec<&[u8]> = all[i].iter().map(Vec::as_slice).collect();
                    let env = split_zmq_plane(&f).unwrap().decode_envelope().unwrap();
                    let again = zmq_plane_frames(&env).unwrap();
                    assert_eq!(again.to_vec(), all[i], "{tag} message {i}: ZMQ frames");
                    env
                }
                None => {
                    let env = decode_envelope(bytes).unwrap();
                    assert_eq!(encode_envelope(&env).unwrap(), bytes, "{tag} message {i}: envelope");
                    env
                }
            };
            let events = decode_router_events(&env.payload).unwrap();
            assert_eq!(encode_router_events(&events).unwrap(), env.payload, "{tag} message {i}: payload");
            // The older JSON form carries the same envelope.
            assert_eq!(decode_envelope(&encode_envelope_json(&env)).unwrap().payload, env.payload);
            checked += 1;
        }
    }
    assert_eq!(checked, 41);
}

/// The demo's relay: predictions turned into envelopes publish the fixtures' payloads exactly
/// (the publisher id, sequence and time taken from the fixture; one message per batch that
/// kept an event).
#[test]
fn predicted_envelopes_are_the_relays_bytes() {
    for tag in ["nats_map", "nats_map_media"] {
        let mut relay = Predictor::new(RelayConfig::dynamo_1_6_1(WORKER_ID, DP_RANK, KV_BLOCK_SIZE));
        let received: Vec<_> = dynamo_plane::messages(tag).unwrap().into_iter().map(|m| decode_envelope(m).unwrap()).collect();
        let mut sent = Vec::new();
        for b in dynamo_plane::sent(tag).unwrap() {
            let predictions = relay.predict(b.seq, &b.payload).unwrap();
            let next = &received[sent.len().min(received.len() - 1)];
            if let Some(env) = relay_envelope(next.publisher_id, sent.len() as u64, next.published_at, &predictions).unwrap() {
                sent.push(encode_envelope(&env).unwrap());
            }
        }
        let fixtures: Vec<Vec<u8>> = dynamo_plane::messages(tag).unwrap().into_iter().map(<[u8]>::to_vec).collect();
        assert_eq!(sent, fixtures, "{tag}");
    }
}
