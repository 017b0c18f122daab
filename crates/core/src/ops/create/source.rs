//! The reader side of `create`: walks the sources in order, turns each entry into an item,
//! decides what must be read (files cache, hardlinks), reads and chunks file contents, and
//! hands chunks to the sealing workers. Everything it produces goes to the main thread as one
//! ordered stream of [`Unit`]s, so the archive is the same whatever the thread timing.
//!
//! The reader never touches the repository: it only consults the frozen set of chunks the
//! repository had when the backup began.

mod file;
mod seal;
mod stdin;

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crossbeam_channel::{Receiver, Sender};

use super::tree::{Entry, Walk};

use crate::chunker::{ChunkReader, Chunker};
use crate::error::Result;
use crate::format::item::{Item, ItemKind, Timestamp};
use crate::index::KnownChunks;
use crate::ops::create::{stored_path, BackupOptions};
use crate::repo::signals::Interrupt;
use crate::source::exclude;
use crate::source::files_cache::{CacheEntry, FilesCache};
use crate::source::fsmeta::{self, Meta, Names};
use crate::util::log::Warning;
use crate::util::parallel::{oneshot, Budget};
use crate::util::progress::Progress;
pub use seal::{chunk_ref, seal_worker, sealed, Job, Sealed};
pub use stdin::StdinSource;

/// Identity and change markers of a file as stat reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub inode: u64,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

impl Stamp {
    pub fn of(md: &Meta) -> Self {
        Self {
            dev: md.dev,
            inode: md.ino,
            size: md.size,
            mtime: md.mtime,
            ctime: md.ctime,
        }
    }
}

/// (device, inode) of a file with several names.
pub type LinkKey = (u64, u64);

pub enum Unit {
    /// A complete item (directory, symlink, special file).
    Item(Box<Item>),
    /// A regular file unchanged since the last backup: its chunks come from the files cache.
    Cached {
        item: Box<Item>,
        entry: CacheEntry,
        link: Option<LinkKey>,
    },
    /// Another name of an inode whose contents were stored under an earlier name.
    Hardlink {
        item: Box<Item>,
        key: LinkKey,
        stamp: Stamp,
    },
    /// A regular file being read: its chunks follow, then a `FileEnd`.
    FileStart(Box<Item>),
    Chunk(Receiver<Result<Sealed>>),
    FileEnd(FileEnd),
    /// Already printed; counted by the main thread.
    Warning(String),
    /// The backup cannot be completed (standard input could not be read, or the command
    /// feeding it failed): nothing is committed.
    Fail(crate::error::Error),
    /// Everything was walked.
    Done,
}

pub struct FileEnd {
    /// False when the file could not be read: the item is dropped.
    pub ok: bool,
    /// The stamp when opened (used for the item's times and inode).
    pub start: Option<Stamp>,
    pub size: u64,
    pub changed: bool,
    /// Whether the file may enter the files cache.
    pub cacheable: bool,
    pub link: Option<LinkKey>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub inode_flags: u32,
    /// Whether the attributes were read whole (the files cache keeps only such).
    pub attrs_known: bool,
}

impl FileEnd {
    fn failed() -> Self {
        Self {
            ok: false,
            start: None,
            size: 0,
            changed: false,
            cacheable: false,
            link: None,
            xattrs: Vec::new(),
            inode_flags: 0,
            attrs_known: false,
        }
    }
}

/// Why the reader stopped early: the main thread is gone, or a signal arrived.
struct Stop;

type Step = std::result::Result<(), Stop>;

pub struct Source<'a> {
    pub opts: &'a BackupOptions,
    pub chunker: Chunker,
    pub old_cache: &'a FilesCache,
    pub known: KnownChunks,
    pub names: Names,
    pub units: Sender<Unit>,
    pub jobs: Sender<Job>,
    pub budget: &'a Budget,
    pub interrupt: &'a Interrupt,
    pub progress: &'a Progress,
    /// Inodes with several names whose contents this run has read.
    pub links_read: HashSet<LinkKey>,
    /// The read buffer, kept across files.
    pub buf: Vec<u8>,
}

impl Source<'_> {
    /// Walks every root (or reads standard input); sends `Done` at the end unless stopped.
    pub fn run(mut self) {
        if let Some(stdin) = &self.opts.stdin {
            if let Err(e) = self.stdin(stdin) {
                let _ = self.units.send(Unit::Fail(e));
            } else {
                let _ = self.units.send(Unit::Done);
            }
            return;
        }
        let roots: HashSet<Vec<u8>> = self.opts.paths.iter().map(|p| stored_path(p)).collect();
        for root in &self.opts.paths {
            if self.root(root, &roots).is_err() {
                return;
            }
        }
        let _ = self.units.send(Unit::Done);
    }

    fn send(&self, u: Unit) -> Step {
        self.units.send(u).map_err(|_| Stop)
    }

    fn warn(&self, w: Warning) -> Step {
        self.progress.warn(&w);
        self.send(Unit::Warning(w.message))
    }

    fn check(&self) -> Step {
        if self.interrupt.raised() {
            Err(Stop)
        } else {
            Ok(())
        }
    }

    /// Walks one root; `roots` are every root's stored paths.
    fn root(&mut self, root: &Path, roots: &HashSet<Vec<u8>>) -> Step {
        let mut walk = Walk::new(root, self.opts.one_file_system);
        while let Some(next) = walk.next() {
            self.check()?;
            let entry = match next {
                Ok(e) => e,
                Err(e) => {
                    self.warn(e.warning())?;
                    continue;
                }
            };
            let stored = stored_path(&entry.path);
            let is_dir = entry.meta.is_dir();
            // What another root stores is left to that root's walk: stored once, with its
            // contents. Only a mount point given as a root of its own gets here (with
            // --one-file-system: a directory this walk reaches but does not enter, or a file
            // bind-mounted there); `merge` drops every other root another walk reaches.
            let another_root = entry.depth > 0 && roots.len() > 1 && roots.contains(&stored);
            if another_root || self.opts.excludes.is_excluded(&stored) {
                if is_dir {
                    walk.skip_current_dir();
                }
                continue;
            }
            if entry.meta.is_file() && self.opts.excludes.is_too_large(entry.meta.size) {
                continue;
            }
            if let Some(n) = crate::ops::own_dirs::OwnDir::find(&self.opts.never, &entry.meta) {
                self.progress.println(&format!(
                    "note: left out {}: {}",
                    crate::util::text::printable_path(&entry.path),
                    n.what
                ));
                walk.skip_current_dir();
                continue;
            }
            let dir = entry.dir.clone();
            let is_cache = self.opts.excludes.exclude_caches
                && dir.as_deref().is_some_and(exclude::is_cache_dir);
            if self.opts.exclude_nodump
                && dir
                    .as_deref()
                    .is_some_and(|d| fsmeta::read_flags(d.as_fd()) & fsmeta::FL_NODUMP != 0)
            {
                walk.skip_current_dir();
                continue;
            }
            let mut tags: Vec<Entry> = is_cache
                .then(|| entry.child(exclude::CACHEDIR_TAG))
                .flatten()
                .into_iter()
                .collect();
            let tagged = entry.tags(&self.opts.excludes.tags);
            let contents_left_out = is_cache || !tagged.is_empty();
            if self.opts.excludes.keep_tags {
                tags.extend(tagged);
            }
            // In the walk's order (by name), and once each: CACHEDIR.TAG can be both the cache
            // tag and an --exclude-if-present tag. An archive's items come in tree order,
            // each path once, which diff relies on to read two archives side by side.
            tags.sort_by(|a, b| {
                a.path
                    .as_os_str()
                    .as_bytes()
                    .cmp(b.path.as_os_str().as_bytes())
            });
            tags.dedup_by(|a, b| a.path == b.path);
            self.entry(entry, stored)?;
            if contents_left_out {
                // Keep the directory and the tags kept, nothing else.
                walk.skip_current_dir();
                for tag in tags {
                    let stored = stored_path(&tag.path);
                    self.entry(tag, stored)?;
                }
            }
        }
        Ok(())
    }

    fn entry(&mut self, entry: Entry, stored: Vec<u8>) -> Step {
        if stored.is_empty() {
            // The root of `cairn create NAME /` or `.`: its contents are stored, not itself.
            return Ok(());
        }
        let Some(kind) = fsmeta::kind_of(&entry.meta) else {
            self.progress.println(&format!(
                "note: skipping socket {}",
                crate::util::text::printable_path(&entry.path)
            ));
            return Ok(());
        };
        let mut item = Box::new(fsmeta::item_from_metadata(
            kind,
            stored,
            &entry.meta,
            &mut self.names,
        ));
        if self.opts.meta.numeric_ids {
            item.user.clear();
            item.group.clear();
        }
        match kind {
            ItemKind::Symlink => match entry.read_link() {
                Ok(t) => item.link_target = t,
                Err(e) => {
                    return self.warn(Warning::io(
                        &entry.path,
                        "unreadable",
                        "cannot read symlink",
                        &e,
                    ))
                }
            },
            ItemKind::File => return self.file(&entry, item),
            _ => {}
        }
        item.xattrs = match &entry.dir {
            Some(dir) => {
                if self.opts.meta.flags {
                    item.inode_flags = fsmeta::read_flags(dir.as_fd());
                }
                self.xattrs_read(&entry.path, fsmeta::read_xattrs_fd(dir, &self.opts.meta))?
                    .0
            }
            // Symlinks too: Linux keeps trusted and security attributes on them.
            None => {
                self.xattrs_read(
                    &entry.path,
                    fsmeta::read_xattrs(&entry.fd_path(), &self.opts.meta),
                )?
                .0
            }
        };
        self.send(Unit::Item(item))
    }

    /// Extended attributes as read, and whether they were; a warning and none when they
    /// could not be read.
    fn xattrs_read(
        &self,
        path: &Path,
        read: std::io::Result<fsmeta::Xattrs>,
    ) -> std::result::Result<(fsmeta::Xattrs, bool), Stop> {
        match read {
            Ok(x) => Ok((x, true)),
            Err(e) => {
                self.warn(Warning::io(
                    path,
                    "attributes",
                    "cannot read extended attributes",
                    &e,
                ))?;
                Ok((Vec::new(), false))
            }
        }
    }

    /// Reads and chunks a stream, handing each chunk to the workers; the inner result is the
    /// stream's read error, if any.
    fn chunks_of(
        &self,
        source: impl std::io::Read,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<std::io::Result<u64>, Stop> {
        let mut reader = ChunkReader::new(&self.chunker, source, buf);
        loop {
            self.check()?;
            let chunk = match reader.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return Ok(Err(e)),
            };
            if !self.budget.acquire(chunk.len()) {
                return Err(Stop);
            }
            let data = chunk.to_vec();
            let (reply, rx) = oneshot();
            self.jobs.send(Job { data, reply }).map_err(|_| Stop)?;
            self.units.send(Unit::Chunk(rx)).map_err(|_| Stop)?;
        }
        Ok(Ok(reader.bytes_read))
    }
}

/// The next unit from the reader, for a consumer: an interrupt, or a reader that ended
/// without `Done`, is an error.
pub fn next_unit(units: &Receiver<Unit>, interrupt: &Interrupt) -> Result<Unit> {
    interrupt.check()?;
    match units.recv() {
        Ok(u) => Ok(u),
        Err(_) => {
            interrupt.check()?;
            Err(crate::error::Error::invalid(
                "the source reader stopped unexpectedly",
            ))
        }
    }
}
