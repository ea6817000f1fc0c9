//! The core's typed labels as the page gets them: compared as enums, printed as strings only
//! where the page writes them (text and `data-*` hooks). The labels themselves are
//! `kvscope-normalize`'s ([`Outcome`], [`VerdictLabel`], [`StorageTier`]); [`Reason`] is what a
//! counter is keyed by.

use std::cmp::Ordering;
use std::fmt;

pub use kvscope_normalize::{Outcome, StorageTier, VerdictLabel};
use serde::{Deserialize, Serialize};

/// The `data-reason` of a class: the tier of an applied event (`all_tiers` for a clear), or the
/// label of a skip or a fatal verdict.
///
/// Ordered by its spelling, so cards and headlines list reasons alphabetically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    Tier(StorageTier),
    AllTiers,
    Label(VerdictLabel),
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Tier(t) => t.label(),
            Reason::AllTiers => "all_tiers",
            Reason::Label(l) => l.as_str(),
        }
    }

    /// True for skips that are routine filtering (non-main attention groups, unknown events,
    /// blocks another host or component owns), drawn below the reasons that mean "the indexer's
    /// view of a tier is incomplete".
    pub fn is_routine_filter(self) -> bool {
        matches!(self, Reason::Label(l) if l.is_routine_filter())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Reason {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}
