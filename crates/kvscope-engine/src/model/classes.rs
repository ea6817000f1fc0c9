//! Verdict classes: the (outcome, reason, tier) triples a timeline mark and a counter are keyed
//! by, interned to one byte so that a million retained events cost a few megabytes.
//!
//! A class is typed: the normalizer's [`Outcome`], a [`Reason`] (a tier or a [`VerdictLabel`]),
//! and the tier with its fallback flag ([`TierShown`]). The page compares these, never strings;
//! the strings (`data-kind`, `data-reason`, `device (medium "cpu" fell back)`) are only how a
//! class is shown. Which skips are routine filtering comes from the rule that decides the label
//! ([`VerdictLabel::is_routine_filter`]), not from a list kept here.
//!
//! The table also decides what the timeline draws on top when several events share a pixel
//! ([`ClassTable::severity`]) and which colour each class gets. Colours are picked for contrast
//! on the dashboard's dark background; a legend always names them, so colour is never the only
//! cue.

use std::cmp::Ordering;
use std::fmt;

use kvscope_engine_protocol::Severity;
use kvscope_normalize::{Outcome, SmallStr, StorageTier, Verdict, VerdictFlags, VerdictLabel};

/// One byte naming a class in a [`ClassTable`]; 0 means "no verdict" (a frame that did not
/// decode, or an event the policy never saw).
pub type ClassCode = u8;

pub use kvscope_engine_protocol::label::Reason;

/// The tier a verdict named, and the medium when it matched no tier and fell back to Device:
/// shown as `device (medium "cpu" fell back)`, because that fallback is what hid the host tier
/// before the fix. Ordered by how it is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TierShown {
    pub tier: StorageTier,
    pub fell_back: Option<SmallStr>,
}

impl fmt::Display for TierShown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fell_back {
            None => f.write_str(self.tier.label()),
            Some(medium) => write!(f, "{} (medium {:?} fell back)", self.tier.label(), medium.as_str()),
        }
    }
}

impl PartialOrd for TierShown {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TierShown {
    fn cmp(&self, other: &Self) -> Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

/// One interned class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Class {
    pub kind: Outcome,
    /// This is the `data-reason` of the counters.
    pub reason: Reason,
    /// The tier the event named, when the verdict involved one (a fatal store on `host_pinned`).
    pub tier: Option<TierShown>,
}

impl Class {
    /// The class of a verdict: its label's outcome; the tier for applied events, the label
    /// otherwise.
    pub fn of(v: &Verdict) -> Class {
        let label = v.label();
        let kind = label.outcome();
        let reason = match kind {
            Outcome::Apply => v.tier.map_or(Reason::AllTiers, Reason::Tier),
            Outcome::Skip | Outcome::Fatal => Reason::Label(label),
        };
        let fell_back = v.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK).then_some(v.facts.medium);
        Class { kind, reason, tier: v.tier.map(|tier| TierShown { tier, fell_back }) }
    }

    /// An applied class on one tier, no fallback.
    pub fn applied(tier: StorageTier) -> Class {
        Class { kind: Outcome::Apply, reason: Reason::Tier(tier), tier: Some(TierShown { tier, fell_back: None }) }
    }

    /// A skip or fatal class with no tier.
    pub fn labelled(label: VerdictLabel) -> Class {
        Class { kind: label.outcome(), reason: Reason::Label(label), tier: None }
    }

    /// "fatal block_size_mismatch on host_pinned", for legends and hover text.
    pub fn describe(&self) -> String {
        match (self.kind, &self.tier) {
            (Outcome::Apply, Some(tier)) => format!("applied on {tier}"),
            (Outcome::Apply, None) => format!("applied on {}", self.reason),
            (kind, Some(tier)) => format!("{} {} on {}", kind.past_tense(), self.reason, tier),
            (kind, None) => format!("{} {}", kind.past_tense(), self.reason),
        }
    }
}

/// A set of class codes (all 256 fit in 32 bytes): which classes a lane has ever marked, so the
/// legend names them without scanning millions of marks at every refresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSet([u64; 4]);

impl ClassSet {
    pub fn insert(&mut self, code: ClassCode) {
        self.0[usize::from(code >> 6)] |= 1 << (code & 63);
    }

    pub fn contains(&self, code: ClassCode) -> bool {
        self.0[usize::from(code >> 6)] & (1 << (code & 63)) != 0
    }

    pub fn union(self, other: ClassSet) -> ClassSet {
        ClassSet(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }
}

/// Interns classes; code 0 is "no verdict".
#[derive(Clone, Debug, Default)]
pub struct ClassTable {
    classes: Vec<Class>,
}

impl ClassTable {
    pub fn intern(&mut self, class: Class) -> ClassCode {
        if let Some(i) = self.classes.iter().position(|c| *c == class) {
            return (i + 1) as ClassCode;
        }
        if self.classes.len() >= 254 {
            // 254 distinct (kind, reason, tier) triples would take every skip reason on every
            // tier several times over; beyond it, marks share the last code rather than wrap.
            return 255;
        }
        self.classes.push(class);
        self.classes.len() as ClassCode
    }

    pub fn get(&self, code: ClassCode) -> Option<&Class> {
        if code == 0 { None } else { self.classes.get(code as usize - 1) }
    }

    /// All classes with their codes.
    pub fn iter(&self) -> impl Iterator<Item = (ClassCode, &Class)> {
        self.classes.iter().enumerate().map(|(i, c)| ((i + 1) as ClassCode, c))
    }

    /// How much a class matters on the timeline (code 0, no verdict, is `Unmarked`).
    pub fn severity(&self, code: ClassCode) -> Severity {
        match self.get(code) {
            None => Severity::Unmarked,
            Some(c) => match c.kind {
                Outcome::Apply => Severity::Applied,
                Outcome::Skip if c.reason.is_routine_filter() => Severity::RoutineSkip,
                Outcome::Skip => Severity::Skip,
                Outcome::Fatal => Severity::Fatal,
            },
        }
    }

    /// CSS colour for a class, from the Okabe-Ito palette (distinguishable with the common
    /// colour-vision deficiencies). One colour means one thing on the whole page: vermillion
    /// fatal, orange an offload store skipped, reddish purple any other skip that leaves a tier's
    /// view incomplete, grey routine filtering, blues and green the tier an event was applied on.
    /// Yellow is kept for incomplete data (`--warn` in style.css) and used by no class.
    pub fn colour(&self, code: ClassCode) -> &'static str {
        let Some(c) = self.get(code) else { return "#30363d" };
        match c.kind {
            Outcome::Fatal => FATAL,
            Outcome::Skip => match c.reason {
                Reason::Label(VerdictLabel::OffloadBlockSizeMismatch) => OFFLOAD_SKIP,
                r if r.is_routine_filter() => ROUTINE,
                _ => OTHER_SKIP,
            },
            Outcome::Apply => match c.tier.map(|t| t.tier) {
                Some(StorageTier::HostPinned) => "#56b4e9",
                Some(StorageTier::Disk) => "#009e73",
                Some(StorageTier::External) => "#a6bddb",
                _ => "#0072b2",
            },
        }
    }
}

/// The page's colour for fatal verdicts (timeline, legend, counters).
pub const FATAL: &str = "#d55e00";
/// An offload store skipped at another block size.
pub const OFFLOAD_SKIP: &str = "#e69f00";
/// Any other skip that leaves a tier's view incomplete.
pub const OTHER_SKIP: &str = "#cc79a7";
/// Routine filtering.
pub const ROUTINE: &str = "#6e7681";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_returns_the_same_code_for_the_same_class() {
        let mut t = ClassTable::default();
        let a = t.intern(Class::labelled(VerdictLabel::OffloadBlockSizeMismatch));
        let on_host = Some(TierShown { tier: StorageTier::HostPinned, fell_back: None });
        let b = t.intern(Class { tier: on_host, ..Class::labelled(VerdictLabel::BlockSizeMismatch) });
        assert_eq!(t.intern(Class::labelled(VerdictLabel::OffloadBlockSizeMismatch)), a);
        assert_ne!(a, b);
        assert_eq!(t.get(b).unwrap().describe(), "fatal block_size_mismatch on host_pinned");
        assert_eq!(t.severity(0), Severity::Unmarked);
        assert!(t.severity(b) > t.severity(a));
    }

    #[test]
    fn each_kind_of_verdict_has_its_own_colour() {
        let mut t = ClassTable::default();
        let codes = [
            t.intern(Class::labelled(VerdictLabel::BlockSizeMismatch)),
            t.intern(Class::labelled(VerdictLabel::OffloadBlockSizeMismatch)),
            t.intern(Class::labelled(VerdictLabel::UnknownMedium)),
            t.intern(Class::labelled(VerdictLabel::NonMainAttentionKind)),
            t.intern(Class::applied(StorageTier::Device)),
            t.intern(Class::applied(StorageTier::HostPinned)),
            t.intern(Class::applied(StorageTier::Disk)),
            t.intern(Class::applied(StorageTier::External)),
        ];
        let mut colours: Vec<&str> = codes.iter().map(|c| t.colour(*c)).collect();
        colours.sort_unstable();
        colours.dedup();
        assert_eq!(colours.len(), codes.len(), "{colours:?}");
    }

    #[test]
    fn routine_filters_rank_below_offload_skips() {
        let mut t = ClassTable::default();
        let filter = t.intern(Class::labelled(VerdictLabel::NonMainAttentionKind));
        let offload = t.intern(Class::labelled(VerdictLabel::OffloadBlockSizeMismatch));
        assert!(t.severity(offload) > t.severity(filter));
    }

    /// Every label has a class the page can show: its outcome, its spelling as `data-reason`,
    /// and a severity of its kind.
    #[test]
    fn every_label_has_a_class() {
        let mut t = ClassTable::default();
        for label in VerdictLabel::ALL {
            let class = Class::labelled(label);
            let code = t.intern(class);
            assert_eq!(class.reason.as_str(), label.as_str());
            let severity = t.severity(code);
            match label.outcome() {
                Outcome::Apply => assert_eq!(severity, Severity::Applied, "{label}"),
                Outcome::Skip => {
                    assert_eq!(severity, if label.is_routine_filter() { Severity::RoutineSkip } else { Severity::Skip }, "{label}")
                }
                Outcome::Fatal => assert_eq!(severity, Severity::Fatal, "{label}"),
            }
        }
        assert_eq!(t.iter().count(), VerdictLabel::COUNT);
    }

    #[test]
    fn reasons_and_tiers_sort_as_they_are_shown() {
        let fell_back = TierShown { tier: StorageTier::Device, fell_back: Some(SmallStr::new("cpu")) };
        assert_eq!(fell_back.to_string(), "device (medium \"cpu\" fell back)");
        let mut tiers = [TierShown { tier: StorageTier::HostPinned, fell_back: None }, fell_back];
        tiers.sort();
        assert_eq!(tiers[0], fell_back);
        assert!(Reason::Label(VerdictLabel::BlockSizeMismatch) < Reason::Tier(StorageTier::Device));
    }
}
