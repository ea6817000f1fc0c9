//! The fleet-wide facts: what the headline and the data-quality strip say about every source
//! together (one router indexer consumes the whole fleet), as parts a model computes over its
//! own sources ([`FleetFacts::of`]) and [`FleetFacts::merge`] adds up across shards
//! ([`super::shard`]). One model is a fleet of one shard: its headline takes the same path, so
//! the merge is exercised by every view, not only by a sharded page.
//!
//! What a part holds is what adds up: counts by label and tier (not their sentences), the
//! indexer's exit with its stream position (the earliest wins), each disagreement's first event
//! with its position. Sentences are made once, from the merged facts ([`FleetFacts::policy_summary`]).

use std::collections::BTreeMap;

use kvscope_index::IndexCounts;
use kvscope_normalize::{Outcome, VerdictLabel};
use kvscope_router::{RouterCounts, SharedKey, UnknownWorker};

use super::Model;
use super::classes::{Class, Reason, TierShown};
use super::completeness::{Completeness, Shortfall, Unknown, lost_in_gaps};
use super::settings::Side;
use super::summary::{Exit, PolicySummary};

/// Events per verdict label, and per tier they happened on.
pub type LabelTiers = BTreeMap<VerdictLabel, (BTreeMap<TierShown, u64>, u64)>;

/// One policy's verdicts over some sources, in the router's terms.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SideFacts {
    pub sources: usize,
    pub events: u64,
    /// Events that arrived after the fleet's indexer exited.
    pub never_indexed: u64,
    /// Fatal events after the exit, per source.
    pub crashloop: Vec<(String, u64)>,
    pub fatal: LabelTiers,
    /// Skips that leave a tier's view incomplete.
    pub skips: LabelTiers,
    /// Routine filtering, each label apart.
    pub filtered: BTreeMap<VerdictLabel, u64>,
    pub applied: u64,
    pub applied_tiers: BTreeMap<TierShown, u64>,
    /// Where the fleet's indexer exits, as far as these sources know.
    pub exit: Option<Exit>,
}

/// What the fleet's verdicts miss, summed over sources ([`FleetFacts::completeness`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shortfalls {
    /// Engine sources with at least one event analysed.
    pub analysed: usize,
    pub lost_in_gaps: u64,
    pub errors: u64,
    /// Frames the server's lag notices named a source for.
    pub attributed_lag: u64,
    /// Frames the lag notices said this page lost: every shard reads every notice.
    pub lagged_frames: u64,
    /// Frames evicted before a re-classification, and messages dropped unread at the intake:
    /// each shard's own.
    pub uncounted_frames: u64,
    pub intake_dropped: u64,
}

/// One kind of disagreement between the policies.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DifferenceFacts {
    pub a: Option<Class>,
    pub b: Option<Class>,
    pub events: u64,
    /// The first such event: its id, and its frame's position in the stream.
    pub first_event: u64,
    pub first_position: u64,
}

/// The router's side over some sources.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RouterFacts {
    pub policy: String,
    /// Per engine source (by index), its reconciliation's counts (no differences listed).
    pub sources: Vec<(u32, RelayedSource)>,
    pub shared_keys: Vec<SharedKey>,
    pub unknown_workers: Vec<UnknownWorker>,
}

/// One engine source's reconciliation, as the headline reads it: its name and counts.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RelayedSource {
    pub source: String,
    pub router: RouterCounts,
}

/// Everything the fleet-wide parts of the page are made from.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FleetFacts {
    /// The policy each side runs, by name.
    pub policies: [String; 2],
    pub sides: [SideFacts; 2],
    pub differences: Vec<DifferenceFacts>,
    pub shortfalls: Shortfalls,
    /// The router's index under each side, summed over sources.
    pub index: [Option<IndexCounts>; 2],
    /// The timeline's origin.
    pub t0_nanos: Option<u64>,
    pub router: Option<RouterFacts>,
}

impl Shortfalls {
    pub fn of(m: &Model) -> Shortfalls {
        let mut s = Shortfalls {
            lagged_frames: m.lagged_frames,
            uncounted_frames: m.uncounted_frames,
            intake_dropped: m.intake_dropped_messages,
            ..Shortfalls::default()
        };
        for src in m.engine_sources() {
            s.analysed += usize::from(src.counts[0].events > 0);
            s.lost_in_gaps += lost_in_gaps(src);
            s.errors += src.decode_errors + src.frame_errors;
            s.attributed_lag += src.lagged_frames;
        }
        s
    }

    pub fn merge(&mut self, o: &Shortfalls) {
        self.analysed += o.analysed;
        self.lost_in_gaps += o.lost_in_gaps;
        self.errors += o.errors;
        self.attributed_lag += o.attributed_lag;
        self.lagged_frames = self.lagged_frames.max(o.lagged_frames);
        self.uncounted_frames += o.uncounted_frames;
        self.intake_dropped += o.intake_dropped;
    }

    /// Unknown when no source has events; incomplete when any is short (summed by kind) or the
    /// page lost frames it cannot attribute.
    pub fn completeness(&self) -> Completeness {
        if self.analysed == 0 {
            return Completeness::Unknown(Unknown::NoEvents);
        }
        let shortfalls = [
            (self.lost_in_gaps, Shortfall::LostInGaps { frames: self.lost_in_gaps }),
            (self.lagged_frames.max(self.attributed_lag), Shortfall::LostToLag { frames: self.lagged_frames.max(self.attributed_lag) }),
            (self.uncounted_frames, Shortfall::Uncounted { frames: self.uncounted_frames }),
            (self.errors, Shortfall::Errors { frames: self.errors }),
            (self.intake_dropped, Shortfall::DroppedUnread { messages: self.intake_dropped }),
        ];
        Completeness::from_shortfalls(shortfalls.into_iter().filter(|(n, _)| *n > 0).map(|(_, s)| s).collect())
    }
}

fn add_label_tiers(into: &mut LabelTiers, from: &LabelTiers) {
    for (label, (tiers, n)) in from {
        let e = into.entry(*label).or_default();
        e.1 += n;
        for (t, k) in tiers {
            *e.0.entry(*t).or_default() += k;
        }
    }
}

impl SideFacts {
    fn of(m: &Model, side: Side) -> SideFacts {
        let classes = m.classes();
        let mut f = SideFacts::default();
        for src in m.engine_sources() {
            let counts = src.counts(side);
            f.sources += 1;
            f.events += counts.events;
            f.never_indexed += counts.after_exit;
            if counts.fatal_after_exit > 0 {
                f.crashloop.push((src.key.clone(), counts.fatal_after_exit));
            }
            for ((kind, reason), (n, tiers)) in counts.rows(classes) {
                let add = |into: &mut LabelTiers, label| add_label_tiers(into, &BTreeMap::from([(label, (tiers.clone(), n))]));
                match (kind, reason) {
                    (Outcome::Fatal, Reason::Label(l)) => add(&mut f.fatal, l),
                    (Outcome::Skip, Reason::Label(l)) if l.is_routine_filter() => *f.filtered.entry(l).or_default() += n,
                    (Outcome::Skip, Reason::Label(l)) => add(&mut f.skips, l),
                    (Outcome::Apply, _) => {
                        f.applied += n;
                        for (t, k) in &tiers {
                            *f.applied_tiers.entry(*t).or_default() += k;
                        }
                    }
                    _ => {}
                }
            }
        }
        f.exit = m.indexer_exit(side).map(|e| Exit {
            position: e.position,
            source: m.source(e.source).map_or_else(|| e.source.to_string(), |s| s.key.clone()),
            seq: e.seq,
            at: kvscope_protocol::time::utc(e.recv_time_nanos),
            label: e.label,
            sentence: e.sentence.clone(),
            event_id: e.event_id,
        });
        f
    }

    fn merge(&mut self, o: &SideFacts) {
        self.sources += o.sources;
        self.events += o.events;
        self.never_indexed += o.never_indexed;
        self.crashloop.extend(o.crashloop.iter().cloned());
        add_label_tiers(&mut self.fatal, &o.fatal);
        add_label_tiers(&mut self.skips, &o.skips);
        for (l, n) in &o.filtered {
            *self.filtered.entry(*l).or_default() += n;
        }
        self.applied += o.applied;
        for (t, n) in &o.applied_tiers {
            *self.applied_tiers.entry(*t).or_default() += n;
        }
        if o.exit.as_ref().is_some_and(|e| self.exit.as_ref().is_none_or(|mine| e.position < mine.position)) {
            self.exit.clone_from(&o.exit);
        }
    }

    /// Most fatal events first, then by source.
    fn sort(&mut self) {
        self.crashloop.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
}

impl RouterFacts {
    fn of(m: &Model) -> Option<RouterFacts> {
        let router = m.router()?;
        let report = router.report();
        let sources = m
            .engine_sources()
            .filter_map(|s| {
                let r = router.source_report(report, s.index)?;
                // The headline reads the counts; the differences' details stay with the card.
                Some((s.index, RelayedSource { source: r.source.clone(), router: r.router.clone() }))
            })
            .collect();
        Some(RouterFacts {
            policy: router.policy.name.to_owned(),
            sources,
            shared_keys: report.shared_keys.clone(),
            unknown_workers: report.unknown_workers.clone(),
        })
    }

    fn merge(&mut self, o: &RouterFacts) {
        self.sources.extend(o.sources.iter().cloned());
        self.shared_keys.extend(o.shared_keys.iter().cloned());
        self.unknown_workers.extend(o.unknown_workers.iter().cloned());
    }

    /// Sources in source order, keys and workers in key order: as one reconciler lists them.
    fn sort(&mut self) {
        self.sources.sort_by_key(|(index, _)| *index);
        self.shared_keys.sort_by_key(|k| (k.worker_id, k.dp_rank));
        self.unknown_workers.sort_by_key(|u| (u.worker_id, u.dp_rank));
    }
}

/// Where the policies decided differently, by class; [`FleetFacts::sort`] orders them.
fn differences_of(m: &Model) -> Vec<DifferenceFacts> {
    m.differences
        .iter()
        .map(|(&(a, b), d)| DifferenceFacts {
            a: m.classes().get(a).copied(),
            b: m.classes().get(b).copied(),
            events: d.events,
            first_event: d.first_event,
            first_position: d.first_position,
        })
        .collect()
}

/// Most events first; a tie goes to the kind seen first, so every split of the fleet orders
/// them alike.
pub fn sort_differences(differences: &mut [DifferenceFacts]) {
    differences.sort_by_key(|d| (std::cmp::Reverse(d.events), d.first_position, d.first_event));
}

impl Model {
    /// Where the policies decided differently, most events first.
    pub fn differences(&self) -> Vec<DifferenceFacts> {
        let mut d = differences_of(self);
        sort_differences(&mut d);
        d
    }
}

impl FleetFacts {
    /// This model's part of the fleet's facts (the whole fleet's, unless it is one shard).
    pub fn of(m: &Model) -> FleetFacts {
        let mut f = FleetFacts {
            policies: [m.policy_name(Side::A).to_owned(), m.policy_name(Side::B).to_owned()],
            sides: [SideFacts::of(m, Side::A), SideFacts::of(m, Side::B)],
            differences: differences_of(m),
            shortfalls: Shortfalls::of(m),
            index: [m.index().totals(Side::A).cloned(), m.index().totals(Side::B).cloned()],
            t0_nanos: m.t0_nanos(),
            router: RouterFacts::of(m),
        };
        f.sort();
        f
    }

    /// The fleet's facts from every shard's part.
    pub fn merge(parts: &[&FleetFacts]) -> FleetFacts {
        let Some((first, rest)) = parts.split_first() else { return FleetFacts::default() };
        let mut f = (*first).clone();
        for o in rest {
            for (mine, theirs) in f.sides.iter_mut().zip(&o.sides) {
                mine.merge(theirs);
            }
            for d in &o.differences {
                match f.differences.iter_mut().find(|x| x.a == d.a && x.b == d.b) {
                    Some(x) => {
                        x.events += d.events;
                        if (d.first_position, d.first_event) < (x.first_position, x.first_event) {
                            (x.first_position, x.first_event) = (d.first_position, d.first_event);
                        }
                    }
                    None => f.differences.push(d.clone()),
                }
            }
            f.shortfalls.merge(&o.shortfalls);
            for (mine, theirs) in f.index.iter_mut().zip(&o.index) {
                match (mine.as_mut(), theirs) {
                    (Some(m), Some(t)) => m.merge(t),
                    (None, Some(t)) => *mine = Some(t.clone()),
                    _ => {}
                }
            }
            f.t0_nanos = match (f.t0_nanos, o.t0_nanos) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match (f.router.as_mut(), &o.router) {
                (Some(mine), Some(theirs)) => mine.merge(theirs),
                (None, Some(theirs)) => f.router = Some(theirs.clone()),
                _ => {}
            }
        }
        f.sort();
        f
    }

    fn sort(&mut self) {
        self.sides.iter_mut().for_each(SideFacts::sort);
        sort_differences(&mut self.differences);
        if let Some(r) = &mut self.router {
            r.sort();
        }
    }

    pub fn completeness(&self) -> Completeness {
        self.shortfalls.completeness()
    }

    /// Events the two policies file on different tiers: (tier under A, tier under B, events),
    /// most first. Policy B "moves" them.
    pub fn moved_between_tiers(&self) -> Vec<(TierShown, TierShown, u64)> {
        self.differences
            .iter()
            .filter_map(|d| {
                let (a, b) = (d.a?, d.b?);
                (a.kind == Outcome::Apply && b.kind == Outcome::Apply).then_some(())?;
                Some((a.tier?, b.tier?, d.events))
            })
            .collect()
    }

    /// One policy's verdict over the fleet, in the router's terms.
    pub fn policy_summary(&self, side: Side) -> PolicySummary {
        let f = &self.sides[side as usize];
        let policy = self.policies[side as usize].clone();
        let tiers_text = |tiers: &BTreeMap<TierShown, u64>| tiers.keys().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        PolicySummary {
            side,
            about: policy.parse::<kvscope_normalize::Policy>().map_or("", |p| p.about),
            policy,
            sources: f.sources,
            events: f.events,
            completeness: self.completeness(),
            exit: f.exit.clone(),
            crashloop: f.crashloop.clone(),
            never_indexed: f.never_indexed,
            fatal: f.fatal.iter().map(|(l, (t, n))| (*l, tiers_text(t), *n)).collect(),
            notable_skips: f.skips.iter().map(|(l, (t, n))| (*l, tiers_text(t), *n)).collect(),
            filtered: f.filtered.iter().map(|(l, n)| (*l, *n)).collect(),
            moved: if side == Side::B { self.moved_between_tiers() } else { Vec::new() },
            applied: f.applied,
            applied_tiers: f
                .applied_tiers
                .iter()
                .map(|(t, n)| format!("{} on {t}", kvscope_engine_protocol::fmt::thousands(*n)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}
