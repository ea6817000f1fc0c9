//! Golden tests on real bytes: Dynamo 1.6.1's relay, fed the fixtures' engine batches, published
//! the fixtures' event-plane messages; kvscope's prediction under `dynamo-1.6.1` must match
//! every one, and drop exactly what the relay dropped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kvscope_corpus::dynamo_plane::{self, DP_RANK, KV_BLOCK_SIZE, WORKER_ID};
use kvscope_normalize::VerdictLabel;
use kvscope_router::{
    decode_envelope, split_zmq_plane, Envelope, Reconciler, ReconcilerConfig, RelayConfig, RouterReport,
};

/// The worker ids two runs' relays actually put on their RouterEvents. The fixture README says
/// every run used `worker_id=42`; these runs' messages say otherwise (a finding, see the crate
/// README): `nats_array` carries 0xde38a710e94ffcf2, `nats_core_nojs` carries 7.
const NATS_ARRAY_WORKER_ID: u64 = 0xde38_a710_e94f_fcf2;
const NATS_CORE_NOJS_WORKER_ID: u64 = 7;

fn envelopes(tag: &str) -> Vec<Envelope> {
    match dynamo_plane::zmq_frames(tag) {
        Some(messages) => messages
            .iter()
            .map(|frames| {
                let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                split_zmq_plane(&frames).unwrap().decode_envelope().unwrap()
            })
            .collect(),
        None => dynamo_plane::messages(tag).unwrap().into_iter().map(|m| decode_envelope(m).unwrap()).collect(),
    }
}

/// Engine batches first, then the plane (the plane may lag the engine stream).
fn reconcile(tag: &str, worker_id: u64, envelopes: &[Envelope]) -> RouterReport {
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let id = r.add_source(&worker_id.to_string(), RelayConfig::dynamo_1_6_1(worker_id, DP_RANK, KV_BLOCK_SIZE));
    for b in dynamo_plane::sent(tag).unwrap() {
        r.push_engine(id, b.seq, &b.payload).unwrap();
    }
    for e in envelopes {
        r.push_envelope(e).unwrap();
    }
    r.finish();
    r.report()
}

fn worker_of(tag: &str) -> u64 {
    match tag {
        "nats_array" => NATS_ARRAY_WORKER_ID,
        "nats_core_nojs" => NATS_CORE_NOJS_WORKER_ID,
        _ => WORKER_ID,
    }
}

fn expected_drops(tag: &str) -> BTreeMap<VerdictLabel, u64> {
    match tag {
        // The lowercase `cpu` store.
        "nats_map" | "nats_array" | "nats_core_nojs" => BTreeMap::from([(VerdictLabel::UnknownMedium, 1)]),
        // Lowercase cpu store and remove, lowercase gpu, FOO, the lowercase cpu of the mixed
        // batch; the batch with a 32-byte bin hash lost whole.
        "nats_map_media" | "zmq_file_media_loopback" => {
            BTreeMap::from([(VerdictLabel::UnknownMedium, 5), (VerdictLabel::BatchDecodeRejected, 1)])
        }
        other => panic!("no expectation for tag {other}"),
    }
}

#[test]
fn every_fixture_message_is_predicted_and_every_drop_explained() {
    let tags = dynamo_plane::tags();
    assert_eq!(tags.len(), 5);
    for tag in tags {
        let envs = envelopes(tag);
        let report = reconcile(tag, worker_of(tag), &envs);
        let c = &report.sources[0].router;
        assert!(c.expected > 0, "{tag}");
        assert_eq!((c.matched, c.received), (c.expected, c.expected), "{tag}: {report:#?}");
        assert_eq!((c.missing, c.unexpected, c.mismatched), (0, 0, 0), "{tag}: {report:#?}");
        assert_eq!(c.dropped_by_policy, expected_drops(tag), "{tag}");
        assert!(report.unknown_workers.is_empty(), "{tag}");
        let p = &report.publishers;
        assert_eq!(p.len(), 1, "{tag}");
        assert_eq!((p[0].messages, p[0].gaps, p[0].restarts, p[0].decode_errors), (envs.len() as u64, 0, 0, 0), "{tag}");
    }
}

/// The README's `worker_id=42` for the two runs whose messages name another worker: every
/// RouterEvent lands under unknown workers, every prediction is missing.
#[test]
fn two_runs_name_another_worker_than_the_readme_says() {
    for (tag, actual) in [("nats_array", NATS_ARRAY_WORKER_ID), ("nats_core_nojs", NATS_CORE_NOJS_WORKER_ID)] {
        let envs = envelopes(tag);
        let report = reconcile(tag, WORKER_ID, &envs);
        assert_eq!(report.unknown_workers.len(), 1, "{tag}");
        assert_eq!((report.unknown_workers[0].worker_id, report.unknown_workers[0].dp_rank), (actual, 0), "{tag}");
        assert_eq!(report.unknown_workers[0].events, 9, "{tag}");
        let c = &report.sources[0].router;
        assert_eq!((c.expected, c.missing, c.received), (9, 9, 0), "{tag}");
        assert_eq!((report.totals.received, report.totals.unexpected), (9, 9), "{tag}");
    }
}
