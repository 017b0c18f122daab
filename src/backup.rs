//! The backup engine behind `cairn create`: walk the sources, turn each entry into an item,
//! store new file contents, and commit an archive.
//!
//! Source problems (an unreadable file or directory, a file that changes while it is read)
//! are warnings: reported with the path, the entry skipped or flagged, the backup goes on.
//! Repository problems (ENOSPC, I/O) are errors: the backup stops and commits nothing.
//! Commit order: packs durable → index fragment → archive object → files cache.

use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::archive::item::{ChunkRef, Item, ItemKind, Timestamp, FLAG_CHANGED};
use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta, ArchiveStats};
use crate::chunker::{ChunkReader, Chunker};
use crate::error::Result;
use crate::exclude::{self, Excludes};
use crate::files_cache::{self, CacheEntry, FilesCache};
use crate::fsmeta::{self, Names};
use crate::id::ArchiveId;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::signals::Interrupt;
use crate::upload::Uploader;

pub struct BackupOptions {
    pub name: String,
    pub comment: String,
    pub paths: Vec<PathBuf>,
    pub excludes: Excludes,
    pub one_file_system: bool,
    pub command_line: Vec<String>,
}

pub struct BackupReport {
    pub id: ArchiveId,
    pub meta: ArchiveMeta,
    pub duration: Duration,
    pub warnings: Vec<String>,
}

/// The path as stored in the archive: relative, `/`-separated, with `.` dropped and `..`
/// resolved lexically (a leading `..` is dropped, as tar does).
pub fn stored_path(p: &Path) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s.as_bytes()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.join(&b'/')
}

/// A file's identity and change markers as stat reports them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    inode: u64,
    size: u64,
    mtime: Timestamp,
    ctime: Timestamp,
}

impl Stamp {
    fn of(md: &Metadata) -> Self {
        Self {
            dev: md.dev(),
            inode: md.ino(),
            size: md.len(),
            mtime: Timestamp {
                secs: md.mtime(),
                nanos: md.mtime_nsec().clamp(0, 999_999_999) as u32,
            },
            ctime: Timestamp {
                secs: md.ctime(),
                nanos: md.ctime_nsec().clamp(0, 999_999_999) as u32,
            },
        }
    }
}

/// Opens a source file for reading without following a symlink put in its place, without
/// blocking if it became a fifo, and without updating its atime where permitted.
fn open_source(path: &Path) -> std::io::Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    match OpenOptions::new()
        .read(true)
        .custom_flags(flags | libc::O_NOATIME)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            OpenOptions::new().read(true).custom_flags(flags).open(path)
        }
        r => r,
    }
}

/// A file is remembered in the files cache only if its ctime is at least this much older than
/// the moment it was read: a change within the same timestamp tick would otherwise go unseen.
const CACHE_MIN_AGE_NS: i128 = 2_000_000_000;

struct Hardlink {
    id: [u8; 16],
    chunks: Vec<ChunkRef>,
    flags: u8,
    /// The inode as it was when its contents were stored.
    stamp: Stamp,
}

struct Session<'r, 'p> {
    up: Uploader<'r>,
    chunker: Chunker,
    items: ItemStreamWriter,
    old_cache: FilesCache,
    new_cache: FilesCache,
    names: Names,
    hardlinks: HashMap<(u64, u64), Hardlink>,
    stats: ArchiveStats,
    warnings: Vec<String>,
    bytes_seen: u64,
    progress: &'p Progress,
    interrupt: &'p Interrupt,
}

impl Session<'_, '_> {
    fn warn(&mut self, msg: String) {
        self.progress.println(&format!("warning: {msg}"));
        self.warnings.push(msg);
    }

    fn push(&mut self, item: &Item) -> Result<()> {
        match item.kind {
            ItemKind::File => self.stats.files += 1,
            ItemKind::Dir => self.stats.dirs += 1,
            ItemKind::Symlink => self.stats.symlinks += 1,
            _ => self.stats.others += 1,
        }
        if item.kind == ItemKind::File {
            self.stats.original_size += item.size;
            for c in &item.chunks {
                if let Some(loc) = self.up.index().get(&c.id) {
                    self.stats.compressed_size += u64::from(loc.sizes().0);
                }
            }
        }
        self.items.push(item, &mut self.up)
    }

    fn backup_root(&mut self, root: &Path, opts: &BackupOptions) -> Result<()> {
        if let Err(e) = std::fs::symlink_metadata(root) {
            self.warn(format!("{}: {e}", root.display()));
            return Ok(());
        }
        let mut walk = walkdir::WalkDir::new(root)
            .follow_links(false)
            .follow_root_links(false)
            .same_file_system(opts.one_file_system)
            .sort_by_file_name()
            .into_iter();
        while let Some(next) = walk.next() {
            self.interrupt.check()?;
            let entry = match next {
                Ok(e) => e,
                Err(e) => {
                    let path = e
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    let reason = e
                        .io_error()
                        .map(|io| io.to_string())
                        .unwrap_or_else(|| e.to_string());
                    self.warn(format!("{path}: {reason}"));
                    continue;
                }
            };
            let path = entry.path();
            let stored = stored_path(path);
            if opts.excludes.is_excluded(&stored) {
                if entry.file_type().is_dir() {
                    walk.skip_current_dir();
                }
                continue;
            }
            let md = match entry.metadata() {
                Ok(m) => m,
                Err(e) => {
                    self.warn(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            let is_cache =
                md.is_dir() && opts.excludes.exclude_caches && exclude::is_cache_dir(path);
            self.backup_entry(path, stored, &md)?;
            if is_cache {
                // Keep the directory and its tag, nothing else.
                walk.skip_current_dir();
                let tag = path.join(exclude::CACHEDIR_TAG);
                if let Ok(tmd) = std::fs::symlink_metadata(&tag) {
                    self.backup_entry(&tag, stored_path(&tag), &tmd)?;
                }
            }
        }
        Ok(())
    }

    fn backup_entry(&mut self, path: &Path, stored: Vec<u8>, md: &Metadata) -> Result<()> {
        if stored.is_empty() {
            // The root of `cairn create NAME /` or `.`: its contents are stored, not itself.
            return Ok(());
        }
        let Some(kind) = fsmeta::kind_of(md) else {
            self.progress
                .println(&format!("note: skipping socket {}", path.display()));
            return Ok(());
        };
        let mut item = fsmeta::item_from_metadata(kind, stored, md, &mut self.names);
        match kind {
            ItemKind::Symlink => match std::fs::read_link(path) {
                Ok(t) => item.link_target = t.as_os_str().as_bytes().to_vec(),
                Err(e) => {
                    self.warn(format!("{}: cannot read symlink: {e}", path.display()));
                    return Ok(());
                }
            },
            ItemKind::File if !self.backup_file(path, md, &mut item)? => return Ok(()),
            _ => {}
        }
        if kind != ItemKind::Symlink && kind != ItemKind::File {
            match fsmeta::read_xattrs(path) {
                Ok(x) => item.xattrs = x,
                Err(e) => self.warn(format!(
                    "{}: cannot read extended attributes: {e}",
                    path.display()
                )),
            }
        }
        self.progress.set(|| {
            format!(
                "{} files, {} read: {}",
                self.stats.files,
                crate::commands::output::size(self.bytes_seen),
                path.display()
            )
        });
        self.push(&item)
    }

    /// Fills a regular file's chunks: from a hardlink seen before, from the files cache, or by
    /// reading it. `Ok(false)` when the file could not be read (warned; the item is skipped).
    fn backup_file(&mut self, path: &Path, md: &Metadata, item: &mut Item) -> Result<bool> {
        let link_key = (md.nlink() > 1).then(|| (md.dev(), md.ino()));
        if let Some(key) = link_key {
            if let Some(h) = self.hardlinks.get(&key) {
                // Another name of an inode already stored: same contents, and the stamp they
                // were stored under (so the files cache never pairs newer times with older
                // contents). If the inode changed since, say so.
                let changed = Stamp::of(md) != h.stamp;
                let first_flags = h.flags;
                item.hardlink_id = Some(h.id);
                item.chunks = h.chunks.clone();
                item.flags |= h.flags;
                item.size = h.stamp.size;
                item.inode = h.stamp.inode;
                item.mtime = h.stamp.mtime;
                item.ctime = h.stamp.ctime;
                if changed && first_flags & FLAG_CHANGED == 0 {
                    item.flags |= FLAG_CHANGED;
                    self.warn(format!(
                        "{}: file changed while it was backed up (hardlink)",
                        path.display()
                    ));
                }
                return Ok(true);
            }
        }
        let stamp = Stamp::of(md);
        let cached = self.old_cache.get(&item.path).filter(|e| {
            e.matches(stamp.inode, stamp.size, stamp.mtime, stamp.ctime)
                && e.chunks.iter().all(|c| self.up.has(&c.id))
        });
        if let Some(entry) = cached {
            item.chunks = entry.chunks.clone();
            let entry = entry.clone();
            self.new_cache.insert(item.path.clone(), entry);
            self.stats.files_unchanged += 1;
            for c in &item.chunks {
                self.up.count_reused(u64::from(c.len));
            }
        } else if !self.read_file(path, stamp, item)? {
            return Ok(false);
        }
        if let Some(key) = link_key {
            let id = self
                .up
                .repo()
                .crypto()
                .id_of(&[key.0.to_le_bytes(), key.1.to_le_bytes()].concat())
                .0;
            let mut hid = [0u8; 16];
            hid.copy_from_slice(&id[..16]);
            item.hardlink_id = Some(hid);
            let stamp = Stamp {
                dev: key.0,
                inode: item.inode,
                size: item.size,
                mtime: item.mtime,
                ctime: item.ctime,
            };
            self.hardlinks.insert(
                key,
                Hardlink {
                    id: hid,
                    chunks: item.chunks.clone(),
                    flags: item.flags,
                    stamp,
                },
            );
        }
        Ok(true)
    }

    fn read_file(&mut self, path: &Path, walked: Stamp, item: &mut Item) -> Result<bool> {
        let file = match open_source(path) {
            Ok(f) => f,
            Err(e) => {
                self.warn(format!("{}: {e}", path.display()));
                return Ok(false);
            }
        };
        let opened = match file.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                self.warn(format!(
                    "{}: was replaced by something that is not a file; skipped",
                    path.display()
                ));
                return Ok(false);
            }
            Err(e) => {
                self.warn(format!("{}: {e}", path.display()));
                return Ok(false);
            }
        };
        let start = Stamp::of(&opened);
        if (start.dev, start.inode) != (walked.dev, walked.inode) {
            // Not the file that was listed: something (a parent swapped for a symlink, a
            // rename) put another file there. Storing it under this path and owner could
            // expose someone else's data.
            self.warn(format!(
                "{}: was replaced between listing and reading; skipped",
                path.display()
            ));
            return Ok(false);
        }
        let read_at = Timestamp::now();
        let mut reader = ChunkReader::new(&self.chunker, &file);
        let mut chunks = Vec::new();
        loop {
            self.interrupt.check()?;
            let chunk = match reader.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    let msg = format!("{}: read error: {e}", path.display());
                    drop(reader);
                    self.warn(msg);
                    return Ok(false);
                }
            };
            let len = chunk.len();
            let id = self.up.store_chunk(chunk)?;
            chunks.push(ChunkRef {
                id,
                len: len as u32,
            });
            self.bytes_seen += len as u64;
        }
        let read = reader.bytes_read;
        drop(reader);
        self.stats.files_read += 1;
        let end = file.metadata().map(|m| Stamp::of(&m)).ok();
        let changed = start != walked || end != Some(start) || read != start.size;
        // The xattrs through the open file, not by path (which could have been swapped).
        match fsmeta::read_xattrs_fd(&file) {
            Ok(x) => item.xattrs = x,
            Err(e) => self.warn(format!(
                "{}: cannot read extended attributes: {e}",
                path.display()
            )),
        }
        item.chunks = chunks;
        item.size = read;
        item.inode = start.inode;
        item.mtime = start.mtime;
        item.ctime = start.ctime;
        if changed {
            item.flags |= FLAG_CHANGED;
            self.warn(format!(
                "{}: file changed while it was read",
                path.display()
            ));
        } else if start.ctime.max(start.mtime).as_nanos() < read_at.as_nanos() - CACHE_MIN_AGE_NS {
            self.new_cache.insert(
                item.path.clone(),
                CacheEntry {
                    inode: start.inode,
                    size: start.size,
                    mtime: start.mtime,
                    ctime: start.ctime,
                    chunks: item.chunks.clone(),
                },
            );
        }
        Ok(true)
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

fn username(names: &mut Names) -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| names.user(nix::unistd::geteuid().as_raw()))
}

/// The files cache of a series: the local file, or rebuilt from the newest archive of that
/// name, or empty.
fn load_files_cache(
    repo: &Repository,
    index: &crate::index::ChunkIndex,
    name: &str,
    progress: &Progress,
) -> FilesCache {
    if let Some(c) =
        files_cache::cache_path(&repo.id_hex(), name).and_then(|p| files_cache::load(&p))
    {
        return c;
    }
    let Ok(list) = archive::load_all(repo) else {
        return FilesCache::default();
    };
    let Some((_, meta)) = list
        .archives
        .into_iter()
        .filter(|(_, m)| m.name == name)
        .max_by_key(|(_, m)| m.start)
    else {
        return FilesCache::default();
    };
    match archive::all_items(repo, index, &meta) {
        Ok(items) => FilesCache::from_items(&items, meta.start, CACHE_MIN_AGE_NS),
        Err(e) => {
            progress.println(&format!(
                "note: files cache not rebuilt from the last archive ({e}); all files will be read"
            ));
            FilesCache::default()
        }
    }
}

/// Runs a backup and commits the archive.
pub fn run(
    repo: &Repository,
    opts: &BackupOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<BackupReport> {
    let t0 = Instant::now();
    let start = Timestamp::now();
    let (index, load, rec) = repo.load_index_for_writing()?;
    for d in &load.damaged_fragments {
        progress.println(&format!(
            "note: skipping damaged index fragment {} ({})",
            d.name, d.reason
        ));
    }
    if !rec.missing_packs.is_empty() || !rec.short_packs.is_empty() {
        progress.println(&format!(
            "note: {} packs named by the index are missing or short; their chunks will be stored again (run cairn check)",
            rec.missing_packs.len() + rec.short_packs.len()
        ));
    }
    let old_cache = load_files_cache(repo, &index, &opts.name, progress);
    let mut names = Names::default();
    let user = username(&mut names);
    let mut s = Session {
        up: repo.uploader(index)?,
        chunker: repo.data_chunker()?,
        items: ItemStreamWriter::new(repo.metadata_chunker()?),
        old_cache,
        new_cache: FilesCache::default(),
        names,
        hardlinks: HashMap::new(),
        stats: ArchiveStats::default(),
        warnings: Vec::new(),
        bytes_seen: 0,
        progress,
        interrupt,
    };
    let walked = (|| -> Result<Vec<ChunkRef>> {
        for root in &opts.paths {
            s.backup_root(root, opts)?;
        }
        interrupt.check()?;
        let items = s.items.finish(&mut s.up)?;
        Ok(items)
    })();
    let items = match walked {
        Ok(items) => items,
        Err(e) => {
            if matches!(e, crate::Error::Interrupted(_)) {
                // Keep what is already stored: packs and their index, but no archive.
                let _ = s.up.checkpoint();
            }
            return Err(e);
        }
    };
    let Session {
        up,
        mut stats,
        warnings,
        new_cache,
        items: item_writer,
        ..
    } = s;
    stats.metadata_size = item_writer.bytes;
    let upload = up.stats();
    up.finish()?;
    stats.deduplicated_size = upload.new_stored_bytes;
    stats.warnings = warnings.len() as u64;
    let meta = ArchiveMeta {
        name: opts.name.clone(),
        comment: opts.comment.clone(),
        hostname: hostname(),
        username: user,
        start,
        end: Timestamp::now(),
        command_line: opts.command_line.clone(),
        items,
        stats,
    };
    interrupt.check()?;
    let id = archive::commit(repo, &meta)?;
    if let Some(path) = files_cache::cache_path(&repo.id_hex(), &opts.name) {
        if let Err(e) = files_cache::save(&path, &new_cache) {
            progress.println(&format!("note: files cache not saved: {e}"));
        }
    }
    Ok(BackupReport {
        id,
        meta,
        duration: t0.elapsed(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_paths() {
        assert_eq!(stored_path(Path::new("/home/alice/x")), b"home/alice/x");
        assert_eq!(stored_path(Path::new("./a/./b")), b"a/b");
        assert_eq!(stored_path(Path::new("../../a/b/../c")), b"a/c");
        assert_eq!(stored_path(Path::new("/")), b"");
        assert_eq!(stored_path(Path::new(".")), b"");
    }
}
