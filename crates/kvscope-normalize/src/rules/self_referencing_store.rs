//! Step 6: a store that names itself as its own ancestor is applied as a remove of nothing. Also
//! words the line Dynamo 1.6.1 prints for it every time.

use std::fmt;

use kvscope_wire::KvEvent;

use super::{EventCtx, LabelText, Rule, Sentence, Step, always};
use crate::label::VerdictLabel;
use std::collections::HashSet;

use kvscope_wire::BlockStored;

use crate::policy::SelfReference;
use crate::verdict::{Apply, VerdictFlags};
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "6",
    name: "self_referencing_store",
    checks: "a parent among its own hashes (dynamo-1.6.1: any repeated hash)",
    decides: "apply as a no-op remove",
    sentence: "A BlockStored whose parent is one of its own hashes (dynamo-1.6.1: or that names any hash \
               twice) is applied as a remove of nothing and flagged self_referencing_store: storing it would \
               make a block its own ancestor.",
    labels: &[LabelText {
        label: VerdictLabel::SelfReferencingStore,
        one: "store",
        many: "stores",
        rest: "naming its own hash as parent, applied as a no-op remove",
        routine_filter: false,
    }],
    enabled: always,
    check: check_self_referencing_store,
    passed: None,
    decided: Some(decided),
};

/// A hash that repeats within `{parent} ∪ hashes`, other than the parent itself.
fn repeated_hash(s: &BlockStored) -> Option<u64> {
    let hashes = &s.block_hashes;
    if hashes.len() <= 16 {
        (1..hashes.len()).find(|&i| hashes[..i].contains(&hashes[i])).map(|i| hashes[i].0)
    } else {
        let mut seen = HashSet::with_capacity(hashes.len());
        hashes.iter().find(|h| !seen.insert(h.0)).map(|h| h.0)
    }
}

fn check_self_referencing_store(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(s) = cx.event else { return Step::Continue };
    if s.parent_block_hash.is_some_and(|p| s.block_hashes.contains(&p)) {
        cx.flags.insert(VerdictFlags::SELF_REFERENCING_STORE);
        return Step::Decide(VerdictKind::Apply(Apply::NoOpRemove));
    }
    if cx.policy.self_reference == SelfReference::AnyRepeatedHash
        && let Some(h) = repeated_hash(s)
    {
        cx.facts.parent = kvscope_wire::BlockHash(h);
        cx.flags.insert(VerdictFlags::SELF_REFERENCING_STORE);
        cx.flags.insert(VerdictFlags::HASH_REPEATED);
        return Step::Decide(VerdictKind::Apply(Apply::NoOpRemove));
    }
    Step::Continue
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    if v.flags.contains(VerdictFlags::HASH_REPEATED) {
        write!(s.clause()?, "hash {:?} is named twice in the store -> no-op remove, self_referencing_store", v.facts.parent)
    } else {
        write!(s.clause()?, "parent {:?} is one of the store's own hashes -> no-op remove, self_referencing_store", v.facts.parent)
    }
}

/// The line Dynamo 1.6.1 prints, every time, for a self-referencing store.
pub(crate) fn dynamo_notice(key: impl fmt::Display, seq: u64, event_index: u32) -> String {
    format!(
        "{key} seq {seq} event {event_index}: Self-referencing block detected: duplicate hash in store event; dropping \
         event_id={seq}"
    )
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn self_referencing_store_becomes_a_no_op_remove() {
        let ev = stored(&[5, 6], Some(6), 32, 16, None, None, None);
        let d = decide(&Policy::FIXED, 16, &ev);
        assert_eq!(d.code, "self_referencing_store device");
        assert_eq!(
            d.text,
            "no medium -> Device; parent 0x0000000000000006 is one of the store's own hashes -> no-op remove, \
             self_referencing_store"
        );
        // dynamo-1.6.1: a hash named twice too, and before the block-size check.
        let twice = stored(&[3, 3], None, 32, 16, None, None, None);
        assert_eq!(decide(&Policy::FIXED, 16, &twice).code, "store device 2");
        let d = decide(&Policy::DYNAMO_1_6_1, 16, &twice);
        assert_eq!(d.code, "self_referencing_store device");
        assert_eq!(
            d.text,
            "no medium -> Device; hash 0x0000000000000003 is named twice in the store -> no-op remove, self_referencing_store"
        );
        let placeholder = stored(&[4], Some(4), 0, 0, Some("CPU"), None, None);
        assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &placeholder).code, "self_referencing_store host_pinned");
        assert_eq!(decide(&Policy::LEGACY, 16, &placeholder).code, "block_size_mismatch device +unknown_medium_fallback");
        let many: Vec<u64> = (0..40).chain([7]).collect();
        let long = stored(&many, None, 41 * 16, 16, None, None, None);
        assert_eq!(decide(&Policy::DYNAMO_1_6_1, 16, &long).code, "self_referencing_store device");
    }
}
