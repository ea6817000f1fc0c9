//! `--shard i/n`: which of n kvscope servers reads a worker, so that n servers split one fleet
//! with no overlap and no gap.
//!
//! A worker belongs to shard `xxh3_64(worker id as text) mod n`. The text is the worker id as
//! `--workers` names it and as Dynamo's u64 `worker_id` prints in decimal, so an engine source,
//! its relay and its RouterEvents land in the same shard however they were found. Every
//! server holding the same n computes the same split, with nothing shared between them.

use std::fmt;

/// One server's part of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This server's shard, `0..count`.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The whole fleet (no `--shard`).
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `i/n` with `0 <= i < n`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {text:?}: write i/n, this server's shard i of n (0 <= i < n), e.g. 0/3");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard a worker belongs to.
    pub fn of(worker_id: &str, count: u32) -> u32 {
        (xxhash_rust::xxh3::xxh3_64(worker_id.as_bytes()) % u64::from(count.max(1))) as u32
    }

    /// Whether this server reads `worker_id`.
    pub fn takes(&self, worker_id: &str) -> bool {
        Shard::of(worker_id, self.count) == self.index
    }

    /// [`Shard::takes`] for Dynamo's u64 worker id.
    pub fn takes_id(&self, worker_id: u64) -> bool {
        self.count <= 1 || self.takes(&worker_id.to_string())
    }

    pub fn is_all(&self) -> bool {
        self.count <= 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_is_in_exactly_one_shard() {
        let shards: Vec<Shard> = (0..3).map(|index| Shard { index, count: 3 }).collect();
        let mut sizes = [0; 3];
        for w in 0..3000u64 {
            let holders: Vec<_> = shards.iter().filter(|s| s.takes_id(w)).collect();
            assert_eq!(holders.len(), 1, "worker {w}");
            sizes[holders[0].index as usize] += 1;
            assert!(holders[0].takes(&w.to_string()), "text and u64 agree");
        }
        assert!(sizes.iter().all(|&n| n > 900), "uneven split {sizes:?}");
        assert!(Shard::ALL.takes_id(7) && Shard::ALL.takes("anything"));
    }

    #[test]
    fn shards_parse_as_i_of_n() {
        assert_eq!(Shard::parse("2/3").unwrap(), Shard { index: 2, count: 3 });
        assert!(Shard::parse("3/3").unwrap_err().contains("0 <= i < n"));
        assert!(Shard::parse("1").is_err() && Shard::parse("0/0").is_err());
    }
}
