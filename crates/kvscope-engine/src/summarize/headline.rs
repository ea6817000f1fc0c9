//! The headline, in the router's terms: where the policies disagree, each policy's box (built
//! by `model::summary`), and the router's lines (what the relays dropped and where the router's
//! view differs).

use kvscope_engine_protocol::Side;
use kvscope_engine_protocol::fmt::thousands;
use kvscope_engine_protocol::view::{DifferenceRow, ExitMark, Headline, PolicyBox};

use crate::model::Model;
use crate::model::classes::Class;

/// Kinds of disagreement listed.
const DIFFERENCES_SHOWN: usize = 6;

pub fn headline(m: &Model) -> Headline {
    let (pa, pb) = (m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned());
    let text = |c: Option<&Class>| c.map_or("no verdict".to_owned(), Class::describe);
    let differences = m
        .differences()
        .into_iter()
        .take(DIFFERENCES_SHOWN)
        .map(|(a, b, d)| DifferenceRow {
            events: thousands(d.events),
            a: format!("{pa}: {}", text(a)),
            b: format!("{pb}: {}", text(b)),
            first_event: d.first_event,
        })
        .collect();
    let c = m.fleet_completeness();
    let agree_line = if c.is_complete() {
        "Policies A and B decide every event the same way.".to_owned()
    } else {
        format!("{}no event seen so far is decided differently by policies A and B.", c.prefix())
    };
    let policy_box = |side: Side| {
        let s = m.policy_summary(side);
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
        router_lines: router_lines(m),
        index_lines: index_lines(m),
    }
}

/// What the router's index sees under each policy, fleet-wide, from the first frame on.
pub fn index_lines(m: &Model) -> Vec<String> {
    let (Some(a), Some(b)) = (m.index().totals(Side::A), m.index().totals(Side::B)) else { return Vec::new() };
    if a.engine_prefix_tokens == 0 && a.blocks.router_blocks + b.blocks.router_blocks == 0 {
        return Vec::new();
    }
    let since = m.t0_nanos().map(|t| format!("since {}, ", kvscope_protocol::time::utc_time_of_day(t))).unwrap_or_default();
    let mut out = vec![format!(
        "{since}under {} {}; under {}: {} of them ({})",
        m.policy_name(Side::A),
        a.cost_words(thousands),
        m.policy_name(Side::B),
        thousands(b.visible_prefix_tokens),
        kvscope_index::percent(b.visible_share()),
    )];
    let (sa, sb) = (a.visible_prefix_tokens, b.visible_prefix_tokens);
    if sa != sb {
        let (more, n) = if sb > sa { (Side::B, sb - sa) } else { (Side::A, sa - sb) };
        out.push(format!("{} lets the router see {} more cached tokens", m.policy_name(more), thousands(n)));
    }
    out
}

/// Shared router keys named one by one in the headline; the rest are one line.
const SHARED_KEYS_LISTED: usize = 3;

/// The relay's drops and the reconciliation's differences, fleet-wide, as headline sentences:
/// "dynamo-1.6.1's relay dropped 129 events of 3:0 (unknown_medium): 129 stores skipped: medium
/// names no tier". Empty when there is no event plane.
pub fn router_lines(m: &Model) -> Vec<String> {
    let Some(router) = m.router() else { return Vec::new() };
    let report = router.report();
    let policy = router.policy.name;
    let mut out = Vec::new();
    let mut routine = 0;
    for s in &report.sources {
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
    out.extend(kvscope_router::SharedKey::lines(&report.shared_keys, SHARED_KEYS_LISTED));
    for u in &report.unknown_workers {
        out.push(format!(
            "{} RouterEvents name worker {} at dp rank {}, which no --workers source is",
            thousands(u.events),
            u.worker_id,
            u.dp_rank
        ));
    }
    out
}
