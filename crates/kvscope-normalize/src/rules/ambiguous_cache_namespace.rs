//! Rule P7 (`dynamo-1.6.1`): cache namespaces per hash, and the stores whose parent's namespace
//! is ambiguous.

use std::fmt;

use kvscope_wire::KvEvent;

use super::{EventCtx, LabelText, Rule, Sentence, Step};
use crate::label::VerdictLabel;
use kvscope_wire::{BlockStored, EventEncoding};

use crate::namespaces::NamespaceState;
use crate::verdict::{Verdict, VerdictKind};

pub static RULE: Rule = Rule {
    step: "P7",
    name: "ambiguous_cache_namespace",
    checks: "an unsalted child of a hash seen under two namespaces",
    decides: "skip",
    sentence: "A store without a cache namespace of its own whose parent was stored under two namespaces (or \
               salted and unsalted) is skipped as ambiguous_cache_namespace; stores record their namespace \
               per hash (a child inherits its parent's), removals forget it, clears forget the rank's \
               (dynamo-1.6.1, Device and HostPinned only).",
    labels: &[LabelText {
        label: VerdictLabel::AmbiguousCacheNamespace,
        one: "store",
        many: "stores",
        rest: "under a parent of ambiguous cache namespace skipped",
        routine_filter: false,
    }],
    enabled: |p| p.namespace_filter,
    check: check_ambiguous_cache_namespace,
    passed: None,
    decided: Some(decided),
};

/// Dynamo's tag for a cache salt carried in `extra_keys` (`DYNAMO_CACHE_SALT_PREFIX`).
pub const DYNAMO_CACHE_SALT_PREFIX: &str = "dynamo-cache-salt:";

/// A store's own cache namespace as Dynamo 1.6.1 reads it: `cache_salt`, else the first string
/// of the first block's `extra_keys` tagged `dynamo-cache-salt:` (skipping one item equal to the
/// LoRA name). An empty one is none. A map's `cache_salt: ""` still stops the fallback to
/// `extra_keys`; SGLang's array map `{cache_salt: ""}` does not (Dynamo drops it while decoding).
pub fn own_namespace(s: &BlockStored) -> Option<&str> {
    let is_array = matches!(s.encoding, Some(EventEncoding::Array { .. }));
    let salt = match s.cache_salt.as_deref() {
        Some(salt) if !(is_array && salt.is_empty()) => Some(salt),
        _ => extra_keys_namespace(s),
    };
    salt.filter(|salt| !salt.is_empty())
}

fn extra_keys_namespace(s: &BlockStored) -> Option<&str> {
    let keys = s.extra_key_strings.as_deref()?;
    let mut unmatched_lora = s.lora_name.as_deref().filter(|name| !name.is_empty());
    keys.iter().find_map(|key| {
        if unmatched_lora == Some(key.as_str()) {
            unmatched_lora = None;
            return None;
        }
        key.strip_prefix(DYNAMO_CACHE_SALT_PREFIX).filter(|ns| !ns.is_empty())
    })
}

fn check_ambiguous_cache_namespace(cx: &mut EventCtx<'_>) -> Step {
    if !cx.policy.namespace_filter || cx.bypasses_filters() {
        return Step::Continue;
    }
    let dp = cx.dp_rank;
    match cx.event {
        KvEvent::BlockStored(s) => {
            let namespace = match own_namespace(s) {
                Some(ns) => Some(cx.namespaces.intern(ns)),
                None => match s.parent_block_hash.map(|p| (p, cx.namespaces.get(dp, p.0))) {
                    Some((_, Some(NamespaceState::Namespaced(ns)))) => Some(ns),
                    Some((parent, Some(NamespaceState::Ambiguous))) => {
                        cx.facts.parent = parent;
                        return Step::Decide(VerdictKind::Skip(VerdictLabel::AmbiguousCacheNamespace));
                    }
                    // A listener that joined mid-chain cannot tell an unknown salted parent from
                    // an unsalted one; Dynamo keeps the unsalted reading.
                    _ => None,
                },
            };
            for h in &s.block_hashes {
                match namespace {
                    Some(ns) => cx.namespaces.record(dp, h.0, ns),
                    None => cx.namespaces.stored_unsalted(dp, h.0),
                }
            }
        }
        KvEvent::BlockRemoved(r) => r.block_hashes.iter().for_each(|h| cx.namespaces.removed(dp, h.0)),
        KvEvent::AllBlocksCleared { .. } => cx.namespaces.cleared(dp),
        KvEvent::Unknown(_) => {}
    }
    Step::Continue
}

fn decided(v: &Verdict, s: &mut Sentence<'_, '_>) -> fmt::Result {
    write!(
        s.clause()?,
        "no cache namespace of its own; parent {:?} was stored under more than one namespace -> skip \
         ambiguous_cache_namespace",
        v.facts.parent
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::*;

    #[test]
    fn ambiguous_cache_namespace_skips_children_of_a_hash_seen_under_two_namespaces() {
        let salted = |hashes: &[u64], parent: Option<u64>, salt: &str, medium: Option<&str>| {
            let mut ev = stored(hashes, parent, 16 * hashes.len() as u32, 16, medium, None, None);
            if let KvEvent::BlockStored(s) = &mut ev {
                s.cache_salt = Some(salt.into());
            }
            ev
        };
        let plain = |hashes: &[u64], parent: Option<u64>| stored(hashes, parent, 16 * hashes.len() as u32, 16, None, None, None);
        let run = |events: &[KvEvent]| {
            let mut mem = Memory::default();
            events.iter().map(|e| run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, e).code).collect::<Vec<_>>().join(", ")
        };
        // A child inherits its parent's namespace.
        assert_eq!(run(&[salted(&[1], None, "t1", None), plain(&[2], Some(1))]), "store device 1, store device 1");
        // Salted and unsalted: ambiguous.
        assert_eq!(
            run(&[salted(&[1], None, "t1", None), plain(&[1], None), plain(&[2], Some(1))]),
            "store device 1, store device 1, ambiguous_cache_namespace"
        );
        // A salted child of an ambiguous parent is fine; removing keeps ambiguity; a clear forgets.
        assert_eq!(
            run(&[salted(&[1], None, "t1", None), salted(&[1], None, "t2", None), salted(&[2], Some(1), "t1", None)]),
            "store device 1, store device 1, store device 1"
        );
        let remove = removed(&[1], None, None);
        let clear = KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: None };
        assert_eq!(
            run(&[salted(&[1], None, "t1", None), plain(&[1], None), remove, plain(&[2], Some(1))]),
            "store device 1, store device 1, remove device 1, ambiguous_cache_namespace"
        );
        assert_eq!(
            run(&[salted(&[1], None, "t1", None), plain(&[1], None), clear, plain(&[2], Some(1))]),
            "store device 1, store device 1, clear, store device 1"
        );
        // Host and Device share the table; Disk neither records nor checks.
        assert_eq!(
            run(&[salted(&[1], None, "t1", Some("CPU")), plain(&[1], None), plain(&[2], Some(1))]),
            "store host_pinned 1, store device 1, ambiguous_cache_namespace"
        );
        assert_eq!(
            run(&[salted(&[1], None, "t1", None), stored(&[1], None, 16, 16, Some("DISK"), None, None), plain(&[2], Some(1))]),
            "store device 1, store disk 1, store device 1"
        );
        let mut mem = Memory::default();
        for e in [salted(&[1], None, "t1", None), plain(&[1], None)] {
            let _ = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &e);
        }
        let d = run_with(&Policy::DYNAMO_1_6_1, 16, 0, &mut mem, &plain(&[2], Some(1)));
        assert_eq!(
            d.text,
            "no medium -> Device; no cache namespace of its own; parent 0x0000000000000001 was stored under more than \
             one namespace -> skip ambiguous_cache_namespace"
        );
        // fixed has no namespace rule.
        let mut mem = Memory::default();
        for e in [salted(&[1], None, "t1", None), plain(&[1], None)] {
            let _ = run_with(&Policy::FIXED, 16, 0, &mut mem, &e);
        }
        assert_eq!(run_with(&Policy::FIXED, 16, 0, &mut mem, &plain(&[2], Some(1))).code, "store device 1");
    }
    #[test]
    fn own_namespace_reads_cache_salt_then_tagged_extra_keys() {
        let mut ev = stored(&[1], None, 16, 16, None, None, None);
        let KvEvent::BlockStored(s) = &mut ev else { unreachable!() };
        s.extra_key_strings = Some(vec!["sql-lora".into(), "dynamo-cache-salt:sql-lora".into(), "dynamo-cache-salt:x".into()]);
        s.lora_name = Some("sql-lora".into());
        assert_eq!(own_namespace(s), Some("sql-lora"), "the LoRA name is skipped once, then the first tagged salt");
        s.extra_key_strings = Some(vec!["dynamo-cache-salt:".into(), "mm-hash".into()]);
        assert_eq!(own_namespace(s), None);
        s.cache_salt = Some("tenant".into());
        assert_eq!(own_namespace(s), Some("tenant"));
        // A map's empty cache_salt stops the fallback; an array's does not.
        s.extra_key_strings = Some(vec!["dynamo-cache-salt:x".into()]);
        s.cache_salt = Some("".into());
        assert_eq!(own_namespace(s), None);
        s.encoding = Some(EventEncoding::Array { len: 12 });
        assert_eq!(own_namespace(s), Some("x"));
    }
}
