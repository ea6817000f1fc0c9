use super::*;
use crate::source_state::TrackedSource;

#[derive(Default)]
struct Collect {
    frames: Vec<(u64, bool)>,
    errors: Vec<String>,
}

impl Output for Collect {
    fn frame(&mut self, f: &proto::Frame, _: &[Bytes], _: Option<kvscope_wire::Decoded>) {
        self.frames.push((f.seq, f.replayed));
    }
    fn frame_error(&mut self, e: &proto::FrameError, _: &[Bytes]) {
        self.errors.push(e.text.clone());
    }
    fn status(&mut self, _: &proto::SourceStatus) {}
}

fn info(replay: bool) -> proto::SourceInfo {
    proto::SourceInfo {
        index: 0,
        key: "0:0".into(),
        worker_id: "0".into(),
        dp_rank: 0,
        endpoint: "tcp://127.0.0.1:1".into(),
        replay_endpoint: replay.then(|| "tcp://127.0.0.1:2".into()),
        kind: proto::SourceKind::Engine,
        event_plane: None,
        block_size: None,
    }
}

fn live(seq: u64) -> Vec<Bytes> {
    vec![Bytes::from_static(b"kv"), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from_static(b"\x90")]
}

fn reply(seq: u64) -> Vec<Bytes> {
    vec![Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from_static(b"\x90")]
}

#[test]
fn a_gap_is_replayed_in_order_before_the_frame_that_revealed_it() {
    let joined_as_is = StreamOptions { late_join_replay: false, ..StreamOptions::default() };
    let mut p = Pipeline::new(&info(true), None, None, Collect::default()).with_options(joined_as_is);
    for seq in [5, 6] {
        assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
    }
    let LiveOutcome::Gap(mut held) = p.live(live(10), 0) else { panic!() };
    assert_eq!((held.from_seq, held.to_seq), (7, 9));
    assert!(p.replay_reply(&mut held, reply(6), 0)); // already seen: dropped
    assert!(p.replay_reply(&mut held, reply(7), 0));
    assert!(p.replay_reply(&mut held, reply(8), 0));
    assert!(!p.replay_reply(&mut held, reply(9), 0));
    p.finish_gap(held, None);
    assert_eq!(p.output.frames, vec![(5, false), (6, false), (7, true), (8, true), (9, true), (10, false)]);
    let c = p.counters();
    assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (1, 0, 3, 6));
}

#[test]
fn a_gap_without_replay_is_lost_and_says_which_flag() {
    let mut p = Pipeline::new(&info(false), None, None, Collect::default());
    p.live(live(0), 0);
    let LiveOutcome::Gap(held) = p.live(live(4), 0) else { panic!() };
    p.finish_gap(held, None);
    let gap = p.gaps().next().unwrap().clone();
    assert_eq!((gap.from_seq, gap.to_seq, gap.lost_frames, gap.state), (1, 3, 3, proto::GapState::Unrecovered));
    assert_eq!(
        gap.reason.unwrap(),
        "no replay endpoint configured for 0:0; pass --replay \"0:0=tcp://HOST:PORT\" with the engine's replay port"
    );
}

#[test]
fn a_late_join_replays_from_zero_and_names_what_the_buffer_no_longer_held() {
    let mut p = Pipeline::new(&info(true), None, None, Collect::default());
    let LiveOutcome::Gap(mut held) = p.live(live(8), 0) else { panic!("a first seq above 0 is a late join") };
    assert_eq!((held.from_seq, held.to_seq), (0, 7));
    // The engine's buffer starts at 3: 0..=2 are gone.
    for seq in 3..7 {
        assert!(p.replay_reply(&mut held, reply(seq), 0));
    }
    assert!(!p.replay_reply(&mut held, reply(7), 0));
    p.finish_gap(held, None);
    assert_eq!(p.output.frames, vec![(3, true), (4, true), (5, true), (6, true), (7, true), (8, false)]);
    let c = p.counters();
    assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (1, 3, 5, 6));
    let gap = p.gaps().next().unwrap().clone();
    assert_eq!((gap.from_seq, gap.to_seq, gap.recovered_frames, gap.state), (0, 7, 5, proto::GapState::Partial));
    assert_eq!(
        gap.reason.unwrap(),
        "joined the stream at seq 8, replayed from 0: the engine's replay buffer no longer held seq 0..=2; \
         raise the engine's replay buffer size"
    );
    // Later jumps are ordinary gaps, and an engine restart is not a late join.
    for seq in [9, 0] {
        assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
    }
}

#[test]
fn a_late_join_is_taken_as_is_without_replay_or_when_turned_off() {
    let mut p = Pipeline::new(&info(false), None, None, Collect::default());
    assert!(matches!(p.live(live(8), 0), LiveOutcome::Done));
    let off = StreamOptions { late_join_replay: false, ..StreamOptions::default() };
    let mut p = Pipeline::new(&info(true), None, None, Collect::default()).with_options(off);
    assert!(matches!(p.live(live(8), 0), LiveOutcome::Done));
    assert_eq!(p.counters().gaps, 0);
}

#[test]
fn a_replay_that_stops_early_reports_the_tail_it_did_not_deliver() {
    let mut p = Pipeline::new(&info(true), None, None, Collect::default());
    p.live(live(0), 0);
    let LiveOutcome::Gap(mut held) = p.live(live(10), 0) else { panic!() };
    assert!(p.replay_reply(&mut held, reply(1), 0));
    assert!(p.replay_reply(&mut held, reply(2), 0));
    p.finish_gap(held, None);
    let gap = p.gaps().next().unwrap().clone();
    assert_eq!((gap.recovered_frames, gap.lost_frames), (2, 7));
    assert!(gap.reason.unwrap().contains("no longer held seq 3..=9;"));
}

#[test]
fn an_oversized_payload_is_refused_before_decoding_and_its_seq_consumed() {
    let small = StreamOptions { max_frame_bytes: 4, ..StreamOptions::default() };
    let mut p = Pipeline::new(&info(false), None, None, Collect::default()).with_options(small);
    p.live(live(0), 0);
    let big = vec![Bytes::from_static(b"kv"), Bytes::copy_from_slice(&1u64.to_be_bytes()), Bytes::from_static(b"\x95\x90\x90\x90\x90\x90")];
    p.live(big, 0);
    p.live(live(2), 0);
    assert_eq!(p.output.frames, vec![(0, false), (2, false)]);
    assert_eq!(
        p.output.errors,
        vec![
            "0:0 seq 1: payload of 6 bytes is larger than --max-frame-bytes 4; refused before decoding \
              (raise --max-frame-bytes if this engine's batches are really that large)"
                .to_owned()
        ]
    );
    let c = p.counters();
    assert_eq!((c.frame_errors, c.frames, c.gaps), (1, 2, 0));
}

#[test]
fn seq_back_to_zero_is_a_restart_not_a_gap() {
    let mut p = Pipeline::new(&info(true), None, None, Collect::default());
    for seq in [0, 1, 2, 0, 1] {
        assert!(matches!(p.live(live(seq), 0), LiveOutcome::Done));
    }
    let c = p.counters();
    assert_eq!((c.restarts, c.gaps, c.frames), (1, 0, 5));
}

#[test]
fn capture_replay_counts_gaps_like_the_live_server() {
    // Live: 0 1 [gap 2..=4, replay delivered 2 and 3] 5, recorded in relay order.
    let mut p = Pipeline::new(&info(true), None, None, Collect::default());
    p.capture_record(live(0), 0, false);
    p.capture_record(live(1), 0, false);
    p.capture_record(reply(2), 0, true);
    p.capture_record(reply(3), 0, true);
    p.capture_record(live(5), 0, false);
    p.capture_record(live(9), 0, false);
    let c = p.counters().clone();
    assert_eq!((c.gaps, c.lost_frames, c.replayed_frames, c.frames), (2, 1 + 3, 2, 6));
    let gaps: Vec<_> = p.gaps().map(|g| (g.from_seq, g.to_seq, g.recovered_frames, g.lost_frames)).collect();
    assert_eq!(gaps, vec![(2, 4, 2, 1), (6, 8, 0, 3)]);
}

#[test]
fn framing_errors_are_counted_and_the_stream_goes_on() {
    let mut p = Pipeline::new(&info(false), None, None, Collect::default());
    p.live(vec![Bytes::from_static(b"kv"), Bytes::from_static(b"\x90")], 0);
    p.live(vec![Bytes::from_static(b"kv"), Bytes::from_static(b"\x01\x02"), Bytes::from_static(b"\x90")], 0);
    p.live(live(0), 0);
    assert_eq!(
        p.output.errors,
        vec![
            "0:0: expected 3 frames [topic, seq, payload], got 2".to_owned(),
            "0:0: expected an 8-byte big-endian sequence number in frame 1, got 2 bytes".to_owned(),
        ]
    );
    assert_eq!((p.counters().frame_errors, p.counters().frames), (2, 1));
}
