//! The headline in the router's terms: one router indexer consumes every worker's stream and
//! exits on the first fatal event of any of them; a restarted one meets every later fatal event
//! again (a crashloop) and never sees what arrived while it was down. A policy that keeps running
//! still skips or moves events, and the headline says what that costs.
//!
//! Built from the model's counters in plain Rust (tested natively); `views::headline` only
//! renders the lines. Every sentence about a rule comes from that rule's item in
//! `kvscope-normalize` (its summary fragment and its plain sentence), never written here again.

use std::collections::BTreeMap;

use kvscope_normalize::{Outcome, Policy, VerdictLabel};
use kvscope_protocol::time::utc;

use super::Model;
use super::classes::{Reason, TierShown};
use super::completeness::Completeness;
use super::settings::Side;
use kvscope_engine_protocol::fmt::thousands;

/// Sources the crashloop line names by name (most fatal events first).
pub const CRASHLOOP_SOURCES_NAMED: usize = 8;

/// Where the fleet's indexer exits under a fatal policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    pub source: String,
    pub seq: u64,
    /// Receive time in UTC.
    pub at: String,
    pub label: VerdictLabel,
    pub sentence: String,
    pub event_id: u64,
}

/// One policy's verdict over the fleet, in the router's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySummary {
    pub side: Side,
    pub policy: String,
    /// The policy's one line on itself.
    pub about: &'static str,
    pub sources: usize,
    pub events: u64,
    pub completeness: Completeness,
    pub exit: Option<Exit>,
    /// Fatal events after the exit, per source (most first): each stops a restarted indexer.
    pub crashloop: Vec<(String, u64)>,
    /// Events that arrived after the exit, from every source.
    pub never_indexed: u64,
    /// (label, tiers, events) of fatal verdicts.
    pub fatal: Vec<(VerdictLabel, String, u64)>,
    /// (label, tiers, events) of skips that leave a tier's view incomplete.
    pub notable_skips: Vec<(VerdictLabel, String, u64)>,
    /// (label, events) of routine filtering, each label apart.
    pub filtered: Vec<(VerdictLabel, u64)>,
    /// Policy B only: events it files on another tier than policy A does (from, to, events).
    pub moved: Vec<(TierShown, TierShown, u64)>,
    /// Events applied, and per tier.
    pub applied: u64,
    pub applied_tiers: String,
}

fn tiers_text(tiers: &BTreeMap<TierShown, u64>) -> String {
    tiers.keys().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The fix's own wording: the plain sentence of the rule that decides `label`.
pub fn rule_sentence(label: VerdictLabel) -> &'static str {
    label.rule().sentence
}

impl Model {
    /// Sums one policy's verdicts over every source.
    pub fn policy_summary(&self, side: Side) -> PolicySummary {
        let classes = self.classes();
        let mut fatal: BTreeMap<VerdictLabel, (BTreeMap<TierShown, u64>, u64)> = BTreeMap::new();
        let mut skips: BTreeMap<VerdictLabel, (BTreeMap<TierShown, u64>, u64)> = BTreeMap::new();
        let mut filtered: BTreeMap<VerdictLabel, u64> = BTreeMap::new();
        let mut applied_tiers: BTreeMap<TierShown, u64> = BTreeMap::new();
        let (mut applied, mut events, mut never_indexed) = (0, 0, 0);
        let mut crashloop = Vec::new();
        for src in self.engine_sources() {
            let counts = src.counts(side);
            events += counts.events;
            never_indexed += counts.after_exit;
            if counts.fatal_after_exit > 0 {
                crashloop.push((src.key.clone(), counts.fatal_after_exit));
            }
            for ((kind, reason), (n, tiers)) in counts.rows(classes) {
                let add = |into: &mut BTreeMap<VerdictLabel, (BTreeMap<TierShown, u64>, u64)>, label| {
                    let e = into.entry(label).or_default();
                    e.1 += n;
                    for (t, k) in &tiers {
                        *e.0.entry(*t).or_default() += k;
                    }
                };
                match (kind, reason) {
                    (Outcome::Fatal, Reason::Label(l)) => add(&mut fatal, l),
                    (Outcome::Skip, Reason::Label(l)) if l.is_routine_filter() => *filtered.entry(l).or_default() += n,
                    (Outcome::Skip, Reason::Label(l)) => add(&mut skips, l),
                    (Outcome::Apply, _) => {
                        applied += n;
                        for (t, k) in &tiers {
                            *applied_tiers.entry(*t).or_default() += k;
                        }
                    }
                    _ => {}
                }
            }
        }
        crashloop.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let exit = self.indexer_exit(side).map(|e| Exit {
            source: self.source(e.source).map_or_else(|| e.source.to_string(), |s| s.key.clone()),
            seq: e.seq,
            at: utc(e.recv_time_nanos),
            label: e.label,
            sentence: e.sentence.clone(),
            event_id: e.event_id,
        });
        let policy = self.policy_name(side).to_owned();
        PolicySummary {
            side,
            about: policy.parse::<Policy>().map_or("", |p| p.about),
            policy,
            sources: self.engine_sources().count(),
            events,
            completeness: self.fleet_completeness(),
            exit,
            crashloop,
            never_indexed,
            fatal: fatal.into_iter().map(|(l, (t, n))| (l, tiers_text(&t), n)).collect(),
            notable_skips: skips.into_iter().map(|(l, (t, n))| (l, tiers_text(&t), n)).collect(),
            filtered: filtered.into_iter().collect(),
            moved: if side == Side::B { self.moved_between_tiers() } else { Vec::new() },
            applied,
            applied_tiers: applied_tiers.iter().map(|(t, n)| format!("{} on {t}", thousands(*n))).collect::<Vec<_>>().join(", "),
        }
    }

    /// Events the two policies file on different tiers: (tier under A, tier under B, events),
    /// most first. Policy B "moves" them.
    pub fn moved_between_tiers(&self) -> Vec<(TierShown, TierShown, u64)> {
        let mut v: Vec<_> = self
            .differences()
            .into_iter()
            .filter_map(|(a, b, d)| {
                let (a, b) = (a?, b?);
                (a.kind == Outcome::Apply && b.kind == Outcome::Apply).then_some(())?;
                Some((a.tier?, b.tier?, d.events))
            })
            .collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.2));
        v
    }
}

impl PolicySummary {
    /// True only when an operator may read this policy's verdict as an all-clear: no exit, and
    /// the data behind it complete.
    pub fn all_clear(&self) -> bool {
        self.exit.is_none() && self.completeness.is_complete()
    }

    /// The verdict, first words first: what the data covers, then whether the router's indexer
    /// exits (where, when, on which rule) or keeps running.
    pub fn verdict_line(&self) -> String {
        let prefix = self.completeness.prefix();
        if let Completeness::Unknown(_) = self.completeness {
            return format!("{prefix}{}: nothing to say yet", self.policy);
        }
        match &self.exit {
            Some(e) => {
                format!("{prefix}{}: the router's indexer EXITS at {} seq {} ({}) on {}", self.policy, e.source, e.seq, e.at, e.label)
            }
            None => format!(
                "{prefix}{}: the router's indexer keeps running over {} events from {} sources",
                self.policy,
                thousands(self.events),
                self.sources
            ),
        }
    }

    /// The lines under the verdict: the exit's rule, the crashloop and what is never indexed; or
    /// what a running indexer skips, each with its rule's own sentence.
    pub fn detail_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.exit {
            out.push(format!("why: {}", e.sentence));
            let later: u64 = self.crashloop.iter().map(|c| c.1).sum();
            if later > 0 {
                // The sources that crash it most, then how many more: at 512 sources the whole
                // list would be a wall.
                let mut per: Vec<String> =
                    self.crashloop.iter().take(CRASHLOOP_SOURCES_NAMED).map(|(k, n)| format!("{k} {}", thousands(*n))).collect();
                if self.crashloop.len() > CRASHLOOP_SOURCES_NAMED {
                    per.push(format!("and {} more sources", self.crashloop.len() - CRASHLOOP_SOURCES_NAMED));
                }
                out.push(format!(
                    "crashloop: {} later events would stop a restarted indexer again, from {} sources ({})",
                    thousands(later),
                    self.crashloop.len(),
                    per.join(", ")
                ));
            } else {
                out.push("no later event would stop a restarted indexer".to_owned());
            }
            out.push(format!(
                "an indexer that stays down never sees the {} events that arrived after it exited",
                thousands(self.never_indexed)
            ));
        }
        for (label, tiers, n) in &self.fatal {
            out.push(format!("{} (on {tiers}); {}", label.summary(*n), rule_sentence(*label)));
        }
        for (label, tiers, n) in &self.notable_skips {
            let on = if tiers.is_empty() { String::new() } else { format!(" (on {tiers})") };
            out.push(format!("{}{on}: the router never indexes these. {}", label.summary(*n), rule_sentence(*label)));
        }
        for (from, to, n) in &self.moved {
            out.push(format!("{} events filed on {to} where policy A files them on {from}", thousands(*n)));
        }
        if self.applied > 0 {
            out.push(format!("{} events applied: {}", thousands(self.applied), self.applied_tiers));
        }
        for (label, n) in &self.filtered {
            out.push(format!("{} (routine filtering)", label.summary(*n)));
        }
        out
    }
}
