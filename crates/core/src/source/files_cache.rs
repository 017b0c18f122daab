//! The files cache: what the last backup of a series knew about each regular file, so an
//! unchanged file (same inode, size, ctime and mtime) is not read again.
//!
//! Kept outside the repository, in `$XDG_CACHE_HOME/cairn/<repository id>/files-<hash of the
//! archive name>`, written atomically after an archive is committed. A lost cache is rebuilt
//! from the newest archive of the series. Its chunks are only reused if the index still has
//! them. Files whose ctime or mtime is within two seconds of when they were read are not
//! cached: a change in the same timestamp tick would otherwise go unnoticed.
//!
//! A cache written by a backup also holds each file's inode flags and extended attributes
//! (ACLs among them) as that backup read them, with which of them it read (`--noacls`,
//! `--noxattrs`, `--noflags`): a file whose inode, size, mtime and ctime match is then taken
//! whole from the cache, without being opened (setting an attribute, an ACL or a flag
//! changes the ctime). A cache rebuilt from an archive does not know how its attributes
//! were read, and they are read from the file as before.
//!
//! Format: magic "CAIRNFC2" · read-with u8 (bit 0 ACLs, bit 1 other xattrs, bit 2 flags,
//! bit 3 read as root; 0xff: attributes unknown) · entry count u32 · entries (path bytes · inode u64 · size u64 ·
//! mtime i64 s, u32 ns · ctime i64 s, u32 ns · chunk count u32 · (chunk id 32 · len u32)… ·
//! attributes u8 (0 none, 1 known) [· flags u32 · xattr count u32 · (name bytes · value
//! bytes)…]). A cache of the earlier format "CAIRNFC1" is not read: it is rebuilt.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp, FLAG_CHANGED, FLAG_DAMAGED};
use crate::util::id::{sha256, ChunkId};
use crate::util::wire::{Decoder, Encoder};

mod stream;

const MAGIC: [u8; 8] = *b"CAIRNFC2";

/// `read_with` of a cache whose attributes were not read by a backup.
const UNKNOWN: u8 = 0xff;

/// What a backup read of a file besides its contents: its inode flags (as read, before
/// `--noflags` leaves them out of the item) and its extended attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub inode_flags: u32,
    pub xattrs: crate::source::fsmeta::Xattrs,
}

/// Which attributes a backup read, as the cache records it: the options, and whether it ran
/// as root (who reads `trusted.*` attributes, which others cannot see).
pub fn read_with(meta: &crate::source::fsmeta::MetaOptions) -> u8 {
    // Asked once per cached file: the process's euid does not change, so one system call.
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let root = *ROOT.get_or_init(|| rustix::process::geteuid().is_root());
    u8::from(meta.acls)
        | u8::from(meta.xattrs) << 1
        | u8::from(meta.flags) << 2
        | u8::from(root) << 3
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub inode: u64,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub chunks: Vec<ChunkRef>,
    /// The attributes the backup that made the entry read (`None`: unknown).
    pub attrs: Option<Attrs>,
}

impl CacheEntry {
    /// Whether a file with this stat is unchanged since the entry was made.
    pub fn matches(&self, inode: u64, size: u64, mtime: Timestamp, ctime: Timestamp) -> bool {
        self.inode == inode && self.size == size && self.mtime == mtime && self.ctime == ctime
    }
}

/// The files cache of the last backup, as a backup reads it. A cache loaded from its file is
/// read as the walk goes ([`stream`]): a backup looks files up in the order the last one
/// wrote them, so memory holds a window of the file, not the file. A cache rebuilt from an
/// archive, or one whose entries turn out not to be in tree order, is held [`Indexed`].
pub struct FilesCache {
    /// Which attributes the entries' `attrs` were read with ([`read_with`]).
    read_with: u8,
    /// Entries, as the header counts them.
    count: usize,
    how: How,
}

enum How {
    Indexed(Indexed),
    Streamed(std::sync::Mutex<stream::Streamed>),
}

/// A cache in memory: the encoded bytes, and an index of (hash of the path, offset of the
/// entry) sorted, so a million files cost the file's size and 16 bytes each (a hash map of
/// decoded entries cost about 400). An entry is decoded when it is looked up.
#[derive(Default)]
struct Indexed {
    bytes: Vec<u8>,
    /// (hash of the path, offset of its entry in `bytes`), sorted; equal hashes by offset.
    slots: Vec<(u64, u64)>,
    /// Keyed per process, so that no one can plant paths that share a hash.
    keys: std::collections::hash_map::RandomState,
}

impl Default for FilesCache {
    fn default() -> Self {
        Self {
            read_with: UNKNOWN,
            count: 0,
            how: How::Indexed(Indexed::default()),
        }
    }
}

/// The header: magic, `read_with`, entry count (as written: each entry is read and checked
/// before it is used).
fn decode_header(d: &mut Decoder) -> Result<(u8, usize)> {
    d.magic(&MAGIC, "a files cache")?;
    let read_with = d.u8()?;
    Ok((read_with, d.u32()? as usize))
}

/// An entry at the decoder's position: its path and the entry.
fn decode_entry<'a>(d: &mut Decoder<'a>) -> Result<(&'a [u8], CacheEntry)> {
    let path = d.bytes()?;
    let inode = d.u64()?;
    let size = d.u64()?;
    let mtime = Timestamp::decode(d)?;
    let ctime = Timestamp::decode(d)?;
    let nc = d.count(36)?;
    let mut chunks = Vec::with_capacity(nc);
    for _ in 0..nc {
        chunks.push(ChunkRef {
            id: ChunkId(d.id()?),
            len: d.u32()?,
        });
    }
    let attrs = match d.u8()? {
        0 => None,
        1 => {
            let inode_flags = d.u32()?;
            let nx = d.count(8)?;
            let mut xattrs = Vec::with_capacity(nx);
            for _ in 0..nx {
                xattrs.push((d.bytes()?.to_vec(), d.bytes()?.to_vec()));
            }
            Some(Attrs {
                inode_flags,
                xattrs,
            })
        }
        _ => return Err(Error::corrupt("files cache", "bad attributes tag")),
    };
    let entry = CacheEntry {
        inode,
        size,
        mtime,
        ctime,
        chunks,
        attrs,
    };
    Ok((path, entry))
}

impl FilesCache {
    /// The attributes an entry holds, when they were read as `meta` asks now.
    pub fn attrs<'a>(
        &self,
        entry: &'a CacheEntry,
        meta: &crate::source::fsmeta::MetaOptions,
    ) -> Option<&'a Attrs> {
        (self.read_with == read_with(meta))
            .then_some(entry.attrs.as_ref())
            .flatten()
    }

    /// Entries, counting a path entered twice twice.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The entry of `path` (the last one, if it was entered twice). A cache read as the walk
    /// goes answers only paths after the last one it was asked for (in tree order): an earlier
    /// path is a miss, and that file is read again.
    pub fn get(&self, path: &[u8]) -> Option<CacheEntry> {
        match &self.how {
            How::Indexed(ix) => ix.get(path),
            How::Streamed(s) => s.lock().ok()?.get(path),
        }
    }

    /// Rebuilds from the items of an archive started at `started`: regular files not flagged
    /// as changed or damaged, whose ctime was already `min_age_ns` old when the backup began
    /// (the rule a live backup applies at the moment it reads a file).
    pub fn from_items<'a>(
        items: impl IntoIterator<Item = &'a Item>,
        started: Timestamp,
        min_age_ns: i128,
    ) -> Self {
        let mut w = FilesCacheWriter::new(UNKNOWN);
        for it in items {
            let old_enough = it.ctime.max(it.mtime).as_nanos() < started.as_nanos() - min_age_ns;
            if it.kind == ItemKind::File
                && it.flags & (FLAG_CHANGED | FLAG_DAMAGED) == 0
                && old_enough
            {
                let stamp = CacheEntry {
                    inode: it.inode,
                    size: it.size,
                    mtime: it.mtime,
                    ctime: it.ctime,
                    chunks: Vec::new(),
                    attrs: None,
                };
                w.insert_parts(&it.path, &stamp, &it.chunks, None);
            }
        }
        w.into_cache()
    }

    /// Checks every entry of an encoded cache and indexes them.
    pub fn decode(bytes: Vec<u8>) -> Result<Self> {
        let (read_with, ix) = Indexed::decode(bytes)?;
        Ok(Self {
            read_with,
            count: ix.slots.len(),
            how: How::Indexed(ix),
        })
    }
}

impl Indexed {
    /// Checks every entry of an encoded cache and indexes them; with the cache's `read_with`.
    fn decode(bytes: Vec<u8>) -> Result<(u8, Self)> {
        let keys = std::collections::hash_map::RandomState::new();
        let mut d = Decoder::new(&bytes, "files cache");
        let (read_with, n) = decode_header(&mut d)?;
        // Every entry takes at least 49 bytes: a count the bytes cannot hold allocates nothing.
        let mut slots = Vec::with_capacity(n.min(bytes.len() / 49));
        for _ in 0..n {
            let at = d.position() as u64;
            let (path, _) = decode_entry(&mut d)?;
            slots.push((std::hash::BuildHasher::hash_one(&keys, path), at));
        }
        d.expect_end()?;
        slots.sort_unstable();
        Ok((read_with, Self { bytes, slots, keys }))
    }

    fn get(&self, path: &[u8]) -> Option<CacheEntry> {
        let h = std::hash::BuildHasher::hash_one(&self.keys, path);
        let first = self.slots.partition_point(|s| s.0 < h);
        let mut found = None;
        for &(_, at) in self.slots[first..].iter().take_while(|s| s.0 == h) {
            let mut d = Decoder::new(self.bytes.get(at as usize..)?, "files cache");
            if let Ok((p, entry)) = decode_entry(&mut d) {
                if p == path {
                    found = Some(entry);
                }
            }
        }
        found
    }
}

/// The files cache a backup writes, built as it goes: each entry is encoded when the file is
/// done, in walk order, so the cache costs its encoded size (about 110 bytes for a one-chunk
/// file) instead of a hash map's entry, key and lists (about 400). Nothing looks entries up
/// while a backup runs; the next backup decodes the file into a [`FilesCache`]. A path entered
/// twice (two sources naming one file) is decoded last-wins, as a map's insert would have it.
///
/// Given a directory ([`Self::spilling_into`]), a cache past [`SPILL_AT`] bytes goes on in an
/// unnamed file there instead of memory: ten million files would otherwise hold a gigabyte
/// until the backup ends. Memory then holds at most [`SPILL_EVERY`] bytes of it. Without
/// such a file (the directory cannot be made, the file system has no unnamed files) the
/// cache stays in memory, as before.
pub struct FilesCacheWriter {
    /// The encoding not yet spilled: from the header on, until the cache is spilled.
    e: Encoder,
    count: u32,
    spill: Spill,
}

/// Bytes of cache kept in memory before they go to a file (about 36,000 files).
const SPILL_AT: usize = 4 << 20;
/// Bytes gathered in memory between writes to the spill file.
const SPILL_EVERY: usize = 1 << 20;

enum Spill {
    /// In memory only.
    Never,
    /// In memory, until it is large enough to go into a file in this directory.
    Into(PathBuf),
    /// Written up to `e` into this file.
    File(std::fs::File),
    /// A write to the spill file failed: the cache will not be saved.
    Failed(std::io::Error),
}

impl FilesCacheWriter {
    /// Offset of the entry count in the header.
    const COUNT_AT: usize = MAGIC.len() + 1;

    /// An empty cache whose attributes were read as `read_with` says.
    fn new(read_with: u8) -> Self {
        let mut e = Encoder::new();
        e.raw(&MAGIC).u8(read_with).u32(0);
        Self {
            e,
            count: 0,
            spill: Spill::Never,
        }
    }

    /// An empty cache for a backup that reads attributes as `meta` says.
    pub fn reading(meta: &crate::source::fsmeta::MetaOptions) -> Self {
        Self::new(read_with(meta))
    }

    /// The same writer, which puts a large cache in an unnamed file in `dir` (see the type).
    pub fn spilling_into(mut self, dir: Option<PathBuf>) -> Self {
        self.spill = dir.map_or(Spill::Never, Spill::Into);
        self
    }

    /// Moves what is in memory to the spill file when there is enough of it.
    fn maybe_spill(&mut self) {
        let len = self.e.buf.len();
        let due = match &self.spill {
            Spill::Into(_) => len >= SPILL_AT,
            Spill::File(_) => len >= SPILL_EVERY,
            Spill::Never | Spill::Failed(_) => false,
        };
        if !due {
            return;
        }
        if let Spill::Into(dir) = &self.spill {
            self.spill = match crate::repo::cache_dir::unnamed_file(dir) {
                Ok(f) => Spill::File(f),
                Err(_) => Spill::Never,
            };
        }
        if let Spill::File(f) = &mut self.spill {
            use std::io::Write;
            match f.write_all(&self.e.buf) {
                Ok(()) => self.e.buf.clear(),
                Err(e) => {
                    self.e.buf = Vec::new();
                    self.spill = Spill::Failed(e);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn insert(&mut self, path: &[u8], x: &CacheEntry) {
        let attrs = x.attrs.as_ref().map(|a| (a.inode_flags, &a.xattrs));
        self.insert_parts(path, x, &x.chunks, attrs);
    }

    /// An entry whose stamp is `x`'s (its chunks and attributes are not looked at) with these
    /// chunks and attributes (inode flags, xattrs): a file just read, without copying its
    /// item's lists into a [`CacheEntry`].
    pub fn insert_parts(
        &mut self,
        path: &[u8],
        x: &CacheEntry,
        chunks: &[ChunkRef],
        attrs: Option<(u32, &crate::source::fsmeta::Xattrs)>,
    ) {
        // A failed spill: the cache will not be saved, so nothing more is kept of it.
        if matches!(self.spill, Spill::Failed(_)) {
            self.count = self.count.saturating_add(1);
            return;
        }
        let e = &mut self.e;
        e.bytes(path).u64(x.inode).u64(x.size);
        x.mtime.encode(e);
        x.ctime.encode(e);
        e.u32(chunks.len() as u32);
        for c in chunks {
            e.raw(&c.id.0).u32(c.len);
        }
        match attrs {
            None => {
                e.u8(0);
            }
            Some((flags, xattrs)) => {
                e.u8(1).u32(flags).u32(xattrs.len() as u32);
                for (name, value) in xattrs {
                    e.bytes(name).bytes(value);
                }
            }
        }
        self.count = self.count.saturating_add(1);
        self.maybe_spill();
    }

    /// The cache as the next backup reads it.
    fn into_cache(self) -> FilesCache {
        // The writer's own encoding always decodes.
        self.finish()
            .ok()
            .and_then(|b| FilesCache::decode(b).ok())
            .unwrap_or_default()
    }

    /// The cache's bytes, as [`FilesCache::decode`] reads them.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.write_to(&mut bytes)?;
        Ok(bytes)
    }

    /// Writes the cache's bytes to `out`. Fails if the spill file could not be written.
    pub fn write_to(self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::FileExt;
        let count = self.count.to_le_bytes();
        let mut rest = self.e.finish();
        match self.spill {
            Spill::Never | Spill::Into(_) => {
                rest[Self::COUNT_AT..Self::COUNT_AT + 4].copy_from_slice(&count);
                out.write_all(&rest)
            }
            Spill::Failed(e) => Err(e),
            Spill::File(mut f) => {
                f.write_all(&rest)?;
                f.write_all_at(&count, Self::COUNT_AT as u64)?;
                f.seek(SeekFrom::Start(0))?;
                std::io::copy(&mut f, out).map(|_| ())
            }
        }
    }
}

/// Where the cache of one series lives.
pub fn cache_path(repo_id: &str, archive_name: &str) -> Option<PathBuf> {
    let name = format!(
        "files-{}",
        &hex::encode(sha256(archive_name.as_bytes()))[..32]
    );
    Some(crate::repo::cache_dir::for_repository(repo_id)?.join(name))
}

/// Opens a cache, to be read as the walk goes; a missing one, or one whose header is not a
/// cache's, is `None` (it is only a cache).
pub fn load(path: &Path) -> Option<FilesCache> {
    let (read_with, count, streamed) = stream::Streamed::open(path).ok()?;
    Some(FilesCache {
        read_with,
        count,
        how: How::Streamed(std::sync::Mutex::new(streamed)),
    })
}

impl FilesCacheWriter {
    /// A spilled cache, completed and synced, given the name `path` without a copy: a
    /// temporary name linked to the unnamed file (through `/proc/self/fd`), renamed over
    /// `path`. A copy would need the cache's size free a second time. `Ok(false)` when it was
    /// not spilled or cannot be linked (no `/proc`): then it is copied.
    fn link_spilled(&mut self, path: &Path) -> std::io::Result<bool> {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let Spill::File(f) = &mut self.spill else {
            return Ok(false);
        };
        f.write_all(&self.e.buf)?;
        self.e.buf.clear();
        f.write_all_at(&self.count.to_le_bytes(), Self::COUNT_AT as u64)?;
        f.sync_all()?;
        let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
        let fd = format!("/proc/self/fd/{}", f.as_raw_fd());
        let cwd = rustix::fs::CWD;
        let linked = rustix::fs::linkat(
            cwd,
            fd.as_str(),
            cwd,
            &tmp,
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        );
        if linked.is_err() {
            return Ok(false);
        }
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        Ok(true)
    }
}

/// Writes a cache atomically, private (0600 in a 0700 directory).
pub fn save(path: &Path, mut cache: FilesCacheWriter) -> Result<()> {
    if cache.link_spilled(path).map_err(|e| Error::io(path, e))? {
        return Ok(());
    }
    crate::repo::cache_dir::write_private_with(path, |f| cache.write_to(f))
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let a = CacheEntry {
            inode: 5,
            size: 10,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks: vec![ChunkRef {
                id: ChunkId([1; 32]),
                len: 10,
            }],
            attrs: Some(Attrs {
                inode_flags: 0x80,
                xattrs: vec![(b"user.x".to_vec(), b"\0v".to_vec())],
            }),
        };
        let b = CacheEntry {
            inode: 6,
            size: 0,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks: Vec::new(),
            attrs: None,
        };
        let mut w = FilesCacheWriter::new(UNKNOWN);
        w.insert(b"a/\xffb", &a);
        w.insert(b"b", &b);
        let bytes = w.finish().unwrap();
        let d = FilesCache::decode(bytes.clone()).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d.get(b"a/\xffb"), Some(a.clone()));
        assert_eq!(d.get(b"b"), Some(b));
        assert_eq!(d.get(b"c"), None);
        assert_eq!(d.get(b""), None);
        assert_eq!(d.read_with, UNKNOWN);
        assert!(FilesCache::decode(bytes[..bytes.len() - 1].to_vec()).is_err());
        assert!(FilesCache::decode([bytes.clone(), vec![0]].concat()).is_err());
        // Attributes are used only when read as they would be now.
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut read = FilesCacheWriter::reading(&meta);
        read.insert(b"a", &a);
        let back = FilesCache::decode(read.finish().unwrap()).unwrap();
        let entry = back.get(b"a").unwrap();
        assert!(back.attrs(&entry, &meta).is_some());
        let noacls = crate::source::fsmeta::MetaOptions {
            acls: false,
            ..meta
        };
        assert!(back.attrs(&entry, &noacls).is_none());
        assert!(d.attrs(&d.get(b"a/\xffb").unwrap(), &meta).is_none());
    }

    /// A cache larger than what stays in memory goes into an unnamed file in the directory
    /// given, and comes out byte for byte as the same cache kept in memory: memory holds
    /// one batch at a time, and nothing is left in the directory.
    #[test]
    fn a_large_cache_is_spilled_to_a_file_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut spilled = FilesCacheWriter::reading(&meta).spilling_into(Some(dir.path().into()));
        let mut kept = FilesCacheWriter::reading(&meta);
        let entry = entry_of;
        let mut most = 0;
        for i in 0..80_000u64 {
            let path = format!("a/b/c/{i}");
            spilled.insert(path.as_bytes(), &entry(i));
            kept.insert(path.as_bytes(), &entry(i));
            most = most.max(spilled.e.buf.len());
        }
        assert!(matches!(spilled.spill, Spill::File(_)), "spilled");
        assert!(most < SPILL_AT + 1024, "at most {most} bytes in memory");
        assert!(
            kept.e.buf.len() > SPILL_AT,
            "the same cache is larger in memory"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let (a, b) = (spilled.finish().unwrap(), kept.finish().unwrap());
        assert!(a == b, "the same bytes");
        let c = FilesCache::decode(a).unwrap();
        assert_eq!(c.len(), 80_000);
        assert_eq!(c.get(b"a/b/c/79999"), Some(entry(79_999)));
        // Saved through the file, too.
        let mut again = FilesCacheWriter::reading(&meta).spilling_into(Some(dir.path().into()));
        for i in 0..80_000u64 {
            again.insert(format!("a/b/c/{i}").as_bytes(), &entry(i));
        }
        let path = dir.path().join("files-x");
        save(&path, again).unwrap();
        assert!(std::fs::read(&path).unwrap() == b);
    }

    /// A spill file that could not be written leaves the cache unsaved (with the error), and
    /// no file in its place; a directory where no file can be made keeps the cache in memory.
    #[test]
    fn a_failed_spill_saves_nothing_and_no_spill_file_keeps_the_cache_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut w = FilesCacheWriter::reading(&meta);
        w.insert(
            b"a",
            &CacheEntry {
                inode: 1,
                size: 0,
                mtime: Timestamp { secs: 1, nanos: 2 },
                ctime: Timestamp { secs: 3, nanos: 4 },
                chunks: Vec::new(),
                attrs: None,
            },
        );
        w.spill = Spill::Failed(std::io::Error::other("disk full"));
        let path = dir.path().join("files-x");
        let err = save(&path, w).unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A file where the directory should be: no spill file, the cache stays in memory.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let mut w = FilesCacheWriter::reading(&meta).spilling_into(Some(file.join("sub")));
        for i in 0..120_000u64 {
            w.insert(
                format!("d/{i}").as_bytes(),
                &CacheEntry {
                    inode: i,
                    size: 0,
                    mtime: Timestamp { secs: 1, nanos: 2 },
                    ctime: Timestamp { secs: 3, nanos: 4 },
                    chunks: Vec::new(),
                    attrs: None,
                },
            );
        }
        assert!(matches!(w.spill, Spill::Never));
        assert_eq!(
            FilesCache::decode(w.finish().unwrap()).unwrap().len(),
            120_000
        );
    }

    #[test]
    fn many_entries_are_each_found_by_path() {
        let mut w = FilesCacheWriter::reading(&crate::source::fsmeta::MetaOptions::default());
        let entry = |i: u64| CacheEntry {
            inode: i,
            size: i * 3,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks: Vec::new(),
            attrs: None,
        };
        for i in 0..10_000u64 {
            w.insert(format!("dir/{i}").as_bytes(), &entry(i));
        }
        let c = FilesCache::decode(w.finish().unwrap()).unwrap();
        for i in 0..10_000u64 {
            assert_eq!(c.get(format!("dir/{i}").as_bytes()), Some(entry(i)));
        }
        assert_eq!(c.get(b"dir/10000"), None);
    }

    #[test]
    fn a_written_cache_decodes_to_what_was_entered_and_a_repeated_path_to_its_last_entry() {
        let meta = crate::source::fsmeta::MetaOptions::default();
        let entry = |inode: u64, chunks: Vec<ChunkRef>, attrs: Option<Attrs>| CacheEntry {
            inode,
            size: 7,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks,
            attrs,
        };
        let chunk = |b: u8| ChunkRef {
            id: ChunkId([b; 32]),
            len: u32::from(b),
        };
        let attrs = Attrs {
            inode_flags: 0x10,
            xattrs: vec![(b"user.a".to_vec(), b"1".to_vec())],
        };
        let mut w = FilesCacheWriter::reading(&meta);
        assert!(w.is_empty());
        w.insert(b"z", &entry(1, vec![chunk(1), chunk(2)], None));
        w.insert_parts(
            b"a",
            &entry(2, Vec::new(), None),
            &[chunk(3)],
            Some((attrs.inode_flags, &attrs.xattrs)),
        );
        w.insert(b"z", &entry(3, vec![chunk(4)], Some(attrs.clone())));
        assert_eq!(w.len(), 3);
        let c = FilesCache::decode(w.finish().unwrap()).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.get(b"a"),
            Some(entry(2, vec![chunk(3)], Some(attrs.clone())))
        );
        assert_eq!(c.get(b"z"), Some(entry(3, vec![chunk(4)], Some(attrs))));
        let a = c.get(b"a").unwrap();
        assert!(c.attrs(&a, &meta).is_some());
    }

    /// A spill write that fails (ENOSPC, from /dev/full, through `maybe_spill`) makes the
    /// cache unsaveable; nothing more of it is then held in memory.
    #[test]
    fn after_a_failed_spill_the_rest_of_the_cache_is_not_held_in_memory() {
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut w = FilesCacheWriter::reading(&meta);
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        w.spill = Spill::File(full);
        let mut most = 0;
        for i in 0..200_000u64 {
            w.insert(format!("a/b/c/{i}").as_bytes(), &entry_of(i));
            most = most.max(w.e.buf.len());
        }
        assert!(matches!(w.spill, Spill::Failed(_)), "the spill failed");
        assert!(
            most < SPILL_AT + 1024,
            "{most} bytes held for a cache not saved"
        );
        assert_eq!(w.len(), 200_000);
    }

    /// A spilled cache is given its name, not copied (a copy needs its size free a second
    /// time): the saved file is the spill file, 0600, alone in the directory, and loads.
    #[test]
    fn a_spilled_cache_is_named_not_copied() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut w = FilesCacheWriter::reading(&meta).spilling_into(Some(dir.path().into()));
        for i in 0..60_000u64 {
            w.insert(format!("x/{i:05}").as_bytes(), &entry_of(i));
        }
        let Spill::File(f) = &w.spill else {
            panic!("not spilled")
        };
        let ino = f.metadata().unwrap().ino();
        let path = dir.path().join("files-z");
        save(&path, w).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.ino(), ino, "copied, not named");
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let c = load(&path).unwrap();
        assert_eq!(c.len(), 60_000);
        assert_eq!(c.get(b"x/59999"), Some(entry_of(59_999)));
    }

    fn entry_of(i: u64) -> CacheEntry {
        CacheEntry {
            inode: i,
            size: i * 3,
            mtime: Timestamp { secs: 1, nanos: 2 },
            ctime: Timestamp { secs: 3, nanos: 4 },
            chunks: vec![ChunkRef {
                id: ChunkId(crate::util::id::sha256(&i.to_le_bytes())),
                len: 7,
            }],
            attrs: None,
        }
    }
}
