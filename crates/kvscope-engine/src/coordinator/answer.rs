//! The shard's half of the protocol: an [`Engine`] reading one shard of the fleet answers the
//! coordinator from its model.

use kvscope_engine_protocol::Side;

use super::ShardReport;
use super::protocol::{Answers, FromShard, Painted, ToShard};
use crate::engine::Engine;
use crate::summarize::{self, timeline, trees};

impl Engine {
    /// Answers one message from the coordinator (`now_ms` on this worker's clock); some need no
    /// answer.
    pub fn answer(&mut self, message: ToShard, now_ms: f64) -> Option<FromShard> {
        match message {
            ToShard::View(q) => {
                self.set_view(*q);
                None
            }
            ToShard::Report { find, force } => {
                // Also brings the router's side and the index up to what was applied.
                let changed = self.take_changed();
                if !(changed || force || find.is_some()) {
                    return Some(FromShard::Unchanged);
                }
                let m = self.model();
                let mut report = ShardReport::of(m, &self.query().settings, self.waiting(), now_ms);
                report.found = find.and_then(|r| m.find_event(&r));
                Some(FromShard::Report(Box::new(report)))
            }
            ToShard::Paint { layout, selected } => {
                let mine = selected.filter(|id| crate::model::shard::of_event_id(*id) == self.model().shard().index);
                let inspector = self.inspect(mine);
                let (m, q) = (self.model(), self.query());
                Some(FromShard::Painted(Box::new(Painted {
                    lanes: timeline::lanes_part(m, &layout),
                    tree: trees::tree_part(m, &q.settings, q.drill),
                    inspector,
                    selected: mine.and_then(|id| Some((m.event_ref(id)?, m.stream_order(id)))),
                    hits: trees::search_hits(m, &q.settings.hash),
                })))
            }
            ToShard::Ask { lacks, index } => {
                let m = self.model();
                Some(FromShard::Answered(Answers {
                    lacks: lacks.map(|q| trees::lacks(m, &q)).unwrap_or_default(),
                    index_lines: index.map(|q| summarize::event_index_lines(m, &q)).unwrap_or_default(),
                }))
            }
            ToShard::AdoptExits(exits) => {
                for side in [Side::A, Side::B] {
                    if let Some(exit) = &exits[side as usize] {
                        self.model_mut().adopt_exit(side, exit);
                    }
                }
                None
            }
            ToShard::Hover { source, side, from_ms, to_ms } => Some(FromShard::Hover(self.hover(source, side, from_ms, to_ms))),
            ToShard::Pick { source, side, time_ms, tolerance_ms } => {
                Some(FromShard::Picked(summarize::pick_at(self.model(), source, side, time_ms, tolerance_ms)))
            }
            ToShard::NextMarked { after, min_severity } => {
                let m = self.model();
                Some(FromShard::Next {
                    after: after.and_then(|a| m.next_marked_in_stream(Some(a), min_severity)),
                    first: m.next_marked_in_stream(None, min_severity),
                })
            }
        }
    }
}
