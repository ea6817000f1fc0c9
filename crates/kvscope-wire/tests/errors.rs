//! Malformed payloads: every row asserts the whole message, offset and path included.
//!
//! Rows are built from msgpack written by hand so that each byte offset can be checked against
//! the layout in the row's comment.

use kvscope_wire::{DecodeErrorKind, decode_batch};

/// `[1.5, [<event>], 0]`: the event starts at byte 11 (1 array + 9 float + 1 array header).
fn batch_with(event: &[u8]) -> Vec<u8> {
    let mut out = vec![0x93, 0xcb];
    out.extend_from_slice(&1.5f64.to_be_bytes());
    out.push(0x91);
    out.extend_from_slice(event);
    out.push(0x00);
    out
}

fn str8(s: &str) -> Vec<u8> {
    let mut out = vec![0xa0 | s.len() as u8];
    out.extend_from_slice(s.as_bytes());
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn rows() -> Vec<(&'static str, Vec<u8>, &'static str, DecodeErrorKind)> {
    let stored = str8("BlockStored");
    vec![
        (
            "top level is a string",
            str8("x"),
            "byte 0: expected array [ts, events, dp_rank] or map for the batch, found string \"x\"",
            DecodeErrorKind::TypeMismatch,
        ),
        ("batch has one element", vec![0x91, 0x01], "byte 0: batch array ends before events", DecodeErrorKind::MissingField),
        (
            "ts is a string",
            cat(&[&[0x92], &str8("x"), &[0x90]]),
            "byte 1: expected number for ts, found string \"x\" (ts)",
            DecodeErrorKind::TypeMismatch,
        ),
        (
            "event is a string",
            batch_with(&str8("x")),
            "byte 11: expected array or map for event, found string \"x\" (events[0])",
            DecodeErrorKind::TypeMismatch,
        ),
        (
            // 11: fixarray(6), 12-23 tag, 24 fixarray(2), 25 hash 1, 26 "h"
            "a hash is a string",
            batch_with(&cat(&[&[0x96], &stored, &[0x92, 0x01], &str8("h"), &[0xc0, 0x90, 0x10, 0xc0]])),
            "byte 26: expected block hash (int or 16/32-byte bin), found string \"h\" (events[0].block_hashes[1])",
            DecodeErrorKind::TypeMismatch,
        ),
        (
            "a bin hash of 7 bytes",
            batch_with(&cat(&[&[0x96], &stored, &[0x91, 0xc4, 0x07], b"1234567", &[0xc0, 0x90, 0x10, 0xc0]])),
            "byte 25: expected a 16- or 32-byte bin block hash, found 7 bytes (events[0].block_hashes[0])",
            DecodeErrorKind::InvalidValue,
        ),
        (
            // 24 hashes [1], 26 parent nil, 27 fixarray(2), 28 token 1, 29 "t"
            "a token id is a string",
            batch_with(&cat(&[&[0x96], &stored, &[0x91, 0x01, 0xc0, 0x92, 0x01], &str8("t"), &[0x10, 0xc0]])),
            "byte 29: expected int token id, found str (events[0].token_ids[1])",
            DecodeErrorKind::TypeMismatch,
        ),
        (
            "BlockStored array too short",
            batch_with(&cat(&[&[0x93], &stored, &[0x91, 0x01, 0xc0]])),
            "byte 11: BlockStored array has 3 elements; expected at least 5 (tag, block_hashes, parent_block_hash, token_ids, block_size) (events[0])",
            DecodeErrorKind::MissingField,
        ),
        (
            "negative block_size",
            batch_with(&cat(&[&[0x96], &stored, &[0x91, 0x01, 0xc0, 0x90, 0xff, 0xc0]])),
            "byte 28: expected u32 for block_size, found -1 (events[0].block_size)",
            DecodeErrorKind::InvalidValue,
        ),
        (
            "medium is an int",
            batch_with(&cat(&[&[0x97], &stored, &[0x91, 0x01, 0xc0, 0x90, 0x10, 0xc0, 0x05]])),
            "byte 30: expected string or nil for medium, found integer `5` (events[0].medium)",
            DecodeErrorKind::TypeMismatch,
        ),
        (
            "map event without type",
            batch_with(&cat(&[&[0x81], &str8("block_hashes"), &[0x90]])),
            "byte 11: event map has no \"type\" key (events[0])",
            DecodeErrorKind::MissingField,
        ),
        (
            "map BlockStored without block_size",
            batch_with(&cat(&[&[0x83], &str8("type"), &stored, &str8("block_hashes"), &[0x90], &str8("token_ids"), &[0x90]])),
            "byte 11: BlockStored has no block_size (events[0])",
            DecodeErrorKind::MissingField,
        ),
        (
            "events array claims 4 billion items",
            cat(&[&[0x93, 0xcb], &1.5f64.to_be_bytes(), &[0xdd, 0xff, 0xff, 0xff, 0xff]]),
            "byte 15: unexpected end of input (events[0])",
            DecodeErrorKind::Truncated,
        ),
        (
            "tag is not UTF-8",
            batch_with(&[0x92, 0xa2, 0xff, 0xfe, 0x01]),
            "byte 12: string is not valid UTF-8 (events[0][0])",
            DecodeErrorKind::Malformed,
        ),
        ("reserved marker", batch_with(&[0xc1]), "byte 11: reserved msgpack marker 0xc1 (events[0])", DecodeErrorKind::Malformed),
        (
            "nesting in an ignored key",
            batch_with(&cat(&[&[0x82], &str8("type"), &str8("X"), &str8("z"), &[0x91; 60]])),
            "byte 11: nesting deeper than 32 (events[0])",
            DecodeErrorKind::TooDeep,
        ),
    ]
}

#[test]
fn malformed_payloads_name_offset_expectation_and_path() {
    let rows = rows();
    for (name, bytes, message, kind) in &rows {
        let err = decode_batch(bytes).expect_err(name);
        assert_eq!(err.to_string(), *message, "row {name:?}");
        assert_eq!(err.classify(), *kind, "row {name:?}");
    }
    assert_eq!(rows.len(), 16);
}

/// An unknown tag is kept as an event, not an error: the batch around it survives.
#[test]
fn unknown_event_tags_are_kept_not_fatal() {
    let bytes = batch_with(&cat(&[&[0x92], &str8("Other"), &[0x01]]));
    let batch = decode_batch(&bytes).unwrap();
    assert_eq!(batch.events.len(), 1);
    assert!(matches!(&batch.events[0], kvscope_wire::KvEvent::Unknown(u) if u.tag == "Other"));
}
