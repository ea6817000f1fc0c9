//! The normalizer rules: one item per rule, one file per item, in evaluation order.
//!
//! A rule is a [`Rule`] in its own file, named after it (`offload_block_size_mismatch.rs`), and
//! that file holds everything about it: its step and name, what it checks and decides in a few
//! words (`kvscope rules` and the dashboard's help print them), its sentence for the docs, the
//! labels its verdicts carry with their card fragments ([`LabelText`]), its check, the clauses
//! it adds to the inspector's sentence ([`Rule::passed`], [`Rule::decided`]), the log lines it
//! words, and its unit tests. Adding a rule is one new file and one line in [`RULES`].
//!
//! [`RULES`] is the one ordered slice: the normalizer walks it for every event until a check
//! decides ([`evaluate`]), and the docs, `kvscope rules`, the JS API's `rules()` and the
//! dashboard's help list it in the same order.
//!
//! A check reads the event, the policy switches and the source's memory (learned groups, cache
//! namespaces) through [`EventCtx`], and either lets the event through ([`Step::Continue`]) or
//! decides ([`Step::Decide`]). Policy differences live inside the checks as switch reads, so every
//! policy runs the same code (see [`crate::policy`] for adding a preset). The last rule, `apply`,
//! always decides.
//!
//! Labels ([`VerdictLabel`]) are defined once in [`crate::label`]; every label is carried by
//! exactly one rule item (`store`, `remove` and `clear` by `apply`), which
//! `every_label_has_one_rule_item` checks. Dependencies point one way:
//! `label <- verdict <- rules <- normalizer`; nothing here calls the normalizer.
//!
//! # One list, three presets
//!
//! Steps `0`-`7` are those of docs/rules.md, "Normalizer rules", numbered the same way; `fixed` and
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
//! Dynamo's `convert_event`, while `fixed` and `legacy` keep docs/rules.md's order (block size,
//! then self-reference). Rejected alternative: a second ordered list for `dynamo-1.6.1`; the
//! two would repeat steps 0-3 and 6-7 with the same checks, and every later rule would have to be
//! placed twice.

mod context;
mod sentence;
#[cfg(test)]
pub(crate) mod testkit;

pub mod ambiguous_cache_namespace;
pub mod apply;
pub mod batch_decode_rejected;
pub mod block_size_mismatch;
pub mod ignored_event;
pub mod learn_group_kind;
pub mod medium_tier;
pub mod non_local_locality;
pub mod non_main_attention_group;
pub mod non_main_attention_kind;
pub mod offload_block_size_mismatch;
pub mod self_referencing_store;
pub mod unknown_kind;
pub mod unknown_medium;
pub mod unknown_ownership;
pub mod unlearned_group_idx;
pub mod unsupported_ownership;

use std::fmt;

pub use ambiguous_cache_namespace::{DYNAMO_CACHE_SALT_PREFIX, own_namespace};
pub use context::{EventCtx, Rejected, Step};
pub use sentence::Sentence;

use crate::label::VerdictLabel;
use crate::policy::Policy;
use crate::tier::{StorageTier, TierChoice};
use crate::verdict::{RuleId, Verdict, VerdictKind};

/// A clause of the inspector's sentence, written from a verdict's facts.
pub type Clause = fn(&Verdict, &mut Sentence<'_, '_>) -> fmt::Result;

/// One rule: what it is called, what it says, its check and its words.
#[derive(Debug)]
pub struct Rule {
    /// The docs/rules.md step it implements (`"4"`, `"3a"`), or the docs/dynamo-1.6.1.md row
    /// (`"P3"`) for rules only `dynamo-1.6.1` switches on.
    pub step: &'static str,
    /// The rule's name: the label of its verdicts, `apply` for the rule whose verdicts are
    /// `store`, `remove` and `clear`, or the name of a preparatory step (`medium_tier`,
    /// `learn_group_kind`) that never decides.
    pub name: &'static str,
    /// What it looks at, in a few words ("a non-Device store at another block size").
    pub checks: &'static str,
    /// What it decides when it does ("skip", "fatal", "nothing: ...").
    pub decides: &'static str,
    /// The rule in one sentence, as the docs and the JS API's rule list show it.
    pub sentence: &'static str,
    /// The labels its verdicts carry, with their card fragments; empty for preparatory steps.
    pub labels: &'static [LabelText],
    /// Whether a policy runs this rule at all. A check whose switch is off would let every event
    /// through anyway; [`RuleSet`] leaves it out so the normalizer does not call it per event.
    pub enabled: fn(&Policy) -> bool,
    /// Lets the event through or decides.
    pub check: fn(&mut EventCtx<'_>) -> Step,
    /// The clause it adds to the sentence of an event it let through, when it has one (the
    /// medium's tier, what the group filter found); it writes nothing when it has nothing to say.
    pub passed: Option<Clause>,
    /// The deciding clause (`block_size 12288 != 1536 on a non-device tier -> skip
    /// offload_block_size_mismatch`); `None` for preparatory steps, which never decide.
    pub decided: Option<Clause>,
}

/// A label as a rule's verdicts carry it, and its card fragment: `one`/`many` is the noun
/// counted, `rest` what happened, so [`VerdictLabel::summary`]`(37)` reads "37 stores skipped on
/// an offload tier at another block size".
#[derive(Debug)]
pub struct LabelText {
    pub label: VerdictLabel,
    pub one: &'static str,
    pub many: &'static str,
    pub rest: &'static str,
    /// A skip that is routine filtering (another attention kind, another owner or host, an
    /// unknown tag), as opposed to one that leaves a tier's view incomplete
    /// (`offload_block_size_mismatch`, `unknown_medium`, `batch_decode_rejected`,
    /// `ambiguous_cache_namespace`). The dashboard draws routine filters below the others and
    /// leaves their tiers out of the cards.
    pub routine_filter: bool,
}

/// Rules every preset runs.
fn always(_: &Policy) -> bool {
    true
}

/// The rules in evaluation order, which is also their documentation order.
pub static RULES: [&Rule; 17] = [
    &batch_decode_rejected::RULE,
    &unsupported_ownership::RULE,
    &unknown_ownership::RULE,
    &medium_tier::RULE,
    &ignored_event::RULE,
    &non_local_locality::RULE,
    &unknown_medium::RULE,
    &learn_group_kind::RULE,
    &non_main_attention_kind::RULE,
    &unknown_kind::RULE,
    &non_main_attention_group::RULE,
    &unlearned_group_idx::RULE,
    &ambiguous_cache_namespace::RULE,
    &offload_block_size_mismatch::RULE,
    &block_size_mismatch::RULE,
    &self_referencing_store::RULE,
    &apply::RULE,
];

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

/// The tier a verdict names: the event's, except for a skip under a policy whose skips carry
/// none ([`Policy::skips_carry_tier`]).
pub(crate) fn verdict_tier(policy: &Policy, kind: &VerdictKind, choice: Option<TierChoice>) -> Option<StorageTier> {
    match kind {
        VerdictKind::Skip(_) if !policy.skips_carry_tier => None,
        _ => choice.map(|t| t.tier),
    }
}

/// The rule with this name, if any.
pub fn rule_by_name(name: &str) -> Option<(RuleId, &'static Rule)> {
    RULES.iter().enumerate().find(|(_, r)| r.name == name).map(|(i, r)| (RuleId(i as u8), *r))
}

/// The rule item that carries `label`, and the label's words there. Every label has exactly one
/// (`every_label_has_one_rule_item`).
pub fn label_text(label: VerdictLabel) -> (&'static Rule, &'static LabelText) {
    RULES
        .iter()
        .find_map(|r| r.labels.iter().find(|t| t.label == label).map(|t| (*r, t)))
        .unwrap_or_else(|| panic!("label {label} has no rule item; add it to the labels of the rule that decides it"))
}

/// Appended to the last line a warning budget prints.
const COUNTED_FROM_NOW: &str = "; further warnings of this kind are counted, not logged";

impl RuleId {
    pub fn rule(self) -> &'static Rule {
        RULES[self.0 as usize]
    }
}

impl Verdict {
    /// The rule that decided.
    pub fn rule(&self) -> &'static Rule {
        self.rule.rule()
    }
}

impl VerdictLabel {
    /// The card fragment that reads after a count: `summary(37)` is "37 stores skipped on an
    /// offload tier at another block size". Worded by the rule that decides the label.
    pub fn summary(self, count: u64) -> String {
        let (_, t) = label_text(self);
        format!("{count} {} {}", if count == 1 { t.one } else { t.many }, t.rest)
    }

    /// True for skips that are routine filtering ([`LabelText::routine_filter`]).
    pub fn is_routine_filter(self) -> bool {
        label_text(self).1.routine_filter
    }

    /// The rule whose verdicts carry this label.
    pub fn rule(self) -> &'static Rule {
        label_text(self).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_listed_once_in_evaluation_order() {
        let steps: Vec<&str> = RULES.iter().map(|r| r.step).collect();
        assert_eq!(steps, ["D", "P1a", "P1b", "0", "1", "P3", "P4", "2", "3a", "3b", "3c", "3d", "P7", "4", "5", "6", "7"]);
        // fixed and legacy still run docs/rules.md's steps in docs/rules.md's order.
        let design: Vec<&str> = steps.iter().copied().filter(|s| s.starts_with(|c: char| c.is_ascii_digit())).collect();
        assert_eq!(design, ["0", "1", "2", "3a", "3b", "3c", "3d", "4", "5", "6", "7"]);
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
        for rule in RULES {
            assert!(rule.sentence.ends_with('.'), "{}", rule.name);
            assert!(!rule.checks.is_empty() && !rule.checks.ends_with('.'), "{}", rule.name);
            assert!(!rule.decides.is_empty() && !rule.decides.ends_with('.'), "{}", rule.name);
            assert_eq!(rule_by_name(rule.name).unwrap().1.step, rule.step);
        }
        // Each preset runs the subsequence its switches enable.
        let steps_of = |p: &Policy| RuleSet::for_policy(p).rules().map(|(_, r)| r.step).collect::<Vec<_>>();
        assert_eq!(steps_of(&Policy::FIXED), ["0", "1", "2", "3a", "3b", "3c", "3d", "4", "5", "6", "7"]);
        assert_eq!(steps_of(&Policy::LEGACY), ["0", "1", "2", "3a", "3b", "3c", "3d", "5", "6", "7"]);
        assert_eq!(steps_of(&Policy::DYNAMO_1_6_1), ["D", "P1a", "P1b", "0", "1", "P3", "P4", "2", "3a", "3b", "3c", "3d", "P7", "6", "7"]);
    }

    /// One rule, one item: a label exists in the enum only if exactly one rule item carries it,
    /// and a rule decides only if it carries labels.
    #[test]
    fn every_label_has_one_rule_item() {
        for label in VerdictLabel::ALL {
            let carriers: Vec<&str> = RULES.iter().filter(|r| r.labels.iter().any(|t| t.label == label)).map(|r| r.name).collect();
            assert_eq!(carriers.len(), 1, "{label} is carried by {carriers:?}");
        }
        let carried: usize = RULES.iter().map(|r| r.labels.len()).sum();
        assert_eq!(carried, VerdictLabel::COUNT, "a rule item lists a label twice");
        for rule in RULES {
            assert_eq!(rule.decided.is_some(), !rule.labels.is_empty(), "{}: decides iff it has labels", rule.name);
            for t in rule.labels {
                // A rule named after a label carries that label; `apply` carries the applies.
                if rule.name != "apply" {
                    assert_eq!(t.label.as_str(), rule.name);
                } else {
                    assert_eq!(t.label.outcome(), crate::label::Outcome::Apply);
                }
                assert!(!t.routine_filter || t.label.outcome() == crate::label::Outcome::Skip, "{}", t.label);
            }
        }
    }

    #[test]
    fn summaries_read_after_a_count() {
        assert_eq!(VerdictLabel::OffloadBlockSizeMismatch.summary(37), "37 stores skipped on an offload tier at another block size");
        assert_eq!(VerdictLabel::OffloadBlockSizeMismatch.summary(1), "1 store skipped on an offload tier at another block size");
        assert_eq!(VerdictLabel::NonMainAttentionKind.summary(2), "2 events of a non-main attention kind filtered");
        for label in VerdictLabel::ALL {
            assert!(label.summary(3).starts_with("3 "), "{label}");
            assert_eq!(VerdictLabel::from_str_label(label.as_str()), Some(label));
        }
    }
}
