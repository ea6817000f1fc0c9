//! A sketch, not product code: the hand-written cursor decoder BENCHMARKS.md proposes for
//! `kvscope-wire` ("Where the time goes"), for map-encoded events in a 3-element batch only.
//!
//! It builds the same `EventBatch` as `kvscope_wire::decode_batch` (asserted equal on every
//! benchmark input) without serde: keys are compared as raw bytes, no `String` is built for keys
//! or tags, and `token_ids` is walked with a 256-entry length table. It exists to put a number on
//! the proposal; it has no error messages and returns `None` for anything it does not expect.
//!
//! `cargo run --release -p kvscope-peer-bench --example decoder_sketch`

// Benchmark code: a failed unwrap aborts the measurement, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use kvscope_wire::*;
use std::hint::black_box;
use std::time::Instant;

#[derive(Debug)]
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> Cur<'a> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    #[inline]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
    #[inline]
    fn be(&mut self, n: usize) -> Option<u64> {
        Some(self.take(n)?.iter().fold(0u64, |a, &x| (a << 8) | x as u64))
    }
    #[inline]
    fn len_hdr(&mut self, m: u8, fix: u8, mask: u8, m16: u8, m32: u8) -> Option<usize> {
        if m & !mask == fix {
            Some((m & mask) as usize)
        } else if m == m16 {
            Some(self.be(2)? as usize)
        } else if m == m32 {
            Some(self.be(4)? as usize)
        } else {
            None
        }
    }
    fn array(&mut self) -> Option<usize> {
        let m = self.byte()?;
        self.len_hdr(m, 0x90, 0x0f, 0xdc, 0xdd)
    }
    fn str(&mut self) -> Option<&'a [u8]> {
        let m = self.byte()?;
        let n = match m {
            0xa0..=0xbf => (m & 0x1f) as usize,
            0xd9 => self.be(1)? as usize,
            0xda => self.be(2)? as usize,
            0xdb => self.be(4)? as usize,
            _ => return None,
        };
        self.take(n)
    }
    fn opt_str(&mut self) -> Option<Option<WireStr>> {
        if self.b.get(self.at) == Some(&0xc0) {
            self.at += 1;
            return Some(None);
        }
        Some(Some(WireStr::new(std::str::from_utf8(self.str()?).ok()?)))
    }
    fn int(&mut self) -> Option<(u64, bool)> {
        let m = self.byte()?;
        Some(match m {
            0x00..=0x7f => (m as u64, false),
            0xe0..=0xff => (m as i8 as i64 as u64, true),
            0xcc => (self.be(1)?, false),
            0xcd => (self.be(2)?, false),
            0xce => (self.be(4)?, false),
            0xcf => (self.be(8)?, false),
            0xd0 => (self.be(1)? as u8 as i8 as i64 as u64, true),
            0xd1 => (self.be(2)? as u16 as i16 as i64 as u64, true),
            0xd2 => (self.be(4)? as u32 as i32 as i64 as u64, true),
            0xd3 => (self.be(8)?, true),
            _ => return None,
        })
    }
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        if self.b.get(self.at) == Some(&0xc0) {
            self.at += 1;
            return Some(None);
        }
        let (v, neg) = self.int()?;
        if neg {
            return None;
        }
        Some(Some(u32::try_from(v).ok()?))
    }
    fn hash(&mut self) -> Option<(BlockHash, HashReprs)> {
        let m = *self.b.get(self.at)?;
        if m == 0xc4 {
            self.at += 1;
            let n = self.be(1)? as usize;
            let s = self.take(n)?;
            let r = match n {
                16 => HashReprs::BIN16,
                32 => HashReprs::BIN32,
                _ => return None,
            };
            return Some((BlockHash(u64::from_be_bytes(s[n - 8..].try_into().ok()?)), r));
        }
        let (v, neg) = self.int()?;
        Some((BlockHash(v), if neg && (v as i64) < 0 { HashReprs::SIGNED } else { HashReprs::UNSIGNED }))
    }
    fn skip(&mut self) -> Option<()> {
        self.at = skip_value(self.b, self.at, 32).ok()?;
        Some(())
    }
}

static INT_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match i as u8 {
            0x00..=0x7f | 0xe0..=0xff => 1,
            0xcc | 0xd0 => 2,
            0xcd | 0xd1 => 3,
            0xce | 0xd2 => 5,
            0xcf | 0xd3 => 9,
            _ => 0,
        };
        i += 1;
    }
    t
};

fn tokens(c: &mut Cur) -> Option<TokenIds> {
    let start = c.at;
    let n = c.array()?;
    if n > c.b.len() - c.at {
        return None;
    }
    if n > 0 && matches!(c.b[c.at], 0x90..=0x9f) {
        c.at = start;
        c.skip()?;
        // Bigram pages are rare; the sketch only walks them.
        return Some(TokenIds { count: n as u32, is_bigram: true, span: start as u32..c.at as u32, outside_u32: false });
    }
    let b = c.b;
    let mut at = c.at;
    let mut outside_u32 = false;
    for _ in 0..n {
        let m = *b.get(at)?;
        let l = INT_LEN[m as usize];
        if l == 0 {
            return None;
        }
        // Negative ids and 64-bit ones: read the value only for these rare markers.
        if m >= 0xcf && m != 0xcc {
            let mut v = Cur { b, at };
            let (value, negative) = v.int()?;
            outside_u32 |= negative && (value as i64) < 0 || value > u64::from(u32::MAX);
        }
        at += l as usize;
    }
    if at > b.len() {
        return None;
    }
    c.at = at;
    Some(TokenIds { count: n as u32, is_bigram: false, span: start as u32..at as u32, outside_u32 })
}

/// The string items of the first block of `extra_keys` (`None` when the first block is nil).
fn extra_key_strings(c: &mut Cur) -> Option<Option<Vec<String>>> {
    if c.b.get(c.at) == Some(&0xc0) {
        c.at += 1;
        return Some(None);
    }
    let blocks = c.array()?;
    let mut first = None;
    for i in 0..blocks {
        if i == 0 && c.b.get(c.at) != Some(&0xc0) {
            let items = c.array()?;
            let mut strings = Vec::new();
            for _ in 0..items {
                match c.b.get(c.at)? {
                    0xa0..=0xbf | 0xd9..=0xdb => strings.push(std::str::from_utf8(c.str()?).ok()?.to_owned()),
                    _ => c.skip()?,
                }
            }
            first = Some(strings);
        } else {
            c.skip()?;
        }
    }
    Some(first)
}

fn event(c: &mut Cur) -> Option<KvEvent> {
    let m = c.byte()?;
    let n = c.len_hdr(m, 0x80, 0x0f, 0xde, 0xdf)?;
    let mut tag: &[u8] = b"";
    let mut s = BlockStored::default();
    let (mut has_hashes, mut has_tokens, mut has_size) = (false, false, false);
    for _ in 0..n {
        let k = c.str()?;
        match k {
            b"type" => tag = c.str()?,
            b"block_hashes" => {
                let n = c.array()?;
                if n > c.b.len() {
                    return None;
                }
                for _ in 0..n {
                    let (h, r) = c.hash()?;
                    s.block_hashes.push(h);
                    s.hash_reprs.insert(r);
                }
                has_hashes = true;
            }
            b"parent_block_hash" => {
                if c.b.get(c.at) == Some(&0xc0) {
                    c.at += 1
                } else {
                    let (h, r) = c.hash()?;
                    s.parent_block_hash = Some(h);
                    s.hash_reprs.insert(r);
                }
            }
            b"token_ids" => {
                s.token_ids = tokens(c)?;
                has_tokens = true;
            }
            b"block_size" => {
                s.block_size = c.opt_u32()?;
                has_size = true;
            }
            b"lora_id" => {
                if c.b.get(c.at) == Some(&0xc0) {
                    c.at += 1
                } else {
                    s.lora_id = Some(c.int()?.0 as i64)
                }
            }
            b"medium" => s.medium = c.opt_str()?,
            b"lora_name" => s.lora_name = c.opt_str()?,
            b"group_idx" => s.group_idx = c.opt_u32()?,
            b"kv_cache_spec_kind" => s.kv_cache_spec_kind = c.opt_str()?,
            b"kv_cache_spec_sliding_window" => s.kv_cache_spec_sliding_window = c.opt_u32()?,
            b"locality" => s.locality = c.opt_str()?,
            b"ownership" => s.ownership = c.opt_str()?,
            b"cache_salt" => s.cache_salt = c.opt_str()?,
            b"session_id" => s.session_id = c.opt_str()?,
            b"extra_keys" => s.extra_key_strings = extra_key_strings(c)?,
            _ => c.skip()?,
        }
    }
    Some(match tag {
        b"BlockStored" if has_hashes && has_tokens && has_size => {
            s.encoding = Some(EventEncoding::Map);
            KvEvent::BlockStored(Box::new(s))
        }
        b"BlockRemoved" if has_hashes => KvEvent::BlockRemoved(Box::new(BlockRemoved {
            block_hashes: s.block_hashes,
            medium: s.medium,
            group_idx: s.group_idx,
            kv_cache_spec_kind: s.kv_cache_spec_kind,
            kv_cache_spec_sliding_window: s.kv_cache_spec_sliding_window,
            locality: s.locality,
            ownership: s.ownership,
            hash_reprs: s.hash_reprs,
            encoding: Some(EventEncoding::Map),
        })),
        b"AllBlocksCleared" => KvEvent::AllBlocksCleared { encoding: EventEncoding::Map, ownership: s.ownership },
        _ => return None,
    })
}

fn decode_fast(b: &[u8]) -> Option<EventBatch> {
    let mut c = Cur { b, at: 0 };
    let len = c.array()?;
    if len != 3 {
        return None;
    }
    let ts = match c.byte()? {
        0xcb => f64::from_bits(c.be(8)?),
        _ => return None,
    };
    let n = c.array()?;
    let mut events = Vec::with_capacity(n.min(b.len() / 2));
    for _ in 0..n {
        events.push(event(&mut c)?);
    }
    let dp_rank = c.opt_u32()?;
    if c.at != b.len() {
        return None;
    }
    Some(EventBatch { ts, events, dp_rank, layout: BatchLayout::Array3 })
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    for w in kvscope_peer_bench::inputs::all() {
        for p in w.payloads() {
            assert_eq!(decode_fast(&p.bytes).expect("fast decodes"), decode_batch(&p.bytes).unwrap(), "{}", w.name);
        }
        let time = |f: &dyn Fn()| {
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t = Instant::now();
                for _ in 0..20 {
                    f()
                }
                best = best.min(t.elapsed().as_secs_f64() / 20.0);
            }
            best
        };
        let cur = time(&|| {
            for p in w.payloads() {
                black_box(decode_batch(black_box(&p.bytes)).unwrap());
            }
        });
        let fast = time(&|| {
            for p in w.payloads() {
                black_box(decode_fast(black_box(&p.bytes)).unwrap());
            }
        });
        let floor = time(&|| {
            for p in w.payloads() {
                black_box(skip_value(black_box(&p.bytes), 0, 32).unwrap());
            }
        });
        println!("BENCH sketch {{\"workload\": \"{}\", \"current_s\": {cur:e}, \"sketch_s\": {fast:e}, \"floor_s\": {floor:e}}}", w.name);
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}
