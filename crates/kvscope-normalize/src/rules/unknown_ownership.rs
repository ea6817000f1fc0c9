//! Rule P1b (`dynamo-1.6.1`): an `ownership` other than absent or `kvcr` fails closed.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::small::SmallStr;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "P1b",
    name: "unknown_ownership",
    checks: "any other ownership",
    decides: "skip",
    sentence: "An event whose ownership is any other string (\"framework\", \"KVCR\") is skipped as \
               unknown_ownership (dynamo-1.6.1 fails closed on owners it does not know).",
    labels: &[LabelText {
        label: VerdictLabel::UnknownOwnership,
        one: "event",
        many: "events",
        rest: "with an unknown ownership skipped",
        routine_filter: true,
    }],
    enabled: |p| p.ownership_filter,
    check: check_unknown_ownership,
    passed: None,
    decided: Some(decided),
};

fn check_unknown_ownership(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.ownership() {
        Some(o) if cx.policy.ownership_filter => {
            cx.facts.word = SmallStr::new(o);
            Step::Decide(VerdictKind::Skip(VerdictLabel::UnknownOwnership))
        }
        _ => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "ownership {:?} is neither absent nor \"kvcr\" -> skip unknown_ownership", v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
