//! The headline in the router's terms: one router indexer consumes every worker's stream and
//! exits on the first fatal event of any of them; a restarted one meets every later fatal event
//! again (a crashloop) and never sees what arrived while it was down. A policy that keeps running
//! still skips or moves events, and the headline says what that costs.
//!
//! Built from the model's counters in plain Rust (tested natively); `views::headline` only
//! renders the lines. Every sentence about a rule comes from that rule's item in
//! `kvscope-normalize` (its summary fragment and its plain sentence), never written here again.

use kvscope_normalize::VerdictLabel;

use super::Model;
use super::classes::TierShown;
use super::completeness::Completeness;
use super::fleet::FleetFacts;
use super::settings::Side;
use kvscope_engine_protocol::fmt::thousands;

/// Sources the crashloop line names by name (most fatal events first).
pub const CRASHLOOP_SOURCES_NAMED: usize = 8;

/// Where the fleet's indexer exits under a fatal policy.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Exit {
    /// Its frame's place in the stream: the earliest of the shards' exits is the fleet's.
    pub position: u64,
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

/// The fix's own wording: the plain sentence of the rule that decides `label`.
pub fn rule_sentence(label: VerdictLabel) -> &'static str {
    label.rule().sentence
}

impl Model {
    /// Sums one policy's verdicts over every source (this shard's, when it is one).
    pub fn policy_summary(&self, side: Side) -> PolicySummary {
        FleetFacts::of(self).policy_summary(side)
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
