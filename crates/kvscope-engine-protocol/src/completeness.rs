//! Whether the verdicts cover the whole stream: complete, incomplete (and by what), or unknown.
//! The engine decides it (`kvscope-engine`, `model/completeness.rs`); these are the words and
//! keys every all-clear on the page is checked against.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::fmt::thousands;

/// One reason the data behind a verdict is not the whole stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shortfall {
    /// Frames missing in seq gaps that replay did not recover.
    LostInGaps { frames: u64 },
    /// Frames the server dropped for this page because it read too slowly.
    LostToLag { frames: u64 },
    /// Frames that are not in the counts: evicted by the page's retention bound before a
    /// re-classification rebuilt the counts from what was still retained.
    Uncounted { frames: u64 },
    /// Payloads that did not decode, and messages that were not frames: their events are unknown.
    Errors { frames: u64 },
    /// WebSocket messages the page dropped unread at its intake bound (any source's).
    DroppedUnread { messages: u64 },
}

impl Shortfall {
    /// Stable key for `data-shortfall` and the tests.
    pub fn key(&self) -> &'static str {
        match self {
            Shortfall::LostInGaps { .. } => "gaps",
            Shortfall::LostToLag { .. } => "lag",
            Shortfall::Uncounted { .. } => "retention",
            Shortfall::Errors { .. } => "errors",
            Shortfall::DroppedUnread { .. } => "intake",
        }
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shortfall::LostInGaps { frames } => write!(f, "{} frames lost in seq gaps", thousands(*frames)),
            Shortfall::LostToLag { frames } => write!(f, "{} frames lost to lag", thousands(*frames)),
            Shortfall::Uncounted { frames } => {
                write!(f, "{} frames evicted by the page's retention bound and not counted", thousands(*frames))
            }
            Shortfall::Errors { frames } => write!(f, "{} frames that did not decode", thousands(*frames)),
            Shortfall::DroppedUnread { messages } => {
                write!(f, "{} messages dropped unread by this page's intake bound (raise with ?intake=MiB)", thousands(*messages))
            }
        }
    }
}

/// Why nothing can be said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unknown {
    /// No event analysed yet (or every frame failed).
    NoEvents,
    /// The source is configured but no frame arrived.
    NotConnected,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unknown::NoEvents => f.write_str("no events analysed"),
            Unknown::NotConnected => f.write_str("no frame received yet"),
        }
    }
}

/// How much of the stream the verdicts cover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Completeness {
    Complete,
    Incomplete(Vec<Shortfall>),
    Unknown(Unknown),
}

impl Default for Completeness {
    /// Nothing analysed yet.
    fn default() -> Self {
        Completeness::Unknown(Unknown::NoEvents)
    }
}

impl Completeness {
    /// `complete`, `incomplete` or `unknown`: `data-completeness` on cards and the headline.
    pub fn key(&self) -> &'static str {
        self.coverage().key()
    }

    pub fn is_complete(&self) -> bool {
        matches!(self, Completeness::Complete)
    }

    /// The words a verdict over this data starts with: empty when complete.
    pub fn prefix(&self) -> String {
        match self {
            Completeness::Complete => String::new(),
            Completeness::Incomplete(s) => {
                let what: Vec<String> = s.iter().map(ToString::to_string).collect();
                format!("Incomplete data ({}): ", what.join(", "))
            }
            Completeness::Unknown(u) => format!("Unknown ({u}): "),
        }
    }

    /// Its kind alone (what an overview row carries).
    pub fn coverage(&self) -> Coverage {
        match self {
            Completeness::Complete => Coverage::Complete,
            Completeness::Incomplete(_) => Coverage::Incomplete,
            Completeness::Unknown(_) => Coverage::Unknown,
        }
    }

    pub fn from_shortfalls(shortfalls: Vec<Shortfall>) -> Completeness {
        if shortfalls.is_empty() { Completeness::Complete } else { Completeness::Incomplete(shortfalls) }
    }
}

/// A [`Completeness`] without its detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Coverage {
    Complete,
    Incomplete,
    #[default]
    Unknown,
}

impl Coverage {
    /// `complete`, `incomplete` or `unknown` (`data-completeness`).
    pub fn key(self) -> &'static str {
        match self {
            Coverage::Complete => "complete",
            Coverage::Incomplete => "incomplete",
            Coverage::Unknown => "unknown",
        }
    }
}
