//! The headline, in the router's terms: where the policies disagree, each policy's box (built
//! by `model::summary`), and the router's lines (what the relays dropped and where the router's
//! view differs). Made from the fleet's facts (`model::fleet`): one model's, or every shard's
//! merged.

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::fmt::thousands;
use kvscope_engine_protocol::view::{DifferenceRow, ExitMark, Headline, PolicyBox};

use crate::model::Model;
use crate::model::classes::Class;
use crate::model::fleet::FleetFacts;

/// Kinds of disagreement listed.
const DIFFERENCES_SHOWN: usize = 6;

pub fn headline(m: &Model) -> Headline {
    headline_of(&FleetFacts::of(m))
}

/// The headline of the fleet these facts are about.
pub fn headline_of(f: &FleetFacts) -> Headline {
    let [pa, pb] = &f.policies;
    let text = |c: Option<Class>| c.as_ref().map_or("no verdict".to_owned(), Class::describe);
    let differences = f
        .differences
        .iter()
        .take(DIFFERENCES_SHOWN)
        .map(|d| DifferenceRow {
            events: thousands(d.events),
            a: format!("{pa}: {}", text(d.a)),
            b: format!("{pb}: {}", text(d.b)),
            first_event: d.first_event,
        })
        .collect();
    let c = f.completeness();
    let agree_line = if c.is_complete() {
        "Policies A and B decide every event the same way.".to_owned()
    } else {
        format!("{}no event seen so far is decided differently by policies A and B.", c.prefix())
    };
    let policy_box = |side: Side| {
        let s = f.policy_summary(side);
        let state = if s.exit.is_some() {
            "exits"
        } else if s.all_clear() {
            "clear"
        } else {
            s.completeness.key()
        };
        PolicyBox {
            side,
            state: state.to_owned(),
            completeness: s.completeness.clone(),
            all_clear: s.all_clear(),
            verdict_line: s.verdict_line(),
            about: s.about.to_owned(),
            details: s.detail_lines(),
            exit: s.exit.as_ref().map(|e| ExitMark {
                event_id: e.event_id,
                source: e.source.clone(),
                seq: e.seq,
                crashloop: s.crashloop.iter().map(|c| c.1).sum(),
                never_indexed: s.never_indexed,
            }),
        }
    };
    Headline {
        differences,
        agree_line,
        policies: [policy_box(Side::A), policy_box(Side::B)],
        router_lines: router_lines(f),
        index_lines: index_lines(f),
    }
}

/// What the router's index sees under each policy, fleet-wide, from the first frame on.
pub fn index_lines(f: &FleetFacts) -> Vec<String> {
    let (Some(a), Some(b)) = (&f.index[0], &f.index[1]) else { return Vec::new() };
    if a.engine_prefix_tokens == 0 && a.blocks.router_blocks + b.blocks.router_blocks == 0 {
        return Vec::new();
    }
    let since = f.t0_nanos.map(|t| format!("since {}, ", kvscope_protocol::time::utc_time_of_day(t))).unwrap_or_default();
    let mut out = vec![format!(
        "{since}under {} {}; under {}: {} of them ({})",
        f.policies[0],
        a.cost_words(thousands),
        f.policies[1],
        thousands(b.visible_prefix_tokens),
        kvscope_index::percent(b.visible_share()),
    )];
    let (sa, sb) = (a.visible_prefix_tokens, b.visible_prefix_tokens);
    if sa != sb {
        let (more, n) = if sb > sa { (Side::B, sb - sa) } else { (Side::A, sa - sb) };
        out.push(format!("{} lets the router see {} more cached tokens", f.policies[more as usize], thousands(n)));
    }
    out
}

/// Shared router keys named one by one in the headline; the rest are one line.
const SHARED_KEYS_LISTED: usize = 3;

/// The relay's drops and the reconciliation's differences, fleet-wide, as headline sentences:
/// "dynamo-1.6.1's relay dropped 129 events of 3:0 (unknown_medium): 129 stores skipped: medium
/// names no tier". Empty when there is no event plane.
pub fn router_lines(f: &FleetFacts) -> Vec<String> {
    let Some(router) = &f.router else { return Vec::new() };
    let policy = &router.policy;
    let mut out = Vec::new();
    let mut routine = 0;
    for (_, s) in &router.sources {
        for (label, n) in &s.router.dropped_by_policy {
            // Routine filtering (non-main attention groups, unknown events) is what every relay
            // does; it is summed once below, not listed per source.
            if label.is_routine_filter() {
                routine += n;
                continue;
            }
            out.push(format!(
                "{policy}'s relay dropped {} events of {} ({label}): the router never indexes them. {}",
                thousands(*n),
                s.source,
                label.summary(*n)
            ));
        }
        let c = &s.router;
        if !c.is_clean() {
            let mut line = format!(
                "the router's view of {} differs from what its relay should have published: {} missing, {} unexpected, {} mismatched",
                s.source,
                thousands(c.missing),
                thousands(c.unexpected),
                thousands(c.mismatched)
            );
            for (n, what) in
                [(c.engine_decode_errors, "engine payloads not decoded"), (c.plane_decode_errors, "plane messages not decoded")]
            {
                if n > 0 {
                    line.push_str(&format!(", {} {what}", thousands(n)));
                }
            }
            out.push(line);
        }
    }
    if routine > 0 {
        out.push(format!(
            "and {} events dropped by the relays as routine filtering (non-main attention groups and kinds)",
            thousands(routine)
        ));
    }
    out.extend(kvscope_router::SharedKey::lines(&router.shared_keys, SHARED_KEYS_LISTED));
    for u in &router.unknown_workers {
        out.push(format!(
            "{} RouterEvents name worker {} at dp rank {}, which no --workers source is",
            thousands(u.events),
            u.worker_id,
            u.dp_rank
        ));
    }
    out
}
