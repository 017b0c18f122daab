//! The last backup's files cache, read as this backup walks.
//!
//! A backup writes its cache in walk order, which is tree order ([`tree_order`]) when its
//! sources are; the next backup of the same sources looks files up in that same order. So
//! the cache is read forward, one window of the file at a time, and a lookup moves a cursor
//! past the entries before its path: ten million files cost a window (1 MiB), not the
//! gigabyte the whole cache takes. A path before the cursor is a miss (that file is read
//! again).
//!
//! The entries are checked to come in strictly increasing tree order as they are read. At the
//! first one that does not (sources given out of order, a path entered twice), the whole
//! cache is read and held [`Indexed`], as every cache was before: lookups then go on from
//! there in any order. A cache found damaged part way answers no more lookups.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{decode_entry, decode_header, CacheEntry, Indexed};
use crate::error::{Error, Result};
use crate::format::item::tree_order;
use crate::util::wire::Decoder;

/// Bytes read from the file at a time.
const WINDOW: usize = 1 << 20;

pub(super) struct Streamed {
    state: State,
}

enum State {
    /// Reading forward: the entry at the cursor (`None` past the last).
    Reading {
        entries: Entries,
        at: Option<(Vec<u8>, CacheEntry)>,
    },
    /// The entries were out of order: the whole cache, in memory.
    Indexed(Indexed),
    /// The cache turned out damaged: every lookup misses.
    Damaged,
}

/// Why reading entries stopped.
enum Stop {
    OutOfOrder,
    Damaged,
}

impl Streamed {
    /// Opens the cache at `path` and reads its header: its `read_with` and entry count.
    pub(super) fn open(path: &Path) -> Result<(u8, usize, Self)> {
        // Without waiting for a writer: a FIFO planted where the cache goes is refused below
        // as not a regular file, never a hang.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        trusted(&file, path)?;
        let mut entries = Entries {
            file,
            buf: Vec::new(),
            start: 0,
            eof: false,
            left: 0,
            last: None,
        };
        let (read_with, count) = entries.decode(decode_header)?;
        entries.left = count;
        let mut s = Self {
            state: State::Reading { entries, at: None },
        };
        s.advance();
        Ok((read_with, count, s))
    }

    pub(super) fn get(&mut self, path: &[u8]) -> Option<CacheEntry> {
        loop {
            match &mut self.state {
                State::Indexed(ix) => return ix.get(path),
                State::Damaged => return None,
                State::Reading { at, .. } => match tree_order(&at.as_ref()?.0, path) {
                    Ordering::Less => self.advance(),
                    Ordering::Greater => return None,
                    Ordering::Equal => {
                        let (_, entry) = at.take()?;
                        self.advance();
                        return Some(entry);
                    }
                },
            }
        }
    }

    /// Moves the cursor to the next entry; out of order, reads the whole cache instead.
    fn advance(&mut self) {
        let State::Reading { entries, at } = &mut self.state else {
            return;
        };
        match entries.next() {
            Ok(next) => *at = next,
            Err(Stop::Damaged) => self.state = State::Damaged,
            Err(Stop::OutOfOrder) => {
                self.state = match entries.whole().and_then(Indexed::decode) {
                    Ok((_, ix)) => State::Indexed(ix),
                    Err(_) => State::Damaged,
                }
            }
        }
    }
}

/// Whether the cache at `path` (opened as `file`) can only have been written by this user: a
/// regular file of this user's that no one else may write, in a directory of this user's that
/// no one else may write to. A cache says which files need not be read, so one that another
/// user could have planted is not read; the cache is rebuilt from the archive instead.
fn trusted(file: &File, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let private = |m: &std::fs::Metadata| m.uid() == me && m.mode() & 0o022 == 0;
    let dir = path.parent().unwrap_or(Path::new("."));
    let f = file.metadata().map_err(|e| Error::io(path, e))?;
    let d = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if f.is_file() && private(&f) && private(&d) {
        Ok(())
    } else {
        Err(Error::corrupt(
            "files cache",
            "others could have written it (not this user's, or writable by others)",
        ))
    }
}

/// The entries of a cache file, decoded from a window read forward.
struct Entries {
    file: File,
    /// Bytes read and not yet decoded start at `start`.
    buf: Vec<u8>,
    start: usize,
    eof: bool,
    /// Entries not yet read.
    left: usize,
    /// The path of the last entry read.
    last: Option<Vec<u8>>,
}

impl Entries {
    /// Decodes one thing at the window's start with `f`, reading more of the file while the
    /// window is too short for it (twice as much each time, for an entry larger than the
    /// window).
    fn decode<T>(&mut self, mut f: impl FnMut(&mut Decoder) -> Result<T>) -> Result<T> {
        let mut want = WINDOW;
        loop {
            let mut d = Decoder::new(&self.buf[self.start..], "files cache");
            match f(&mut d) {
                Ok(v) => {
                    self.start += d.position();
                    return Ok(v);
                }
                Err(e) if self.eof => return Err(e),
                Err(_) => {
                    self.read_more(want)?;
                    want = want.saturating_mul(2);
                }
            }
        }
    }

    fn read_more(&mut self, want: usize) -> Result<()> {
        self.buf.drain(..self.start);
        self.start = 0;
        let len = self.buf.len();
        self.buf.resize(len + want, 0);
        let mut got = 0;
        while got < want {
            match self.file.read(&mut self.buf[len + got..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(Path::new("files cache"), e)),
            }
        }
        self.buf.truncate(len + got);
        Ok(())
    }

    /// The next entry with its path; `None` after the last.
    fn next(&mut self) -> std::result::Result<Option<(Vec<u8>, CacheEntry)>, Stop> {
        if self.left == 0 {
            return Ok(None);
        }
        let (path, entry) = self
            .decode(|d| decode_entry(d).map(|(p, e)| (p.to_vec(), e)))
            .map_err(|_| Stop::Damaged)?;
        self.left -= 1;
        if let Some(last) = &self.last {
            if tree_order(last, &path) != Ordering::Less {
                return Err(Stop::OutOfOrder);
            }
        }
        self.last = Some(path.clone());
        Ok(Some((path, entry)))
    }

    /// The whole file, from its start.
    fn whole(&mut self) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_to_end(&mut bytes))
            .map_err(|e| Error::io(Path::new("files cache"), e))?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{save, ChunkRef, FilesCacheWriter};
    use super::*;
    use crate::format::item::Timestamp;
    use crate::util::id::ChunkId;

    fn entry(i: u64, chunks: usize) -> CacheEntry {
        CacheEntry {
            inode: i,
            size: i * 3,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks: (0..chunks)
                .map(|c| ChunkRef {
                    id: ChunkId(crate::util::id::sha256(
                        &(i * 1_000_003 + c as u64).to_le_bytes(),
                    )),
                    len: c as u32,
                })
                .collect(),
            attrs: None,
        }
    }

    /// A cache of `paths` (with entry `i` for the `i`th), saved and loaded as a backup loads it.
    fn saved(dir: &Path, paths: &[String], chunks: usize) -> super::super::FilesCache {
        let mut w = FilesCacheWriter::new(super::super::UNKNOWN);
        for (i, p) in paths.iter().enumerate() {
            w.insert(p.as_bytes(), &entry(i as u64, chunks));
        }
        let path = dir.join("files");
        save(&path, w).unwrap();
        super::super::load(&path).unwrap()
    }

    fn streaming(c: &super::super::FilesCache) -> bool {
        match &c.how {
            super::super::How::Streamed(s) => {
                matches!(s.lock().unwrap().state, State::Reading { .. })
            }
            super::super::How::Indexed(_) => false,
        }
    }

    /// Looked up in the order written, over many windows: every entry is found, paths not in
    /// the cache miss without losing the place, and the cache is never held whole.
    #[test]
    fn a_cache_in_tree_order_is_read_forward_and_every_entry_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths: Vec<String> = (0..40_000).map(|i| format!("d{}/f{i}", i % 7)).collect();
        paths.sort_by(|a, b| tree_order(a.as_bytes(), b.as_bytes()));
        let c = saved(dir.path(), &paths, 1);
        assert_eq!(c.len(), 40_000);
        for (i, p) in paths.iter().enumerate() {
            // A new file between two cached ones misses, and the next is still found.
            if i > 0 {
                let between = format!("{}\u{1}", paths[i - 1]);
                assert_eq!(c.get(between.as_bytes()), None);
            }
            if i % 3 == 0 {
                continue;
            }
            assert_eq!(c.get(p.as_bytes()), Some(entry(i as u64, 1)), "{p}");
        }
        assert!(streaming(&c), "read forward to the end");
        assert_eq!(
            c.get(paths[5].as_bytes()),
            None,
            "behind the cursor: a miss"
        );
        assert_eq!(c.get(b"zzz"), None);
    }

    /// Entries larger than the window (a file of 100,000 chunks) are read whole.
    #[test]
    fn entries_larger_than_the_window_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let c = saved(dir.path(), &paths, 100_000);
        assert_eq!(c.get(b"b"), Some(entry(1, 100_000)));
        assert_eq!(c.get(b"c"), Some(entry(2, 100_000)));
    }

    /// Out of order (sources given out of order, a path twice): the whole cache is indexed
    /// at the first entry out of place, and every path is found in any order, the last entry
    /// of a path twice winning, as before.
    #[test]
    fn a_cache_out_of_order_is_indexed_and_found_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<String> = ["home/a", "home/b", "etc/x", "etc/y", "etc/x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = saved(dir.path(), &paths, 1);
        assert_eq!(c.get(b"home/b"), Some(entry(1, 1)));
        assert!(!streaming(&c), "indexed at etc/x");
        assert_eq!(c.get(b"home/a"), Some(entry(0, 1)));
        assert_eq!(c.get(b"etc/x"), Some(entry(4, 1)), "the last entry wins");
        assert_eq!(c.get(b"etc/y"), Some(entry(3, 1)));
    }

    /// A FIFO where the cache goes is no cache, at once: opening it does not wait for a
    /// writer.
    #[test]
    fn a_fifo_where_the_cache_goes_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("files");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(super::super::load(&path).is_none());
        });
        let refused = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(refused, Ok(true), "load waited on the FIFO");
    }

    /// A cache cut short, or with a bad header: what was read before the damage is found, the
    /// rest misses, nothing panics; a bad header is no cache at all.
    #[test]
    fn a_damaged_cache_misses_from_the_damage_on() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<String> = (0..1000).map(|i| format!("f{i:04}")).collect();
        let full = saved(dir.path(), &paths, 1);
        drop(full);
        let path = dir.path().join("files");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let c = super::super::load(&path).unwrap();
        assert_eq!(c.get(b"f0001"), Some(entry(1, 1)));
        assert_eq!(c.get(b"f0999"), None);
        std::fs::write(&path, b"CAIRNFC1\0\0\0\0\0").unwrap();
        assert!(super::super::load(&path).is_none());
        assert!(super::super::load(&dir.path().join("none")).is_none());
    }
}
