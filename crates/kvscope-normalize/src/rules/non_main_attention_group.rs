//! Step 3c: an event without a kind goes where its group's stores went; a group learned
//! non-main filters it. Its clause also says when the learned kind let an event through.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::kind::KindClass;
use crate::label::VerdictLabel;
use crate::verdict::GroupCheck;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "3c",
    name: "non_main_attention_group",
    checks: "no kind, group learned non-main",
    decides: "skip",
    sentence: "An event without a kind whose group a store declared non-main (or, except under \
               dynamo-1.6.1, unknown) is skipped as non_main_attention_group: a removal in a mamba group goes \
               where its stores went.",
    labels: &[LabelText {
        label: VerdictLabel::NonMainAttentionGroup,
        one: "event",
        many: "events",
        rest: "without a kind in a non-main attention group filtered",
        routine_filter: true,
    }],
    enabled: always,
    check: check_non_main_attention_group,
    passed: Some(passed),
    decided: Some(decided),
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
                Step::Decide(VerdictKind::Skip(VerdictLabel::NonMainAttentionGroup))
            }
        }
        None => Step::Continue,
    }
}

/// An event without a kind that its group's learned main kind let through.
fn passed(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    match v.facts.group_check {
        GroupCheck::LearnedMain => write!(s.clause()?, "no kind; group {} was learned as {:?}", v.facts.group, v.facts.word),
        _ => Ok(()),
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "no kind; group {} was learned as {:?} -> skip non_main_attention_group", v.facts.group, v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
