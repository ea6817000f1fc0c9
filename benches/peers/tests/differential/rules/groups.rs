//! State kept per normalizer: the KV-cache group filter, and conversion failures that never stop
//! the listener (docs/dynamo-1.6.1.md, sections 5 to 7).

use super::*;

#[test]
fn group_filter_learns_from_device_and_host_stores_only() {
    check(&[
        (
            "kind decides first",
            vec![batch(&[store(&[1]).group(0).kind("mamba"), store(&[2]).group(9).kind("sink_full_attention")])],
            "non_main_attention_kind, store device 1/1 | warnings 0",
        ),
        (
            "main kinds",
            vec![batch(&[store(&[1]).kind("full_attention"), store(&[2]).kind("mla_attention"), store(&[3]).kind("sink_full_attention")])],
            "store device 1/1, store device 1/1, store device 1/1 | warnings 0",
        ),
        (
            "non-main kinds",
            vec![batch(&[
                store(&[1]).kind("sliding_window"),
                store(&[2]).kind("sliding_window_mla"),
                store(&[3]).kind("chunked_local_attention"),
                store(&[4]).kind("encoder_only_attention"),
                store(&[5]).kind("cross_attention"),
            ])],
            "non_main_attention_kind, non_main_attention_kind, non_main_attention_kind, non_main_attention_kind, non_main_attention_kind | warnings 0",
        ),
        ("unknown kind", vec![batch(&[store(&[1]).kind("Mamba")])], "unknown_kind | warnings 0"),
        (
            "learned non-main group",
            vec![batch(&[store(&[1]).group(5).kind("mamba"), remove(&[1]).group(5), store(&[2]).group(5)])],
            "non_main_attention_kind, non_main_attention_group, non_main_attention_group | warnings 0",
        ),
        (
            "learned main group",
            vec![batch(&[store(&[1]).group(3).kind("mla_attention"), remove(&[1]).group(3)])],
            "store device 1/1, remove device 1 | warnings 0",
        ),
        (
            "learned unknown kind",
            vec![batch(&[store(&[1]).group(4).kind("weird"), remove(&[1]).group(4)])],
            "unknown_kind, unknown_kind | warnings 0",
        ),
        (
            "unlearned group",
            vec![batch(&[remove(&[1]).group(6), remove(&[1]).group(0), remove(&[1])])],
            "unlearned_group_idx, remove device 1, remove device 1 | warnings 0",
        ),
        (
            "removals never teach",
            vec![batch(&[remove(&[1]).group(7).kind("mla_attention"), remove(&[1]).group(7)])],
            "remove device 1, unlearned_group_idx | warnings 0",
        ),
        (
            "learning needs group and kind",
            vec![batch(&[store(&[1]).kind("mla_attention"), store(&[2]).group(8), remove(&[2]).group(8)])],
            "store device 1/1, unlearned_group_idx, unlearned_group_idx | warnings 0",
        ),
        (
            "last store wins",
            vec![batch(&[store(&[1]).group(2).kind("mamba"), store(&[2]).group(2).kind("full_attention"), remove(&[2]).group(2)])],
            "non_main_attention_kind, store device 1/1, remove device 1 | warnings 0",
        ),
        (
            "learned across batches, kept after a clear",
            vec![batch(&[store(&[1]).group(5).kind("mamba")]), batch(&[clear(), remove(&[1]).group(5)])],
            "non_main_attention_kind | clear, non_main_attention_group | warnings 0",
        ),
        (
            "learned per dp rank",
            vec![
                batch_dp(Val::U(0), &[store(&[1]).group(3).kind("mla_attention")]),
                batch_dp(Val::U(1), &[remove(&[1]).group(3)]),
                batch_dp(Val::Nil, &[remove(&[1]).group(3)]),
            ],
            "store device 1/1 | unlearned_group_idx | remove device 1 | warnings 0",
        ),
        (
            "host tier stores teach",
            vec![batch(&[store(&[1]).medium("CPU").group(3).kind("mla_attention"), remove(&[1]).group(3)])],
            "store host_pinned 1/1, remove device 1 | warnings 0",
        ),
        (
            "disk and external bypass the filter and never teach",
            vec![batch(&[
                store(&[1]).medium("STORAGE").group(3).kind("mamba"),
                store(&[2]).medium("EXTERNAL").group(4).kind("mla_attention"),
                remove(&[2]).group(4),
            ])],
            "store disk 1/1, store external 1/1, unlearned_group_idx | warnings 0",
        ),
    ]);
}

#[test]
fn conversion_never_stops_the_listener() {
    check(&[
        (
            "device store at another block size: applied with no blocks",
            vec![batch(&[sized_store(&[1, 2], 32, 64).medium("GPU")])],
            "store device 0/2 | warnings 1",
        ),
        (
            "offload placeholder: applied with no blocks",
            vec![batch(&[sized_store(&[1], 0, 0).medium("CPU")])],
            "store host_pinned 0/1 | warnings 1",
        ),
        (
            "storage placeholder: applied with no blocks",
            vec![batch(&[sized_store(&[1], 0, 0).medium("STORAGE")])],
            "store disk 0/1 | warnings 1",
        ),
        ("short token_ids: the blocks that fit", vec![batch(&[sized_store(&[1, 2, 3], 16, 40)])], "store device 2/3 | warnings 1"),
        ("extra token_ids are ignored", vec![batch(&[sized_store(&[1], 16, 20)])], "store device 1/1 | warnings 0"),
        ("empty store", vec![batch(&[store(&[])])], "store device 0/0 | warnings 0"),
        (
            "bigram pages need block_size + 1 tokens",
            vec![batch(&[store(&[1]).with("token_ids", Val::Pairs(16)), store(&[2]).with("token_ids", Val::Pairs(15))])],
            "store device 1/1, store device 0/1 | warnings 1",
        ),
        (
            "one warning per event, one counter for every kind, never reset",
            vec![
                batch(&[sized_store(&[1, 2], 32, 64), sized_store(&[3], 0, 0).medium("CPU")]),
                batch(&[sized_store(&[4, 5, 6], 16, 20), clear(), sized_store(&[7], 8, 8)]),
            ],
            "store device 0/2, store host_pinned 0/1 | store device 1/3, clear, store device 0/1 | warnings 4",
        ),
        (
            "self-referencing: parent among the hashes",
            vec![batch(&[store(&[1, 2]).parent(2)])],
            "self_referencing_store device | warnings 0",
        ),
        ("self-referencing: a hash twice", vec![batch(&[store(&[3, 3])])], "self_referencing_store device | warnings 0"),
        (
            "self-reference before the block-size check",
            vec![batch(&[sized_store(&[4], 0, 0).medium("CPU").parent(4)])],
            "self_referencing_store host_pinned | warnings 0",
        ),
    ]);
}
