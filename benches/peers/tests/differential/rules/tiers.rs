//! Which tier an event lands on: the normalizer's checks in order, the medium table, and cache
//! namespaces on device and host tiers (docs/dynamo-1.6.1.md, sections 3 and 4).

use super::*;

#[test]
fn preprocessing_order_ownership_ignored_locality_medium() {
    check(&[
        ("ownership kvcr", vec![batch(&[store(&[1]).with("ownership", Val::Str("kvcr"))])], "unsupported_ownership | warnings 0"),
        ("ownership other", vec![batch(&[store(&[1]).with("ownership", Val::Str("framework"))])], "unknown_ownership | warnings 0"),
        ("ownership nil is framework", vec![batch(&[store(&[1]).with("ownership", Val::Nil)])], "store device 1/1 | warnings 0"),
        ("clear with ownership kvcr", vec![batch(&[clear().with("ownership", Val::Str("kvcr"))])], "unsupported_ownership | warnings 0"),
        (
            "ownership before locality",
            vec![batch(&[store(&[1]).with("ownership", Val::Str("kvcr")).with("locality", Val::Str("REMOTE"))])],
            "unsupported_ownership | warnings 0",
        ),
        ("Ignored tag", vec![batch(&[tagged("Ignored")])], "ignored_event | warnings 0"),
        (
            "locality REMOTE",
            vec![batch(&[store(&[1]).medium("STORAGE").with("locality", Val::Str("REMOTE"))])],
            "non_local_locality | warnings 0",
        ),
        ("locality is case-sensitive", vec![batch(&[store(&[1]).with("locality", Val::Str("local"))])], "non_local_locality | warnings 0"),
        ("locality LOCAL", vec![batch(&[store(&[1]).with("locality", Val::Str("LOCAL"))])], "store device 1/1 | warnings 0"),
        (
            "locality before medium",
            vec![batch(&[store(&[1]).medium("tape").with("locality", Val::Str("GLOBAL"))])],
            "non_local_locality | warnings 0",
        ),
        (
            "remove with REMOTE locality",
            vec![batch(&[remove(&[1]).with("locality", Val::Str("REMOTE"))])],
            "non_local_locality | warnings 0",
        ),
    ]);
}

#[test]
fn medium_table_is_exact() {
    let m = |medium: &'static str| batch(&[store(&[1]).medium(medium)]);
    check(&[
        ("absent", vec![batch(&[store(&[1])])], "store device 1/1 | warnings 0"),
        ("empty is absent", vec![m("")], "store device 1/1 | warnings 0"),
        ("GPU", vec![m("GPU")], "store device 1/1 | warnings 0"),
        ("DEVICE", vec![m("DEVICE")], "store device 1/1 | warnings 0"),
        ("CPU", vec![m("CPU")], "store host_pinned 1/1 | warnings 0"),
        ("CPU_PINNED", vec![m("CPU_PINNED")], "store host_pinned 1/1 | warnings 0"),
        ("CPU_TIER1", vec![m("CPU_TIER1")], "store host_pinned 1/1 | warnings 0"),
        ("CPU_TIER2", vec![m("CPU_TIER2")], "store disk 1/1 | warnings 0"),
        ("DISK", vec![m("DISK")], "store disk 1/1 | warnings 0"),
        ("NVME", vec![m("NVME")], "store disk 1/1 | warnings 0"),
        ("STORAGE", vec![m("STORAGE")], "store disk 1/1 | warnings 0"),
        ("EXTERNAL", vec![m("EXTERNAL")], "store external 1/1 | warnings 0"),
        ("NETWORK", vec![m("NETWORK")], "store external 1/1 | warnings 0"),
        ("REMOTE", vec![m("REMOTE")], "store external 1/1 | warnings 0"),
        ("SHARED", vec![m("SHARED")], "store external 1/1 | warnings 0"),
        ("lowercase cpu", vec![m("cpu")], "unknown_medium | warnings 0"),
        ("Gpu", vec![m("Gpu")], "unknown_medium | warnings 0"),
        ("FS (vLLM 0.26)", vec![m("FS")], "unknown_medium | warnings 0"),
        ("trailing space", vec![m("GPU ")], "unknown_medium | warnings 0"),
        ("removal on cpu", vec![batch(&[remove(&[1]).medium("cpu")])], "unknown_medium | warnings 0"),
        ("medium before group filter", vec![batch(&[store(&[1]).medium("cpu").group(0).kind("mamba")])], "unknown_medium | warnings 0"),
    ]);
}

#[test]
fn cache_namespaces_on_device_and_host_tiers() {
    let salted = |hashes: &[u64], salt: &'static str| store(hashes).with("cache_salt", Val::Str(salt));
    check(&[
        (
            "a child inherits its parent's namespace",
            vec![batch(&[salted(&[1], "t1"), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "a hash stored salted and unsalted becomes ambiguous",
            vec![batch(&[salted(&[1], "t1"), store(&[1]), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "two namespaces on one hash",
            vec![batch(&[salted(&[1], "t1"), salted(&[1], "t2"), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "a salted child of an ambiguous parent is fine",
            vec![batch(&[salted(&[1], "t1"), store(&[1]), salted(&[2], "t1").parent(1)])],
            "store device 1/1, store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "removing an ambiguous hash keeps it ambiguous",
            vec![batch(&[salted(&[1], "t1"), store(&[1]), remove(&[1]), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1, remove device 1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "a clear forgets namespaces",
            vec![batch(&[salted(&[1], "t1"), store(&[1]), clear(), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1, clear, store device 1/1 | warnings 0",
        ),
        (
            "empty salt is no salt",
            vec![batch(&[salted(&[1], ""), salted(&[1], "t1"), store(&[1]), store(&[2]).parent(1)])],
            "store device 1/1, store device 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "namespaces are per tier family, not per tier",
            vec![batch(&[salted(&[1], "t1").medium("CPU"), store(&[1]), store(&[2]).parent(1)])],
            "store host_pinned 1/1, store device 1/1, ambiguous_cache_namespace | warnings 0",
        ),
        (
            "disk stores neither record nor check",
            vec![batch(&[salted(&[1], "t1"), store(&[1]).medium("DISK"), store(&[2]).parent(1)])],
            "store device 1/1, store disk 1/1, store device 1/1 | warnings 0",
        ),
    ]);
}
