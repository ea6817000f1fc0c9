//! Step 5: a non-empty store at another block size, on a tier the policy checks, stops the
//! indexer. Also words the fatal log line and what to do about it ([`Verdict::fatal_hint`]).

use std::fmt;

use kvscope_wire::KvEvent;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use crate::policy::BlockSizeCheck;
use crate::tier::StorageTier;
use crate::verdict::{Fatal, VerdictFlags};
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "5",
    name: "block_size_mismatch",
    checks: "a non-empty Device store at another block size (legacy: any tier)",
    decides: "fatal",
    sentence: "A non-empty BlockStored on the Device tier whose block_size differs from the configured one \
               is fatal (block_size_mismatch); policy legacy checks every tier, as the indexer did before \
               the fix; dynamo-1.6.1 checks none (such a store publishes no blocks).",
    labels: &[LabelText {
        label: VerdictLabel::BlockSizeMismatch,
        one: "store",
        many: "stores",
        rest: "fatal: block size differs from the configured one",
        routine_filter: false,
    }],
    enabled: |p| p.block_size_check != BlockSizeCheck::NeverFatal,
    check: check_block_size_mismatch,
    passed: None,
    decided: Some(decided),
};

fn check_block_size_mismatch(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(s) = cx.event else { return Step::Continue };
    let Some(event) = s.block_size else { return Step::Continue };
    let tier = cx.tier();
    let checked = match cx.policy.block_size_check {
        BlockSizeCheck::DeviceOnly => tier == StorageTier::Device,
        BlockSizeCheck::EveryTier => true,
        BlockSizeCheck::NeverFatal => false,
    };
    if checked && !s.block_hashes.is_empty() && event != cx.configured_block_size {
        Step::Decide(VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured: cx.configured_block_size, tier }))
    } else {
        Step::Continue
    }
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    let VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured, tier }) = v.kind else { return Ok(()) };
    if tier == StorageTier::Device {
        write!(s.clause()?, "block_size {event} != {configured} on the Device tier -> fatal block_size_mismatch")
    } else {
        write!(s.clause()?, "block_size {event} != {configured} on {tier}, and this policy checks every tier -> fatal block_size_mismatch")
    }
}

impl Verdict {
    /// What to do about a fatal verdict, or `None`: the fix differs with why the store was
    /// checked (a medium that fell back to Device, an offload tier, or the Device tier itself).
    pub fn fatal_hint(&self) -> Option<String> {
        let VerdictKind::Fatal(Fatal::BlockSizeMismatch { event, configured, tier }) = self.kind else {
            return None;
        };
        Some(if self.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK) {
            let medium = self.facts.medium;
            format!(
                "medium {medium:?} matched no tier and was filed on Device; --policy fixed maps offload media \
                 case-insensitively and skips offload stores at another block size"
            )
        } else if tier != StorageTier::Device {
            format!(
                "the store is on {tier}, not Device; --policy fixed skips offload stores whose block_size is not \
                 {configured}"
            )
        } else {
            format!("Device stores have block_size {event}, not {configured}; try --block-size {event}")
        })
    }
}

/// The error line of a source's first fatal verdict: where, the sentence, and the hint.
pub(crate) fn fatal_line(key: impl fmt::Display, v: &Verdict) -> String {
    let hint = v.fatal_hint().unwrap_or_default();
    format!("{key} seq {} event {}: {v}; {hint}", v.seq, v.event_index)
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn block_size_mismatch_is_fatal_on_device_and_under_legacy_on_every_tier() {
        let gpu = stored(&[1], None, 1536, 1536, Some("GPU"), Some(3), Some("mla_attention"));
        for policy in [Policy::FIXED, Policy::LEGACY] {
            let d = decide(&policy, 12288, &gpu);
            assert_eq!(d.code, "block_size_mismatch device");
            assert_eq!(
                d.text,
                format!(
                    "medium \"GPU\" -> Device ({}); kind \"mla_attention\" is main attention; block_size 1536 != 12288 \
                     on the Device tier -> fatal block_size_mismatch",
                    policy.medium_match.describe()
                )
            );
        }
        let pinned = stored(&[1], None, 256, 256, Some("CPU_PINNED"), None, None);
        let d = decide(&Policy::LEGACY, 16, &pinned);
        assert_eq!(d.code, "block_size_mismatch host_pinned");
        assert!(
            d.text.ends_with("block_size 256 != 16 on HostPinned, and this policy checks every tier -> fatal block_size_mismatch"),
            "{}",
            d.text
        );
        // Empty stores are never fatal.
        let empty = stored(&[], None, 0, 8, Some("GPU"), None, None);
        assert_eq!(decide(&Policy::FIXED, 16, &empty).code, "store device 0");
        // Nothing is fatal under dynamo-1.6.1: the store is applied with no blocks (step 7).
        assert_eq!(decide(&Policy::DYNAMO_1_6_1, 12288, &gpu).code, "store device 0 +block_size_differs");
    }
}
