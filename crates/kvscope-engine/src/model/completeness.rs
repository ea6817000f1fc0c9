//! Whether the verdicts the page shows cover the whole stream: complete, incomplete (and by
//! what), or unknown. A verdict over incomplete or unknown data must never read as an all-clear,
//! so every card and the headline ask this first and say it in their first words.
//!
//! One place decides it, from the model's own counters: the cards, the headline, the
//! data-quality strip and the tests all read [`Completeness`], never the counters directly.
//! Rejected alternative: each view checking the counters it happens to show (the card looked at
//! gaps, the headline at nothing); a verdict then read green over 24,000 lost frames.
//!
//! Joining late is not a hole: frames the server's history had evicted before this page joined
//! are before the window, not missing inside it (every operator who opens kvscope mid-incident
//! joins late). The window's start is said once, where the time range is
//! ([`crate::summarize::quality`]); a gap, lag or drop inside the window stays a shortfall.

use super::{Model, Origin, Source};

pub use kvscope_engine_protocol::completeness::{Completeness, Coverage, Shortfall, Unknown};

/// Frames lost for good in seq gaps: the server's count when live; from a capture, the
/// missing seqs minus the frames replay filled in.
pub(super) fn lost_in_gaps(src: &Source) -> u64 {
    let from_frames = src.seq.missing_frames.saturating_sub(src.seq.replayed);
    src.status.as_ref().map_or(from_frames, |s| s.counters.lost_frames)
}

impl Model {
    /// What one source's verdicts cover.
    pub fn completeness(&self, index: u32) -> Completeness {
        let Some(src) = self.source(index) else { return Completeness::Unknown(Unknown::NoEvents) };
        let mut shortfalls = Vec::new();
        let push = |v: &mut Vec<Shortfall>, n: u64, make: fn(u64) -> Shortfall| {
            if n > 0 {
                v.push(make(n));
            }
        };
        push(&mut shortfalls, lost_in_gaps(src), |frames| Shortfall::LostInGaps { frames });
        push(&mut shortfalls, src.lagged_frames, |frames| Shortfall::LostToLag { frames });
        push(&mut shortfalls, self.uncounted_frames, |frames| Shortfall::Uncounted { frames });
        push(&mut shortfalls, src.decode_errors + src.frame_errors, |frames| Shortfall::Errors { frames });
        push(&mut shortfalls, self.intake_dropped_messages, |messages| Shortfall::DroppedUnread { messages });
        if src.counts[0].events == 0 {
            let live_server = matches!(self.origin, Origin::Server { .. });
            return Completeness::Unknown(if src.frames == 0 && src.frame_errors == 0 && live_server {
                Unknown::NotConnected
            } else {
                Unknown::NoEvents
            });
        }
        Completeness::from_shortfalls(shortfalls)
    }

    /// What the fleet-wide verdicts cover (this shard's part, when it is one).
    pub fn fleet_completeness(&self) -> Completeness {
        super::fleet::Shortfalls::of(self).completeness()
    }

    /// Engine sources whose data is not complete: their index and key (`worker:rank`).
    pub fn short_sources(&self) -> Vec<(u32, String)> {
        self.engine_sources().filter(|s| !self.completeness(s.index).is_complete()).map(|s| (s.index, s.key.clone())).collect()
    }
}
