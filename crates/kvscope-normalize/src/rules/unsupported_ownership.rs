//! Rule P1a (`dynamo-1.6.1`): events owned by KV-cache reuse (`ownership: "kvcr"`) are not indexed.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::small::SmallStr;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "P1a",
    name: "unsupported_ownership",
    checks: "ownership is \"kvcr\"",
    decides: "skip",
    sentence: "An event whose ownership is \"kvcr\" (KV-cache reuse, vLLM 0.29 on) is skipped as \
               unsupported_ownership: dynamo-1.6.1 indexes only framework-owned blocks (ownership absent).",
    labels: &[LabelText {
        label: VerdictLabel::UnsupportedOwnership,
        one: "event",
        many: "events",
        rest: "owned by KV-cache reuse (ownership \"kvcr\") skipped",
        routine_filter: true,
    }],
    enabled: |p| p.ownership_filter,
    check: check_unsupported_ownership,
    passed: None,
    decided: Some(decided),
};

fn check_unsupported_ownership(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.ownership() {
        Some(o @ "kvcr") if cx.policy.ownership_filter => {
            cx.facts.word = SmallStr::new(o);
            Step::Decide(VerdictKind::Skip(VerdictLabel::UnsupportedOwnership))
        }
        _ => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "ownership {:?} is KV-cache reuse, which this indexer does not index -> skip unsupported_ownership", v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
}
