//! Step 3d: an event without a kind in a group nothing has described is filtered (group 0, a
//! single-group model, passes).

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::label::VerdictLabel;
use crate::verdict::GroupCheck;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "3d",
    name: "unlearned_group_idx",
    checks: "no kind, nothing learned, group != 0",
    decides: "skip",
    sentence: "An event without a kind in a group other than 0 that no store has described is skipped as \
               unlearned_group_idx: nothing says whether the group is main attention.",
    labels: &[LabelText {
        label: VerdictLabel::UnlearnedGroupIdx,
        one: "event",
        many: "events",
        rest: "without a kind in a group no store has described filtered",
        routine_filter: true,
    }],
    enabled: always,
    check: check_unlearned_group_idx,
    passed: None,
    decided: Some(decided),
};

fn check_unlearned_group_idx(cx: &mut EventCtx<'_>) -> Step {
    if cx.kind().is_some() || !cx.has_group() || cx.bypasses_filters() || cx.facts.group_check == GroupCheck::LearnedMain {
        return Step::Continue;
    }
    match cx.filtered_group() {
        Some(group) if group != 0 => Step::Decide(VerdictKind::Skip(VerdictLabel::UnlearnedGroupIdx)),
        _ => {
            cx.facts.group_check = GroupCheck::Unlearned;
            Step::Continue
        }
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "no kind; group {} was never described by a store -> skip unlearned_group_idx", v.facts.group)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
        assert_eq!(
            d.text,
            "medium \"GPU\" -> Device (exact match); no kind; group 128 was never described by a store -> skip unlearned_group_idx"
        );
        assert_eq!(decide(&Policy::FIXED, 16, &ev).code, "store device 1");
    }
}
