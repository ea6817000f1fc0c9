//! The sentence an operator reads in the event inspector, assembled from the rules' clauses.
//!
//! `medium "cpu" -> HostPinned (case-insensitive); no kind; group 3 was learned as
//! "mla_attention"; block_size 12288 != 1536 on a non-device tier -> skip
//! offload_block_size_mismatch`: first the clause of every rule that let the event through and
//! has something to say about it ([`Rule::passed`]: the medium's tier, what the group filter
//! found), in rule order, then the clause of the rule that decided ([`Rule::decided`]), joined by
//! `; `. Each clause is written in its rule's file, next to the check whose facts it reads.

use std::fmt;

use super::{RULES, Rule};
use crate::verdict::Verdict;

/// A sentence being written: hands out the formatter for the next clause, after a `; ` when a
/// clause came before.
pub struct Sentence<'a, 'b> {
    f: &'a mut fmt::Formatter<'b>,
    clauses: usize,
}

impl fmt::Debug for Sentence<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentence").field("clauses", &self.clauses).finish_non_exhaustive()
    }
}

impl<'b> Sentence<'_, 'b> {
    /// Starts the next clause.
    pub fn clause(&mut self) -> Result<&mut fmt::Formatter<'b>, fmt::Error> {
        if self.clauses > 0 {
            self.f.write_str("; ")?;
        }
        self.clauses += 1;
        Ok(self.f)
    }
}

/// The full sentence an operator reads in the event inspector (see the module docs).
impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sentence = Sentence { f, clauses: 0 };
        for rule in RULES {
            if let Some(passed) = rule.passed {
                passed(self, &mut sentence)?;
            }
        }
        let decider: &Rule = self.rule();
        match decider.decided {
            Some(decided) => decided(self, &mut sentence),
            None => Ok(()),
        }
    }
}
