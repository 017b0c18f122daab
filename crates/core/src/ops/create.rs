//! The backup engine behind `cairn create`.
//!
//! Three kinds of threads, one ordered stream:
//! - the **reader** ([`source`]) walks the sources in order, reads and chunks files, and emits
//!   units (items, chunk tickets, file ends) in walk order;
//! - **sealing workers** compute each chunk's keyed id and, unless the repository already had
//!   it, compress and encrypt it;
//! - the **main thread** consumes the units in order: it alone owns the index and the
//!   PackWriter (one pack written while the one before it is flushed), deduplicates, adds
//!   blobs to packs, and writes the item stream. The archive is therefore identical whatever the
//!   timing, and the PackWriter contract is unchanged.
//!
//! Source problems (an unreadable file or directory, a file that changes while it is read)
//! are warnings: reported with the path, the entry skipped or flagged, the backup goes on.
//! Repository problems (ENOSPC, I/O) are errors: the backup stops and commits nothing.
//! Commit order: packs durable → index fragment → archive object → files cache.

pub mod dry_run;
pub mod paths;
mod scan;
pub mod source;
mod tree;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta, ArchiveStats};
use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp, FLAG_CHANGED};
use crate::index::KnownChunks;
use crate::ops::own_dirs::OwnDir;
use crate::repo::session::{Commit, WriteSession};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::source::exclude::Excludes;
use crate::source::files_cache::{self, CacheEntry, FilesCache, FilesCacheWriter};
use crate::source::fsmeta::{MetaOptions, Names};
use crate::util::id::ArchiveId;
use crate::util::parallel::{Budget, CloseOnDrop};
use crate::util::progress::Progress;
use source::{LinkKey, Source, Stamp, Unit};

pub struct BackupOptions {
    pub name: String,
    pub comment: String,
    pub paths: Vec<PathBuf>,
    pub excludes: Excludes,
    pub one_file_system: bool,
    /// What is kept beyond stat (ACLs, xattrs, inode flags; names or only ids).
    pub meta: MetaOptions,
    /// Leave out files and directories flagged nodump (`chattr +d`).
    pub exclude_nodump: bool,
    pub command_line: Vec<String>,
    /// Sealing workers.
    pub threads: usize,
    /// How chunks are compressed (`--compression`).
    pub compression: crate::format::compress::Codec,
    /// Store standard input (or a command's output) as one file, instead of walking `paths`.
    pub stdin: Option<source::StdinSource>,
    /// Directories never stored, by device and inode (so that a symlink or a bind mount
    /// to them counts too), with what they are: the repository being written, cairn's cache.
    pub never: Vec<OwnDir>,
    /// The archive's tags (`--tag`), sorted, each once.
    pub tags: Vec<String>,
    /// The archive's time (`--timestamp`), instead of now: to import backups made before.
    pub time: Option<Timestamp>,
}

pub struct BackupReport {
    pub id: ArchiveId,
    pub meta: ArchiveMeta,
    pub duration: Duration,
    pub warnings: Vec<String>,
}

/// A file is remembered in the files cache only if its ctime and mtime are at least this much
/// older than the moment it was read: a change within the same timestamp tick would otherwise
/// go unseen.
pub const CACHE_MIN_AGE_NS: i128 = 2_000_000_000;

/// Chunk bytes allowed between the reader and the main thread: a chunk's plaintext until a
/// worker has sealed it, then its sealed blob until the main thread has put it in a pack
/// (about half as many bytes, for data that compresses 2:1; a chunk the repository has holds
/// nothing once its id is known). Measured on 1 GiB with two sealing workers, when the whole
/// plaintext stayed charged until the main thread: 8 MiB backed up as fast as 16 or 32 MiB
/// (1.66 s against 1.64 and 1.66) with 90 MB peak instead of 101 or 127; 4 MiB was 15%
/// slower. Buffers are not pooled: glibc reuses freed chunk-sized blocks as well as a pool
/// did (same time), and a pool held 10-30 MB more.
const IN_FLIGHT_BYTES: usize = 8 << 20;

/// The path as stored in the archive: relative, `/`-separated, with `.` dropped and `..`
/// resolved lexically (a leading `..` is dropped, as tar does).
pub fn stored_path(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
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

/// An inode stored under its first name: later names reuse its contents and stamp.
struct Hardlink {
    id: [u8; 16],
    chunks: Vec<ChunkRef>,
    flags: u8,
    stamp: Stamp,
    /// The inode's attributes and flags, which every name shares.
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    inode_flags: u32,
}

/// The main thread's state.
struct Session<'s, 'r, 'p, 'e> {
    up: &'s mut WriteSession<'r>,
    items: ItemStreamWriter,
    new_cache: FilesCacheWriter,
    hardlinks: HashMap<LinkKey, Hardlink>,
    stats: ArchiveStats,
    warnings: Vec<String>,
    bytes_seen: u64,
    /// Bytes of the file being read, so far.
    current_file: u64,
    progress: &'p Progress,
    /// The scan's totals, while progress is shown.
    totals: Option<&'p scan::Totals>,
    started: Instant,
    /// `create --list`: who is told, and the paths of the series' last archive.
    listing: Option<(Each<'e>, std::collections::HashSet<Vec<u8>>)>,
}

impl Session<'_, '_, '_, '_> {
    /// Tells `create --list` how `item` was taken: read or not, or (`None`) not readable.
    fn list(&mut self, item: &Item, read: Option<bool>) {
        if let Some((each, before)) = &mut self.listing {
            let letter = match read {
                Some(read) => dry_run::status_letter(item, read, before.contains(&item.path)),
                None => 'E',
            };
            each(letter, item);
        }
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
        if item.kind == ItemKind::File {
            self.current_file = 0;
        }
        self.show(item, false);
        self.items.push(item, self.up)
    }

    /// The progress line: how far (by the scan's totals, when it is running), how fast, what
    /// is new, and the path at hand.
    fn show(&self, item: &Item, waiting: bool) {
        self.progress.set(|| {
            let done = self.stats.original_size + self.current_file;
            let up = self.up.stats();
            let (files, total, files_total) = match self.totals.map(scan::Totals::get) {
                Some((f, b, complete)) => (
                    format!(
                        "{}/{}{} files",
                        self.stats.files,
                        f,
                        if complete { "" } else { "+" }
                    ),
                    complete.then_some(b),
                    complete.then_some(f),
                ),
                None => (format!("{} files", self.stats.files), None, None),
            };
            let figures = crate::util::progress::Figures {
                bytes_done: Some(done),
                bytes_total: total,
                files_done: Some(self.stats.files),
                files_total,
                bytes_new: Some(up.new_plain_bytes),
                bytes_stored: Some(up.new_stored_bytes),
                current: Some(item.display_path()),
                waiting,
                ..Default::default()
            };
            let message = format!(
                "{}, {files}, {} new, {} stored{}: {}",
                crate::util::progress::done_of(done, total, self.started.elapsed()),
                crate::util::progress::size(up.new_plain_bytes),
                crate::util::progress::size(up.new_stored_bytes),
                if waiting {
                    ", waiting for the repository to store a pack"
                } else {
                    ""
                },
                item.display_path()
            );
            crate::util::progress::Shown { message, figures }
        });
    }

    fn remember_link(&mut self, key: LinkKey, item: &mut Item, stamp: Stamp) {
        let id = self
            .up
            .repo()
            .crypto()
            .id_of(&[key.0.to_le_bytes(), key.1.to_le_bytes()].concat())
            .0;
        let mut hid = [0u8; 16];
        hid.copy_from_slice(&id[..16]);
        item.hardlink_id = Some(hid);
        self.hardlinks.insert(
            key,
            Hardlink {
                id: hid,
                chunks: item.chunks.clone(),
                flags: item.flags,
                stamp,
                xattrs: item.xattrs.clone(),
                inode_flags: item.inode_flags,
            },
        );
    }

    /// Applies the reader's units in order until `Done`.
    fn consume(
        &mut self,
        units: crossbeam_channel::Receiver<Unit>,
        budget: &Budget,
        interrupt: &Interrupt,
    ) -> Result<()> {
        let mut current: Option<Box<Item>> = None;
        loop {
            match source::next_unit(&units, interrupt)? {
                Unit::Done => return Ok(()),
                Unit::Warning(msg) => self.warnings.push(msg),
                Unit::Fail(e) => return Err(e),
                Unit::Item(item) => {
                    self.list(&item, Some(false));
                    self.push(&item)?
                }
                Unit::Cached { item, entry, link } => self.cached(item, entry, link)?,
                Unit::Hardlink { item, key, stamp } => self.hardlink(item, key, stamp)?,
                Unit::FileStart(item) => current = Some(item),
                Unit::Chunk(rx) => {
                    let sealed = source::sealed(rx)?;
                    budget.release(sealed.held as usize);
                    self.bytes_seen += u64::from(sealed.len);
                    self.current_file += u64::from(sealed.len);
                    if let (Some(item), Some(_)) = (current.as_deref(), &sealed.blob) {
                        if self.up.waits_for_store() {
                            self.show(item, true);
                        }
                    }
                    self.chunk(&sealed, budget)?;
                    if let Some(item) = current.as_mut() {
                        item.chunks.push(source::chunk_ref(&sealed));
                        self.show(item, false);
                    }
                }
                Unit::FileEnd(end) => {
                    let Some(item) = current.take() else {
                        return Err(Error::internal("file end without a start"));
                    };
                    self.file_end(item, end)?;
                }
            }
        }
    }

    /// A file unchanged since the last backup: its chunks from the files cache.
    fn cached(
        &mut self,
        mut item: Box<Item>,
        entry: CacheEntry,
        link: Option<LinkKey>,
    ) -> Result<()> {
        self.new_cache.insert(&item.path, &entry);
        item.chunks = entry.chunks;
        for c in &item.chunks {
            self.up.count_reused(u64::from(c.len));
        }
        self.stats.files_unchanged += 1;
        if let Some(key) = link {
            let stamp = Stamp {
                dev: key.0,
                inode: entry.inode,
                size: entry.size,
                mtime: entry.mtime,
                ctime: entry.ctime,
            };
            self.remember_link(key, &mut item, stamp);
        }
        self.list(&item, Some(false));
        self.push(&item)
    }

    /// Another name of an inode stored earlier: the same contents, and the stamp they were
    /// stored under (so the files cache never pairs newer times with older contents).
    fn hardlink(&mut self, mut item: Box<Item>, key: LinkKey, stamp: Stamp) -> Result<()> {
        let Some(h) = self.hardlinks.get(&key) else {
            return Err(Error::internal("hardlink before its first name"));
        };
        item.hardlink_id = Some(h.id);
        item.chunks = h.chunks.clone();
        item.xattrs = h.xattrs.clone();
        item.inode_flags = h.inode_flags;
        item.flags |= h.flags;
        item.size = h.stamp.size;
        item.inode = h.stamp.inode;
        item.mtime = h.stamp.mtime;
        item.ctime = h.stamp.ctime;
        if stamp != h.stamp && h.flags & FLAG_CHANGED == 0 {
            item.flags |= FLAG_CHANGED;
            let w = crate::util::log::Warning::at(
                &item.path,
                "changed",
                format!(
                    "{}: file changed while it was backed up (hardlink)",
                    item.display_path()
                ),
            );
            self.progress.warn(&w);
            self.warnings.push(w.message);
        }
        self.list(&item, Some(false));
        self.push(&item)
    }

    /// One chunk of the current file, sealed: stored when new, counted when known.
    fn chunk(&mut self, sealed: &source::Sealed, budget: &Budget) -> Result<()> {
        match &sealed.blob {
            Some(blob) if self.up.stores_now() => {
                // CAIRN_PACK_ASYNC=no: nothing overlaps a synchronous store, so the readers
                // wait while it runs (the seed's sync baseline).
                budget.pause(true);
                let added = self.up.add_sealed(sealed.id, blob, sealed.crc, sealed.len);
                budget.pause(false);
                added.map(|_| ())
            }
            Some(blob) => self
                .up
                .add_sealed(sealed.id, blob, sealed.crc, sealed.len)
                .map(|_| ()),
            None if self.up.has(&sealed.id) => {
                self.up.count_reused(u64::from(sealed.len));
                Ok(())
            }
            None => Err(Error::internal("a known chunk is missing from the index")),
        }
    }

    /// The end of a file that was read: its item completed with the stamp it was read under,
    /// entered in the files cache when it may be, and pushed.
    fn file_end(&mut self, mut item: Box<Item>, end: source::FileEnd) -> Result<()> {
        if !end.ok {
            self.list(&item, None);
            return Ok(());
        }
        self.stats.files_read += 1;
        let start = end.start.unwrap_or(Stamp {
            dev: 0,
            inode: item.inode,
            size: end.size,
            mtime: item.mtime,
            ctime: item.ctime,
        });
        item.size = end.size;
        item.inode = start.inode;
        item.mtime = start.mtime;
        item.ctime = start.ctime;
        item.xattrs = end.xattrs;
        item.inode_flags = end.inode_flags;
        let attrs_known = end.attrs_known;
        if end.changed {
            item.flags |= FLAG_CHANGED;
        }
        if end.cacheable {
            let stamp = CacheEntry {
                inode: start.inode,
                size: start.size,
                mtime: start.mtime,
                ctime: start.ctime,
                chunks: Vec::new(),
                attrs: None,
            };
            let attrs = attrs_known.then_some((item.inode_flags, &item.xattrs));
            self.new_cache
                .insert_parts(&item.path, &stamp, &item.chunks, attrs);
        }
        if let Some(key) = end.link {
            self.remember_link(
                key,
                &mut item,
                Stamp {
                    size: end.size,
                    ..start
                },
            );
        }
        self.list(&item, Some(true));
        self.push(&item)
    }
}

/// The files cache of a series: the local file, or rebuilt from the newest archive of that
/// name, or empty.
fn load_files_cache(
    repo: &Repository,
    index: &crate::index::ChunkIndex,
    name: &str,
    progress: &Progress,
) -> Result<FilesCache> {
    if let Some(c) =
        files_cache::cache_path(&repo.id_hex(), name).and_then(|p| files_cache::load(&p))
    {
        return Ok(c);
    }
    // The rebuild is an optimisation: a damaged archive only means every file is read. A
    // failing store is a repository error like any other, and stops the backup.
    let list = archive::load_all(repo)?;
    let Some((_, meta)) = archive::newest_of(list.archives, name) else {
        return Ok(FilesCache::default());
    };
    match archive::all_items(repo, index, &meta) {
        Ok(items) => Ok(FilesCache::from_items(&items, meta.start, CACHE_MIN_AGE_NS)),
        Err(Error::Store(e)) => Err(Error::Store(e)),
        Err(e) => {
            progress.println(&format!(
                "note: files cache not rebuilt from the last archive ({e}); all files will be read"
            ));
            Ok(FilesCache::default())
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
    run_listing(repo, opts, (progress, interrupt), None)
}

/// The archive a backup of `opts` that began at `start` (by the clock, and `t0` by the
/// monotonic one) writes.
fn archive_meta(
    opts: &BackupOptions,
    (start, t0): (Timestamp, Instant),
    items: Vec<crate::format::item::ChunkRef>,
    stats: ArchiveStats,
) -> ArchiveMeta {
    ArchiveMeta {
        name: opts.name.clone(),
        comment: opts.comment.clone(),
        hostname: crate::util::identity::hostname(),
        username: crate::util::identity::user_name(),
        start,
        end: opts
            .time
            .map_or_else(Timestamp::now, |t| t.plus(t0.elapsed())),
        command_line: opts.command_line.clone(),
        items,
        stats,
        copied_from: None,
        replaces: None,
        tags: opts.tags.clone(),
    }
}

/// What `create --list` is told of each item as the backup takes it: `A` a file the series'
/// last archive does not have, `M` one it has that was read again, `U` one taken unchanged,
/// `E` a file that could not be read (left out, with a warning), the type letter otherwise.
pub type Each<'a> = &'a mut dyn FnMut(char, &Item);

/// [`run`], telling `each` every item's status.
pub fn run_listing(
    repo: &Repository,
    opts: &BackupOptions,
    (progress, interrupt): (&Progress, &Interrupt),
    each: Option<Each>,
) -> Result<BackupReport> {
    let t0 = Instant::now();
    let start = opts.time.unwrap_or_else(Timestamp::now);
    let index = load_index(repo, progress)?;
    let old_cache = load_files_cache(repo, &index, &opts.name, progress)?;
    let listing = each.map(|e| dry_run::last_paths(repo, &index, &opts.name).map(|b| (e, b)));
    let listing = listing.transpose()?;
    let (id, meta, warnings, new_cache) = repo.write(index, |up| {
        let known = up.freeze_known()?;
        // Totals for the progress display, from a scan beside the backup.
        let totals = scan::Totals::default();
        let mut s = Session {
            up,
            items: ItemStreamWriter::new(repo.metadata_chunker()?),
            new_cache: FilesCacheWriter::reading(&opts.meta).spilling_into(
                files_cache::cache_path(&repo.id_hex(), &opts.name)
                    .and_then(|p| p.parent().map(Path::to_path_buf)),
            ),
            hardlinks: HashMap::new(),
            stats: ArchiveStats::default(),
            warnings: Vec::new(),
            bytes_seen: 0,
            current_file: 0,
            progress,
            totals: progress.is_visible().then_some(&totals),
            started: Instant::now(),
            listing,
        };
        let (shown, totals) = (s.progress, s.totals);
        walk(
            repo,
            opts,
            known,
            &old_cache,
            interrupt,
            shown,
            totals,
            |units, budget| s.consume(units, budget, interrupt),
        )?;
        interrupt.check()?;
        progress.set(|| String::from("storing the last pack and the archive's metadata"));
        // A failure up to here keeps what is already stored (packs and their index, but no
        // archive), and reports a store failure rather than the interrupt that came after it.
        let items = s.items.finish(s.up)?;
        let mut stats = s.stats;
        stats.metadata_size = s.items.bytes;
        stats.deduplicated_size = s.up.stats().new_stored_bytes;
        stats.warnings = s.warnings.len() as u64;
        let meta = archive_meta(opts, (start, t0), items, stats);
        interrupt.check()?;
        let sealed = archive::seal(repo, &meta)?;
        let (warnings, new_cache) = (s.warnings, s.new_cache);
        Ok(Commit::archive(sealed).map(|(id, _)| (id, meta, warnings, new_cache)))
    })?;
    if let Some(path) = files_cache::cache_path(&repo.id_hex(), &opts.name) {
        if let Err(e) = files_cache::save(&path, new_cache) {
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

/// The index for writing, with a note for what it could not use.
pub fn load_index(repo: &Repository, progress: &Progress) -> Result<crate::index::ChunkIndex> {
    let (index, load, rec) = repo.load_index_for_writing()?;
    for d in &load.damaged_fragments {
        progress.println(&format!(
            "note: skipping damaged index fragment {} ({})",
            d.name, d.reason
        ));
    }
    for d in &rec.damaged_packs {
        progress.println(&format!(
            "warning: {}: not a pack this repository can use ({}); left alone and not read again by this machine (cairn check --repair removes it, or whoever runs the storage should)",
            d.name, d.reason
        ));
    }
    if !rec.missing_packs.is_empty() || !rec.short_packs.is_empty() {
        progress.println(&format!(
            "note: {} named by the index are missing or short; their chunks will be stored again (run cairn check)",
            crate::util::progress::count((rec.missing_packs.len() + rec.short_packs.len()) as u64, "pack")
        ));
    }
    Ok(index)
}

/// The walk: the reader and the sealing workers in their threads, `consume` taking their
/// units in this one (with the byte budget to release and the pool to return blobs to), until
/// every source was walked.
#[allow(clippy::too_many_arguments)]
fn walk(
    repo: &Repository,
    opts: &BackupOptions,
    known: KnownChunks,
    old_cache: &FilesCache,
    interrupt: &Interrupt,
    progress: &Progress,
    totals: Option<&scan::Totals>,
    consume: impl FnOnce(crossbeam_channel::Receiver<Unit>, &Budget) -> Result<()>,
) -> Result<()> {
    let budget = Budget::new(IN_FLIGHT_BYTES);
    tree::raise_open_files_limit();
    std::thread::scope(|scope| -> Result<()> {
        // The scan beside the backup (only while progress is shown); however the walk ends,
        // the scan stops with it.
        struct StopScan<'t>(Option<&'t scan::Totals>);
        impl Drop for StopScan<'_> {
            fn drop(&mut self) {
                if let Some(t) = self.0 {
                    t.stop();
                }
            }
        }
        if let Some(totals) = totals {
            scope.spawn(move || scan::scan(opts, totals, interrupt));
        }
        let _stop = StopScan(totals);
        let (units_tx, units_rx) = crossbeam_channel::bounded::<Unit>(256);
        let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<source::Job>(2 * opts.threads);
        for _ in 0..opts.threads {
            let (jobs, known) = (jobs_rx.clone(), known.clone());
            let codec = opts.compression;
            let budget = &budget;
            scope.spawn(move || source::seal_worker(repo.crypto(), &known, jobs, codec, budget));
        }
        drop(jobs_rx);
        let reader = Source {
            opts,
            chunker: repo.data_chunker()?,
            old_cache,
            known: known.clone(),
            names: Names::default(),
            units: units_tx,
            jobs: jobs_tx,
            budget: &budget,
            interrupt,
            progress,
            links_read: Default::default(),
            buf: Vec::new(),
        };
        scope.spawn(move || reader.run());
        // Whatever happens next, a reader waiting on the budget must not wait forever.
        let _close = CloseOnDrop(&budget);
        consume(units_rx, &budget)
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
