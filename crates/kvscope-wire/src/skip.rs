//! Msgpack walks that build nothing.
//!
//! `token_ids` is most of a payload's bytes and the normalizer only needs its length, so
//! [`count_token_ids`] walks it in a tight loop instead of reading each item as a value.
//! [`skip_value`] walks any value without building it: it is the floor a decoder of this format
//! can approach, and the benchmarks compare against it.

/// Where and why a raw walk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkipError {
    pub offset: usize,
    pub truncated: bool,
    pub message: String,
    /// Index of the offending item inside the array being counted, if any.
    pub item: Option<u32>,
}

fn truncated(offset: usize, item: Option<u32>) -> SkipError {
    SkipError { offset, truncated: true, message: "unexpected end of input".to_owned(), item }
}

/// Reads the header of a msgpack array at `pos`: `(len, first_element_pos)`.
fn array_header(buf: &[u8], pos: usize) -> Result<Option<(usize, usize)>, SkipError> {
    let Some(&m) = buf.get(pos) else { return Err(truncated(pos, None)) };
    let be = |n: usize| -> Result<usize, SkipError> {
        let bytes = buf.get(pos + 1..pos + 1 + n).ok_or_else(|| truncated(pos, None))?;
        Ok(bytes.iter().fold(0usize, |acc, &b| (acc << 8) | b as usize))
    };
    Ok(match m {
        0x90..=0x9f => Some(((m & 0x0f) as usize, pos + 1)),
        0xdc => Some((be(2)?, pos + 3)),
        0xdd => Some((be(4)?, pos + 5)),
        _ => None,
    })
}

/// Size in bytes of the integer at `pos`, or `None` if the value there is not an integer.
#[inline(always)]
fn int_len(marker: u8) -> Option<usize> {
    match marker {
        0x00..=0x7f | 0xe0..=0xff => Some(1),
        0xcc | 0xd0 => Some(2),
        0xcd | 0xd1 => Some(3),
        0xce | 0xd2 => Some(5),
        0xcf | 0xd3 => Some(9),
        _ => None,
    }
}

/// A short name for the msgpack type a marker starts, for "found ..." messages.
pub(crate) fn marker_name(marker: u8) -> &'static str {
    match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => "int",
        0x80..=0x8f | 0xde | 0xdf => "map",
        0x90..=0x9f | 0xdc | 0xdd => "array",
        0xa0..=0xbf | 0xd9..=0xdb => "str",
        0xc0 => "nil",
        0xc2 | 0xc3 => "bool",
        0xc4..=0xc6 => "bin",
        0xca | 0xcb => "float",
        0xc7..=0xc9 | 0xd4..=0xd8 => "ext",
        0xc1 => "reserved marker 0xc1",
    }
}

/// What [`count_token_ids`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountedTokenIds {
    /// Items (pairs for bigram pages).
    pub count: u32,
    pub is_bigram: bool,
    /// Where the array ends.
    pub end: usize,
    /// Some id is negative or does not fit u32, or some bigram item is not a pair.
    pub outside_u32: bool,
}

/// True for the int markers whose value may fall outside `0..=u32::MAX`: `uint64`, the signed
/// ones and negative fixints. The others (positive fixint, `uint8/16/32`) always fit.
fn maybe_outside_u32(marker: u8) -> bool {
    marker >= 0xcf
}

/// Whether the int at `at` (marker `m`, already bounds-checked by the caller's walk) fits u32.
fn int_fits_u32(buf: &[u8], at: usize, m: u8) -> bool {
    let be = |n: usize| buf[at + 1..at + 1 + n].iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    match m {
        0xcf => be(8) <= u64::from(u32::MAX),
        0xd0 => buf[at + 1] & 0x80 == 0,
        0xd1 | 0xd2 => buf[at + 1] & 0x80 == 0,
        0xd3 => (be(8) as i64) >= 0 && be(8) <= u64::from(u32::MAX),
        0xe0..=0xff => false,
        _ => true,
    }
}

/// The precise check behind [`CountedTokenIds::outside_u32`], run only when a suspect marker was
/// seen: walks an array the count already validated.
fn any_outside_u32(buf: &[u8], mut at: usize, len: usize, is_bigram: bool) -> bool {
    for _ in 0..len {
        if is_bigram {
            let Ok(Some((pair_len, mut inner))) = array_header(buf, at) else { return true };
            let mut outside = pair_len != 2;
            for _ in 0..pair_len {
                let m = buf[inner];
                outside |= !int_fits_u32(buf, inner, m);
                inner += int_len(m).unwrap_or(1);
            }
            if outside {
                return true;
            }
            at = inner;
        } else {
            let m = buf[at];
            if !int_fits_u32(buf, at, m) {
                return true;
            }
            at += int_len(m).unwrap_or(1);
        }
    }
    false
}

/// The int at `at` as a u32, and its encoded length; `None` when it is not an int, does not fit
/// u32, or runs past the end. The markers engines write come first.
#[inline(always)]
fn u32_at(buf: &[u8], at: usize) -> Option<(u32, usize)> {
    let m = *buf.get(at)?;
    let be = |n: usize| buf.get(at + 1..at + 1 + n).map(|b| b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)));
    let (value, len): (i128, usize) = match m {
        0x00..=0x7f => return Some((u32::from(m), 1)),
        0xcc => (be(1)?.into(), 2),
        0xcd => (be(2)?.into(), 3),
        0xce => return Some((be(4)? as u32, 5)),
        0xcf => (be(8)?.into(), 9),
        0xd0 => (i128::from(be(1)? as u8 as i8), 2),
        0xd1 => (i128::from(be(2)? as u16 as i16), 3),
        0xd2 => (i128::from(be(4)? as u32 as i32), 5),
        0xd3 => (i128::from(be(8)? as i64), 9),
        // Negative fixints and everything that is not an int.
        _ => return None,
    };
    Some((u32::try_from(value).ok()?, len))
}

/// The ids of an encoded `token_ids` array (`array` holds exactly that value), as the router
/// hashes them: for SGLang bigram pages, the first id of each pair and the last pair's second.
/// `None` when an id is not a u32 or a bigram item is not a pair. One tight loop, no per-item
/// value decode: on large batches it is most of the work of computing tokens hashes.
pub(crate) fn token_id_values(array: &[u8], is_bigram: bool) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    read_token_ids(array, is_bigram, &mut out)?;
    Some(out)
}

/// As [`token_id_values`], each id as 4 little-endian bytes: what Dynamo's `tokens_hash`
/// hashes, written without a vector of ids in between.
pub(crate) fn token_id_le_bytes(array: &[u8], is_bigram: bool) -> Option<Vec<u8>> {
    let mut out = LeBytes(Vec::new());
    read_token_ids(array, is_bigram, &mut out)?;
    Some(out.0)
}

/// Where [`read_token_ids`] writes the ids.
trait IdSink {
    fn reserve(&mut self, ids: usize);
    fn push(&mut self, id: u32);
}

impl IdSink for Vec<u32> {
    fn reserve(&mut self, ids: usize) {
        self.reserve_exact(ids);
    }
    #[inline]
    fn push(&mut self, id: u32) {
        Vec::push(self, id);
    }
}

/// Ids as little-endian bytes.
struct LeBytes(Vec<u8>);

impl IdSink for LeBytes {
    fn reserve(&mut self, ids: usize) {
        self.0.reserve_exact(4 * ids);
    }
    #[inline]
    fn push(&mut self, id: u32) {
        self.0.extend_from_slice(&id.to_le_bytes());
    }
}

/// The one loop behind [`token_id_values`] and [`token_id_le_bytes`].
#[inline]
fn read_token_ids(array: &[u8], is_bigram: bool, out: &mut impl IdSink) -> Option<()> {
    let (len, mut at) = array_header(array, 0).ok()??;
    if len > array.len() - at {
        return None;
    }
    out.reserve(len + usize::from(is_bigram));
    if !is_bigram {
        let mut i = 0;
        // While 8 bytes are left, an id an engine writes is read without a branch on its
        // marker: the 8 bytes from the marker, read by `common_id` (13% of the engine worker's
        // time on Kimi-K3 with the router side on, before `count_token_ids_le` wrote the ids).
        while i < len && at + 8 <= array.len() {
            let n = COMMON_ID_LEN[usize::from(array[at])];
            if n == 0 {
                break;
            }
            let mut word = [0u8; 8];
            word.copy_from_slice(&array[at..at + 8]);
            out.push(common_id(u64::from_le_bytes(word), n));
            at += usize::from(n);
            i += 1;
        }
        // The last few ids, and any id of another marker.
        for _ in i..len {
            let (id, n) = u32_at(array, at)?;
            out.push(id);
            at += n;
        }
        return Some(());
    }
    let mut last_second = None;
    for _ in 0..len {
        let (2, inner) = array_header(array, at).ok()?? else { return None };
        let (first, n) = u32_at(array, inner)?;
        let (second, m) = u32_at(array, inner + n)?;
        out.push(first);
        last_second = Some(second);
        at = inner + n + m;
    }
    if let Some(second) = last_second {
        out.push(second);
    }
    Some(())
}

/// The little-endian bytes of every store's `token_ids` a decode read, written during the walk
/// that counts them ([`count_token_ids_le`]), so that whoever hashes them next (the router's
/// tokens hashes) does not walk the same arrays a second time. Filled only by decodes that ask
/// for it ([`crate::Decoded::with_token_bytes`]); a store whose ids are bigram pairs or may lie
/// outside u32 has none here and is read from the payload as before.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBytes {
    bytes: Vec<u8>,
    /// (where the array starts in the payload, its bytes here), in payload order.
    spans: Vec<(u32, std::ops::Range<u32>)>,
}

impl TokenBytes {
    /// The ids of `ids` as [`crate::TokenIds::le_bytes`] would return them, when this decode
    /// wrote them.
    pub fn get(&self, ids: &crate::TokenIds) -> Option<&[u8]> {
        let at = self.spans.binary_search_by_key(&ids.span.start, |(start, _)| *start).ok()?;
        let range = &self.spans[at].1;
        self.bytes.get(range.start as usize..range.end as usize)
    }

    /// Bytes held, for memory accounting.
    pub fn held_bytes(&self) -> usize {
        self.bytes.len() + self.spans.len() * std::mem::size_of::<(u32, std::ops::Range<u32>)>()
    }
}

/// [`count_token_ids`], also writing the ids into `out` as little-endian bytes when the array
/// holds plain ids an engine writes (the common case). One walk instead of a count and, later,
/// a read of the same bytes.
pub(crate) fn count_token_ids_le(buf: &[u8], pos: usize, out: &mut TokenBytes) -> Result<CountedTokenIds, SkipError> {
    let Ok(Some((len, first))) = array_header(buf, pos) else { return count_token_ids(buf, pos) };
    if len > buf.len() - first || (len > 0 && matches!(buf[first], 0x90..=0x9f | 0xdc | 0xdd)) {
        return count_token_ids(buf, pos);
    }
    // Written through a local vector: through `out` its length would go back to memory on
    // every id (measured 3x slower).
    let mut bytes = std::mem::take(&mut out.bytes);
    let start = bytes.len();
    bytes.reserve(4 * len);
    let (mut at, mut i) = (first, 0);
    // The loop of `read_token_ids`, over the ids whose 8 bytes from the marker are in the payload
    // (one function for both measured 3% slower on Kimi-K3).
    while i < len && at + 8 <= buf.len() {
        let n = COMMON_ID_LEN[usize::from(buf[at])];
        if n == 0 {
            break;
        }
        let mut word = [0u8; 8];
        word.copy_from_slice(&buf[at..at + 8]);
        bytes.extend_from_slice(&common_id(u64::from_le_bytes(word), n).to_le_bytes());
        at += usize::from(n);
        i += 1;
    }
    // The rest (the last few ids, any other marker, any error) as the count reads them; its
    // error names the item in the whole array.
    let walked = walk_ints(buf, at, len - i).map_err(|mut e| {
        e.item = e.item.map(|item| item + i as u32);
        e
    });
    let (end, suspect) = match walked {
        Ok(walked) => walked,
        Err(e) => {
            bytes.truncate(start);
            out.bytes = bytes;
            return Err(e);
        }
    };
    let outside_u32 = suspect && any_outside_u32(buf, first, len, false);
    let mut complete = !suspect;
    while complete && at < end {
        match u32_at(buf, at) {
            Some((id, n)) => {
                bytes.extend_from_slice(&id.to_le_bytes());
                at += n;
            }
            None => complete = false,
        }
    }
    if complete {
        out.spans.push((pos as u32, start as u32..bytes.len() as u32));
    } else {
        bytes.truncate(start);
    }
    out.bytes = bytes;
    Ok(CountedTokenIds { count: len as u32, is_bigram: false, end, outside_u32 })
}

/// The id of common encoded length `n` (1, 2, 3 or 5) whose marker is the low byte of `word`,
/// the 8 bytes from the marker read little-endian. A fixint is the marker itself; the others
/// are the big-endian bytes after it, swapped as one u32 and shifted down to their width (a u32
/// swap is one instruction natively and a few in wasm, where a u64 swap is many more).
#[inline(always)]
fn common_id(word: u64, n: u8) -> u32 {
    let after = ((word >> 8) as u32).swap_bytes() >> ID_SHIFT[usize::from(n)];
    if n == 1 { (word & 0x7f) as u32 } else { after }
}

/// How far [`common_id`] shifts the 4 bytes after a marker, by encoded length.
const ID_SHIFT: [u32; 6] = [0, 0, 24, 16, 0, 0];

/// Counts the items of a `token_ids` array at `pos` without building them.
///
/// Items are ints, or pairs of ints (SGLang bigram pages), never a mix.
pub(crate) fn count_token_ids(buf: &[u8], pos: usize) -> Result<CountedTokenIds, SkipError> {
    let Some((len, first)) = array_header(buf, pos)? else {
        let found = marker_name(buf[pos]);
        return Err(SkipError {
            offset: pos,
            truncated: false,
            message: format!("expected array of token ids, found {found}"),
            item: None,
        });
    };
    // A length prefix is a claim, not a fact: every item takes at least one byte.
    if len > buf.len() - first {
        return Err(truncated(pos, None));
    }
    let is_bigram = len > 0 && matches!(buf[first], 0x90..=0x9f | 0xdc | 0xdd);
    let (end, suspect) = if is_bigram { walk_pairs(buf, first, len)? } else { walk_ints(buf, first, len)? };
    // The values are read only if some marker is suspect (never, for ids an engine writes).
    let outside_u32 = suspect && any_outside_u32(buf, first, len, is_bigram);
    Ok(CountedTokenIds { count: len as u32, is_bigram, end, outside_u32 })
}

/// The length of an int whose marker an engine writes for a token id (positive fixint,
/// uint8/16/32), by marker; 0 for every other marker.
const COMMON_ID_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut m = 0;
    while m < 0x80 {
        t[m] = 1;
        m += 1;
    }
    t[0xcc] = 2;
    t[0xcd] = 3;
    t[0xce] = 5;
    t
};

/// The hot loop: `len` ints from `at`. Returns where they end and whether a marker may hold an id
/// outside u32.
#[inline(always)]
fn walk_ints(buf: &[u8], mut at: usize, len: usize) -> Result<(usize, bool), SkipError> {
    let mut suspect = false;
    for i in 0..len {
        let Some(&m) = buf.get(at) else {
            // The previous id ran past the end, or this one is missing.
            return Err(if at > buf.len() { truncated(buf.len(), Some(i as u32 - 1)) } else { truncated(at, Some(i as u32)) });
        };
        // The markers an engine writes (positive fixint, uint8/16/32) come first; the others,
        // which may hold an id outside u32, take a second match that also sets the flag, so the
        // common path does no more work than counting. (A table lookup instead measured 10%
        // slower on Kimi-K3's prompts, whose ids are mostly uint16: the branches predict well.)
        let n = match m {
            0x00..=0x7f => 1,
            0xcc => 2,
            0xcd => 3,
            0xce => 5,
            _ => match int_len(m) {
                Some(n) => {
                    suspect = true;
                    n
                }
                None => {
                    return Err(SkipError {
                        offset: at,
                        truncated: false,
                        message: format!("expected int token id, found {}", marker_name(m)),
                        item: Some(i as u32),
                    });
                }
            },
        };
        at += n;
    }
    if at > buf.len() {
        return Err(truncated(buf.len(), Some(len as u32 - 1)));
    }
    Ok((at, suspect))
}

/// `len` `[int, int]` pairs from `at` (SGLang bigram pages; rare, so not tuned). A pair of
/// another length is counted but suspect.
fn walk_pairs(buf: &[u8], mut at: usize, len: usize) -> Result<(usize, bool), SkipError> {
    let mut suspect = false;
    for i in 0..len {
        let item = Some(i as u32);
        let Some(&m) = buf.get(at) else { return Err(truncated(at, item)) };
        let Some((pair_len, mut inner)) = array_header(buf, at).map_err(|e| SkipError { item, ..e })? else {
            return Err(SkipError {
                offset: at,
                truncated: false,
                message: format!("expected [int, int] token pair, found {}", marker_name(m)),
                item,
            });
        };
        for _ in 0..pair_len {
            let Some(&im) = buf.get(inner) else { return Err(truncated(inner, item)) };
            let Some(n) = int_len(im) else {
                return Err(SkipError {
                    offset: inner,
                    truncated: false,
                    message: format!("expected int in token pair, found {}", marker_name(im)),
                    item,
                });
            };
            suspect |= maybe_outside_u32(im);
            inner += n;
        }
        suspect |= pair_len != 2;
        at = inner;
        if at > buf.len() {
            return Err(truncated(buf.len(), item));
        }
    }
    Ok((at, suspect))
}

/// Walks one msgpack value at `pos` and returns where it ends, building nothing.
///
/// Depth is capped at `max_depth`; every length prefix is checked against the bytes left.
pub fn skip_value(buf: &[u8], pos: usize, max_depth: usize) -> Result<usize, String> {
    skip_raw(buf, pos, max_depth).map_err(|e| match e.kind {
        RawSkipKind::Truncated => format!("byte {}: unexpected end of input", e.offset),
        RawSkipKind::TooDeep => format!("byte {}: nesting deeper than {max_depth}", e.offset),
        RawSkipKind::Reserved => format!("byte {}: reserved marker 0xc1", e.offset),
    })
}

/// Why [`skip_raw`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawSkipKind {
    Truncated,
    TooDeep,
    Reserved,
}

/// Where and why [`skip_raw`] stopped; no message is built, the decoder writes its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawSkipError {
    pub kind: RawSkipKind,
    pub offset: usize,
}

/// Containers tracked on the stack; deeper walks (only callers passing a larger `max_depth` can
/// reach them) spill into a `Vec`.
const INLINE_DEPTH: usize = 64;

/// [`skip_value`] without the message: the decoder skips every unknown key's value with it, so
/// it allocates nothing (the stack of open containers lives in an array).
#[inline]
pub(crate) fn skip_raw(buf: &[u8], pos: usize, max_depth: usize) -> Result<usize, RawSkipError> {
    // An explicit stack of "values still to skip" keeps deep nesting off the call stack.
    let mut inline = [0usize; INLINE_DEPTH];
    let mut spill: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut at = pos;
    let mut left = 1usize;
    let fail = |kind, offset| Err(RawSkipError { kind, offset });
    loop {
        while left == 0 {
            if depth == 0 {
                return Ok(at);
            }
            depth -= 1;
            left = if depth < INLINE_DEPTH { inline[depth] } else { spill.pop().unwrap_or(0) };
        }
        left -= 1;
        let Some(&m) = buf.get(at) else { return fail(RawSkipKind::Truncated, at) };
        let take = |n: usize, at: usize| -> Result<usize, RawSkipError> {
            let bytes = buf.get(at + 1..at + 1 + n).ok_or(RawSkipError { kind: RawSkipKind::Truncated, offset: at })?;
            Ok(bytes.iter().fold(0usize, |acc, &b| (acc << 8) | b as usize))
        };
        let (header, body, children) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (1, 0, 0),
            0xcc | 0xd0 => (2, 0, 0),
            0xcd | 0xd1 => (3, 0, 0),
            0xce | 0xd2 | 0xca => (5, 0, 0),
            0xcf | 0xd3 | 0xcb => (9, 0, 0),
            0xa0..=0xbf => (1, (m & 0x1f) as usize, 0),
            0xd9 | 0xc4 => (2, take(1, at)?, 0),
            0xda | 0xc5 => (3, take(2, at)?, 0),
            0xdb | 0xc6 => (5, take(4, at)?, 0),
            0xd4 => (2, 1, 0),
            0xd5 => (2, 2, 0),
            0xd6 => (2, 4, 0),
            0xd7 => (2, 8, 0),
            0xd8 => (2, 16, 0),
            0xc7 => (3, take(1, at)?, 0),
            0xc8 => (4, take(2, at)?, 0),
            0xc9 => (6, take(4, at)?, 0),
            0x90..=0x9f => (1, 0, (m & 0x0f) as usize),
            0xdc => (3, 0, take(2, at)?),
            0xdd => (5, 0, take(4, at)?),
            0x80..=0x8f => (1, 0, 2 * (m & 0x0f) as usize),
            0xde => (3, 0, 2 * take(2, at)?),
            0xdf => (5, 0, 2 * take(4, at)?),
            0xc1 => return fail(RawSkipKind::Reserved, at),
        };
        let end = at + header + body;
        if end > buf.len() || children > buf.len() - end.min(buf.len()) {
            return fail(RawSkipKind::Truncated, at);
        }
        at = end;
        if children > 0 {
            if depth + 1 >= max_depth {
                return fail(RawSkipKind::TooDeep, at);
            }
            if depth < INLINE_DEPTH {
                inline[depth] = left;
            } else {
                spill.push(left);
            }
            depth += 1;
            left = children;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_id_values_read_every_int_marker_that_fits_u32() {
        // [1, 200 (u8), 300 (u16), 70000 (u32), 5 (u64), 6 (i8), 7 (i16), 8 (i32), 9 (i64)]
        let ints = [
            0x99, 0x01, 0xcc, 200, 0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70, 0xcf, 0, 0, 0, 0, 0, 0, 0, 5, 0xd0, 6, 0xd1, 0, 7, 0xd2,
            0, 0, 0, 8, 0xd3, 0, 0, 0, 0, 0, 0, 0, 9,
        ];
        assert_eq!(token_id_values(&ints, false), Some(vec![1, 200, 300, 70000, 5, 6, 7, 8, 9]));
        // [[1, 2], [3, 4]] -> 1, 3, 4
        assert_eq!(token_id_values(&[0x92, 0x92, 0x01, 0x02, 0x92, 0x03, 0x04], true), Some(vec![1, 3, 4]));
        assert_eq!(token_id_values(&[0x90], false), Some(vec![]));
    }

    #[test]
    fn token_id_values_read_long_mixed_prompts_as_the_plain_loop_does() {
        // Ids of every common width in an unpredictable order, then a u64 and an i8 marker in
        // the middle (the table's fast loop stops there) and a tail shorter than 8 bytes.
        let mut ids: Vec<u64> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ids.push(match x % 4 {
                0 => x % 0x80,
                1 => 0x80 + x % 0x80,
                2 => 0x100 + x % 0xff00,
                _ => 0x1_0000 + x % 0xfffe_ffff,
            });
        }
        let mut buf = vec![0xdd];
        buf.extend_from_slice(&(ids.len() as u32 + 2).to_be_bytes());
        let int = |buf: &mut Vec<u8>, id: u64| match id {
            0..=0x7f => buf.push(id as u8),
            0x80..=0xff => buf.extend_from_slice(&[0xcc, id as u8]),
            0x100..=0xffff => {
                buf.push(0xcd);
                buf.extend_from_slice(&(id as u16).to_be_bytes());
            }
            _ => {
                buf.push(0xce);
                buf.extend_from_slice(&(id as u32).to_be_bytes());
            }
        };
        for (i, &id) in ids.iter().enumerate() {
            if i == 1000 {
                buf.push(0xcf);
                buf.extend_from_slice(&7u64.to_be_bytes());
                buf.extend_from_slice(&[0xd0, 9]);
            }
            int(&mut buf, id);
        }
        let mut expected: Vec<u32> = ids.iter().map(|&id| id as u32).collect();
        expected.splice(1000..1000, [7, 9]);
        assert_eq!(token_id_values(&buf, false), Some(expected.clone()));
        let le: Vec<u8> = expected.iter().flat_map(|id| id.to_le_bytes()).collect();
        assert_eq!(token_id_le_bytes(&buf, false), Some(le));
        let counted = count_token_ids(&buf, 0).unwrap();
        assert_eq!((counted.count as usize, counted.end, counted.outside_u32), (expected.len(), buf.len(), false));
    }

    #[test]
    fn token_id_values_refuse_what_is_not_a_u32_id() {
        for (what, buf, bigram) in [
            ("negative fixint", &[0x91, 0xff][..], false),
            ("negative i8", &[0x91, 0xd0, 0x80], false),
            ("u64 past u32", &[0x91, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0], false),
            ("a string", &[0x91, 0xa1, b'x'], false),
            ("cut short", &[0x92, 0x01], false),
            ("u16 cut short", &[0x91, 0xcd, 0x01], false),
            ("a length beyond the input", &[0xdc, 0xff, 0xff, 0x01], false),
            ("a triple on a bigram page", &[0x91, 0x93, 1, 2, 3], true),
            ("not an array", &[0x01], false),
        ] {
            assert_eq!(token_id_values(buf, bigram), None, "{what}");
        }
    }

    #[test]
    fn counts_ints_and_pairs() {
        let counted = |buf: &[u8]| {
            let c = count_token_ids(buf, 0).unwrap();
            (c.count, c.is_bigram, c.end, c.outside_u32)
        };
        // [1, 300, -1]
        let ints = [0x93, 0x01, 0xcd, 0x01, 0x2c, 0xff];
        assert_eq!(counted(&ints), (3, false, 6, true));
        // [[1, 2], [3, 4]]
        let pairs = [0x92, 0x92, 0x01, 0x02, 0x92, 0x03, 0x04];
        assert_eq!(counted(&pairs), (2, true, 7, false));
        assert_eq!(counted(&[0x90]), (0, false, 1, false));
    }

    #[test]
    fn an_id_cut_short_is_reported_as_that_item_at_the_end_of_the_input() {
        // [1, uint16 (one byte of two), ...]: item 1 runs past the end.
        let cut = [0x93, 0x01, 0xcd, 0x01];
        let err = count_token_ids(&cut, 0).unwrap_err();
        assert_eq!((err.offset, err.item, err.truncated), (4, Some(1), true));
        // The last item cut short.
        let last = [0x92, 0x01, 0xce, 0x00];
        let err = count_token_ids(&last, 0).unwrap_err();
        assert_eq!((err.offset, err.item, err.truncated), (4, Some(1), true));
        // An item missing altogether (the length prefix passes its check: 4 bytes for 3 ids).
        let missing = [0x93, 0xcd, 0x01, 0x00, 0x02];
        let err = count_token_ids(&missing, 0).unwrap_err();
        assert_eq!((err.offset, err.item, err.truncated), (5, Some(2), true));
    }

    #[test]
    fn ids_outside_u32_are_flagged_by_value_not_by_marker() {
        let outside = |buf: &[u8]| count_token_ids(buf, 0).unwrap().outside_u32;
        // int8 5 and int64 7 fit; uint32 max fits.
        assert!(!outside(&[0x93, 0xd0, 0x05, 0xd3, 0, 0, 0, 0, 0, 0, 0, 7, 0xce, 0xff, 0xff, 0xff, 0xff]));
        // uint64 2^32 does not.
        assert!(outside(&[0x91, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0]));
        // int16 -1 does not.
        assert!(outside(&[0x91, 0xd1, 0xff, 0xff]));
        // A bigram item of three ints is not a pair.
        assert!(outside(&[0x91, 0x93, 0x01, 0x02, 0x03]));
        assert!(outside(&[0x91, 0x92, 0x01, 0xff]));
    }

    #[test]
    fn a_lying_length_prefix_is_truncation_not_an_allocation() {
        let lie = [0xdd, 0xff, 0xff, 0xff, 0xff, 0x01];
        let err = count_token_ids(&lie, 0).unwrap_err();
        assert!(err.truncated);
        assert_eq!(err.offset, 0);
        assert_eq!(skip_value(&lie, 0, 16).unwrap_err(), "byte 0: unexpected end of input");
    }

    /// The walk that writes ids out counts what [`count_token_ids`] counts and fails where it
    /// fails, on every prefix; it writes exactly the ids [`token_id_le_bytes`] reads, and none
    /// for an array of bigram pairs or with a marker engines do not write for ids (a negative
    /// id, a wide uint64, an int16 that fits), which are left to that read.
    #[test]
    fn the_writing_walk_counts_fails_and_writes_as_the_count_and_the_read_do() {
        let mut plain = vec![0xdc, 0, 40];
        for i in 0..40u32 {
            match i % 4 {
                0 => plain.push(i as u8),
                1 => plain.extend([0xcc, 200]),
                2 => plain.extend([0xcd, 0x01, i as u8]),
                _ => plain.extend([0xce, 0x00, 0x02, 0x00, i as u8]),
            }
        }
        let mut wide = plain.clone();
        wide.extend([0xcf, 0, 0, 0, 1, 0, 0, 0, 0]);
        wide[2] = 41;
        let mut negative = plain.clone();
        negative.push(0xff);
        negative[2] = 41;
        let mut fits = plain.clone();
        fits.extend([0xd1, 0x00, 0x07]);
        fits[2] = 41;
        let bigram = [0x93, 0x92, 0x01, 0x02, 0x92, 0x03, 0x04, 0x92, 0x05, 0x06];
        for (array, writes) in [(&plain[..], true), (&wide, false), (&negative, false), (&fits, false), (&bigram, false)] {
            for cut in 0..=array.len() {
                let bytes = &array[..cut];
                let mut out = TokenBytes::default();
                let written = count_token_ids_le(bytes, 0, &mut out);
                assert_eq!(written, count_token_ids(bytes, 0), "cut at {cut} of {array:x?}");
                let read = (writes && written.is_ok()).then(|| token_id_le_bytes(bytes, false)).flatten();
                let ids = crate::TokenIds { span: 0..cut as u32, ..crate::TokenIds::default() };
                assert_eq!(out.get(&ids), read.as_deref(), "cut at {cut} of {array:x?}");
            }
        }
    }

    #[test]
    fn a_string_among_tokens_names_its_offset() {
        let bad = [0x92, 0x01, 0xa1, b'x'];
        let err = count_token_ids(&bad, 0).unwrap_err();
        assert_eq!((err.offset, err.item, err.message.as_str()), (2, Some(1), "expected int token id, found str"));
    }

    #[test]
    fn skip_walks_nested_values_and_caps_depth() {
        // {"a": [1, {"b": nil}]}
        let v = [0x81, 0xa1, b'a', 0x92, 0x01, 0x81, 0xa1, b'b', 0xc0];
        assert_eq!(skip_value(&v, 0, 16).unwrap(), v.len());
        let deep = vec![0x91; 100];
        assert!(skip_value(&deep, 0, 16).unwrap_err().contains("nesting deeper than 16"));
    }
}
