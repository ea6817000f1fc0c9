//! Golden tests on real bytes: Dynamo 1.6.1's relay, fed the fixtures' engine batches, published
//! the fixtures' event-plane messages; kvscope's prediction under `dynamo-1.6.1` must match
//! every one, and drop exactly what the relay dropped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kvscope_corpus::dynamo_plane::{self, DP_RANK, KV_BLOCK_SIZE, WORKER_ID};
use kvscope_normalize::VerdictLabel;
use kvscope_router::{Envelope, Reconciler, ReconcilerConfig, RelayConfig, RouterReport, decode_envelope, split_zmq_plane};

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

fn nats_map() -> (Vec<dynamo_plane::SentBatch>, Vec<Envelope>) {
    (dynamo_plane::sent("nats_map").unwrap(), envelopes("nats_map"))
}

/// Feeds nats_map's engine batches and the given envelopes, interleaved: the plane first, then
/// the engine stream, so alignment runs with the plane ahead.
fn reconcile_plane_first(envs: &[Envelope]) -> RouterReport {
    let (sent, _) = nats_map();
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let id = r.add_source("42", RelayConfig::dynamo_1_6_1(WORKER_ID, DP_RANK, KV_BLOCK_SIZE));
    for e in envs {
        r.push_envelope(e).unwrap();
    }
    for b in sent {
        r.push_engine(id, b.seq, &b.payload).unwrap();
    }
    r.finish();
    r.report()
}

fn counts(report: &RouterReport) -> (u64, u64, u64, u64, u64, u64) {
    let c = &report.sources[0].router;
    (c.expected, c.received, c.matched, c.missing, c.unexpected, c.mismatched)
}

#[test]
fn interleavings_do_not_change_the_counts() {
    let (sent, envs) = nats_map();
    assert_eq!(counts(&reconcile_plane_first(&envs)), (9, 9, 9, 0, 0, 0));
    // Alternating, the plane one message behind.
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let id = r.add_source("42", RelayConfig::dynamo_1_6_1(WORKER_ID, DP_RANK, KV_BLOCK_SIZE));
    let mut plane = envs.iter();
    for b in &sent {
        r.push_engine(id, b.seq, &b.payload).unwrap();
        if b.seq > 0 {
            r.push_envelope(plane.next().unwrap()).unwrap();
        }
    }
    let before_finish = r.report();
    assert_eq!(before_finish.sources[0].router.matched, 9);
    r.finish();
    assert_eq!(counts(&r.report()), (9, 9, 9, 0, 0, 0));
}

#[test]
fn a_lost_message_is_one_missing_and_one_gap() {
    let (_, mut envs) = nats_map();
    let lost = envs.remove(4);
    let report = reconcile_plane_first(&envs);
    assert_eq!(counts(&report), (9, 8, 8, 1, 0, 0));
    let d = &report.sources[0].differences[0];
    assert_eq!(d.origin.unwrap().seq, 4, "the placeholder's batch");
    assert_eq!(report.publishers[0].gaps, 1);
    assert_eq!(report.publishers[0].missed_messages, 1);
    assert_eq!(lost.sequence, 4);
}

/// A plane heard from its sixth message on (kvscope subscribed late): the publisher's start, not
/// a gap, and the engine's first predictions are before the plane's window, not missing. (From
/// the fifth, the placeholder's empty store would pair with the identical one before it.)
#[test]
fn a_plane_first_heard_past_sequence_0_is_no_gap() {
    let (_, envs) = nats_map();
    let report = reconcile_plane_first(&envs[5..]);
    let p = &report.publishers[0];
    assert_eq!((p.first_sequence, p.gaps, p.missed_messages), (Some(5), 0, 0), "{p:?}");
    assert!(kvscope_router::subscribed_late(5));
    let c = &report.sources[0].router;
    assert_eq!((c.missing, c.unexpected, c.mismatched), (0, 0, 0), "{c:#?}");
    assert_eq!((c.before_plane_window, c.matched, c.expected), (5, 4, 9), "{c:#?}");
}

#[test]
fn a_duplicated_message_is_one_unexpected_and_out_of_order() {
    let (_, mut envs) = nats_map();
    envs.insert(3, envs[2].clone());
    let report = reconcile_plane_first(&envs);
    assert_eq!(counts(&report), (9, 10, 9, 0, 1, 0));
    assert_eq!(report.publishers[0].out_of_order, 1);
}

#[test]
fn a_flipped_tokens_hash_is_one_mismatch_naming_the_field() {
    let (_, mut envs) = nats_map();
    let mut events = kvscope_router::decode_router_events(&envs[1].payload).unwrap();
    let kvscope_router::EventData::Stored(s) = &mut events[0].event.data else { panic!("seq 1 is a store") };
    s.blocks[1].tokens_hash ^= 1;
    envs[1].payload = kvscope_encode::router::encode_router_events(&events).unwrap();
    let report = reconcile_plane_first(&envs);
    assert_eq!(counts(&report), (9, 9, 8, 0, 0, 1));
    let c = &report.sources[0].router;
    assert_eq!(c.mismatched_fields.tokens_hash, 1);
    let d = &report.sources[0].differences[0];
    assert_eq!(d.fields, [kvscope_router::MismatchField::TokensHash]);
    assert_eq!(d.origin.unwrap(), kvscope_router::EngineEventRef { seq: 1, event_index: 0 });
}

#[test]
fn a_router_event_for_worker_43_is_an_unknown_worker() {
    let (_, mut envs) = nats_map();
    let mut events = kvscope_router::decode_router_events(&envs[0].payload).unwrap();
    events[0].worker_id = 43;
    let mut extra = envs[0].clone();
    extra.sequence = envs.len() as u64;
    extra.payload = kvscope_encode::router::encode_router_events(&events).unwrap();
    envs.push(extra);
    let report = reconcile_plane_first(&envs);
    assert_eq!(counts(&report), (9, 9, 9, 0, 0, 0));
    assert_eq!(report.unknown_workers.len(), 1);
    assert_eq!((report.unknown_workers[0].worker_id, report.unknown_workers[0].events), (43, 1));
    assert_eq!((report.totals.received, report.totals.unexpected), (10, 1));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["unknown_workers"][0]["worker_id"], 43);
    assert_eq!(json["sources"][0]["router"]["dropped_by_policy"]["unknown_medium"], 1);
    assert_eq!(json["totals"]["matched"], 9);
}

#[test]
fn a_restarted_publisher_is_a_restart_not_a_gap() {
    let (_, envs) = nats_map();
    let mut r = Reconciler::new(ReconcilerConfig::default());
    for e in envs.iter().take(3).chain(envs.iter().take(2)) {
        r.push_envelope(e).unwrap();
    }
    let p = &r.report().publishers[0];
    assert_eq!((p.messages, p.gaps, p.restarts, p.out_of_order), (5, 0, 1, 0));
}

#[test]
fn pending_queues_are_bounded_and_overflow_is_counted() {
    let (sent, _) = nats_map();
    let mut r = Reconciler::new(ReconcilerConfig { max_pending: 3, ..ReconcilerConfig::default() });
    let id = r.add_source("42", RelayConfig::dynamo_1_6_1(WORKER_ID, DP_RANK, KV_BLOCK_SIZE));
    for b in sent {
        r.push_engine(id, b.seq, &b.payload).unwrap();
    }
    let c = r.report().sources[0].router.clone();
    assert_eq!((c.expected, c.pending_expected, c.overflowed_expected), (9, 3, 6));
    r.finish();
    let c = r.report().sources[0].router.clone();
    assert_eq!((c.missing, c.overflowed_expected, c.pending_expected), (3, 6, 0));
    assert!(!c.is_clean());
}

/// `--shard`: on a shared plane, RouterEvents of a worker another shard reads are counted as
/// such and are neither received nor unexpected; the shard that reads the worker counts them as
/// an unknown worker's until a source claims it.
#[test]
fn another_shard_s_workers_are_counted_apart_from_unknown_workers() {
    let envs = envelopes("nats_array");
    let worker = NATS_ARRAY_WORKER_ID.to_string();
    let home = kvscope_router::Shard::of(&worker, 3);
    for index in 0..3 {
        let shard = kvscope_router::Shard { index, count: 3 };
        let mut r = Reconciler::new(ReconcilerConfig { shard, ..ReconcilerConfig::default() });
        for e in &envs {
            r.push_envelope(e).unwrap();
        }
        r.finish();
        let report = r.report();
        if index == home {
            assert_eq!((report.other_shard_events, report.unknown_workers.len()), (0, 1), "shard {shard}");
            assert_eq!(report.totals.received, 9);
        } else {
            assert_eq!((report.other_shard_events, report.unknown_workers.len()), (9, 0), "shard {shard}");
            assert_eq!((report.totals.received, report.totals.unexpected), (0, 0), "shard {shard}");
            assert!(report.is_clean(), "shard {shard}");
        }
    }
}
