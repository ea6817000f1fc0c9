//! Step 4 (`fixed`): a store on an offload tier at another block size is skipped, with its own
//! warning budget. Also words that budget's log line.

use std::fmt;

use kvscope_wire::KvEvent;

use super::COUNTED_FROM_NOW;
use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::tier::StorageTier;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "4",
    name: "offload_block_size_mismatch",
    checks: "a non-Device store at another block size",
    decides: "skip",
    sentence: "A BlockStored on a tier other than Device whose block_size differs from the configured one \
               is skipped as offload_block_size_mismatch, with its own warning budget (policy fixed; legacy \
               and dynamo-1.6.1 have no such step).",
    labels: &[LabelText {
        label: VerdictLabel::OffloadBlockSizeMismatch,
        one: "store",
        many: "stores",
        rest: "skipped on an offload tier at another block size",
        routine_filter: false,
    }],
    enabled: |p| p.offload_block_size_skip,
    check: check_offload_block_size_mismatch,
    passed: None,
    decided: Some(decided),
};

fn check_offload_block_size_mismatch(cx: &mut EventCtx<'_>) -> Step {
    if !cx.policy.offload_block_size_skip {
        return Step::Continue;
    }
    match cx.event {
        KvEvent::BlockStored(s) if cx.tier() != StorageTier::Device && s.block_size.is_some_and(|b| b != cx.configured_block_size) => {
            Step::Decide(VerdictKind::Skip(VerdictLabel::OffloadBlockSizeMismatch))
        }
        _ => Step::Continue,
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(
        s.clause()?,
        "block_size {} != {} on a non-device tier -> skip offload_block_size_mismatch",
        v.facts.event_block_size.unwrap_or(0),
        v.facts.configured_block_size
    )
}

/// The offload budget's warning line; `last` when the budget is spent after it.
pub(crate) fn warning_line(key: impl fmt::Display, v: &Verdict, last: bool) -> String {
    let f = &v.facts;
    format!(
        "{key} seq {} event {}: skipping BlockStored on {} (medium {:?}): block_size {} != {} \
         (offload_block_size_mismatch){}",
        v.seq,
        v.event_index,
        v.tier.unwrap_or(StorageTier::Device),
        f.medium,
        f.event_block_size.unwrap_or(0),
        f.configured_block_size,
        if last { COUNTED_FROM_NOW } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn offload_block_size_mismatch_skips_a_cpu_store_at_another_block_size() {
        // Kimi-K3: group 3 is declared mla_attention by its GPU stores; the cpu store names the
        // group but no kind.
        let mut mem = Memory::default();
        let gpu = stored(&[9], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
        assert_eq!(run_with(&Policy::FIXED, 1536, 0, &mut mem, &gpu).code, "store device 1");
        let cpu = stored(&[9], None, 12288, 12288, Some("cpu"), Some(3), None);
        let d = run_with(&Policy::FIXED, 1536, 0, &mut mem, &cpu);
        assert_eq!(d.code, "offload_block_size_mismatch host_pinned");
        assert_eq!(
            d.text,
            "medium \"cpu\" -> HostPinned (case-insensitive); no kind; group 3 was learned as \"mla_attention\"; \
             block_size 12288 != 1536 on a non-device tier -> skip offload_block_size_mismatch"
        );
        let ev = stored(&[9], None, 12288, 12288, Some("cpu"), None, None);
        // Not under legacy: there, step 5 sees it.
        assert_eq!(decide(&Policy::LEGACY, 1536, &ev).rule, "block_size_mismatch");
        // At the configured size it is stored.
        assert_eq!(decide(&Policy::FIXED, 12288, &ev).code, "store host_pinned 1");
    }
}
