//! A msgpack writer that picks the same encodings msgspec does, so that synthetic payloads are
//! byte-for-byte what a vLLM or SGLang release would publish (checked against the corpus in
//! `tests/synthetic_bytes.rs`).
//!
//! msgspec writes every integer, string, array and map in its shortest form: a non-negative int
//! as positive fixint, uint8, uint16, uint32 or uint64; a negative one as negative fixint, int8,
//! ..., int64; floats always as float64. Nothing here validates: the writer is for generating
//! benchmark inputs, not for arbitrary data.

/// An append-only msgpack encoder over a `Vec<u8>`.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn nil(&mut self) -> &mut Self {
        self.buf.push(0xc0);
        self
    }

    pub fn uint(&mut self, v: u64) -> &mut Self {
        match v {
            0..=0x7f => self.buf.push(v as u8),
            0x80..=0xff => self.buf.extend_from_slice(&[0xcc, v as u8]),
            0x100..=0xffff => {
                self.buf.push(0xcd);
                self.buf.extend_from_slice(&(v as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                self.buf.push(0xce);
                self.buf.extend_from_slice(&(v as u32).to_be_bytes());
            }
            _ => {
                self.buf.push(0xcf);
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
        }
        self
    }

    pub fn int(&mut self, v: i64) -> &mut Self {
        if v >= 0 {
            return self.uint(v as u64);
        }
        match v {
            -32..=-1 => self.buf.push(v as i8 as u8),
            -128..=-33 => self.buf.extend_from_slice(&[0xd0, v as i8 as u8]),
            -32768..=-129 => {
                self.buf.push(0xd1);
                self.buf.extend_from_slice(&(v as i16).to_be_bytes());
            }
            -2_147_483_648..=-32769 => {
                self.buf.push(0xd2);
                self.buf.extend_from_slice(&(v as i32).to_be_bytes());
            }
            _ => {
                self.buf.push(0xd3);
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
        }
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.buf.push(0xcb);
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        let n = s.len();
        match n {
            0..=31 => self.buf.push(0xa0 | n as u8),
            32..=0xff => self.buf.extend_from_slice(&[0xd9, n as u8]),
            0x100..=0xffff => {
                self.buf.push(0xda);
                self.buf.extend_from_slice(&(n as u16).to_be_bytes());
            }
            _ => {
                self.buf.push(0xdb);
                self.buf.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    pub fn bin(&mut self, b: &[u8]) -> &mut Self {
        let n = b.len();
        match n {
            0..=0xff => self.buf.extend_from_slice(&[0xc4, n as u8]),
            0x100..=0xffff => {
                self.buf.push(0xc5);
                self.buf.extend_from_slice(&(n as u16).to_be_bytes());
            }
            _ => {
                self.buf.push(0xc6);
                self.buf.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
        self.buf.extend_from_slice(b);
        self
    }

    pub fn array(&mut self, len: usize) -> &mut Self {
        self.header(len, 0x90, 0xdc, 0xdd)
    }

    pub fn map(&mut self, len: usize) -> &mut Self {
        self.header(len, 0x80, 0xde, 0xdf)
    }

    fn header(&mut self, len: usize, fix: u8, m16: u8, m32: u8) -> &mut Self {
        match len {
            0..=15 => self.buf.push(fix | len as u8),
            16..=0xffff => {
                self.buf.push(m16);
                self.buf.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                self.buf.push(m32);
                self.buf.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
        self
    }

    /// A string key followed by nothing: the caller writes the value next.
    pub fn key(&mut self, k: &str) -> &mut Self {
        self.str(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_their_shortest_form() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (256, &[0xcd, 0x01, 0x00]),
            (65536, &[0xce, 0x00, 0x01, 0x00, 0x00]),
            (-1, &[0xff]),
            (-32, &[0xe0]),
            (-33, &[0xd0, 0xdf]),
            (-129, &[0xd1, 0xff, 0x7f]),
        ];
        for (v, bytes) in cases {
            let mut w = Writer::new();
            w.int(*v);
            assert_eq!(&w.buf, bytes, "{v}");
        }
        let mut w = Writer::new();
        w.uint(u64::MAX);
        assert_eq!(
            w.buf,
            [0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }
}
