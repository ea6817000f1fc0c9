//! The coordinator's rounds against one engine: K engines, each reading its shard, every
//! message between them and the coordinator as bytes, make the summary one engine makes.

use kvscope_engine_protocol::view::Trees;
use kvscope_engine_protocol::{Settings, Severity, Side, Summary, ViewQuery};
use kvscope_protocol as proto;

use super::protocol::{self, FromShard, ToShard};
use super::{Coordinator, Out};
use crate::engine::Engine;
use crate::model::shard::{self, Shard};
use crate::model::tests::{hello, kimi_frames};
use crate::summarize::TimelineImage;

/// A coordinator and its shards in one thread.
struct Fleet {
    coordinator: Coordinator,
    shards: Vec<Engine>,
    hovers: Vec<String>,
}

impl Fleet {
    fn new(count: u32, query: &ViewQuery) -> Fleet {
        let shards = (0..count)
            .map(|index| {
                let mut e = Engine::shard(query.settings.clone(), Shard { index, count });
                e.set_view(query.clone());
                e
            })
            .collect();
        Fleet { coordinator: Coordinator::new(count, query.clone()), shards, hovers: Vec::new() }
    }

    fn server(&mut self, messages: &[proto::Message]) {
        for m in messages {
            let bytes = proto::encode(m);
            self.shards.iter_mut().for_each(|e| e.apply_server_message(&bytes, 0.0));
        }
    }

    /// Delivers messages, each way as bytes, until none is left; the summaries the page got.
    fn deliver(&mut self, mut queue: Vec<Out>) -> Vec<(Summary, Option<TimelineImage>)> {
        let mut page = Vec::new();
        while !queue.is_empty() {
            let mut next = Vec::new();
            for out in queue {
                match out {
                    Out::Shard(i, message) => {
                        let message: ToShard = protocol::decode(&protocol::encode(&message)).expect("a message to a shard");
                        let Some(answer) = self.shards[i as usize].answer(message, 0.0) else { continue };
                        let answer: FromShard = protocol::decode(&protocol::encode(&answer)).expect("a shard's answer");
                        next.extend(self.coordinator.on_shard(i, answer));
                    }
                    Out::Summary(s, pixels) => page.push((*s, pixels)),
                    Out::Hover(text) => self.hovers.push(text),
                }
            }
            queue = next;
        }
        page
    }

    fn summary(&mut self) -> (Summary, Option<TimelineImage>) {
        let outs = self.coordinator.flush(true);
        self.deliver(outs).pop().expect("a summary")
    }
}

/// One engine's summary and pixels of the same stream and view.
fn one_engine(query: &ViewQuery, messages: &[proto::Message]) -> (Engine, Summary, Option<TimelineImage>) {
    let mut e = Engine::new(query.settings.clone());
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
        fleet.coordinator.resend_all();
        let (got, pixels) = fleet.summary();
        let shards = &fleet.shards;
        let in_shard = |id: u64| shards.get(shard::of_event_id(id) as usize)?.model().event_ref(id);
        let (mut got, got_names) = without_ids(got, &in_shard);
        let (mut expected, expected_names) = without_ids(expected.clone(), &|id| whole.model().event_ref(id));
        assert_eq!(got_names, expected_names, "{count} shards name the same events");
        // Each shard holds its own memory.
        for s in [&mut got, &mut expected] {
            if let Some(bar) = &mut s.bar {
                bar.memory = String::new();
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
        let outs = fleet.coordinator.select_next(Severity::Fatal);
        fleet.deliver(outs);
        let (s, _) = fleet.summary();
        let at = fleet.coordinator.selection().and_then(|id| fleet.shards[shard::of_event_id(id) as usize].model().stream_order(id));
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
        let outs = fleet.coordinator.hover(source, Side::A, 0.0, 1e9);
        assert!(matches!(outs[..], [Out::Shard(i, _)] if Shard::of(&source.to_string(), 3) == i), "{outs:?}");
        fleet.deliver(outs);
        let text = fleet.hovers.pop().expect("an answer");
        assert!(text.starts_with(&format!("{source}:0 at ")) && text.contains("events under policy A"), "{text}");
    }
    fleet.coordinator.select(None);
    let outs = fleet.coordinator.select_at(1, Side::A, 80.0, 1e6);
    fleet.deliver(outs);
    let id = fleet.coordinator.selection().expect("the click opened an event");
    assert_eq!(fleet.shards[shard::of_event_id(id) as usize].model().event_ref(id).map(|r| r.source), Some("1:0".to_owned()));
}

#[test]
fn the_rounds_make_one_engine_s_summary_of_a_fleet_with_an_event_plane() {
    let (hello, messages) = crate::model::shard_tests::fleet_with_plane(12, 30);
    let all: Vec<proto::Message> = std::iter::once(hello).chain(messages).collect();
    let query = ViewQuery { canvas_width: 500.0, device_pixel_ratio: 2.0, ..ViewQuery::default() };
    the_rounds_make_one_engine_s_summary(&all, &query, false);
}
