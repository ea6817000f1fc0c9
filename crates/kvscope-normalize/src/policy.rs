//! Named normalizer presets, each a set of switches the rules read.
//!
//! A [`Policy`] is not code: it is data (which medium table, how mediums are matched, whether
//! the offload skip exists, which tiers the block-size check covers). The rules in
//! [`crate::rules`] read these switches, so two policies share every line of rule code and differ
//! only where a switch says so. Comparing `fixed` with `legacy` on the same stream is how
//! kvscope shows what the fix changed.
//!
//! # Adding a preset
//!
//! A third preset (for instance `dynamo-1.6.1`, which reproduces NVIDIA Dynamo's published
//! `dynamo-kv-router` 1.6.1) is added in four places:
//!
//! 1. here: a `pub const` built from switches, listed in [`Policy::PRESETS`]; if it needs a
//!    behaviour no switch expresses yet, add a switch (a new field, defaulted in the existing
//!    presets to their current behaviour). `dynamo-1.6.1` needs, for example, an
//!    "unknown medium" switch (fall back to Device, or skip as `unknown_medium`), a locality
//!    filter (`non_local_locality`) and ownership/namespace checks;
//! 2. [`crate::rules`]: a rule per new decision, inserted at its place in [`crate::rules::RULES`],
//!    with its unit test; its check returns `Step::Continue` when the switch is off, so the
//!    existing presets are unchanged;
//! 3. [`crate::SkipReason`] / [`crate::VerdictLabel`]: a variant per new skip reason (both are
//!    `#[non_exhaustive]`, and counters are sized from `VerdictLabel::ALL`). A batch-level
//!    outcome such as "whole batch lost" becomes a new [`crate::VerdictKind`] variant (also
//!    `#[non_exhaustive]`) given to every event of the rejected batch, so that "one verdict per
//!    event" still holds;
//! 4. `vectors/normalizer.json`: an expectation under the preset's name in each vector. The
//!    runner runs every preset it finds expectations for and requires `fixed` and `legacy`
//!    in every vector.

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
}

/// A named normalizer preset: the switches the rules read.
///
/// Construct one with [`Policy::FIXED`], [`Policy::LEGACY`] or [`str::parse`]; the fields are
/// public to read, and new presets are added in this module (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Policy {
    /// The name used on the command line and in the UI (`fixed`, `legacy`).
    pub name: &'static str,
    /// One line on what the preset reproduces.
    pub about: &'static str,
    pub medium_match: MediumMatch,
    pub medium_table: MediumTable,
    /// Whether step 4 exists: a store on a non-Device tier at another block size is skipped as
    /// `offload_block_size_mismatch` instead of reaching the block-size check.
    pub offload_block_size_skip: bool,
    /// Which tiers step 5 (fatal `block_size_mismatch`) covers.
    pub block_size_check: BlockSizeCheck,
}

impl Policy {
    /// The behaviour after the Kimi-K3 fix: case-insensitive mediums with `CPU` and `STORAGE`,
    /// offload stores at another block size skipped, a Device mismatch fatal.
    pub const FIXED: Policy = Policy {
        name: "fixed",
        about: "after the fix: case-insensitive mediums, offload block-size mismatches skipped, \
                Device mismatches fatal",
        medium_match: MediumMatch::AsciiCaseInsensitive,
        medium_table: MediumTable::Full,
        offload_block_size_skip: true,
        block_size_check: BlockSizeCheck::DeviceOnly,
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
    };

    /// Every preset, in the order the UI lists them.
    pub const PRESETS: &'static [Policy] = &[Policy::FIXED, Policy::LEGACY];

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
        Policy::PRESETS
            .iter()
            .find(|p| p.name == s)
            .copied()
            .ok_or_else(|| UnknownPolicy { given: s.to_owned() })
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
    }

    #[test]
    fn unknown_policy_error_lists_the_valid_names() {
        let err = "Fixed".parse::<Policy>().unwrap_err();
        assert_eq!(err.to_string(), "unknown policy \"Fixed\"; pass one of: fixed, legacy");
        let err = "dynamo-1.6.1".parse::<Policy>().unwrap_err();
        assert_eq!(err.to_string(), "unknown policy \"dynamo-1.6.1\"; pass one of: fixed, legacy");
    }
}
