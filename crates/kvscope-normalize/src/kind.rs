//! Which `kv_cache_spec_kind` strings are main attention, known non-main, or unknown.
//!
//! A hybrid model publishes one KV-cache group per layer type (Kimi-K3: groups 0-2 `mamba`,
//! group 3 `mla_attention`). A prefix router indexes only the groups whose blocks are full
//! attention over the prefix; the others are filtered. Telling a *known* non-main kind
//! (`non_main_attention_kind`) from an *unknown* one (`unknown_kind`) matters to an operator: the
//! first is expected, the second means an engine release added a kind this tool has not seen.
//!
//! Kind strings are written by engine code (one per vLLM `KVCacheSpec` class), never by users,
//! so they are matched exactly: `Mamba` is unknown, not `mamba`.
//!
//! - Main: `full_attention`, `mla_attention`, `sink_full_attention` (docs/rules.md).
//! - Known non-main: the other vLLM `KVCacheSpec` kinds: `mamba`, `sliding_window`,
//!   `sliding_window_mla`, `chunked_local_attention`, `cross_attention`,
//!   `encoder_only_attention`. Each keeps a bounded window or a recurrent state rather than the
//!   whole prefix, so its blocks cannot be matched by prefix hash.
//! - Anything else is unknown.

/// The class of a cache kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindClass {
    /// Full attention over the prefix: indexed.
    Main,
    /// A kind the tool knows and filters.
    KnownNonMain,
    /// A kind the tool has never seen: filtered as `unknown_kind`.
    Unknown,
}

/// Kinds whose blocks a prefix router indexes.
pub const MAIN_KINDS: &[&str] = &["full_attention", "mla_attention", "sink_full_attention"];

/// Kinds that are known and not main attention.
pub const KNOWN_NON_MAIN_KINDS: &[&str] =
    &["mamba", "sliding_window", "sliding_window_mla", "chunked_local_attention", "cross_attention", "encoder_only_attention"];

/// Classifies a kind string (exact match).
pub fn classify_kind(kind: &str) -> KindClass {
    if MAIN_KINDS.contains(&kind) {
        KindClass::Main
    } else if KNOWN_NON_MAIN_KINDS.contains(&kind) {
        KindClass::KnownNonMain
    } else {
        KindClass::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_classified_exactly() {
        for k in MAIN_KINDS {
            assert_eq!(classify_kind(k), KindClass::Main);
        }
        for k in KNOWN_NON_MAIN_KINDS {
            assert_eq!(classify_kind(k), KindClass::KnownNonMain);
        }
        assert_eq!(classify_kind("Mamba"), KindClass::Unknown);
        assert_eq!(classify_kind("linear_attention"), KindClass::Unknown);
        assert_eq!(classify_kind(""), KindClass::Unknown);
    }
}
