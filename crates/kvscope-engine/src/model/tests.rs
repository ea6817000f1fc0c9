//! Model tests on the corpus's Kimi-K3 incident stream (three workers, real release bytes).

use kvscope_normalize::{Normalizer, Outcome, Policy, StorageTier, VerdictLabel};
use kvscope_protocol as proto;

use super::*;

pub(crate) fn source_info(i: u32) -> proto::SourceInfo {
    proto::SourceInfo::engine(i, &i.to_string(), 0, &format!("tcp://127.0.0.1:{}", 5557 + i), None)
}

pub(crate) fn hello(workers: u32, block_size: u32) -> proto::Message {
    hello_of((0..workers).map(source_info).collect(), block_size)
}

/// A server's hello for these sources, with the default policies.
pub(crate) fn hello_of(sources: Vec<proto::SourceInfo>, block_size: u32) -> proto::Message {
    proto::Message::Hello(proto::Hello {
        protocol_version: proto::PROTOCOL_VERSION,
        server_version: "test".into(),
        mode: proto::ServerMode::Demo,
        mode_detail: "test".into(),
        sources,
        defaults: proto::Defaults {
            block_size,
            policy_a: "legacy".into(),
            policy_b: "fixed".into(),
            relay_policy: "dynamo-1.6.1".into(),
            index_max_nodes: None,
        },
        history_bytes: 1 << 20,
        client_queue_bytes: 1 << 20,
        started_unix_nanos: 0,
        discovery: Vec::new(),
    })
}

/// The Kimi-K3 frames of every worker, interleaved by batch number.
pub(crate) fn kimi_frames() -> Vec<proto::Message> {
    let streams: Vec<_> = (0..kvscope_corpus::KIMI_K3_WORKERS).map(kvscope_corpus::kimi_k3_stream).collect();
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..longest {
        for (w, s) in streams.iter().enumerate() {
            if let Some(m) = s.get(i) {
                out.push(proto::Message::Frame(proto::Frame {
                    source: w as u32,
                    seq: m.seq,
                    recv_time_nanos: 1_000_000_000 + (i as u64) * 10_000_000,
                    replayed: false,
                    topic: m.topic.as_bytes().to_vec(),
                    payload: m.payload.to_vec(),
                }));
            }
        }
    }
    out
}

pub(crate) fn config(block_size: u32) -> Config {
    Config { block_size, ..Config::default() }
}

pub(crate) fn loaded(block_size: u32) -> Model {
    let mut m = Model::new(config(block_size));
    m.apply_message(hello(3, block_size), 0.0);
    for f in kimi_frames() {
        m.apply_message(f, 0.0);
    }
    m
}

fn count(m: &Model, src: u32, side: Side, kind: Outcome, reason: Reason) -> u64 {
    m.source(src).unwrap().counts(side).get(m.classes(), kind, reason)
}

/// The reference: the normalizer run directly over one worker's stream.
fn reference(worker: u32, policy: &str, block_size: u32) -> kvscope_normalize::SourceCounters {
    let mut n = Normalizer::new(block_size, policy.parse::<Policy>().unwrap());
    let id = n.source(&worker.to_string(), 0);
    let mut out = Vec::new();
    for m in kvscope_corpus::kimi_k3_stream(worker) {
        let _ = n.push_payload(id, m.seq, m.payload, &mut out);
    }
    n.counters(id).clone()
}

#[test]
fn kimi_counts_equal_the_normalizer_run_directly_under_both_policies() {
    let m = loaded(1536);
    for w in 0..3 {
        for (side, policy) in [(Side::A, "legacy"), (Side::B, "fixed")] {
            let r = reference(w, policy, 1536);
            let c = m.source(w).unwrap().counts(side);
            assert_eq!(c.events, r.total_events(), "w{w} {policy}");
            for tier in StorageTier::ALL {
                let applied: u64 = [VerdictLabel::Store, VerdictLabel::Remove, VerdictLabel::SelfReferencingStore]
                    .iter()
                    .map(|l| r.verdicts(Some(tier), *l))
                    .sum();
                assert_eq!(count(&m, w, side, Outcome::Apply, Reason::Tier(tier)), applied, "w{w} {policy} {tier}");
            }
            for label in [VerdictLabel::NonMainAttentionKind, VerdictLabel::NonMainAttentionGroup, VerdictLabel::OffloadBlockSizeMismatch] {
                assert_eq!(count(&m, w, side, Outcome::Skip, Reason::Label(label)), r.verdicts_by_label(label), "w{w} {policy} {label}");
            }
            assert_eq!(count(&m, w, side, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch)), r.fatal_count, "w{w} {policy}");
        }
    }
}

#[test]
fn a_batch_counts_exactly_what_its_messages_count_one_by_one_and_a_nested_one_is_an_error() {
    let one_by_one = loaded(1536);
    let mut parts = vec![proto::encode(&hello(3, 1536))];
    parts.extend(kimi_frames().iter().map(proto::encode));
    let mut batched = Model::new(config(1536));
    for chunk in parts.chunks(7) {
        batched.apply_message_bytes(&proto::encode_batch(chunk), 0.0);
    }
    for w in 0..3 {
        for side in [Side::A, Side::B] {
            assert_eq!(batched.source(w).unwrap().counts(side), one_by_one.source(w).unwrap().counts(side), "w{w} {side:?}");
        }
    }
    assert_eq!(batched.protocol_errors, 0);
    let nested = proto::encode_batch(&[proto::encode_batch(&parts[1..3])]);
    batched.apply_message_bytes(&nested, 0.0);
    assert_eq!(batched.protocol_errors, 1);
    assert_eq!(batched.last_protocol_error.as_deref(), Some("message 0 of a batch is itself a batch; a kvscope server never nests them"));
}

#[test]
fn under_legacy_cpu_stores_are_fatal_and_under_fixed_they_are_offload_skips() {
    let m = loaded(1536);
    for w in 0..3 {
        let fatal_a = count(&m, w, Side::A, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch));
        let skipped_b = count(&m, w, Side::B, Outcome::Skip, Reason::Label(VerdictLabel::OffloadBlockSizeMismatch));
        assert!(fatal_a > 0, "w{w}: legacy must be fatal");
        assert_eq!(count(&m, w, Side::B, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch)), 0);
        assert!(skipped_b > 0);
        // The fatal stores under legacy are the cpu stores that fixed skips... but legacy files
        // `cpu` on Device (exact match misses it), so the tier differs: the card says so.
        let rows = m.source(w).unwrap().counts(Side::A).rows(m.classes());
        let tiers = &rows[&(Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch))].1;
        assert_eq!(tiers.keys().map(ToString::to_string).collect::<Vec<_>>(), vec!["device (medium \"cpu\" fell back)"]);
        let rows_b = m.source(w).unwrap().counts(Side::B).rows(m.classes());
        let tiers_b = &rows_b[&(Outcome::Skip, Reason::Label(VerdictLabel::OffloadBlockSizeMismatch))].1;
        assert_eq!(tiers_b.keys().map(ToString::to_string).collect::<Vec<_>>(), vec!["host_pinned"]);
        assert_eq!(fatal_a, skipped_b, "the same cpu stores");
        assert!(m.source(w).unwrap().policies_disagree(m.classes()));
    }
}

#[test]
fn a_second_hello_starts_over_so_resent_history_is_not_counted_twice() {
    let mut m = loaded(1536);
    let before = m.source(0).unwrap().counts(Side::B).clone();
    // The server restarts (or the socket reconnects) and sends hello + the same history.
    m.apply_message(hello(3, 1536), 0.0);
    assert_eq!(m.source(0).unwrap().counts(Side::B).events, 0);
    for f in kimi_frames() {
        m.apply_message(f, 0.0);
    }
    assert_eq!(m.source(0).unwrap().counts(Side::B), &before);
}

#[test]
fn changing_the_block_size_reclassifies_retained_history() {
    let mut m = loaded(1536);
    let mut c = m.config().clone();
    c.block_size = 12288;
    m.reconfigure(c);
    for w in 0..3 {
        let r = reference(w, "fixed", 12288);
        assert_eq!(count(&m, w, Side::B, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch)), r.fatal_count);
        assert!(r.fatal_count > 0, "GPU stores at 1536 are fatal at 12288");
    }
}

#[test]
fn raw_bytes_stay_within_their_bound_while_every_event_keeps_its_record() {
    let mut c = config(1536);
    c.retain_bytes = 200 * 1024;
    let mut m = Model::new(c);
    m.apply_message(hello(3, 1536), 0.0);
    let frames = kimi_frames();
    for _ in 0..5 {
        for f in &frames {
            m.apply_message(f.clone(), 0.0);
        }
    }
    let mem = m.memory();
    assert!(mem.bound_reached);
    assert!(mem.retained_bytes <= 200 * 1024, "{mem:?}");
    assert!(mem.evicted_frames > 0);
    // Counters still cover every frame seen, and every event keeps its record.
    assert_eq!(m.source(0).unwrap().frames, 5 * kvscope_corpus::kimi_k3_stream(0).len() as u64);
    let total: u64 = m.sources().iter().map(|s| s.counts(Side::A).events).sum();
    assert_eq!(mem.retained_events as u64, total);
    assert!(!mem.event_bound_reached);
    let least = mem.retained_events * MIN_BYTES_PER_EVENT;
    assert!((least..3 * least).contains(&mem.event_bytes), "{} bytes reserved for {} events", mem.event_bytes, mem.retained_events);
    // The first event's bytes are gone from the page; its record says what it was.
    let d = m.event_detail(0).unwrap();
    assert_eq!(d.bytes_from, BytesFrom::Gone(FetchState::NotAsked));
    assert!(d.payload.is_empty() && d.event.is_none());
    let proto::Message::Frame(first) = &frames[0] else { panic!("a frame") };
    let decoded = kvscope_wire::decode_batch(&first.payload).unwrap();
    assert_eq!((d.source_key.as_str(), d.seq, d.recv_time_nanos), ("0:0", first.seq, first.recv_time_nanos));
    assert_eq!(d.record.kind, decoded.events[0].event_type());
    assert!(d.verdicts.iter().all(|(_, class, rule)| class.is_some() && rule.is_empty()));
    assert!(
        d.bytes_from.sentence(128, false).contains("The server's history may still have them."),
        "{}",
        d.bytes_from.sentence(128, false)
    );

    // A tree's tooltip finds a store's block size in the frame while it is kept, by index.
    let store_of = |f: &proto::Message| {
        let proto::Message::Frame(f) = f else { return None };
        kvscope_wire::decode_batch(&f.payload).ok()?.events.iter().find_map(|e| match e {
            kvscope_wire::KvEvent::BlockStored(s) => Some((f.source, f.seq, s.block_hashes[0].0, s.block_size)),
            _ => None,
        })
    };
    let (src, seq, hash, size) = frames.iter().rev().find_map(store_of).expect("a store in the stream");
    assert_eq!(m.block_size_of(src, seq, hash), size, "the last store's frame is kept");
    let (src, seq, hash, _) = frames.iter().find_map(store_of).unwrap();
    assert_eq!(m.block_size_of(src, seq, hash), None, "the first store's frame is not");

    // Fetched from the server, the bytes come back with the rule sentences.
    let key = m.frame_key(0).unwrap();
    m.fetch_started(key);
    assert_eq!(m.event_detail(0).unwrap().bytes_from, BytesFrom::Gone(FetchState::Asking));
    m.accept_fetched(key, &proto::encode(&frames[0])).unwrap();
    let d = m.event_detail(0).unwrap();
    assert_eq!(d.bytes_from, BytesFrom::Server);
    assert_eq!(d.payload, first.payload);
    assert_eq!(d.event.as_ref().map(kvscope_wire::KvEvent::event_type), Some(d.record.kind));
    assert!(d.verdicts.iter().all(|(_, _, rule)| !rule.is_empty()), "{:?}", d.verdicts);

    // Another frame than the one asked for is refused, and the inspector says so.
    let key1 = m.frame_key(1).unwrap();
    let other = m.frame_key(0).unwrap();
    let err = m.accept_fetched(FrameKey { seq: other.seq + 99, ..other }, &proto::encode(&frames[0])).unwrap_err();
    assert_eq!(err, "the server answered with another frame than the one asked for");
    m.fetch_failed(key1, "404: not in the server's history".into());
    assert_eq!(m.fetch_state(key1), FetchState::Failed("404: not in the server's history".into()));
}

#[test]
fn a_captures_dropped_bytes_are_read_again_from_where_its_records_sit_in_the_file() {
    let mut c = config(1536);
    c.retain_bytes = 200 * 1024;
    let mut m = Model::new(c);
    let header = proto::capture::CaptureHeader { created_unix_nanos: 0, kvscope_version: "test".into(), sources: vec![], note: None };
    m.begin_capture("kimi.kvcap", &header);
    // The file: a header, then one record per frame, each at the offset the reader reports.
    let mut file = Vec::new();
    proto::capture::write_header(&mut file, &header).unwrap();
    let stream = kvscope_corpus::kimi_k3_stream(0);
    for round in 0..3u64 {
        for f in &stream {
            let seq = f.seq + round * stream.len() as u64;
            let recv = 1_000 + seq;
            let record = proto::capture::encode_record_parts(0, recv, false, &[f.topic.as_bytes(), &seq.to_be_bytes(), f.payload]);
            let offset = file.len() as u64;
            file.extend_from_slice(&record);
            m.apply_capture_record(proto::capture::decode_record(&record).unwrap(), offset, record.len() as u32, 0.0);
        }
    }
    assert!(m.memory().bound_reached, "the first frames' bytes are dropped");
    let key = m.frame_key(0).unwrap();
    assert_eq!(m.fetch_state(key), FetchState::NoServer, "without the file there is nothing to read again");
    m.capture_file_kept = true;
    assert_eq!(m.event_detail(0).unwrap().bytes_from, BytesFrom::Gone(FetchState::NotAsked));
    assert!(BytesFrom::Gone(FetchState::NotAsked).sentence(1, true).contains("The capture file still has them."));
    let span = m.capture_span(key).expect("the first record's place in the file");
    let at = |s: CaptureSpan| &file[s.offset as usize..(s.offset + u64::from(s.len)) as usize];
    m.fetch_started(key);
    m.accept_capture_record(key, at(span)).unwrap();
    let d = m.event_detail(0).unwrap();
    assert_eq!(d.bytes_from, BytesFrom::Capture);
    assert_eq!(d.payload, stream[0].payload);
    assert!(d.verdicts.iter().all(|(_, _, rule)| !rule.is_empty()), "{:?}", d.verdicts);
    // Another record than the one asked for (the file changed on disk) is refused, and said.
    let later = (1..).map(|id| m.frame_key(id).unwrap()).find(|k| k.seq != key.seq).unwrap();
    let err = m.accept_capture_record(later, at(span)).unwrap_err();
    assert!(err.starts_with("the capture file holds another frame there than the one asked for"), "{err}");
    // A re-classification keeps the places (the file is the only way back to those bytes).
    let mut changed = m.config().clone();
    changed.block_size = 16;
    m.reconfigure(changed);
    assert_eq!(m.capture_span(key), Some(span));
    assert!(m.capture_file_kept);
}

#[test]
fn event_records_stay_within_their_bound_with_their_timeline_marks() {
    let mut c = config(1536);
    c.retain_events = 1_000;
    let mut m = Model::new(c);
    m.apply_message(hello(3, 1536), 0.0);
    for _ in 0..5 {
        for f in kimi_frames() {
            m.apply_message(f, 0.0);
        }
    }
    let mem = m.memory();
    assert!(mem.event_bound_reached, "{mem:?}");
    assert!(mem.retained_events <= 1_000 && mem.retained_events >= 950, "{mem:?}");
    assert!(mem.evicted_events > 0);
    assert!(m.event_loc(0).is_none());
    let marks: usize = m.lanes().iter().map(|l| l.len()).sum();
    assert_eq!(marks, mem.retained_events, "a timeline mark per retained record");
    assert!(m.lanes().iter().all(|l| l.event_id.iter().all(|&id| m.event_loc(id).is_some())));
    // The evicted marks live on in the lanes' buckets: the timeline still starts at the start.
    assert!(m.lanes().iter().take(3).all(|l| !l.buckets.is_empty()));
    let first_mark = m.lanes().iter().filter_map(|l| l.time_ms.first().copied()).fold(f64::INFINITY, f64::min);
    assert!(m.time_span_ms().0 < first_mark, "{:?} vs {first_mark}", m.time_span_ms());
}

#[test]
fn the_inspector_explains_an_event_under_both_policies() {
    let m = loaded(1536);
    let id = m.next_marked(Side::A, None, kvscope_engine_protocol::Severity::Fatal).expect("a fatal event under legacy");
    let d = m.event_detail(id).unwrap();
    assert_eq!(d.verdicts[0].0, "legacy");
    assert!(d.verdicts[0].2.contains("fatal block_size_mismatch"), "{}", d.verdicts[0].2);
    assert!(d.verdicts[1].2.contains("skip offload_block_size_mismatch"), "{}", d.verdicts[1].2);
    assert!(d.verdicts[1].2.contains("12288 != 1536"), "{}", d.verdicts[1].2);
    let r = m.event_ref(id).unwrap();
    assert_eq!(m.find_event(&r), Some(id));
}

#[test]
fn a_download_opens_back_to_the_same_counts() {
    let m = loaded(1536);
    let bytes = m.to_kvcap(0);
    let mut reader = proto::capture::CaptureReader::new(std::io::Cursor::new(&bytes[..])).unwrap();
    let mut m2 = Model::new(config(1536));
    m2.begin_capture("x.kvcap", &reader.header().clone());
    while let Some(r) = reader.next_record().unwrap() {
        m2.apply_record(r, 0.0);
    }
    for w in 0..3 {
        for side in [Side::A, Side::B] {
            assert_eq!(m.source(w).unwrap().counts(side).rows(m.classes()), m2.source(w).unwrap().counts(side).rows(m2.classes()));
        }
    }
    let jsonl = m.to_jsonl();
    assert_eq!(jsonl.lines().count(), m.retained_events());
}

#[test]
fn the_indexer_log_marks_where_legacy_exits() {
    let m = loaded(1536);
    let a = m.log(Side::A);
    assert!(a.iter().any(|l| l.fatal), "{a:?}");
    let b = m.log(Side::B);
    assert!(b.iter().all(|l| !l.fatal));
    assert!(b.iter().any(|l| l.text.contains("offload_block_size_mismatch")), "{b:?}");
}

#[test]
fn the_differences_name_the_same_events_under_each_policy() {
    let m = loaded(1536);
    let d = m.differences();
    let n = d.iter().find(|d| d.a.is_some_and(|c| c.kind == Outcome::Fatal)).expect("a fatal under A");
    let (a, b) = (n.a.as_ref(), n.b.as_ref());
    assert_eq!(b.unwrap().describe(), "skipped offload_block_size_mismatch on host_pinned");
    assert_eq!(a.unwrap().describe(), "fatal block_size_mismatch on device (medium \"cpu\" fell back)");
    let fatal: u64 = (0..3).map(|w| count(&m, w, Side::A, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch))).sum();
    assert_eq!(n.events, fatal);
    // Its link opens an event with exactly those verdicts.
    let first = m.event_loc(n.first_event).expect("the first differing event is retained");
    assert_eq!(m.classes().get(first.class[0]), a);
    assert_eq!(m.classes().get(first.class[1]), b);
}

#[test]
fn the_tier_trees_hold_what_policy_b_applied() {
    let m = loaded(1536);
    for w in 0..3 {
        let device = m.trees().blocks(w, StorageTier::Device);
        assert!(device > 0);
        let s = m.trees().summary(w, StorageTier::Device).unwrap();
        assert_eq!(s.blocks as u64, device);
        let hash = s.largest[0].root;
        assert!(m.trees().search(hash).iter().any(|(src, tier, _)| *src == w && *tier == StorageTier::Device));
    }
}

#[test]
fn every_policy_preset_can_be_chosen_for_either_side() {
    for name in policy_run::policy_names() {
        let mut m = loaded(1536);
        let mut c = m.config().clone();
        c.policy_a = name.to_owned();
        m.reconfigure(c);
        assert_eq!(m.policy_name(Side::A), name);
        assert!(m.config_error.is_none());
        for w in 0..3 {
            let r = reference(w, name, 1536);
            assert_eq!(m.source(w).unwrap().counts(Side::A).events, r.total_events(), "{name} w{w}");
            assert_eq!(count(&m, w, Side::A, Outcome::Fatal, Reason::Label(VerdictLabel::BlockSizeMismatch)), r.fatal_count, "{name} w{w}");
        }
    }
    let mut m = Model::new(Config { policy_a: "nope".into(), ..config(1536) });
    m.apply_message(hello(1, 1536), 0.0);
    assert_eq!(m.policy_name(Side::A), "legacy", "an unknown name falls back to the default");
    assert!(m.config_error.as_deref().unwrap_or_default().contains("unknown policy \"nope\""));
}

fn hostile_batch(n: u32) -> Vec<u8> {
    kvscope_encode::raw::unknown_event_flood(n as usize)
}

pub(crate) fn frame(source: u32, seq: u64, payload: Vec<u8>) -> proto::Message {
    proto::Message::Frame(proto::Frame { source, seq, recv_time_nanos: 1_000_000_000 + seq, replayed: false, topic: vec![], payload })
}

#[test]
fn a_hostile_batch_of_a_million_tiny_events_is_classified_and_the_stream_goes_on() {
    const N: u32 = 1_000_000;
    let mut m = Model::new(config(1536));
    m.apply_message(hello(3, 1536), 0.0);
    let kimi = kvscope_corpus::kimi_k3_stream(0);
    m.apply_message(frame(0, 0, kimi[0].payload.to_vec()), 0.0);
    m.apply_message(frame(0, 1, hostile_batch(N)), 0.0);
    for (i, f) in kimi.iter().enumerate().skip(1).take(5) {
        m.apply_message(frame(0, i as u64 + 1, f.payload.to_vec()), 0.0);
    }
    let s = m.source(0).unwrap();
    assert_eq!(s.frames, 7);
    assert_eq!(s.decode_errors, 0);
    let kimi_events: u64 = kimi.iter().take(6).map(|f| kvscope_wire::decode_batch(f.payload).unwrap().events.len() as u64).sum();
    for side in [Side::A, Side::B] {
        assert_eq!(s.counts(side).events, kimi_events + u64::from(N), "{side:?}");
        assert_eq!(count(&m, 0, side, Outcome::Skip, Reason::Label(VerdictLabel::IgnoredEvent)), u64::from(N), "{side:?}");
    }
}

#[test]
fn a_payload_over_the_bound_is_a_frame_error_not_decoded() {
    let mut m = Model::new(Config { max_frame_bytes: 1000, ..config(1536) });
    m.apply_message(hello(1, 1536), 0.0);
    m.apply_message(frame(0, 0, hostile_batch(600)), 0.0);
    m.apply_message(frame(0, 1, hostile_batch(10)), 0.0);
    let s = m.source(0).unwrap();
    assert_eq!((s.frames, s.frame_errors, s.counts(Side::B).events), (1, 1, 10));
    let error = s.last_error.clone().unwrap();
    assert!(
        error.starts_with("0:0 seq 0: payload of 1214 bytes is larger than this page's bound of 1000 bytes (frame_too_large)"),
        "{error}"
    );
}

#[test]
fn the_recording_status_is_kept_for_the_fleet_bar() {
    let mut m = Model::new(config(1536));
    m.apply_message(hello(1, 1536), 0.0);
    let status = proto::RecordingStatus {
        path: "x.kvcap".into(),
        state: proto::RecordingState::Failed,
        error: Some("x.kvcap: No space left on device (os error 28)".into()),
        records: 10,
        bytes: 100,
        dropped_records: 3,
    };
    m.apply_message(proto::Message::RecordingStatus(status.clone()), 0.0);
    assert_eq!(
        m.recording.as_ref().unwrap().summary(),
        "recording stopped: x.kvcap: No space left on device (os error 28) (3 later frames are not in the capture; the relay and this page go on)"
    );
}

#[test]
fn fallback_policies_are_the_default_settings() {
    // make_runs falls back to these presets when a setting names an unknown one.
    assert_eq!(Policy::LEGACY.name, settings::DEFAULT_POLICY_A);
    assert_eq!(Policy::FIXED.name, settings::DEFAULT_POLICY_B);
}

#[test]
fn catching_up_counts_the_history_the_server_announced_until_it_is_complete() {
    let mut m = Model::new(config(1536));
    m.apply_message(hello(3, 1536), 0.0);
    assert_eq!(m.catching_up(), None, "nothing announced yet");
    let frames = kimi_frames();
    m.apply_message(proto::Message::HistoryStart(proto::HistoryStart { frames: frames.len() as u64, bytes: 1 }), 0.0);
    assert_eq!(m.catching_up(), Some((0, frames.len() as u64)));
    for f in frames.iter().take(10).cloned() {
        m.apply_message(f, 0.0);
    }
    assert_eq!(m.catching_up(), Some((10, frames.len() as u64)));
    m.apply_message(proto::Message::HistoryComplete(proto::HistoryComplete { frames: 10, evicted_frames: 0, bytes: 1 }), 0.0);
    assert_eq!(m.catching_up(), None, "live after the history");
}

#[test]
fn a_reclassification_while_catching_up_keeps_the_progress() {
    let mut m = Model::new(config(1536));
    m.apply_message(hello(3, 1536), 0.0);
    m.apply_message(proto::Message::HistoryStart(proto::HistoryStart { frames: 40, bytes: 1 }), 0.0);
    for f in kimi_frames().into_iter().take(12) {
        m.apply_message(f, 0.0);
    }
    m.reconfigure(Config { block_size: 12288, ..config(1536) });
    assert_eq!(m.catching_up(), Some((12, 40)));
}

/// A server that discovers its fleet: relays arrive after the hello and join the router's side,
/// a relay that moved keeps what it holds, and one that left is counted as such in the fleet bar,
/// also after the page re-classifies.
#[test]
fn discovered_sources_join_after_the_hello_and_left_ones_are_counted() {
    let mut m = Model::new(config(16));
    let proto::Message::Hello(mut hello) = hello(1, 16) else { unreachable!() };
    hello.discovery = vec!["etcd://127.0.0.1:2379".into()];
    m.apply_message(proto::Message::Hello(hello), 0.0);
    assert!(m.router().is_some(), "a discovering server's page has a router side before any relay is known");

    let relay = proto::SourceInfo::discovered_relay(1, "0", 0, "zmq://127.0.0.1:5600");
    m.apply_message(proto::Message::SourceChanged(relay.clone()), 0.0);
    assert_eq!(m.source(1).map(|s| (s.key.as_str(), s.kind)), Some(("relay:0:0", proto::SourceKind::EventPlane)));
    m.apply_message(
        proto::Message::Frame(proto::Frame {
            source: 1,
            seq: 0,
            recv_time_nanos: 1,
            replayed: false,
            topic: b"kv-events".to_vec(),
            payload: vec![0x90],
        }),
        0.0,
    );
    let frames = m.source(1).map(|s| s.frames);
    // Restarted on another port: the same source, with what it had.
    let moved = proto::SourceInfo { endpoint: "zmq://127.0.0.1:5611".into(), ..relay };
    m.apply_message(proto::Message::SourceChanged(moved), 0.0);
    assert_eq!(m.source(1).map(|s| (s.frames, s.endpoint.as_str())), Some((frames.unwrap_or_default(), "zmq://127.0.0.1:5611")));

    let left = proto::SourceStatus {
        source: 1,
        state: proto::ConnState::Left,
        error: Some("left".into()),
        since_unix_nanos: 5,
        last_seq: None,
        last_recv_unix_nanos: None,
        counters: proto::SourceCounters::default(),
        gaps: Vec::new(),
    };
    m.apply_message(proto::Message::SourceStatus(left), 0.0);
    let store =
        proto::StoreStatus { url: "etcd://127.0.0.1:2379".into(), error: Some("cannot connect".into()), failures: 2, bad_records: 0 };
    m.apply_message(proto::Message::DiscoveryStatus(proto::DiscoveryStatus { stores: vec![store], sources: 1, left: 1 }), 0.0);
    let bar = crate::summarize::bar(&m, &crate::summarize::EdgeState::default(), 0.0);
    assert!(bar.sources.ends_with(" · 1 event planes · 1 left"), "{}", bar.sources);
    assert_eq!(
        bar.discovery,
        Some(("discovered 1 sources, 1 left · etcd://127.0.0.1:2379 cannot be read: cannot connect".to_owned(), true))
    );
    m.reconfigure(Config { block_size: 32, ..config(16) });
    assert!(m.router().is_some() && m.source(1).is_some_and(|s| s.key == "relay:0:0"));
    let bar = crate::summarize::bar(&m, &crate::summarize::EdgeState::default(), 0.0);
    assert!(bar.sources.ends_with("1 left"), "{}", bar.sources);
}

/// A capture recorded while discovering (format 4): the page adds the relay its discovery
/// source announces and marks it left where the recorder saw it go; the discovery source itself
/// is no event plane.
#[test]
fn a_capture_s_discovery_events_add_and_retire_sources() {
    let mut m = Model::new(config(16));
    let discovery = proto::SourceInfo {
        index: 1,
        key: "discovery".into(),
        worker_id: String::new(),
        dp_rank: 0,
        endpoint: "dynamo-file:/kv".into(),
        replay_endpoint: None,
        kind: proto::SourceKind::Discovery,
        event_plane: None,
        block_size: None,
    };
    let header = proto::capture::CaptureHeader {
        created_unix_nanos: 0,
        kvscope_version: "test".into(),
        sources: vec![source_info(0), discovery],
        note: None,
    };
    m.begin_capture("run.kvcap", &header);
    let event = |at: u64, e: proto::capture::DiscoveryEvent| {
        proto::capture::decode_record(&proto::capture::encode_record_parts(1, at, false, &e.frames())).unwrap()
    };
    let relay = proto::SourceInfo::discovered_relay(2, "0", 0, "zmq://127.0.0.1:5600");
    m.apply_capture_record(event(10, proto::capture::DiscoveryEvent::Source(relay)), 0, 0, 0.0);
    assert_eq!(m.source(2).map(|s| s.key.as_str()), Some("relay:0:0"));
    assert!(m.router().is_some());
    m.apply_capture_record(event(20, proto::capture::DiscoveryEvent::Left { source: 2 }), 0, 0, 0.0);
    let status = m.source(2).and_then(|s| s.status.clone()).map(|s| (s.state, s.since_unix_nanos));
    assert_eq!(status, Some((proto::ConnState::Left, 20)));
    let bar = crate::summarize::bar(&m, &crate::summarize::EdgeState::default(), 0.0);
    assert_eq!(bar.sources, "1 workers · 1 event planes · 1 left");
}

/// A source whose model has its own block size (`SourceInfo::block_size`, from discovery) is
/// classified at it, whatever the page's: the Kimi-K3 workers at 1536 on a page set to 16 count
/// exactly as on a page set to 1536.
#[test]
fn a_source_at_its_own_block_size_is_classified_at_it() {
    let mut at_1536 = Model::new(config(1536));
    at_1536.apply_message(hello(3, 1536), 0.0);
    let mut own = Model::new(config(16));
    let sources = (0..3).map(|i| proto::SourceInfo { block_size: Some(1536), ..source_info(i) }).collect();
    own.apply_message(hello_of(sources, 16), 0.0);
    for f in kimi_frames() {
        at_1536.apply_message(f.clone(), 0.0);
        own.apply_message(f, 0.0);
    }
    at_1536.refresh_index();
    own.refresh_index();
    for i in 0..3 {
        for side in [Side::A, Side::B] {
            let (a, b) = (at_1536.source(i).unwrap().counts(side), own.source(i).unwrap().counts(side));
            assert!(a.events > 0);
            assert_eq!((a.events, &a.by_class, &a.first_fatal), (b.events, &b.by_class, &b.first_fatal), "source {i}");
            // The router's index model reads it at that size too.
            let index = |m: &Model| m.index().counts(side, i).cloned();
            assert!(index(&at_1536).is_some_and(|c| c.blocks.engine_blocks > 0), "source {i} holds blocks");
            assert_eq!(index(&own), index(&at_1536), "source {i}'s blocks in {side:?}'s index");
        }
    }
    for side in [Side::A, Side::B] {
        let exits = |m: &Model| m.index().report(side).map(|r| r.indexer_exits);
        assert_eq!(exits(&own), exits(&at_1536), "{side:?}'s index exits where the classification says");
    }
}

/// The router-index model's bound (`?indexnodes=`): past it the indexes model no more stores,
/// and the memory line says how many, and the setting that raises it.
#[test]
fn the_index_bound_keeps_stores_out_and_the_memory_line_says_so() {
    let mut small = config(1536);
    small.index_nodes = 4;
    let mut m = Model::new(small);
    m.apply_message(hello(3, 1536), 0.0);
    let mut roomy = Model::new(config(1536));
    roomy.apply_message(hello(3, 1536), 0.0);
    for f in kimi_frames() {
        m.apply_message(f.clone(), 0.0);
        roomy.apply_message(f, 0.0);
    }
    let (mem, calm) = (m.memory(), roomy.memory());
    assert!(mem.index_nodes > 0 && mem.index_nodes <= 2 * 4, "each index keeps at most 4 nodes: {mem:?}");
    assert!(mem.index_refused_stores > 0, "{mem:?}");
    assert!(calm.index_nodes > mem.index_nodes && calm.index_refused_stores + calm.index_refused_blocks == 0, "{calm:?}");
    let line = crate::summarize::memory_text(&mem);
    assert!(
        line.contains("index bound of 4 nodes reached: ")
            && line.ends_with("(raise with the server's --index-max-nodes, or ?indexnodes=N for this page)"),
        "{line}"
    );
    assert!(!crate::summarize::memory_text(&calm).contains("bound"), "{}", crate::summarize::memory_text(&calm));
}

/// The tier trees' bound (a quarter of `?mem=` each): past it the trees take no more blocks,
/// and the memory line says how many they did not take.
#[test]
fn the_tier_tree_bound_is_said_with_what_it_kept_out() {
    let mut c = config(1536);
    // Trees of at most 4 KiB each, against the 90 blocks (7.5 KiB) policy B's trees hold.
    c.retain_bytes = 16 * 1024;
    let mut m = Model::new(c);
    m.apply_message(hello(3, 1536), 0.0);
    for f in kimi_frames() {
        m.apply_message(f, 0.0);
    }
    let mem = m.memory();
    assert!(mem.tree_bound_reached && mem.tree_refused_blocks > 0, "{mem:?}");
    let line = crate::summarize::memory_text(&mem);
    assert!(line.contains(&format!("tier-tree bound reached: {} blocks not placed", mem.tree_refused_blocks)), "{line}");
}
