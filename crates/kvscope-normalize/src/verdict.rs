//! What the normalizer decided about one event, and the words that explain it.
//!
//! A [`Verdict`] is small and `Copy`: the decision ([`VerdictKind`]), the rule that made it
//! ([`crate::rules::RuleId`]) and the facts the rule looked at ([`Facts`]). The sentence an
//! operator reads in the event inspector is rendered from those facts on demand
//! (`verdict.to_string()`), never stored: the normalizer runs on every event and the sentence is
//! read for a handful. Rejected alternative: a `String` per verdict, one allocation per event.
//!
//! Two shapes of text, as STYLE.md asks: per event a full sentence with the numbers
//! ("block_size 12288 != 1536 on a non-device tier -> skip offload_block_size_mismatch"), and
//! per card a fragment that reads after a count ([`VerdictLabel::summary`]: "37 stores skipped
//! on an offload tier at another block size").

use std::fmt;

use kvscope_wire::{BlockHash, EventType};

use crate::batch::BatchRejection;
use crate::policy::MediumMatch;
use crate::rules::{Rule, RuleId};
use crate::small::SmallStr;
use crate::tier::{StorageTier, TierSource};

/// Index of a source (worker, dp_rank) inside one [`crate::Normalizer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SourceId(pub u32);

impl SourceId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The decision for one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VerdictKind {
    /// The event changes the tier trees.
    Apply(Apply),
    /// The event is dropped, for a reason a router expects.
    Skip(SkipReason),
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

/// Why an event was skipped. Grows with new policies (`#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SkipReason {
    /// Step 1: an event tag the decoder does not know.
    IgnoredEvent,
    /// Step 3: the event's kind is a known kind that is not main attention (`mamba`, ...).
    NonMainAttentionKind,
    /// Step 3: the event's kind is a string this tool does not know.
    UnknownKind,
    /// Step 3: no kind on the event, and its group was learned as non-main.
    NonMainAttentionGroup,
    /// Step 3: no kind, nothing learned for the group, and the group is not 0.
    UnlearnedGroupIdx,
    /// Step 4: a store on a non-Device tier at another block size.
    OffloadBlockSizeMismatch,
    /// Rule D (`dynamo-1.6.1`): the batch is one the policy's decoder rejects as a whole; every
    /// event of it gets this reason ([`Facts::rejection`] says why).
    BatchDecodeRejected,
    /// Rule P1a: `ownership` is `kvcr` (KV-cache reuse), a domain the indexer does not index.
    UnsupportedOwnership,
    /// Rule P1b: `ownership` is a string other than `kvcr`.
    UnknownOwnership,
    /// Rule P3: `locality` is `REMOTE` or any string other than `LOCAL`.
    NonLocalLocality,
    /// Rule P4: the medium is in no row of the table (and the policy does not fall back).
    UnknownMedium,
    /// Rule P7: a store without a cache namespace of its own whose parent was stored under more
    /// than one namespace.
    AmbiguousCacheNamespace,
}

impl SkipReason {
    pub fn label(self) -> VerdictLabel {
        match self {
            SkipReason::IgnoredEvent => VerdictLabel::IgnoredEvent,
            SkipReason::NonMainAttentionKind => VerdictLabel::NonMainAttentionKind,
            SkipReason::UnknownKind => VerdictLabel::UnknownKind,
            SkipReason::NonMainAttentionGroup => VerdictLabel::NonMainAttentionGroup,
            SkipReason::UnlearnedGroupIdx => VerdictLabel::UnlearnedGroupIdx,
            SkipReason::OffloadBlockSizeMismatch => VerdictLabel::OffloadBlockSizeMismatch,
            SkipReason::BatchDecodeRejected => VerdictLabel::BatchDecodeRejected,
            SkipReason::UnsupportedOwnership => VerdictLabel::UnsupportedOwnership,
            SkipReason::UnknownOwnership => VerdictLabel::UnknownOwnership,
            SkipReason::NonLocalLocality => VerdictLabel::NonLocalLocality,
            SkipReason::UnknownMedium => VerdictLabel::UnknownMedium,
            SkipReason::AmbiguousCacheNamespace => VerdictLabel::AmbiguousCacheNamespace,
        }
    }

    /// The reason as counters and logs spell it (`offload_block_size_mismatch`).
    pub fn as_str(self) -> &'static str {
        self.label().as_str()
    }
}

/// Why a router following the policy would stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fatal {
    /// Step 5: a non-empty store whose block size differs from the configured one, on a tier the
    /// policy checks.
    BlockSizeMismatch { event: u32, configured: u32, tier: StorageTier },
}

/// Every verdict's label, as counters, logs and the UI spell it. Dense, so counters are arrays
/// sized by [`VerdictLabel::COUNT`]; a new policy adds variants at the end.
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

    /// Stable label for counters, logs and JS.
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

    /// Parses [`VerdictLabel::as_str`].
    pub fn from_str_label(s: &str) -> Option<VerdictLabel> {
        VerdictLabel::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// `apply`, `skip` or `fatal`. Events lost with a rejected batch are `skip`: the indexer
    /// goes on.
    pub fn outcome(self) -> &'static str {
        match self {
            VerdictLabel::Store | VerdictLabel::Remove | VerdictLabel::Clear | VerdictLabel::SelfReferencingStore => {
                "apply"
            }
            VerdictLabel::BlockSizeMismatch => "fatal",
            _ => "skip",
        }
    }

    /// The card fragment that reads after a count: `summary(37)` is "37 stores skipped on an
    /// offload tier at another block size".
    pub fn summary(self, count: u64) -> String {
        let (one, many, rest) = match self {
            VerdictLabel::Store => ("store", "stores", "applied"),
            VerdictLabel::Remove => ("removal", "removals", "applied"),
            VerdictLabel::Clear => ("clear", "clears", "applied (every tier of the worker and rank wiped)"),
            VerdictLabel::SelfReferencingStore => {
                ("store", "stores", "naming its own hash as parent, applied as a no-op remove")
            }
            VerdictLabel::IgnoredEvent => ("event", "events", "with an unknown tag ignored"),
            VerdictLabel::NonMainAttentionKind => ("event", "events", "of a non-main attention kind filtered"),
            VerdictLabel::UnknownKind => ("event", "events", "of an unknown cache kind filtered"),
            VerdictLabel::NonMainAttentionGroup => {
                ("event", "events", "without a kind in a non-main attention group filtered")
            }
            VerdictLabel::UnlearnedGroupIdx => {
                ("event", "events", "without a kind in a group no store has described filtered")
            }
            VerdictLabel::OffloadBlockSizeMismatch => {
                ("store", "stores", "skipped on an offload tier at another block size")
            }
            VerdictLabel::BlockSizeMismatch => {
                ("store", "stores", "fatal: block size differs from the configured one")
            }
            VerdictLabel::BatchDecodeRejected => ("event", "events", "lost with batches the decoder rejects"),
            VerdictLabel::UnsupportedOwnership => {
                ("event", "events", "owned by KV-cache reuse (ownership \"kvcr\") skipped")
            }
            VerdictLabel::UnknownOwnership => ("event", "events", "with an unknown ownership skipped"),
            VerdictLabel::NonLocalLocality => ("event", "events", "with a locality other than LOCAL skipped"),
            VerdictLabel::UnknownMedium => ("event", "events", "with a medium outside the table skipped"),
            VerdictLabel::AmbiguousCacheNamespace => {
                ("store", "stores", "under a parent of ambiguous cache namespace skipped")
            }
        };
        format!("{count} {} {rest}", if count == 1 { one } else { many })
    }
}

impl fmt::Display for VerdictLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Marks on a verdict that do not change its kind.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VerdictFlags(u8);

impl VerdictFlags {
    /// The medium matched no tier and Device was used.
    pub const UNKNOWN_MEDIUM_FALLBACK: VerdictFlags = VerdictFlags(1);
    /// A store whose parent is one of its own hashes.
    pub const SELF_REFERENCING_STORE: VerdictFlags = VerdictFlags(2);
    /// Conversion warning: fewer token ids than `blocks * block_size`.
    pub const SHORT_TOKEN_IDS: VerdictFlags = VerdictFlags(4);
    /// Conversion warning: more token ids than `blocks * block_size`, so some block of the
    /// store is not `block_size` tokens long.
    pub const WRONG_SIZE_BLOCK: VerdictFlags = VerdictFlags(8);
    /// This verdict's warning was printed (its budget had room).
    pub const WARNING_LOGGED: VerdictFlags = VerdictFlags(16);
    /// For a self-referencing store: a hash named twice made it so, not the parent
    /// ([`Facts::parent`] then holds the repeated hash). Not listed in codes.
    pub const HASH_REPEATED: VerdictFlags = VerdictFlags(64);
    /// Conversion warning (`dynamo-1.6.1`): a non-empty store at another block size, applied
    /// with no blocks.
    pub const BLOCK_SIZE_DIFFERS: VerdictFlags = VerdictFlags(32);

    /// Named flags, in the order codes list them.
    pub const NAMED: [(VerdictFlags, &'static str); 5] = [
        (VerdictFlags::UNKNOWN_MEDIUM_FALLBACK, "unknown_medium_fallback"),
        (VerdictFlags::SELF_REFERENCING_STORE, "self_referencing_store"),
        (VerdictFlags::SHORT_TOKEN_IDS, "short_token_ids"),
        (VerdictFlags::WRONG_SIZE_BLOCK, "wrong_size_block"),
        (VerdictFlags::BLOCK_SIZE_DIFFERS, "block_size_differs"),
    ];

    /// True for the flags that are conversion warnings (charged to the conversion budget).
    pub fn has_conversion_warning(self) -> bool {
        self.0 & (VerdictFlags::SHORT_TOKEN_IDS.0 | VerdictFlags::WRONG_SIZE_BLOCK.0 | VerdictFlags::BLOCK_SIZE_DIFFERS.0)
            != 0
    }

    pub const fn empty() -> VerdictFlags {
        VerdictFlags(0)
    }
    pub fn contains(self, other: VerdictFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn insert(&mut self, other: VerdictFlags) {
        self.0 |= other.0;
    }
    /// The names of the set flags (see [`VerdictFlags::NAMED`]).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        VerdictFlags::NAMED.into_iter().filter(move |(f, _)| self.contains(*f)).map(|(_, n)| n)
    }
}

impl fmt::Debug for VerdictFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
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
            VerdictKind::Skip(reason) => reason.label(),
            VerdictKind::Fatal(Fatal::BlockSizeMismatch { .. }) => VerdictLabel::BlockSizeMismatch,
        }
    }

    /// The rule that decided.
    pub fn rule(&self) -> &'static Rule {
        self.rule.rule()
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

    /// What to do about a fatal verdict, or `None`: the fix differs with why the store was
    /// checked (a medium that fell back to Device, an offload tier, or the Device tier itself).
    pub fn fatal_hint(&self) -> Option<String> {
        let VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured, tier }) = self.kind else {
            return None;
        };
        Some(if self.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK) {
            let medium = self.facts.medium;
            format!(
                "medium {medium:?} matched no tier and was filed on Device; --policy fixed maps offload media \
                 case-insensitively and skips offload stores at another block size"
            )
        } else if tier != StorageTier::Device {
            format!(
                "the store is on {tier}, not Device; --policy fixed skips offload stores whose block_size is not \
                 {configured}"
            )
        } else {
            format!("Device stores have block_size {event}, not {configured}; try --block-size {event}")
        })
    }

    /// `medium "cpu" -> HostPinned (case-insensitive)`, for events with a tier.
    fn write_medium_clause(&self, f: &mut fmt::Formatter<'_>, source: TierSource) -> fmt::Result {
        let tier = self.facts.resolved_tier.or(self.tier).unwrap_or(StorageTier::Device);
        let medium = self.facts.medium;
        match source {
            TierSource::Absent => write!(f, "no medium -> {tier}")?,
            TierSource::Empty => write!(f, "medium \"\" -> {tier}")?,
            TierSource::Table => write!(f, "medium {medium:?} -> {tier} ({})", self.facts.medium_match.describe())?,
            TierSource::Fallback => write!(
                f,
                "medium {medium:?} matches no tier ({}) -> falls back to {tier}, unknown_medium_fallback",
                self.facts.medium_match.describe()
            )?,
        }
        Ok(())
    }

    /// What the group filter found for an event it let through.
    /// Only the filter's passes are explained here; its skips explain themselves.
    fn write_group_clause(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.facts;
        match facts.group_check {
            GroupCheck::MainKind => write!(f, "kind {:?} is main attention", facts.word),
            GroupCheck::LearnedMain => {
                write!(f, "no kind; group {} was learned as {:?}", facts.group, facts.word)
            }
            GroupCheck::LowerTierBypass => {
                let tier = self.facts.resolved_tier.or(self.tier).unwrap_or(StorageTier::Device);
                write!(f, "{tier} goes straight to conversion (no group filter, no cache namespace)")
            }
            GroupCheck::Unlearned | GroupCheck::NotChecked | GroupCheck::LearnedUnknown => Ok(()),
        }
    }

    /// `(logged, 2 of 3)` or `(not logged: the budget of 3 is spent)`.
    fn write_budget_note(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flags.contains(VerdictFlags::WARNING_LOGGED) {
            write!(f, "(logged, {} of {})", self.facts.warning_ordinal, self.facts.warning_limit)
        } else {
            write!(f, "(not logged: the budget of {} is spent)", self.facts.warning_limit)
        }
    }

    /// A `dynamo-1.6.1` store that publishes fewer blocks than it names, and why.
    fn write_published_store(&self, f: &mut fmt::Formatter<'_>, blocks: u32) -> fmt::Result {
        let facts = &self.facts;
        let tier = self.tier.unwrap_or(StorageTier::Device);
        let size = facts.event_block_size.unwrap_or(facts.configured_block_size);
        let n = facts.blocks;
        if self.flags.contains(VerdictFlags::BLOCK_SIZE_DIFFERS) {
            write!(
                f,
                "block_size {size} != {}: no block is published at another block size -> store 0 of {n} block{} on \
                 {tier}; warning block_size_differs ",
                facts.configured_block_size,
                plural(n)
            )?;
        } else {
            let tokens = facts.token_count + u32::from(facts.is_bigram);
            write!(
                f,
                "block_size {size} matches, but token_ids holds {tokens} tokens, enough for {blocks} of {n} block{} -> \
                 store {blocks} block{} on {tier}; warning short_token_ids ",
                plural(n),
                plural(blocks)
            )?;
        }
        self.write_budget_note(f)
    }

    fn write_warning_clause(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.facts;
        let (what, name) = if self.flags.contains(VerdictFlags::SHORT_TOKEN_IDS) {
            ("fewer", "short_token_ids")
        } else if self.flags.contains(VerdictFlags::WRONG_SIZE_BLOCK) {
            ("more", "wrong_size_block")
        } else {
            return Ok(());
        };
        let size = facts.event_block_size.unwrap_or(facts.configured_block_size);
        write!(
            f,
            "; token_ids has {} tokens, {what} than {} blocks x {size} -> warning {name} ",
            facts.token_count, facts.blocks
        )?;
        self.write_budget_note(f)
    }

    /// The deciding clause.
    fn write_decision(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = &self.facts;
        let tier = self.tier.unwrap_or(StorageTier::Device);
        match self.kind {
            VerdictKind::Skip(SkipReason::IgnoredEvent) => {
                write!(f, "unknown event tag {:?} -> skip ignored_event", facts.word)
            }
            VerdictKind::Skip(SkipReason::NonMainAttentionKind) => {
                write!(f, "kind {:?} is not main attention -> skip non_main_attention_kind", facts.word)
            }
            VerdictKind::Skip(SkipReason::UnknownKind) if facts.group_check == GroupCheck::LearnedUnknown => write!(
                f,
                "no kind; group {} was learned as {:?}, not a known cache kind -> skip unknown_kind",
                facts.group,
                facts.word
            ),
            VerdictKind::Skip(SkipReason::UnknownKind) => {
                write!(f, "kind {:?} is not a known cache kind -> skip unknown_kind", facts.word)
            }
            VerdictKind::Skip(SkipReason::BatchDecodeRejected) => match facts.rejection {
                Some(r) => write!(f, "{} -> skip batch_decode_rejected", r.sentence(&facts.word, facts.parent.0 as i64)),
                None => f.write_str("the batch was rejected -> skip batch_decode_rejected"),
            },
            VerdictKind::Skip(SkipReason::UnsupportedOwnership) => write!(
                f,
                "ownership {:?} is KV-cache reuse, which this indexer does not index -> skip unsupported_ownership",
                facts.word
            ),
            VerdictKind::Skip(SkipReason::UnknownOwnership) => {
                write!(f, "ownership {:?} is neither absent nor \"kvcr\" -> skip unknown_ownership", facts.word)
            }
            VerdictKind::Skip(SkipReason::NonLocalLocality) => {
                write!(f, "locality {:?} is not \"LOCAL\" -> skip non_local_locality", facts.word)
            }
            VerdictKind::Skip(SkipReason::UnknownMedium) => write!(
                f,
                "medium {:?} is not in Dynamo 1.6.1's case-sensitive table -> skip unknown_medium",
                facts.medium
            ),
            VerdictKind::Skip(SkipReason::AmbiguousCacheNamespace) => write!(
                f,
                "no cache namespace of its own; parent {:?} was stored under more than one namespace -> skip \
                 ambiguous_cache_namespace",
                facts.parent
            ),
            VerdictKind::Skip(SkipReason::NonMainAttentionGroup) => write!(
                f,
                "no kind; group {} was learned as {:?} -> skip non_main_attention_group",
                facts.group,
                facts.word
            ),
            VerdictKind::Skip(SkipReason::UnlearnedGroupIdx) => write!(
                f,
                "no kind; group {} was never described by a store -> skip unlearned_group_idx",
                facts.group
            ),
            VerdictKind::Skip(SkipReason::OffloadBlockSizeMismatch) => write!(
                f,
                "block_size {} != {} on a non-device tier -> skip offload_block_size_mismatch",
                facts.event_block_size.unwrap_or(0),
                facts.configured_block_size
            ),
            VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured, tier }) => {
                if tier == StorageTier::Device {
                    write!(f, "block_size {event} != {configured} on the Device tier -> fatal block_size_mismatch")
                } else {
                    write!(
                        f,
                        "block_size {event} != {configured} on {tier}, and this policy checks every tier -> fatal \
                         block_size_mismatch"
                    )
                }
            }
            VerdictKind::Apply(Apply::NoOpRemove) if self.flags.contains(VerdictFlags::HASH_REPEATED) => write!(
                f,
                "hash {:?} is named twice in the store -> no-op remove, self_referencing_store",
                facts.parent
            ),
            VerdictKind::Apply(Apply::NoOpRemove) => write!(
                f,
                "parent {:?} is one of the store's own hashes -> no-op remove, self_referencing_store",
                facts.parent
            ),
            VerdictKind::Apply(Apply::Store { blocks })
                if blocks < facts.blocks || self.flags.contains(VerdictFlags::BLOCK_SIZE_DIFFERS) =>
            {
                self.write_published_store(f, blocks)
            }
            VerdictKind::Apply(Apply::Store { blocks }) => {
                match facts.event_block_size {
                    Some(size) if size == facts.configured_block_size => {
                        write!(f, "block_size {size} matches -> store {blocks} block{} on {tier}", plural(blocks))?
                    }
                    // Steps 4 and 5 let an empty store through at any block size.
                    Some(size) if blocks == 0 => write!(
                        f,
                        "block_size {size} != {} but the store is empty -> store 0 blocks on {tier}",
                        facts.configured_block_size
                    )?,
                    // No preset lets a non-empty one through; a future one might.
                    Some(size) => write!(
                        f,
                        "block_size {size} != {}, not checked on this tier -> store {blocks} block{} on {tier}",
                        facts.configured_block_size,
                        plural(blocks)
                    )?,
                    None => write!(f, "store {blocks} block{} on {tier}", plural(blocks))?,
                }
                self.write_warning_clause(f)
            }
            VerdictKind::Apply(Apply::Remove { blocks }) => write!(f, "remove {blocks} block{} from {tier}", plural(blocks)),
            VerdictKind::Apply(Apply::Clear) => f.write_str("clear every tier of this worker and rank"),
        }
    }
}

/// `s` when `n != 1`.
fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The full sentence an operator reads in the event inspector: the medium clause, what the group
/// filter found when it let the event through, and the deciding clause, joined by `; `.
impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            if !std::mem::replace(&mut first, false) {
                f.write_str("; ")?;
            }
            Ok::<(), fmt::Error>(())
        };
        if let Some(source) = self.facts.tier_source {
            sep(f)?;
            self.write_medium_clause(f, source)?;
        }
        if matches!(self.facts.group_check, GroupCheck::MainKind | GroupCheck::LearnedMain | GroupCheck::LowerTierBypass) {
            sep(f)?;
            self.write_group_clause(f)?;
        }
        sep(f)?;
        self.write_decision(f)
    }
}

/// See [`Verdict::code`].
#[derive(Debug, Clone, Copy)]
pub struct VerdictCode<'a>(&'a Verdict);

impl fmt::Display for VerdictCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let label = v.label();
        f.write_str(label.as_str())?;
        if let Some(tier) = v.tier {
            write!(f, " {}", tier.label())?;
        }
        if let VerdictKind::Apply(Apply::Store { blocks } | Apply::Remove { blocks }) = v.kind {
            write!(f, " {blocks}")?;
        }
        for name in v.flags.names() {
            // The label already says it.
            if label == VerdictLabel::SelfReferencingStore && name == "self_referencing_store" {
                continue;
            }
            write!(f, " +{name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_read_after_a_count() {
        assert_eq!(
            VerdictLabel::OffloadBlockSizeMismatch.summary(37),
            "37 stores skipped on an offload tier at another block size"
        );
        assert_eq!(
            VerdictLabel::OffloadBlockSizeMismatch.summary(1),
            "1 store skipped on an offload tier at another block size"
        );
        assert_eq!(VerdictLabel::NonMainAttentionKind.summary(2), "2 events of a non-main attention kind filtered");
        for label in VerdictLabel::ALL {
            assert!(label.summary(3).starts_with("3 "), "{label}");
            assert_eq!(VerdictLabel::from_str_label(label.as_str()), Some(label));
        }
    }

    /// Verdicts are copied into a vector per event; keep them from growing unnoticed.
    #[test]
    fn verdict_stays_small() {
        // At most 128 bytes, copied inline: at 144 the compiler calls memcpy for every verdict
        // pushed, which cost the normalizer a fifth of its throughput.
        assert!(std::mem::size_of::<Verdict>() <= 128, "{}", std::mem::size_of::<Verdict>());
    }

    #[test]
    fn labels_are_dense_and_ordered_like_all() {
        for (i, label) in VerdictLabel::ALL.iter().enumerate() {
            assert_eq!(label.index(), i);
        }
    }
}
