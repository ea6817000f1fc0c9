//! The coordinator's rounds against one engine: K engines, each reading its shard, every
//! message between them and the coordinator as bytes, make the summary one engine makes.

use kvscope_engine_protocol::view::Trees;
use kvscope_engine_protocol::{Settings, Severity, Side, Summary, ViewQuery};
use kvscope_protocol as proto;

use super::protocol::{self, FromShard, ToShard};
use super::{InProcess, Out};
use crate::model::shard::{self, Shard};
use crate::model::tests::{hello, kimi_frames};
use crate::summarize::TimelineImage;

/// A message as another worker reads it.
fn through_bytes<T: serde::Serialize + serde::de::DeserializeOwned>(message: T) -> T {
    protocol::decode(&protocol::encode(&message)).expect("a message between workers")
}

/// `count` engines behind a coordinator, every message as bytes (answers included).
struct Fleet(InProcess);

impl Fleet {
    fn new(count: u32, query: &ViewQuery) -> Fleet {
        let mut f = InProcess::new(count, query.settings.clone());
        f.set_view(query.clone());
        Fleet(f)
    }

    fn server(&mut self, messages: &[proto::Message]) {
        for m in messages {
            self.0.apply_server_message(&proto::encode(m), 0.0);
        }
    }

    fn deliver(&mut self, queue: Vec<Out>) -> Vec<(Summary, Option<TimelineImage>)> {
        self.0.deliver_with(queue, 0.0, &through_bytes::<ToShard>, &through_bytes::<FromShard>)
    }

    fn summary(&mut self) -> (Summary, Option<TimelineImage>) {
        let outs = self.0.coordinator.flush(true);
        self.deliver(outs).pop().expect("a summary")
    }
}

/// One engine's summary and pixels of the same stream and view.
fn one_engine(query: &ViewQuery, messages: &[proto::Message]) -> (InProcess, Summary, Option<TimelineImage>) {
    let mut e = InProcess::one(query.settings.clone());
    e.set_view(query.clone());
    for m in messages {
        e.apply_server_message(&proto::encode(m), 0.0);
    }
    let (s, pixels) = e.summarize(0.0, true).expect("a summary");
    (e, s, pixels)
}

/// Event ids aside (each shard numbers its own), by name where a part names an event.
fn without_ids(
    mut s: Summary,
    name: &dyn Fn(u64) -> Option<kvscope_engine_protocol::EventRef>,
) -> (Summary, Vec<Option<kvscope_engine_protocol::EventRef>>) {
    let mut names = Vec::new();
    if let Some(h) = &mut s.headline {
        for d in &mut h.differences {
            names.push(name(d.first_event));
            d.first_event = 0;
        }
        for p in &mut h.policies {
            if let Some(e) = &mut p.exit {
                names.push(name(e.event_id));
                e.event_id = 0;
            }
        }
    }
    if let Some(Some(i)) = &mut s.inspector {
        names.push(name(i.id));
        i.id = 0;
    }
    if let Some(sel) = &mut s.selection {
        names.push(sel.id.and_then(name));
        sel.id = None;
    }
    let counters = |t: &mut Trees, names: &mut Vec<_>| {
        for c in &mut t.counters {
            names.push(c.first_event.take().and_then(name));
        }
    };
    if let Some(t) = &mut s.trees {
        counters(t, &mut names);
    }
    (s, names)
}

/// `finding`: the stream has one (an exit or a disagreement), which opens the inspector.
fn the_rounds_make_one_engine_s_summary(messages: &[proto::Message], query: &ViewQuery, finding: bool) {
    let (whole, expected, expected_pixels) = one_engine(query, messages);
    assert_eq!(expected.inspector.as_ref().is_some_and(Option::is_some), finding, "the first finding opens the inspector");
    for count in [1, 2, 3] {
        let mut fleet = Fleet::new(count, query);
        fleet.server(messages);
        // The first flush hands every shard the fleet's exit; the second shows what follows.
        fleet.summary();
        fleet.0.coordinator.resend_all();
        let (got, pixels) = fleet.summary();
        let shards = &fleet.0.shards;
        let in_shard = |id: u64| shards.get(shard::of_event_id(id) as usize)?.model().event_ref(id);
        let (mut got, got_names) = without_ids(got, &in_shard);
        let (mut expected, expected_names) = without_ids(expected.clone(), &|id| whole.shards[0].model().event_ref(id));
        assert_eq!(got_names, expected_names, "{count} shards name the same events");
        assert_eq!(got.bar.as_ref().map(|b| b.engines), Some(count), "the bar says how many engine workers");
        // Each shard holds its own memory.
        for s in [&mut got, &mut expected] {
            if let Some(bar) = &mut s.bar {
                (bar.memory, bar.engines) = (String::new(), 0);
            }
        }
        let parts = |s: &Summary| {
            [
                format!("{:?}", s.meta),
                format!("{:?}", s.bar),
                format!("{:?}", s.quality),
                format!("{:?}", s.headline),
                format!("{:?}", s.overview),
                format!("{:?}", s.cards),
                format!("{:?}", s.planes),
                format!("{:?}", s.timeline),
                format!("{:?}", s.inspector),
                format!("{:?}", s.logs),
                format!("{:?}", s.trees),
                format!("{:?}", s.selection),
            ]
        };
        for (i, (g, e)) in parts(&got).iter().zip(parts(&expected)).enumerate() {
            let at = g.bytes().zip(e.bytes()).position(|(a, b)| a != b).unwrap_or(g.len().min(e.len()));
            let near = |s: &str| s.get(at.saturating_sub(80)..(at + 160).min(s.len())).unwrap_or_default().to_owned();
            assert_eq!(g, &e, "part {i} of the summary of {count} shards differs at {at}: {} | {}", near(g), near(&e));
        }
        assert!(pixels == expected_pixels, "the timeline's pixels of {count} shards");
    }
}

fn kimi() -> Vec<proto::Message> {
    std::iter::once(hello(3, 1536)).chain(kimi_frames()).collect()
}

#[test]
fn the_rounds_make_one_engine_s_summary_of_the_kimi_k3_incident() {
    let query = ViewQuery { canvas_width: 640.0, device_pixel_ratio: 1.0, ..ViewQuery::default() };
    the_rounds_make_one_engine_s_summary(&kimi(), &query, true);
    let opened = ViewQuery {
        settings: Settings { tree: Some(("1:0".into(), "device".into())), hash: "not a hash".into(), ..Settings::default() },
        range: Some((0.0, 150.0)),
        ..query
    };
    the_rounds_make_one_engine_s_summary(&kimi(), &opened, true);
}

#[test]
fn next_fatal_walks_the_fleet_in_stream_order_and_wraps() {
    let query = ViewQuery::default();
    let mut fleet = Fleet::new(2, &query);
    fleet.server(&kimi());
    fleet.summary();
    let mut seen = Vec::new();
    for _ in 0..8 {
        let outs = fleet.0.coordinator.select_next(Severity::Fatal);
        fleet.deliver(outs);
        let (s, _) = fleet.summary();
        let at = fleet.0.coordinator.selection().and_then(|id| fleet.0.shards[shard::of_event_id(id) as usize].model().stream_order(id));
        seen.push(at.expect("a fatal event selected"));
        assert!(s.inspector.is_some_and(|i| i.is_some_and(|i| i.verdicts[0].kind == Some(kvscope_normalize::Outcome::Fatal))));
    }
    let wrapped = seen.windows(2).filter(|w| w[1] <= w[0]).count();
    assert_eq!(wrapped, 1, "in stream order, wrapping once: {seen:?}");
    let owners: std::collections::HashSet<u32> = seen.iter().map(|o| o.source).collect();
    assert!(owners.len() >= 2, "fatal events of several workers: {owners:?}");
}

#[test]
fn a_hover_and_a_click_are_answered_by_the_shard_that_reads_the_lane() {
    let query = ViewQuery::default();
    let mut fleet = Fleet::new(3, &query);
    fleet.server(&kimi());
    fleet.summary();
    for source in 0..3 {
        let outs = fleet.0.coordinator.hover(source, Side::A, 0.0, 1e9);
        assert!(matches!(outs[..], [Out::Shard(i, _)] if Shard::of(&source.to_string(), 3) == i), "{outs:?}");
        fleet.deliver(outs);
        let text = fleet.0.hovers.pop().expect("an answer");
        assert!(text.starts_with(&format!("{source}:0 at ")) && text.contains("events under policy A"), "{text}");
    }
    fleet.0.coordinator.select(None);
    let outs = fleet.0.coordinator.select_at(1, Side::A, 80.0, 1e6);
    fleet.deliver(outs);
    let id = fleet.0.coordinator.selection().expect("the click opened an event");
    assert_eq!(fleet.0.shards[shard::of_event_id(id) as usize].model().event_ref(id).map(|r| r.source), Some("1:0".to_owned()));
}

#[test]
fn the_rounds_make_one_engine_s_summary_of_a_fleet_with_an_event_plane() {
    let (hello, messages) = crate::model::shard_tests::fleet_with_plane(12, 30);
    let all: Vec<proto::Message> = std::iter::once(hello).chain(messages).collect();
    let query = ViewQuery { canvas_width: 500.0, device_pixel_ratio: 2.0, ..ViewQuery::default() };
    the_rounds_make_one_engine_s_summary(&all, &query, false);
}

/// One engine loaded with the Kimi-K3 incident.
fn kimi_one() -> InProcess {
    let mut e = InProcess::one(Settings::default());
    for m in kimi() {
        e.apply_server_message(&proto::encode(&m), 0.0);
    }
    e
}

#[test]
fn a_summary_carries_what_changed_and_nothing_when_nothing_did() {
    let mut e = kimi_one();
    let (first, pixels) = e.summarize(0.0, false).expect("a first summary");
    assert!(first.meta.is_some() && first.bar.is_some() && first.overview.is_some() && first.timeline.is_some());
    assert_eq!(first.meta.as_ref().map(|m| m.block_size), Some(1536), "the server's default block size");
    assert!(pixels.is_none(), "no pixels before the page said how wide its canvas is");
    e.set_view(ViewQuery { canvas_width: 600.0, device_pixel_ratio: 2.0, ..e.coordinator.query().clone() });
    let pixels = e.summarize(0.0, false).and_then(|s| s.1).expect("pixels at the canvas's width");
    assert_eq!((pixels.width, pixels.rgba.len()), (1200, (pixels.width * pixels.height * 4) as usize), "600 CSS pixels at 2x");
    assert!(e.summarize(0.0, false).is_none(), "nothing changed");
    let forced = e.summarize(0.0, true).expect("forced");
    assert_eq!((forced.0.meta, forced.0.bar, forced.1), (None, None, None), "forced, but still only what changed");
    let query = e.coordinator.query().clone();
    e.set_view(ViewQuery { settings: Settings { block_size: Some(12288), ..Settings::default() }, ..query });
    let (after, _) = e.summarize(0.0, false).expect("a re-classification changes the page");
    assert_eq!(after.meta.map(|m| m.block_size), Some(12288));
    assert!(after.cards.is_some());
}

#[test]
fn a_socket_going_away_is_summarised_though_no_frame_arrived() {
    use kvscope_engine_protocol::view::{ConnBadge, ConnState, Tone};
    let mut e = kimi_one();
    assert!(e.summarize(0.0, false).is_some());
    assert!(e.summarize(0.0, false).is_none());
    let away = ConnState::Waiting { attempt: 0, delay_ms: 250.0, reason: "closed (code 1006)".into() };
    e.coordinator.set_conn(away.clone());
    let (s, _) = e.summarize(0.0, false).expect("the fleet bar must say the server is away");
    assert_eq!(s.bar.map(|b| b.badge), Some(ConnBadge { text: away.label(), tone: Tone::Warn }));
    e.coordinator.note_resources(Default::default(), 1 << 20);
    assert!(e.summarize(0.0, false).is_none(), "the memory figure alone is no reason for a summary");
}

#[test]
fn an_open_socket_behind_live_says_by_how_much_instead_of_connected() {
    use kvscope_engine_protocol::view::{ConnState, Tone};
    let mut e = InProcess::one(Settings::default());
    e.apply_server_message(&proto::encode(&hello(3, 1536)), 0.0);
    e.coordinator.set_conn(ConnState::Open);
    // The page's clock 1 h off the server's; the first round applied 5 ms after the server
    // got it, the rest 27 s late.
    e.shards[0].model_mut().wall_offset_ms = Some(3_600_000.0);
    for (i, f) in kimi_frames().into_iter().enumerate() {
        let proto::Message::Frame(frame) = &f else { unreachable!() };
        let late = if i < 3 { 5.0 } else { 27_005.0 };
        let now = frame.recv_time_nanos as f64 / 1e6 + late;
        e.apply_server_message(&proto::encode(&f), now);
    }
    let now = 1_000.0 + 20.0 * 10.0 + 27_005.0;
    // The intake still holds messages.
    e.shards[0].set_waiting(true);
    let badge = e.summarize(now, false).and_then(|(s, _)| s.bar).map(|b| b.badge).expect("a fleet bar");
    assert_eq!((badge.text.as_str(), badge.tone), ("behind live by 27.0 s, catching up at 228 frames/s", Tone::Warn));
    // Drained, and nothing for over a second: live again, whatever the last frame's delay.
    e.shards[0].set_waiting(false);
    let badge = e.summarize(now + 1_500.0, true).and_then(|(s, _)| s.bar).map(|b| b.badge).expect("a fleet bar");
    assert_eq!((badge.text.as_str(), badge.tone), ("connected", Tone::Ok));
}

#[test]
fn a_page_that_refreshes_less_often_says_so_in_the_fleet_bar() {
    let mut e = InProcess::one(Settings::default());
    e.apply_server_message(&proto::encode(&hello(3, 1536)), 0.0);
    let mut pace = crate::pace::Pace::default();
    e.coordinator.note_pace(&pace);
    let bar = e.summarize(0.0, false).and_then(|(s, _)| s.bar).expect("a fleet bar");
    assert_eq!(bar.pace, None, "ten summaries a second need no note");
    pace.took(120.0);
    e.coordinator.note_pace(&pace);
    let bar = e.summarize(10.0, true).and_then(|(s, _)| s.bar).expect("the bar changed: it says the pace");
    assert_eq!(
        bar.pace.as_deref(),
        Some("views refresh every 500 ms (not 100 ms): each refresh costs this page 120 ms of its main thread, held to 25% of its time")
    );
}

#[test]
fn the_first_exit_opens_by_itself_once_and_a_reclassification_keeps_the_selection() {
    for count in [1, 2] {
        let mut e = InProcess::new(count, Settings::default());
        for m in kimi() {
            e.apply_server_message(&proto::encode(&m), 0.0);
        }
        let (s, _) = e.summarize(0.0, false).unwrap();
        let selected = s.selection.and_then(|s| s.event).expect("the exit under legacy opens by itself");
        let id = e.coordinator.selection().expect("selected");
        let exit = e.shard_of(id).and_then(|m| m.model().indexer_exit(Side::A)).map(|x| x.event_id);
        assert_eq!(Some(id), exit, "{count} engines: the exit");
        // B's trees instead of A's re-classifies nothing; a new policy re-classifies all.
        let query = e.coordinator.query().clone();
        e.set_view(ViewQuery { settings: Settings { block_size: Some(1536), ..Settings::default() }, ..query.clone() });
        e.set_view(ViewQuery { settings: Settings { policy_a: Some("fixed".into()), ..Settings::default() }, ..query });
        assert!(e.summarize(0.0, false).is_some(), "re-classified");
        let now = e.coordinator.selection().and_then(|id| e.shard_of(id)?.model().event_ref(id));
        assert_eq!(now, Some(selected.clone()), "{count} engines: the same event, by name");
        e.select(None);
        assert!(e.summarize(0.0, false).unwrap().0.selection.is_some_and(|s| s.id.is_none()), "closed stays closed");
    }
}

#[test]
fn one_engine_walks_the_marked_events_and_wraps_and_hovers_its_lanes() {
    let mut e = kimi_one();
    e.summarize(0.0, false);
    e.select(None);
    e.select_next(Severity::Fatal);
    let first = e.coordinator.selection().expect("a fatal under legacy");
    e.summarize(0.0, false);
    e.select_next(Severity::Fatal);
    let second = e.coordinator.selection().expect("a second fatal");
    assert!(second > first);
    let hover = e.hover(0, Side::A, 0.0, 1e9);
    assert!(hover.starts_with("0:0 at ") && hover.contains("events under policy A"), "{hover}");
}
