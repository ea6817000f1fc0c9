//! Shards against one model: the same stream through K models, each reading its part of the
//! fleet ([`super::shard`]), holds per source what one model reading everything holds.

use kvscope_engine_protocol::Settings;
use kvscope_protocol as proto;

use super::shard::Shard;
use super::tests::{config, hello_of, kimi_frames, source_info};
use super::*;
use crate::{coordinator, summarize};

/// Dynamo's worker ids are numbers: the router's side reconciles such sources.
fn engines(workers: u32) -> Vec<proto::SourceInfo> {
    (0..workers).map(source_info).collect()
}

const SUBJECT: &[u8] = b"namespace.test.component.backend.endpoint.generate.kv-events";

/// A fleet of synthetic workers and one NATS plane carrying every worker's relay, as Dynamo
/// 1.6.1's relay publishes it; worker 3's relay loses every fifth envelope.
pub(crate) fn fleet_with_plane(workers: u32, rounds: u32) -> (proto::Message, Vec<proto::Message>) {
    let plane = proto::SourceInfo::event_plane(workers, "nats://127.0.0.1:4222", Some("namespace.>".into()));
    let hello = hello_of(engines(workers).into_iter().chain([plane]).collect(), 16);
    let mut batches = kvscope_encode::synthetic::fleet(workers, u64::from(rounds)).expect("a synthetic fleet");
    batches.sort_by_key(|b| (b.seq, b.worker));
    let mut relays: Vec<kvscope_router::Predictor> =
        (0..workers).map(|w| kvscope_router::Predictor::new(kvscope_router::RelayConfig::dynamo_1_6_1(u64::from(w), 0, 16))).collect();
    let mut published = vec![0u64; workers as usize];
    let mut out = Vec::new();
    for (i, b) in batches.into_iter().enumerate() {
        let at = 1_000_000_000 + i as u64 * 1_000_000;
        let predictions = relays[b.worker as usize].predict(b.seq, &b.payload).expect("the relay reads its engine's batch");
        out.push(proto::Message::Frame(proto::Frame {
            source: b.worker,
            seq: b.seq,
            recv_time_nanos: at,
            replayed: false,
            topic: b"kv-events".to_vec(),
            payload: b.payload,
        }));
        let sequence = &mut published[b.worker as usize];
        let Some(envelope) = kvscope_encode::router::relay_envelope(1000 + u64::from(b.worker), *sequence, at / 1_000_000, &predictions)
            .expect("an envelope")
        else {
            continue;
        };
        *sequence += 1;
        if b.worker == 3 && sequence.is_multiple_of(5) {
            continue;
        }
        out.push(proto::Message::Frame(proto::Frame {
            source: workers,
            seq: 0,
            recv_time_nanos: at + 1,
            replayed: false,
            topic: SUBJECT.to_vec(),
            payload: kvscope_encode::router::encode_envelope(&envelope).expect("the envelope's bytes"),
        }));
    }
    (hello, out)
}

fn run(hello: &proto::Message, messages: &[proto::Message], block_size: u32, shard: Shard) -> Model {
    let mut m = Model::new(Config { shard, ..config(block_size) });
    m.apply_message(hello.clone(), 0.0);
    for message in messages {
        m.apply_message(message.clone(), 0.0);
    }
    m.refresh_index();
    m.take_dirty();
    m
}

/// Shards fed the stream at their own paces, as engine workers on a busy machine are: in each
/// round shard `i` applies its next `paces[i]` messages, then they agree on the fleet's exit (as
/// a coordinator does at each flush). A shard may take an exit from a stretch of the stream it
/// has not read yet.
fn run_shards(hello: &proto::Message, messages: &[proto::Message], block_size: u32, paces: &[usize]) -> Vec<Model> {
    let count = paces.len() as u32;
    let mut shards: Vec<Model> =
        (0..count).map(|index| Model::new(Config { shard: Shard { index, count }, ..config(block_size) })).collect();
    let agree = |shards: &mut Vec<Model>| {
        for side in [Side::A, Side::B] {
            let Some(exit) = shard::earliest_exit(shards.iter().filter_map(|m| m.indexer_exit(side))).cloned() else { continue };
            shards.iter_mut().for_each(|m| m.adopt_exit(side, &exit));
        }
    };
    for m in &mut shards {
        m.apply_message(hello.clone(), 0.0);
    }
    let mut read = vec![0usize; shards.len()];
    while read.iter().any(|r| *r < messages.len()) {
        for ((m, read), pace) in shards.iter_mut().zip(&mut read).zip(paces) {
            let to = read.saturating_add(*pace).min(messages.len());
            for message in &messages[*read..to] {
                m.apply_message(message.clone(), 0.0);
            }
            *read = to;
        }
        agree(&mut shards);
    }
    agree(&mut shards);
    for m in &mut shards {
        m.refresh_index();
        m.take_dirty();
    }
    shards
}

/// Events, rows by (kind, reason), the first fatal and the blocks applied per tier.
type OwnCounts = (u64, Rows, Option<(u64, String)>, BTreeMap<&'static str, u64>);

/// What a source's counts say that does not depend on where the fleet's indexer exited.
fn own_counts(c: &Counts, classes: &classes::ClassTable) -> OwnCounts {
    (c.events, c.rows(classes), c.first_fatal.clone(), c.blocks_applied.clone())
}

/// Every source's counts, row and router report in the shard that reads it equal the whole
/// model's; the earliest of the shards' exits is the whole model's.
fn shards_hold_what_one_model_holds(hello: &proto::Message, messages: &[proto::Message], block_size: u32) {
    let whole = run(hello, messages, block_size, Shard::ALL);
    let whole_rows = overview::rows(&whole, 0.0);
    // In step, and at paces far apart: a shard that races ahead reports exits the others have
    // not reached yet.
    let paces: [&[usize]; 7] = [&[1, 1], &[5, 5], &[7, 7, 7], &[usize::MAX; 3], &[1, 9], &[13, 2], &[2, usize::MAX, 5]];
    for paces in paces {
        let count = paces.len() as u32;
        let shards = run_shards(hello, messages, block_size, paces);
        for m in &shards {
            assert_eq!(m.position(), whole.position(), "every shard counts every frame");
        }
        for src in whole.engine_sources() {
            let readers: Vec<&Model> = shards.iter().filter(|m| m.engine_sources().any(|s| s.index == src.index)).collect();
            assert_eq!(readers.len(), 1, "{} is read by one of {count} shards", src.key);
            let (m, own) = (readers[0], readers[0].source(src.index).expect("the source"));
            for side in [Side::A, Side::B] {
                let (mine, theirs) = (own.counts(side), src.counts(side));
                assert_eq!(own_counts(mine, m.classes()), own_counts(theirs, whole.classes()), "{} {side:?}", src.key);
                let after = |c: &Counts| (c.after_exit, c.fatal_after_exit);
                assert_eq!(after(mine), after(theirs), "{} {side:?}: after the fleet's exit, shards at paces {paces:?}", src.key);
            }
            assert_eq!(
                (own.frames, own.payload_bytes, &own.seq, own.decode_errors),
                (src.frames, src.payload_bytes, &src.seq, src.decode_errors)
            );
            for side in [Side::A, Side::B] {
                let index = |m: &Model| m.index().counts(side, src.index).cloned();
                let modelled: Vec<&Model> = shards.iter().filter(|m| index(m).is_some()).collect();
                assert_eq!(modelled.len(), 1, "one of {count} shards models {side:?}'s index");
                assert_eq!(index(modelled[0]), index(&whole), "{}'s blocks in {side:?}'s index, {count} shards", src.key);
            }
            if let (Some(router), Some(mine)) = (whole.router(), m.router()) {
                let theirs = router.source_report(router.report(), src.index).map(|r| &r.router);
                assert_eq!(mine.source_report(mine.report(), src.index).map(|r| &r.router), theirs, "{}'s relay", src.key);
            }
        }
        // What the page shows of the fleet, from the shards' reports as a coordinator reads
        // them (bytes from each worker), against one engine's.
        let edges = summarize::EdgeState::default();
        let open: Vec<String> = whole.engine_sources().map(|s| s.key.clone()).step_by(2).collect();
        for settings in [Settings::default(), Settings { open, ..Settings::default() }] {
            let fleet = coordinator::merge(&reports_through_bytes(&shards, &settings), &edges);
            let one = coordinator::merge(&[coordinator::ShardReport::of(&whole, &settings, false, 0.0)], &edges);
            assert_eq!(fleet.rows, whole_rows, "the overview's rows, in order, of {count} shards");
            assert_eq!(one.rows, whole_rows, "one engine's report makes its own rows");
            // The fleet bar, but for memory and how many engine workers: each shard holds its
            // own, and those that model an index hold every worker's frames too.
            let without_memory = |b: &kvscope_engine_protocol::view::Bar| kvscope_engine_protocol::view::Bar {
                memory: String::new(),
                engines: 0,
                ..b.clone()
            };
            assert_eq!(fleet.bar.engines, count, "the bar says how many engine workers");
            assert_eq!(without_memory(&fleet.bar), without_memory(&one.bar), "the bar of {count} shards");
            assert_eq!(fleet.logs, one.logs, "the indexers' logs of {count} shards");
            assert_eq!(fleet.quality, one.quality, "the data-quality strip of {count} shards");
            assert!(one.cards.hint || one.cards.cards.iter().any(|c| !c.index_lines.is_empty()), "cards with the index's lines");
            assert_eq!(fleet.cards, one.cards, "the cards of {count} shards, opened {:?}", settings.open);
        }
        for side in [Side::A, Side::B] {
            let key = |e: &IndexerExit| (e.position, e.source, e.seq, e.label);
            let restarts = |m: &Model| m.index().report(side).map(|r| (r.indexer_exits, r.first_exit.clone()));
            for m in &shards {
                assert_eq!(m.indexer_exit(side).map(key), whole.indexer_exit(side).map(key), "{side:?}'s exit, {count} shards");
            }
            let modelled = shards.iter().find(|m| m.index().report(side).is_some()).expect("a shard models the index");
            assert_eq!(restarts(modelled), restarts(&whole), "{side:?}'s index restarts, {count} shards");
        }
        fleet_facts_merge_to_the_whole_fleet_s(&whole, &shards, paces);
        the_timeline_of_the_shards_is_one_model_s(&whole, &shards, count);
        the_trees_of_the_shards_are_one_model_s(&whole, &shards);
        for kind in [kvscope_engine_protocol::ExportKind::Capture, kvscope_engine_protocol::ExportKind::VerdictsJsonl] {
            let parts = shards.iter().map(|m| through_bytes(&m.export_part(kind))).collect();
            let joined = export::join_export(kind, shards[0].kvcap_header(7), parts);
            let one = export::join_export(kind, whole.kvcap_header(7), vec![whole.export_part(kind)]);
            assert!(joined.len() > 1000 && joined == one, "the {kind:?} download of {count} shards");
        }
        let exits = coordinator::fleet_exits(&reports_through_bytes(&shards, &Settings::default()));
        for side in [Side::A, Side::B] {
            let key = |e: &IndexerExit| (e.position, e.source, e.seq);
            assert_eq!(exits[side as usize].as_ref().map(key), whole.indexer_exit(side).map(key), "the coordinator's {side:?} exit");
        }
        inspector_index_lines_are_asked_of_the_index_s_shards(&whole, &shards);
        for (index, m) in shards.iter().enumerate() {
            let ids = m.first_event_id..m.next_event_id;
            assert!(ids.clone().all(|id| shard::of_event_id(id) == index as u32), "shard {index}'s ids {ids:?} name it");
        }
    }
}

/// An event by what names it in any model: its source, frame and place in the batch.
fn event_name(m: &Model, id: u64) -> Option<(u32, u64, u32)> {
    m.event_loc(id).map(|r| (r.source, r.seq, r.index))
}

/// An event's inspector: the shard that reads its source builds it and asks, each shard that
/// models an index answers with its lines, and together they say what one model says.
fn inspector_index_lines_are_asked_of_the_index_s_shards(whole: &Model, shards: &[Model]) {
    let mut asked = 0;
    for id in (whole.first_event_id..whole.next_event_id).step_by(37) {
        let Some(name) = event_name(whole, id) else { continue };
        let Some(mut expected) = summarize::InspectorCache::default().get(whole, Some(id), 0).map(|part| {
            let lines = part.index_query.as_ref().map(|q| summarize::event_index_lines(whole, q)).unwrap_or_default();
            part.with_index_lines(lines)
        }) else {
            continue;
        };
        let (reader, mine) = shards
            .iter()
            .find_map(|m| Some((m, (m.first_event_id..m.next_event_id).find(|i| event_name(m, *i) == Some(name))?)))
            .expect("a shard reads the event");
        let part = summarize::InspectorCache::default().get(reader, Some(mine), 0).map(|p| through_bytes(&p)).expect("its inspector");
        let lines: Vec<(Side, String)> = match &part.index_query {
            Some(q) => shards.iter().flat_map(|m| through_bytes(&summarize::event_index_lines(m, q))).collect(),
            None => Vec::new(),
        };
        let mut got = part.with_index_lines(lines);
        assert_eq!(got.id, mine);
        (got.id, expected.id) = (0, 0);
        assert_eq!(got, expected, "event {name:?}'s inspector");
        asked += usize::from(!expected.index_lines.is_empty());
    }
    assert!(asked > 0, "some events asked the index");
}

/// The timeline of the shards (laid out by the coordinator, each shard's lanes painted in its
/// worker and sent as bytes) is one model's, pixel for pixel, in every view tried.
fn the_timeline_of_the_shards_is_one_model_s(whole: &Model, shards: &[Model], count: u32) {
    use crate::summarize::timeline::{LanesPart, lanes_part};
    use kvscope_engine_protocol::ViewQuery;
    let edges = summarize::EdgeState::default();
    let marked = whole.marked_span_ms().expect("marks");
    let middle = (marked.0 + (marked.1 - marked.0) / 3.0, marked.1 - (marked.1 - marked.0) / 4.0);
    let open: Vec<String> = whole.engine_sources().map(|s| s.key.clone()).skip(1).step_by(2).collect();
    let queries = [
        ViewQuery { canvas_width: 600.0, device_pixel_ratio: 1.0, ..ViewQuery::default() },
        ViewQuery { canvas_width: 480.0, device_pixel_ratio: 2.0, range: Some((middle.1, middle.0)), ..ViewQuery::default() },
        ViewQuery {
            canvas_width: 777.0,
            device_pixel_ratio: 1.25,
            settings: Settings { open, show_all: true, window_ms: Some(middle), ..Settings::default() },
            ..ViewQuery::default()
        },
    ];
    for q in queries {
        let one = [coordinator::ShardReport::of(whole, &q.settings, false, 0.0)];
        let rows = coordinator::merge(&one, &edges).rows;
        let layout = coordinator::timeline_layout(&one, &rows, &q);
        let (view, image) = coordinator::timeline(&layout, &one, &[lanes_part(whole, &layout)], &rows, &q.settings);
        let reports = reports_through_bytes(shards, &q.settings);
        let fleet = coordinator::merge(&reports, &edges);
        let shards_layout = coordinator::timeline_layout(&reports, &fleet.rows, &q);
        assert_eq!(shards_layout, layout, "{count} shards lay the timeline out as one model");
        let lanes: Vec<LanesPart> = shards
            .iter()
            .map(|m| rmp_serde::from_slice(&rmp_serde::to_vec_named(&lanes_part(m, &shards_layout)).expect("bytes")).expect("lanes"))
            .collect();
        let painting = lanes.iter().filter(|l| **l != LanesPart::default()).count();
        let owners = shards.iter().filter(|m| layout.lanes.iter().any(|i| m.source(*i).is_some_and(|s| s.own))).count();
        assert_eq!(painting, owners, "each shard that reads a shown lane paints it");
        let (shards_view, shards_image) = coordinator::timeline(&shards_layout, &reports, &lanes, &fleet.rows, &q.settings);
        assert_eq!(shards_view, view, "the timeline of {count} shards at {}x", q.device_pixel_ratio);
        let image = image.expect("pixels");
        let colours: std::collections::HashSet<&[u8]> = image.rgba.chunks_exact(4).collect();
        // An empty canvas has 4: the page, the rows' two shades, the ticks.
        assert!(colours.len() > 4, "a timeline with marks: {} colours", colours.len());
        assert!(shards_image.as_ref() == Some(&image), "the pixels of {count} shards at {}x", q.device_pixel_ratio);
        if q.range.is_some() {
            let counted = view.range.as_ref().map_or(0, |r| r.rows[0].iter().map(|(_, n, _)| n).sum::<u64>());
            assert!(counted > 0, "the range counts events: {:?}", view.range);
        }
    }
}

/// A value as another worker reads it.
fn through_bytes<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    rmp_serde::from_slice(&rmp_serde::to_vec_named(value).expect("serializes")).expect("reads back")
}

/// Each source's trees, drawn by the shard that reads it, marked where the router lacks a block
/// by the shard that models the trees' policy's index, with every shard's hits of a hash: one
/// model's trees.
fn the_trees_of_the_shards_are_one_model_s(whole: &Model, shards: &[Model]) {
    use crate::summarize::trees::{assemble, lacks, search_hits, tree_part, trees};
    let mut marked = 0;
    for src in whole.engine_sources() {
        let settings = Settings { tree: Some((src.key.clone(), "device".into())), ..Settings::default() };
        let mut expected = trees(whole, &settings, None);
        // A hash of this tree, searched in every tree.
        let hash = expected.icicle.as_ref().and_then(|root| root.kids.first()).and_then(|k| k.hash).expect("a device block");
        let settings = Settings { hash: format!("{hash:016x}"), ..settings };
        expected = trees(whole, &settings, None);
        let drawn: Vec<_> = shards.iter().filter_map(|m| tree_part(m, &settings, None)).map(|p| through_bytes(&p)).collect();
        assert_eq!(drawn.len(), 1, "{}'s tree is drawn by the shard that reads it", src.key);
        let part = drawn.into_iter().next().expect("a part");
        let question = part.lacks_query().expect("a question for the index").clone();
        let answers: Vec<(u64, String)> = shards.iter().flat_map(|m| through_bytes(&lacks(m, &question))).collect();
        let hits = shards.iter().flat_map(|m| through_bytes(&search_hits(m, &settings.hash))).collect();
        let mut got = assemble(part, &answers, hits, &settings.hash);
        // Counters name their first events by id, which each shard numbers its own way.
        let ids = |t: &mut kvscope_engine_protocol::view::Trees, m: &dyn Fn(u64) -> Option<(u32, u64, u32)>| {
            t.counters.iter_mut().map(|c| c.first_event.take().and_then(m)).collect::<Vec<_>>()
        };
        let in_shard = |id: u64| event_name(&shards[shard::of_event_id(id) as usize], id);
        assert_eq!(ids(&mut got, &in_shard), ids(&mut expected, &|id| event_name(whole, id)), "{}'s counters' events", src.key);
        assert_eq!(got, expected, "{}'s trees", src.key);
        assert!(matches!(got.search, kvscope_engine_protocol::view::HashSearch::Hits(_)), "the hash is found");
        fn lacking(c: &kvscope_engine_protocol::view::IcicleCell) -> usize {
            usize::from(c.router_lacks) + c.kids.iter().map(lacking).sum::<usize>()
        }
        marked += got.icicle.as_ref().map_or(0, lacking);
    }
    assert!(marked > 0, "some block the router lacks is marked");
}

/// Each shard's report, as the coordinator reads it from the bytes the shard's worker sends.
fn reports_through_bytes(shards: &[Model], settings: &Settings) -> Vec<coordinator::ShardReport> {
    shards
        .iter()
        .map(|m| coordinator::ShardReport::from_bytes(&coordinator::ShardReport::of(m, settings, false, 0.0).to_bytes()).expect("a report"))
        .collect()
}

/// The shards' facts, merged, are the whole model's; their event ids name the same events.
fn fleet_facts_merge_to_the_whole_fleet_s(whole: &Model, shards: &[Model], paces: &[usize]) {
    let parts: Vec<fleet::FleetFacts> = reports_through_bytes(shards, &Settings::default()).into_iter().map(|r| r.fleet).collect();
    let (mut merged, mut expected) = (fleet::FleetFacts::merge(&parts.iter().collect::<Vec<_>>()), fleet::FleetFacts::of(whole));
    let in_shard = |id: u64| event_name(&shards[shard::of_event_id(id) as usize], id);
    for (m, e) in merged.differences.iter().zip(&expected.differences) {
        assert_eq!(in_shard(m.first_event), event_name(whole, e.first_event), "a difference's first event");
    }
    for (m, e) in merged.sides.iter().zip(&expected.sides) {
        assert_eq!(m.exit.as_ref().map(|x| in_shard(x.event_id)), e.exit.as_ref().map(|x| event_name(whole, x.event_id)), "the exit");
    }
    // Ids aside (each shard numbers its own), the facts are the same.
    for f in [&mut merged, &mut expected] {
        f.differences.iter_mut().for_each(|d| d.first_event = 0);
        f.sides.iter_mut().filter_map(|s| s.exit.as_mut()).for_each(|e| e.event_id = 0);
    }
    assert_eq!(merged, expected, "shards at paces {paces:?}");
    let crashloop = expected.sides[0].crashloop.len();
    assert_eq!(crate::summarize::headline_of(&merged), crate::summarize::headline_of(&expected), "{crashloop} crashloop sources");
}

#[test]
fn shards_of_the_kimi_k3_incident_hold_what_one_model_holds() {
    let hello = hello_of(engines(kvscope_corpus::KIMI_K3_WORKERS), 1536);
    let whole = run(&hello, &kimi_frames(), 1536, Shard::ALL);
    assert!(whole.indexer_exit(Side::A).is_some(), "the incident stops legacy's indexer");
    let after: Vec<u64> = whole.engine_sources().map(|s| s.counts(Side::A).after_exit).collect();
    assert!(after.iter().filter(|n| **n > 0).count() >= 2, "events after the exit on several workers: {after:?}");
    shards_hold_what_one_model_holds(&hello, &kimi_frames(), 1536);
}

#[test]
fn shards_of_a_fleet_with_an_event_plane_hold_what_one_model_holds() {
    let (hello, messages) = fleet_with_plane(12, 30);
    let whole = run(&hello, &messages, 16, Shard::ALL);
    let report = whole.router().expect("a router side").report();
    assert!(report.sources.iter().any(|s| s.router.missing > 0), "worker 3's relay lost envelopes");
    assert!(report.sources.iter().filter(|s| s.router.received > 0).count() >= 11, "the others' arrived");
    shards_hold_what_one_model_holds(&hello, &messages, 16);
}

/// A fleet of synthetic workers in which `faulty` twice stores a block at another block size,
/// fatal under both default policies: the router's index restarts empty there, and again in
/// its crashloop, while the other workers go on storing. Worker 2's batch 5 is lost (a gap).
fn fleet_with_a_faulty_worker(workers: u32, rounds: u64, faulty: u32) -> (proto::Message, Vec<proto::Message>) {
    use kvscope_encode::{Batch, Hash, Stored, release};
    let hello = hello_of(engines(workers), 16);
    let mut batches = kvscope_encode::synthetic::fleet(workers, rounds).expect("a synthetic fleet");
    for b in batches.iter_mut().filter(|b| b.worker == faulty && (b.seq == rounds / 3 || b.seq == 2 * rounds / 3)) {
        let store = Stored::new([Hash::U64(0xbad0 + b.seq)], 32).tokens(0..32).medium(Some("GPU"));
        let batch = Batch { ts: 1.0, events: vec![store.into()], dp_rank: Some(0) };
        b.payload = kvscope_encode::encode_batch_lossy(&release::VLLM_0_33.layout, &batch).expect("a batch");
    }
    batches.retain(|b| (b.worker, b.seq) != (2, 5));
    batches.sort_by_key(|b| (b.seq, b.worker));
    let messages = batches
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            proto::Message::Frame(proto::Frame {
                source: b.worker,
                seq: b.seq,
                recv_time_nanos: 1_000_000_000 + i as u64 * 1_000_000,
                replayed: false,
                topic: b"kv-events".to_vec(),
                payload: b.payload,
            })
        })
        .collect();
    (hello, messages)
}

#[test]
fn shards_restart_the_router_s_index_wherever_one_worker_s_batch_stops_it() {
    // A worker of the second of two shards and of the third of three.
    let faulty = (0..64u32).find(|w| Shard::of(&w.to_string(), 2) == 1 && Shard::of(&w.to_string(), 3) == 2).expect("such a worker");
    let workers = 12.max(faulty + 1);
    let (hello, messages) = fleet_with_a_faulty_worker(workers, 30, faulty);
    let whole = run(&hello, &messages, 16, Shard::ALL);
    for side in [Side::A, Side::B] {
        let report = whole.index().report(side).expect("a report");
        assert!(report.indexer_exits >= 2, "{side:?}: the index exits at each bad store: {}", report.indexer_exits);
        let held: Vec<u64> = report.sources.iter().map(|s| s.counts.blocks.router_blocks).collect();
        assert!(held.iter().filter(|n| **n > 0).count() >= 6, "{side:?}: the others stored again since: {held:?}");
    }
    let quality = crate::summarize::quality(&whole);
    assert_eq!(quality.sources.as_deref(), Some("sources affected: 2:0"), "the lost batch");
    shards_hold_what_one_model_holds(&hello, &messages, 16);
}

#[test]
fn the_shards_that_model_the_indexes_index_every_worker_again_after_a_reclassification() {
    let faulty = (0..64u32).find(|w| Shard::of(&w.to_string(), 2) == 1).expect("a worker of the second shard");
    let (hello, messages) = fleet_with_a_faulty_worker(12.max(faulty + 1), 30, faulty);
    let swapped = |m: &Model| Config { policy_a: m.config().policy_b.clone(), policy_b: m.config().policy_a.clone(), ..m.config().clone() };
    let mut whole = run(&hello, &messages, 16, Shard::ALL);
    whole.reconfigure(swapped(&whole));
    whole.refresh_index();
    let mut shards = run_shards(&hello, &messages, 16, &[5, 5]);
    for m in &mut shards {
        m.reconfigure(swapped(m));
        m.refresh_index();
    }
    assert_eq!(shards[0].config().policy_a, "fixed", "the policies changed sides");
    for side in [Side::A, Side::B] {
        let modelled = shards.iter().find(|m| super::shard::index_sides(m.config().shard)[side as usize]).expect("a shard models it");
        for src in whole.engine_sources() {
            let index = |m: &Model| m.index().counts(side, src.index).cloned();
            assert!(index(&whole).is_some_and(|c| c.blocks.engine_blocks > 0), "{} holds blocks", src.key);
            assert_eq!(index(modelled), index(&whole), "{}'s blocks in {side:?}'s index after the re-classification", src.key);
        }
        let restarts = |m: &Model| m.index().report(side).map(|r| r.indexer_exits);
        assert_eq!(restarts(modelled), restarts(&whole));
    }
}

/// A capture shards the same way: every shard opens the whole file, applies its own workers'
/// records and, where it models an index, every worker's.
#[test]
fn shards_of_an_opened_capture_hold_what_one_model_holds() {
    let faulty = (0..64u32).find(|w| Shard::of(&w.to_string(), 2) == 1).expect("a worker of the second shard");
    let (hello, messages) = fleet_with_a_faulty_worker(12.max(faulty + 1), 30, faulty);
    let recorded = run(&hello, &messages, 16, Shard::ALL).to_kvcap(0);
    let open = |shard: Shard| {
        let mut reader = proto::capture::CaptureReader::new(std::io::Cursor::new(&recorded[..])).expect("a capture");
        let mut m = Model::new(Config { shard, ..config(16) });
        m.begin_capture("fleet.kvcap", &reader.header().clone());
        while let Some(r) = reader.next_record().expect("a record") {
            m.apply_record(r, 0.0);
        }
        m
    };
    let mut whole = open(Shard::ALL);
    whole.refresh_index();
    let rows = overview::rows(&whole, 0.0);
    for count in [2, 3] {
        let mut shards: Vec<Model> = (0..count).map(|index| open(Shard { index, count })).collect();
        for side in [Side::A, Side::B] {
            let Some(exit) = shard::earliest_exit(shards.iter().filter_map(|m| m.indexer_exit(side))).cloned() else { continue };
            shards.iter_mut().for_each(|m| m.adopt_exit(side, &exit));
        }
        shards.iter_mut().for_each(Model::refresh_index);
        for side in [Side::A, Side::B] {
            let modelled = shards.iter().find(|m| m.index().report(side).is_some()).expect("a shard models the index");
            for src in whole.engine_sources() {
                let index = |m: &Model| m.index().counts(side, src.index).cloned();
                assert!(index(&whole).is_some_and(|c| c.blocks.engine_blocks > 0), "{} holds blocks", src.key);
                assert_eq!(index(modelled), index(&whole), "{}'s blocks in {side:?}'s index, {count} shards", src.key);
            }
        }
        let parts: Vec<overview::OverviewPart> = shards.iter().map(|m| overview::part(m, 0.0)).collect();
        assert_eq!(overview::merge(&parts.iter().collect::<Vec<_>>()), rows, "the overview's rows of {count} shards");
        fleet_facts_merge_to_the_whole_fleet_s(&whole, &shards, &vec![usize::MAX; count as usize]);
    }
}
