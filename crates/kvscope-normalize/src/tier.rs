//! Storage tiers and the medium table that maps an event's `medium` string onto one.
//!
//! Engines name where a block lives with a free-form `medium` string (`GPU`, `CPU`, `cpu`,
//! `CPU_PINNED`, `STORAGE`, ...). A router keeps one tree per tier, so the mapping decides which
//! tree an event touches. Before the Kimi-K3 fix the match was exact and knew neither `CPU` nor
//! `STORAGE`: lowercase `cpu` from the offload connector fell back to Device, and a host-tier
//! `BlockRemoved` evicted the same hash from the GPU tree. [`resolve_tier`] therefore reports a
//! fallback explicitly ([`TierSource::Fallback`]) instead of hiding it.

use std::fmt;

use crate::policy::{MediumMatch, MediumTable, Policy};

/// Where a block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageTier {
    /// Accelerator memory: the tier a router routes on.
    Device,
    /// Host memory (pinned or not): CPU offload.
    HostPinned,
    /// Local disk or NVMe.
    Disk,
    /// Another machine or a shared store.
    External,
}

impl StorageTier {
    pub const ALL: [StorageTier; 4] = [StorageTier::Device, StorageTier::HostPinned, StorageTier::Disk, StorageTier::External];

    /// Stable label for counters, URLs and JS: `device`, `host_pinned`, `disk`, `external`.
    pub fn label(self) -> &'static str {
        match self {
            StorageTier::Device => "device",
            StorageTier::HostPinned => "host_pinned",
            StorageTier::Disk => "disk",
            StorageTier::External => "external",
        }
    }

    /// Parses a [`StorageTier::label`].
    pub fn from_label(label: &str) -> Option<StorageTier> {
        StorageTier::ALL.into_iter().find(|t| t.label() == label)
    }

    /// Dense index (0..4) for counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Maps a medium string under a policy's table and matching; `None` for a medium the table
    /// does not know (the caller decides what that means; see [`resolve_tier`]).
    ///
    /// An empty string is not in the table and maps to `None` here; [`resolve_tier`] treats it
    /// like an absent medium.
    pub fn from_kv_medium(medium: &str, policy: &Policy) -> Option<StorageTier> {
        lookup_medium(medium, policy).map(|row| row.tier)
    }
}

/// `Device`, `HostPinned`, ... (the Rust names, as the verdict sentences use them).
impl fmt::Display for StorageTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One row of the medium table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediumRow {
    /// The medium as the table spells it (upper case).
    pub name: &'static str,
    pub tier: StorageTier,
    /// False for the rows that only exist since the fix (`CPU`, `STORAGE`).
    pub in_legacy_table: bool,
}

/// The medium table of docs/rules.md, "Normalizer rules".
pub const MEDIUM_TABLE: &[MediumRow] = &[
    MediumRow { name: "GPU", tier: StorageTier::Device, in_legacy_table: true },
    MediumRow { name: "DEVICE", tier: StorageTier::Device, in_legacy_table: true },
    MediumRow { name: "CPU", tier: StorageTier::HostPinned, in_legacy_table: false },
    MediumRow { name: "CPU_PINNED", tier: StorageTier::HostPinned, in_legacy_table: true },
    MediumRow { name: "CPU_TIER1", tier: StorageTier::HostPinned, in_legacy_table: true },
    MediumRow { name: "CPU_TIER2", tier: StorageTier::Disk, in_legacy_table: true },
    MediumRow { name: "DISK", tier: StorageTier::Disk, in_legacy_table: true },
    MediumRow { name: "NVME", tier: StorageTier::Disk, in_legacy_table: true },
    MediumRow { name: "STORAGE", tier: StorageTier::Disk, in_legacy_table: false },
    MediumRow { name: "EXTERNAL", tier: StorageTier::External, in_legacy_table: true },
    MediumRow { name: "NETWORK", tier: StorageTier::External, in_legacy_table: true },
    MediumRow { name: "REMOTE", tier: StorageTier::External, in_legacy_table: true },
    MediumRow { name: "SHARED", tier: StorageTier::External, in_legacy_table: true },
];

/// The table row a medium matches under a policy, if any.
pub fn lookup_medium(medium: &str, policy: &Policy) -> Option<&'static MediumRow> {
    MEDIUM_TABLE.iter().find(|row| {
        (policy.medium_table == MediumTable::Full || row.in_legacy_table)
            && match policy.medium_match {
                MediumMatch::AsciiCaseInsensitive => row.name.eq_ignore_ascii_case(medium),
                MediumMatch::Exact => row.name == medium,
            }
    })
}

/// How an event's tier was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierSource {
    /// The event carried no medium: Device.
    Absent,
    /// The medium was `""`: Device.
    Empty,
    /// The medium matched a table row.
    Table,
    /// The medium matched no row and fell back to Device (`unknown_medium_fallback`).
    Fallback,
}

/// The tier of one event and how it was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TierChoice {
    pub tier: StorageTier,
    pub source: TierSource,
}

impl TierChoice {
    /// True when the medium matched nothing and Device was used anyway.
    pub fn is_fallback(self) -> bool {
        self.source == TierSource::Fallback
    }
}

/// The tier of an event's medium under a policy: absent or empty is Device; a medium the table
/// does not know falls back to Device and says so.
pub fn resolve_tier(medium: Option<&str>, policy: &Policy) -> TierChoice {
    match medium {
        None => TierChoice { tier: StorageTier::Device, source: TierSource::Absent },
        Some("") => TierChoice { tier: StorageTier::Device, source: TierSource::Empty },
        Some(m) => match StorageTier::from_kv_medium(m, policy) {
            Some(tier) => TierChoice { tier, source: TierSource::Table },
            None => TierChoice { tier: StorageTier::Device, source: TierSource::Fallback },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_and_empty_media_are_device_and_unknown_falls_back() {
        for policy in Policy::PRESETS {
            assert_eq!(resolve_tier(None, policy).source, TierSource::Absent);
            assert_eq!(resolve_tier(Some(""), policy).source, TierSource::Empty);
            let tape = resolve_tier(Some("tape"), policy);
            assert_eq!(tape, TierChoice { tier: StorageTier::Device, source: TierSource::Fallback });
            assert!(tape.is_fallback());
        }
    }

    #[test]
    fn labels_round_trip() {
        for tier in StorageTier::ALL {
            assert_eq!(StorageTier::from_label(tier.label()), Some(tier));
        }
        assert_eq!(StorageTier::from_label("Device"), None);
    }
}
