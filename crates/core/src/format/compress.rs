//! Compression of blob payloads. What a blob holds is recorded in its header as one byte
//! ([`Compression`]): raw, an lz4 block, or a zstd frame, so that any mix reads back. What
//! `create` does is chosen by a [`Codec`] (`--compression`):
//!
//! - `auto[,LEVEL]` (the default, and what `auto` alone means, is `auto,1`): per chunk, a
//!   cheap estimate of what entropy coding would save ([`literal_entropy`]) picks the codec. Where the bytes that are not
//!   runs are close to random (media, archives, encrypted or already compressed data, and the
//!   zeros-and-noise of sparse images) zstd's entropy stage gains nothing and costs twice
//!   lz4's time, so lz4 is used; everywhere else (text, code, binaries) zstd at LEVEL;
//! - `lz4`: fast, and stored raw when lz4 does not shrink the data;
//! - `zstd[,LEVEL]` (1–22, default 3): smaller, slower; raw when it does not shrink;
//! - `none`: everything raw.
//!
//! Whatever the codec, data that does not shrink is stored raw.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    None,
    Lz4,
    Zstd(i32),
    Auto(i32),
}

/// zstd's level when none is given.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// `auto`'s zstd level when none is given: the default's.
pub const AUTO_DEFAULT_LEVEL: i32 = 1;

/// What `create` uses unless told otherwise, chosen by measurement (docs/benchmarks.md,
/// "Default compression"): lz4's bytes and time where data is noise and runs; where it
/// compresses, 24–30% less than lz4 (within 5% of zstd,3) for 9–16% more create time than
/// lz4, the least zstd costs there.
pub const DEFAULT: Codec = Codec::Auto(AUTO_DEFAULT_LEVEL);

impl Default for Codec {
    fn default() -> Self {
        DEFAULT
    }
}

/// Above this estimate (bits per byte, of 8) entropy coding is not worth zstd's time: it
/// would save under 6% of the literals, and lz4 finds the same runs and repeats.
const ZSTD_WORTH_BELOW_BITS: f64 = 7.5;

/// [`literal_entropy`] reads windows of this many bytes…
const SAMPLE_WINDOW: usize = 16;
/// …one for every this many bytes of input…
const SAMPLE_EVERY: usize = 256;
/// …but no fewer than this many (the whole of a 1 KiB file, 1 KiB of a 16 KiB one)…
const SAMPLE_WINDOWS_MIN: usize = 64;
/// …and no more than this many (16 KiB of a 1 MiB chunk).
const SAMPLE_WINDOWS_MAX: usize = 1024;

/// c · log2(c) for the counts a sample mostly has, computed once (a logarithm per symbol
/// would cost as much as the sampling of a small file).
static C_LOG2_C: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
const C_LOG2_C_LEN: u32 = 1024;

fn c_log2_c(c: u32) -> f64 {
    let c = f64::from(c);
    if c > 0.0 {
        c * c.log2()
    } else {
        0.0
    }
}

/// An estimate of the order-0 entropy, in bits per byte, of the bytes that are not part of
/// a run (a byte equal to the one before it is left out, as a compressor's match would take
/// it), from windows of 16 bytes spread evenly over the input. The plug-in estimate from a
/// histogram is low by about (K − 1) / (2 n ln 2) bits for K symbols seen in n samples
/// (Miller–Madow); that is added back, so that noise reads as close to 8 bits even in a
/// 4 KiB file. `None` for an empty input.
pub fn literal_entropy(input: &[u8]) -> Option<f64> {
    let windows = (input.len() / SAMPLE_EVERY).clamp(SAMPLE_WINDOWS_MIN, SAMPLE_WINDOWS_MAX);
    let stride = (input.len() / windows).max(SAMPLE_WINDOW);
    let mut counts = [0u32; 256];
    let mut total = 0u32;
    let mut pos = 0;
    while pos < input.len() {
        let end = (pos + SAMPLE_WINDOW).min(input.len());
        // The first byte of the input counts: nothing comes before it.
        let mut prev = if pos == 0 { !input[0] } else { input[pos - 1] };
        for &b in &input[pos..end] {
            let new = u32::from(b != prev);
            counts[usize::from(b)] += new;
            total += new;
            prev = b;
        }
        pos += stride;
    }
    if total == 0 {
        return None;
    }
    let n = f64::from(total);
    let (mut sum, mut seen) = (0.0, 0u32);
    let table = C_LOG2_C.get_or_init(|| (0..C_LOG2_C_LEN).map(c_log2_c).collect());
    for &c in counts.iter().filter(|&&c| c > 0) {
        sum += table
            .get(c as usize)
            .copied()
            .unwrap_or_else(|| c_log2_c(c));
        seen += 1;
    }
    let plug_in = n.log2() - sum / n;
    let bias = f64::from(seen - 1) / (2.0 * n * std::f64::consts::LN_2);
    Some((plug_in + bias).min(8.0))
}

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
        match (name, s.contains(',')) {
            ("lz4", false) => Ok(Codec::Lz4),
            ("none", false) => Ok(Codec::None),
            ("zstd", _) => Ok(Codec::Zstd(level.unwrap_or(ZSTD_DEFAULT_LEVEL))),
            ("auto", _) => Ok(Codec::Auto(level.unwrap_or(AUTO_DEFAULT_LEVEL))),
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
        Codec::Auto(level) => match literal_entropy(input) {
            Some(bits) if bits < ZSTD_WORTH_BELOW_BITS => {
                zstd_into(input, out, level).map(|n| (Compression::Zstd, n))
            }
            _ => lz4_into(input, out).map(|n| (Compression::Lz4, n)),
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
        // Both decoders write into the vector's spare capacity, which bounds them (no bomb),
        // instead of into zeros written first: zeroing cost 2-4% of extract's CPU.
        Compression::Lz4 => match lz4_flex::block::decompress(input, plain_len) {
            Ok(out) if out.len() == plain_len => Ok(out),
            Ok(out) => Err(wrong(out.len())),
            Err(e) => Err(Error::corrupt(what, format!("lz4: {e}"))),
        },
        Compression::Zstd => with_unzstd(what, |d| {
            // The frame may not claim more than the header says (no bomb).
            let mut out = Vec::with_capacity(plain_len);
            match d.decompress_to_buffer(input, &mut out) {
                Ok(n) if n == plain_len && out.len() == plain_len => Ok(out),
                Ok(n) => Err(wrong(n)),
                Err(e) => Err(Error::corrupt(what, format!("zstd: {e}"))),
            }
        }),
    }
}

/// Runs `f` with this thread's zstd decompressor, made at its first use.
fn with_unzstd<T>(
    what: &str,
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> Result<T>,
) -> Result<T> {
    UNZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| Error::corrupt(what, format!("zstd: {e}")))?,
            );
        }
        let d = slot.as_mut().ok_or_else(|| Error::corrupt(what, "zstd"))?;
        f(d)
    })
}

/// [`decompress`] into `out`, which must be exactly as long as the plaintext: for a caller
/// that decodes into memory it reuses (no fresh pages to map for each chunk).
pub fn decompress_into(
    method: Compression,
    input: &[u8],
    out: &mut [u8],
    what: &str,
) -> Result<()> {
    let plain_len = out.len();
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
            out.copy_from_slice(input);
            Ok(())
        }
        // Both decoders are bounded by `out` (no bomb).
        Compression::Lz4 => match lz4_flex::block::decompress_into(input, out) {
            Ok(n) if n == plain_len => Ok(()),
            Ok(n) => Err(wrong(n)),
            Err(e) => Err(Error::corrupt(what, format!("lz4: {e}"))),
        },
        Compression::Zstd => with_unzstd(what, |d| match d.decompress_to_buffer(input, out) {
            Ok(n) if n == plain_len => Ok(()),
            Ok(n) => Err(wrong(n)),
            Err(e) => Err(Error::corrupt(what, format!("zstd: {e}"))),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Codec; 6] = [
        Codec::None,
        Codec::Lz4,
        Codec::Zstd(1),
        Codec::Zstd(10),
        Codec::Auto(1),
        Codec::Auto(3),
    ];

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), zeros in 0usize..5000, c in 0usize..CODECS.len()) {
            let mut input = data;
            input.extend(std::iter::repeat_n(0u8, zeros));
            let mut out = vec![0u8; max_compressed_len(input.len())];
            let (m, n) = compress_into(&input, &mut out, CODECS[c]);
            prop_assert!(n <= input.len());
            prop_assert_eq!(&decompress(m, &out[..n], input.len(), "t").unwrap(), &input);
            // Into a buffer of the plaintext's length, holding other bytes before.
            let mut into = vec![0xa5u8; input.len()];
            decompress_into(m, &out[..n], &mut into, "t").unwrap();
            prop_assert_eq!(&into, &input);
            // A buffer of another length is refused, never overrun.
            let mut longer = vec![0u8; input.len() + 1];
            prop_assert!(decompress_into(m, &out[..n], &mut longer, "t").is_err());
            if !input.is_empty() {
                let mut shorter = vec![0u8; input.len() - 1];
                prop_assert!(decompress_into(m, &out[..n], &mut shorter, "t").is_err());
            }
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
        // Text: auto uses zstd, which wins there.
        assert_eq!(
            compress_into(&text, &mut out, Codec::Auto(3)).0,
            Compression::Zstd
        );
        // Noise: raw, whatever the codec.
        let n = noise(64 * 1024);
        for c in CODECS {
            let (m, len) = compress_into(&n, &mut out, c);
            assert_eq!((m, len), (Compression::Raw, n.len()), "{c}");
        }
    }

    /// Words drawn from a small vocabulary with a skewed choice: text as far as an
    /// order-0 model can tell (about 4.5 bits a byte), with few long repeats.
    fn prose(n: usize) -> Vec<u8> {
        let words = [
            "the ",
            "of ",
            "backup ",
            "and ",
            "a ",
            "chunk ",
            "repository ",
            "to ",
            "is ",
            "restore ",
            "file, ",
            "pack. ",
            "index ",
            "with ",
            "key ",
            "archive\n",
        ];
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut v = Vec::with_capacity(n + 16);
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Skewed: the low indices come up most often.
            let i = ((x >> 40) % 16).min((x >> 50) % 16) as usize;
            v.extend_from_slice(words[i].as_bytes());
        }
        v.truncate(n);
        v
    }

    /// 4 KiB of noise, 4 KiB of zeros, repeated: the benchmark sets' data.
    fn noise_and_zeros(n: usize) -> Vec<u8> {
        let mut v = noise(n);
        for (i, block) in v.chunks_mut(4096).enumerate() {
            if i % 2 == 1 {
                block.fill(0);
            }
        }
        v
    }

    #[test]
    fn the_estimate_reads_noise_as_noise_and_text_as_text() {
        assert_eq!(literal_entropy(&[]), None);
        // Runs: the first byte alone, nothing to entropy-code.
        assert_eq!(literal_entropy(&[0u8; 100_000]), Some(0.0));
        assert_eq!(literal_entropy(&[7]), Some(0.0));
        for n in [4096, 64 << 10, 1 << 20, 8 << 20] {
            let e = literal_entropy(&noise(n)).unwrap();
            assert!(e > 7.8, "noise of {n} bytes: {e}");
            let e = literal_entropy(&noise_and_zeros(n)).unwrap();
            assert!(e > 7.7, "noise and zeros, {n} bytes: {e}");
            let e = literal_entropy(&prose(n)).unwrap();
            assert!((3.0..6.0).contains(&e), "text of {n} bytes: {e}");
        }
        // Half noise, half zeros in one small file (the small set's files).
        let mut small = noise(4096);
        small[2048..].fill(0);
        let e = literal_entropy(&small).unwrap();
        assert!(e > 7.6, "{e}");
        // Every byte value once, in order: 8 bits exactly, and no more.
        let all: Vec<u8> = (0..=255).collect();
        assert!((literal_entropy(&all).unwrap() - 8.0).abs() < 1e-9);
    }

    #[test]
    fn auto_pays_for_zstd_only_where_entropy_coding_saves() {
        let mut out = vec![0u8; max_compressed_len(1 << 20)];
        for level in [1, 3] {
            let auto = Codec::Auto(level);
            // Text: zstd, and as small as zstd alone makes it.
            let text = prose(1 << 20);
            let (m, n) = compress_into(&text, &mut out, auto);
            assert_eq!(m, Compression::Zstd);
            let (_, z) = compress_into(&text, &mut out, Codec::Zstd(level));
            assert_eq!(n, z);
            // Noise between runs: lz4 takes the runs, and zstd would save nothing more.
            let mixed = noise_and_zeros(1 << 20);
            let (m, n) = compress_into(&mixed, &mut out, auto);
            assert_eq!(m, Compression::Lz4);
            let (_, z) = compress_into(&mixed, &mut out, Codec::Zstd(level));
            assert!(n as f64 <= z as f64 * 1.01, "lz4 {n}, zstd {z}");
            // Runs alone: zstd, which stores them in a few bytes.
            let (m, n) = compress_into(&[0u8; 1 << 16], &mut out, auto);
            assert_eq!(m, Compression::Zstd);
            assert!(n < 100, "{n}");
            // Noise: raw.
            let n = noise(1 << 16);
            assert_eq!(
                compress_into(&n, &mut out, auto),
                (Compression::Raw, n.len())
            );
        }
    }

    #[test]
    fn the_default_is_auto_at_level_1() {
        assert_eq!(Codec::default(), Codec::Auto(1));
        assert_eq!(Codec::default().to_string(), "auto,1");
        assert_eq!(Codec::parse("auto,1").unwrap(), Codec::default());
    }

    #[test]
    fn a_frame_longer_than_the_header_says_is_refused() {
        let zeros = vec![0u8; 100_000];
        for (codec, method) in [
            (Codec::Zstd(3), Compression::Zstd),
            (Codec::Lz4, Compression::Lz4),
        ] {
            let mut out = vec![0u8; max_compressed_len(zeros.len())];
            let (m, n) = compress_into(&zeros, &mut out, codec);
            assert_eq!(m, method);
            assert_eq!(decompress(m, &out[..n], 100_000, "t").unwrap(), zeros);
            assert!(decompress(m, &out[..n], 1000, "t").is_err());
            assert!(decompress(m, &out[..n], 99_999, "t").is_err());
            assert!(decompress(m, &out[..n], 200_000, "t").is_err());
            assert!(decompress(m, &out[..n / 2], 100_000, "t").is_err());
        }
    }

    #[test]
    fn compression_specs_parse_as_borg_spells_them() {
        assert_eq!(Codec::parse("lz4").unwrap(), Codec::Lz4);
        assert_eq!(Codec::parse("none").unwrap(), Codec::None);
        assert_eq!(Codec::parse("zstd").unwrap(), Codec::Zstd(3));
        assert_eq!(Codec::parse("zstd,19").unwrap(), Codec::Zstd(19));
        assert_eq!(Codec::parse("auto").unwrap(), Codec::default());
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
