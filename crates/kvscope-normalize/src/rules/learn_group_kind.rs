//! Step 2: stores that name their kind teach the source which kind each group holds. Never
//! decides; the group filter (steps 3a-3d) reads what it learned.

use kvscope_wire::KvEvent;

use super::{EventCtx, Rule, Step, always};
use crate::policy::GroupRules;

pub static RULE: Rule = Rule {
    step: "2",
    name: "learn_group_kind",
    checks: "a store that names its kind",
    decides: "nothing: learns (dp_rank, group_idx) -> kind",
    sentence: "A BlockStored that names its kind teaches the source which kind its group holds \
               ((dp_rank, group_idx) -> kind); removes teach nothing. dynamo-1.6.1 needs both group_idx and \
               a kind, and learns nothing from Disk and External stores.",
    labels: &[],
    enabled: always,
    check: check_learn_group_kind,
    passed: None,
    decided: None,
};

fn check_learn_group_kind(cx: &mut EventCtx<'_>) -> Step {
    let KvEvent::BlockStored(_) = cx.event else { return Step::Continue };
    let Some(kind) = cx.kind() else { return Step::Continue };
    let group = match cx.policy.group_rules {
        GroupRules::Kvscope => Some(cx.group()),
        GroupRules::Dynamo161 if cx.bypasses_filters() => None,
        GroupRules::Dynamo161 => cx.meta_group,
    };
    if let Some(group) = group {
        cx.groups.learn(cx.dp_rank, group, kind);
    }
    Step::Continue
}

#[cfg(test)]
mod tests {
    use crate::rules::testkit::*;

    #[test]
    fn learn_group_kind_learns_from_stores_only() {
        let mut mem = Memory::default();
        let store = stored(&[1], None, 16, 16, Some("GPU"), Some(2), Some("mamba"));
        let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &store);
        assert_eq!(mem.groups.get(0, 2).unwrap().kind.as_str(), "mamba");
        let remove = removed(&[1], Some("GPU"), Some(5));
        let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &remove);
        assert_eq!(mem.groups.get(0, 5), None);
        assert_eq!(mem.groups.len(), 1);
    }
    #[test]
    fn learn_group_kind_under_dynamo_needs_a_group_and_skips_lower_tiers() {
        let mut mem = Memory::default();
        let no_group = stored(&[1], None, 16, 16, None, None, Some("mamba"));
        let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &no_group);
        assert!(mem.groups.is_empty(), "no group_idx: nothing learned (fixed would learn group 0)");
        let disk = stored(&[1], None, 16, 16, Some("STORAGE"), Some(3), Some("mamba"));
        let d = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &disk);
        assert_eq!(d.code, "store disk 1", "Disk bypasses the group filter");
        assert_eq!(
            d.text,
            "medium \"STORAGE\" -> Disk (exact match); Disk goes straight to conversion (no group filter, no cache \
             namespace); block_size 16 matches -> store 1 block on Disk"
        );
        assert!(mem.groups.is_empty());
        let host = stored(&[1], None, 16, 16, Some("CPU"), Some(3), Some("mla_attention"));
        let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &host);
        assert_eq!(mem.groups.get(0, 3).unwrap().kind.as_str(), "mla_attention");
    }
}
