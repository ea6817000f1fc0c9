//! What a rule's check reads and writes: the event, the policy, the source's memory, and the
//! facts and flags the verdict will carry.

use kvscope_wire::{EventEncoding, KvEvent};

use crate::batch::BatchRejection;
use crate::groups::GroupTable;
use crate::kind::{KindClass, classify_kind};
use crate::namespaces::NamespaceTable;
use crate::policy::{GroupRules, Policy};
use crate::small::SmallStr;
use crate::tier::{StorageTier, TierChoice};
use crate::verdict::{Facts, GroupCheck, VerdictFlags, VerdictKind};

/// A batch-level rejection as every event of the batch sees it (rule `batch_decode_rejected`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub rejection: BatchRejection,
    /// The offending tag, for unknown tags.
    pub tag: SmallStr,
    /// The `lora_id` or `dp_rank` the message quotes.
    pub value: i64,
}

/// What a check says about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not this rule's business: ask the next.
    Continue,
    /// This rule decides.
    Decide(VerdictKind),
}

/// Everything a check may read, and what earlier checks found.
#[derive(Debug)]
pub struct EventCtx<'a> {
    pub event: &'a KvEvent,
    pub policy: &'a Policy,
    pub configured_block_size: u32,
    /// The batch's dp_rank, or the source's when the batch has none.
    pub dp_rank: u32,
    /// The source's learned group kinds (written by `learn_group_kind`).
    pub groups: &'a mut GroupTable,
    /// The source's cache namespaces (written by `ambiguous_cache_namespace`).
    pub namespaces: &'a mut NamespaceTable,
    /// Set for every event of a batch the policy's decoder rejects.
    pub rejection: Option<&'a Rejected>,
    /// Set by `medium_tier` for stores and removes.
    pub tier: Option<TierChoice>,
    /// Facts for the verdict sentence, filled as rules run.
    pub facts: Facts,
    pub flags: VerdictFlags,
    /// The class of the event's kind, computed once ([`EventCtx::kind_class`]).
    kind_class: Option<KindClass>,
    /// The group and kind as the policy's group rules read them ([`GroupRules`]).
    pub(super) meta_group: Option<u32>,
    meta_kind: Option<&'a str>,
}

impl<'a> EventCtx<'a> {
    #[inline]
    pub fn new(
        event: &'a KvEvent,
        policy: &'a Policy,
        configured_block_size: u32,
        dp_rank: u32,
        groups: &'a mut GroupTable,
        namespaces: &'a mut NamespaceTable,
    ) -> Self {
        let (event_block_size, token_count, is_bigram, parent) = match event {
            KvEvent::BlockStored(s) => (s.block_size, s.token_ids.count, s.token_ids.is_bigram, s.parent_block_hash),
            _ => (None, 0, false, None),
        };
        let (meta_group, meta_kind) = match policy.group_rules {
            GroupRules::Kvscope => (
                event.group_idx(),
                match event {
                    KvEvent::BlockStored(s) => s.kv_cache_spec_kind.as_deref(),
                    _ => None,
                },
            ),
            GroupRules::Dynamo161 => (dynamo_group(event), event.kv_cache_spec_kind()),
        };
        let facts = Facts {
            medium: match event.medium() {
                Some(m) => SmallStr::new(m),
                None => SmallStr::EMPTY,
            },
            tier_source: None,
            resolved_tier: None,
            medium_match: policy.medium_match,
            event_block_size,
            configured_block_size,
            blocks: event.block_hashes().len() as u32,
            token_count,
            is_bigram,
            group: meta_group.unwrap_or(0),
            word: SmallStr::EMPTY,
            rejection: None,
            group_check: GroupCheck::NotChecked,
            parent: parent.unwrap_or_default(),
            warning_ordinal: 0,
            warning_limit: 0,
        };
        EventCtx {
            event,
            policy,
            configured_block_size,
            dp_rank,
            groups,
            namespaces,
            rejection: None,
            tier: None,
            facts,
            flags: VerdictFlags::empty(),
            kind_class: None,
            meta_group,
            meta_kind,
        }
    }

    /// The tier chosen by `medium_tier` (Device for events without one).
    pub fn tier(&self) -> StorageTier {
        self.tier.map_or(StorageTier::Device, |t| t.tier)
    }

    /// The event's group; an absent `group_idx` is group 0 (releases before groups had one).
    pub(super) fn group(&self) -> u32 {
        self.meta_group.unwrap_or(0)
    }

    /// The group the filter looks up: under [`GroupRules::Kvscope`] an absent `group_idx` is
    /// group 0; under [`GroupRules::Dynamo161`] an event without one passes the filter.
    pub(super) fn filtered_group(&self) -> Option<u32> {
        match self.policy.group_rules {
            GroupRules::Kvscope => Some(self.group()),
            GroupRules::Dynamo161 => self.meta_group,
        }
    }

    /// The event's declared kind (under [`GroupRules::Kvscope`], stores only).
    pub(super) fn kind(&self) -> Option<&'a str> {
        self.meta_kind
    }

    /// The class of the event's declared kind, classified once per event.
    pub(super) fn kind_class(&mut self) -> Option<KindClass> {
        if self.kind_class.is_none() {
            self.kind_class = self.kind().map(classify_kind);
        }
        self.kind_class
    }

    /// True for events the group filter looks at (stores and removes).
    pub(super) fn has_group(&self) -> bool {
        matches!(self.event, KvEvent::BlockStored(_) | KvEvent::BlockRemoved(_))
    }

    /// True when the policy sends this event straight to conversion: it is on Disk or External
    /// and [`Policy::lower_tiers_bypass_filters`] is on (steps 2, 3 and P7 let it through).
    pub(super) fn bypasses_filters(&self) -> bool {
        self.policy.lower_tiers_bypass_filters && self.tier.is_some_and(|t| matches!(t.tier, StorageTier::Disk | StorageTier::External))
    }
}

/// The group Dynamo 1.6.1 reads. An array-encoded store of up to 12 elements has at most three
/// trailing slots (group, kind, sliding window), which Dynamo reads by its "legacy" rule: the
/// first unsigned value is the group, so a nil group followed by a sliding window is read as a
/// group equal to the window. Longer arrays and maps are read by position and by name.
fn dynamo_group(event: &KvEvent) -> Option<u32> {
    match event {
        KvEvent::BlockStored(s) => match s.encoding {
            Some(EventEncoding::Array { len }) if len <= 12 => s.group_idx.or(s.kv_cache_spec_sliding_window),
            _ => s.group_idx,
        },
        _ => event.group_idx(),
    }
}
