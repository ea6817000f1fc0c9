//! The consistency counters in words: one line each, what it counts and what a non-zero value
//! means. The dashboard's tree view, its hover text and `kvscope check` read these, so the
//! sentence about a counter is written once, beside the counters themselves.

use crate::TreeCounters;

/// A consistency counter of a tier tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Consistency {
    ParentBlockNotFound,
    BlockNotFound,
    DuplicateStore,
}

impl Consistency {
    pub const ALL: [Consistency; 3] = [Consistency::ParentBlockNotFound, Consistency::BlockNotFound, Consistency::DuplicateStore];

    /// The counter's name, as the indexers that count it spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::ParentBlockNotFound => "parent_block_not_found",
            Consistency::BlockNotFound => "block_not_found",
            Consistency::DuplicateStore => "duplicate_store",
        }
    }

    /// One line for a person.
    pub fn sentence(self) -> &'static str {
        match self {
            Consistency::ParentBlockNotFound => {
                "stores whose parent block is not in this tier: normal for a viewer that joined a running \
                 engine; growing steadily means stores were lost or filed on another tier"
            }
            Consistency::BlockNotFound => {
                "removed blocks that were not in this tier: removals going to a tier their stores did not, \
                 or stores that were skipped or came before the stream was joined"
            }
            Consistency::DuplicateStore => "stores that changed nothing: every block was already in this tier",
        }
    }

    /// Its value in `counters`.
    pub fn of(self, counters: &TreeCounters) -> u64 {
        match self {
            Consistency::ParentBlockNotFound => counters.parent_block_not_found,
            Consistency::BlockNotFound => counters.block_not_found,
            Consistency::DuplicateStore => counters.duplicate_store,
        }
    }
}

impl TreeCounters {
    /// Why the blocks a tier holds differ from what was applied to it, in one line: inserted,
    /// removed, cleared and refused, so "applied on host_pinned 84" beside "0 held" explains
    /// itself.
    pub fn held_explained(&self, held: usize) -> String {
        let mut parts = vec![format!("{} blocks inserted by {} stores", self.blocks_inserted, self.stores_applied)];
        if self.removes_applied > 0 {
            parts.push(format!("{} removed by {} removals", self.blocks_removed, self.removes_applied));
        }
        if self.block_not_found > 0 {
            parts.push(format!("{} removed hashes were not held", self.block_not_found));
        }
        if self.clears > 0 {
            parts.push(format!("{} clears wiped the tier", self.clears));
        }
        if self.refused_blocks > 0 {
            parts.push(format!("{} blocks refused by the memory bound", self.refused_blocks));
        }
        format!("{held} held: {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_reads_its_own_field_and_has_a_sentence() {
        let c = TreeCounters { parent_block_not_found: 1, block_not_found: 2, duplicate_store: 3, ..Default::default() };
        let values: Vec<u64> = Consistency::ALL.iter().map(|k| k.of(&c)).collect();
        assert_eq!(values, [1, 2, 3]);
        for k in Consistency::ALL {
            assert!(!k.sentence().is_empty() && !k.sentence().ends_with('.'));
        }
    }

    #[test]
    fn held_says_where_the_applied_blocks_went() {
        let c = TreeCounters {
            stores_applied: 42,
            removes_applied: 42,
            blocks_inserted: 84,
            blocks_removed: 84,
            block_not_found: 3,
            clears: 1,
            ..Default::default()
        };
        assert_eq!(
            c.held_explained(0),
            "0 held: 84 blocks inserted by 42 stores, 84 removed by 42 removals, 3 removed hashes were not held, 1 clears wiped the tier"
        );
    }
}
