//! What the normalizer decided about one event: the decision, the rule that made it, and the
//! facts it looked at.
//!
//! A [`Verdict`] is small and `Copy`: the decision ([`VerdictKind`]), the rule that made it
//! ([`RuleId`]) and the facts the rule looked at ([`Facts`]). The sentence an operator reads in
//! the event inspector is rendered from those facts on demand (`verdict.to_string()`), never
//! stored: the normalizer runs on every event and the sentence is read for a handful. Rejected
//! alternative: a `String` per verdict, one allocation per event.
//!
//! This module is data only and knows no rule: the words (the sentence, the card fragment, the
//! log lines) belong to the rule that decided and live in its file under `src/rules/`, which
//! reads these types. Dependencies point one way: `label <- verdict <- rules <- normalizer`.

mod code;
mod flags;

use kvscope_wire::{BlockHash, EventType};

use crate::batch::BatchRejection;
use crate::label::VerdictLabel;
use crate::policy::MediumMatch;
use crate::small::SmallStr;
use crate::tier::{StorageTier, TierSource};

pub use code::VerdictCode;
pub use flags::VerdictFlags;

/// Index of a source (worker, dp_rank) inside one [`crate::Normalizer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SourceId(pub u32);

impl SourceId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Position of the deciding rule in [`crate::rules::RULES`] (`RuleId::rule` looks it up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u8);

/// The decision for one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VerdictKind {
    /// The event changes the tier trees.
    Apply(Apply),
    /// The event is dropped, for a reason a router expects: the label of the rule that skipped
    /// it (always one whose [`VerdictLabel::outcome`] is a skip).
    Skip(VerdictLabel),
    /// A router following this policy stops here.
    Fatal(Fatal),
}

/// What an applied event does to the tier trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Apply {
    /// Insert `blocks` hashes, chained from the event's parent.
    Store { blocks: u32 },
    /// Remove `blocks` hashes.
    Remove { blocks: u32 },
    /// Wipe every tier of the event's worker and rank.
    Clear,
    /// A store whose parent is one of its own hashes, applied as a remove of nothing
    /// (`self_referencing_store`): inserting it would make a block its own ancestor.
    NoOpRemove,
}

/// Why a router following the policy would stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fatal {
    /// Step 5: a non-empty store whose block size differs from the configured one, on a tier the
    /// policy checks.
    BlockSizeMismatch { event: u32, configured: u32, tier: StorageTier },
}

/// What the group filter (step 3) found for an event it let through, for the sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GroupCheck {
    /// The event has no group to check (clears, unknown tags), or the filter was not reached.
    #[default]
    NotChecked,
    /// The event's own kind ([`Facts::word`]) is a main kind.
    MainKind,
    /// No kind on the event; its group was learned as a main kind ([`Facts::word`]).
    LearnedMain,
    /// No kind, nothing learned, group 0 (or no group): a single-group model.
    Unlearned,
    /// No kind; the group was learned with a kind nobody listed ([`Facts::word`]); decides
    /// `unknown_kind` under `dynamo-1.6.1`.
    LearnedUnknown,
    /// The event is on Disk or External and the policy sends those straight to conversion,
    /// past learning, the group filter and the namespace check.
    LowerTierBypass,
}

/// The facts a rule looked at: enough to render the sentence without the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Facts {
    /// The medium as sent; meaningful when `tier_source` is `Table` or `Fallback` (empty when
    /// the event had none: `tier_source` tells absent from `""`).
    pub medium: SmallStr,
    /// How the tier was chosen; `None` for events with no tier (clears, unknown tags) and for
    /// an unknown medium the policy skips.
    pub tier_source: Option<TierSource>,
    /// The tier the medium mapped to, kept for the sentence even when the verdict itself names
    /// no tier (a `dynamo-1.6.1` skip).
    pub resolved_tier: Option<StorageTier>,
    pub medium_match: MediumMatch,
    /// The event's block size (stores only).
    pub event_block_size: Option<u32>,
    pub configured_block_size: u32,
    /// Hashes in the event.
    pub blocks: u32,
    /// Token ids in the event (stores only; pairs for SGLang bigram pages).
    pub token_count: u32,
    /// The store's token ids were SGLang bigram pages (pairs).
    pub is_bigram: bool,
    /// The group the group rules looked at (the event's `group_idx` as the policy reads it; 0
    /// when it named none).
    pub group: u32,
    /// The cache kind the group rules talked about (the event's own, or the learned one), the
    /// tag of an unknown event, the ownership or locality a filter read, or (every event of a
    /// rejected batch) the unknown tag that made the batch fail.
    pub word: SmallStr,
    /// Why the batch was rejected, for `batch_decode_rejected` verdicts.
    pub rejection: Option<BatchRejection>,
    pub group_check: GroupCheck,
    /// The hash the deciding clause names: the store's parent (0 when it has none), shown for
    /// self-referencing stores and ambiguous namespaces; the hash a store names twice; or, for
    /// `batch_decode_rejected`, the `lora_id` or `dp_rank` the decoder's message quotes
    /// (bit-cast). One slot rather than three keeps a verdict within 128 bytes, which the
    /// compiler copies inline.
    pub parent: BlockHash,
    /// 1-based position of this verdict's warning in its budget (0 when it has none; saturates
    /// at 255).
    pub warning_ordinal: u8,
    /// The budget's limit, for "logged, 2 of 3" (saturates at 255).
    pub warning_limit: u8,
}

/// One event's verdict. `Copy`, no heap (see `verdict_stays_small` for its size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    pub source: SourceId,
    pub seq: u64,
    /// Position of the event in its batch.
    pub event_index: u32,
    pub event_type: EventType,
    /// The tier the event concerns; `None` for clears (every tier) and unknown tags.
    pub tier: Option<StorageTier>,
    pub kind: VerdictKind,
    /// The rule that decided.
    pub rule: RuleId,
    pub flags: VerdictFlags,
    pub facts: Facts,
}

impl Verdict {
    /// The label counters file this verdict under.
    pub fn label(&self) -> VerdictLabel {
        match self.kind {
            VerdictKind::Apply(Apply::Store { .. }) => VerdictLabel::Store,
            VerdictKind::Apply(Apply::Remove { .. }) => VerdictLabel::Remove,
            VerdictKind::Apply(Apply::Clear) => VerdictLabel::Clear,
            VerdictKind::Apply(Apply::NoOpRemove) => VerdictLabel::SelfReferencingStore,
            VerdictKind::Skip(label) => label,
            VerdictKind::Fatal(Fatal::BlockSizeMismatch { .. }) => VerdictLabel::BlockSizeMismatch,
        }
    }

    pub fn is_fatal(&self) -> bool {
        matches!(self.kind, VerdictKind::Fatal(_))
    }

    /// Blocks this verdict applies (stores and removes); 0 otherwise.
    pub fn blocks_applied(&self) -> u32 {
        match self.kind {
            VerdictKind::Apply(Apply::Store { blocks } | Apply::Remove { blocks }) => blocks,
            _ => 0,
        }
    }

    /// A compact, stable code for tests and the vector table: the label, the tier label, the
    /// block count of stores and removes, then `+flag` for each flag, e.g.
    /// `store device 2 +short_token_ids` or `offload_block_size_mismatch host_pinned`.
    pub fn code(&self) -> VerdictCode<'_> {
        VerdictCode(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verdicts are copied into a vector per event; keep them from growing unnoticed.
    #[test]
    fn verdict_stays_small() {
        // At most 128 bytes, copied inline: at 144 the compiler calls memcpy for every verdict
        // pushed, which cost the normalizer a fifth of its throughput.
        assert!(std::mem::size_of::<Verdict>() <= 128, "{}", std::mem::size_of::<Verdict>());
    }
}
