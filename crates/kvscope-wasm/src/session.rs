//! [`Session`]: a normalizer and its tier trees, driven by frames or payloads, answering with the
//! plain structs of [`crate::model`].
//!
//! This is the whole behaviour of the JS API in plain Rust, so it is tested natively; the
//! `#[wasm_bindgen]` layer in [`crate::js`] only converts arguments and results.

use std::collections::BTreeMap;

use kvscope_normalize::{LogLine, Normalizer, Policy, RULES, SourceId, StorageTier, UnknownPolicy, Verdict, VerdictLabel};
use kvscope_tiers::{Forest, ForestConfig, TierTree};
use kvscope_wire::frame::parse_live;
use kvscope_wire::{BlockHash, EventType};

use crate::model::*;

/// A normalizer for one (block size, policy) and its forest.
#[derive(Debug)]
pub struct Session {
    normalizer: Normalizer,
    forest: Forest,
    /// Per source id: messages that were not 3-frame live messages.
    frame_errors: Vec<u64>,
    verdicts: Vec<Verdict>,
}

/// Every preset, for a policy picker.
pub fn policies() -> Vec<JsPolicy> {
    Policy::PRESETS.iter().map(|p| JsPolicy { name: p.name.to_owned(), about: p.about.to_owned() }).collect()
}

/// The rules in evaluation order.
pub fn rules() -> Vec<JsRule> {
    RULES
        .iter()
        .map(|r| JsRule {
            step: r.step.to_owned(),
            label: r.name.to_owned(),
            sentence: r.sentence.to_owned(),
            checks: r.checks.to_owned(),
            decides: r.decides.to_owned(),
            labels: r.labels.iter().map(|t| t.label).collect(),
        })
        .collect()
}

/// Every verdict label, in `VerdictLabel::ALL` order, with its outcome and rule.
pub fn labels() -> Vec<JsLabel> {
    VerdictLabel::ALL
        .iter()
        .map(|&label| JsLabel { label, outcome: label.outcome().as_str().to_owned(), rule: label.rule().name.to_owned() })
        .collect()
}

/// Parses a tier label, with an error that lists the valid ones.
pub fn parse_tier(label: &str) -> Result<StorageTier, String> {
    StorageTier::from_label(label).ok_or_else(|| {
        let valid: Vec<&str> = StorageTier::ALL.iter().map(|t| t.label()).collect();
        format!("unknown tier {label:?}; pass one of: {}", valid.join(", "))
    })
}

/// Parses a block hash given as 1-16 hex digits (the form every result uses).
pub fn parse_hash(text: &str) -> Result<u64, String> {
    if text.is_empty() || text.len() > 16 {
        return Err(format!("block hash {text:?} is not 1 to 16 hex digits; pass it as results show it"));
    }
    u64::from_str_radix(text, 16).map_err(|_| format!("block hash {text:?} is not hex; pass it as results show it"))
}

fn hex(h: u64) -> String {
    BlockHash(h).to_string()
}

fn log_line(l: &LogLine) -> JsLogLine {
    JsLogLine { level: l.level.as_str().to_owned(), seq: l.seq, event_index: l.event_index, text: l.text.clone() }
}

impl Session {
    /// A session for `--block-size block_size --policy policy`, with unbounded trees.
    pub fn new(block_size: u32, policy: &str) -> Result<Session, UnknownPolicy> {
        Ok(Session::with_forest(block_size, policy.parse()?, ForestConfig::unbounded()))
    }

    pub fn with_forest(block_size: u32, policy: Policy, config: ForestConfig) -> Session {
        Session {
            normalizer: Normalizer::new(block_size, policy),
            forest: Forest::new(config),
            frame_errors: Vec::new(),
            verdicts: Vec::new(),
        }
    }

    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    pub fn forest(&self) -> &Forest {
        &self.forest
    }

    fn source(&mut self, worker_id: &str, dp_rank: u32) -> SourceId {
        let id = self.normalizer.source(worker_id, dp_rank);
        if self.frame_errors.len() <= id.index() {
            self.frame_errors.resize(id.index() + 1, 0);
        }
        id
    }

    fn find(&self, worker_id: &str, dp_rank: u32) -> Result<SourceId, String> {
        self.normalizer
            .find_source(worker_id, dp_rank)
            .ok_or_else(|| format!("no source {worker_id}:{dp_rank} yet; push a frame or payload for it first"))
    }

    /// Pushes a live message: `[topic, seq (8 bytes, big-endian), payload]`. Anything else is
    /// counted as a frame error on the source and reported in the result.
    pub fn push_frames(&mut self, worker_id: &str, dp_rank: u32, frames: &[&[u8]]) -> JsPushResult {
        match parse_live(frames) {
            Ok(msg) => self.push_payload(worker_id, dp_rank, msg.seq, msg.payload),
            Err(err) => {
                let id = self.source(worker_id, dp_rank);
                self.frame_errors[id.index()] += 1;
                JsPushResult {
                    source: self.normalizer.source_key(id).to_string(),
                    seq: None,
                    ok: false,
                    error: Some(JsPushError { kind: "frame".into(), class: err.classify().into(), message: err.to_string() }),
                    batch: None,
                    verdicts: Vec::new(),
                }
            }
        }
    }

    /// Pushes one payload (the third frame) with its seq.
    pub fn push_payload(&mut self, worker_id: &str, dp_rank: u32, seq: u64, payload: &[u8]) -> JsPushResult {
        let id = self.source(worker_id, dp_rank);
        let source = self.normalizer.source_key(id).to_string();
        let mut verdicts = std::mem::take(&mut self.verdicts);
        verdicts.clear();
        let result = match self.normalizer.push_payload(id, seq, payload, &mut verdicts) {
            Ok(batch) => {
                let mut out = Vec::with_capacity(verdicts.len());
                for v in &verdicts {
                    let change = match batch.events.get(v.event_index as usize) {
                        Some(event) => self.forest.apply(v, event, batch.ts),
                        None => Default::default(),
                    };
                    out.push(js_verdict(v, JsChange { inserted: change.inserted, removed: change.removed, refused: change.refused }));
                }
                JsPushResult {
                    source,
                    seq: Some(seq),
                    ok: true,
                    error: None,
                    batch: Some(JsBatch { ts: batch.ts, dp_rank: batch.dp_rank, events: batch.events.len() as u32 }),
                    verdicts: out,
                }
            }
            Err(err) => JsPushResult {
                source,
                seq: Some(seq),
                ok: false,
                error: Some(JsPushError { kind: "decode".into(), class: err.classify().as_str().into(), message: err.to_string() }),
                batch: None,
                verdicts: Vec::new(),
            },
        };
        self.verdicts = verdicts;
        result
    }

    /// Every source pushed so far.
    pub fn sources(&self) -> Vec<JsSource> {
        self.normalizer
            .sources()
            .map(|(_, k)| JsSource { worker_id: k.worker_id.clone(), dp_rank: k.dp_rank, key: k.to_string() })
            .collect()
    }

    /// Counters, warning budgets, log and live blocks of one source.
    pub fn counters(&self, worker_id: &str, dp_rank: u32) -> Result<JsCounters, String> {
        let id = self.find(worker_id, dp_rank)?;
        let key = self.normalizer.source_key(id);
        let c = self.normalizer.counters(id);
        let tier_name = |t: Option<StorageTier>| t.map_or("none", StorageTier::label).to_owned();
        let tiers: Vec<Option<StorageTier>> = StorageTier::ALL.iter().copied().map(Some).chain([None]).collect();
        let mut verdicts = BTreeMap::new();
        let mut by_tier = BTreeMap::new();
        for &t in &tiers {
            let row: BTreeMap<String, u64> = VerdictLabel::ALL
                .iter()
                .filter_map(|&l| {
                    let n = c.verdicts(t, l);
                    (n > 0).then(|| (l.as_str().to_owned(), n))
                })
                .collect();
            if !row.is_empty() {
                by_tier.insert(tier_name(t), row.values().sum());
                verdicts.insert(tier_name(t), row);
            }
        }
        let budgets = [("conversion", &c.conversion), ("offload", &c.offload)];
        let blocks = self.forest.blocks(id);
        Ok(JsCounters {
            source: JsSource { worker_id: key.worker_id.clone(), dp_rank: key.dp_rank, key: key.to_string() },
            batches: c.batches,
            events: EventType::ALL.iter().map(|&t| (t.as_str().to_owned(), c.events(t))).collect(),
            total_events: c.total_events(),
            verdicts_by_label: VerdictLabel::ALL
                .iter()
                .filter_map(|&l| {
                    let n = c.verdicts_by_label(l);
                    (n > 0).then(|| (l.as_str().to_owned(), n))
                })
                .collect(),
            verdicts_by_tier: by_tier,
            verdicts,
            blocks_applied: c.blocks_applied,
            blocks_applied_by_tier: StorageTier::ALL.iter().map(|&t| (t.label().to_owned(), c.blocks_applied_on(t))).collect(),
            unknown_medium_fallbacks: c.unknown_medium_fallbacks,
            fatal_count: c.fatal_count,
            first_fatal: c.first_fatal.as_ref().map(log_line),
            warnings: budgets
                .iter()
                .map(|(name, b)| {
                    let budget = JsBudget {
                        limit: b.limit,
                        emitted: b.emitted,
                        suppressed: b.suppressed,
                        lines: b.lines.iter().map(log_line).collect(),
                    };
                    ((*name).to_owned(), budget)
                })
                .collect(),
            log: c.log().into_iter().map(log_line).collect(),
            summaries: c.summaries().into_iter().map(|(label, count, text)| JsSummaryLine { label, count, text }).collect(),
            decode_errors: c.decode_errors,
            first_decode_error: c.first_decode_error.as_ref().map(log_line),
            frame_errors: self.frame_errors.get(id.index()).copied().unwrap_or(0),
            batches_rejected: c.batches_rejected,
            notices: c.notices.total,
            trees: StorageTier::ALL.iter().map(|&t| (t.label().to_owned(), blocks[t.index()] as u64)).collect(),
        })
    }

    fn tree(&self, worker_id: &str, dp_rank: u32, tier: &str) -> Result<(String, StorageTier, Option<&TierTree>), String> {
        let id = self.find(worker_id, dp_rank)?;
        let tier = parse_tier(tier)?;
        Ok((self.normalizer.source_key(id).to_string(), tier, self.forest.tree(id, tier)))
    }

    /// Blocks, roots, depth, the `top_n` largest root subtrees and the tree counters of a tier.
    pub fn tree_summary(&self, worker_id: &str, dp_rank: u32, tier: &str, top_n: usize) -> Result<JsTreeSummary, String> {
        let (source, tier, tree) = self.tree(worker_id, dp_rank, tier)?;
        let empty = TierTree::new();
        let s = tree.unwrap_or(&empty).summary(top_n);
        let counters = tree_counters(&s.counters);
        let limit = self.forest.limit();
        Ok(JsTreeSummary {
            source,
            tier: tier.label().to_owned(),
            blocks: s.blocks as u64,
            roots: s.roots as u64,
            max_depth: s.max_depth,
            largest: s.largest.iter().map(|l| JsSubtreeSize { root: hex(l.root), blocks: l.blocks as u64, depth: l.depth }).collect(),
            counters,
            limit_hit: limit.hit,
            limit_first_hit_seq: limit.first_hit_seq,
            refused_blocks: limit.refused_blocks,
        })
    }

    /// An icicle drill-down below `root` (hex), or the whole tier for `None`.
    pub fn subtree(
        &self,
        worker_id: &str,
        dp_rank: u32,
        tier: &str,
        root: Option<&str>,
        max_depth: u32,
        max_children: usize,
    ) -> Result<Vec<JsIcicleNode>, String> {
        let (source, tier, tree) = self.tree(worker_id, dp_rank, tier)?;
        let root = root.map(parse_hash).transpose()?;
        let empty = TierTree::new();
        let nodes = tree.unwrap_or(&empty).subtree(root, max_depth, max_children).ok_or_else(|| {
            format!("block {} is not in {source} {}; pick a hash from tree_summary or subtree", hex(root.unwrap_or(0)), tier.label())
        })?;
        Ok(nodes
            .iter()
            .map(|n| JsIcicleNode {
                hash: n.hash.map(hex),
                parent: n.parent.map(|p| p as u32),
                depth: n.depth,
                blocks: n.blocks as u64,
                seq: n.seq,
                time: n.time,
                children: n.children as u32,
                hidden_children: n.hidden_children as u32,
                hidden_blocks: n.hidden_blocks as u64,
            })
            .collect())
    }

    /// One block of a tier, or `None`.
    pub fn block(&self, worker_id: &str, dp_rank: u32, tier: &str, hash: &str) -> Result<Option<JsBlock>, String> {
        let (_, _, tree) = self.tree(worker_id, dp_rank, tier)?;
        let hash = parse_hash(hash)?;
        Ok(tree.and_then(|t| t.block(hash)).map(|b| JsBlock {
            hash: hex(b.hash),
            parent_hash: b.parent_hash.map(hex),
            parent_present: b.parent_present,
            children: b.children as u32,
            seq: b.seq,
            time: b.time,
        }))
    }
}

/// The tree counters as name -> value.
fn tree_counters(c: &kvscope_tiers::TreeCounters) -> BTreeMap<String, u64> {
    [
        ("stores_applied", c.stores_applied),
        ("removes_applied", c.removes_applied),
        ("blocks_inserted", c.blocks_inserted),
        ("blocks_removed", c.blocks_removed),
        ("parent_block_not_found", c.parent_block_not_found),
        ("block_not_found", c.block_not_found),
        ("duplicate_store", c.duplicate_store),
        ("duplicate_blocks", c.duplicate_blocks),
        ("orphaned_by_remove", c.orphaned_by_remove),
        ("clears", c.clears),
        ("refused_stores", c.refused_stores),
        ("refused_blocks", c.refused_blocks),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// One verdict as JS sees it.
pub fn js_verdict(v: &Verdict, change: JsChange) -> JsVerdict {
    let label = v.label();
    let rule = v.rule();
    JsVerdict {
        event_index: v.event_index,
        event_type: v.event_type.as_str().to_owned(),
        outcome: label.outcome().as_str().to_owned(),
        label,
        tier: v.tier.map(|t| t.label().to_owned()),
        blocks: v.facts.blocks,
        blocks_applied: v.blocks_applied(),
        flags: v.flags.names().map(str::to_owned).collect(),
        rule: rule.name.to_owned(),
        rule_step: rule.step.to_owned(),
        code: v.code().to_string(),
        text: v.to_string(),
        fatal_hint: v.fatal_hint(),
        change,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_must_be_three_and_are_counted_per_source() {
        let mut s = Session::new(16, "fixed").unwrap();
        let r = s.push_frames("w0", 0, &[b"kv-events".as_slice(), b"\x90"]);
        assert!(!r.ok);
        let e = r.error.unwrap();
        assert_eq!((e.kind.as_str(), e.class.as_str()), ("frame", "frame_count"));
        assert_eq!(e.message, "expected 3 frames [topic, seq, payload], got 2");
        assert_eq!(s.counters("w0", 0).unwrap().frame_errors, 1);
    }

    #[test]
    fn errors_name_what_to_pass() {
        let s = Session::new(16, "fixed").unwrap();
        assert_eq!(s.counters("w9", 0).unwrap_err(), "no source w9:0 yet; push a frame or payload for it first");
        assert_eq!(
            Session::new(16, "strict").unwrap_err().to_string(),
            "unknown policy \"strict\"; pass one of: fixed, legacy, dynamo-1.6.1"
        );
        assert_eq!(parse_tier("gpu").unwrap_err(), "unknown tier \"gpu\"; pass one of: device, host_pinned, disk, external");
        assert!(parse_hash("xyz").is_err());
        assert_eq!(parse_hash("00000000000000ff"), Ok(255));
    }
}
