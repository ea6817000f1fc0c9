//! Cache namespaces (salts) per block hash, for rule `ambiguous_cache_namespace`.
//!
//! A salted request's blocks hash differently from unsalted ones in the engine, but the router
//! sees only the external hash. Dynamo 1.6.1 therefore remembers, per `(worker and dp_rank,
//! hash)`, which namespace a block was stored under, lets a child store without a salt of its
//! own inherit its parent's, and refuses to guess (skips the store) when the parent was seen
//! under two namespaces, or salted and unsalted (docs/dynamo-1.6.1.md, section 5). Only
//! `dynamo-1.6.1` uses this table; it holds only hashes that were stored salted or inherited a
//! salt, and a removal forgets them (unless ambiguous), as Dynamo's map does. Like Dynamo's, it
//! has no size bound: a stream of salted stores that are never removed grows it.
//!
//! Namespaces are interned: a deployment has a handful of tenants, and a hash then costs one
//! table entry of 16 bytes.

use std::collections::HashMap;

/// What is known about one hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    /// Stored under this namespace (an index into the interned names).
    Namespaced(u32),
    /// Stored under two namespaces, or salted and unsalted. Sticks until a clear.
    Ambiguous,
}

/// One source's namespace memory.
#[derive(Clone, Debug, Default)]
pub struct NamespaceTable {
    names: Vec<Box<str>>,
    states: HashMap<(u32, u64), NamespaceState>,
}

impl NamespaceTable {
    /// The index of `name`, interning it on first use.
    pub fn intern(&mut self, name: &str) -> u32 {
        match self.names.iter().position(|n| &**n == name) {
            Some(i) => i as u32,
            None => {
                self.names.push(name.into());
                self.names.len() as u32 - 1
            }
        }
    }

    /// The interned name at `index`.
    pub fn name(&self, index: u32) -> Option<&str> {
        self.names.get(index as usize).map(|n| &**n)
    }

    pub fn get(&self, dp_rank: u32, hash: u64) -> Option<NamespaceState> {
        self.states.get(&(dp_rank, hash)).copied()
    }

    /// Records that `hash` was stored under `namespace`; a hash already known under anything
    /// else becomes ambiguous.
    pub fn record(&mut self, dp_rank: u32, hash: u64, namespace: u32) {
        let state = NamespaceState::Namespaced(namespace);
        self.states
            .entry((dp_rank, hash))
            .and_modify(|existing| {
                if *existing != state {
                    *existing = NamespaceState::Ambiguous;
                }
            })
            .or_insert(state);
    }

    /// An unsalted store of `hash`: a hash already known becomes ambiguous; an unknown one stays
    /// unknown (unsalted blocks are not remembered).
    pub fn stored_unsalted(&mut self, dp_rank: u32, hash: u64) {
        if let Some(existing) = self.states.get_mut(&(dp_rank, hash)) {
            *existing = NamespaceState::Ambiguous;
        }
    }

    /// A removal: forgets `hash` unless it is ambiguous.
    pub fn removed(&mut self, dp_rank: u32, hash: u64) {
        if let Some(NamespaceState::Namespaced(_)) = self.get(dp_rank, hash) {
            self.states.remove(&(dp_rank, hash));
        }
    }

    /// A clear: forgets every hash of `dp_rank`.
    pub fn cleared(&mut self, dp_rank: u32) {
        self.states.retain(|(rank, _), _| *rank != dp_rank);
    }

    /// Hashes remembered.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguity_sticks_until_a_clear() {
        let mut t = NamespaceTable::default();
        let a = t.intern("t1");
        let b = t.intern("t2");
        assert_eq!((t.intern("t1"), t.name(b)), (a, Some("t2")));
        t.record(0, 1, a);
        t.record(0, 1, a);
        assert_eq!(t.get(0, 1), Some(NamespaceState::Namespaced(a)));
        t.record(0, 1, b);
        assert_eq!(t.get(0, 1), Some(NamespaceState::Ambiguous));
        t.removed(0, 1);
        assert_eq!(t.get(0, 1), Some(NamespaceState::Ambiguous));
        t.record(0, 2, a);
        t.stored_unsalted(0, 2);
        t.stored_unsalted(0, 3);
        assert_eq!((t.get(0, 2), t.get(0, 3)), (Some(NamespaceState::Ambiguous), None));
        t.record(1, 2, a);
        t.cleared(0);
        assert_eq!((t.len(), t.get(1, 2)), (1, Some(NamespaceState::Namespaced(a))));
        t.removed(1, 2);
        assert!(t.is_empty());
    }
}
