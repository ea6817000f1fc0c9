//! Verdict classes: the (kind, reason, tier) triples a timeline mark and a counter are keyed by,
//! interned to one byte so that a million retained events cost a few megabytes.
//!
//! The table also decides what the timeline draws on top when several events share a pixel
//! ([`ClassTable::severity`]) and which colour each class gets. Colours are picked for contrast
//! on the dashboard's dark background; a legend always names them, so colour is never the only
//! cue.

/// One byte naming a class in a [`ClassTable`]; 0 means "no verdict" (a frame that did not
/// decode, or an event the policy never saw).
pub type ClassCode = u8;

/// What a policy decided for an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VerdictKind {
    Applied,
    Skipped,
    Fatal,
}

impl VerdictKind {
    pub const ALL: [VerdictKind; 3] = [VerdictKind::Applied, VerdictKind::Skipped, VerdictKind::Fatal];

    /// The `data-kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Applied => "applied",
            VerdictKind::Skipped => "skipped",
            VerdictKind::Fatal => "fatal",
        }
    }
}

/// Skip reasons that are routine filtering (non-main attention groups, unknown events, blocks
/// another host or component owns), drawn below the reasons that mean "the indexer's view of a
/// tier is incomplete" (`offload_block_size_mismatch`, `unknown_medium`, `batch_decode_rejected`,
/// `ambiguous_cache_namespace`).
const FILTER_REASONS: [&str; 8] = [
    "ignored_event",
    "non_main_attention_kind",
    "unknown_kind",
    "non_main_attention_group",
    "unlearned_group_idx",
    "non_local_locality",
    "unsupported_ownership",
    "unknown_ownership",
];

/// True for the skip reasons that are routine filtering.
pub fn is_filter_reason(reason: &str) -> bool {
    FILTER_REASONS.contains(&reason)
}

/// One interned class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    pub kind: VerdictKind,
    /// For `applied`, the tier label; for `skipped`, the skip reason; for `fatal`, the error
    /// kind. This is the `data-reason` of the counters.
    pub reason: String,
    /// The tier the event named, when the verdict involved one (a fatal store on `host_pinned`).
    pub tier: Option<String>,
}

impl Class {
    /// "fatal block_size_mismatch on host_pinned", for legends and hover text.
    pub fn describe(&self) -> String {
        match (&self.kind, &self.tier) {
            (VerdictKind::Applied, Some(tier)) => format!("applied on {tier}"),
            (VerdictKind::Applied, None) => format!("applied on {}", self.reason),
            (kind, Some(tier)) => format!("{} {} on {}", kind.as_str(), self.reason, tier),
            (kind, None) => format!("{} {}", kind.as_str(), self.reason),
        }
    }
}

/// Interns classes; code 0 is "no verdict".
#[derive(Clone, Debug, Default)]
pub struct ClassTable {
    classes: Vec<Class>,
}

impl ClassTable {
    pub fn intern(&mut self, kind: VerdictKind, reason: &str) -> ClassCode {
        self.intern_on(kind, reason, None)
    }

    pub fn intern_on(&mut self, kind: VerdictKind, reason: &str, tier: Option<&str>) -> ClassCode {
        if let Some(i) = self
            .classes
            .iter()
            .position(|c| c.kind == kind && c.reason == reason && c.tier.as_deref() == tier)
        {
            return (i + 1) as ClassCode;
        }
        if self.classes.len() >= 254 {
            // 254 distinct (kind, reason, tier) triples would take every skip reason on every
            // tier several times over; beyond it, marks share the last code rather than wrap.
            return 255;
        }
        self.classes.push(Class { kind, reason: reason.to_owned(), tier: tier.map(str::to_owned) });
        self.classes.len() as ClassCode
    }

    pub fn get(&self, code: ClassCode) -> Option<&Class> {
        if code == 0 { None } else { self.classes.get(code as usize - 1) }
    }

    /// All classes with their codes.
    pub fn iter(&self) -> impl Iterator<Item = (ClassCode, &Class)> {
        self.classes.iter().enumerate().map(|(i, c)| ((i + 1) as ClassCode, c))
    }

    /// 0 none, 1 applied, 2 routine filter skip, 3 other skip, 4 fatal.
    pub fn severity(&self, code: ClassCode) -> u8 {
        match self.get(code) {
            None => 0,
            Some(c) => match c.kind {
                VerdictKind::Applied => 1,
                VerdictKind::Skipped if FILTER_REASONS.contains(&c.reason.as_str()) => 2,
                VerdictKind::Skipped => 3,
                VerdictKind::Fatal => 4,
            },
        }
    }

    /// CSS colour for a class.
    pub fn colour(&self, code: ClassCode) -> &'static str {
        let Some(c) = self.get(code) else { return "#30363d" };
        let on_device = c.tier.as_deref().is_none_or(|t| t == "device");
        match c.kind {
            VerdictKind::Applied => "#3d4f63",
            VerdictKind::Fatal if on_device => "#ff4d6d",
            VerdictKind::Fatal => "#ff2e97",
            VerdictKind::Skipped => match c.reason.as_str() {
                "offload_block_size_mismatch" => "#ffb020",
                r if FILTER_REASONS.contains(&r) => "#5c6f86",
                _ => "#c792ea",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_returns_the_same_code_for_the_same_class() {
        let mut t = ClassTable::default();
        let a = t.intern(VerdictKind::Skipped, "offload_block_size_mismatch");
        let b = t.intern_on(VerdictKind::Fatal, "block_size_mismatch", Some("host_pinned"));
        assert_eq!(t.intern(VerdictKind::Skipped, "offload_block_size_mismatch"), a);
        assert_ne!(a, b);
        assert_eq!(t.get(b).unwrap().describe(), "fatal block_size_mismatch on host_pinned");
        assert_eq!(t.severity(0), 0);
        assert!(t.severity(b) > t.severity(a));
    }

    #[test]
    fn routine_filters_rank_below_offload_skips() {
        let mut t = ClassTable::default();
        let filter = t.intern(VerdictKind::Skipped, "non_main_attention_kind");
        let offload = t.intern(VerdictKind::Skipped, "offload_block_size_mismatch");
        assert!(t.severity(offload) > t.severity(filter));
    }
}
