//! Named normalizer presets, each a set of switches the rules read.
//!
//! A [`Policy`] is not code: it is data (which medium table, how mediums are matched, whether
//! the offload skip exists, which tiers the block-size check covers). The rules in
//! [`crate::rules`] read these switches, so every policy shares every line of rule code and
//! differs only where a switch says so. Comparing `fixed` with `legacy` on the same stream is how
//! kvscope shows what the fix changed; comparing either with `dynamo-1.6.1` shows what the
//! published indexer an operator runs today does with the same stream.
//!
//! | switch | `fixed` | `legacy` | `dynamo-1.6.1` |
//! |---|---|---|---|
//! | [`Policy::batch_check`] | none | none | batches Dynamo's decoder rejects are lost |
//! | [`Policy::ownership_filter`] | off | off | `kvcr`/other ownership skipped |
//! | [`Policy::medium_match`] / [`Policy::medium_table`] | case-insensitive, full | exact, without `CPU`/`STORAGE` | exact, full |
//! | [`Policy::unknown_medium`] | fall back to Device | fall back to Device | skip `unknown_medium` |
//! | [`Policy::locality_filter`] | off | off | non-`LOCAL` skipped |
//! | [`Policy::group_rules`] | kvscope's | kvscope's | Dynamo 1.6.1's |
//! | [`Policy::lower_tiers_bypass_filters`] | no | no | Disk/External skip learning, group filter, namespaces |
//! | [`Policy::namespace_filter`] | off | off | `ambiguous_cache_namespace` |
//! | [`Policy::offload_block_size_skip`] | on | off | off |
//! | [`Policy::block_size_check`] | Device fatal | every tier fatal | never fatal |
//! | [`Policy::self_reference`] | parent among hashes | parent among hashes | any repeated hash |
//! | [`Policy::conversion`] | store every hash | store every hash | publish the blocks that fit |
//! | [`Policy::skips_carry_tier`] | yes | yes | no |
//! | [`Policy::log_style`] | kvscope's lines | kvscope's lines | Dynamo 1.6.1's lines |
//!
//! # Adding a preset
//!
//! A preset is added in four places:
//!
//! 1. here: a `pub const` built from switches, listed in [`Policy::PRESETS`]; if it needs a
//!    behaviour no switch expresses yet, add a switch (a new field, set in the existing presets
//!    to their current behaviour);
//! 2. [`crate::rules`]: a rule per new decision, one file under `src/rules/` holding its check,
//!    its words (card fragment, inspector clause, log lines), its unit test and its `enabled`
//!    predicate (the switch), and one line at its place in [`crate::rules::RULES`]; its check
//!    also returns `Step::Continue` when the switch is off, so the existing presets are
//!    unchanged whether or not a [`crate::RuleSet`] leaves it out;
//! 3. [`crate::VerdictLabel`]: a variant per new label (`#[non_exhaustive]`, and counters are
//!    sized from `VerdictLabel::ALL`), listed in the labels of the rule that decides it.
//!    `dynamo-1.6.1`'s batch-level outcome ("the whole batch is lost") is a skip label too,
//!    `batch_decode_rejected`, given to every event of the batch so that "one verdict per event"
//!    holds. Rejected alternative: a new [`crate::VerdictKind`] variant; consumers that sort
//!    verdicts into applied, skipped and "anything else is fatal" would show a lost batch as a
//!    fatal one, and the published indexer never stops on one;
//! 4. `kvscope-corpus`'s `vectors/normalizer.json`: an expectation under the preset's name in every vector (a
//!    vector that lists `policies` names the presets it is for).

use std::fmt;
use std::str::FromStr;

/// How a medium string is compared with the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MediumMatch {
    /// ASCII case-insensitive: `cpu`, `Cpu` and `CPU` are one medium (policy `fixed`).
    AsciiCaseInsensitive,
    /// Byte-exact: `cpu` is not `CPU` (policy `legacy`).
    Exact,
}

impl MediumMatch {
    /// Words for the verdict sentence: `case-insensitive` or `exact match`.
    pub fn describe(self) -> &'static str {
        match self {
            MediumMatch::AsciiCaseInsensitive => "case-insensitive",
            MediumMatch::Exact => "exact match",
        }
    }
}

/// Which medium table a policy uses (see [`crate::tier::MEDIUM_TABLE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MediumTable {
    /// Every row, `CPU` and `STORAGE` included.
    Full,
    /// The table before the fix: without `CPU` and `STORAGE`.
    WithoutCpuAndStorage,
}

/// Which tiers the block-size check of step 5 covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSizeCheck {
    /// Only Device stores are fatal at another block size (policy `fixed`).
    DeviceOnly,
    /// Every non-empty store is fatal at another block size, whatever its tier: the check ran
    /// before the tier was looked at (policy `legacy`).
    EveryTier,
    /// Nothing is fatal: a store at another block size is applied with no blocks and one
    /// conversion warning ([`Conversion::PublishWhatFits`]; Dynamo 1.6.1).
    NeverFatal,
}

/// What happens to an event whose medium is in no row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnknownMedium {
    /// Filed on Device and flagged `unknown_medium_fallback` (`fixed`, `legacy`): the fallback
    /// that hid the host tier before the Kimi-K3 fix, kept visible.
    FallBackToDevice,
    /// Skipped as `unknown_medium` (Dynamo 1.6.1 fails closed).
    Skip,
}

/// Which version of the group filter (steps 2 and 3) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupRules {
    /// docs/rules.md's: a store with a kind teaches even without `group_idx` (it counts as group 0);
    /// an event without `group_idx` is checked as group 0; a group learned with an unknown kind
    /// filters as `non_main_attention_group`; removals carry no kind.
    Kvscope,
    /// Dynamo 1.6.1's (`ZmqEventNormalizer::filter_reason`): learning needs both `group_idx`
    /// and a kind; an event without `group_idx` passes; a group learned with an unknown kind
    /// filters as `unknown_kind`; a map-encoded removal's own kind is checked like a store's;
    /// array-encoded stores of up to 12 elements read a nil group followed by a sliding window
    /// as that window (Dynamo's "legacy trailing" rule).
    Dynamo161,
}

/// Which repeated hashes make a store self-referencing (step 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelfReference {
    /// The parent is one of the store's own hashes.
    ParentAmongHashes,
    /// Any hash repeats within `{parent} ∪ block_hashes` (Dynamo 1.6.1), so a store naming one
    /// hash twice is dropped too.
    AnyRepeatedHash,
}

/// How an applied store's blocks are counted (step 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// Every hash is stored; `token_ids` that do not hold `blocks x block_size` tokens only raise
    /// a conversion warning (`short_token_ids`, `wrong_size_block`).
    StoreEveryHash,
    /// Dynamo 1.6.1's `create_stored_blocks`: no block at another block size, otherwise the
    /// leading blocks whose tokens are all there; one conversion warning when that is fewer than
    /// the hashes. Extra tokens are ignored.
    PublishWhatFits,
}

/// Whether a decoder that reads the batch more strictly than kvscope loses whole batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchCheck {
    /// Every batch kvscope decodes is classified event by event.
    None,
    /// Dynamo 1.6.1's `decode_event_batch` (a strict 3-tuple, u64/i64 hashes only, u32 token
    /// ids, four known tags): every event of a batch it rejects is `batch_decode_rejected`.
    Dynamo161,
}

/// Which log lines an indexer following the policy prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogStyle {
    /// kvscope's own wording, with two warning budgets (conversion, offload).
    Kvscope,
    /// Dynamo 1.6.1's `tracing` lines: one shared budget of 3 for conversion warnings, and the
    /// lines it prints every time (rejected batches, self-referencing stores, unknown kinds).
    Dynamo161,
}

/// A named normalizer preset: the switches the rules read.
///
/// Construct one with [`Policy::FIXED`], [`Policy::LEGACY`] or [`str::parse`]; the fields are
/// public to read, and new presets are added in this module (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Policy {
    /// The name used on the command line and in the UI (`fixed`, `legacy`, `dynamo-1.6.1`).
    pub name: &'static str,
    /// One line on what the preset reproduces.
    pub about: &'static str,
    /// Batch-level rejection (rule `batch_decode_rejected`).
    pub batch_check: BatchCheck,
    /// Whether `ownership` filters (`unsupported_ownership`, `unknown_ownership`).
    pub ownership_filter: bool,
    pub medium_match: MediumMatch,
    pub medium_table: MediumTable,
    pub unknown_medium: UnknownMedium,
    /// Whether a `locality` other than `LOCAL` filters (`non_local_locality`).
    pub locality_filter: bool,
    pub group_rules: GroupRules,
    /// Whether events on the Disk and External tiers skip learning, the group filter and the
    /// namespace check, going straight to conversion.
    pub lower_tiers_bypass_filters: bool,
    /// Whether stores under a parent of ambiguous cache namespace are skipped
    /// (`ambiguous_cache_namespace`).
    pub namespace_filter: bool,
    /// Whether step 4 exists: a store on a non-Device tier at another block size is skipped as
    /// `offload_block_size_mismatch` instead of reaching the block-size check.
    pub offload_block_size_skip: bool,
    /// Which tiers step 5 (fatal `block_size_mismatch`) covers.
    pub block_size_check: BlockSizeCheck,
    pub self_reference: SelfReference,
    pub conversion: Conversion,
    /// Whether a skip verdict names the tier its medium mapped to. Dynamo 1.6.1 drops a filtered
    /// event before it is placed on any tier, so its skips carry none (the sentence still says
    /// what the medium mapped to).
    pub skips_carry_tier: bool,
    pub log_style: LogStyle,
}

impl Policy {
    /// The behaviour after the Kimi-K3 fix: case-insensitive mediums with `CPU` and `STORAGE`,
    /// offload stores at another block size skipped, a Device mismatch fatal.
    pub const FIXED: Policy = Policy {
        name: "fixed",
        about: "after the fix: case-insensitive mediums, offload block-size mismatches skipped, \
                Device mismatches fatal",
        batch_check: BatchCheck::None,
        ownership_filter: false,
        medium_match: MediumMatch::AsciiCaseInsensitive,
        medium_table: MediumTable::Full,
        unknown_medium: UnknownMedium::FallBackToDevice,
        locality_filter: false,
        group_rules: GroupRules::Kvscope,
        lower_tiers_bypass_filters: false,
        namespace_filter: false,
        offload_block_size_skip: true,
        block_size_check: BlockSizeCheck::DeviceOnly,
        self_reference: SelfReference::ParentAmongHashes,
        conversion: Conversion::StoreEveryHash,
        skips_carry_tier: true,
        log_style: LogStyle::Kvscope,
    };

    /// The behaviour before the fix: exact mediums without `CPU` and `STORAGE` (so `cpu` falls
    /// back to Device), no offload skip, and any non-empty store at another block size fatal.
    pub const LEGACY: Policy = Policy {
        name: "legacy",
        about: "before the fix: exact mediums without CPU and STORAGE, every block-size mismatch \
                fatal",
        medium_match: MediumMatch::Exact,
        medium_table: MediumTable::WithoutCpuAndStorage,
        offload_block_size_skip: false,
        block_size_check: BlockSizeCheck::EveryTier,
        ..Policy::FIXED
    };

    /// NVIDIA Dynamo's published `dynamo-kv-router` 1.6.1, as its standalone indexer's ZMQ
    /// listener runs it (docs/dynamo-1.6.1.md): batches its decoder rejects are lost whole;
    /// ownership, locality, exact mediums (unknown ones skipped), its group filter and cache
    /// namespaces filter; nothing is fatal, and a store at another block size is applied with no
    /// blocks.
    pub const DYNAMO_1_6_1: Policy = Policy {
        name: "dynamo-1.6.1",
        about: "NVIDIA Dynamo's published dynamo-kv-router 1.6.1: rejected batches lost, exact \
                mediums with unknown ones skipped, ownership/locality/namespace filters, never fatal",
        batch_check: BatchCheck::Dynamo161,
        ownership_filter: true,
        medium_match: MediumMatch::Exact,
        medium_table: MediumTable::Full,
        unknown_medium: UnknownMedium::Skip,
        locality_filter: true,
        group_rules: GroupRules::Dynamo161,
        lower_tiers_bypass_filters: true,
        namespace_filter: true,
        offload_block_size_skip: false,
        block_size_check: BlockSizeCheck::NeverFatal,
        self_reference: SelfReference::AnyRepeatedHash,
        conversion: Conversion::PublishWhatFits,
        skips_carry_tier: false,
        log_style: LogStyle::Dynamo161,
    };

    /// Not an indexer: what the engine itself holds, the truth an index is compared with
    /// (kvscope-index). `fixed`'s medium table and group filter (a non-main attention group's
    /// blocks are no prefix cache a router scores), but every store applied with every hash,
    /// whatever its block size or tier. Not in [`Policy::PRESETS`]: no one runs it.
    pub const ENGINE: Policy = Policy {
        name: "engine",
        about: "what the engine holds: fixed's medium table and group filter, every store applied with every hash",
        offload_block_size_skip: false,
        block_size_check: BlockSizeCheck::NeverFatal,
        ..Policy::FIXED
    };

    /// Every preset, in the order the UI lists them.
    pub const PRESETS: &'static [Policy] = &[Policy::FIXED, Policy::LEGACY, Policy::DYNAMO_1_6_1];

    /// The names of every preset.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Policy::PRESETS.iter().map(|p| p.name)
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::FIXED
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl FromStr for Policy {
    type Err = UnknownPolicy;

    /// Exact, case-sensitive names: a policy name is an identifier, not a wire string.
    fn from_str(s: &str) -> Result<Policy, UnknownPolicy> {
        Policy::PRESETS.iter().find(|p| p.name == s).copied().ok_or_else(|| UnknownPolicy { given: s.to_owned() })
    }
}

/// A policy name that names no preset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPolicy {
    /// The name as given.
    pub given: String,
}

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown policy {:?}; pass one of: ", self.given)?;
        for (i, name) in Policy::names().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownPolicy {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip_through_from_str_and_display() {
        for preset in Policy::PRESETS {
            let parsed: Policy = preset.name.parse().unwrap();
            assert_eq!(&parsed, preset);
            assert_eq!(parsed.to_string(), preset.name);
        }
        assert_eq!("fixed".parse::<Policy>().unwrap(), Policy::FIXED);
        assert_eq!("legacy".parse::<Policy>().unwrap(), Policy::LEGACY);
        assert_eq!("dynamo-1.6.1".parse::<Policy>().unwrap(), Policy::DYNAMO_1_6_1);
    }

    #[test]
    fn unknown_policy_error_lists_the_valid_names() {
        let err = "Fixed".parse::<Policy>().unwrap_err();
        assert_eq!(err.to_string(), "unknown policy \"Fixed\"; pass one of: fixed, legacy, dynamo-1.6.1");
        let err = "dynamo-1.6".parse::<Policy>().unwrap_err();
        assert_eq!(err.to_string(), "unknown policy \"dynamo-1.6\"; pass one of: fixed, legacy, dynamo-1.6.1");
    }
}
