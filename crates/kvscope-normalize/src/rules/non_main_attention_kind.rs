//! Step 3a: events of a known kind other than main attention are filtered. Its clause also says
//! what the filter found when it let an event through (a main kind, or a lower tier that bypasses it).

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::kind::KindClass;
use crate::label::VerdictLabel;
use crate::small::SmallStr;
use crate::tier::StorageTier;
use crate::verdict::GroupCheck;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "3a",
    name: "non_main_attention_kind",
    checks: "a known non-main kind (mamba, sliding_window, ...)",
    decides: "skip",
    sentence: "An event whose kind is a known kind other than full_attention, mla_attention and \
               sink_full_attention (mamba, sliding_window, ...) is skipped as non_main_attention_kind.",
    labels: &[LabelText {
        label: VerdictLabel::NonMainAttentionKind,
        one: "event",
        many: "events",
        rest: "of a non-main attention kind filtered",
        routine_filter: true,
    }],
    enabled: always,
    check: check_non_main_attention_kind,
    passed: Some(passed),
    decided: Some(decided),
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
                KindClass::KnownNonMain => Step::Decide(VerdictKind::Skip(VerdictLabel::NonMainAttentionKind)),
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

/// What the filter found for an event it let through on its own kind, or that bypassed it.
fn passed(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    match v.facts.group_check {
        GroupCheck::MainKind => write!(s.clause()?, "kind {:?} is main attention", v.facts.word),
        GroupCheck::LowerTierBypass => {
            let tier = v.facts.resolved_tier.or(v.tier).unwrap_or(StorageTier::Device);
            write!(s.clause()?, "{tier} goes straight to conversion (no group filter, no cache namespace)")
        }
        _ => Ok(()),
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "kind {:?} is not main attention -> skip non_main_attention_kind", v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
