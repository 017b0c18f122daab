//! Compression of blob payloads. What a blob holds is recorded in its header as one byte
//! ([`Compression`]): raw, an lz4 block, or a zstd frame, so that any mix reads back. What
//! `create` does is chosen by a [`Codec`] (`--compression`):
//!
//! - `lz4` (the default): fast, and stored raw when lz4 does not shrink the data;
//! - `zstd[,LEVEL]` (1–22, default 3): smaller, slower; raw when it does not shrink;
//! - `auto[,LEVEL]`: lz4 first, as a cheap test of compressibility; only where lz4 saves at
//!   least 3% is zstd tried as well, and the smaller result kept (borg's `auto`);
//! - `none`: everything raw.

use std::cell::RefCell;

use crate::error::{Error, Result};

/// What a blob's payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Raw = 0,
    Lz4 = 1,
    Zstd = 2,
}

impl Compression {
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Compression::Raw),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// How `create` compresses chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Codec {
    None,
    #[default]
    Lz4,
    Zstd(i32),
    Auto(i32),
}

/// zstd's level when none is given.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

impl Codec {
    /// Parses borg's spelling: `lz4`, `zstd`, `zstd,10`, `auto`, `auto,10`, `none`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "unknown compression {s:?}: use lz4, zstd[,LEVEL], auto[,LEVEL] or none (LEVEL 1 to 22)"
            ))
        };
        let (name, level) = match s.split_once(',') {
            Some((n, l)) => {
                let level: i32 = l.trim().parse().map_err(|_| bad())?;
                if !(1..=22).contains(&level) {
                    return Err(bad());
                }
                (n.trim(), Some(level))
            }
            None => (s.trim(), None),
        };
        let level = level.unwrap_or(ZSTD_DEFAULT_LEVEL);
        match (name, s.contains(',')) {
            ("lz4", false) => Ok(Codec::Lz4),
            ("none", false) => Ok(Codec::None),
            ("zstd", _) => Ok(Codec::Zstd(level)),
            ("auto", _) => Ok(Codec::Auto(level)),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Codec::None => write!(f, "none"),
            Codec::Lz4 => write!(f, "lz4"),
            Codec::Zstd(l) => write!(f, "zstd,{l}"),
            Codec::Auto(l) => write!(f, "auto,{l}"),
        }
    }
}

/// Room `compress_into` needs for an input of `len` bytes, whatever the codec.
pub fn max_compressed_len(len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(len).max(zstd::zstd_safe::compress_bound(len))
}

thread_local! {
    /// A zstd context per thread and level: making one costs more than compressing a small
    /// chunk (megabytes of tables at high levels).
    static ZSTD: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static UNZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// zstd at `level` into `out`; `None` if it fails or does not shrink the input.
fn zstd_into(input: &[u8], out: &mut [u8], level: i32) -> Option<usize> {
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, c) = slot.as_mut()?;
        match c.compress_to_buffer(input, out) {
            Ok(n) if n < input.len() => Some(n),
            _ => None,
        }
    })
}

/// lz4 into `out`; `None` if it does not shrink the input.
fn lz4_into(input: &[u8], out: &mut [u8]) -> Option<usize> {
    match lz4_flex::block::compress_into(input, out) {
        Ok(n) if n < input.len() => Some(n),
        _ => None,
    }
}

/// Compresses `input` into `out` (at least [`max_compressed_len`] long) as `codec` says;
/// returns what was written and its length. Data that does not shrink is copied raw.
pub fn compress_into(input: &[u8], out: &mut [u8], codec: Codec) -> (Compression, usize) {
    let done = match codec {
        Codec::None => None,
        Codec::Lz4 => lz4_into(input, out).map(|n| (Compression::Lz4, n)),
        Codec::Zstd(level) => zstd_into(input, out, level).map(|n| (Compression::Zstd, n)),
        Codec::Auto(level) => match lz4_into(input, out) {
            // lz4 saved at least 3%: worth trying the heavier codec, into the space after it.
            Some(n) if n * 100 <= input.len() * 97 => {
                let mut z = vec![0u8; zstd::zstd_safe::compress_bound(input.len())];
                match zstd_into(input, &mut z, level) {
                    Some(m) if m < n => {
                        out[..m].copy_from_slice(&z[..m]);
                        Some((Compression::Zstd, m))
                    }
                    _ => Some((Compression::Lz4, n)),
                }
            }
            Some(n) => Some((Compression::Lz4, n)),
            None => None,
        },
    };
    done.unwrap_or_else(|| {
        out[..input.len()].copy_from_slice(input);
        (Compression::Raw, input.len())
    })
}

/// Decompresses into exactly `plain_len` bytes; anything else is an error about `what`.
pub fn decompress(
    method: Compression,
    input: &[u8],
    plain_len: usize,
    what: &str,
) -> Result<Vec<u8>> {
    let wrong = |n: usize| {
        Error::corrupt(
            what,
            format!("decompressed to {n} bytes, expected {plain_len}"),
        )
    };
    match method {
        Compression::Raw => {
            if input.len() != plain_len {
                return Err(Error::corrupt(what, "raw payload has the wrong length"));
            }
            Ok(input.to_vec())
        }
        Compression::Lz4 => {
            let mut out = vec![0u8; plain_len];
            match lz4_flex::block::decompress_into(input, &mut out) {
                Ok(n) if n == plain_len => Ok(out),
                Ok(n) => Err(wrong(n)),
                Err(e) => Err(Error::corrupt(what, format!("lz4: {e}"))),
            }
        }
        Compression::Zstd => UNZSTD.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(
                    zstd::bulk::Decompressor::new()
                        .map_err(|e| Error::corrupt(what, format!("zstd: {e}")))?,
                );
            }
            let d = slot.as_mut().ok_or_else(|| Error::corrupt(what, "zstd"))?;
            // The frame may not claim more than the header says (no bomb).
            let mut out = vec![0u8; plain_len];
            match d.decompress_to_buffer(input, &mut out) {
                Ok(n) if n == plain_len => Ok(out),
                Ok(n) => Err(wrong(n)),
                Err(e) => Err(Error::corrupt(what, format!("zstd: {e}"))),
            }
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Codec; 5] = [
        Codec::None,
        Codec::Lz4,
        Codec::Zstd(1),
        Codec::Zstd(10),
        Codec::Auto(3),
    ];

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), zeros in 0usize..5000, c in 0usize..5) {
            let mut input = data;
            input.extend(std::iter::repeat_n(0u8, zeros));
            let mut out = vec![0u8; max_compressed_len(input.len())];
            let (m, n) = compress_into(&input, &mut out, CODECS[c]);
            prop_assert!(n <= input.len());
            prop_assert_eq!(decompress(m, &out[..n], input.len(), "t").unwrap(), input);
        }
    }

    fn noise(n: usize) -> Vec<u8> {
        let mut x: u64 = 0x2545f4914f6cdd1d;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect()
    }

    #[test]
    fn each_codec_records_what_it_wrote() {
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog; "
            .iter()
            .cycle()
            .take(64 * 1024)
            .copied()
            .collect();
        let mut out = vec![0u8; max_compressed_len(text.len())];
        assert_eq!(
            compress_into(&text, &mut out, Codec::None).0,
            Compression::Raw
        );
        assert_eq!(
            compress_into(&text, &mut out, Codec::Lz4).0,
            Compression::Lz4
        );
        assert_eq!(
            compress_into(&text, &mut out, Codec::Zstd(3)).0,
            Compression::Zstd
        );
        // Compressible: auto tries zstd, which wins on repetitive text.
        assert_eq!(
            compress_into(&text, &mut out, Codec::Auto(3)).0,
            Compression::Zstd
        );
        // Noise: raw, whatever the codec, and auto never pays for zstd.
        let n = noise(64 * 1024);
        for c in CODECS {
            let (m, len) = compress_into(&n, &mut out, c);
            assert_eq!((m, len), (Compression::Raw, n.len()), "{c}");
        }
    }

    #[test]
    fn a_frame_longer_than_the_header_says_is_refused() {
        let zeros = vec![0u8; 100_000];
        let mut out = vec![0u8; max_compressed_len(zeros.len())];
        let (m, n) = compress_into(&zeros, &mut out, Codec::Zstd(3));
        assert_eq!(m, Compression::Zstd);
        assert!(decompress(m, &out[..n], 1000, "t").is_err());
        assert!(decompress(m, &out[..n], 200_000, "t").is_err());
        assert!(decompress(m, &out[..n / 2], 100_000, "t").is_err());
    }

    #[test]
    fn compression_specs_parse_as_borg_spells_them() {
        assert_eq!(Codec::parse("lz4").unwrap(), Codec::Lz4);
        assert_eq!(Codec::parse("none").unwrap(), Codec::None);
        assert_eq!(Codec::parse("zstd").unwrap(), Codec::Zstd(3));
        assert_eq!(Codec::parse("zstd,19").unwrap(), Codec::Zstd(19));
        assert_eq!(Codec::parse("auto").unwrap(), Codec::Auto(3));
        assert_eq!(Codec::parse("auto,10").unwrap(), Codec::Auto(10));
        for bad in ["zstd,0", "zstd,23", "zstd,x", "lz4,3", "gzip", "", "none,1"] {
            let e = Codec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("unknown compression"), "{bad}: {e}");
        }
        for c in CODECS {
            assert_eq!(Codec::parse(&c.to_string()).unwrap(), c);
        }
    }
}
