//! Little-endian binary encoding used by every on-disk structure that is not JSON: fixed-width
//! integers and byte strings prefixed with a u32 length. The decoder never panics: every read
//! is bounds-checked and a short or malformed input is an error naming what was being read.

use crate::error::{Error, Result};

#[derive(Default)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// A byte string: u32 length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Callers never encode strings of 4 GiB; saturating keeps this total.
        let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
        self.u32(len);
        self.buf.extend_from_slice(&v[..len as usize]);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads what [`Encoder`] wrote. `what` names the structure in error messages.
pub struct Decoder<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> Decoder<'a> {
    pub fn new(data: &'a [u8], what: &'a str) -> Self {
        Self { data, pos: 0, what }
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn err(&self, reason: String) -> Error {
        Error::corrupt(self.what.to_string(), reason)
    }

    /// Checks the 8-byte magic an object starts with; `kind` names what was expected, as in
    /// "not an archive (bad magic)".
    pub fn magic(&mut self, magic: &[u8; 8], kind: &str) -> Result<()> {
        if self.take(magic.len())? != magic {
            return Err(self.err(format!("not {kind} (bad magic)")));
        }
        Ok(())
    }

    /// Reads a format version; any but `version` is refused ("unknown archive version 7").
    pub fn version(&mut self, version: u32, kind: &str) -> Result<()> {
        let found = self.u32()?;
        if found != version {
            return Err(self.err(format!("unknown {kind} version {found}")));
        }
        Ok(())
    }

    /// The error for a malformed value, naming the object being decoded.
    pub fn invalid(&self, reason: impl Into<String>) -> Error {
        self.err(reason.into())
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.err(format!(
                "truncated at byte {} (need {n} more bytes, {} left)",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn id(&mut self) -> Result<[u8; 32]> {
        self.array()
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("string is not UTF-8".into()))
    }

    /// A count of items each at least `min_item` bytes long; refuses counts the remaining
    /// input cannot hold, so a corrupt count cannot make the caller allocate gigabytes.
    pub fn count(&mut self, min_item: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(self.err(format!(
                "count {n} exceeds the {} bytes left",
                self.remaining()
            )));
        }
        Ok(n)
    }

    pub fn expect_end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.err(format!("{} trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut e = Encoder::new();
        e.u8(7)
            .u16(300)
            .u32(70000)
            .u64(1 << 40)
            .i64(-5)
            .str("héllo");
        let buf = e.finish();
        let mut d = Decoder::new(&buf, "test");
        assert_eq!(d.u8().unwrap(), 7);
        assert_eq!(d.u16().unwrap(), 300);
        assert_eq!(d.u32().unwrap(), 70000);
        assert_eq!(d.u64().unwrap(), 1 << 40);
        assert_eq!(d.i64().unwrap(), -5);
        assert_eq!(d.string().unwrap(), "héllo");
        d.expect_end().unwrap();
        for cut in 0..buf.len() {
            let mut d = Decoder::new(&buf[..cut], "test");
            let r = (|| -> Result<()> {
                d.u8()?;
                d.u16()?;
                d.u32()?;
                d.u64()?;
                d.i64()?;
                d.string()?;
                Ok(())
            })();
            assert!(r.is_err(), "cut at {cut} must fail");
        }
    }

    #[test]
    fn absurd_count_is_refused() {
        let mut e = Encoder::new();
        e.u32(u32::MAX);
        let buf = e.finish();
        assert!(Decoder::new(&buf, "t").count(32).is_err());
    }
}
