//! Content-defined chunking: FastCDC (2020) with the repository's keyed gear table, so that
//! chunk boundaries — and therefore chunk sizes — differ between repositories.
//!
//! The gear table is derived from the 256-bit chunker key: entry `i` is the first 8 bytes
//! (little-endian) of `HMAC-SHA256(chunker key, "cairn gear v2" ‖ i)`, 256 independent
//! pseudo-random values. (Format 1 XORed the crate's fixed table with one 64-bit seed; since
//! cut decisions only look at the hash's low 48 bits and carries only move upwards, that seed
//! could be solved for bit by bit from the chunk lengths of one known file.) The cutting
//! itself is the crate's own [`fastcdc::v2020::cut_gear`], which takes custom tables.
//!
//! The chunker is push-based and does no I/O: [`Chunker::cut`] finds the end of the first
//! chunk of a buffer. [`ChunkReader`] drives it over a `Read`.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Chunk size parameters, stored in the repository config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkerParams {
    pub min_size: u32,
    pub avg_size: u32,
    pub max_size: u32,
}

impl ChunkerParams {
    /// File data: 512 KiB / 1 MiB / 8 MiB.
    pub const DATA: Self = Self {
        min_size: 512 * 1024,
        avg_size: 1024 * 1024,
        max_size: 8 * 1024 * 1024,
    };

    /// Archive metadata (item streams): small chunks, so that a change to one item costs a
    /// small new chunk.
    pub const METADATA: Self = Self {
        min_size: 16 * 1024,
        avg_size: 64 * 1024,
        max_size: 256 * 1024,
    };

    pub fn validate(&self) -> Result<()> {
        use fastcdc::v2020::{
            AVERAGE_MAX, AVERAGE_MIN, MAXIMUM_MAX, MAXIMUM_MIN, MINIMUM_MAX, MINIMUM_MIN,
        };
        let ok = (MINIMUM_MIN..=MINIMUM_MAX).contains(&self.min_size)
            && (AVERAGE_MIN..=AVERAGE_MAX).contains(&self.avg_size)
            && (MAXIMUM_MIN..=MAXIMUM_MAX).contains(&self.max_size)
            && self.min_size <= self.avg_size
            && self.avg_size <= self.max_size
            && self.avg_size.is_power_of_two();
        if ok {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "invalid chunker parameters {self:?}"
            )))
        }
    }
}

pub struct Chunker {
    params: ChunkerParams,
    mask_s: u64,
    mask_l: u64,
    gear: Box<[u64; 256]>,
    gear_ls: Box<[u64; 256]>,
}

/// The keyed gear table and its left-shifted companion (which `cut_gear` takes separately).
pub fn keyed_gear(key: &[u8; 32]) -> (Box<[u64; 256]>, Box<[u64; 256]>) {
    use hmac::{Hmac, Mac};
    let mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    let mut gear = Box::new([0u64; 256]);
    let mut gear_ls = Box::new([0u64; 256]);
    for i in 0..256 {
        let mut m = mac.clone();
        m.update(b"cairn gear v2");
        m.update(&[i as u8]);
        let out = m.finalize().into_bytes();
        let mut v = [0u8; 8];
        v.copy_from_slice(&out[..8]);
        gear[i] = u64::from_le_bytes(v);
        gear_ls[i] = gear[i] << 1;
    }
    (gear, gear_ls)
}

impl Chunker {
    /// The chunker of a repository: `params` with the gear table keyed by `key`.
    pub fn new(params: ChunkerParams, key: &[u8; 32]) -> Result<Self> {
        let (gear, gear_ls) = keyed_gear(key);
        Self::with_tables(params, gear, gear_ls)
    }

    /// A chunker with explicit gear tables (the crate's own, in the oracle test; a
    /// format-1-style XORed table, in the attack tests).
    pub fn with_tables(
        params: ChunkerParams,
        gear: Box<[u64; 256]>,
        gear_ls: Box<[u64; 256]>,
    ) -> Result<Self> {
        use fastcdc::v2020::{logarithm2, Normalization, MASKS};
        params.validate()?;
        let bits = logarithm2(params.avg_size);
        let level = Normalization::Level1.bits();
        Ok(Self {
            params,
            mask_s: MASKS[(bits + level) as usize],
            mask_l: MASKS[(bits - level) as usize],
            gear,
            gear_ls,
        })
    }

    pub fn params(&self) -> ChunkerParams {
        self.params
    }

    /// Length of the first chunk of `data`. Unless `data` is the end of the input, it must
    /// hold at least `max_size` bytes for the cut to be the one the whole input would get.
    pub fn cut(&self, data: &[u8]) -> usize {
        let (_, n) = fastcdc::v2020::cut_gear(
            data,
            self.params.min_size as usize,
            self.params.avg_size as usize,
            self.params.max_size as usize,
            self.mask_s,
            self.mask_l,
            self.mask_s << 1,
            self.mask_l << 1,
            &self.gear,
            &self.gear_ls,
        );
        n
    }

    /// Splits a complete buffer into chunk lengths.
    pub fn split<'a>(&'a self, mut data: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        std::iter::from_fn(move || {
            if data.is_empty() {
                return None;
            }
            let n = self.cut(data).max(1).min(data.len());
            let (chunk, rest) = data.split_at(n);
            data = rest;
            Some(chunk)
        })
    }
}

/// Reads a stream and yields its chunks in order, in a buffer the caller keeps between
/// streams (so many small files do not each allocate and clear megabytes).
/// The read buffer's first size.
const FIRST_READ: usize = 256 << 10;
/// The read buffer's largest size, in largest chunks. Measured on 1 GiB: three (24 MiB at the
/// default parameters) backs up no faster than two, and holds 8 MiB more.
const READ_SPAN: usize = 2;

pub struct ChunkReader<'c, 'b, R> {
    chunker: &'c Chunker,
    reader: R,
    buf: &'b mut Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Bytes read from the source so far.
    pub bytes_read: u64,
}

impl<'c, 'b, R: Read> ChunkReader<'c, 'b, R> {
    pub fn new(chunker: &'c Chunker, reader: R, buf: &'b mut Vec<u8>) -> Self {
        Self {
            chunker,
            reader,
            buf,
            start: 0,
            end: 0,
            eof: false,
            bytes_read: 0,
        }
    }

    /// Makes sure the largest chunk fits after `start` (or the input has ended). The buffer
    /// starts small and doubles only while a stream fills it, so that small files never touch
    /// more of it than they need, up to `READ_SPAN` largest chunks; from then on, when it is
    /// full, the remainder (less than one largest chunk) moves to the front, at most one byte
    /// moved per byte consumed.
    fn fill(&mut self) -> io::Result<()> {
        let want = self.chunker.params.max_size as usize;
        let span = READ_SPAN * want;
        while !self.eof && self.end - self.start < want {
            if self.end == self.buf.len() {
                if self.buf.len() < span {
                    let grown = (2 * self.buf.len()).max(FIRST_READ).min(span);
                    self.buf.resize(grown, 0);
                } else {
                    // Full, with less than `want` after `start`: start > span - want > 0.
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                }
            }
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.end += n;
                    self.bytes_read += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next chunk, or `None` at the end of the input.
    pub fn next_chunk(&mut self) -> io::Result<Option<&[u8]>> {
        self.fill()?;
        if self.start == self.end {
            return Ok(None);
        }
        let data = &self.buf[self.start..self.end];
        let n = self.chunker.cut(data).max(1).min(data.len());
        let chunk = &self.buf[self.start..self.start + n];
        self.start += n;
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small() -> ChunkerParams {
        ChunkerParams {
            min_size: 64,
            avg_size: 256,
            max_size: 1024,
        }
    }

    fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    proptest! {
        #[test]
        fn chunks_concatenate_and_respect_bounds(len in 0usize..20000, seed in any::<u64>(), key in any::<[u8; 32]>()) {
            let c = Chunker::new(small(), &key).unwrap();
            let data = pseudo_random(len, seed);
            let mut buf = Vec::new();
            let mut r = ChunkReader::new(&c, &data[..], &mut buf);
            let mut out = Vec::new();
            let mut sizes = Vec::new();
            while let Some(ch) = r.next_chunk().unwrap() {
                out.extend_from_slice(ch);
                sizes.push(ch.len());
            }
            prop_assert_eq!(&out, &data);
            for (i, s) in sizes.iter().enumerate() {
                prop_assert!(*s <= 1024);
                if i + 1 < sizes.len() { prop_assert!(*s >= 64); }
            }
            // Streaming and whole-buffer splitting agree.
            let split: Vec<usize> = c.split(&data).map(|s| s.len()).collect();
            prop_assert_eq!(split, sizes);
        }
    }

    fn cut_points(c: &Chunker, data: &[u8]) -> std::collections::HashSet<usize> {
        let mut at = 0;
        c.split(data)
            .map(|s| {
                at += s.len();
                at
            })
            .collect()
    }

    #[test]
    fn two_keys_cut_differently() {
        let data = pseudo_random(2_000_000, 42);
        let params = ChunkerParams::METADATA;
        let a = cut_points(&Chunker::new(params, &[1; 32]).unwrap(), &data);
        let b = cut_points(&Chunker::new(params, &[2; 32]).unwrap(), &data);
        assert!(a.len() > 10 && b.len() > 10);
        // Apart from the end of the input, a shared cut point is a coincidence.
        let shared = a.intersection(&b).count();
        assert!(shared <= 2, "{shared} of {} cut points shared", a.len());
    }

    #[test]
    fn the_crate_is_the_oracle() {
        // Given the crate's own tables, cairn's chunker cuts exactly where the crate's
        // FastCDC (2020, normalization level 1) does: the keyed chunker differs only in its
        // table.
        use fastcdc::v2020::{get_gear_with_seed, FastCDC, Normalization};
        for (params, len, seed) in [
            (small(), 300_000, 3u64),
            (ChunkerParams::METADATA, 3_000_000, 4),
            (ChunkerParams::DATA, 30_000_000, 5),
        ] {
            let mut data = pseudo_random(len, seed);
            // Long runs of zeros force maximum-size chunks too.
            data[len / 4..len / 4 + 2 * params.max_size as usize].fill(0);
            // Seed 0 leaves the crate's tables as they are.
            let (gear, gear_ls) = get_gear_with_seed(0);
            let ours: Vec<usize> = Chunker::with_tables(params, gear, gear_ls)
                .unwrap()
                .split(&data)
                .map(|s| s.len())
                .collect();
            let theirs: Vec<usize> = FastCDC::with_level(
                &data,
                params.min_size,
                params.avg_size,
                params.max_size,
                Normalization::Level1,
            )
            .map(|c| c.length)
            .collect();
            assert_eq!(ours, theirs, "{params:?}");
        }
    }

    #[test]
    fn the_keyed_table_is_not_a_seeded_crate_table() {
        // Format 1's table was GEAR[i] ^ seed: every entry XORed with the same value. No
        // such seed relates the keyed table to the crate's.
        let (gear, gear_ls) = keyed_gear(&[9; 32]);
        let (crate_gear, _) = fastcdc::v2020::get_gear_with_seed(0);
        let seed = gear[0] ^ crate_gear[0];
        let same = (0..256)
            .filter(|&i| gear[i] ^ crate_gear[i] == seed)
            .count();
        assert_eq!(same, 1);
        assert!((0..256).all(|i| gear_ls[i] == gear[i] << 1));
        let distinct: std::collections::HashSet<u64> = gear.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn an_insertion_only_changes_nearby_chunks() {
        let c = Chunker::new(small(), &[7; 32]).unwrap();
        let data = pseudo_random(100_000, 9);
        let mut edited = data.clone();
        edited.splice(50_000..50_000, b"inserted".iter().copied());
        let a: std::collections::HashSet<&[u8]> = c.split(&data).collect();
        let b: Vec<&[u8]> = c.split(&edited).collect();
        let shared = b.iter().filter(|ch| a.contains(*ch)).count();
        assert!(shared + 4 >= b.len(), "{shared} of {}", b.len());
    }

    #[test]
    fn the_read_buffer_grows_only_as_far_as_a_stream_needs() {
        let c = Chunker::new(ChunkerParams::DATA, &[3; 32]).unwrap();
        let max = ChunkerParams::DATA.max_size as usize;
        let cut_all = |data: &[u8], buf: &mut Vec<u8>| {
            let mut r = ChunkReader::new(&c, data, buf);
            let mut out = Vec::new();
            while let Some(ch) = r.next_chunk().unwrap() {
                out.extend_from_slice(ch);
            }
            out
        };
        // Small files: the buffer stays at its first size.
        let mut buf = Vec::new();
        let small = pseudo_random(100_000, 1);
        assert_eq!(cut_all(&small, &mut buf), small);
        assert_eq!(buf.len(), FIRST_READ);
        // A large stream: two largest chunks, never more, and the same chunks as in one piece.
        let large = pseudo_random(5 * max + 12_345, 2);
        let whole: Vec<&[u8]> = c.split(&large).collect();
        let mut r = ChunkReader::new(&c, &large[..], &mut buf);
        let mut n = 0;
        while let Some(ch) = r.next_chunk().unwrap() {
            assert_eq!(ch, whole[n]);
            n += 1;
        }
        assert_eq!(n, whole.len());
        assert_eq!(buf.len(), READ_SPAN * max);
    }

    #[test]
    fn default_parameters_are_valid() {
        ChunkerParams::DATA.validate().unwrap();
        ChunkerParams::METADATA.validate().unwrap();
    }
}
