//! Marks on a verdict that do not change its kind: fallbacks, conversion warnings, whether a
//! warning was logged.

use std::fmt;

/// Marks on a verdict that do not change its kind.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VerdictFlags(u8);

impl VerdictFlags {
    /// The medium matched no tier and Device was used.
    pub const UNKNOWN_MEDIUM_FALLBACK: VerdictFlags = VerdictFlags(1);
    /// A store whose parent is one of its own hashes.
    pub const SELF_REFERENCING_STORE: VerdictFlags = VerdictFlags(2);
    /// Conversion warning: fewer token ids than `blocks * block_size`.
    pub const SHORT_TOKEN_IDS: VerdictFlags = VerdictFlags(4);
    /// Conversion warning: more token ids than `blocks * block_size`, so some block of the
    /// store is not `block_size` tokens long.
    pub const WRONG_SIZE_BLOCK: VerdictFlags = VerdictFlags(8);
    /// This verdict's warning was printed (its budget had room).
    pub const WARNING_LOGGED: VerdictFlags = VerdictFlags(16);
    /// For a self-referencing store: a hash named twice made it so, not the parent
    /// ([`Facts::parent`] then holds the repeated hash). Not listed in codes.
    pub const HASH_REPEATED: VerdictFlags = VerdictFlags(64);
    /// Conversion warning (`dynamo-1.6.1`): a non-empty store at another block size, applied
    /// with no blocks.
    pub const BLOCK_SIZE_DIFFERS: VerdictFlags = VerdictFlags(32);

    /// Named flags, in the order codes list them.
    pub const NAMED: [(VerdictFlags, &'static str); 5] = [
        (VerdictFlags::UNKNOWN_MEDIUM_FALLBACK, "unknown_medium_fallback"),
        (VerdictFlags::SELF_REFERENCING_STORE, "self_referencing_store"),
        (VerdictFlags::SHORT_TOKEN_IDS, "short_token_ids"),
        (VerdictFlags::WRONG_SIZE_BLOCK, "wrong_size_block"),
        (VerdictFlags::BLOCK_SIZE_DIFFERS, "block_size_differs"),
    ];

    /// True for the flags that are conversion warnings (charged to the conversion budget).
    pub fn has_conversion_warning(self) -> bool {
        self.0 & (VerdictFlags::SHORT_TOKEN_IDS.0 | VerdictFlags::WRONG_SIZE_BLOCK.0 | VerdictFlags::BLOCK_SIZE_DIFFERS.0) != 0
    }

    pub const fn empty() -> VerdictFlags {
        VerdictFlags(0)
    }
    pub fn contains(self, other: VerdictFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn insert(&mut self, other: VerdictFlags) {
        self.0 |= other.0;
    }
    /// The names of the set flags (see [`VerdictFlags::NAMED`]).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        VerdictFlags::NAMED.into_iter().filter(move |(f, _)| self.contains(*f)).map(|(_, n)| n)
    }
}

impl fmt::Debug for VerdictFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
