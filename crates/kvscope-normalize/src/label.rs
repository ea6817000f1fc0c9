//! Every verdict's label: the one enum counters, logs, `kvscope check --json`, `/metrics`, the
//! JS API and the dashboard spell verdicts with.
//!
//! A label is data only: its spelling ([`VerdictLabel::as_str`], also its serde form) and
//! whether it applies, skips or stops ([`VerdictLabel::outcome`]). What a label means in words
//! (the card fragment, whether a skip is routine filtering) belongs to the rule that decides it
//! and lives in that rule's file under `src/rules/`; [`crate::rules::label_text`] finds it.
//! `store`, `remove` and `clear` are the outcomes of rule `apply`, the rest are each one rule's.
//!
//! Rejected alternative: a second enum of skip reasons beside this one. Two enums spelled the
//! same labels twice with nothing tying them; verdicts now carry the label itself
//! ([`crate::VerdictKind::Skip`]).

use std::fmt;
use std::str::FromStr;

/// Whether a verdict changes the trees, drops the event or stops the indexer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Apply,
    Skip,
    Fatal,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Apply, Outcome::Skip, Outcome::Fatal];

    /// `apply`, `skip` or `fatal`: the JS API's `outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Apply => "apply",
            Outcome::Skip => "skip",
            Outcome::Fatal => "fatal",
        }
    }

    /// `applied`, `skipped` or `fatal`: how the dashboard's counters and legends say it
    /// (`data-kind`).
    pub fn past_tense(self) -> &'static str {
        match self {
            Outcome::Apply => "applied",
            Outcome::Skip => "skipped",
            Outcome::Fatal => "fatal",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every verdict's label. Dense, so counters are arrays sized by [`VerdictLabel::COUNT`]; a new
/// policy adds variants at the end (and a rule item that decides them, see
/// [`crate::rules`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum VerdictLabel {
    Store,
    Remove,
    Clear,
    SelfReferencingStore,
    IgnoredEvent,
    NonMainAttentionKind,
    UnknownKind,
    NonMainAttentionGroup,
    UnlearnedGroupIdx,
    OffloadBlockSizeMismatch,
    BlockSizeMismatch,
    BatchDecodeRejected,
    UnsupportedOwnership,
    UnknownOwnership,
    NonLocalLocality,
    UnknownMedium,
    AmbiguousCacheNamespace,
}

impl VerdictLabel {
    pub const ALL: [VerdictLabel; 17] = [
        VerdictLabel::Store,
        VerdictLabel::Remove,
        VerdictLabel::Clear,
        VerdictLabel::SelfReferencingStore,
        VerdictLabel::IgnoredEvent,
        VerdictLabel::NonMainAttentionKind,
        VerdictLabel::UnknownKind,
        VerdictLabel::NonMainAttentionGroup,
        VerdictLabel::UnlearnedGroupIdx,
        VerdictLabel::OffloadBlockSizeMismatch,
        VerdictLabel::BlockSizeMismatch,
        VerdictLabel::BatchDecodeRejected,
        VerdictLabel::UnsupportedOwnership,
        VerdictLabel::UnknownOwnership,
        VerdictLabel::NonLocalLocality,
        VerdictLabel::UnknownMedium,
        VerdictLabel::AmbiguousCacheNamespace,
    ];
    pub const COUNT: usize = VerdictLabel::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    /// Stable label for counters, logs, JSON and JS.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictLabel::Store => "store",
            VerdictLabel::Remove => "remove",
            VerdictLabel::Clear => "clear",
            VerdictLabel::SelfReferencingStore => "self_referencing_store",
            VerdictLabel::IgnoredEvent => "ignored_event",
            VerdictLabel::NonMainAttentionKind => "non_main_attention_kind",
            VerdictLabel::UnknownKind => "unknown_kind",
            VerdictLabel::NonMainAttentionGroup => "non_main_attention_group",
            VerdictLabel::UnlearnedGroupIdx => "unlearned_group_idx",
            VerdictLabel::OffloadBlockSizeMismatch => "offload_block_size_mismatch",
            VerdictLabel::BlockSizeMismatch => "block_size_mismatch",
            VerdictLabel::BatchDecodeRejected => "batch_decode_rejected",
            VerdictLabel::UnsupportedOwnership => "unsupported_ownership",
            VerdictLabel::UnknownOwnership => "unknown_ownership",
            VerdictLabel::NonLocalLocality => "non_local_locality",
            VerdictLabel::UnknownMedium => "unknown_medium",
            VerdictLabel::AmbiguousCacheNamespace => "ambiguous_cache_namespace",
        }
    }

    /// Parses [`VerdictLabel::as_str`] (also `str::parse`).
    pub fn from_str_label(s: &str) -> Option<VerdictLabel> {
        VerdictLabel::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// Apply, skip or fatal. Events lost with a rejected batch are skips: the indexer goes on.
    pub fn outcome(self) -> Outcome {
        match self {
            VerdictLabel::Store | VerdictLabel::Remove | VerdictLabel::Clear | VerdictLabel::SelfReferencingStore => Outcome::Apply,
            VerdictLabel::BlockSizeMismatch => Outcome::Fatal,
            _ => Outcome::Skip,
        }
    }
}

impl fmt::Display for VerdictLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is no label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownLabel {
    pub given: String,
}

impl fmt::Display for UnknownLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown verdict label {:?}; pass one of: ", self.given)?;
        for (i, label) in VerdictLabel::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(label.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownLabel {}

impl FromStr for VerdictLabel {
    type Err = UnknownLabel;

    fn from_str(s: &str) -> Result<VerdictLabel, UnknownLabel> {
        VerdictLabel::from_str_label(s).ok_or_else(|| UnknownLabel { given: s.to_owned() })
    }
}

/// As its [`VerdictLabel::as_str`] string, so JSON and JS see `"offload_block_size_mismatch"`.
impl serde::Serialize for VerdictLabel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for VerdictLabel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<VerdictLabel, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_dense_ordered_like_all_and_round_trip() {
        for (i, label) in VerdictLabel::ALL.iter().enumerate() {
            assert_eq!(label.index(), i);
            assert_eq!(label.as_str().parse::<VerdictLabel>(), Ok(*label));
            let json = serde_json::to_string(label).unwrap();
            assert_eq!(json, format!("\"{}\"", label.as_str()));
            assert_eq!(serde_json::from_str::<VerdictLabel>(&json).unwrap(), *label);
        }
        let err = "Store".parse::<VerdictLabel>().unwrap_err().to_string();
        assert!(err.starts_with("unknown verdict label \"Store\"; pass one of: store, remove, clear, "), "{err}");
    }

    #[test]
    fn outcomes_sort_apply_skip_fatal() {
        assert_eq!(VerdictLabel::OffloadBlockSizeMismatch.outcome(), Outcome::Skip);
        assert_eq!(VerdictLabel::BlockSizeMismatch.outcome(), Outcome::Fatal);
        assert_eq!(VerdictLabel::SelfReferencingStore.outcome(), Outcome::Apply);
        assert!(Outcome::Apply < Outcome::Skip && Outcome::Skip < Outcome::Fatal);
    }
}
