//! Step 0: the medium decides the tier. Never decides a verdict; its clause opens the inspector's
//! sentence (`medium "cpu" -> HostPinned (case-insensitive)`).

use std::fmt;

use super::{EventCtx, Rule, Sentence, Step, always};
use crate::policy::UnknownMedium;
use crate::tier::{StorageTier, TierSource, resolve_tier};
use crate::verdict::Verdict;
use crate::verdict::VerdictFlags;

pub static RULE: Rule = Rule {
    step: "0",
    name: "medium_tier",
    checks: "the medium of a store or remove",
    decides: "nothing: maps the medium to a tier",
    sentence: "A store or remove goes to the tier its medium names (policy fixed: ASCII case-insensitive, \
               CPU and STORAGE included; legacy: exact, without them; dynamo-1.6.1: exact, with them); no \
               medium or \"\" is Device, and a medium that names no tier falls back to Device, flagged \
               unknown_medium_fallback (dynamo-1.6.1 skips it instead: unknown_medium).",
    labels: &[],
    enabled: always,
    check: check_medium_tier,
    passed: Some(passed),
    decided: None,
};

fn check_medium_tier(cx: &mut EventCtx<'_>) -> Step {
    if cx.has_group() {
        let choice = resolve_tier(cx.event.medium(), cx.policy);
        cx.tier = Some(choice);
        cx.facts.tier_source = Some(choice.source);
        cx.facts.resolved_tier = Some(choice.tier);
        if choice.is_fallback() && cx.policy.unknown_medium == UnknownMedium::FallBackToDevice {
            cx.flags.insert(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK);
        }
    }
    Step::Continue
}

/// `medium "cpu" -> HostPinned (case-insensitive)`, for events with a tier.
fn passed(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    let Some(source) = v.facts.tier_source else { return Ok(()) };
    let f = s.clause()?;
    let tier = v.facts.resolved_tier.or(v.tier).unwrap_or(StorageTier::Device);
    let medium = v.facts.medium;
    match source {
        TierSource::Absent => write!(f, "no medium -> {tier}"),
        TierSource::Empty => write!(f, "medium \"\" -> {tier}"),
        TierSource::Table => write!(f, "medium {medium:?} -> {tier} ({})", v.facts.medium_match.describe()),
        TierSource::Fallback => write!(
            f,
            "medium {medium:?} matches no tier ({}) -> falls back to {tier}, unknown_medium_fallback",
            v.facts.medium_match.describe()
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn medium_tier_files_lowercase_cpu_on_host_under_fixed_and_on_device_under_legacy() {
        let cpu = stored(&[7], None, 16, 16, Some("cpu"), None, None);
        let fixed = decide(&Policy::FIXED, 16, &cpu);
        assert_eq!(fixed.tier, Some(StorageTier::HostPinned));
        assert!(!fixed.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK));
        let legacy = decide(&Policy::LEGACY, 16, &cpu);
        assert_eq!(legacy.tier, Some(StorageTier::Device));
        assert!(legacy.flags.contains(VerdictFlags::UNKNOWN_MEDIUM_FALLBACK));
        assert_eq!(legacy.label, "store");
        // dynamo-1.6.1 matches exactly but knows CPU.
        let upper = stored(&[7], None, 16, 16, Some("CPU"), None, None);
        let d = decide(&Policy::DYNAMO_1_6_1, 16, &upper);
        assert_eq!(d.code, "store host_pinned 1");
        assert_eq!(d.text, "medium \"CPU\" -> HostPinned (exact match); block_size 16 matches -> store 1 block on HostPinned");
    }
}
