//! A coordinator and its shards in one thread, the messages handed over directly: the tests'
//! and benches' way to run the rounds (a worker's host delivers them itself, its own shard
//! directly and the others' through `postMessage`).

use kvscope_engine_protocol::{Settings, Severity, Side, Summary, ViewQuery};

use super::protocol::{FromShard, ToShard};
use super::{Coordinator, Out};
use crate::engine::Engine;
use crate::model::shard::Shard;
use crate::summarize::TimelineImage;

/// `count` engines, each reading its shard, behind one coordinator.
#[derive(Debug)]
pub struct InProcess {
    pub coordinator: Coordinator,
    pub shards: Vec<Engine>,
    /// Hover answers, as the page would get them.
    pub hovers: Vec<String>,
}

impl InProcess {
    pub fn new(count: u32, settings: Settings) -> InProcess {
        let query = ViewQuery { settings, ..ViewQuery::default() };
        let shards = (0..count.max(1)).map(|index| Engine::shard(query.settings.clone(), Shard { index, count: count.max(1) })).collect();
        InProcess { coordinator: Coordinator::new(count, query), shards, hovers: Vec::new() }
    }

    /// One engine: a fleet of one shard.
    pub fn one(settings: Settings) -> InProcess {
        InProcess::new(1, settings)
    }

    /// One server message, applied by every shard (each reads its own sources of it).
    pub fn apply_server_message(&mut self, bytes: &[u8], now_ms: f64) {
        let mut started_over = false;
        for e in &mut self.shards {
            started_over |= e.apply_server_message(bytes, now_ms);
        }
        if started_over {
            self.coordinator.started_over();
        }
    }

    /// Delivers messages until none is left, each to a shard passed through `to_shard` and each
    /// answer through `to_coordinator` (the tests put them through bytes, as between workers);
    /// the summaries the page got.
    pub fn deliver_with(
        &mut self,
        mut queue: Vec<Out>,
        now_ms: f64,
        to_shard: &dyn Fn(ToShard) -> ToShard,
        to_coordinator: &dyn Fn(FromShard) -> FromShard,
    ) -> Vec<(Summary, Option<TimelineImage>)> {
        let mut page = Vec::new();
        while !queue.is_empty() {
            let mut next = Vec::new();
            for out in queue {
                match out {
                    Out::Shard(i, message) => {
                        let Some(e) = self.shards.get_mut(i as usize) else { continue };
                        let Some(answer) = e.answer(to_shard(message), now_ms) else { continue };
                        next.extend(self.coordinator.on_shard(i, to_coordinator(answer)));
                    }
                    Out::Summary(s, pixels) => page.push((*s, pixels)),
                    Out::Hover(text) => self.hovers.push(text),
                }
            }
            queue = next;
        }
        page
    }

    pub fn deliver(&mut self, queue: Vec<Out>, now_ms: f64) -> Vec<(Summary, Option<TimelineImage>)> {
        self.deliver_with(queue, now_ms, &|m| m, &|a| a)
    }

    /// A summary of what changed (all of it when `force`), as a flush makes it; `None` when
    /// nothing did.
    pub fn summarize(&mut self, now_ms: f64, force: bool) -> Option<(Summary, Option<TimelineImage>)> {
        let outs = self.coordinator.flush(force);
        self.deliver(outs, now_ms).pop()
    }

    pub fn set_view(&mut self, query: ViewQuery) {
        let outs = self.coordinator.set_view(query);
        self.deliver(outs, 0.0);
    }

    pub fn select(&mut self, id: Option<u64>) {
        self.coordinator.select(id);
    }

    pub fn select_next(&mut self, min_severity: Severity) {
        let outs = self.coordinator.select_next(min_severity);
        self.deliver(outs, 0.0);
    }

    pub fn select_at(&mut self, source: u32, side: Side, time_ms: f64, tolerance_ms: f64) {
        let outs = self.coordinator.select_at(source, side, time_ms, tolerance_ms);
        self.deliver(outs, 0.0);
    }

    pub fn hover(&mut self, source: u32, side: Side, from_ms: f64, to_ms: f64) -> String {
        let outs = self.coordinator.hover(source, side, from_ms, to_ms);
        self.deliver(outs, 0.0);
        self.hovers.pop().unwrap_or_default()
    }

    /// The shard that numbered event `id`.
    pub fn shard_of(&self, id: u64) -> Option<&Engine> {
        self.shards.get(crate::model::shard::of_event_id(id) as usize)
    }
}
