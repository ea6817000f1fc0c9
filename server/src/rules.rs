//! `kvscope rules`: the rules a policy runs, in evaluation order, printed from the rule items of
//! `kvscope-normalize` (the same items the normalizer runs and the dashboard's help lists).

use std::fmt::Write;

use kvscope_normalize::{Policy, RuleSet};

/// The table `kvscope rules --policy P` prints: a heading, then one row per rule the policy
/// runs: step, rule, what it checks, what it decides.
pub fn table(policy: &Policy) -> String {
    let rules: Vec<_> = RuleSet::for_policy(policy).rules().map(|(_, r)| r).collect();
    let name_width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let checks_width = rules.iter().map(|r| r.checks.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "policy {}: {} rules, in evaluation order ({})", policy.name, rules.len(), policy.about);
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<4}  {:<name_width$}  {:<checks_width$}  decides", "step", "rule", "checks");
    for r in &rules {
        let _ = writeln!(out, "{:<4}  {:<name_width$}  {:<checks_width$}  {}", r.step, r.name, r.checks, r.decides);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvscope_normalize::RULES;

    /// Every rule a policy runs is listed, in order, with its words; together the presets list
    /// every rule item.
    #[test]
    fn rules_lists_every_rule_of_the_policy_in_order() {
        let mut listed = std::collections::BTreeSet::new();
        for policy in Policy::PRESETS {
            let text = table(policy);
            let rows: Vec<&str> = text.lines().skip(3).collect();
            let set: Vec<_> = RuleSet::for_policy(policy).rules().map(|(_, r)| r).collect();
            assert_eq!(rows.len(), set.len(), "{text}");
            for (row, rule) in rows.iter().zip(&set) {
                let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
                assert_eq!(cells, [rule.step, rule.name, rule.checks, rule.decides], "{row}");
                listed.insert(rule.name);
            }
        }
        assert_eq!(listed.len(), RULES.len(), "a rule item no preset runs: {listed:?}");
    }
}
