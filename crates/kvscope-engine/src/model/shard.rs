//! One engine worker's part of the fleet, when the page spreads the fleet over several
//! (issue 22, "more than one engine worker").
//!
//! A worker's engine sources and its relay's RouterEvents sit in one shard: the split is
//! `kvscope-router`'s [`Shard`] (xxh3 of the worker id's text, mod n), the same that splits a
//! fleet over several servers (`--shard i/n`), so a page and a server agree on who reads what.
//!
//! Every shard's model sees every message in the same order. It applies its own sources' frames
//! and only counts the others' ([`Model::position`](super::Model)): a frame's position is then
//! the same number in every shard, which is what orders fleet-wide facts (the indexer's exit)
//! across shards. An event-plane source carries many workers' RouterEvents: every shard feeds
//! them to its reconciler, which keeps its own workers' (as a `--shard` server does), and
//! shard 0 alone shows the source itself. Event ids are disjoint: each shard numbers from
//! [`first_event_id`].

use kvscope_protocol as proto;
pub use kvscope_router::Shard;

/// Bits of an event id below a shard's number: 2^40 events per shard, and ids stay below 2^53
/// (exact in JavaScript) for up to 8,192 shards.
const EVENT_ID_BITS: u32 = 40;

/// Whether `shard` reads this source: applies its frames and shows it.
pub fn reads(shard: Shard, info: &proto::SourceInfo) -> bool {
    match info.kind {
        proto::SourceKind::Engine => shard.takes(&info.worker_id),
        // A plane carries many workers: every shard reconciles its own, shard 0 shows it.
        proto::SourceKind::EventPlane => shard.index == 0,
        _ => true,
    }
}

/// The first event id of `shard`: shards number their events in disjoint ranges, so an id
/// names one event fleet-wide.
pub fn first_event_id(shard: Shard) -> u64 {
    u64::from(shard.index) << EVENT_ID_BITS
}

/// The shard an event id belongs to.
pub fn of_event_id(id: u64) -> u32 {
    (id >> EVENT_ID_BITS) as u32
}

/// Which policies' indexes of the router `shard` models, per side, for every engine source:
/// both, in shard 0 alone.
///
/// An index cannot be split by worker as the rest can. Dynamo's radix tree is one tree for the
/// fleet, keyed by tokens hash: where a worker's store lands depends on what other workers
/// stored under the same prefix, and a fatal verdict anywhere empties all of it. A shard that
/// models one decodes and hashes every worker's frames for it: that, not the index, is most of
/// its cost. Policies that agree share one tree (`kvscope_index`), so the second policy costs
/// that shard little, where a second shard would decode and hash every frame again (the
/// engine's README, "Shards", has the figures).
pub fn index_sides(shard: Shard) -> [bool; 2] {
    match shard.count {
        0 | 1 => [true, true],
        _ => [shard.index == 0; 2],
    }
}

/// The fleet's exit among the shards' (each shard's first fatal event, or one it adopted): the
/// earliest in the stream. Every shard then adopts it ([`super::Model::adopt_exit`]).
pub fn earliest_exit<'a>(exits: impl IntoIterator<Item = &'a super::IndexerExit>) -> Option<&'a super::IndexerExit> {
    exits.into_iter().min_by_key(|e| e.position)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_s_engines_sit_in_one_shard_and_ids_name_their_shard() {
        let engine = |worker: &str, rank| proto::SourceInfo::engine(0, worker, rank, "tcp://127.0.0.1:5557", None);
        for count in 1..=4 {
            for worker in ["0", "1", "7", "12345678901234"] {
                let shards: Vec<Shard> = (0..count).map(|index| Shard { index, count }).collect();
                let readers = |rank| shards.iter().filter(|s| reads(**s, &engine(worker, rank))).map(|s| s.index).collect::<Vec<_>>();
                assert_eq!(readers(0).len(), 1, "{worker} in {count} shards: read once");
                assert_eq!(readers(0), readers(3), "{worker}: every rank in one shard");
                assert_eq!(readers(0)[0], Shard::of(worker, count), "the servers' --shard split");
            }
            let plane = proto::SourceInfo::event_plane(9, "nats://127.0.0.1:4222", None);
            let shown: Vec<u32> = (0..count).filter(|i| reads(Shard { index: *i, count }, &plane)).collect();
            assert_eq!(shown, [0], "a plane is shown once");
        }
        let shard = Shard { index: 5, count: 8 };
        assert_eq!(of_event_id(first_event_id(shard) + 123), 5);
        assert!(first_event_id(Shard { index: 8191, count: 8192 }) < 1 << 53);
    }
}
