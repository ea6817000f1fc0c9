//! What a source's stores have said about its KV-cache groups: `(dp_rank, group_idx) -> kind`.
//!
//! Only `BlockStored` carries `kv_cache_spec_kind`; a `BlockRemoved` names its group and nothing
//! else. The group filter (step 3) therefore remembers the kind each group's stores declared, so
//! that a removal in a `mamba` group is filtered like the stores were. A model has a handful of
//! groups, so the table is a small vector scanned linearly: faster than hashing for four
//! entries, and no allocation after the first stores.

use crate::kind::{KindClass, classify_kind};
use crate::small::SmallStr;

/// The kind one group was last declared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnedKind {
    pub class: KindClass,
    pub kind: SmallStr,
}

/// Learned group kinds of one source.
#[derive(Clone, Debug, Default)]
pub struct GroupTable {
    entries: Vec<(u32, u32, LearnedKind)>,
}

impl GroupTable {
    /// Records `kind` for `(dp_rank, group_idx)`; a later store may change it.
    pub fn learn(&mut self, dp_rank: u32, group_idx: u32, kind: &str) {
        if let Some((_, _, learned)) = self.entries.iter_mut().find(|(d, g, _)| *d == dp_rank && *g == group_idx) {
            if !learned.kind.eq_str(kind) {
                *learned = LearnedKind { class: classify_kind(kind), kind: SmallStr::new(kind) };
            }
            return;
        }
        self.entries.push((dp_rank, group_idx, LearnedKind { class: classify_kind(kind), kind: SmallStr::new(kind) }));
    }

    /// The kind learned for `(dp_rank, group_idx)`, if any store declared one.
    pub fn get(&self, dp_rank: u32, group_idx: u32) -> Option<LearnedKind> {
        self.entries.iter().find(|(d, g, _)| *d == dp_rank && *g == group_idx).map(|(_, _, k)| *k)
    }

    /// Every learned group: `(dp_rank, group_idx, kind)`.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32, &LearnedKind)> {
        self.entries.iter().map(|(d, g, k)| (*d, *g, k))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_learned_per_rank_and_may_change() {
        let mut t = GroupTable::default();
        t.learn(0, 3, "mla_attention");
        t.learn(1, 3, "mamba");
        assert_eq!(t.get(0, 3).unwrap().class, KindClass::Main);
        assert_eq!(t.get(1, 3).unwrap().class, KindClass::KnownNonMain);
        assert_eq!(t.get(0, 0), None);
        t.learn(0, 3, "mamba");
        assert_eq!(t.get(0, 3).unwrap().kind.as_str(), "mamba");
        assert_eq!(t.len(), 2);
    }
}
