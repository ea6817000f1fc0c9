//! The normalizer rules: one item per rule, in evaluation order.
//!
//! Each rule is a [`Rule`]: its label, the sentence the documentation and the inspector show, and
//! its check. Its unit test sits right below it. [`RULES`] is the one ordered slice: the
//! normalizer walks it for every event until a check decides ([`evaluate`]), and the docs list
//! it in the same order ([`RULES`] is what `kvscope rules` and the web app's help print).
//!
//! A check reads the event, the policy switches and the source's memory (learned groups, cache
//! namespaces) through [`EventCtx`], and either lets the event through ([`Step::Continue`]) or
//! decides ([`Step::Decide`]). Policy differences live inside the checks as switch reads, so every
//! policy runs the same code (see [`crate::policy`] for adding a preset). The last rule, `apply`,
//! always decides.
//!
//! # One list, three presets
//!
//! Steps `0`-`7` are those of DESIGN.md, "Normalizer rules", numbered the same way; `fixed` and
//! `legacy` run only them (step 0 prepares the tier and never decides). The rules whose step is
//! a letter come from docs/dynamo-1.6.1.md, section 3 (`D` decoding, `P1`-`P7` preprocessing),
//! and only `dynamo-1.6.1` switches them on. Each rule says which policies run it
//! ([`Rule::enabled`]); a normalizer walks only those ([`RuleSet`], built once), so a preset pays
//! nothing for the rules of another. Dynamo's order is a subsequence of this list:
//!
//! | Dynamo 1.6.1 | rules here |
//! |---|---|
//! | D: `decode_event_batch` fails | `batch_decode_rejected` |
//! | P1: ownership | `unsupported_ownership`, `unknown_ownership` |
//! | P2: tag `Ignored` | step 1 `ignored_event` |
//! | P3: locality | `non_local_locality` |
//! | P4: medium | step 0 (tier), `unknown_medium`; Disk/External skip P5-P7 |
//! | P5: learn | step 2 `learn_group_kind` |
//! | P6: group filter | steps 3a-3d |
//! | P7: namespace | `ambiguous_cache_namespace` |
//! | C3: self-reference | step 6 `self_referencing_store` |
//! | C4, C5: blocks, apply | step 7 `apply` |
//!
//! Steps 4 (`offload_block_size_mismatch`) and 5 (fatal `block_size_mismatch`) are off under
//! `dynamo-1.6.1`, so its self-reference check comes before its block-size check, as in
//! Dynamo's `convert_event`, while `fixed` and `legacy` keep DESIGN.md's order (block size,
//! then self-reference). Rejected alternative: a second ordered list for `dynamo-1.6.1`; the
//! two would repeat steps 0-3 and 6-7 with the same checks, and every later rule would have to be
//! placed twice.

use std::collections::HashSet;

use kvscope_wire::{BlockStored, EventEncoding, KvEvent};

use crate::batch::BatchRejection;
use crate::groups::GroupTable;
use crate::kind::{classify_kind, KindClass};
use crate::namespaces::{NamespaceState, NamespaceTable};
use crate::policy::{BatchCheck, BlockSizeCheck, Conversion, GroupRules, Policy, SelfReference, UnknownMedium};
use crate::small::SmallStr;
use crate::tier::{resolve_tier, StorageTier, TierChoice};
use crate::verdict::{Apply, Facts, Fatal, GroupCheck, SkipReason, VerdictFlags, VerdictKind};

/// One rule: what it is called, what it says, and its check.
#[derive(Debug)]
pub struct Rule {
    /// The DESIGN.md step it implements (`"4"`, `"3a"`), or the docs/dynamo-1.6.1.md row
    /// (`"P3"`) for rules only `dynamo-1.6.1` switches on.
    pub step: &'static str,
    /// The label its verdicts carry, or the name of a preparatory step (`medium_tier`,
    /// `learn_group_kind`).
    pub label: &'static str,
    /// The rule in one sentence, as the docs and the inspector's rule list show it.
    pub sentence: &'static str,
    /// Whether a policy runs this rule at all. A check whose switch is off would let every event
    /// through anyway; [`RuleSet`] leaves it out so the normalizer does not call it per event.
    pub enabled: fn(&Policy) -> bool,
    /// Lets the event through or decides.
    pub check: fn(&mut EventCtx<'_>) -> Step,
}

/// Rules every preset runs.
fn always(_: &Policy) -> bool {
    true
}

/// The rules one policy runs, as positions in [`RULES`], in order: the subsequence its switches
/// enable. Built once per normalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleSet {
    ids: [u8; RULES.len()],
    len: u8,
}

impl RuleSet {
    pub fn for_policy(policy: &Policy) -> RuleSet {
        let mut set = RuleSet { ids: [0; RULES.len()], len: 0 };
        for (i, rule) in RULES.iter().enumerate() {
            if (rule.enabled)(policy) {
                set.ids[usize::from(set.len)] = i as u8;
                set.len += 1;
            }
        }
        set
    }

    /// The rules, in evaluation order.
    pub fn rules(&self) -> impl Iterator<Item = (RuleId, &'static Rule)> + '_ {
        self.ids[..usize::from(self.len)].iter().map(|&i| (RuleId(i), RULES[usize::from(i)]))
    }
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
    meta_group: Option<u32>,
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
            GroupRules::Kvscope => (event.group_idx(), match event {
                KvEvent::BlockStored(s) => s.kv_cache_spec_kind.as_deref(),
                _ => None,
            }),
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
    fn group(&self) -> u32 {
        self.meta_group.unwrap_or(0)
    }

    /// The group the filter looks up: under [`GroupRules::Kvscope`] an absent `group_idx` is
    /// group 0; under [`GroupRules::Dynamo161`] an event without one passes the filter.
    fn filtered_group(&self) -> Option<u32> {
        match self.policy.group_rules {
            GroupRules::Kvscope => Some(self.group()),
            GroupRules::Dynamo161 => self.meta_group,
        }
    }

    /// The event's declared kind (under [`GroupRules::Kvscope`], stores only).
    fn kind(&self) -> Option<&'a str> {
        self.meta_kind
    }

    /// The class of the event's declared kind, classified once per event.
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

    /// True when the policy sends this event straight to conversion: it is on Disk or External
    /// and [`Policy::lower_tiers_bypass_filters`] is on (steps 2, 3 and P7 let it through).
    fn bypasses_filters(&self) -> bool {
        self.policy.lower_tiers_bypass_filters
            && self.tier.is_some_and(|t| matches!(t.tier, StorageTier::Disk | StorageTier::External))
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

/// Runs the policy's rules in order until one decides.
#[inline]
pub fn evaluate(cx: &mut EventCtx<'_>) -> (RuleId, VerdictKind) {
    evaluate_in(&RuleSet::for_policy(cx.policy), cx)
}

/// [`evaluate`] with the policy's [`RuleSet`] built once.
#[inline]
pub fn evaluate_in(set: &RuleSet, cx: &mut EventCtx<'_>) -> (RuleId, VerdictKind) {
    for &i in &set.ids[..usize::from(set.len)] {
        if let Step::Decide(kind) = (RULES[usize::from(i)].check)(cx) {
            return (RuleId(i), kind);
        }
    }
    unreachable!("the last rule, apply, is enabled under every policy and always decides")
}

/// The rules in evaluation order, which is also their documentation order.
pub static RULES: [&Rule; 17] = [
    &BATCH_DECODE_REJECTED,
    &UNSUPPORTED_OWNERSHIP,
    &UNKNOWN_OWNERSHIP,
    &MEDIUM_TIER,
    &IGNORED_EVENT,
    &NON_LOCAL_LOCALITY,
    &UNKNOWN_MEDIUM,
    &LEARN_GROUP_KIND,
    &NON_MAIN_ATTENTION_KIND,
    &UNKNOWN_KIND,
    &NON_MAIN_ATTENTION_GROUP,
    &UNLEARNED_GROUP_IDX,
    &AMBIGUOUS_CACHE_NAMESPACE,
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
// D: the batch as a whole (dynamo-1.6.1)

pub static BATCH_DECODE_REJECTED: Rule = Rule {
    step: "D",
    label: "batch_decode_rejected",
    sentence: "Every event of a batch the policy's decoder rejects is lost with it (batch_decode_rejected): \
               under dynamo-1.6.1, a batch that is not a 3-element array, holds a bin hash, a token id outside \
               u32 or a tag other than BlockStored, BlockRemoved, AllBlocksCleared and Ignored.",
    enabled: |p| p.batch_check != BatchCheck::None,
    check: check_batch_decode_rejected,
};

/// A batch-level rejection as every event of the batch sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub rejection: BatchRejection,
    /// The offending tag, for unknown tags.
    pub tag: SmallStr,
    /// The `lora_id` or `dp_rank` the message quotes.
    pub value: i64,
}

fn check_batch_decode_rejected(cx: &mut EventCtx<'_>) -> Step {
    match cx.rejection {
        Some(r) => {
            cx.facts.rejection = Some(r.rejection);
            cx.facts.word = r.tag;
            cx.facts.parent = kvscope_wire::BlockHash(r.value as u64);
            Step::Decide(VerdictKind::Skip(SkipReason::BatchDecodeRejected))
        }
        None => Step::Continue,
    }
}

#[test]
fn batch_decode_rejected_loses_every_event_of_the_batch_whatever_it_is() {
    use crate::batch::RejectReason;
    let gpu = stored(&[1], None, 16, 16, Some("GPU"), None, None);
    let rejection = Rejected { rejection: BatchRejection::new(RejectReason::BinHash, Some(1)), tag: SmallStr::EMPTY, value: 0 };
    let mut mem = Memory::default();
    let d = run_rejected(&Policy::DYNAMO_1_6_1, 16, &mut mem, &gpu, Some(rejection));
    assert_eq!((d.rule, d.code.as_str(), d.tier), ("batch_decode_rejected", "batch_decode_rejected", None));
    assert_eq!(
        d.text,
        "events[1] has a bin (bytes) block hash; Dynamo 1.6.1's decoder rejects the whole batch (\"data did not \
         match any variant of untagged enum BlockHashValue\"), and every event of it is lost -> skip \
         batch_decode_rejected"
    );
    // Nothing is learned from a lost batch.
    let mamba = stored(&[1], None, 16, 16, None, Some(2), Some("mamba"));
    let _ = run_rejected(&Policy::DYNAMO_1_6_1, 16, &mut mem, &mamba, Some(rejection));
    assert!(mem.groups.is_empty());
    // Without a rejection the rule lets everything through.
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &gpu).code, "store device 1");
}

// ---------------------------------------------------------------------------------------------
// P1: ownership (dynamo-1.6.1)

pub static UNSUPPORTED_OWNERSHIP: Rule = Rule {
    step: "P1a",
    label: "unsupported_ownership",
    sentence: "An event whose ownership is \"kvcr\" (KV-cache reuse, vLLM 0.29 on) is skipped as \
               unsupported_ownership: dynamo-1.6.1 indexes only framework-owned blocks (ownership absent).",
    enabled: |p| p.ownership_filter,
    check: check_unsupported_ownership,
};

fn check_unsupported_ownership(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.ownership() {
        Some(o @ "kvcr") if cx.policy.ownership_filter => {
            cx.facts.word = SmallStr::new(o);
            Step::Decide(VerdictKind::Skip(SkipReason::UnsupportedOwnership))
        }
        _ => Step::Continue,
    }
}

#[test]
fn unsupported_ownership_skips_kvcr_events_before_anything_else() {
    let mut ev = stored(&[1], None, 16, 16, Some("STORAGE"), None, None);
    if let KvEvent::BlockStored(s) = &mut ev {
        s.ownership = Some("kvcr".into());
        s.locality = Some("REMOTE".into());
    }
    let d = decide(&Policy::DYNAMO_1_6_1, 16, &ev);
    assert_eq!((d.code.as_str(), d.tier), ("unsupported_ownership", None));
    assert_eq!(d.text, "ownership \"kvcr\" is KV-cache reuse, which this indexer does not index -> skip unsupported_ownership");
    let clear = KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: Some("kvcr".into()) };
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &clear).code, "unsupported_ownership");
    // fixed and legacy have no ownership rule.
    assert_eq!(decide(&Policy::FIXED, 16, &clear).code, "clear");
}

pub static UNKNOWN_OWNERSHIP: Rule = Rule {
    step: "P1b",
    label: "unknown_ownership",
    sentence: "An event whose ownership is any other string (\"framework\", \"KVCR\") is skipped as \
               unknown_ownership (dynamo-1.6.1 fails closed on owners it does not know).",
    enabled: |p| p.ownership_filter,
    check: check_unknown_ownership,
};

fn check_unknown_ownership(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.ownership() {
        Some(o) if cx.policy.ownership_filter => {
            cx.facts.word = SmallStr::new(o);
            Step::Decide(VerdictKind::Skip(SkipReason::UnknownOwnership))
        }
        _ => Step::Continue,
    }
}

#[test]
fn unknown_ownership_skips_every_other_owner_exactly() {
    let mut ev = removed(&[1], None, None);
    if let KvEvent::BlockRemoved(r) = &mut ev {
        r.ownership = Some("KVCR".into());
    }
    let d = decide(&Policy::DYNAMO_1_6_1, 16, &ev);
    assert_eq!(d.code, "unknown_ownership");
    assert_eq!(d.text, "ownership \"KVCR\" is neither absent nor \"kvcr\" -> skip unknown_ownership");
    assert_eq!(decide(&Policy::FIXED, 16, &ev).code, "remove device 1");
}

// ---------------------------------------------------------------------------------------------
// Step 0: the medium decides the tier.

pub static MEDIUM_TIER: Rule = Rule {
    step: "0",
    label: "medium_tier",
    sentence: "A store or remove goes to the tier its medium names (policy fixed: ASCII case-insensitive, \
               CPU and STORAGE included; legacy: exact, without them; dynamo-1.6.1: exact, with them); no \
               medium or \"\" is Device, and a medium that names no tier falls back to Device, flagged \
               unknown_medium_fallback (dynamo-1.6.1 skips it instead: unknown_medium).",
    enabled: always,
    check: check_medium_tier,
};

fn check_medium_tier(cx: &mut EventCtx<'_>) -> Step {
    if cx.has_group() {
        let choice = resolve_tier(cx.event.medium(), cx.policy);
        cx.tier = Some(choice);
        cx.facts.tier_source = Some(choice.source);
        cx.facts.resolved_tier = Some(choice.tier);
        if choice.is_fallback() && cx.policy.unknown_medium == UnknownMedium::FallBackToDevice {
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
    // dynamo-1.6.1 matches exactly but knows CPU.
    let upper = stored(&[7], None, 16, 16, Some("CPU"), None, None);
    let d = decide(&Policy::DYNAMO_1_6_1, 16, &upper);
    assert_eq!(d.code, "store host_pinned 1");
    assert_eq!(d.text, "medium \"CPU\" -> HostPinned (exact match); block_size 16 matches -> store 1 block on HostPinned");
}

// ---------------------------------------------------------------------------------------------
// Step 1

pub static IGNORED_EVENT: Rule = Rule {
    step: "1",
    label: "ignored_event",
    sentence: "An event whose tag the decoder does not know is skipped as ignored_event; it is counted, \
               never fatal (under dynamo-1.6.1 only the tag Ignored gets here: any other unknown tag loses \
               its batch).",
    enabled: always,
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
// P3, P4: locality and unknown media (dynamo-1.6.1)

pub static NON_LOCAL_LOCALITY: Rule = Rule {
    step: "P3",
    label: "non_local_locality",
    sentence: "A store or remove whose locality is REMOTE, or any string other than LOCAL, is skipped as \
               non_local_locality whatever its medium (dynamo-1.6.1 has no shared index; absent or LOCAL \
               passes).",
    enabled: |p| p.locality_filter,
    check: check_non_local_locality,
};

fn check_non_local_locality(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.locality() {
        Some(l) if cx.policy.locality_filter && l != "LOCAL" => {
            cx.facts.word = SmallStr::new(l);
            // The medium was not looked at: the locality alone decides.
            cx.facts.tier_source = None;
            Step::Decide(VerdictKind::Skip(SkipReason::NonLocalLocality))
        }
        _ => Step::Continue,
    }
}

#[test]
fn non_local_locality_skips_remote_and_unknown_localities_case_sensitively() {
    let with = |locality: &str, medium: &str| {
        let mut ev = stored(&[1], None, 16, 16, Some(medium), None, None);
        if let KvEvent::BlockStored(s) = &mut ev {
            s.locality = Some(locality.into());
        }
        decide(&Policy::DYNAMO_1_6_1, 16, &ev)
    };
    let d = with("REMOTE", "STORAGE");
    assert_eq!((d.code.as_str(), d.text.as_str()), ("non_local_locality", "locality \"REMOTE\" is not \"LOCAL\" -> skip non_local_locality"));
    // Even an unknown medium: locality is checked first.
    assert_eq!(with("local", "OBJ").code, "non_local_locality");
    assert_eq!(with("LOCAL", "STORAGE").code, "store disk 1");
}

pub static UNKNOWN_MEDIUM: Rule = Rule {
    step: "P4",
    label: "unknown_medium",
    sentence: "A store or remove whose medium is in no row of the table is skipped as unknown_medium \
               (dynamo-1.6.1 fails closed; fixed and legacy fall back to Device).",
    enabled: |p| p.unknown_medium == UnknownMedium::Skip,
    check: check_unknown_medium,
};

fn check_unknown_medium(cx: &mut EventCtx<'_>) -> Step {
    if cx.policy.unknown_medium == UnknownMedium::Skip && cx.tier.is_some_and(TierChoice::is_fallback) {
        cx.tier = None;
        cx.facts.tier_source = None;
        cx.facts.resolved_tier = None;
        Step::Decide(VerdictKind::Skip(SkipReason::UnknownMedium))
    } else {
        Step::Continue
    }
}

#[test]
fn unknown_medium_skips_lowercase_cpu_before_the_group_filter() {
    let mut mem = Memory::default();
    let cpu = stored(&[9], None, 12288, 12288, Some("cpu"), Some(3), Some("mamba"));
    let d = run_with(&Policy::DYNAMO_1_6_1, 1536, 0, &mut mem, &cpu);
    assert_eq!((d.code.as_str(), d.tier), ("unknown_medium", None));
    assert_eq!(d.text, "medium \"cpu\" is not in Dynamo 1.6.1's case-sensitive table -> skip unknown_medium");
    assert!(mem.groups.is_empty(), "a skipped store teaches nothing");
    for medium in ["Gpu", "GPU ", "FS", "OBJ"] {
        let ev = removed(&[1], Some(medium), None);
        assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &ev).code, "unknown_medium", "{medium:?}");
    }
    // "" is no medium.
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &removed(&[1], Some(""), None)).code, "remove device 1");
}

// ---------------------------------------------------------------------------------------------
// Step 2

pub static LEARN_GROUP_KIND: Rule = Rule {
    step: "2",
    label: "learn_group_kind",
    sentence: "A BlockStored that names its kind teaches the source which kind its group holds \
               ((dp_rank, group_idx) -> kind); removes teach nothing. dynamo-1.6.1 needs both group_idx and \
               a kind, and learns nothing from Disk and External stores.",
    enabled: always,
    check: check_learn_group_kind,
};

fn check_learn_group_kind(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(_) = cx.event else { return Step::Continue };
    let Some(kind) = cx.kind() else { return Step::Continue };
    let group = match cx.policy.group_rules {
        GroupRules::Kvscope => Some(cx.group()),
        GroupRules::Dynamo161 if cx.bypasses_filters() => None,
        GroupRules::Dynamo161 => cx.meta_group,
    };
    if let Some(group) = group {
        cx.groups.learn(cx.dp_rank, group, kind);
    }
    Step::Continue
}

#[test]
fn learn_group_kind_learns_from_stores_only() {
    let mut mem = Memory::default();
    let store = stored(&[1], None, 16, 16, Some("GPU"), Some(2), Some("mamba"));
    let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &store);
    assert_eq!(mem.groups.get(0, 2).unwrap().kind.as_str(), "mamba");
    let remove = removed(&[1], Some("GPU"), Some(5));
    let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &remove);
    assert_eq!(mem.groups.get(0, 5), None);
    assert_eq!(mem.groups.len(), 1);
}

#[test]
fn learn_group_kind_under_dynamo_needs_a_group_and_skips_lower_tiers() {
    let mut mem = Memory::default();
    let no_group = stored(&[1], None, 16, 16, None, None, Some("mamba"));
    let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &no_group);
    assert!(mem.groups.is_empty(), "no group_idx: nothing learned (fixed would learn group 0)");
    let disk = stored(&[1], None, 16, 16, Some("STORAGE"), Some(3), Some("mamba"));
    let d = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &disk);
    assert_eq!(d.code, "store disk 1", "Disk bypasses the group filter");
    assert_eq!(
        d.text,
        "medium \"STORAGE\" -> Disk (exact match); Disk goes straight to conversion (no group filter, no cache \
         namespace); block_size 16 matches -> store 1 block on Disk"
    );
    assert!(mem.groups.is_empty());
    let host = stored(&[1], None, 16, 16, Some("CPU"), Some(3), Some("mla_attention"));
    let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &host);
    assert_eq!(mem.groups.get(0, 3).unwrap().kind.as_str(), "mla_attention");
}

// ---------------------------------------------------------------------------------------------
// Step 3: the group filter, four rules.

pub static NON_MAIN_ATTENTION_KIND: Rule = Rule {
    step: "3a",
    label: "non_main_attention_kind",
    sentence: "An event whose kind is a known kind other than full_attention, mla_attention and \
               sink_full_attention (mamba, sliding_window, ...) is skipped as non_main_attention_kind.",
    enabled: always,
    check: check_non_main_attention_kind,
};

fn check_non_main_attention_kind(cx: &mut EventCtx<'_>) -> Step {
    if cx.bypasses_filters() {
        cx.facts.group_check = GroupCheck::LowerTierBypass;
        return Step::Continue;
    }
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
    for policy in [Policy::FIXED, Policy::LEGACY] {
        let d = decide(&policy, 1536, &ev);
        assert_eq!((d.rule, d.code.as_str()), ("non_main_attention_kind", "non_main_attention_kind device"));
    }
    // dynamo-1.6.1's skips name no tier.
    let d = decide(&Policy::DYNAMO_1_6_1, 1536, &ev);
    assert_eq!((d.rule, d.code.as_str()), ("non_main_attention_kind", "non_main_attention_kind"));
    assert_eq!(d.text, "medium \"GPU\" -> Device (exact match); kind \"mamba\" is not main attention -> skip non_main_attention_kind");
    // A main kind goes on.
    let ev = stored(&[1], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
    assert_eq!(decide(&Policy::FIXED, 1536, &ev).rule, "apply");
    // Under dynamo-1.6.1 a map-encoded removal's own kind counts too.
    let mut ev = removed(&[1], None, Some(0));
    if let KvEvent::BlockRemoved(r) = &mut ev {
        r.kv_cache_spec_kind = Some("sliding_window".into());
    }
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &ev).code, "non_main_attention_kind");
    assert_eq!(decide(&Policy::FIXED, 16, &ev).code, "remove device 1");
}

pub static UNKNOWN_KIND: Rule = Rule {
    step: "3b",
    label: "unknown_kind",
    sentence: "An event whose kind is a string this tool does not know is skipped as unknown_kind: an \
               engine release added a kind, and its blocks are not indexed until someone says what it is \
               (dynamo-1.6.1 also skips an event without a kind whose group was learned with such a kind).",
    enabled: always,
    check: check_unknown_kind,
};

fn check_unknown_kind(cx: &mut EventCtx<'_>) -> Step {
    if cx.bypasses_filters() {
        return Step::Continue;
    }
    match cx.kind_class() {
        Some(KindClass::Unknown) => Step::Decide(VerdictKind::Skip(SkipReason::UnknownKind)),
        Some(_) => Step::Continue,
        None if cx.policy.group_rules == GroupRules::Dynamo161 && cx.has_group() => {
            let Some(group) = cx.filtered_group() else { return Step::Continue };
            match cx.groups.get(cx.dp_rank, group) {
                Some(learned) if learned.class == KindClass::Unknown => {
                    cx.facts.word = learned.kind;
                    cx.facts.group_check = GroupCheck::LearnedUnknown;
                    Step::Decide(VerdictKind::Skip(SkipReason::UnknownKind))
                }
                _ => Step::Continue,
            }
        }
        None => Step::Continue,
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

#[test]
fn unknown_kind_under_dynamo_also_filters_a_group_learned_with_one() {
    let mut mem = Memory::default();
    let store = stored(&[1], None, 16, 16, None, Some(4), Some("weird"));
    assert_eq!(run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &store).code, "unknown_kind");
    let remove = removed(&[1], None, Some(4));
    let d = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &remove);
    assert_eq!(d.code, "unknown_kind");
    assert_eq!(d.text, "no medium -> Device; no kind; group 4 was learned as \"weird\", not a known cache kind -> skip unknown_kind");
    // fixed files the same removal under the group rule.
    let mut mem = Memory::default();
    let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &store);
    assert_eq!(run_with(&Policy::FIXED, 16, 0, &mut mem, &remove).code, "non_main_attention_group device");
}

pub static NON_MAIN_ATTENTION_GROUP: Rule = Rule {
    step: "3c",
    label: "non_main_attention_group",
    sentence: "An event without a kind whose group a store declared non-main (or, except under \
               dynamo-1.6.1, unknown) is skipped as non_main_attention_group: a removal in a mamba group goes \
               where its stores went.",
    enabled: always,
    check: check_non_main_attention_group,
};

fn check_non_main_attention_group(cx: &mut EventCtx<'_>) -> Step {
    if cx.kind().is_some() || !cx.has_group() || cx.bypasses_filters() {
        return Step::Continue;
    }
    let Some(group) = cx.filtered_group() else { return Step::Continue };
    match cx.groups.get(cx.dp_rank, group) {
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
    let mut mem = Memory::default();
    let store = stored(&[1], None, 1536, 1536, Some("GPU"), Some(1), Some("mamba"));
    let _ = run_with(&Policy::FIXED, 1536, 0, &mut mem, &store);
    let remove = removed(&[1], Some("GPU"), Some(1));
    let d = run_with(&Policy::FIXED, 1536, 0, &mut mem, &remove);
    assert_eq!(d.rule, "non_main_attention_group");
    assert_eq!(
        d.text,
        "medium \"GPU\" -> Device (case-insensitive); no kind; group 1 was learned as \"mamba\" -> skip \
         non_main_attention_group"
    );
    // Learned on rank 0 only: rank 1's group 1 is unlearned.
    let d = run_with(&Policy::FIXED, 1536, 1, &mut mem, &remove);
    assert_eq!(d.rule, "unlearned_group_idx");
}

#[test]
fn non_main_attention_group_under_dynamo_lets_events_without_a_group_through() {
    // Kimi-K3's group 0 is mamba; a GPU removal with no group_idx is group 0 to fixed only.
    for (policy, code) in [(Policy::FIXED, "non_main_attention_group device"), (Policy::DYNAMO_1_6_1, "remove device 1")] {
        let mut mem = Memory::default();
        let store = stored(&[1], None, 16, 16, Some("GPU"), Some(0), Some("mamba"));
        let _ = run_with(&policy, 16, 0, &mut mem, &store);
        let remove = removed(&[1], Some("GPU"), None);
        assert_eq!(run_with(&policy, 16, 0, &mut mem, &remove).code, code, "{}", policy.name);
    }
}

pub static UNLEARNED_GROUP_IDX: Rule = Rule {
    step: "3d",
    label: "unlearned_group_idx",
    sentence: "An event without a kind in a group other than 0 that no store has described is skipped as \
               unlearned_group_idx: nothing says whether the group is main attention.",
    enabled: always,
    check: check_unlearned_group_idx,
};

fn check_unlearned_group_idx(cx: &mut EventCtx<'_>) -> Step {
    if cx.kind().is_some() || !cx.has_group() || cx.bypasses_filters() || cx.facts.group_check == GroupCheck::LearnedMain {
        return Step::Continue;
    }
    match cx.filtered_group() {
        Some(group) if group != 0 => Step::Decide(VerdictKind::Skip(SkipReason::UnlearnedGroupIdx)),
        _ => {
            cx.facts.group_check = GroupCheck::Unlearned;
            Step::Continue
        }
    }
}

#[test]
fn unlearned_group_idx_filters_only_groups_other_than_zero() {
    for policy in [Policy::FIXED, Policy::DYNAMO_1_6_1] {
        let ev = removed(&[1], None, Some(2));
        assert_eq!(decide(&policy, 16, &ev).rule, "unlearned_group_idx");
        let ev = removed(&[1], None, Some(0));
        assert_eq!(decide(&policy, 16, &ev).rule, "apply");
        let ev = removed(&[1], None, None);
        assert_eq!(decide(&policy, 16, &ev).rule, "apply");
    }
}

#[test]
fn unlearned_group_idx_under_dynamo_reads_a_short_arrays_sliding_window_as_its_group() {
    // vLLM 0.22-0.23 layout, 12 elements: group nil, kind nil, sliding window 128.
    let mut ev = stored(&[1], None, 16, 16, Some("GPU"), None, None);
    if let KvEvent::BlockStored(s) = &mut ev {
        s.kv_cache_spec_sliding_window = Some(128);
        s.encoding = Some(EventEncoding::Array { len: 12 });
    }
    let d = decide(&Policy::DYNAMO_1_6_1, 16, &ev);
    assert_eq!(d.code, "unlearned_group_idx");
    assert_eq!(d.text, "medium \"GPU\" -> Device (exact match); no kind; group 128 was never described by a store -> skip unlearned_group_idx");
    assert_eq!(decide(&Policy::FIXED, 16, &ev).code, "store device 1");
}

// ---------------------------------------------------------------------------------------------
// P7: cache namespaces (dynamo-1.6.1)

pub static AMBIGUOUS_CACHE_NAMESPACE: Rule = Rule {
    step: "P7",
    label: "ambiguous_cache_namespace",
    sentence: "A store without a cache namespace of its own whose parent was stored under two namespaces (or \
               salted and unsalted) is skipped as ambiguous_cache_namespace; stores record their namespace \
               per hash (a child inherits its parent's), removals forget it, clears forget the rank's \
               (dynamo-1.6.1, Device and HostPinned only).",
    enabled: |p| p.namespace_filter,
    check: check_ambiguous_cache_namespace,
};

/// Dynamo's tag for a cache salt carried in `extra_keys` (`DYNAMO_CACHE_SALT_PREFIX`).
pub const DYNAMO_CACHE_SALT_PREFIX: &str = "dynamo-cache-salt:";

/// A store's own cache namespace as Dynamo 1.6.1 reads it: `cache_salt`, else the first string
/// of the first block's `extra_keys` tagged `dynamo-cache-salt:` (skipping one item equal to the
/// LoRA name). An empty one is none. A map's `cache_salt: ""` still stops the fallback to
/// `extra_keys`; SGLang's array map `{cache_salt: ""}` does not (Dynamo drops it while decoding).
pub fn own_namespace(s: &BlockStored) -> Option<&str> {
    let is_array = matches!(s.encoding, Some(EventEncoding::Array { .. }));
    let salt = match s.cache_salt.as_deref() {
        Some(salt) if !(is_array && salt.is_empty()) => Some(salt),
        _ => extra_keys_namespace(s),
    };
    salt.filter(|salt| !salt.is_empty())
}

fn extra_keys_namespace(s: &BlockStored) -> Option<&str> {
    let keys = s.extra_key_strings.as_deref()?;
    let mut unmatched_lora = s.lora_name.as_deref().filter(|name| !name.is_empty());
    keys.iter().find_map(|key| {
        if unmatched_lora == Some(key.as_str()) {
            unmatched_lora = None;
            return None;
        }
        key.strip_prefix(DYNAMO_CACHE_SALT_PREFIX).filter(|ns| !ns.is_empty())
    })
}

fn check_ambiguous_cache_namespace(cx: &mut EventCtx<'_>) -> Step {
    if !cx.policy.namespace_filter || cx.bypasses_filters() {
        return Step::Continue;
    }
    let dp = cx.dp_rank;
    match cx.event {
        KvEvent::BlockStored(s) => {
            let namespace = match own_namespace(s) {
                Some(ns) => Some(cx.namespaces.intern(ns)),
                None => match s.parent_block_hash.map(|p| (p, cx.namespaces.get(dp, p.0))) {
                    Some((_, Some(NamespaceState::Namespaced(ns)))) => Some(ns),
                    Some((parent, Some(NamespaceState::Ambiguous))) => {
                        cx.facts.parent = parent;
                        return Step::Decide(VerdictKind::Skip(SkipReason::AmbiguousCacheNamespace));
                    }
                    // A listener that joined mid-chain cannot tell an unknown salted parent from
                    // an unsalted one; Dynamo keeps the unsalted reading.
                    _ => None,
                },
            };
            for h in &s.block_hashes {
                match namespace {
                    Some(ns) => cx.namespaces.record(dp, h.0, ns),
                    None => cx.namespaces.stored_unsalted(dp, h.0),
                }
            }
        }
        KvEvent::BlockRemoved(r) => r.block_hashes.iter().for_each(|h| cx.namespaces.removed(dp, h.0)),
        KvEvent::AllBlocksCleared { .. } => cx.namespaces.cleared(dp),
        KvEvent::Unknown(_) => {}
    }
    Step::Continue
}

#[test]
fn ambiguous_cache_namespace_skips_children_of_a_hash_seen_under_two_namespaces() {
    let salted = |hashes: &[u64], parent: Option<u64>, salt: &str, medium: Option<&str>| {
        let mut ev = stored(hashes, parent, 16 * hashes.len() as u32, 16, medium, None, None);
        if let KvEvent::BlockStored(s) = &mut ev {
            s.cache_salt = Some(salt.into());
        }
        ev
    };
    let plain = |hashes: &[u64], parent: Option<u64>| stored(hashes, parent, 16 * hashes.len() as u32, 16, None, None, None);
    let run = |events: &[KvEvent]| {
        let mut mem = Memory::default();
        events.iter().map(|e| run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, e).code).collect::<Vec<_>>().join(", ")
    };
    // A child inherits its parent's namespace.
    assert_eq!(run(&[salted(&[1], None, "t1", None), plain(&[2], Some(1))]), "store device 1, store device 1");
    // Salted and unsalted: ambiguous.
    assert_eq!(
        run(&[salted(&[1], None, "t1", None), plain(&[1], None), plain(&[2], Some(1))]),
        "store device 1, store device 1, ambiguous_cache_namespace"
    );
    // A salted child of an ambiguous parent is fine; removing keeps ambiguity; a clear forgets.
    assert_eq!(
        run(&[salted(&[1], None, "t1", None), salted(&[1], None, "t2", None), salted(&[2], Some(1), "t1", None)]),
        "store device 1, store device 1, store device 1"
    );
    let remove = removed(&[1], None, None);
    let clear = KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: None };
    assert_eq!(
        run(&[salted(&[1], None, "t1", None), plain(&[1], None), remove, plain(&[2], Some(1))]),
        "store device 1, store device 1, remove device 1, ambiguous_cache_namespace"
    );
    assert_eq!(
        run(&[salted(&[1], None, "t1", None), plain(&[1], None), clear, plain(&[2], Some(1))]),
        "store device 1, store device 1, clear, store device 1"
    );
    // Host and Device share the table; Disk neither records nor checks.
    assert_eq!(
        run(&[salted(&[1], None, "t1", Some("CPU")), plain(&[1], None), plain(&[2], Some(1))]),
        "store host_pinned 1, store device 1, ambiguous_cache_namespace"
    );
    assert_eq!(
        run(&[salted(&[1], None, "t1", None), stored(&[1], None, 16, 16, Some("DISK"), None, None), plain(&[2], Some(1))]),
        "store device 1, store disk 1, store device 1"
    );
    let mut mem = Memory::default();
    for e in [salted(&[1], None, "t1", None), plain(&[1], None)] {
        let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &e);
    }
    let d = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &plain(&[2], Some(1)));
    assert_eq!(
        d.text,
        "no medium -> Device; no cache namespace of its own; parent 0x0000000000000001 was stored under more than \
         one namespace -> skip ambiguous_cache_namespace"
    );
    // fixed has no namespace rule.
    let mut mem = Memory::default();
    for e in [salted(&[1], None, "t1", None), plain(&[1], None)] {
        let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &e);
    }
    assert_eq!(run_with(&Policy::FIXED, 16, 0, &mut mem, &plain(&[2], Some(1))).code, "store device 1");
}

#[test]
fn own_namespace_reads_cache_salt_then_tagged_extra_keys() {
    let mut ev = stored(&[1], None, 16, 16, None, None, None);
    let KvEvent::BlockStored(s) = &mut ev else { unreachable!() };
    s.extra_key_strings = Some(vec!["sql-lora".into(), "dynamo-cache-salt:sql-lora".into(), "dynamo-cache-salt:x".into()]);
    s.lora_name = Some("sql-lora".into());
    assert_eq!(own_namespace(s), Some("sql-lora"), "the LoRA name is skipped once, then the first tagged salt");
    s.extra_key_strings = Some(vec!["dynamo-cache-salt:".into(), "mm-hash".into()]);
    assert_eq!(own_namespace(s), None);
    s.cache_salt = Some("tenant".into());
    assert_eq!(own_namespace(s), Some("tenant"));
    // A map's empty cache_salt stops the fallback; an array's does not.
    s.extra_key_strings = Some(vec!["dynamo-cache-salt:x".into()]);
    s.cache_salt = Some("".into());
    assert_eq!(own_namespace(s), None);
    s.encoding = Some(EventEncoding::Array { len: 12 });
    assert_eq!(own_namespace(s), Some("x"));
}

// ---------------------------------------------------------------------------------------------
// Step 4

pub static OFFLOAD_BLOCK_SIZE_MISMATCH: Rule = Rule {
    step: "4",
    label: "offload_block_size_mismatch",
    sentence: "A BlockStored on a tier other than Device whose block_size differs from the configured one \
               is skipped as offload_block_size_mismatch, with its own warning budget (policy fixed; legacy \
               and dynamo-1.6.1 have no such step).",
    enabled: |p| p.offload_block_size_skip,
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
    let mut mem = Memory::default();
    let gpu = stored(&[9], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
    assert_eq!(run_with(&Policy::FIXED, 1536, 0, &mut mem, &gpu).code, "store device 1");
    let cpu = stored(&[9], None, 12288, 12288, Some("cpu"), Some(3), None);
    let d = run_with(&Policy::FIXED, 1536, 0, &mut mem, &cpu);
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
               the fix; dynamo-1.6.1 checks none (such a store publishes no blocks).",
    enabled: |p| p.block_size_check != BlockSizeCheck::NeverFatal,
    check: check_block_size_mismatch,
};

fn check_block_size_mismatch(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(s) = cx.event else { return Step::Continue };
    let Some(event) = s.block_size else { return Step::Continue };
    let tier = cx.tier();
    let checked = match cx.policy.block_size_check {
        BlockSizeCheck::DeviceOnly => tier == StorageTier::Device,
        BlockSizeCheck::EveryTier => true,
        BlockSizeCheck::NeverFatal => false,
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
    for policy in [Policy::FIXED, Policy::LEGACY] {
        let d = decide(&policy, 12288, &gpu);
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
    // Nothing is fatal under dynamo-1.6.1: the store is applied with no blocks (step 7).
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 12288, &gpu).code, "store device 0 +block_size_differs");
}

// ---------------------------------------------------------------------------------------------
// Step 6

pub static SELF_REFERENCING_STORE: Rule = Rule {
    step: "6",
    label: "self_referencing_store",
    sentence: "A BlockStored whose parent is one of its own hashes (dynamo-1.6.1: or that names any hash \
               twice) is applied as a remove of nothing and flagged self_referencing_store: storing it would \
               make a block its own ancestor.",
    enabled: always,
    check: check_self_referencing_store,
};

/// A hash that repeats within `{parent} ∪ hashes`, other than the parent itself.
fn repeated_hash(s: &BlockStored) -> Option<u64> {
    let hashes = &s.block_hashes;
    if hashes.len() <= 16 {
        (1..hashes.len()).find(|&i| hashes[..i].contains(&hashes[i])).map(|i| hashes[i].0)
    } else {
        let mut seen = HashSet::with_capacity(hashes.len());
        hashes.iter().find(|h| !seen.insert(h.0)).map(|h| h.0)
    }
}

fn check_self_referencing_store(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(s) = cx.event else { return Step::Continue };
    if s.parent_block_hash.is_some_and(|p| s.block_hashes.contains(&p)) {
        cx.flags.insert(VerdictFlags::SELF_REFERENCING_STORE);
        return Step::Decide(VerdictKind::Apply(Apply::NoOpRemove));
    }
    if cx.policy.self_reference == SelfReference::AnyRepeatedHash
        && let Some(h) = repeated_hash(s)
    {
        cx.facts.parent = kvscope_wire::BlockHash(h);
        cx.flags.insert(VerdictFlags::SELF_REFERENCING_STORE);
        cx.flags.insert(VerdictFlags::HASH_REPEATED);
        return Step::Decide(VerdictKind::Apply(Apply::NoOpRemove));
    }
    Step::Continue
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
    // dynamo-1.6.1: a hash named twice too, and before the block-size check.
    let twice = stored(&[3, 3], None, 32, 16, None, None, None);
    assert_eq!(decide(&Policy::FIXED, 16, &twice).code, "store device 2");
    let d = decide(&Policy::DYNAMO_1_6_1, 16, &twice);
    assert_eq!(d.code, "self_referencing_store device");
    assert_eq!(d.text, "no medium -> Device; hash 0x0000000000000003 is named twice in the store -> no-op remove, self_referencing_store");
    let placeholder = stored(&[4], Some(4), 0, 0, Some("CPU"), None, None);
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &placeholder).code, "self_referencing_store host_pinned");
    assert_eq!(decide(&Policy::LEGACY, 16, &placeholder).code, "block_size_mismatch device +unknown_medium_fallback");
    let many: Vec<u64> = (0..40).chain([7]).collect();
    let long = stored(&many, None, 41 * 16, 16, None, None, None);
    assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &long).code, "self_referencing_store device");
}

// ---------------------------------------------------------------------------------------------
// Step 7

pub static APPLY: Rule = Rule {
    step: "7",
    label: "apply",
    sentence: "Anything left is applied on its tier: a store inserts its hashes (a conversion warning is \
               noted when token_ids does not hold blocks x block_size tokens; dynamo-1.6.1 publishes no block \
               at another block size and only the leading blocks whose tokens are all there, with one warning), \
               a remove deletes them, a clear wipes every tier of the worker and rank.",
    enabled: always,
    check: check_apply,
};

/// How many of a store's blocks Dynamo 1.6.1's `create_stored_blocks` publishes: none at another
/// block size; otherwise block `i` needs tokens up to `(i + 1) x block_size`, plus one for
/// bigram pages (whose `n` pairs are `n + 1` tokens).
fn published_blocks(s: &BlockStored, configured: u32) -> (u32, VerdictFlags) {
    let hashes = s.block_hashes.len() as u32;
    let size = s.block_size.unwrap_or(configured);
    if hashes == 0 {
        return (0, VerdictFlags::empty());
    }
    if size != configured {
        return (0, VerdictFlags::BLOCK_SIZE_DIFFERS);
    }
    if size == 0 {
        return (hashes, VerdictFlags::empty());
    }
    let (tokens, lead) = if s.token_ids.is_bigram {
        (u64::from(s.token_ids.count) + 1, 1)
    } else {
        (u64::from(s.token_ids.count), 0)
    };
    let fit = (tokens - lead) / u64::from(size);
    if fit >= u64::from(hashes) {
        (hashes, VerdictFlags::empty())
    } else {
        (fit as u32, VerdictFlags::SHORT_TOKEN_IDS)
    }
}

fn check_apply(cx: &mut EventCtx<'_>) -> Step {
    let kind = match cx.event {
        KvEvent::BlockStored(s) if cx.policy.conversion == Conversion::PublishWhatFits => {
            let (blocks, flags) = published_blocks(s, cx.configured_block_size);
            cx.flags.insert(flags);
            Apply::Store { blocks }
        }
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
    let clear = KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: None };
    let d = decide(&Policy::LEGACY, 16, &clear);
    assert_eq!((d.code.as_str(), d.text.as_str()), ("clear", "clear every tier of this worker and rank"));
}

#[test]
fn apply_under_dynamo_publishes_only_the_blocks_that_fit() {
    let dynamo = |ev: &KvEvent, bs: u32| decide(&Policy::DYNAMO_1_6_1, bs, ev);
    // Short token_ids: the leading blocks that have their tokens.
    let short = stored(&[1, 2, 3], None, 40, 16, None, None, None);
    let d = dynamo(&short, 16);
    assert_eq!(d.code, "store device 2 +short_token_ids");
    // (The budget note is the normalizer's; tests/regression.rs shows it.)
    assert!(
        d.text.starts_with(
            "no medium -> Device; block_size 16 matches, but token_ids holds 40 tokens, enough for 2 of 3 blocks -> \
             store 2 blocks on Device; warning short_token_ids "
        ),
        "{}",
        d.text
    );
    // Extra tokens are ignored.
    assert_eq!(dynamo(&stored(&[1], None, 20, 16, None, None, None), 16).code, "store device 1");
    // Another block size, any tier: no blocks.
    let placeholder = stored(&[1], None, 0, 0, Some("CPU"), None, None);
    let d = dynamo(&placeholder, 16);
    assert_eq!(d.code, "store host_pinned 0 +block_size_differs");
    assert!(d.text.contains("block_size 0 != 16: no block is published at another block size -> store 0 of 1 block on HostPinned"), "{}", d.text);
    // An empty store at another block size publishes nothing and warns about nothing.
    assert_eq!(dynamo(&stored(&[], None, 0, 8, None, None, None), 16).code, "store device 0");
    // Bigram pages: n pairs are n + 1 tokens, and each block needs one more.
    let mut pairs = stored(&[1], None, 16, 16, None, None, None);
    if let KvEvent::BlockStored(s) = &mut pairs {
        s.token_ids.is_bigram = true;
    }
    assert_eq!(dynamo(&pairs, 16).code, "store device 1");
    if let KvEvent::BlockStored(s) = &mut pairs {
        s.token_ids.count = 15;
    }
    assert_eq!(dynamo(&pairs, 16).code, "store device 0 +short_token_ids");
}

#[test]
fn rules_are_listed_once_in_evaluation_order() {
    let steps: Vec<&str> = RULES.iter().map(|r| r.step).collect();
    assert_eq!(steps, ["D", "P1a", "P1b", "0", "1", "P3", "P4", "2", "3a", "3b", "3c", "3d", "P7", "4", "5", "6", "7"]);
    // fixed and legacy still run DESIGN.md's steps in DESIGN.md's order.
    let design: Vec<&str> = steps.iter().copied().filter(|s| s.starts_with(|c: char| c.is_ascii_digit())).collect();
    assert_eq!(design, ["0", "1", "2", "3a", "3b", "3c", "3d", "4", "5", "6", "7"]);
    let mut labels: Vec<&str> = RULES.iter().map(|r| r.label).collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), RULES.len());
    for rule in RULES {
        assert!(rule.sentence.ends_with('.'), "{}", rule.label);
        assert_eq!(rule_by_label(rule.label).unwrap().1.step, rule.step);
    }
    // Each preset runs the subsequence its switches enable.
    let steps_of = |p: &Policy| RuleSet::for_policy(p).rules().map(|(_, r)| r.step).collect::<Vec<_>>();
    assert_eq!(steps_of(&Policy::FIXED), ["0", "1", "2", "3a", "3b", "3c", "3d", "4", "5", "6", "7"]);
    assert_eq!(steps_of(&Policy::LEGACY), ["0", "1", "2", "3a", "3b", "3c", "3d", "5", "6", "7"]);
    assert_eq!(
        steps_of(&Policy::DYNAMO_1_6_1),
        ["D", "P1a", "P1b", "0", "1", "P3", "P4", "2", "3a", "3b", "3c", "3d", "P7", "6", "7"]
    );
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
        KvEvent::BlockStored(Box::new(BlockStored {
            block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
            parent_block_hash: parent.map(BlockHash),
            token_ids: TokenIds { count: tokens, is_bigram: false, span: 0..0, outside_u32: false },
            block_size: Some(block_size),
            medium: medium.map(Into::into),
            group_idx,
            kv_cache_spec_kind: kind.map(Into::into),
            encoding: Some(EventEncoding::Map),
            ..Default::default()
        }))
    }

    pub fn removed(hashes: &[u64], medium: Option<&str>, group_idx: Option<u32>) -> KvEvent {
        KvEvent::BlockRemoved(Box::new(BlockRemoved {
            block_hashes: hashes.iter().map(|&h| BlockHash(h)).collect(),
            medium: medium.map(Into::into),
            group_idx,
            encoding: Some(EventEncoding::Map),
            ..Default::default()
        }))
    }

    pub fn unknown(tag: &str) -> KvEvent {
        KvEvent::Unknown(UnknownEvent { tag: tag.into(), encoding: EventEncoding::Map })
    }

    /// What a source remembers between events.
    #[derive(Debug, Default)]
    pub struct Memory {
        pub groups: GroupTable,
        pub namespaces: NamespaceTable,
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

    pub fn run_rejected(
        policy: &Policy,
        block_size: u32,
        mem: &mut Memory,
        event: &KvEvent,
        rejection: Option<Rejected>,
    ) -> Decided {
        run_full(policy, block_size, 0, mem, event, rejection.as_ref())
    }

    pub fn run_with(policy: &Policy, block_size: u32, dp_rank: u32, mem: &mut Memory, event: &KvEvent) -> Decided {
        run_full(policy, block_size, dp_rank, mem, event, None)
    }

    fn run_full(
        policy: &Policy,
        block_size: u32,
        dp_rank: u32,
        mem: &mut Memory,
        event: &KvEvent,
        rejection: Option<&Rejected>,
    ) -> Decided {
        let mut cx = EventCtx::new(event, policy, block_size, dp_rank, &mut mem.groups, &mut mem.namespaces);
        cx.rejection = rejection;
        let (rule, kind) = evaluate(&mut cx);
        let verdict = Verdict {
            source: SourceId(0),
            seq: 0,
            event_index: 0,
            event_type: event.event_type(),
            tier: crate::normalizer::verdict_tier(policy, &kind, cx.tier),
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
        run_with(policy, block_size, 0, &mut Memory::default(), event)
    }
}
