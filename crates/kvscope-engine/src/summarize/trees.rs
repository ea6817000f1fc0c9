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

/// Which tree: the settings', else the first source's device tree. Every shard knows every
/// source, so every shard names the same one; the shard that reads it draws it.
pub fn shown(m: &Model, settings: &Settings) -> Option<(u32, StorageTier)> {
    let (src, tier) = match &settings.tree {
        Some((key, tier)) => (m.source_by_key(key).map(|s| s.index), StorageTier::from_label(tier)),
        None => (m.sources().first().map(|s| s.index), None),
    };
    let tier = tier.or_else(|| settings.tier_filter.as_deref().and_then(StorageTier::from_label)).unwrap_or(StorageTier::Device);
    src.map(|s| (s, tier))
}

/// The trees of the source shown as the shard that reads it draws them: all but which blocks
/// the router's index lacks (the question for the shard that models that index) and the hash
/// search (every shard's own trees).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreePart {
    trees: Trees,
    /// The policy the trees are built by, for the index's line in a block's title.
    policy: String,
    lacks: Option<LacksQuery>,
}

impl TreePart {
    pub fn lacks_query(&self) -> Option<&LacksQuery> {
        self.lacks.as_ref()
    }
}

/// Which of these blocks of a worker's tier the router's index under `side` lacks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LacksQuery {
    pub side: Side,
    pub worker: String,
    pub rank: u32,
    pub tier: StorageTier,
    pub hashes: Vec<u64>,
}

/// The tree shown, drawn by this model; `None` when another shard reads its source.
pub fn tree_part(m: &Model, settings: &Settings, drill: Option<u64>) -> Option<TreePart> {
    let side = m.config().trees;
    let mut out = TreePart { policy: m.policy_name(side).to_owned(), ..TreePart::default() };
    let Some((src, tier)) = shown(m, settings) else {
        out.trees.head = "No worker yet.".to_owned();
        return Some(out);
    };
    let source = m.source(src)?;
    if !source.own {
        return None;
    }
    let t = &mut out.trees;
    t.shown = Some((source.key.clone(), tier));
    let trees = m.trees();
    let side_name = side.as_str().to_uppercase();
    t.sides = sides(m, src, &mut t.empty_tiers);
    let Some(summary) = trees.summary(src, tier) else {
        t.head = format!("Policy {side_name} {}: 0 blocks, nothing applied on {}.", out.policy, tier.label());
        return Some(out);
    };
    t.has_tree = true;
    let c = summary.counters;
    t.head = format!(
        "Policy {side_name} {}, {}: {} · {} roots · depth {}",
        out.policy,
        tier.label(),
        c.held_explained(summary.blocks),
        thousands(summary.roots as u64),
        summary.max_depth,
    );
    t.counters = Consistency::ALL
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
    t.drilled = drill.map(|h| format!("{h:016x}"));
    let title = |n: &IcicleNode| match n.hash {
        None => "every root of this tier".to_owned(),
        Some(h) => {
            let info = trees.block(src, tier, h);
            let parent = info.and_then(|b| b.parent_hash).map_or("none (a root)".to_owned(), |p| format!("{p:016x}"));
            let bs = m.block_size_of(src, n.seq, h).map_or("unknown (frame not retained)".to_owned(), |b| format!("{b} tokens"));
            format!("hash {h:016x}\nparent {parent}\nblock_size {bs}\nseq {}\n{} blocks in subtree", n.seq, n.blocks)
        }
    };
    let nodes = trees.subtree(src, tier, drill, DEPTH, WIDTH);
    t.icicle = nodes.as_deref().and_then(|nodes| icicle(nodes, &title));
    // Which shown blocks the router's index under the tree's policy lacks: the question for the
    // shard that models that index.
    out.lacks = nodes.map(|nodes| LacksQuery {
        side,
        worker: source.worker_id.clone(),
        rank: source.dp_rank,
        tier,
        hashes: nodes.iter().filter_map(|n| n.hash).collect(),
    });
    Some(out)
}

/// The blocks asked about that the router's index lacks, with why, if this model models that
/// index (else none).
pub fn lacks(m: &Model, q: &LacksQuery) -> Vec<(u64, String)> {
    q.hashes.iter().filter_map(|&h| Some((h, m.index().why_missing(q.side, &q.worker, q.rank, q.tier, h)?.sentence()))).collect()
}

/// One hit of the hash search in one model's trees, with where it sits, to order the shards'.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchHit {
    source: u32,
    hit: HashHit,
}

/// Where a block hash is in this model's trees, under either policy.
pub fn search_hits(m: &Model, query: &str) -> Vec<SearchHit> {
    let Some(h) = parse_hash(query) else { return Vec::new() };
    [Side::A, Side::B]
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
            SearchHit { source: src, hit: HashHit { side, source: key, tier, text, parent: n.parent_hash.filter(|_| n.parent_present) } }
        })
        .collect()
}

/// The trees part of the page: the tree drawn by the shard that reads its source, the blocks
/// the index's shard says the router lacks, and every shard's hits of the hash searched.
pub fn assemble(part: TreePart, lacks: &[(u64, String)], mut hits: Vec<SearchHit>, query: &str) -> Trees {
    let mut trees = part.trees;
    if let Some(root) = &mut trees.icicle {
        mark_lacking(root, lacks, &part.policy);
    }
    trees.search = match parse_hash(query) {
        None if query.trim().is_empty() => HashSearch::None,
        None => HashSearch::NotAHash,
        Some(h) if hits.is_empty() => HashSearch::NotFound(format!("{h:016x}: in no tree of either policy.")),
        Some(_) => {
            // Per policy, by source and tier: as one model's trees list them.
            hits.sort_by_key(|h| (h.hit.side as u8, h.source, h.hit.tier));
            HashSearch::Hits(hits.into_iter().map(|h| h.hit).collect())
        }
    };
    trees
}

fn mark_lacking(cell: &mut IcicleCell, lacks: &[(u64, String)], policy: &str) {
    if let Some((_, why)) = cell.hash.and_then(|h| lacks.iter().find(|(l, _)| *l == h)) {
        cell.router_lacks = true;
        cell.title.push_str(&format!("\nnot in the router's index ({policy}): {why}"));
    }
    cell.kids.iter_mut().for_each(|k| mark_lacking(k, lacks, policy));
}

/// The trees of one model: the fleet as one shard.
pub fn trees(m: &Model, settings: &Settings, drill: Option<u64>) -> Trees {
    let Some(part) = tree_part(m, settings, drill) else { return Trees::default() };
    let answers = part.lacks_query().map(|q| lacks(m, q)).unwrap_or_default();
    assemble(part, &answers, search_hits(m, &settings.hash), &settings.hash)
}

/// The nodes as nested cells, each with its label and title ([`assemble`] marks those the
/// router lacks).
fn icicle(nodes: &[IcicleNode], title: &dyn Fn(&IcicleNode) -> String) -> Option<IcicleCell> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            children[p].push(i);
        }
    }
    type Title<'a> = &'a dyn Fn(&IcicleNode) -> String;
    fn cell(i: usize, nodes: &[IcicleNode], children: &[Vec<usize>], title: Title<'_>) -> IcicleCell {
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
            router_lacks: false,
            kids: children[i].iter().map(|&c| cell(c, nodes, children, title)).collect(),
        }
    }
    (!nodes.is_empty()).then(|| cell(0, nodes, &children, title))
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
