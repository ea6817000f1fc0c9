//! What Dynamo 1.6.1's relay does between its normalizer and the event plane: the publisher
//! stage of `KvEventPublisher` (dynamo-llm 1.6.1, `kv_router/publisher/`: `event_processor.rs`,
//! `batching.rs`, `dedup.rs`), with the batching timeout off, as the relay starts by default
//! (`DEFAULT_BATCHING_TIMEOUT_MS = None`).
//!
//! Per engine batch, in order, on the events its normalizer kept:
//!
//! 1. **Coalescing** (`PlacementEventCoalescer`): an event joins the pending one when both are on
//!    the same tier and rank with the same `session_id`, and either both are removals, or both
//!    are stores and the new store's parent is the pending store's last block (`None == None`
//!    counts: a parentless store joins a pending store that kept no block). A joined store adds
//!    its blocks, a joined removal its hashes; the pending event keeps its own parent. Once the
//!    pending event holds 128 blocks (`DEFAULT_MAX_BATCH_BLOCKS`) it is sent; an event that holds
//!    128 on its own is sent alone. The pending event is sent at the end of the batch.
//! 2. **Removal refcounts** (`EventDedupFilter`, `RefCounted`): per (dp_rank, tier), every sent
//!    store counts each of its blocks once more; a removal keeps only the hashes whose count
//!    falls to 0 (or that were never counted) and is not sent when none is left, which is also
//!    the fate of the empty removal a self-referencing store becomes.
//! 3. **A clear** sends what is pending, forgets the rank's counts on every tier, and is sent.
//! 4. **Event ids** count the events sent, from 1; an event not sent burns none.
//!
//! One outbox per relay: its counts and ids live as long as the relay process.

use std::collections::HashMap;

use kvscope_tiers::BuildBlockHasher;

use crate::event::{EventData, PlaneTier, RouterEvent};

/// `DEFAULT_MAX_BATCH_BLOCKS` of Dynamo 1.6.1's publisher.
pub const MAX_BATCH_BLOCKS: usize = 128;

/// An event the normalizer kept, before the publisher stage (`PlacementEvent`): the
/// RouterEvent it would be alone, and its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub event: RouterEvent,
    pub session_id: Option<String>,
}

/// What the publisher stage made of one kept event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Sent as this RouterEvent (with the events coalesced into it).
    Event(RouterEvent),
    /// Its blocks or hashes went into the event sent for the kept event at this position (in
    /// the list given to [`Outbox::send_batch`]).
    Coalesced { into: u32 },
    /// A removal not sent: every hash it named is still stored by other copies on this tier
    /// (the relay's refcounts), or it named none.
    RemovalHeldBack,
}

/// The publisher stage of one relay.
#[derive(Clone, Debug)]
pub struct Outbox {
    /// Stores counted per (dp_rank, tier) and block hash: a few (rank, tier) pairs, looked up
    /// in order, and a block-hash map each (every stored block and removed hash is counted).
    refcounts: Vec<((u32, PlaneTier), RefCounts)>,
    next_event_id: u64,
}

/// How many sent stores hold each block hash, on one (dp_rank, tier).
type RefCounts = HashMap<u64, u32, BuildBlockHasher>;

impl Default for Outbox {
    fn default() -> Self {
        Outbox { refcounts: Vec::new(), next_event_id: 1 }
    }
}

/// The pending event: the kept event it started from, and that event's RouterEvent grown by
/// the events coalesced into it.
struct Pending {
    first: u32,
    session_id: Option<String>,
    event: RouterEvent,
}

fn blocks(data: &EventData) -> usize {
    match data {
        EventData::Stored(s) => s.blocks.len(),
        EventData::Removed(r) => r.block_hashes.len(),
        EventData::Cleared => 0,
    }
}

impl Pending {
    fn joins(&self, next: &Kept) -> bool {
        let (a, b) = (&self.event, &next.event);
        let compatible = match (&a.event.data, &b.event.data) {
            (EventData::Stored(p), EventData::Stored(n)) => n.parent_hash == p.blocks.last().map(|b| b.block_hash),
            (EventData::Removed(_), EventData::Removed(_)) => true,
            _ => false,
        };
        compatible
            && a.storage_tier == b.storage_tier
            && a.residency_domain == b.residency_domain
            && a.event.dp_rank == b.event.dp_rank
            && self.session_id == next.session_id
    }

    fn absorb(&mut self, next: RouterEvent) {
        match (&mut self.event.event.data, next.event.data) {
            (EventData::Stored(p), EventData::Stored(n)) => p.blocks.extend(n.blocks),
            (EventData::Removed(p), EventData::Removed(n)) => p.block_hashes.extend(n.block_hashes),
            // `joins` admits matching kinds only.
            _ => {}
        }
    }
}

impl Outbox {
    /// Runs one engine batch's kept events through the stage: one [`Sent`] per kept event, in
    /// order.
    pub fn send_batch(&mut self, kept: Vec<Kept>) -> Vec<Sent> {
        let mut out: Vec<Sent> = Vec::with_capacity(kept.len());
        let mut pending: Option<Pending> = None;
        for k in kept {
            let at = out.len();
            out.push(Sent::RemovalHeldBack);
            if matches!(k.event.event.data, EventData::Cleared) {
                if let Some(p) = pending.take() {
                    self.emit(p, &mut out);
                }
                let rank = k.event.event.dp_rank;
                self.refcounts.retain(|((r, _), _)| *r != rank);
                let mut event = k.event;
                event.event.event_id = self.take_id();
                out[at] = Sent::Event(event);
                continue;
            }
            if let Some(p) = pending.as_mut().filter(|p| p.joins(&k)) {
                p.absorb(k.event);
                out[at] = Sent::Coalesced { into: p.first };
                if blocks(&p.event.event.data) >= MAX_BATCH_BLOCKS
                    && let Some(p) = pending.take()
                {
                    self.emit(p, &mut out);
                }
                continue;
            }
            if let Some(p) = pending.take() {
                self.emit(p, &mut out);
            }
            let next = Pending { first: at as u32, session_id: k.session_id, event: k.event };
            if blocks(&next.event.event.data) >= MAX_BATCH_BLOCKS {
                self.emit(next, &mut out);
            } else {
                pending = Some(next);
            }
        }
        if let Some(p) = pending.take() {
            self.emit(p, &mut out);
        }
        out
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_event_id;
        self.next_event_id += 1;
        id
    }

    /// `emit_ready`: refcounts, then an id for what is sent. `out[p.first]` becomes the sent
    /// event, or stays [`Sent::RemovalHeldBack`] along with what was coalesced into it.
    fn emit(&mut self, p: Pending, out: &mut [Sent]) {
        let mut event = p.event;
        let key = (event.event.dp_rank, &event.storage_tier);
        let at = match self.refcounts.iter().position(|((r, t), _)| (*r, t) == key) {
            Some(at) => at,
            None => {
                self.refcounts.push(((event.event.dp_rank, event.storage_tier.clone()), HashMap::default()));
                self.refcounts.len() - 1
            }
        };
        let counts = &mut self.refcounts[at].1;
        match &mut event.event.data {
            EventData::Stored(s) => {
                for b in &s.blocks {
                    *counts.entry(b.block_hash).or_default() += 1;
                }
            }
            EventData::Removed(r) => {
                r.block_hashes.retain(|h| match counts.get_mut(h) {
                    Some(n) if *n > 1 => {
                        *n -= 1;
                        false
                    }
                    Some(_) => {
                        counts.remove(h);
                        true
                    }
                    None => true,
                });
                if r.block_hashes.is_empty() {
                    for s in out.iter_mut() {
                        if matches!(s, Sent::Coalesced { into } if *into == p.first) {
                            *s = Sent::RemovalHeldBack;
                        }
                    }
                    return;
                }
            }
            EventData::Cleared => {}
        }
        event.event.event_id = self.take_id();
        out[p.first as usize] = Sent::Event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{KvCacheEvent, RemovedData, StoredBlock, StoredData};

    fn stored(parent: Option<u64>, hashes: &[u64]) -> Kept {
        let blocks = hashes.iter().map(|&h| StoredBlock { block_hash: h, tokens_hash: h + 1000 }).collect();
        kept(EventData::Stored(StoredData { parent_hash: parent, start_position: None, blocks }))
    }

    fn removed(hashes: &[u64]) -> Kept {
        kept(EventData::Removed(RemovedData { block_hashes: hashes.to_vec() }))
    }

    fn kept(data: EventData) -> Kept {
        let event = RouterEvent {
            worker_id: 7,
            storage_tier: PlaneTier::Device,
            residency_domain: Some("worker".into()),
            event: KvCacheEvent { event_id: 0, data, dp_rank: 0 },
        };
        Kept { event, session_id: None }
    }

    fn ids_and_sizes(sent: &[Sent]) -> Vec<String> {
        sent.iter()
            .map(|s| match s {
                Sent::Event(e) => format!("#{}:{}", e.event.event_id, blocks(&e.event.data)),
                Sent::Coalesced { into } => format!("->{into}"),
                Sent::RemovalHeldBack => "held".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_chained_store_joins_the_pending_one_and_a_store_with_no_block_takes_a_parentless_one() {
        let mut o = Outbox::default();
        // edge-3 of vLLM 0.33: a full store, then its partial block (no block published) below it.
        let sent = o.send_batch(vec![stored(None, &[1, 2]), stored(Some(2), &[])]);
        assert_eq!(ids_and_sizes(&sent), ["#1:2", "->0"]);
        // A store that kept no block, then a parentless store: None == None, so they join and
        // the second store's blocks land under the first one's parent.
        let sent = o.send_batch(vec![stored(Some(9), &[]), stored(None, &[5])]);
        assert_eq!(ids_and_sizes(&sent), ["#2:1", "->0"]);
        let Sent::Event(e) = &sent[0] else { panic!() };
        let EventData::Stored(s) = &e.event.data else { panic!() };
        assert_eq!(s.parent_hash, Some(9));
        // Not chained: two events.
        assert_eq!(ids_and_sizes(&o.send_batch(vec![stored(None, &[10]), stored(Some(99), &[11])])), ["#3:1", "#4:1"]);
    }

    #[test]
    fn removals_join_and_pass_only_when_the_last_copy_goes() {
        let mut o = Outbox::default();
        o.send_batch(vec![stored(None, &[1, 2])]);
        o.send_batch(vec![stored(None, &[1])]);
        // 1 is held twice, 2 once, 3 never: the joined removal keeps 2 and 3.
        let sent = o.send_batch(vec![removed(&[1]), removed(&[2, 3])]);
        assert_eq!(ids_and_sizes(&sent), ["#3:2", "->0"]);
        // The second copy of 1 goes: now it passes. Untracked, again: passes.
        assert_eq!(ids_and_sizes(&o.send_batch(vec![removed(&[1])])), ["#4:1"]);
        assert_eq!(ids_and_sizes(&o.send_batch(vec![removed(&[1])])), ["#5:1"]);
        // An empty removal (a self-referencing store) is never sent and burns no id.
        assert_eq!(ids_and_sizes(&o.send_batch(vec![removed(&[])])), ["held"]);
        o.send_batch(vec![stored(None, &[4]), stored(None, &[4])]);
        assert_eq!(ids_and_sizes(&o.send_batch(vec![removed(&[4]), removed(&[])])), ["held", "held"]);
    }

    #[test]
    fn a_clear_sends_the_pending_event_and_forgets_the_counts() {
        let mut o = Outbox::default();
        o.send_batch(vec![stored(None, &[1]), stored(None, &[1])]);
        let sent = o.send_batch(vec![removed(&[5]), kept(EventData::Cleared), removed(&[1])]);
        assert_eq!(ids_and_sizes(&sent), ["#3:1", "#4:0", "#5:1"]);
    }

    #[test]
    fn at_128_blocks_the_pending_event_is_sent() {
        let mut o = Outbox::default();
        let chain: Vec<Kept> = (0..130u64).map(|i| stored(i.checked_sub(1), &[i])).collect();
        let sent = o.send_batch(chain);
        let names = ids_and_sizes(&sent);
        assert_eq!(names[0], "#1:128");
        assert_eq!(names[128], "#2:2");
        assert_eq!(names[129], "->128");
        // Joined first, then sent at once; an event of 128 or more on its own is sent alone.
        let big: Vec<u64> = (1000..1200).collect();
        assert_eq!(ids_and_sizes(&o.send_batch(vec![stored(None, &[5]), stored(Some(5), &big)])), ["#3:201", "->0"]);
        assert_eq!(
            ids_and_sizes(&o.send_batch(vec![stored(None, &[6]), stored(Some(99), &big), stored(None, &[7])])),
            ["#4:1", "#5:200", "#6:1"]
        );
    }
}
