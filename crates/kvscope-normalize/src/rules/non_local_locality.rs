//! Rule P3 (`dynamo-1.6.1`): blocks another host holds are not indexed here.

use std::fmt;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::small::SmallStr;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "P3",
    name: "non_local_locality",
    checks: "a locality other than LOCAL",
    decides: "skip",
    sentence: "A store or remove whose locality is REMOTE, or any string other than LOCAL, is skipped as \
               non_local_locality whatever its medium (dynamo-1.6.1 has no shared index; absent or LOCAL \
               passes).",
    labels: &[LabelText {
        label: VerdictLabel::NonLocalLocality,
        one: "event",
        many: "events",
        rest: "with a locality other than LOCAL skipped",
        routine_filter: true,
    }],
    enabled: |p| p.locality_filter,
    check: check_non_local_locality,
    passed: None,
    decided: Some(decided),
};

fn check_non_local_locality(cx: &mut EventCtx<'_>) -> Step {
    match cx.event.locality() {
        Some(l) if cx.policy.locality_filter && l != "LOCAL" => {
            cx.facts.word = SmallStr::new(l);
            // The medium was not looked at: the locality alone decides.
            cx.facts.tier_source = None;
            Step::Decide(VerdictKind::Skip(VerdictLabel::NonLocalLocality))
        }
        _ => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(s.clause()?, "locality {:?} is not \"LOCAL\" -> skip non_local_locality", v.facts.word)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

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
        assert_eq!(
            (d.code.as_str(), d.text.as_str()),
            ("non_local_locality", "locality \"REMOTE\" is not \"LOCAL\" -> skip non_local_locality")
        );
        // Even an unknown medium: locality is checked first.
        assert_eq!(with("local", "OBJ").code, "non_local_locality");
        assert_eq!(with("LOCAL", "STORAGE").code, "store disk 1");
    }
}
