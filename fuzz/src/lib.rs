//! Shared by the fuzz targets: how one fuzz input is split into several byte strings.
//!
//! The `frames` target reads its input as a list of ZMQ frames and `decode_batch` as a list of
//! payloads pushed one after another into one normalizer source. Both split on [`SEPARATOR`]:
//! four `0xc1` bytes, the one byte value msgpack never uses as a type marker, which no fixture
//! payload contains, so a seed made of one whole payload stays one piece. `fuzz/seeds.py` writes
//! seeds in this format.

/// Separates the pieces of a multi-part fuzz input.
pub const SEPARATOR: &[u8] = &[0xc1, 0xc1, 0xc1, 0xc1];

/// Splits `data` on [`SEPARATOR`]; at most `max` pieces (the last one keeps the rest).
pub fn split(data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() + 1 < max {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(i) => {
                out.push(&rest[..i]);
                rest = &rest[i + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    out.push(rest);
    out
}
