//! The FUSE file system: archives' trees served read-only.
//!
//! Inode numbers: with one archive, its root is inode 1 and node `i` is inode `1 + i`.
//! With the whole repository, inode 1 is a directory of archives, archive `k`'s directory is
//! inode `2 + k`, and the rest of its tree gets a range of numbers when the archive is first
//! opened. An archive's items are read only then, so that mounting a repository of many
//! archives is immediate.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::OFlags;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

use super::attr::{dir_attr, file_type, node_attr};
use super::cache::ChunkCache;
use super::prefetch::{Prefetcher, Source, WINDOW};
use super::records::Records;
use super::tree::{Defaults, Listing, Node, Tree};
use crate::archive::content;
use crate::archive::ArchiveMeta;
use crate::error::Result;
use crate::format::item::{ChunkRef, ItemKind, Timestamp};
use crate::index::ChunkIndex;
use crate::repo::Repository;
use crate::util::id::ArchiveId;

/// Nothing in a mount ever changes: the kernel may keep what it is told.
const TTL: Duration = Duration::from_secs(24 * 3600);

/// An archive in the mount.
pub struct Mounted {
    pub id: ArchiveId,
    pub meta: ArchiveMeta,
    /// The directory's name in a repository mount.
    pub dir_name: Vec<u8>,
    tree: OnceLock<std::result::Result<Arc<Tree>, String>>,
    /// The inode of node 1 (node 0, the root, has its own).
    base: AtomicU64,
}

impl Mounted {
    pub fn new(id: ArchiveId, meta: ArchiveMeta, dir_name: Vec<u8>) -> Self {
        Self {
            id,
            meta,
            dir_name,
            tree: OnceLock::new(),
            base: AtomicU64::new(0),
        }
    }
}

/// A directory entry as readdir gives it: offset of the next, inode, type, name.
type DirEntry = (u64, u64, FileType, Vec<u8>);

/// Whether inode 1 is an archive's root or the directory of archives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    OneArchive,
    Repository,
}

pub struct ArchiveFs {
    source: Arc<Source>,
    prefetch: Prefetcher,
    /// Per open file: the chunk up to which reading ahead has been asked for.
    ahead: Mutex<HashMap<u64, usize>>,
    /// Per open file: its node, so that reads do not look it up again (its directory's
    /// listing may have left a lazy tree's cache).
    open: Mutex<HashMap<u64, Arc<Node>>>,
    next_fh: AtomicU64,
    archives: Vec<Mounted>,
    layout: Layout,
    next_ino: AtomicU64,
    /// (first inode, archive) of the ranges given out, sorted.
    ranges: RwLock<Vec<(u64, usize)>>,
    /// Owner and time of the directories made up.
    defaults: Defaults,
}

/// What an inode is.
#[derive(Clone, Copy)]
enum Ino {
    /// The directory of archives.
    Top,
    Node(usize, u32),
}

impl ArchiveFs {
    pub fn new(
        repo: Repository,
        index: ChunkIndex,
        archives: Vec<Mounted>,
        layout: Layout,
        cache_bytes: usize,
        threads: usize,
    ) -> Self {
        let first_free = match layout {
            Layout::OneArchive => 2,
            Layout::Repository => 2 + archives.len() as u64,
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let time = match layout {
            Layout::OneArchive => archives.first().map(|a| a.meta.start),
            Layout::Repository => archives.last().map(|a| a.meta.start),
        }
        .unwrap_or(Timestamp {
            secs: now,
            nanos: 0,
        });
        let source = Arc::new(Source::new(repo, index, ChunkCache::new(cache_bytes)));
        let prefetch = Prefetcher::start(&source, threads);
        Self {
            source,
            prefetch,
            ahead: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            archives,
            layout,
            next_ino: AtomicU64::new(first_free),
            ranges: RwLock::new(Vec::new()),
            defaults: Defaults {
                time,
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
            },
        }
    }

    /// Reads archive `k`'s items on first use.
    fn tree(&self, k: usize) -> std::result::Result<&Arc<Tree>, Errno> {
        let a = &self.archives[k];
        let loaded = a.tree.get_or_init(|| {
            let mut d = self.defaults;
            d.time = a.meta.start;
            let source = self.source.clone();
            let fetch = move |c: &ChunkRef| source.repo.read_chunk(&source.index, &c.id);
            let records = Records::new(a.meta.items.clone(), Box::new(fetch));
            match Tree::open(records, d) {
                Ok(t) => {
                    let n = u64::from(t.ids());
                    let base = self
                        .next_ino
                        .fetch_add(n.saturating_sub(1), Ordering::Relaxed);
                    a.base.store(base, Ordering::Release);
                    let mut ranges = self.ranges.write().unwrap_or_else(|p| p.into_inner());
                    ranges.push((base, k));
                    ranges.sort_unstable();
                    Ok(Arc::new(t))
                }
                Err(e) => {
                    crate::say!("cairn: archive {}: {e}", a.meta.name);
                    Err(e.to_string())
                }
            }
        });
        loaded.as_ref().map_err(|_| Errno::EIO)
    }

    fn root_ino(&self, k: usize) -> u64 {
        match self.layout {
            Layout::OneArchive => 1,
            Layout::Repository => 2 + k as u64,
        }
    }

    fn ino_of(&self, k: usize, node: u32) -> u64 {
        if node == 0 {
            self.root_ino(k)
        } else {
            self.archives[k].base.load(Ordering::Acquire) + u64::from(node) - 1
        }
    }

    fn resolve(&self, ino: INodeNo) -> std::result::Result<Ino, Errno> {
        let ino = u64::from(ino);
        match self.layout {
            Layout::OneArchive if ino == 1 => return Ok(Ino::Node(0, 0)),
            Layout::Repository if ino == 1 => return Ok(Ino::Top),
            Layout::Repository if ino < 2 + self.archives.len() as u64 => {
                return Ok(Ino::Node((ino - 2) as usize, 0))
            }
            _ => {}
        }
        let ranges = self.ranges.read().unwrap_or_else(|p| p.into_inner());
        let i = ranges.partition_point(|(base, _)| *base <= ino);
        let &(base, k) = i
            .checked_sub(1)
            .and_then(|i| ranges.get(i))
            .ok_or(Errno::ENOENT)?;
        let node = u32::try_from(ino - base + 1).map_err(|_| Errno::ENOENT)?;
        match self.archives[k].tree.get() {
            Some(Ok(t)) if node < t.ids() => Ok(Ino::Node(k, node)),
            _ => Err(Errno::ENOENT),
        }
    }

    fn node(&self, k: usize, n: u32) -> std::result::Result<Arc<Node>, Errno> {
        let node = self.tree(k)?.node(n);
        self.found(k, node)?.ok_or(Errno::ENOENT)
    }

    /// Directory `n`'s listing.
    fn listing(&self, k: usize, n: u32) -> std::result::Result<Arc<Listing>, Errno> {
        let listing = self.tree(k)?.listing(n);
        self.found(k, listing)?.ok_or(Errno::ENOTDIR)
    }

    /// What a tree read from the repository, or EIO (said) when that failed.
    fn found<T>(&self, k: usize, r: Result<T>) -> std::result::Result<T, Errno> {
        r.map_err(|e| {
            crate::say!("cairn: archive {}: {e}", self.archives[k].meta.name);
            Errno::EIO
        })
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Node>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn top_attr(&self) -> FileAttr {
        let mut a = dir_attr(1, self.defaults);
        a.nlink = 2 + self.archives.len() as u32;
        a
    }

    /// An archive's directory in a repository mount, before its tree is read.
    fn archive_dir_attr(&self, k: usize) -> FileAttr {
        let mut d = self.defaults;
        d.time = self.archives[k].meta.start;
        dir_attr(self.root_ino(k), d)
    }

    fn attr(&self, ino: Ino) -> std::result::Result<FileAttr, Errno> {
        match ino {
            Ino::Top => Ok(self.top_attr()),
            Ino::Node(k, n) => {
                let node = self.node(k, n)?;
                Ok(node_attr(self.ino_of(k, n), &node))
            }
        }
    }

    /// Asks the workers for the chunks ahead of chunk `i`, when the reader of open file `fh`
    /// has come within half a window of where the last request ended.
    fn read_ahead(&self, fh: u64, node: &Node, i: usize) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let until = ahead.entry(fh).or_insert(0);
        let from = (*until).max(i);
        let here = node.chunk_start(i);
        if from > i && node.chunk_start(from) >= here + WINDOW / 2 {
            return;
        }
        let mut to = from;
        while to < node.chunks.len() && node.chunk_start(to) < here + WINDOW {
            to += 1;
        }
        *until = to;
        drop(ahead);
        let runs = self.source.runs(node, from, to, true);
        self.prefetch.submit(&self.source, runs);
    }

    /// Chunk `i` of a file: from the cache, from a worker fetching it, or read now.
    fn chunk(&self, fh: u64, node: &Node, i: usize) -> Result<Arc<Vec<u8>>> {
        self.read_ahead(fh, node, i);
        let id = node.chunks[i].id;
        if let Some(data) = self.source.cache.get(&id) {
            return Ok(data);
        }
        self.source.wait_for(&id);
        if let Some(data) = self.source.cache.get(&id) {
            return Ok(data);
        }
        for run in self.source.runs(node, i, i + 1, false) {
            self.source.fetch(&run)?;
        }
        self.source
            .cache
            .get(&id)
            .ok_or_else(|| content::missing(&node.chunks[i]))
    }

    fn read_at(&self, fh: u64, node: &Node, offset: u64, size: u32) -> Result<Vec<u8>> {
        let end = node.size.min(offset.saturating_add(u64::from(size)));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let Some(i) = node.chunk_at(pos) else {
                break;
            };
            let data = self.chunk(fh, node, i)?;
            let from = (pos - node.chunk_start(i)) as usize;
            let take = ((end - pos) as usize).min(data.len() - from);
            out.extend_from_slice(&data[from..from + take]);
            pos += take as u64;
        }
        Ok(out)
    }

    /// A directory's entries from `offset` on, at most `MAX_ENTRIES` of them (a reply holds
    /// fewer): (offset of the next, inode, type, name). Entry 0 is `.`, 1 is `..`.
    fn entries(&self, ino: Ino, offset: u64) -> std::result::Result<Vec<DirEntry>, Errno> {
        const MAX_ENTRIES: usize = 1024;
        let (this, parent, total, listing) = match ino {
            Ino::Top => (1, 1, 2 + self.archives.len(), None),
            Ino::Node(k, n) => {
                let listing = self.listing(k, n)?;
                let parent = if n == 0 {
                    1
                } else {
                    self.ino_of(k, listing.parent)
                };
                let total = 2 + listing.entries.len();
                (self.ino_of(k, n), parent, total, Some(listing))
            }
        };
        let mut out = Vec::new();
        for i in (offset as usize..total).take(MAX_ENTRIES) {
            let (ino, kind, name) = match (i, ino) {
                (0, _) => (this, FileType::Directory, b".".to_vec()),
                (1, _) => (parent, FileType::Directory, b"..".to_vec()),
                (i, Ino::Top) => (
                    self.root_ino(i - 2),
                    FileType::Directory,
                    self.archives[i - 2].dir_name.clone(),
                ),
                (i, Ino::Node(k, _)) => {
                    let e = &listing.as_ref().ok_or(Errno::EIO)?.entries[i - 2];
                    (self.ino_of(k, e.id), file_type(e.kind), e.name.to_vec())
                }
            };
            out.push((i as u64 + 1, ino, kind, name));
        }
        Ok(out)
    }

    fn lookup_in(&self, parent: Ino, name: &[u8]) -> std::result::Result<FileAttr, Errno> {
        match parent {
            Ino::Top => {
                let k = self
                    .archives
                    .iter()
                    .position(|a| a.dir_name == name)
                    .ok_or(Errno::ENOENT)?;
                Ok(self.archive_dir_attr(k))
            }
            Ino::Node(k, n) => {
                let listing = self.listing(k, n)?;
                let e = listing.lookup(name).ok_or(Errno::ENOENT)?;
                let node = match &e.node {
                    Some(node) => node.clone(),
                    None => self.node(k, e.id)?,
                };
                Ok(node_attr(self.ino_of(k, e.id), &node))
            }
        }
    }
}

/// Answers a getxattr or listxattr: the size when asked for it, the bytes when they fit.
fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

impl Filesystem for ArchiveFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The kernel reads ahead in requests of up to 1 MiB rather than 128 KiB: fewer round
        // trips for the same bytes. A kernel that allows less gets what it allows.
        if let Err(nearest) = config.set_max_readahead(1 << 20) {
            let _ = config.set_max_readahead(nearest);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self
            .resolve(parent)
            .and_then(|p| self.lookup_in(p, name.as_bytes()))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        // An archive's directory is described without reading the archive.
        let attr = match self.resolve(ino) {
            Ok(Ino::Node(k, 0)) if self.layout == Layout::Repository => {
                Ok(self.archive_dir_attr(k))
            }
            Ok(i) => self.attr(i),
            Err(e) => Err(e),
        };
        match attr {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.resolve(ino) {
            Ok(Ino::Node(k, n)) => match self.node(k, n) {
                Ok(node) if node.kind == ItemKind::Symlink => reply.data(&node.link_target),
                Ok(_) => reply.error(Errno::EINVAL),
                Err(e) => reply.error(e),
            },
            Ok(Ino::Top) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & (OFlags::WRONLY | OFlags::RDWR).bits() as i32 != 0 {
            return reply.error(Errno::EROFS);
        }
        let node = match self.resolve(ino) {
            Ok(Ino::Node(k, n)) => match self.node(k, n) {
                Ok(node) => Some(node),
                Err(e) => return reply.error(e),
            },
            Ok(Ino::Top) => None,
            Err(e) => return reply.error(e),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if let Some(node) = node.filter(|n| n.kind == ItemKind::File) {
            self.lock_open().insert(fh, node);
        }
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Ok(Ino::Node(k, n)) = self.resolve(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let held = self.lock_open().get(&fh.0).cloned();
        let node = match held.map_or_else(|| self.node(k, n), Ok) {
            Ok(node) if node.kind == ItemKind::File => node,
            Ok(_) => return reply.error(Errno::EISDIR),
            Err(e) => return reply.error(e),
        };
        // Most reads lie within one chunk: answered from the cached chunk without a copy.
        let end = node.size.min(offset.saturating_add(u64::from(size)));
        if let Some(i) = node.chunk_at(offset).filter(|i| end <= node.ends[*i]) {
            return match self.chunk(fh.0, &node, i) {
                Ok(data) => {
                    let from = (offset - node.chunk_start(i)) as usize;
                    reply.data(&data[from..from + (end - offset) as usize]);
                }
                Err(e) => {
                    crate::say!("cairn: reading {}: {e}", self.archives[k].meta.name);
                    reply.error(Errno::EIO);
                }
            };
        }
        match self.read_at(fh.0, &node, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => {
                crate::say!("cairn: reading {}: {e}", self.archives[k].meta.name);
                reply.error(Errno::EIO);
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        self.lock_open().remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.resolve(ino).and_then(|i| self.entries(i, offset)) {
            Ok(entries) => {
                for (next, ino, kind, name) in entries {
                    if reply.add(INodeNo(ino), next, kind, OsStr::from_bytes(&name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = match self.resolve(ino) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        match self.entries(dir, offset) {
            Ok(entries) => {
                for (next, ino, _, name) in entries {
                    let attr = match self.resolve(INodeNo(ino)) {
                        Ok(Ino::Node(k, 0)) if self.layout == Layout::Repository => {
                            self.archive_dir_attr(k)
                        }
                        Ok(i) => match self.attr(i) {
                            Ok(a) => a,
                            Err(e) => return reply.error(e),
                        },
                        Err(e) => return reply.error(e),
                    };
                    if reply.add(
                        INodeNo(ino),
                        next,
                        OsStr::from_bytes(&name),
                        &TTL,
                        &attr,
                        Generation(0),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Ok(Ino::Node(k, n)) = self.resolve(ino) else {
            return reply.error(Errno::NO_XATTR);
        };
        match self.node(k, n) {
            Ok(node) => match node
                .xattrs
                .iter()
                .find(|(key, _)| key.as_ref() == name.as_bytes())
            {
                Some((_, value)) => reply_xattr(reply, size, value),
                None => reply.error(Errno::NO_XATTR),
            },
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let mut names = Vec::new();
        if let Ok(Ino::Node(k, n)) = self.resolve(ino) {
            match self.node(k, n) {
                Ok(node) => {
                    for (key, _) in node.xattrs.iter() {
                        names.extend_from_slice(key);
                        names.push(0);
                    }
                }
                Err(e) => return reply.error(e),
            }
        }
        reply_xattr(reply, size, &names);
    }
}
