//! A minimal msgpack writer, for turning events described as data into real payloads.
//!
//! The vector table ([`crate::vectors`]), the tests and the benchmark describe events as data
//! and need the bytes an engine would publish, in both encodings (tagged arrays up to vLLM 0.23,
//! tagged maps from 0.24). rmp-serde would need a serde type per layout and would pull a
//! dependency into a crate that otherwise only reads; twenty lines of markers do the job, and
//! `kvscope-wire` decoding the result is the check that they are right.

/// Appends msgpack values to a byte vector.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn nil(&mut self) -> &mut Self {
        self.buf.push(0xc0);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
        self
    }

    /// The smallest unsigned encoding.
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

    /// Non-negative values as [`Writer::uint`]; negative ones in the smallest signed encoding.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_use_the_smallest_marker() {
        let mut w = Writer::new();
        w.uint(5).uint(200).uint(70_000).uint(u64::MAX).int(-1).int(-100).int(i64::MIN);
        assert_eq!(
            w.buf,
            [
                &[5u8][..],
                &[0xcc, 200],
                &[0xce, 0, 1, 0x11, 0x70],
                &[0xcf, 255, 255, 255, 255, 255, 255, 255, 255],
                &[0xff],
                &[0xd0, 0x9c],
                &[0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0],
            ]
            .concat()
        );
    }
}
