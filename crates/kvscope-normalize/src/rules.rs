//! The normalizer rules: one item per rule, in evaluation order.
//!
//! Each rule is a [`Rule`]: its label, the sentence the documentation and the inspector show, and
//! its check. Its unit test sits right below it. [`RULES`] is the one ordered slice: the
//! normalizer walks it for every event until a check decides ([`evaluate`]), and the docs list
//! it in the same order ([`RULES`] is what `kvscope rules` and the web app's help print). The
//! steps are those of DESIGN.md, "Normalizer rules", numbered the same way; step 0 (the medium)
//! only prepares the tier and never decides under `fixed` or `legacy`.
//!
//! A check reads the event, the policy switches and the source's learned groups through
//! [`EventCtx`], and either lets the event through ([`Step::Continue`]) or decides
//! ([`Step::Decide`]). Policy differences live inside the checks as switch reads, so every
//! policy runs the same code (see [`crate::policy`] for adding a preset). The last rule, `apply`,
//! always decides.

use kvscope_wire::KvEvent;

use crate::groups::GroupTable;
use crate::kind::{classify_kind, KindClass};
use crate::policy::{BlockSizeCheck, Policy};
use crate::small::SmallStr;
use crate::tier::{resolve_tier, StorageTier, TierChoice};
use crate::verdict::{Apply, Facts, Fatal, GroupCheck, SkipReason, VerdictFlags, VerdictKind};

/// One rule: what it is called, what it says, and its check.
#[derive(Debug)]
pub struct Rule {
    /// The DESIGN.md step it implements (`"4"`, `"3a"`).
    pub step: &'static str,
    /// The label its verdicts carry, or the name of a preparatory step (`medium_tier`,
    /// `learn_group_kind`).
    pub label: &'static str,
    /// The rule in one sentence, as the docs and the inspector's rule list show it.
    pub sentence: &'static str,
    /// Lets the event through or decides.
    pub check: fn(&mut EventCtx<'_>) -> Step,
}

/// What a check says about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not this rule's business: ask the next.
    Continue,
    /// This rule decides.
    Decide(VerdictKind),
}

/// Position of a rule in [`RULES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u8);

impl RuleId {
    pub fn rule(self) -> &'static Rule {
        RULES[self.0 as usize]
    }
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
    /// Set by `medium_tier` for stores and removes.
    pub tier: Option<TierChoice>,
    /// Facts for the verdict sentence, filled as rules run.
    pub facts: Facts,
    pub flags: VerdictFlags,
    /// The class of the store's kind, computed once ([`EventCtx::kind_class`]).
    kind_class: Option<KindClass>,
}

impl<'a> EventCtx<'a> {
    #[inline]
    pub fn new(
        event: &'a KvEvent,
        policy: &'a Policy,
        configured_block_size: u32,
        dp_rank: u32,
        groups: &'a mut GroupTable,
    ) -> Self {
        let (event_block_size, token_count, parent) = match event {
            KvEvent::BlockStored(s) => (s.block_size, s.token_ids.count, s.parent_block_hash),
            _ => (None, 0, None),
        };
        let facts = Facts {
            medium: event.medium().map_or(SmallStr::EMPTY, SmallStr::new),
            tier_source: None,
            medium_match: policy.medium_match,
            event_block_size,
            configured_block_size,
            blocks: event.block_hashes().len() as u32,
            token_count,
            group_idx: event.group_idx(),
            word: SmallStr::EMPTY,
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
            tier: None,
            facts,
            flags: VerdictFlags::empty(),
            kind_class: None,
        }
    }

    /// The tier chosen by `medium_tier` (Device for events without one).
    pub fn tier(&self) -> StorageTier {
        self.tier.map_or(StorageTier::Device, |t| t.tier)
    }

    /// The event's group; an absent `group_idx` is group 0 (releases before groups had one).
    fn group(&self) -> u32 {
        self.event.group_idx().unwrap_or(0)
    }

    /// The store's declared kind (removes carry none).
    fn kind(&self) -> Option<&'a str> {
        match self.event {
            KvEvent::BlockStored(s) => s.kv_cache_spec_kind.as_deref(),
            _ => None,
        }
    }

    /// The class of the store's declared kind, classified once per event.
    fn kind_class(&mut self) -> Option<KindClass> {
        if self.kind_class.is_none() {
            self.kind_class = self.kind().map(classify_kind);
        }
        self.kind_class
    }

    /// True for events the group filter looks at (stores and removes).
    fn has_group(&self) -> bool {
        matches!(self.event, KvEvent::BlockStored(_) | KvEvent::BlockRemoved(_))
    }
}

/// Runs [`RULES`] in order until one decides.
#[inline]
pub fn evaluate(cx: &mut EventCtx<'_>) -> (RuleId, VerdictKind) {
    for (i, rule) in RULES.iter().enumerate() {
        if let Step::Decide(kind) = (rule.check)(cx) {
            return (RuleId(i as u8), kind);
        }
    }
    unreachable!("the last rule, apply, always decides")
}

/// The rules in evaluation order, which is also their documentation order.
pub static RULES: [&Rule; 11] = [
    &MEDIUM_TIER,
    &IGNORED_EVENT,
    &LEARN_GROUP_KIND,
    &NON_MAIN_ATTENTION_KIND,
    &UNKNOWN_KIND,
    &NON_MAIN_ATTENTION_GROUP,
    &UNLEARNED_GROUP_IDX,
    &OFFLOAD_BLOCK_SIZE_MISMATCH,
    &BLOCK_SIZE_MISMATCH,
    &SELF_REFERENCING_STORE,
    &APPLY,
];

/// The rule with this label, if any.
pub fn rule_by_label(label: &str) -> Option<(RuleId, &'static Rule)> {
    RULES.iter().enumerate().find(|(_, r)| r.label == label).map(|(i, r)| (RuleId(i as u8), *r))
}

#[cfg(test)]
use testkit::*;

// ---------------------------------------------------------------------------------------------
// Step 0: the medium decides the tier.

pub static MEDIUM_TIER: Rule = Rule {
    step: "0",
    label: "medium_tier",
    sentence: "A store or remove goes to the tier its medium names (policy fixed: ASCII case-insensitive, \
               CPU and STORAGE included; legacy: exact, without them); no medium or \"\" is Device, and a \
               medium that names no tier falls back to Device, flagged unknown_medium_fallback.",
    check: check_medium_tier,
};

fn check_medium_tier(cx: &mut EventCtx<'_>) -> Step {
    if cx.has_group() {
        let choice = resolve_tier(cx.event.medium(), cx.policy);
        cx.tier = Some(choice);
        cx.facts.tier_source = Some(choice.source);
        if choice.is_fallback() {
            cx.flags.insert(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK);
        }
    }
    Step::Continue
}

#[test]
fn medium_tier_files_lowercase_cpu_on_host_under_fixed_and_on_device_under_legacy() {
    let cpu = stored(&[7], None, 16, 16, Some("cpu"), None, None);
    let fixed = decide(&Policy::FIXED, 16, &cpu);
    assert_eq!(fixed.tier, Some(StorageTier::HostPinned));
    assert!(!fixed.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK));
    let legacy = decide(&Policy::LEGACY, 16, &cpu);
    assert_eq!(legacy.tier, Some(StorageTier::Device));
    assert!(legacy.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK));
    assert_eq!(legacy.label, "store");
}

// ---------------------------------------------------------------------------------------------
// Step 1

pub static IGNORED_EVENT: Rule = Rule {
    step: "1",
    label: "ignored_event",
    sentence: "An event whose tag the decoder does not know is skipped as ignored_event; it is counted, \
               never fatal.",
    check: check_ignored_event,
};

fn check_ignored_event(cx: &mut EventCtx<'_>) -> Step {
    match cx.event {
        KvEvent::Unknown(u) => {
            cx.facts.word = SmallStr::new(&u.tag);
            Step::Decide(VerdictKind::Skip(SkipReason::IgnoredEvent))
        }
        _ => Step::Continue,
    }
}

#[test]
fn ignored_event_skips_unknown_tags_under_every_policy() {
    let ev = unknown("KVCacheResized");
    for policy in Policy::PRESETS {
        let d = decide(policy, 16, &ev);
        assert_eq!((d.rule, d.label, d.tier), ("ignored_event", "ignored_event", None));
        assert_eq!(d.text, "unknown event tag \"KVCacheResized\" -> skip ignored_event");
    }
}

// ---------------------------------------------------------------------------------------------
// Step 2

pub static LEARN_GROUP_KIND: Rule = Rule {
    step: "2",
    label: "learn_group_kind",
    sentence: "A BlockStored that names its kind teaches the source which kind its group holds \
               ((dp_rank, group_idx) -> kind); removes carry no kind and teach nothing.",
    check: check_learn_group_kind,
};

fn check_learn_group_kind(cx: &mut EventCtx<'_>) -> Step {
    if let Some(kind) = cx.kind() {
        let group = cx.group();
        cx.groups.learn(cx.dp_rank, group, kind);
    }
    Step::Continue
}

#[test]
fn learn_group_kind_learns_from_stores_only() {
    let mut groups = GroupTable::default();
    let store = stored(&[1], None, 16, 16, Some("GPU"), Some(2), Some("mamba"));
    let _ = run_with(&Policy::FIXED, 16, 0, &mut groups, &store);
    assert_eq!(groups.get(0, 2).unwrap().kind.as_str(), "mamba");
    let remove = removed(&[1], Some("GPU"), Some(5));
    let _ = run_with(&Policy::FIXED, 16, 0, &mut groups, &remove);
    assert_eq!(groups.get(0, 5), None);
    assert_eq!(groups.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Step 3: the group filter, four rules.

pub static NON_MAIN_ATTENTION_KIND: Rule = Rule {
    step: "3a",
    label: "non_main_attention_kind",
    sentence: "An event whose kind is a known kind other than full_attention, mla_attention and \
               sink_full_attention (mamba, sliding_window, ...) is skipped as non_main_attention_kind.",
    check: check_non_main_attention_kind,
};

fn check_non_main_attention_kind(cx: &mut EventCtx<'_>) -> Step {
    match (cx.kind(), cx.kind_class()) {
        (Some(kind), Some(class)) => {
            cx.facts.word = SmallStr::new(kind);
            match class {
                KindClass::KnownNonMain => Step::Decide(VerdictKind::Skip(SkipReason::NonMainAttentionKind)),
                KindClass::Main => {
                    cx.facts.group_check = GroupCheck::MainKind;
                    Step::Continue
                }
                KindClass::Unknown => Step::Continue,
            }
        }
        _ => Step::Continue,
    }
}

#[test]
fn non_main_attention_kind_filters_mamba_stores() {
    let ev = stored(&[1], None, 1536, 1536, Some("GPU"), Some(0), Some("mamba"));
    for policy in Policy::PRESETS {
        let d = decide(policy, 1536, &ev);
        assert_eq!((d.rule, d.code.as_str()), ("non_main_attention_kind", "non_main_attention_kind device"));
    }
    // A main kind goes on.
    let ev = stored(&[1], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
    assert_eq!(decide(&Policy::FIXED, 1536, &ev).rule, "apply");
}

pub static UNKNOWN_KIND: Rule = Rule {
    step: "3b",
    label: "unknown_kind",
    sentence: "An event whose kind is a string this tool does not know is skipped as unknown_kind: an \
               engine release added a kind, and its blocks are not indexed until someone says what it is.",
    check: check_unknown_kind,
};

fn check_unknown_kind(cx: &mut EventCtx<'_>) -> Step {
    match cx.kind_class() {
        Some(KindClass::Unknown) => Step::Decide(VerdictKind::Skip(SkipReason::UnknownKind)),
        _ => Step::Continue,
    }
}

#[test]
fn unknown_kind_filters_kinds_nobody_listed() {
    let ev = stored(&[1], None, 16, 16, Some("GPU"), Some(0), Some("linear_attention"));
    let d = decide(&Policy::FIXED, 16, &ev);
    assert_eq!(d.rule, "unknown_kind");
    assert_eq!(
        d.text,
        "medium \"GPU\" -> Device (case-insensitive); kind \"linear_attention\" is not a known cache kind -> \
         skip unknown_kind"
    );
}

pub static NON_MAIN_ATTENTION_GROUP: Rule = Rule {
    step: "3c",
    label: "non_main_attention_group",
    sentence: "An event without a kind whose group a store declared non-main (or unknown) is skipped as \
               non_main_attention_group: a removal in a mamba group goes where its stores went.",
    check: check_non_main_attention_group,
};

fn check_non_main_attention_group(cx: &mut EventCtx<'_>) -> Step {
    if cx.kind().is_some() || !cx.has_group() {
        return Step::Continue;
    }
    match cx.groups.get(cx.dp_rank, cx.group()) {
        Some(learned) => {
            cx.facts.word = learned.kind;
            if learned.class == KindClass::Main {
                cx.facts.group_check = GroupCheck::LearnedMain;
                Step::Continue
            } else {
                Step::Decide(VerdictKind::Skip(SkipReason::NonMainAttentionGroup))
            }
        }
        None => Step::Continue,
    }
}

#[test]
fn non_main_attention_group_filters_removals_in_a_learned_mamba_group() {
    let mut groups = GroupTable::default();
    let store = stored(&[1], None, 1536, 1536, Some("GPU"), Some(1), Some("mamba"));
    let _ = run_with(&Policy::FIXED, 1536, 0, &mut groups, &store);
    let remove = removed(&[1], Some("GPU"), Some(1));
    let d = run_with(&Policy::FIXED, 1536, 0, &mut groups, &remove);
    assert_eq!(d.rule, "non_main_attention_group");
    assert_eq!(
        d.text,
        "medium \"GPU\" -> Device (case-insensitive); no kind; group 1 was learned as \"mamba\" -> skip \
         non_main_attention_group"
    );
    // Learned on rank 0 only: rank 1's group 1 is unlearned.
    let d = run_with(&Policy::FIXED, 1536, 1, &mut groups, &remove);
    assert_eq!(d.rule, "unlearned_group_idx");
}

pub static UNLEARNED_GROUP_IDX: Rule = Rule {
    step: "3d",
    label: "unlearned_group_idx",
    sentence: "An event without a kind in a group other than 0 that no store has described is skipped as \
               unlearned_group_idx: nothing says whether the group is main attention.",
    check: check_unlearned_group_idx,
};

fn check_unlearned_group_idx(cx: &mut EventCtx<'_>) -> Step {
    if cx.kind().is_some() || !cx.has_group() || cx.facts.group_check == GroupCheck::LearnedMain {
        return Step::Continue;
    }
    if cx.group() != 0 {
        Step::Decide(VerdictKind::Skip(SkipReason::UnlearnedGroupIdx))
    } else {
        cx.facts.group_check = GroupCheck::Unlearned;
        Step::Continue
    }
}

#[test]
fn unlearned_group_idx_filters_only_groups_other_than_zero() {
    let ev = removed(&[1], None, Some(2));
    assert_eq!(decide(&Policy::FIXED, 16, &ev).rule, "unlearned_group_idx");
    let ev = removed(&[1], None, Some(0));
    assert_eq!(decide(&Policy::FIXED, 16, &ev).rule, "apply");
    let ev = removed(&[1], None, None);
    assert_eq!(decide(&Policy::FIXED, 16, &ev).rule, "apply");
}

// ---------------------------------------------------------------------------------------------
// Step 4

pub static OFFLOAD_BLOCK_SIZE_MISMATCH: Rule = Rule {
    step: "4",
    label: "offload_block_size_mismatch",
    sentence: "A BlockStored on a tier other than Device whose block_size differs from the configured one \
               is skipped as offload_block_size_mismatch, with its own warning budget (policy fixed; legacy \
               has no such step).",
    check: check_offload_block_size_mismatch,
};

fn check_offload_block_size_mismatch(cx: &mut EventCtx<'_>) -> Step {
    if !cx.policy.offload_block_size_skip {
        return Step::Continue;
    }
    match cx.event {
        KvEvent::BlockStored(s)
            if cx.tier() != StorageTier::Device && s.block_size.is_some_and(|b| b != cx.configured_block_size) =>
        {
            Step::Decide(VerdictKind::Skip(SkipReason::OffloadBlockSizeMismatch))
        }
        _ => Step::Continue,
    }
}

#[test]
fn offload_block_size_mismatch_skips_a_cpu_store_at_another_block_size() {
    // Kimi-K3: group 3 is declared mla_attention by its GPU stores; the cpu store names the
    // group but no kind.
    let mut groups = GroupTable::default();
    let gpu = stored(&[9], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
    assert_eq!(run_with(&Policy::FIXED, 1536, 0, &mut groups, &gpu).code, "store device 1");
    let cpu = stored(&[9], None, 12288, 12288, Some("cpu"), Some(3), None);
    let d = run_with(&Policy::FIXED, 1536, 0, &mut groups, &cpu);
    assert_eq!(d.code, "offload_block_size_mismatch host_pinned");
    assert_eq!(
        d.text,
        "medium \"cpu\" -> HostPinned (case-insensitive); no kind; group 3 was learned as \"mla_attention\"; \
         block_size 12288 != 1536 on a non-device tier -> skip offload_block_size_mismatch"
    );
    let ev = stored(&[9], None, 12288, 12288, Some("cpu"), None, None);
    // Not under legacy: there, step 5 sees it.
    assert_eq!(decide(&Policy::LEGACY, 1536, &ev).rule, "block_size_mismatch");
    // At the configured size it is stored.
    assert_eq!(decide(&Policy::FIXED, 12288, &ev).code, "store host_pinned 1");
}

// ---------------------------------------------------------------------------------------------
// Step 5

pub static BLOCK_SIZE_MISMATCH: Rule = Rule {
    step: "5",
    label: "block_size_mismatch",
    sentence: "A non-empty BlockStored on the Device tier whose block_size differs from the configured one \
               is fatal (block_size_mismatch); policy legacy checks every tier, as the indexer did before \
               the fix.",
    check: check_block_size_mismatch,
};

fn check_block_size_mismatch(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(s) = cx.event else { return Step::Continue };
    let Some(event) = s.block_size else { return Step::Continue };
    let tier = cx.tier();
    let checked = match cx.policy.block_size_check {
        BlockSizeCheck::DeviceOnly => tier == StorageTier::Device,
        BlockSizeCheck::EveryTier => true,
    };
    if checked && !s.block_hashes.is_empty() && event != cx.configured_block_size {
        Step::Decide(VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured: cx.configured_block_size, tier }))
    } else {
        Step::Continue
    }
}

#[test]
fn block_size_mismatch_is_fatal_on_device_and_under_legacy_on_every_tier() {
    let gpu = stored(&[1], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
    for policy in Policy::PRESETS {
        let d = decide(policy, 12288, &gpu);
        assert_eq!(d.code, "block_size_mismatch device");
        assert_eq!(
            d.text,
            format!(
                "medium \"GPU\" -> Device ({}); kind \"mla_attention\" is main attention; block_size 1536 != 12288 \
                 on the Device tier -> fatal block_size_mismatch",
                policy.medium_match.describe()
            )
        );
    }
    let pinned = stored(&[1], None, 256, 256, Some("CPU_PINNED"), None, None);
    let d = decide(&Policy::LEGACY, 16, &pinned);
    assert_eq!(d.code, "block_size_mismatch host_pinned");
    assert!(d.text.ends_with("block_size 256 != 16 on HostPinned, and this policy checks every tier -> fatal block_size_mismatch"), "{}", d.text);
    // Empty stores are never fatal.
    let empty = stored(&[], None, 0, 8, Some("GPU"), None, None);
    assert_eq!(decide(&Policy::FIXED, 16, &empty).code, "store device 0");
}

// ---------------------------------------------------------------------------------------------
// Step 6

pub static SELF_REFERENCING_STORE: Rule = Rule {
    step: "6",
    label: "self_referencing_store",
    sentence: "A BlockStored whose parent is one of its own hashes is applied as a remove of nothing and \
               flagged self_referencing_store: storing it would make a block its own ancestor.",
    check: check_self_referencing_store,
};

fn check_self_referencing_store(cx: &mut EventCtx<'_>) -> Step {
    match cx.event {
        KvEvent::BlockStored(s) if s.parent_block_hash.is_some_and(|p| s.block_hashes.contains(&p)) => {
            cx.flags.insert(VerdictFlags::SELF_REFERENCING_STORE);
            Step::Decide(VerdictKind::Apply(Apply::NoOpRemove))
        }
        _ => Step::Continue,
    }
}

#[test]
fn self_referencing_store_becomes_a_no_op_remove() {
    let ev = stored(&[5, 6], Some(6), 32, 16, None, None, None);
    let d = decide(&Policy::FIXED, 16, &ev);
    assert_eq!(d.code, "self_referencing_store device");
    assert_eq!(
        d.text,
        "no medium -> Device; parent 0x0000000000000006 is one of the store's own hashes -> no-op remove, \
         self_referencing_store"
    );
}

// ---------------------------------------------------------------------------------------------
// Step 7

pub static APPLY: Rule = Rule {
    step: "7",
    label: "apply",
    sentence: "Anything left is applied on its tier: a store inserts its hashes (a conversion warning is \
               noted when token_ids does not hold blocks x block_size tokens), a remove deletes them, a clear \
               wipes every tier of the worker and rank.",
    check: check_apply,
};

fn check_apply(cx: &mut EventCtx<'_>) -> Step {
    let kind = match cx.event {
        KvEvent::BlockStored(s) => {
            let blocks = s.block_hashes.len() as u32;
            if blocks > 0 {
                let size = u64::from(s.block_size.unwrap_or(cx.configured_block_size));
                let needed = u64::from(blocks) * size;
                let have = u64::from(s.token_ids.count);
                if have < needed {
                    cx.flags.insert(VerdictFlags::SHORT_TOKEN_IDS);
                } else if have > needed {
                    cx.flags.insert(VerdictFlags::WRONG_SIZE_BLOCK);
                }
            }
            Apply::Store { blocks }
        }
        KvEvent::BlockRemoved(r) => Apply::Remove { blocks: r.block_hashes.len() as u32 },
        KvEvent::AllBlocksCleared { .. } => Apply::Clear,
        // Step 1 decided these already; kept total so evaluate() never falls off the end.
        KvEvent::Unknown(_) => return Step::Decide(VerdictKind::Skip(SkipReason::IgnoredEvent)),
    };
    Step::Decide(VerdictKind::Apply(kind))
}

#[test]
fn apply_stores_removes_and_clears_and_notes_conversion_warnings() {
    let ok = stored(&[1, 2], Some(0), 32, 16, Some("GPU"), Some(0), Some("full_attention"));
    assert_eq!(decide(&Policy::FIXED, 16, &ok).code, "store device 2");
    let short = stored(&[1, 2], None, 20, 16, Some("GPU"), None, None);
    assert_eq!(decide(&Policy::FIXED, 16, &short).code, "store device 2 +short_token_ids");
    let long = stored(&[1, 2], None, 40, 16, Some("GPU"), None, None);
    assert_eq!(decide(&Policy::FIXED, 16, &long).code, "store device 2 +wrong_size_block");
    assert_eq!(decide(&Policy::FIXED, 16, &removed(&[1], Some("CPU"), None)).code, "remove host_pinned 1");
    let clear = KvEvent::AllBlocksCleared { encoding: kvscope_wire::EventEncoding::Map };
    let d = decide(&Policy::LEGACY, 16, &clear);
    assert_eq!((d.code.as_str(), d.text.as_str()), ("clear", "clear every tier of this worker and rank"));
}

#[test]
fn rules_are_listed_once_in_design_order() {
    let steps: Vec<&str> = RULES.iter().map(|r| r.step).collect();
    assert_eq!(steps, ["0", "1", "2", "3a", "3b", "3c", "3d", "4", "5", "6", "7"]);
    let mut labels: Vec<&str> = RULES.iter().map(|r| r.label).collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), RULES.len());
    for rule in RULES {
        assert!(rule.sentence.ends_with('.'), "{}", rule.label);
        assert_eq!(rule_by_label(rule.label).unwrap().1.step, rule.step);
    }
}

/// Builders for the rule tests above: an event in, the deciding rule, code and sentence out.
#[cfg(test)]
pub(crate) mod testkit {
    use kvscope_wire::{BlockHash, BlockRemoved, BlockStored, EventEncoding, KvEvent, TokenIds, UnknownEvent};

    use super::*;
    use crate::verdict::{SourceId, Verdict};

    pub fn stored(
        hashes: &[u64],
        parent: Option<u64>,
        tokens: u32,
        block_size: u32,
        medium: Option<&str>,
        group_idx: Option<u32>,
        kind: Option<&str>,
    ) -> KvEvent {
        KvEvent::BlockStored(BlockStored {
            block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
            parent_block_hash: parent.map(BlockHash),
            token_ids: TokenIds { count: tokens, is_bigram: false, span: 0..0 },
            block_size: Some(block_size),
            medium: medium.map(str::to_owned),
            group_idx,
            kv_cache_spec_kind: kind.map(str::to_owned),
            encoding: Some(EventEncoding::Map),
            ..Default::default()
        })
    }

    pub fn removed(hashes: &[u64], medium: Option<&str>, group_idx: Option<u32>) -> KvEvent {
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
            medium: medium.map(str::to_owned),
            group_idx,
            encoding: Some(EventEncoding::Map),
            ..Default::default()
        })
    }

    pub fn unknown(tag: &str) -> KvEvent {
        KvEvent::Unknown(UnknownEvent { tag: tag.to_owned(), encoding: EventEncoding::Map })
    }

    /// What a test looks at.
    #[derive(Debug)]
    pub struct Decided {
        pub rule: &'static str,
        pub label: &'static str,
        pub code: String,
        pub text: String,
        pub tier: Option<StorageTier>,
        pub flags: VerdictFlags,
    }

    pub fn run_with(policy: &Policy, block_size: u32, dp_rank: u32, groups: &mut GroupTable, event: &KvEvent) -> Decided {
        let mut cx = EventCtx::new(event, policy, block_size, dp_rank, groups);
        let (rule, kind) = evaluate(&mut cx);
        let verdict = Verdict {
            source: SourceId(0),
            seq: 0,
            event_index: 0,
            event_type: event.event_type(),
            tier: cx.tier.map(|t| t.tier),
            kind,
            rule,
            flags: cx.flags,
            facts: cx.facts,
        };
        Decided {
            rule: rule.rule().label,
            label: verdict.label().as_str(),
            code: verdict.code().to_string(),
            text: verdict.to_string(),
            tier: verdict.tier,
            flags: verdict.flags,
        }
    }

    pub fn decide(policy: &Policy, block_size: u32, event: &KvEvent) -> Decided {
        run_with(policy, block_size, 0, &mut GroupTable::default(), event)
    }
}
