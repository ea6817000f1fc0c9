//! Worker cards, for the sources a person opened from the fleet overview (all of them on a small
//! fleet, where a card per source still fits a screen), and the event-plane sources' list.

use std::collections::BTreeSet;

use kvscope_engine_protocol::fmt::thousands;
use kvscope_engine_protocol::view::{Card, CardRow, Cards, Planes, RouterRow};
use kvscope_engine_protocol::{Settings, Side};
use kvscope_normalize::{Outcome, StorageTier, VerdictLabel};

use crate::model::classes::Reason;
use crate::model::{Model, Rows};

/// Up to this many engine sources, every card is shown without opening it.
pub const CARDS_FOR_ALL: usize = 8;

/// The sources whose cards are shown, in source order: the opened ones, or every source of a
/// small fleet; the worker filter applies either way. Every shard's engine sources, for the
/// shards' parts ([`CardsPart`]). Event-plane sources are the router's side, listed apart
/// ([`planes`]).
pub fn carded_sources(m: &Model, open: &[String], filter: &str) -> Vec<u32> {
    let engines = m.fleet_engine_sources().count();
    m.fleet_engine_sources()
        .filter(|s| {
            (filter.is_empty() || s.key.contains(filter)) && (open.contains(&s.key) || (open.is_empty() && engines <= CARDS_FOR_ALL))
        })
        .map(|s| s.index)
        .collect()
}

/// One shard's part of the cards ([`crate::model::shard`]): the cards of its own carded
/// sources, without their index lines; and, per policy whose index it models, every carded
/// source's line. [`merge`] puts them together.
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct CardsPart {
    cards: Vec<Card>,
    index_lines: Vec<(u32, Side, String)>,
    hint: bool,
}

pub fn part(m: &Model, settings: &Settings) -> CardsPart {
    let carded = carded_sources(m, &settings.open, &settings.worker_filter);
    let own = |i: &u32| m.source(*i).is_some_and(|s| s.own);
    CardsPart {
        cards: carded.iter().filter(|i| own(i)).filter_map(|i| card(m, *i)).collect(),
        index_lines: carded
            .iter()
            .flat_map(|i| [Side::A, Side::B].into_iter().filter_map(|side| Some((*i, side, index_line(m, side, *i)?))))
            .collect(),
        hint: settings.open.is_empty() && m.fleet_engine_sources().count() > CARDS_FOR_ALL,
    }
}

/// The shards' cards, in source order, each with its index lines.
pub fn merge(parts: &[&CardsPart]) -> Cards {
    let mut cards: Vec<Card> = parts.iter().flat_map(|p| p.cards.iter().cloned()).collect();
    cards.sort_by_key(|c| c.index);
    for card in &mut cards {
        for side in [Side::A, Side::B] {
            let line = parts.iter().flat_map(|p| &p.index_lines).find(|(i, s, _)| *i == card.index && *s == side);
            card.index_lines.extend(line.map(|(_, s, l)| (*s, l.clone())));
        }
    }
    Cards { cards, hint: parts.iter().any(|p| p.hint) }
}

pub fn cards(m: &Model, settings: &Settings) -> Cards {
    merge(&[&part(m, settings)])
}

/// What a policy's index of the router holds of a source and what that costs, if this shard
/// models that index and it holds or lacks any of the source's blocks.
fn index_line(m: &Model, side: Side, index: u32) -> Option<String> {
    let c = m.index().counts(side, index)?;
    (c.blocks.engine_blocks + c.blocks.router_blocks > 0)
        .then(|| format!("{}: {}; {}", m.policy_name(side), c.blocks_words(thousands), c.cost_words(thousands)))
}

/// The rows of a card: fatal first, then skips, then applied per tier (always all four tiers,
/// so a zero is shown, not missing).
pub fn card_rows(m: &Model, index: u32) -> Vec<CardRow> {
    let Some(src) = m.source(index) else { return Vec::new() };
    let classes = m.classes();
    let a = src.counts(Side::A).rows(classes);
    let b = src.counts(Side::B).rows(classes);
    let mut keys: BTreeSet<(Outcome, Reason)> = a.keys().chain(b.keys()).copied().collect();
    for t in StorageTier::ALL {
        keys.insert((Outcome::Apply, Reason::Tier(t)));
    }
    let order = |k: Outcome| match k {
        Outcome::Fatal => 0,
        Outcome::Skip => 1,
        Outcome::Apply => 2,
    };
    let mut keys: Vec<_> = keys.into_iter().collect();
    keys.sort_by_key(|(k, r)| {
        let tier_pos = match r {
            Reason::Tier(t) => t.index(),
            _ => 9,
        };
        (order(*k), tier_pos, *r)
    });
    keys.into_iter()
        .map(|(kind, reason)| {
            let routine = kind == Outcome::Skip && reason.is_routine_filter();
            let cell = |rows: &Rows| {
                rows.get(&(kind, reason)).map_or((0, String::new()), |(n, tiers)| {
                    let no_tiers = kind == Outcome::Apply || routine;
                    (*n, if no_tiers { String::new() } else { tiers.keys().map(ToString::to_string).collect::<Vec<_>>().join(", ") })
                })
            };
            CardRow { kind, reason, routine, cells: [cell(&a), cell(&b)] }
        })
        .collect()
}

/// "A fatal · B skipped" when the policies disagree on this worker, else `None`.
pub fn disagreement(m: &Model, index: u32) -> Option<String> {
    let src = m.source(index)?;
    if !src.policies_disagree(m.classes()) {
        return None;
    }
    let word = |side: Side| {
        let c = src.counts(side);
        if c.total(m.classes(), Outcome::Fatal) > 0 {
            "fatal"
        } else if c.get(m.classes(), Outcome::Skip, Reason::Label(VerdictLabel::OffloadBlockSizeMismatch)) > 0 {
            "offload skipped"
        } else {
            "ok"
        }
    };
    Some(format!("policies disagree: A {} · B {}", word(Side::A), word(Side::B)))
}

/// What the card says of its source's connection. "live" means the engine is analysing the
/// source's events, not only that the server's socket is open.
pub fn status_word(m: &Model, index: u32) -> String {
    let Some(src) = m.source(index) else { return "—".to_owned() };
    match &src.status {
        Some(st) if st.state == kvscope_protocol::ConnState::Live && src.counts(Side::A).events == 0 => {
            "connected, no events analysed".to_owned()
        }
        Some(st) => format!("{:?}", st.state).to_lowercase(),
        None if matches!(m.origin, crate::model::Origin::Capture { .. }) => "capture".to_owned(),
        None => "—".to_owned(),
    }
}

/// The card's router row: the reconciliation counts of one engine source.
pub fn router_row(m: &Model, index: u32) -> RouterRow {
    let Some(router) = m.router() else { return RouterRow::None };
    let report = router.report();
    let Some(s) = router.source_report(report, index) else { return RouterRow::NotMatched };
    let c = &s.router;
    let cells = c.alignment().into_iter().chain([("pending", c.pending_expected)]);
    RouterRow::Counts {
        policy: router.policy.name.to_owned(),
        clean: c.is_clean(),
        cells: cells.map(|(k, n)| (k.to_owned(), n)).collect(),
        dropped: c.dropped_by_relay(thousands).map(|d| format!("· {d}")),
    }
}

fn card(m: &Model, index: u32) -> Option<Card> {
    let src = m.source(index)?;
    let completeness = m.completeness(index);
    let trees_side = m.config().trees;
    let stop_lines = [Side::A, Side::B]
        .into_iter()
        .filter_map(|side| {
            let (seq, _) = src.counts(side).first_fatal.as_ref()?;
            Some((side, format!(" {}: an indexer stops at seq {seq}", m.policy_name(side))))
        })
        .collect();
    Some(Card {
        // The index's shards say ([`merge`]).
        index_lines: Vec::new(),
        index,
        key: src.key.clone(),
        worker: src.worker_id.clone(),
        dp_rank: src.dp_rank,
        status: status_word(m, index),
        completeness,
        disagree: disagreement(m, index),
        stop_lines,
        router: router_row(m, index),
        tree_caption: format!("Blocks held per tier (trees built by policy {})", m.policy_name(trees_side)),
        tiers: StorageTier::ALL.iter().map(|t| (*t, m.trees().blocks(index, *t))).collect(),
        rows: card_rows(m, index),
        frames: src.frames,
        events: src.counts(Side::A).events,
        last_seq: src.seq.last_seq,
        gaps: src.gaps(),
        restarts: src.restarts(),
        errors: src.decode_errors + src.frame_errors,
        last_error: src.last_error.clone(),
    })
}

/// The event-plane sources: what each reads, its state, and the publishers seen on it; `None`
/// when there is no event plane.
pub fn planes(m: &Model) -> Option<Planes> {
    let mut planes: Vec<_> = m.plane_sources().collect();
    if planes.is_empty() {
        return None;
    }
    let publishers: &[kvscope_router::PublisherCounts] = m.router().map_or(&[], |r| &r.report().publishers);
    // Those that need a look first (stable: in source order within each group), then a line for
    // the rest.
    let plane_trouble = |s: &&crate::model::Source| {
        let live = s.status.as_ref().is_none_or(|st| st.state == kvscope_protocol::ConnState::Live);
        u8::from(!live) + u8::from(s.frame_errors + s.decode_errors > 0)
    };
    planes.sort_by_key(|s| std::cmp::Reverse(plane_trouble(s)));
    let mut publishers: Vec<_> = publishers.iter().collect();
    let publisher_trouble = |p: &&kvscope_router::PublisherCounts| p.gaps + p.restarts + p.decode_errors + p.out_of_order;
    publishers.sort_by_key(|p| std::cmp::Reverse(publisher_trouble(p) > 0));
    let mut rest = Vec::new();
    if planes.len() > Planes::LISTED {
        let left = &planes[Planes::LISTED..];
        let troubled = left.iter().filter(|s| plane_trouble(s) > 0).count();
        rest.push(format!("and {} more event-plane sources ({troubled} not live or with errors)", thousands(left.len() as u64)));
    }
    if publishers.len() > Planes::LISTED {
        let left = &publishers[Planes::LISTED..];
        let troubled = left.iter().filter(|p| publisher_trouble(p) > 0).count();
        rest.push(format!("and {} more publishers ({troubled} with gaps, restarts or decode errors)", thousands(left.len() as u64)));
    }
    let publishers = publishers
        .into_iter()
        .take(Planes::LISTED)
        .map(|p| {
            let from = match p.first_sequence {
                Some(first) if kvscope_router::subscribed_late(first) => {
                    format!(" from sequence {} (it had published before kvscope subscribed)", thousands(first))
                }
                _ => String::new(),
            };
            format!(
                "publisher {}: {} messages{from}, {} gaps ({} missed), {} restarts, {} decode errors",
                p.publisher_id,
                thousands(p.messages),
                p.gaps,
                thousands(p.missed_messages),
                p.restarts,
                p.decode_errors
            )
        })
        .collect();
    let planes = planes
        .into_iter()
        .take(Planes::LISTED)
        .map(|s| {
            let url = s.event_plane.as_ref().map_or_else(|| s.endpoint.clone(), |p| p.url.clone());
            let state = s.status.as_ref().map_or("capture".to_owned(), |st| format!("{:?}", st.state).to_lowercase());
            let line = format!("{} ({url}): {state}, {} messages, {} errors", s.key, thousands(s.frames), s.frame_errors + s.decode_errors);
            (s.key.clone(), line, s.last_error.clone())
        })
        .collect();
    Some(Planes { planes, publishers, rest })
}

#[cfg(test)]
mod tests {
    use kvscope_protocol as proto;

    use super::*;
    use crate::model::tests::{config, hello_of, source_info};

    /// A fleet's event plane is said in a bounded list: those that need a look first, then one
    /// line for the rest.
    #[test]
    fn the_event_plane_list_is_bounded_and_puts_trouble_first() {
        let mut m = Model::new(config(16));
        let plane_count = 20;
        let sources = (0..2)
            .map(source_info)
            .chain((0..plane_count).map(|i| proto::SourceInfo::event_plane(2 + i, &format!("zmq://127.0.0.1:{}", 7000 + i), None)));
        m.apply_message(hello_of(sources.collect(), 16), 0.0);
        // The 15th plane source lost its connection.
        m.apply_message(
            proto::Message::SourceStatus(proto::SourceStatus {
                source: 2 + 14,
                state: proto::ConnState::Connecting,
                error: Some("connection refused".into()),
                since_unix_nanos: 0,
                last_seq: None,
                last_recv_unix_nanos: None,
                counters: proto::SourceCounters::default(),
                gaps: Vec::new(),
            }),
            0.0,
        );
        let p = planes(&m).expect("an event plane");
        assert_eq!(p.planes.len(), Planes::LISTED);
        assert_eq!(p.planes[0].0, "plane:zmq://127.0.0.1:7014", "the one not live comes first");
        assert_eq!(p.rest, ["and 12 more event-plane sources (0 not live or with errors)"]);
    }
}
