//! Per-source counters, warning budgets and the log an indexer would print.
//!
//! Counters count events: one verdict per event, so the verdict counts of a source add up to its
//! event count. Where blocks are counted the name says so (`blocks_applied`).
//!
//! A real indexer rate-limits its warnings: the first three of a kind are printed, the rest are
//! counted silently. kvscope keeps two budgets per source, as the fixed indexer does: one for
//! conversion warnings (short `token_ids`, a wrong-size block inside a store) and one for offload
//! block-size skips. They are separate so that a flood of expected offload skips (one per CPU
//! store on Kimi-K3) never hides the first conversion warning, which means something is wrong.
//! Dynamo 1.6.1 has one shared budget (`conversion`: stores at another block size and short
//! `token_ids` alike) and prints some lines every time, with no budget ([`NoticeLog`]).

use std::fmt;

use kvscope_wire::EventType;

use crate::label::VerdictLabel;
use crate::tier::StorageTier;

/// Lines each budget prints before it counts silently.
pub const WARNING_BUDGET: u32 = 3;

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogLevel {
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Warn => "WARN",
            LogLevel::Error => "ERROR",
        }
    }
}

/// One line an indexer would print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub seq: u64,
    pub event_index: u32,
    /// With its context: `w0:0 seq 8: ...`.
    pub text: String,
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.level.as_str(), self.text)
    }
}

/// Which warning budget a line is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BudgetKind {
    /// Short token_ids and wrong-size blocks, shared.
    Conversion,
    /// `offload_block_size_mismatch` skips; never charged to `Conversion`.
    Offload,
}

impl BudgetKind {
    pub const ALL: [BudgetKind; 2] = [BudgetKind::Conversion, BudgetKind::Offload];

    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Conversion => "conversion",
            BudgetKind::Offload => "offload",
        }
    }
}

/// A rate-limited warning: the first `limit` are logged, the rest counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarningBudget {
    pub limit: u32,
    /// Warnings printed (at most `limit`).
    pub emitted: u64,
    /// Warnings counted silently after the budget was spent. Non-zero means the log shows only
    /// the first `limit` of `emitted + suppressed`.
    pub suppressed: u64,
    /// The printed lines, at most `limit`.
    pub lines: Vec<LogLine>,
}

impl WarningBudget {
    pub fn new(limit: u32) -> Self {
        WarningBudget { limit, emitted: 0, suppressed: 0, lines: Vec::new() }
    }

    /// Every warning charged, printed or not.
    pub fn total(&self) -> u64 {
        self.emitted + self.suppressed
    }

    /// Charges one warning. Returns its 1-based ordinal if it is printed (the line is built
    /// only then), `None` if it is counted silently.
    pub(crate) fn charge(&mut self, level: LogLevel, seq: u64, event_index: u32, text: impl FnOnce(bool) -> String) -> Option<u32> {
        if self.emitted < u64::from(self.limit) {
            self.emitted += 1;
            let last = self.emitted == u64::from(self.limit);
            self.lines.push(LogLine { level, seq, event_index, text: text(last) });
            Some(self.emitted as u32)
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// Lines of a [`NoticeLog`] kept; later ones are counted in [`NoticeLog::total`] only.
pub const NOTICE_LINES_KEPT: usize = 20;

/// Lines an indexer prints every time, with no rate limit (Dynamo 1.6.1: "Failed to decode
/// KvEventBatch", self-referencing stores, unknown cache kinds). The indexer prints all of them;
/// kvscope keeps the first [`NOTICE_LINES_KEPT`] and counts the rest, so a long stream cannot
/// grow the counters without bound.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NoticeLog {
    /// Lines printed.
    pub total: u64,
    /// The first [`NOTICE_LINES_KEPT`] of them.
    pub lines: Vec<LogLine>,
}

impl NoticeLog {
    pub(crate) fn push(&mut self, level: LogLevel, seq: u64, event_index: u32, text: impl FnOnce() -> String) {
        self.total += 1;
        if self.lines.len() < NOTICE_LINES_KEPT {
            self.lines.push(LogLine { level, seq, event_index, text: text() });
        }
    }

    /// Lines printed but not kept here.
    pub fn not_kept(&self) -> u64 {
        self.total - self.lines.len() as u64
    }
}

/// Tier slots in the verdict matrix: the four tiers, then "no tier" (clears, unknown tags).
pub const TIER_SLOTS: usize = StorageTier::ALL.len() + 1;

/// Everything counted for one source (worker, dp_rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceCounters {
    /// Payloads decoded.
    pub batches: u64,
    events_by_type: [u64; EventType::ALL.len()],
    /// `[tier slot][label]`: verdict counts (events).
    verdicts: [[u64; VerdictLabel::COUNT]; TIER_SLOTS],
    /// Blocks in applied stores and removes.
    pub blocks_applied: u64,
    blocks_applied_by_tier: [u64; StorageTier::ALL.len()],
    /// Events whose medium matched no tier and went to Device.
    pub unknown_medium_fallbacks: u64,
    /// Fatal verdicts. A real indexer stops at the first; kvscope goes on so the view shows the
    /// rest of the stream, and says where the indexer would have died.
    pub fatal_count: u64,
    /// Seq and text of the first fatal verdict.
    pub first_fatal: Option<LogLine>,
    pub conversion: WarningBudget,
    pub offload: WarningBudget,
    /// Payloads that could not be decoded.
    pub decode_errors: u64,
    pub first_decode_error: Option<LogLine>,
    /// Batches the policy's decoder rejects as a whole (`dynamo-1.6.1`); their events are
    /// counted under `batch_decode_rejected`.
    pub batches_rejected: u64,
    /// Lines the indexer prints every time (`dynamo-1.6.1`).
    pub notices: NoticeLog,
}

impl Default for SourceCounters {
    fn default() -> Self {
        SourceCounters {
            batches: 0,
            events_by_type: [0; EventType::ALL.len()],
            verdicts: [[0; VerdictLabel::COUNT]; TIER_SLOTS],
            blocks_applied: 0,
            blocks_applied_by_tier: [0; StorageTier::ALL.len()],
            unknown_medium_fallbacks: 0,
            fatal_count: 0,
            first_fatal: None,
            conversion: WarningBudget::new(WARNING_BUDGET),
            offload: WarningBudget::new(WARNING_BUDGET),
            decode_errors: 0,
            first_decode_error: None,
            batches_rejected: 0,
            notices: NoticeLog::default(),
        }
    }
}

fn tier_slot(tier: Option<StorageTier>) -> usize {
    tier.map_or(StorageTier::ALL.len(), StorageTier::index)
}

fn event_type_index(t: EventType) -> usize {
    match t {
        EventType::BlockStored => 0,
        EventType::BlockRemoved => 1,
        EventType::AllBlocksCleared => 2,
        EventType::Unknown => 3,
    }
}

impl SourceCounters {
    /// Events of one type.
    pub fn events(&self, t: EventType) -> u64 {
        self.events_by_type[event_type_index(t)]
    }

    /// Every event seen.
    pub fn total_events(&self) -> u64 {
        self.events_by_type.iter().sum()
    }

    /// Verdicts with this tier (`None`: clears and unknown tags) and label.
    pub fn verdicts(&self, tier: Option<StorageTier>, label: VerdictLabel) -> u64 {
        self.verdicts[tier_slot(tier)][label.index()]
    }

    /// Verdicts with this label, any tier.
    pub fn verdicts_by_label(&self, label: VerdictLabel) -> u64 {
        self.verdicts.iter().map(|row| row[label.index()]).sum()
    }

    /// Verdicts on this tier (`None`: clears and unknown tags), any label.
    pub fn verdicts_by_tier(&self, tier: Option<StorageTier>) -> u64 {
        self.verdicts[tier_slot(tier)].iter().sum()
    }

    /// Blocks applied on one tier.
    pub fn blocks_applied_on(&self, tier: StorageTier) -> u64 {
        self.blocks_applied_by_tier[tier.index()]
    }

    pub fn budget(&self, kind: BudgetKind) -> &WarningBudget {
        match kind {
            BudgetKind::Conversion => &self.conversion,
            BudgetKind::Offload => &self.offload,
        }
    }

    /// The lines an indexer would print for this source: every budget's lines, the kept
    /// notices and the first fatal, in (seq, event) order.
    pub fn log(&self) -> Vec<&LogLine> {
        let mut lines: Vec<&LogLine> =
            self.conversion.lines.iter().chain(&self.offload.lines).chain(&self.notices.lines).chain(&self.first_fatal).collect();
        // Stable: a batch's rejection line (event 0) stays before its events' lines.
        lines.sort_by_key(|l| (l.seq, l.event_index));
        lines
    }

    /// Non-zero labels with their card fragments, in label order: "37 stores skipped on an
    /// offload tier at another block size".
    pub fn summaries(&self) -> Vec<(VerdictLabel, u64, String)> {
        VerdictLabel::ALL
            .into_iter()
            .filter_map(|label| {
                let n = self.verdicts_by_label(label);
                (n > 0).then(|| (label, n, label.summary(n)))
            })
            .collect()
    }

    pub(crate) fn count_event(&mut self, t: EventType) {
        self.events_by_type[event_type_index(t)] += 1;
    }

    pub(crate) fn count_verdict(&mut self, tier: Option<StorageTier>, label: VerdictLabel, blocks: u32) {
        self.verdicts[tier_slot(tier)][label.index()] += 1;
        if blocks > 0 {
            self.blocks_applied += u64::from(blocks);
            if let Some(tier) = tier {
                self.blocks_applied_by_tier[tier.index()] += u64::from(blocks);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_log_their_limit_then_count_silently() {
        let mut b = WarningBudget::new(3);
        let mut lasts = Vec::new();
        for seq in 0..5 {
            let got = b.charge(LogLevel::Warn, seq, 0, |last| {
                lasts.push(last);
                format!("w {seq}")
            });
            assert_eq!(got, if seq < 3 { Some(seq as u32 + 1) } else { None });
        }
        assert_eq!((b.emitted, b.suppressed, b.total(), b.lines.len()), (3, 2, 5, 3));
        assert_eq!(lasts, [false, false, true]);
    }
}
