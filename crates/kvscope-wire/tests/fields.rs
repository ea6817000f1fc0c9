//! Fields kept for consumers that read more of an event than kvscope's own rules do (the
//! `dynamo-1.6.1` policy: cache namespaces, removal kinds, a clear's ownership, token ids that
//! do not fit u32, batches longer than three elements). Each is optional and costs nothing when
//! absent; none of them makes a payload that decoded before fail now, except a known map key
//! whose value has the wrong type (`cache_salt`, `session_id`), like every other known key.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use kvscope_wire::{BatchLayout, DecodeErrorKind, KvEvent, decode_batch};
use rmp::encode::{write_array_len, write_bin, write_f64, write_map_len, write_nil, write_sint, write_str, write_uint};

type Buf = Vec<u8>;

fn s(w: &mut Buf, v: &str) {
    write_str(w, v).unwrap();
}
fn u(w: &mut Buf, v: u64) {
    write_uint(w, v).unwrap();
}

/// `[1.0, [<events>], 0]` around events written by `body`.
fn batch(n: u32, body: impl FnOnce(&mut Buf)) -> Buf {
    let mut w = Buf::new();
    write_array_len(&mut w, 3).unwrap();
    write_f64(&mut w, 1.0).unwrap();
    write_array_len(&mut w, n).unwrap();
    body(&mut w);
    u(&mut w, 0);
    w
}

/// A map-encoded `BlockStored` of hash 1 with 16 token ids, plus `extra` key/value pairs.
fn map_store(w: &mut Buf, extra: u32, rest: impl FnOnce(&mut Buf)) {
    write_map_len(w, 4 + extra).unwrap();
    s(w, "type");
    s(w, "BlockStored");
    s(w, "block_hashes");
    write_array_len(w, 1).unwrap();
    u(w, 1);
    s(w, "token_ids");
    write_array_len(w, 16).unwrap();
    (0..16).for_each(|i| u(w, i));
    s(w, "block_size");
    u(w, 16);
    rest(w);
}

fn stored(bytes: &[u8], i: usize) -> kvscope_wire::BlockStored {
    match &decode_batch(bytes).unwrap().events[i] {
        KvEvent::BlockStored(s) => (**s).clone(),
        other => panic!("expected a store, got {other:?}"),
    }
}

#[test]
fn cache_salt_session_id_and_the_first_blocks_extra_key_strings() {
    let bytes = batch(1, |w| {
        map_store(w, 3, |w| {
            s(w, "cache_salt");
            s(w, "tenant-a");
            s(w, "session_id");
            s(w, "sess-1");
            // [["sql-lora", 7, "dynamo-cache-salt:t", ["h", 3]], nil]
            s(w, "extra_keys");
            write_array_len(w, 2).unwrap();
            write_array_len(w, 4).unwrap();
            s(w, "sql-lora");
            u(w, 7);
            s(w, "dynamo-cache-salt:t");
            write_array_len(w, 2).unwrap();
            s(w, "h");
            u(w, 3);
            write_nil(w).unwrap();
        })
    });
    let st = stored(&bytes, 0);
    assert_eq!(st.cache_salt.as_deref(), Some("tenant-a"));
    assert_eq!(st.session_id.as_deref(), Some("sess-1"));
    assert_eq!(st.extra_key_strings, Some(vec!["sql-lora".to_owned(), "dynamo-cache-salt:t".to_owned()]));

    // Absent, nil, a nil first block, or any other shape: nothing kept, nothing rejected.
    for extra in [None, Some(0xc0u8), Some(0x05)] {
        let bytes = batch(1, |w| {
            map_store(w, u32::from(extra.is_some()), |w| {
                if let Some(b) = extra {
                    s(w, "extra_keys");
                    w.push(b);
                }
            })
        });
        assert_eq!(stored(&bytes, 0).extra_key_strings, None, "{extra:?}");
    }
    let nil_first = batch(1, |w| {
        map_store(w, 1, |w| {
            s(w, "extra_keys");
            write_array_len(w, 1).unwrap();
            write_nil(w).unwrap();
        })
    });
    assert_eq!(stored(&nil_first, 0).extra_key_strings, None);

    // A known key with the wrong type is an error, like every known key.
    let bad = batch(1, |w| {
        map_store(w, 1, |w| {
            s(w, "cache_salt");
            u(w, 3);
        })
    });
    let err = decode_batch(&bad).unwrap_err();
    assert_eq!(err.classify(), DecodeErrorKind::TypeMismatch);
    assert!(err.to_string().ends_with("expected string or nil for cache_salt, found integer `3` (events[0].cache_salt)"), "{err}");
}

/// SGLang writes `{cache_salt: str}` where vLLM writes `lora_name` (array position 7).
#[test]
fn array_position_seven_is_a_lora_name_or_sglangs_cache_salt_map() {
    let positional = |seventh: &dyn Fn(&mut Buf)| {
        batch(1, |w| {
            write_array_len(w, 8).unwrap();
            s(w, "BlockStored");
            write_array_len(w, 1).unwrap();
            u(w, 9);
            write_nil(w).unwrap();
            write_array_len(w, 0).unwrap();
            u(w, 16);
            write_nil(w).unwrap();
            s(w, "GPU");
            seventh(w);
        })
    };
    let lora = stored(&positional(&|w| s(w, "sql-lora")), 0);
    assert_eq!((lora.lora_name.as_deref(), lora.cache_salt.as_deref()), (Some("sql-lora"), None));
    let salted = stored(
        &positional(&|w| {
            write_map_len(w, 2).unwrap();
            s(w, "other");
            u(w, 1);
            s(w, "cache_salt");
            s(w, "tenant-b");
        }),
        0,
    );
    assert_eq!((salted.lora_name.as_deref(), salted.cache_salt.as_deref()), (None, Some("tenant-b")));
}

#[test]
fn removal_kinds_and_a_clears_ownership_from_map_events() {
    let bytes = batch(2, |w| {
        write_map_len(w, 4).unwrap();
        s(w, "type");
        s(w, "BlockRemoved");
        s(w, "block_hashes");
        write_array_len(w, 0).unwrap();
        s(w, "kv_cache_spec_kind");
        s(w, "mamba");
        s(w, "kv_cache_spec_sliding_window");
        u(w, 128);
        write_map_len(w, 2).unwrap();
        s(w, "type");
        s(w, "AllBlocksCleared");
        s(w, "ownership");
        s(w, "kvcr");
    });
    let b = decode_batch(&bytes).unwrap();
    let KvEvent::BlockRemoved(r) = &b.events[0] else { panic!() };
    assert_eq!((r.kv_cache_spec_kind.as_deref(), r.kv_cache_spec_sliding_window), (Some("mamba"), Some(128)));
    assert_eq!(b.events[0].kv_cache_spec_kind(), Some("mamba"));
    assert_eq!(b.events[1].ownership(), Some("kvcr"));
}

#[test]
fn token_ids_outside_u32_are_flagged_not_rejected() {
    let with_ids = |ids: &[i64]| {
        batch(1, |w| {
            write_array_len(w, 5).unwrap();
            s(w, "BlockStored");
            write_array_len(w, 1).unwrap();
            u(w, 1);
            write_nil(w).unwrap();
            write_array_len(w, ids.len() as u32).unwrap();
            ids.iter().for_each(|&id| {
                write_sint(w, id).unwrap();
            });
            u(w, 16);
        })
    };
    assert!(!stored(&with_ids(&[1, 4_294_967_295]), 0).token_ids.outside_u32);
    let wide = stored(&with_ids(&[1, 4_294_967_296]), 0);
    assert!(wide.token_ids.outside_u32);
    assert_eq!(wide.token_ids.count, 2);
    assert!(stored(&with_ids(&[-1]), 0).token_ids.outside_u32);
}

#[test]
fn a_batch_with_more_than_three_elements_says_so() {
    let mut w = Buf::new();
    write_array_len(&mut w, 5).unwrap();
    write_f64(&mut w, 1.0).unwrap();
    write_array_len(&mut w, 0).unwrap();
    u(&mut w, 2);
    write_nil(&mut w).unwrap();
    write_bin(&mut w, b"x").unwrap();
    let b = decode_batch(&w).unwrap();
    assert_eq!((b.layout, b.dp_rank), (BatchLayout::ArrayLonger { len: 5 }, Some(2)));
}
