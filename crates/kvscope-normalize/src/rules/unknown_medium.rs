//! Rule P4 (`dynamo-1.6.1`): a medium in no row of the table fails closed.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::policy::UnknownMedium;
use crate::tier::TierChoice;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "P4",
    name: "unknown_medium",
    checks: "a medium in no row of the table",
    decides: "skip",
    sentence: "A store or remove whose medium is in no row of the table is skipped as unknown_medium \
               (dynamo-1.6.1 fails closed; fixed and legacy fall back to Device).",
    labels: &[LabelText {
        label: VerdictLabel::UnknownMedium,
        one: "event",
        many: "events",
        rest: "with a medium outside the table skipped",
        routine_filter: false,
    }],
    enabled: |p| p.unknown_medium == UnknownMedium::Skip,
    check: check_unknown_medium,
    passed: None,
    decided: Some(decided),
};

fn check_unknown_medium(cx: &mut EventCtx<'_>) -> Step {
    if cx.policy.unknown_medium == UnknownMedium::Skip && cx.tier.is_some_and(TierChoice::is_fallback) {
        cx.tier = None;
        cx.facts.tier_source = None;
        cx.facts.resolved_tier = None;
        Step::Decide(VerdictKind::Skip(VerdictLabel::UnknownMedium))
    } else {
        Step::Continue
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "medium {:?} is not in Dynamo 1.6.1's case-sensitive table -> skip unknown_medium", v.facts.medium)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
