//! Several engines under one `(worker_id, dp_rank)`: DP ranks whose batches carry no rank all
//! file under rank 0 (Dynamo 1.6.1's relay reads a missing rank as 0). Each relay publishes in
//! its own engine's order, but the relays' messages interleave on the plane in another order
//! than the engine batches reached kvscope: every event must still be reconciled as matched,
//! not as a run of differences.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kvscope_encode::router::relay_envelope;
use kvscope_encode::{Batch, Event, Hash, Removed, Stored, encode_batch, release};
use kvscope_router::{Envelope, Predictor, Reconciler, ReconcilerConfig, RelayConfig, RouterCounts};

const WORKER: u64 = 7;
const RANKS: u32 = 4;
const BATCHES: u64 = 12;
const BLOCK_SIZE: u32 = 16;

fn relay_config(rank: u32) -> RelayConfig {
    RelayConfig::dynamo_1_6_1(WORKER, rank, BLOCK_SIZE)
}

/// Rank `rank`'s engine batches, with no DP rank: a chain of one-block stores, a removal every
/// fourth batch; every rank's blocks differ. A clear in the first batch, alike on every rank.
fn engine_batches(rank: u32) -> Vec<Vec<u8>> {
    (0..BATCHES)
        .map(|i| {
            let h = (u64::from(rank) + 1) << 32 | (i + 1);
            let tokens = (0..BLOCK_SIZE).map(|t| t + rank * 1000 + i as u32 * 20);
            let store =
                Stored::new([Hash::U64(h)], BLOCK_SIZE).parent((i > 0).then(|| Hash::U64(h - 1))).tokens(tokens).medium(Some("GPU"));
            let mut events = Vec::new();
            if i == 0 {
                events.push(Event::cleared());
            }
            events.push(store.into());
            if i % 4 == 3 {
                events.push(Removed::new([Hash::U64(h - 3)]).into());
            }
            encode_batch(&release::VLLM_0_33.layout, &Batch { ts: 1.0, events, dp_rank: None }).unwrap()
        })
        .collect()
}

/// What rank `rank`'s relay publishes for its batches, as publisher `publisher`.
fn relayed(rank: u32, publisher: u64, batches: &[Vec<u8>]) -> Vec<Envelope> {
    let mut relay = Predictor::new(relay_config(rank));
    let mut sequence = 0;
    let mut out = Vec::new();
    for (seq, payload) in batches.iter().enumerate() {
        let predictions = relay.predict(seq as u64, payload).unwrap();
        if let Some(env) = relay_envelope(publisher, sequence, 0, &predictions).unwrap() {
            out.push(env);
            sequence += 1;
        }
    }
    out
}

/// Feeds every rank's engine batches round by round (rank 0 first) and the planes' envelopes
/// in `plane_order`, the plane first when `plane_first`; returns rank 0's counts (its lane is
/// the shared key) and the totals' unknown workers.
fn reconcile(plane: &[Envelope], plane_first: bool) -> RouterCounts {
    let engines: Vec<Vec<Vec<u8>>> = (0..RANKS).map(engine_batches).collect();
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let ids: Vec<_> = (0..RANKS).map(|rank| r.add_source(&format!("{WORKER}:{rank}"), relay_config(rank))).collect();
    let feed_engines = |r: &mut Reconciler| {
        for i in 0..BATCHES as usize {
            for (id, batches) in ids.iter().zip(&engines) {
                r.push_engine(*id, i as u64, &batches[i]).unwrap();
            }
        }
    };
    if !plane_first {
        feed_engines(&mut r);
    }
    for env in plane {
        r.push_envelope(env).unwrap();
    }
    if plane_first {
        feed_engines(&mut r);
    }
    r.finish();
    let report = r.report();
    assert!(report.unknown_workers.is_empty(), "{report:#?}");
    report.sources[0].router.clone()
}

fn assert_all_matched(c: &RouterCounts, what: &str) {
    assert!(c.expected > 0, "{what}");
    assert_eq!((c.received, c.matched), (c.expected, c.expected), "{what}: {c:#?}");
    assert_eq!((c.missing, c.unexpected, c.mismatched, c.overflowed_expected, c.overflowed_received), (0, 0, 0, 0, 0), "{what}: {c:#?}");
}

/// Every relay's envelopes, the ranks' messages interleaved in reverse rank order per round.
fn planes_interleaved() -> Vec<Envelope> {
    let planes: Vec<Vec<Envelope>> = (0..RANKS).map(|rank| relayed(rank, 100 + u64::from(rank), &engine_batches(rank))).collect();
    let rounds = planes.iter().map(Vec::len).max().unwrap();
    (0..rounds).flat_map(|i| planes.iter().rev().filter_map(move |p| p.get(i).cloned())).collect()
}

#[test]
fn relays_sharing_a_key_are_each_aligned_with_their_own_engine() {
    let plane = planes_interleaved();
    let c = reconcile(&plane, false);
    assert_eq!(c.expected, u64::from(RANKS) * (1 + BATCHES + BATCHES / 4), "one clear, a store per batch, a removal every fourth");
    assert_all_matched(&c, "engines first");
    assert_all_matched(&reconcile(&plane, true), "the plane first");
}

#[test]
fn the_report_names_the_engines_that_share_a_key() {
    let engines: Vec<Vec<Vec<u8>>> = (0..RANKS).map(engine_batches).collect();
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let ids: Vec<_> = (0..RANKS).map(|rank| r.add_source(&format!("{WORKER}:{rank}"), relay_config(rank))).collect();
    // A fifth engine, another worker, alone under its key: not a finding.
    let alone = r.add_source("8:0", RelayConfig::dynamo_1_6_1(8, 0, BLOCK_SIZE));
    for (i, batch) in engines[0].iter().enumerate() {
        r.push_engine(alone, i as u64, batch).unwrap();
    }
    for (id, batches) in ids.iter().zip(&engines) {
        r.push_engine(*id, 0, &batches[0]).unwrap();
    }
    let report = r.report();
    let sources: Vec<String> = (0..RANKS).map(|rank| format!("{WORKER}:{rank}")).collect();
    assert_eq!(report.shared_keys, vec![kvscope_router::SharedKey { worker_id: WORKER, dp_rank: 0, sources }]);
    assert_eq!(
        report.shared_keys[0].sentence(),
        "4 engines (7:0, 7:1, 7:2, 7:3) share one router key, worker 7 rank 0: the router holds all their blocks as that one \
         rank's (the relay files a batch that names no DP rank under rank 0)"
    );
    let many: Vec<_> =
        (0..5).map(|w| kvscope_router::SharedKey { worker_id: w, dp_rank: 0, sources: vec!["a".into(), "b".into()] }).collect();
    let lines = kvscope_router::SharedKey::lines(&many, 3);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3], "and 2 more router keys shared the same way, by 4 engines");
}

#[test]
fn whole_relays_one_after_another_are_aligned_too() {
    // Rank 3's relay delivers everything, then rank 2's, and so on.
    let plane: Vec<Envelope> = (0..RANKS).rev().flat_map(|rank| relayed(rank, 100 + u64::from(rank), &engine_batches(rank))).collect();
    assert_all_matched(&reconcile(&plane, false), "relays in turn");
}

#[test]
fn a_relay_that_restarts_under_a_new_publisher_id_stays_with_its_engine() {
    let mut plane = Vec::new();
    for rank in 0..RANKS {
        let batches = engine_batches(rank);
        let mut envs = relayed(rank, 100 + u64::from(rank), &batches);
        if rank == 1 {
            // The same relay state, its second half published under a new id from sequence 0.
            for (n, env) in envs.iter_mut().enumerate().skip(6) {
                env.publisher_id = 900;
                env.sequence = n as u64 - 6;
            }
        }
        plane.push(envs);
    }
    let plane: Vec<Envelope> = (0..BATCHES as usize).flat_map(|i| plane.iter().filter_map(move |p| p.get(i).cloned())).collect();
    assert_all_matched(&reconcile(&plane, false), "a restarted relay");
}

#[test]
fn one_engine_under_a_key_still_pairs_what_differs_as_mismatched() {
    // Rank 0 alone; its relay's fourth envelope altered: the alignment names it mismatched, as
    // with one engine per key before several could share one.
    let batches = engine_batches(0);
    let mut plane = relayed(0, 100, &batches);
    let mut events = kvscope_router::decode_router_events(&plane[3].payload).unwrap();
    if let kvscope_router::EventData::Stored(s) = &mut events[0].event.data {
        s.blocks[0].tokens_hash ^= 1;
    }
    plane[3].payload = kvscope_encode::router::encode_router_events(&events).unwrap();
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let id = r.add_source("7:0", relay_config(0));
    for (i, b) in batches.iter().enumerate() {
        r.push_engine(id, i as u64, b).unwrap();
    }
    for env in &plane {
        r.push_envelope(env).unwrap();
    }
    r.finish();
    let c = r.report().sources[0].router.clone();
    assert_eq!((c.mismatched, c.mismatched_fields.tokens_hash, c.missing, c.unexpected), (1, 1, 0, 0), "{c:#?}");
    assert_eq!(c.matched + 1, c.expected);
}

/// Rank 0's counts for a reader that has every rank's engine batches from `engine_from` on
/// (under their own seqs when `engine_late`, so past 0; else renumbered from 0, a stream that
/// seems whole) and each relay's messages from `plane_from` on (under their relay's sequences when
/// `plane_late`; else renumbered from 0, a plane that seems heard from its start).
fn windows(engine_from: usize, engine_late: bool, plane_from: usize, plane_late: bool) -> RouterCounts {
    let engines: Vec<Vec<Vec<u8>>> = (0..RANKS).map(engine_batches).collect();
    // A relay publishes one envelope per batch here: no batch of these is all skipped.
    let planes: Vec<Vec<Envelope>> = (0..RANKS).map(|rank| relayed(rank, 100 + u64::from(rank), &engines[rank as usize])).collect();
    let mut plane: Vec<Envelope> =
        (plane_from..BATCHES as usize).flat_map(|i| planes.iter().rev().filter_map(move |p| p.get(i).cloned())).collect();
    if !plane_late {
        plane.iter_mut().for_each(|env| env.sequence -= plane_from as u64);
    }
    let mut r = Reconciler::new(ReconcilerConfig::default());
    let ids: Vec<_> = (0..RANKS).map(|rank| r.add_source(&format!("{WORKER}:{rank}"), relay_config(rank))).collect();
    for i in engine_from..BATCHES as usize {
        let seq = if engine_late { i } else { i - engine_from };
        for (id, batches) in ids.iter().zip(&engines) {
            r.push_engine(*id, seq as u64, &batches[i]).unwrap();
        }
    }
    for env in &plane {
        r.push_envelope(env).unwrap();
    }
    r.finish();
    r.report().sources[0].router.clone()
}

/// A reader whose engine streams begin at batch 8, with each relay's messages from batch 3 on:
/// a page joining after the server's history evicted the rest. More events come before the first
/// match than the lookahead, on every relay.
fn joined_at_batch_8(late: bool) -> RouterCounts {
    windows(8, late, 3, true)
}

// Per rank: batches 8-11 are a store each and a removal in 11; batches 3-7 came before the
// window, five stores and removals in 3 and 7.
const IN_WINDOW: u64 = RANKS as u64 * 5;
const BEFORE_WINDOW: u64 = RANKS as u64 * 7;

#[test]
fn a_reader_that_joins_late_binds_each_relay_to_its_own_engine() {
    let c = joined_at_batch_8(true);
    assert_eq!((c.expected, c.matched, c.received), (IN_WINDOW, IN_WINDOW, IN_WINDOW + BEFORE_WINDOW), "{c:#?}");
    assert_eq!((c.mismatched, c.missing, c.unexpected), (0, 0, 0), "{c:#?}");
    assert_eq!(c.before_window, BEFORE_WINDOW, "the relays' messages for batches 3-7 are before the window: {c:#?}");
    assert!(c.is_clean(), "nothing differs: {c:#?}");
}

/// The same messages before the first match, on engine streams that begin at seq 0: nothing
/// came before them, so those messages are unexpected, as a relay's extra messages are.
#[test]
fn messages_before_a_stream_that_began_at_seq_0_are_unexpected() {
    let c = joined_at_batch_8(false);
    assert_eq!((c.matched, c.unexpected, c.before_window), (IN_WINDOW, BEFORE_WINDOW, 0), "{c:#?}");
    assert!(!c.is_clean());
}

/// The other way round: engine streams from batch 3, each relay's messages from batch 8 (a
/// server started while the fleet runs that subscribed to the plane after its engine sockets).
fn plane_joined_at_batch_8(late: bool) -> RouterCounts {
    windows(3, true, 8, late)
}

#[test]
fn predictions_for_messages_sent_before_kvscope_subscribed_to_the_plane_are_not_compared() {
    let c = plane_joined_at_batch_8(true);
    assert_eq!((c.expected, c.matched, c.received), (IN_WINDOW + BEFORE_WINDOW, IN_WINDOW, IN_WINDOW), "{c:#?}");
    assert_eq!((c.mismatched, c.missing, c.unexpected), (0, 0, 0), "{c:#?}");
    assert_eq!(c.before_plane_window, BEFORE_WINDOW, "the predictions for batches 3-7 are before the plane's window: {c:#?}");
    assert!(c.is_clean(), "nothing differs: {c:#?}");
}

/// The same predictions before a relay heard from its sequence 0 were published after kvscope
/// subscribed: they are missing, as a relay's lost messages are.
#[test]
fn predictions_before_a_relay_heard_from_sequence_0_are_missing() {
    let c = plane_joined_at_batch_8(false);
    assert_eq!((c.matched, c.missing, c.before_plane_window), (IN_WINDOW, BEFORE_WINDOW, 0), "{c:#?}");
    assert!(!c.is_clean());
}
