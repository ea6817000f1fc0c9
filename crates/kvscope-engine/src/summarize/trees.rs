//! Tier trees: per worker and tier, the prefix tree of blocks summarised as an icicle sized by
//! block count (largest subtrees first, the rest folded into "+N more"), each consistency
//! counter with the events behind it, A's and B's trees side by side per tier, and a search by
//! block hash across every worker, tier and policy.

use kvscope_engine_protocol::fmt::thousands;
use kvscope_engine_protocol::view::{HashHit, HashSearch, IcicleCell, TierSides, TreeCounter, Trees};
use kvscope_engine_protocol::{Settings, Side};
use kvscope_normalize::StorageTier;
use kvscope_tiers::{Consistency, IcicleNode};

use crate::model::Model;

/// Children shown per node.
const WIDTH: usize = 12;
/// Levels below the drill-down root.
const DEPTH: u32 = 5;

/// A searched hash: 16 hex digits (with or without `0x`), or a decimal number.
pub fn parse_hash(s: &str) -> Option<u64> {
    let s = s.trim().trim_start_matches("0x");
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, 16).ok().or_else(|| s.parse::<u64>().ok())
}

/// Which tree: the settings', else the first source's device tree.
fn shown(m: &Model, settings: &Settings) -> Option<(u32, StorageTier)> {
    let (src, tier) = match &settings.tree {
        Some((key, tier)) => (m.source_by_key(key).map(|s| s.index), StorageTier::from_label(tier)),
        None => (m.sources().first().map(|s| s.index), None),
    };
    let tier = tier.or_else(|| settings.tier_filter.as_deref().and_then(StorageTier::from_label)).unwrap_or(StorageTier::Device);
    src.map(|s| (s, tier))
}

pub fn trees(m: &Model, settings: &Settings, drill: Option<u64>) -> Trees {
    let mut out = Trees { search: search(m, &settings.hash), ..Trees::default() };
    let Some((src, tier)) = shown(m, settings) else {
        out.head = "No worker yet.".to_owned();
        return out;
    };
    out.shown = m.source(src).map(|s| (s.key.clone(), tier));
    let trees = m.trees();
    let side = m.config().trees;
    let policy = m.policy_name(side);
    let side_name = side.as_str().to_uppercase();
    out.sides = sides(m, src, &mut out.empty_tiers);
    let Some(summary) = trees.summary(src, tier) else {
        out.head = format!("Policy {side_name} {policy}: 0 blocks, nothing applied on {}.", tier.label());
        return out;
    };
    out.has_tree = true;
    let c = summary.counters;
    out.head = format!(
        "Policy {side_name} {policy}, {}: {} · {} roots · depth {}",
        tier.label(),
        c.held_explained(summary.blocks),
        thousands(summary.roots as u64),
        summary.max_depth,
    );
    out.counters = Consistency::ALL
        .into_iter()
        .map(|k| {
            let events = trees.counter_events(src, tier, k);
            TreeCounter {
                key: k.as_str().to_owned(),
                count: k.of(&c),
                title: format!("{} {}", k.as_str(), thousands(k.of(&c))),
                sentence: k.sentence().to_owned(),
                first_event: events.first().copied(),
                kept: events.len(),
            }
        })
        .collect();
    out.drilled = drill.map(|h| format!("{h:016x}"));
    let (worker, rank) = m.source(src).map_or((String::new(), 0), |s| (s.worker_id.clone(), s.dp_rank));
    // Which shown blocks the router's index under the tree's policy lacks, and why.
    let lacks = |n: &IcicleNode| n.hash.and_then(|h| m.index().why_missing(side, &worker, rank, tier, h));
    let title = |n: &IcicleNode| match n.hash {
        None => "every root of this tier".to_owned(),
        Some(h) => {
            let info = trees.block(src, tier, h);
            let parent = info.and_then(|b| b.parent_hash).map_or("none (a root)".to_owned(), |p| format!("{p:016x}"));
            let bs = m.block_size_of(src, n.seq, h).map_or("unknown (frame not retained)".to_owned(), |b| format!("{b} tokens"));
            let mut t = format!("hash {h:016x}\nparent {parent}\nblock_size {bs}\nseq {}\n{} blocks in subtree", n.seq, n.blocks);
            if let Some(why) = lacks(n) {
                t.push_str(&format!("\nnot in the router's index ({policy}): {}", why.sentence()));
            }
            t
        }
    };
    let lacks = |n: &IcicleNode| lacks(n).is_some();
    out.icicle = trees.subtree(src, tier, drill, DEPTH, WIDTH).and_then(|nodes| icicle(&nodes, &title, &lacks));
    out
}

/// The nodes as nested cells, each with its label, title and whether the router lacks it.
fn icicle(nodes: &[IcicleNode], title: &dyn Fn(&IcicleNode) -> String, lacks: &dyn Fn(&IcicleNode) -> bool) -> Option<IcicleCell> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            children[p].push(i);
        }
    }
    type Title<'a> = &'a dyn Fn(&IcicleNode) -> String;
    type Lacks<'a> = &'a dyn Fn(&IcicleNode) -> bool;
    fn cell(i: usize, nodes: &[IcicleNode], children: &[Vec<usize>], title: Title<'_>, lacks: Lacks<'_>) -> IcicleCell {
        let n = &nodes[i];
        IcicleCell {
            hash: n.hash,
            // The first 8 hex digits identify a block among its siblings; the whole hash is in
            // the title.
            label: match n.hash {
                Some(h) => format!("{:08x}… {}", h >> 32, n.blocks),
                None => format!("all roots · {} blocks", n.blocks),
            },
            title: title(n),
            blocks: n.blocks as u64,
            hidden_children: n.hidden_children,
            hidden_blocks: n.hidden_blocks as u64,
            router_lacks: lacks(n),
            kids: children[i].iter().map(|&c| cell(c, nodes, children, title, lacks)).collect(),
        }
    }
    (!nodes.is_empty()).then(|| cell(0, nodes, &children, title, lacks))
}

/// A's and B's trees side by side, per tier: what each holds and what B holds that A does not.
/// Tiers empty under both are listed in `empty` instead.
fn sides(m: &Model, src: u32, empty: &mut Vec<StorageTier>) -> Vec<TierSides> {
    StorageTier::ALL
        .iter()
        .filter_map(|&t| {
            let (a, b) = (m.trees_of(Side::A).blocks(src, t), m.trees_of(Side::B).blocks(src, t));
            let (ca, cb) = (m.trees_of(Side::A).counters(src, t), m.trees_of(Side::B).counters(src, t));
            if a == 0 && b == 0 && ca.stores_applied + ca.removes_applied + cb.stores_applied + cb.removes_applied == 0 {
                empty.push(t);
                return None;
            }
            let difference = match b as i64 - a as i64 {
                0 => "the same".to_owned(),
                d if d > 0 => format!("B holds {} more", thousands(d as u64)),
                d => format!("A holds {} more", thousands(d.unsigned_abs())),
            };
            Some(TierSides { tier: t, blocks: [a, b], titles: [ca.held_explained(a as usize), cb.held_explained(b as usize)], difference })
        })
        .collect()
}

/// Where a block hash is, in every tree of either policy.
fn search(m: &Model, query: &str) -> HashSearch {
    let Some(h) = parse_hash(query) else {
        return if query.trim().is_empty() { HashSearch::None } else { HashSearch::NotAHash };
    };
    let hits: Vec<HashHit> = [Side::A, Side::B]
        .into_iter()
        .flat_map(|side| m.trees_of(side).search(h).into_iter().map(move |hit| (side, hit)))
        .map(|(side, (src, tier, n))| {
            let key = m.source(src).map(|s| s.key.clone()).unwrap_or_default();
            let bs = m.block_size_of(src, n.seq, n.hash);
            let text = format!(
                "{} {}: {key} {}: seq {}, block_size {}, {} children, parent {}",
                side.as_str().to_uppercase(),
                m.policy_name(side),
                tier.label(),
                n.seq,
                bs.map_or("?".into(), |b| b.to_string()),
                n.children,
                n.parent_hash.map_or("none".into(), |p| format!("{p:016x}"))
            );
            HashHit { side, source: key, tier, text, parent: n.parent_hash.filter(|_| n.parent_present) }
        })
        .collect();
    if hits.is_empty() { HashSearch::NotFound(format!("{h:016x}: in no tree of either policy.")) } else { HashSearch::Hits(hits) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_hex_or_decimal() {
        assert_eq!(parse_hash("0x00ff"), Some(255));
        assert_eq!(parse_hash(" ff "), Some(255));
        assert_eq!(parse_hash("zz"), None);
        assert_eq!(parse_hash(""), None);
    }
}
