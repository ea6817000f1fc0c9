//! How much an event's verdict matters to someone reading the timeline: the one order the
//! timeline paints by, the legend and the range counts sort by, and the page's "next" buttons
//! jump by.

use serde::{Deserialize, Serialize};

/// An event's verdict class, least to most severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// No verdict: the event was not decoded.
    Unmarked,
    /// Applied to a tier.
    Applied,
    /// Skipped by a routine filter (non-main attention groups and kinds): what every healthy
    /// hybrid-attention stream does.
    RoutineSkip,
    /// Skipped for any other reason, so a tier's view lacks it: an offload store at another
    /// block size, an unknown medium, a batch the relay rejects, ...
    Skip,
    /// Fatal: the indexer exits.
    Fatal,
}

impl Severity {
    /// What the page's button that jumps to the next event of at least this severity says.
    pub fn next_button(self) -> &'static str {
        match self {
            Severity::Fatal => "Next fatal",
            Severity::Skip => "Next non-routine skip or fatal",
            Severity::RoutineSkip => "Next skip or fatal",
            Severity::Applied | Severity::Unmarked => "Next event",
        }
    }

    /// Drawn as a full-height mark on the timeline (any skip or fatal), not a thin applied line.
    pub fn is_marked(self) -> bool {
        self >= Severity::RoutineSkip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_is_most_severe_and_routine_filtering_least_of_the_skips() {
        assert!(Severity::Unmarked < Severity::Applied);
        assert!(Severity::Applied < Severity::RoutineSkip);
        assert!(Severity::RoutineSkip < Severity::Skip);
        assert!(Severity::Skip < Severity::Fatal);
        assert!(!Severity::Applied.is_marked() && Severity::RoutineSkip.is_marked());
    }
}
