//! Step 1: an event tag the decoder does not know is counted and skipped, never fatal.

use std::fmt;

use kvscope_wire::KvEvent;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::label::VerdictLabel;
use crate::small::SmallStr;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "1",
    name: "ignored_event",
    checks: "an unknown tag (dynamo-1.6.1: the tag Ignored)",
    decides: "skip",
    sentence: "An event whose tag the decoder does not know is skipped as ignored_event; it is counted, \
               never fatal (under dynamo-1.6.1 only the tag Ignored gets here: any other unknown tag loses \
               its batch).",
    labels: &[LabelText {
        label: VerdictLabel::IgnoredEvent,
        one: "event",
        many: "events",
        rest: "with an unknown tag ignored",
        routine_filter: true,
    }],
    enabled: always,
    check: check_ignored_event,
    passed: None,
    decided: Some(decided),
};

fn check_ignored_event(cx: &mut EventCtx<'_>) -> Step {
    match cx.event {
        KvEvent::Unknown(u) => {
            cx.facts.word = SmallStr::new(&u.tag);
            Step::Decide(VerdictKind::Skip(VerdictLabel::IgnoredEvent))
        }
        _ => Step::Continue,
    }
}

pub(super) fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "unknown event tag {:?} -> skip ignored_event", v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn ignored_event_skips_unknown_tags_under_every_policy() {
        let ev = unknown("KVCacheResized");
        for policy in Policy::PRESETS {
            let d = decide(policy, 16, &ev);
            assert_eq!((d.rule, d.label, d.tier), ("ignored_event", "ignored_event", None));
            assert_eq!(d.text, "unknown event tag \"KVCacheResized\" -> skip ignored_event");
        }
    }
}
