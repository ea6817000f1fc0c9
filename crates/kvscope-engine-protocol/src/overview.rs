//! The fleet overview's rows: one dense row per engine source, and what makes a source odd.
//!
//! What counts as odd, and how odd, is [`Anomaly`]: one enum, one severity and one word each,
//! read by the row's chips, the engine's sort, the filter box and the tests alike. Which
//! anomalies a source has is decided by the engine (`kvscope-engine`, `model/overview.rs`).

use serde::{Deserialize, Serialize};

/// Something about a source an operator should look at, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Anomaly {
    /// Some event is fatal under policy A or B: an indexer following it exits on this source.
    Fatal,
    /// The policies decide some of this source's events differently.
    PoliciesDisagree,
    /// Frames of this source are missing: seq gaps replay did not fill, or lost to lag.
    LostFrames,
    /// Payloads that did not decode.
    DecodeErrors,
    /// What Dynamo's relay published for this source differs from what it should have (missing,
    /// unexpected or mismatched RouterEvents, or a decode error on either side).
    RelayDiffers,
    /// The engine's seq went back: it restarted.
    Restarted,
    /// The router's index (under policy A or B, an indexer still running) sees less than half
    /// of the prefix tokens this engine has cached: most of its hits are never scored.
    RouterBlind,
    /// Its events are laid out unlike most of the fleet's (another release: tagged arrays up to
    /// vLLM 0.23, maps after).
    OtherWireLayout,
    /// Offload stores skipped: the router never indexes those blocks.
    OffloadSkipped,
    /// Connected (or listed) but no event analysed.
    Silent,
}

impl Anomaly {
    /// Most severe first, in declaration order.
    pub const ALL: [Anomaly; 10] = [
        Anomaly::Fatal,
        Anomaly::PoliciesDisagree,
        Anomaly::LostFrames,
        Anomaly::DecodeErrors,
        Anomaly::RelayDiffers,
        Anomaly::Restarted,
        Anomaly::RouterBlind,
        Anomaly::OtherWireLayout,
        Anomaly::OffloadSkipped,
        Anomaly::Silent,
    ];

    /// The chip's words, also what the filter box matches.
    pub fn as_str(self) -> &'static str {
        match self {
            Anomaly::Fatal => "fatal",
            Anomaly::PoliciesDisagree => "policies disagree",
            Anomaly::LostFrames => "frames lost",
            Anomaly::DecodeErrors => "decode errors",
            Anomaly::RelayDiffers => "relay differs",
            Anomaly::Restarted => "restarted",
            Anomaly::RouterBlind => "router sees under half",
            Anomaly::OtherWireLayout => "other wire layout",
            Anomaly::OffloadSkipped => "offload skipped",
            Anomaly::Silent => "silent",
        }
    }

    /// `data-anomaly` on a row's chip.
    pub fn key(self) -> &'static str {
        match self {
            Anomaly::Fatal => "fatal",
            Anomaly::PoliciesDisagree => "disagree",
            Anomaly::LostFrames => "lost",
            Anomaly::DecodeErrors => "errors",
            Anomaly::RelayDiffers => "relay",
            Anomaly::Restarted => "restarted",
            Anomaly::RouterBlind => "blind",
            Anomaly::OtherWireLayout => "wire",
            Anomaly::OffloadSkipped => "offload",
            Anomaly::Silent => "silent",
        }
    }

    /// What a row's sort weighs: a power of two by rank in [`Anomaly::ALL`], so a fatal source
    /// outranks any number of lesser anomalies.
    pub fn weight(self) -> u32 {
        1 << (Anomaly::ALL.len() - 1 - self as usize)
    }
}

/// One policy's verdicts on a source, by kind. Routine filtering (non-main groups, unknown
/// events) is apart from the skips that leave a tier's view incomplete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub fatal: u64,
    pub skipped: u64,
    pub filtered: u64,
    pub applied: u64,
}

/// What Dynamo's relay should have published for a source, what the event plane delivered, and
/// what is missing (the card's router row has every count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayCells {
    pub expected: u64,
    pub received: u64,
    pub missing: u64,
}

/// One row of the overview.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub index: u32,
    /// `worker:rank`.
    pub key: String,
    pub worker_id: String,
    pub dp_rank: u32,
    pub frames: u64,
    pub events: u64,
    /// Indexed by [`crate::Side`].
    pub tally: [Tally; 2],
    pub gaps: u64,
    pub lost_frames: u64,
    pub restarts: u64,
    pub errors: u64,
    pub events_per_second: f64,
    /// How its stores are laid out on the wire (its other events before any store): "map",
    /// "array of 12", or "—" before any event.
    pub wire: String,
    pub completeness: crate::completeness::Coverage,
    /// Per side, the share of this engine's cached prefix tokens the router's index sees
    /// (`None` before the engine cached any).
    pub router_sees: [Option<f32>; 2],
    /// Per side, blocks the router's index scores that the engine evicted.
    pub router_stale: [u64; 2],
    /// The relay's side, with an event plane and a worker id Dynamo names (`None` otherwise).
    pub relay: Option<RelayCells>,
    /// Most severe first.
    pub anomalies: Vec<Anomaly>,
}

impl Row {
    /// The sum of its anomalies' weights: what the overview sorts by.
    pub fn score(&self) -> u32 {
        self.anomalies.iter().map(|a| a.weight()).sum()
    }

    /// True when the filter text is empty, or found in the source's key or in one of its
    /// anomalies' words ("0:" finds worker 0's ranks, "restart" the restarted sources).
    pub fn matches(&self, filter: &str) -> bool {
        let f = filter.trim();
        f.is_empty() || self.key.contains(f) || self.anomalies.iter().any(|a| a.as_str().contains(f))
    }
}

/// How many sources have each anomaly: the overview's heading.
pub fn anomaly_counts(rows: &[Row]) -> Vec<(Anomaly, usize)> {
    Anomaly::ALL.iter().map(|a| (*a, rows.iter().filter(|r| r.anomalies.contains(a)).count())).filter(|(_, n)| *n > 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anomalies_are_listed_most_severe_first_and_weigh_by_rank() {
        for (i, a) in Anomaly::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i, "{a:?}: ALL is in declaration order");
        }
        let weights: Vec<u32> = Anomaly::ALL.iter().map(|a| a.weight()).collect();
        for i in 0..weights.len() {
            assert!(weights[i] > weights[i + 1..].iter().sum::<u32>(), "{weights:?}: one outranks all lesser ones together");
        }
    }
}
