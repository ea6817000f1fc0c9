//! Step 3b: a cache kind nobody listed is filtered until someone says what it is. Also words the
//! line Dynamo 1.6.1 prints for every event with such a kind.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::kind::KindClass;
use crate::label::VerdictLabel;
use crate::policy::GroupRules;
use crate::verdict::GroupCheck;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "3b",
    name: "unknown_kind",
    checks: "a kind nobody listed (dynamo-1.6.1: also a group learned with one)",
    decides: "skip",
    sentence: "An event whose kind is a string this tool does not know is skipped as unknown_kind: an \
               engine release added a kind, and its blocks are not indexed until someone says what it is \
               (dynamo-1.6.1 also skips an event without a kind whose group was learned with such a kind).",
    labels: &[LabelText {
        label: VerdictLabel::UnknownKind,
        one: "event",
        many: "events",
        rest: "of an unknown cache kind filtered",
        routine_filter: true,
    }],
    enabled: always,
    check: check_unknown_kind,
    passed: None,
    decided: Some(decided),
};

fn check_unknown_kind(cx: &mut EventCtx<'_>) -> Step {
    if cx.bypasses_filters() {
        return Step::Continue;
    }
    match cx.kind_class() {
        Some(KindClass::Unknown) => Step::Decide(VerdictKind::Skip(VerdictLabel::UnknownKind)),
        Some(_) => Step::Continue,
        None if cx.policy.group_rules == GroupRules::Dynamo161 && cx.has_group() => {
            let Some(group) = cx.filtered_group() else { return Step::Continue };
            match cx.groups.get(cx.dp_rank, group) {
                Some(learned) if learned.class == KindClass::Unknown => {
                    cx.facts.word = learned.kind;
                    cx.facts.group_check = GroupCheck::LearnedUnknown;
                    Step::Decide(VerdictKind::Skip(VerdictLabel::UnknownKind))
                }
                _ => Step::Continue,
            }
        }
        None => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    let facts = &v.facts;
    if facts.group_check == GroupCheck::LearnedUnknown {
        write!(s.clause()?, "no kind; group {} was learned as {:?}, not a known cache kind -> skip unknown_kind", facts.group, facts.word)
    } else {
        write!(s.clause()?, "kind {:?} is not a known cache kind -> skip unknown_kind", facts.word)
    }
}

/// The line Dynamo 1.6.1 prints, every time, when it decodes an event with an unknown kind.
pub(crate) fn dynamo_notice(key: impl fmt::Display, seq: u64, event_index: u32, kind: &str) -> String {
    format!(
        "{key} seq {seq} event {event_index}: Unknown KV cache spec kind; treating KV event as non-main \
         kv_cache_spec_kind={kind:?}"
    )
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
