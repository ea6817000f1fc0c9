//! Building events: chained setters over the event structs, so callers (the demo, the benches,
//! the vector table) state what they mean and leave the rest unset.

use crate::event::{BlockKeys, Event, Hash, Other, Removed, Stored, Tokens};

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

    pub fn block_size(mut self, block_size: Option<u32>) -> Self {
        self.block_size = block_size;
        self
    }

    pub fn lora_id(mut self, id: Option<i64>) -> Self {
        self.lora_id = id;
        self
    }

    pub fn medium(mut self, medium: Option<&str>) -> Self {
        self.medium = medium.map(str::to_owned);
        self
    }

    pub fn lora_name(mut self, name: Option<&str>) -> Self {
        self.lora_name = name.map(str::to_owned);
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

    pub fn cache_salt(mut self, salt: Option<&str>) -> Self {
        self.cache_salt = salt.map(str::to_owned);
        self
    }

    pub fn group_idx(mut self, group: Option<u32>) -> Self {
        self.group_idx = group;
        self
    }

    pub fn kind(mut self, kind: Option<&str>) -> Self {
        self.kind = kind.map(str::to_owned);
        self
    }

    pub fn sliding_window(mut self, window: Option<u32>) -> Self {
        self.sliding_window = window;
        self
    }

    pub fn locality(mut self, locality: Option<&str>) -> Self {
        self.locality = locality.map(str::to_owned);
        self
    }

    pub fn session_id(mut self, session: Option<&str>) -> Self {
        self.session_id = session.map(str::to_owned);
        self
    }

    pub fn ownership(mut self, ownership: Option<&str>) -> Self {
        self.ownership = ownership.map(str::to_owned);
        self
    }
}

impl Removed {
    /// A removal of `hashes`, every optional field unset.
    pub fn new(hashes: impl IntoIterator<Item = Hash>) -> Removed {
        Removed { hashes: hashes.into_iter().collect(), ..Removed::default() }
    }

    pub fn medium(mut self, medium: Option<&str>) -> Self {
        self.medium = medium.map(str::to_owned);
        self
    }

    pub fn group_idx(mut self, group: Option<u32>) -> Self {
        self.group_idx = group;
        self
    }

    pub fn kind(mut self, kind: Option<&str>) -> Self {
        self.kind = kind.map(str::to_owned);
        self
    }

    pub fn sliding_window(mut self, window: Option<u32>) -> Self {
        self.sliding_window = window;
        self
    }

    pub fn locality(mut self, locality: Option<&str>) -> Self {
        self.locality = locality.map(str::to_owned);
        self
    }

    pub fn ownership(mut self, ownership: Option<&str>) -> Self {
        self.ownership = ownership.map(str::to_owned);
        self
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
