//! Building events: chained setters over the event structs, so callers (the demo, the benches,
//! the vector table) state what they mean and leave the rest unset.

use crate::event::{BlockKeys, Event, Hash, Other, Removed, Stored, Tokens};

/// Setters for optional fields: `name(Option<&str>)` for strings, `name(Option<T>)` otherwise.
macro_rules! setters {
    ($ty:ty { str: [$($s:ident),*], copy: [$($c:ident: $t:ty),*] }) => {
        impl $ty {
            $(
                pub fn $s(mut self, value: Option<&str>) -> Self {
                    self.$s = value.map(str::to_owned);
                    self
                }
            )*
            $(
                pub fn $c(mut self, value: Option<$t>) -> Self {
                    self.$c = value;
                    self
                }
            )*
        }
    };
}

setters!(Stored {
    str: [medium, lora_name, cache_salt, kind, locality, session_id, ownership],
    copy: [block_size: u32, lora_id: i64, group_idx: u32, sliding_window: u32]
});
setters!(Removed { str: [medium, kind, locality, ownership], copy: [group_idx: u32, sliding_window: u32] });

impl Stored {
    /// A store of `hashes` at `block_size`, no parent, no tokens, every optional field unset.
    pub fn new(hashes: impl IntoIterator<Item = Hash>, block_size: u32) -> Stored {
        Stored { hashes: hashes.into_iter().collect(), block_size: Some(block_size), ..Stored::default() }
    }

    pub fn parent(mut self, parent: Option<Hash>) -> Self {
        self.parent = parent;
        self
    }

    /// Token ids as engines write them (u32).
    pub fn tokens(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
        self.tokens = Tokens::Ids(ids.into_iter().map(i64::from).collect());
        self
    }

    /// Any `token_ids`, including ids no engine writes and bigram pairs.
    pub fn token_ids(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// `extra_keys` as given (`None`: nil or absent).
    pub fn extra_keys(mut self, keys: Option<Vec<BlockKeys>>) -> Self {
        self.extra_keys = keys;
        self
    }

    /// One nil per block: what vLLM's GPU stores carry.
    pub fn extra_keys_nil_per_block(self) -> Self {
        let n = self.hashes.len();
        self.extra_keys(Some(vec![None; n]))
    }

    /// The same keys for every block (vLLM's LoRA stores: `[[name], [name], ...]`).
    pub fn extra_keys_per_block(self, keys: &[&str]) -> Self {
        let n = self.hashes.len();
        let block: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        self.extra_keys(Some(vec![Some(block); n]))
    }
}

impl Removed {
    /// A removal of `hashes`, every optional field unset.
    pub fn new(hashes: impl IntoIterator<Item = Hash>) -> Removed {
        Removed { hashes: hashes.into_iter().collect(), ..Removed::default() }
    }
}

impl Event {
    /// `AllBlocksCleared`.
    pub fn cleared() -> Event {
        Event::other("AllBlocksCleared", None)
    }

    /// An event with this tag and nothing else but, where the layout has it, `ownership`.
    pub fn other(tag: &str, ownership: Option<&str>) -> Event {
        Event::Other(Other { tag: tag.to_owned(), ownership: ownership.map(str::to_owned) })
    }
}

impl From<Stored> for Event {
    fn from(s: Stored) -> Event {
        Event::Stored(s)
    }
}

impl From<Removed> for Event {
    fn from(r: Removed) -> Event {
        Event::Removed(r)
    }
}

impl Hash {
    /// A `bin` hash of `len` bytes whose last 8 (or all, if fewer) are `value` big-endian and
    /// the rest `fill`: the decoder reads a bin hash by its last 8 bytes.
    pub fn bin_ending(len: usize, value: u64, fill: u8) -> Hash {
        let mut bytes = vec![fill; len];
        let k = len.min(8);
        bytes[len - k..].copy_from_slice(&value.to_be_bytes()[8 - k..]);
        Hash::Bin(bytes)
    }
}
