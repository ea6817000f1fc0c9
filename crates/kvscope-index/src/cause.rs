//! Every way a router's index comes to differ from what an engine holds, as one typed cause
//! each, with its label (JSON keys, `/metrics` labels, the page's legend) and its sentence (the
//! inspector, the card), in one place.

use std::fmt;

use kvscope_normalize::VerdictLabel;
use serde::{Serialize, Serializer};

/// Why the index lacks a block the engine holds (it cannot score it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Missing {
    /// A normalizer or relay rule dropped its store.
    Dropped(VerdictLabel),
    /// Its store was applied without this block (another block size, or its tokens short).
    NotPublished,
    /// The indexer dropped its batch: its seq was at or below the last one applied (the
    /// engine restarted and counts from 0 again).
    StaleSeq,
    /// The indexer never got its frame: it came from the engine's replay socket, which filled a
    /// gap for kvscope; an indexer reading `--workers` has no replay.
    NotReceived,
    /// The indexer exited on a fatal verdict after it was stored, and restarted empty.
    IndexerExited,
    /// The router applied a removal of it while the engine still holds another copy.
    RemovedWhileHeld,
    /// Its store ran into another worker's blocks for the same tokens and was rejected there.
    ForeignEdge,
    /// Its tokens are in the index under another block hash (the first writer's): its store
    /// landed there, and the index lists that hash for it (a lower tier, nothing).
    UnderOtherHash,
    /// The index lost it: a removal of a block before it in its index edge, or of a block above
    /// it, cut it off.
    CutOff,
    /// Its store named a parent the index did not hold, so the index dropped the whole store.
    Orphan(OrphanRoot),
}

/// Why an orphan store's parent was missing from the index: where its chain first broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OrphanRoot {
    /// The source's first frames came before kvscope (and the indexer) joined.
    LateJoin,
    /// Frames of the source were lost (a gap no replay filled).
    LostFrames,
    /// kvscope itself did not model some of the source's batches (its own queue dropped them):
    /// the chain may have begun there, which the indexer very likely heard.
    KvscopeDropped,
    /// The chain began before the engine restarted.
    EngineRestarted,
    /// The indexer exited on a fatal verdict and restarted empty.
    IndexerExited,
    /// The engine named a parent it never announced in this stream.
    NeverAnnounced,
    /// An earlier block of the chain is missing for this cause.
    AfterDropped(VerdictLabel),
    AfterNotPublished,
    AfterStaleSeq,
    AfterRemovedWhileHeld,
    AfterForeignEdge,
    AfterUnderOtherHash,
    AfterCutOff,
}

impl Missing {
    /// What an orphan of a store missing for this cause is an orphan of (an orphan's orphan
    /// keeps the first break).
    pub fn as_orphan_root(self) -> OrphanRoot {
        match self {
            Missing::Dropped(l) => OrphanRoot::AfterDropped(l),
            Missing::NotPublished => OrphanRoot::AfterNotPublished,
            Missing::StaleSeq => OrphanRoot::AfterStaleSeq,
            Missing::NotReceived => OrphanRoot::LostFrames,
            Missing::IndexerExited => OrphanRoot::IndexerExited,
            Missing::RemovedWhileHeld => OrphanRoot::AfterRemovedWhileHeld,
            Missing::ForeignEdge => OrphanRoot::AfterForeignEdge,
            Missing::UnderOtherHash => OrphanRoot::AfterUnderOtherHash,
            Missing::CutOff => OrphanRoot::AfterCutOff,
            Missing::Orphan(o) => o,
        }
    }
}

/// Why the index holds a block the engine no longer holds (the router scores a phantom).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stale {
    /// A rule dropped the removal (or the clear).
    RemovalDropped(VerdictLabel),
    /// The relay held the removal back: it counted another copy still stored.
    RemovalHeldBack,
    /// The indexer dropped the removal's batch as a stale seq (the engine restarted), or never
    /// got it (a frame only kvscope's replay recovered).
    RemovalStaleSeq,
    /// The removal reached the index, which could not take the block out (a block stored under
    /// two parents, or under another worker's hashes).
    Unremovable,
    /// The engine restarted, its cache empty; the index kept the blocks from before.
    EngineRestarted,
    /// The index lists this hash for tokens the engine stored under another one (the index
    /// keeps a node's first hashes), so a removal by the engine's hash cannot take it out.
    ListedForOtherHash,
    /// The engine never announced it (the index scores it for this worker anyway: another
    /// worker's blocks for the same tokens, or a block whose removal kvscope did not see).
    NeverAnnounced,
}

impl Missing {
    /// The label: `dropped:unknown_medium`, `orphan:late_join`, `removed_while_held`, ...
    pub fn label(&self) -> String {
        match self {
            Missing::Dropped(l) => format!("dropped:{l}"),
            Missing::NotPublished => "not_published".to_owned(),
            Missing::StaleSeq => "stale_seq".to_owned(),
            Missing::NotReceived => "not_received".to_owned(),
            Missing::IndexerExited => "indexer_exited".to_owned(),
            Missing::RemovedWhileHeld => "removed_while_held".to_owned(),
            Missing::ForeignEdge => "foreign_edge".to_owned(),
            Missing::UnderOtherHash => "under_other_hash".to_owned(),
            Missing::CutOff => "cut_off".to_owned(),
            Missing::Orphan(o) => format!("orphan:{}", o.label()),
        }
    }

    /// Why, in words, for the inspector and the card.
    pub fn sentence(&self) -> String {
        match self {
            Missing::Dropped(l) => format!("the router never indexed it: rule {l} dropped its store"),
            Missing::NotPublished => "its store reached the index without this block (another block size, or too few token ids)".to_owned(),
            Missing::StaleSeq => {
                "the indexer dropped its batch: its seq was at or below the last one it applied (the engine restarted and counts from 0 again)".to_owned()
            }
            Missing::NotReceived => {
                "the indexer never got its frame: kvscope's replay filled a gap, and an indexer reading --workers has no replay".to_owned()
            }
            Missing::IndexerExited => "the indexer exited on a fatal verdict after it was stored and restarted with an empty index".to_owned(),
            Missing::RemovedWhileHeld => "the router applied a removal of it while the engine still holds another copy".to_owned(),
            Missing::ForeignEdge => "its store ran into another worker's blocks for the same tokens and the index rejected the rest".to_owned(),
            Missing::UnderOtherHash => "its tokens are in the index under another block hash, the first writer's (another worker's, or an evicted block's node \
                 that Dynamo's 5-minute sweep has not unlinked yet): the index lists that hash for it, or on a lower tier nothing"
                .to_owned(),
            Missing::CutOff => "the index lost it: a removal of an earlier block of its index edge, or of a block above it, cut it off".to_owned(),
            Missing::Orphan(o) => format!("the index dropped its whole store: its parent was not in the index ({})", o.sentence()),
        }
    }
}

impl OrphanRoot {
    pub fn label(&self) -> String {
        match self {
            OrphanRoot::LateJoin => "late_join".to_owned(),
            OrphanRoot::LostFrames => "lost_frames".to_owned(),
            OrphanRoot::KvscopeDropped => "kvscope_dropped".to_owned(),
            OrphanRoot::EngineRestarted => "engine_restarted".to_owned(),
            OrphanRoot::IndexerExited => "indexer_exited".to_owned(),
            OrphanRoot::NeverAnnounced => "never_announced".to_owned(),
            OrphanRoot::AfterDropped(l) => format!("after_dropped:{l}"),
            OrphanRoot::AfterNotPublished => "after_not_published".to_owned(),
            OrphanRoot::AfterStaleSeq => "after_stale_seq".to_owned(),
            OrphanRoot::AfterRemovedWhileHeld => "after_removed_while_held".to_owned(),
            OrphanRoot::AfterForeignEdge => "after_foreign_edge".to_owned(),
            OrphanRoot::AfterUnderOtherHash => "after_under_other_hash".to_owned(),
            OrphanRoot::AfterCutOff => "after_cut_off".to_owned(),
        }
    }

    pub fn sentence(&self) -> String {
        match self {
            OrphanRoot::LateJoin => "the chain began before kvscope joined the stream".to_owned(),
            OrphanRoot::LostFrames => "frames of this source were lost, the chain's start among them".to_owned(),
            OrphanRoot::KvscopeDropped => {
                "kvscope's own queue dropped batches of this source before it modelled them, perhaps the chain's start: \
                 a blind spot of kvscope's, not frames the indexer lost"
                    .to_owned()
            }
            OrphanRoot::EngineRestarted => "the chain began before the engine restarted".to_owned(),
            OrphanRoot::IndexerExited => "the indexer restarted empty after exiting on a fatal verdict".to_owned(),
            OrphanRoot::NeverAnnounced => "the engine named a parent it never announced".to_owned(),
            OrphanRoot::AfterDropped(l) => format!("an earlier store of the chain was dropped by rule {l}"),
            OrphanRoot::AfterNotPublished => "an earlier store of the chain reached the index without its blocks".to_owned(),
            OrphanRoot::AfterStaleSeq => "an earlier batch of the chain was dropped as a stale seq".to_owned(),
            OrphanRoot::AfterRemovedWhileHeld => "an earlier block of the chain was removed while the engine held another copy".to_owned(),
            OrphanRoot::AfterForeignEdge => "an earlier store of the chain ran into another worker's blocks".to_owned(),
            OrphanRoot::AfterUnderOtherHash => "an earlier block of the chain is in the index under another hash".to_owned(),
            OrphanRoot::AfterCutOff => "an earlier block of the chain was cut off by a removal".to_owned(),
        }
    }
}

impl Stale {
    pub fn label(&self) -> String {
        match self {
            Stale::RemovalDropped(l) => format!("removal_dropped:{l}"),
            Stale::RemovalHeldBack => "removal_held_back".to_owned(),
            Stale::RemovalStaleSeq => "removal_stale_seq".to_owned(),
            Stale::Unremovable => "unremovable".to_owned(),
            Stale::EngineRestarted => "engine_restarted".to_owned(),
            Stale::ListedForOtherHash => "listed_for_other_hash".to_owned(),
            Stale::NeverAnnounced => "never_announced".to_owned(),
        }
    }

    pub fn sentence(&self) -> String {
        match self {
            Stale::RemovalDropped(l) => format!("the engine evicted it, but rule {l} dropped the removal"),
            Stale::RemovalHeldBack => "the engine evicted it, but the relay held the removal back (it counted another copy)".to_owned(),
            Stale::RemovalStaleSeq => "the engine evicted it, but the indexer dropped the removal's batch as a stale seq".to_owned(),
            Stale::Unremovable => "the engine evicted it and the removal reached the index, which could not take it out".to_owned(),
            Stale::EngineRestarted => "the engine restarted with an empty cache; the index kept it from before".to_owned(),
            Stale::ListedForOtherHash => {
                "the engine stored these tokens under another hash, and the index lists this one for them (it keeps a node's first \
                 hashes): a removal by the engine's hash cannot take it out"
                    .to_owned()
            }
            Stale::NeverAnnounced => "the engine never announced it for this worker; the index scores it anyway".to_owned(),
        }
    }
}

macro_rules! display_and_serialize_by_label {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.label())
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.label())
            }
        }
    )*};
}

display_and_serialize_by_label!(Missing, OrphanRoot, Stale);
