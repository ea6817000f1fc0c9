//! Decoding: what Dynamo 1.6.1's decoder rejects (whole batches) and accepts, array-encoded events
//! by slot, and where the dp_rank comes from (docs/dynamo-1.6.1.md, sections 1 and 2).

use super::*;

#[test]
fn decoding_rejects_whole_batches() {
    let unknown = "unknown variant `Foo`, expected one of `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `Ignored`";
    check(&[
        (
            "2-element batch",
            vec![raw(|w| {
                w.array(2).f64(1.0).array(0);
            })],
            "lost: invalid length 2, expected a tuple of size 3 | warnings 0",
        ),
        (
            "map batch",
            vec![raw(|w| {
                w.map(3).str("ts").f64(1.0).str("events").array(0).str("data_parallel_rank").uint(0);
            })],
            "lost: invalid type: map, expected a tuple of size 3 | warnings 0",
        ),
        (
            "1-element batch",
            vec![raw(|w| {
                w.array(1).f64(1.0);
            })],
            "lost: invalid length 1, expected a tuple of size 3 | warnings 0",
        ),
        (
            "known keys are type-checked whatever the tag",
            vec![batch(&[remove(&[1]).with("block_size", Val::Nil)])],
            "lost: invalid type: unit value, expected usize | warnings 0",
        ),
        (
            "4-element batch",
            vec![raw(|w| {
                w.array(4).f64(1.0).array(0).uint(0).uint(0);
            })],
            "lost: array had incorrect length, expected 3 | warnings 0",
        ),
        (
            "events are read before the batch length is judged: 2 elements",
            vec![raw(|w| {
                w.array(2).f64(1.0).array(1);
                store(&[]).with("block_hashes", Val::BinHash(16)).write(w);
            })],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "events are read before the batch length is judged: 4 elements",
            vec![raw(|w| {
                w.array(4).f64(1.0).array(1);
                store(&[]).with("block_hashes", Val::BinHash(16)).write(w);
                w.uint(0).uint(0);
            })],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "the first bad value in byte order names the batch's error",
            vec![batch(&[store(&[1]).with("token_ids", Val::Signed(vec![-1])), store(&[]).with("block_hashes", Val::BinHash(32))])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "bin(32) block hash, GPU store before it lost too",
            vec![batch(&[store(&[1]), store(&[]).with("block_hashes", Val::BinHash(32)).medium("CPU")])],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "bin(16) parent",
            vec![batch(&[store(&[1]).with("parent_block_hash", Val::Bin(16))])],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        ("unknown tag fails the batch", vec![batch(&[store(&[1]), tagged("Foo")])], &format!("lost: {unknown} | warnings 0")),
        (
            "missing block_size",
            vec![batch(&[remove(&[1]).with("type", Val::Str("BlockStored")).with("token_ids", Val::Tokens(0))])],
            "lost: missing field `block_size` | warnings 0",
        ),
        (
            "nil block_size",
            vec![batch(&[store(&[1]).with("block_size", Val::Nil)])],
            "lost: invalid type: unit value, expected usize | warnings 0",
        ),
        (
            "negative token id",
            vec![batch(&[store(&[1]).with("token_ids", Val::Signed(vec![-1]))])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "token id beyond u32",
            vec![batch(&[store(&[1]).with("token_ids", Val::Hashes(vec![1 << 32]))])],
            "lost: data did not match any variant of untagged enum KvTokenIds | warnings 0",
        ),
        (
            "a string hash",
            vec![batch(&[store(&[1]).with("parent_block_hash", Val::Str("1"))])],
            "lost: data did not match any variant of untagged enum BlockHashValue | warnings 0",
        ),
        (
            "dp_rank beyond i32",
            vec![batch_dp(Val::U(1 << 31), &[store(&[1])])],
            "lost: invalid value: integer `2147483648`, expected i32 | warnings 0",
        ),
        (
            "negative group_idx",
            vec![batch(&[store(&[1]).with("group_idx", Val::I(-1))])],
            "lost: invalid value: integer `-1`, expected u32 | warnings 0",
        ),
        (
            "non-string medium",
            vec![batch(&[store(&[1]).with("medium", Val::U(3))])],
            "lost: invalid type: integer `3`, expected a string | warnings 0",
        ),
    ]);
}

#[test]
fn decoding_accepts() {
    check(&[
        (
            "trailing bytes after the batch",
            vec![{
                let mut b = batch(&[store(&[1])]);
                b.push(0xc0);
                b
            }],
            "store device 1/1 | warnings 0",
        ),
        ("unknown map keys", vec![batch(&[store(&[1]).with("lookahead_token_ids", Val::Tokens(3))])], "store device 1/1 | warnings 0"),
        (
            "an integer ts",
            vec![raw(|w| {
                w.array(3).uint(5).array(1);
                store(&[1]).write(w);
                w.uint(0);
            })],
            "store device 1/1 | warnings 0",
        ),
        ("nil dp_rank", vec![batch_dp(Val::Nil, &[store(&[1])])], "store device 1/1 | warnings 0"),
        (
            "signed hashes",
            vec![batch(&[store(&[1]).with("block_hashes", Val::Signed(vec![-5])).with("parent_block_hash", Val::I(-6))])],
            "store device 1/1 | warnings 0",
        ),
        ("dp_rank -1 becomes 4294967295", vec![batch_dp(Val::I(-1), &[store(&[1])])], "store device 1/1 | warnings 0"),
    ]);
}

#[test]
fn positional_events_by_slot() {
    // [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys, ...]
    let positional = |tail: &dyn Fn(&mut Writer), n: usize| {
        raw(|w| {
            w.array(3).f64(1.0).array(1).array(9 + n).str("BlockStored").array(1).uint(9).nil().array(16);
            for i in 0..16 {
                w.uint(i);
            }
            w.uint(16).nil().str("GPU").nil().nil();
            tail(w);
            w.uint(0);
        })
    };
    check(&[
        (
            "vLLM 0.22: group, kind, sliding window",
            vec![positional(
                &|w| {
                    w.uint(3).str("mamba").nil();
                },
                3,
            )],
            "non_main_attention_kind | warnings 0",
        ),
        (
            "a nil group with a sliding window reads the window as the group (legacy tail)",
            vec![positional(
                &|w| {
                    w.nil().nil().uint(128);
                },
                3,
            )],
            "unlearned_group_idx | warnings 0",
        ),
        (
            "negative lora_id rejects the batch",
            vec![raw(|w| {
                w.array(3).f64(1.0).array(1).array(6).str("BlockStored").array(1).uint(9).nil().array(0).uint(16).int(-1);
                w.uint(0);
            })],
            "lost: invalid value: integer `-1`, expected u64 | warnings 0",
        ),
        (
            "too short",
            vec![raw(|w| {
                w.array(3).f64(1.0).array(1).array(4).str("BlockStored").array(1).uint(9).nil().array(0);
                w.uint(0);
            })],
            "lost: invalid length 4, expected missing block_size | warnings 0",
        ),
    ]);
}

#[test]
fn dp_rank_comes_from_the_batch_or_the_listener() {
    let mut listener = DynamoListener::new(1, 2, 16);
    let rank = |outcome: BatchOutcome| match outcome {
        BatchOutcome::Events { dp_rank, .. } => dp_rank,
        BatchOutcome::Lost { error } => panic!("{error}"),
    };
    assert_eq!(rank(listener.apply(0, &batch_dp(Val::U(3), &[]))), 3);
    assert_eq!(rank(listener.apply(1, &batch_dp(Val::Nil, &[]))), 2, "nil: the listener's own rank");
    assert_eq!(rank(listener.apply(2, &batch_dp(Val::I(-1), &[]))), u32::MAX, "bit-cast from i32");
}
