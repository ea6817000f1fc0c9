//! Rule D (`dynamo-1.6.1`): every event of a batch the policy's decoder rejects is lost with it.
//!
//! The batch check itself is [`crate::batch`]; this rule turns its finding into one verdict per
//! event, explains it, and words the line Dynamo prints for the batch.

use std::fmt;

use super::{EventCtx, LabelText, Rejected, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::policy::BatchCheck;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "D",
    name: "batch_decode_rejected",
    checks: "the batch is one Dynamo's decoder rejects",
    decides: "skip every event of the batch",
    sentence: "Every event of a batch the policy's decoder rejects is lost with it (batch_decode_rejected): \
               under dynamo-1.6.1, a batch that is not a 3-element array, holds a bin hash, a token id outside \
               u32 or a tag other than BlockStored, BlockRemoved, AllBlocksCleared and Ignored.",
    labels: &[LabelText {
        label: VerdictLabel::BatchDecodeRejected,
        one: "event",
        many: "events",
        rest: "lost with batches the decoder rejects",
        routine_filter: false,
    }],
    enabled: |p| p.batch_check != BatchCheck::None,
    check: check_batch_decode_rejected,
    passed: None,
    decided: Some(decided),
};

fn check_batch_decode_rejected(cx: &mut EventCtx<'_>) -> Step {
    match cx.rejection {
        Some(r) => {
            cx.facts.rejection = Some(r.rejection);
            cx.facts.word = r.tag;
            cx.facts.parent = kvscope_wire::BlockHash(r.value as u64);
            Step::Decide(VerdictKind::Skip(VerdictLabel::BatchDecodeRejected))
        }
        None => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    let facts = &v.facts;
    match facts.rejection {
        Some(r) => write!(s.clause()?, "{} -> skip batch_decode_rejected", r.sentence(&facts.word, facts.parent.0 as i64)),
        None => s.clause()?.write_str("the batch was rejected -> skip batch_decode_rejected"),
    }
}

/// The line Dynamo 1.6.1 prints for a batch its decoder rejects, every time.
pub(crate) fn notice(key: impl fmt::Display, seq: u64, r: &Rejected) -> String {
    format!("{key} seq {seq}: Failed to decode KvEventBatch: {}", r.rejection.message(&r.tag, r.value))
}

#[cfg(test)]
mod tests {
    use crate::batch::BatchRejection;
    use crate::rules::Rejected;
    use crate::rules::testkit::*;

    #[test]
    fn batch_decode_rejected_loses_every_event_of_the_batch_whatever_it_is() {
        use crate::batch::RejectReason;
        let gpu = stored(&[1], None, 16, 16, Some("GPU"), None, None);
        let rejection = Rejected { rejection: BatchRejection::new(RejectReason::BinHash, Some(1)), tag: SmallStr::EMPTY, value: 0 };
        let mut mem = Memory::default();
        let d = run_rejected(&Policy::DYNAMO_1_6_1, 16, &mut mem, &gpu, Some(rejection));
        assert_eq!((d.rule, d.code.as_str(), d.tier), ("batch_decode_rejected", "batch_decode_rejected", None));
        assert_eq!(
            d.text,
            "events[1] has a bin (bytes) block hash; Dynamo 1.6.1's decoder rejects the whole batch (\"data did not \
             match any variant of untagged enum BlockHashValue\"), and every event of it is lost -> skip \
             batch_decode_rejected"
        );
        // Nothing is learned from a lost batch.
        let mamba = stored(&[1], None, 16, 16, None, Some(2), Some("mamba"));
        let _ = run_rejected(&Policy::DYNAMO_1_6_1, 16, &mut mem, &mamba, Some(rejection));
        assert!(mem.groups.is_empty());
        // Without a rejection the rule lets everything through.
        assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &gpu).code, "store device 1");
    }
}
