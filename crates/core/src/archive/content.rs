//! Reading a file's contents back from its chunks, for the commands that stream them (`dump`,
//! `export-tar`) and for `mount`.
//!
//! Chunks of a file mostly lie next to each other in a pack (they were stored in the order they
//! were read), so [`Contents::write_to`] merges runs of them into one ranged read, as extract's
//! planner does, then authenticates, decrypts and checks each chunk on its own.

use std::io::Write;

use crate::error::{Error, Result};
use crate::format::item::ChunkRef;
use crate::index::ChunkIndex;
use crate::repo::Repository;
use crate::store::ByteRange;
use crate::util::id::PackId;
use crate::util::recycle::{PLAIN, READS};

/// Reads of one pack are merged across gaps up to this size…
const MAX_GAP: u64 = 256 * 1024;
/// …into reads of at most this size.
const MAX_READ: u64 = 16 << 20;

/// Where contents are read from.
#[derive(Clone, Copy)]
pub struct Contents<'a> {
    pub repo: &'a Repository,
    pub index: &'a ChunkIndex,
    /// Threads that read and decrypt for [`Contents::write_to`] (1: the calling thread).
    pub threads: usize,
}

/// Chunks of one pack read with one ranged read: `[start, end)` of `pack`, and each chunk
/// with its offset and length there.
pub struct Run {
    pub pack: PackId,
    pub start: u64,
    pub end: u64,
    pub chunks: Vec<(ChunkRef, u64, u64)>,
    /// The plaintext the items say the chunks hold, all told.
    pub plain: u64,
}

/// A run's plaintext, at most (unless one chunk is larger): a chunk repeated at one place
/// (a file of one pattern) reads nothing more, but its copies are decoded into one buffer.
const MAX_RUN_PLAIN: u64 = 64 << 20;

/// Groups chunks, in the order given, into runs of at most `max_len` bytes that lie together
/// in one pack (gaps up to 256 KiB read through).
pub struct RunPlanner {
    pub runs: Vec<Run>,
    max_len: u64,
}

impl RunPlanner {
    pub fn new(max_len: u64) -> Self {
        Self {
            runs: Vec::new(),
            max_len,
        }
    }

    /// Adds chunk `c`, stored at `off..off + len` of `pack`.
    pub fn push(&mut self, c: ChunkRef, pack: PackId, off: u64, len: u64) {
        if let Some(r) = self.runs.last_mut() {
            if r.pack == pack
                && off >= r.start
                && off <= r.end + MAX_GAP
                && (off + len).max(r.end) - r.start <= self.max_len
                && r.plain + u64::from(c.len) <= MAX_RUN_PLAIN
            {
                r.end = r.end.max(off + len);
                r.plain += u64::from(c.len);
                r.chunks.push((c, off, len));
                return;
            }
        }
        self.runs.push(Run {
            pack,
            start: off,
            end: off + len,
            chunks: vec![(c, off, len)],
            plain: u64::from(c.len),
        });
    }
}

impl<'a> Contents<'a> {
    pub fn new(repo: &'a Repository, index: &'a ChunkIndex) -> Self {
        Self {
            repo,
            index,
            threads: 1,
        }
    }

    /// The same, reading and decrypting on `threads` threads.
    pub fn with_threads(self, threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            ..self
        }
    }

    /// Writes the plaintext of `chunks`, in order, to `out`; `sink` names `out` in errors.
    /// Returns the bytes written. Runs of chunks are read and decrypted on [`Self::threads`]
    /// threads, at most two runs (16 MiB each) a thread ahead of what is written.
    pub fn write_to(&self, chunks: &[ChunkRef], out: &mut dyn Write, sink: &str) -> Result<u64> {
        let mut written = 0u64;
        self.decode_files(&[chunks], |_, plain| {
            let Ok(plain) = plain else {
                return Ok(());
            };
            out.write_all(plain).map_err(|e| Error::io(sink, e))?;
            written += plain.len() as u64;
            Ok(())
        })?;
        Ok(written)
    }

    /// The plaintext of several files' `chunks`, one file after another, read and decrypted
    /// in one pipeline ([`Self::write_to`]'s): the next file's first runs are decrypted while
    /// the last of the one before are taken, instead of the threads waiting at each file's
    /// end. `take(i, piece)` gets file `i`'s plaintext in pieces, in order; an error from
    /// `take` ends the reading. An error reading a piece is shown to `take` (say, to write
    /// the header of a file that begins there), then ends the reading and is returned. A
    /// chunk the index lacks is an error before anything is taken. All the files' runs are
    /// planned first: about 50 bytes a chunk.
    pub fn decode_files(
        &self,
        files: &[&[ChunkRef]],
        mut take: impl FnMut(usize, std::result::Result<&[u8], &Error>) -> Result<()>,
    ) -> Result<()> {
        // Each file's runs: a run never holds two files' chunks.
        let mut runs: Vec<(usize, Run)> = Vec::new();
        for (i, chunks) in files.iter().enumerate() {
            let mut plan = RunPlanner::new(MAX_READ);
            for c in chunks.iter() {
                let (pack, loc) = self.index.stored(&c.id).ok_or_else(|| missing(c))?;
                plan.push(*c, pack, u64::from(loc.offset), u64::from(loc.len));
            }
            runs.extend(plan.runs.into_iter().map(|r| (i, r)));
        }
        // Each run is decoded into one buffer, in the order of its chunks; buffers are handed
        // back once taken, and used again ([`PLAIN`]).
        let read = |(file, run): &(usize, Run)| -> (usize, Result<(Vec<u8>, usize)>) {
            // What the items say the run holds picks the buffer; it grows only as chunks
            // that authenticate and have those lengths are decoded into it.
            let mut plain = PLAIN.take(usize::try_from(run.plain).unwrap_or(usize::MAX));
            let mut at = 0;
            let decoded = self.read_run_blobs(run, |c, blob, pack| {
                let n = c.len as usize;
                self.repo
                    .open_chunk_into((&c.id, blob, pack), &mut plain, at, n)?;
                at += n;
                Ok(())
            });
            match decoded {
                Ok(()) => (*file, Ok((plain, at))),
                Err(e) => {
                    PLAIN.give(plain);
                    (*file, Err(e))
                }
            }
        };
        crate::util::parallel::in_order(&runs, self.threads, read, |(file, run)| match run {
            Ok((plain, n)) => {
                let took = take(file, Ok(&plain[..n]));
                PLAIN.give(plain);
                took
            }
            Err(e) => take(file, Err(&e)).and(Err(e)),
        })
    }

    /// Decrypts each of `chunks`, in order and on the calling thread, into `out` at the
    /// offset beside it (`out` already holds that range): for a caller that lays the plaintext
    /// out among bytes of its own (`export-tar`'s entries) without copying it again. On an
    /// error, the ranges hold nothing of use.
    pub fn decode_at(&self, chunks: &[(ChunkRef, usize)], out: &mut Vec<u8>) -> Result<()> {
        let mut plan = RunPlanner::new(MAX_READ);
        for (c, _) in chunks {
            let (pack, loc) = self.index.stored(&c.id).ok_or_else(|| missing(c))?;
            plan.push(*c, pack, u64::from(loc.offset), u64::from(loc.len));
        }
        // The runs hold the chunks in the order given.
        let mut at = chunks.iter().map(|(_, at)| *at);
        for run in &plan.runs {
            self.read_run_blobs(run, |c, blob, pack| {
                let dest = at.next().ok_or_else(|| missing(c))?;
                self.repo
                    .open_chunk_into((&c.id, blob, pack), out, dest, c.len as usize)
            })?;
        }
        Ok(())
    }

    /// Reads a run with one ranged read, then authenticates, decrypts and checks each chunk
    /// of it, and hands it to `each`, in order.
    pub fn read_run(
        &self,
        run: &Run,
        mut each: impl FnMut(&ChunkRef, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        self.read_run_blobs(run, |c, blob, pack| {
            let plain = self.repo.open_chunk(&c.id, blob, pack)?;
            check_len(c, &plain)?;
            each(c, plain)
        })
    }

    /// Reads a run with one ranged read and hands each chunk's blob, still sealed, to `each`
    /// with the pack's name, in order.
    pub fn read_run_blobs(
        &self,
        run: &Run,
        mut each: impl FnMut(&ChunkRef, &[u8], &str) -> Result<()>,
    ) -> Result<()> {
        let name = run.pack.object_name();
        // A buffer an earlier read handed back ([`READS`]).
        let range = ByteRange::new(run.start, run.end - run.start);
        let mut bytes = READS.take(range.len as usize);
        let read = self.repo.store().get_into(&name, Some(range), &mut bytes);
        let done = read.map_err(Error::from).and_then(|()| {
            for (c, off, len) in &run.chunks {
                let s = (off - run.start) as usize;
                let blob = bytes.get(s..s + *len as usize).ok_or_else(|| {
                    Error::corrupt(format!("pack {name}"), "shorter than the index says")
                })?;
                each(c, blob, &name)?;
            }
            Ok(())
        });
        READS.give(bytes);
        done
    }
}

/// The error for a chunk the index does not have.
pub fn missing(c: &ChunkRef) -> Error {
    Error::corrupt(format!("chunk {}", c.id), "not in the index (missing)")
}

/// A chunk's plaintext must have the length the item gives it.
pub fn check_len(c: &ChunkRef, plain: &[u8]) -> Result<()> {
    if plain.len() != c.len as usize {
        return Err(Error::corrupt(
            format!("chunk {}", c.id),
            format!("has {} bytes, the item says {}", plain.len(), c.len),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::id::ChunkId;

    fn chunk(n: u8, len: u32) -> ChunkRef {
        ChunkRef {
            id: ChunkId([n; 32]),
            len,
        }
    }

    /// A chunk repeated at one place of a pack (a file of one pattern) is split into runs of
    /// at most 64 MiB of plaintext: each run's plaintext is decoded into one buffer.
    #[test]
    fn a_repeated_chunk_makes_runs_of_bounded_plaintext() {
        let pack = PackId([1; 32]);
        let mut plan = RunPlanner::new(MAX_READ);
        for _ in 0..1000 {
            plan.push(chunk(7, 1 << 20), pack, 4096, 600_000);
        }
        assert_eq!(plan.runs.len(), 16);
        assert!(plan.runs.iter().all(|r| r.plain <= MAX_RUN_PLAIN));
        let total: u64 = plan.runs.iter().map(|r| r.plain).sum();
        assert_eq!(total, 1000 << 20);
        assert!(plan
            .runs
            .iter()
            .all(|r| (r.start, r.end) == (4096, 604_096)));
        // Neighbours still merge into one read up to its limit.
        let mut plan = RunPlanner::new(MAX_READ);
        for i in 0..10u64 {
            plan.push(chunk(i as u8, 2 << 20), pack, i * 1_000_000, 1_000_000);
        }
        assert_eq!(plan.runs.len(), 1);
        assert_eq!(plan.runs[0].plain, 20 << 20);
    }
}
