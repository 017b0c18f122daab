//! The reader side of `create`: walks the sources in order, turns each entry into an item,
//! decides what must be read (files cache, hardlinks), reads and chunks file contents, and
//! hands chunks to the sealing workers. Everything it produces goes to the main thread as one
//! ordered stream of [`Unit`]s, so the archive is the same whatever the thread timing.
//!
//! The reader never touches the repository: it only consults the frozen set of chunks the
//! repository had when the backup began.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use crossbeam_channel::{Receiver, Sender};

use super::tree::{Entry, Walk};
use rustix::io::Errno;

use crate::chunker::{ChunkReader, Chunker};
use crate::error::Result;
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp};
use crate::index::KnownChunks;
use crate::ops::create::{stored_path, BackupOptions, CACHE_MIN_AGE_NS};
use crate::repo::signals::Interrupt;
use crate::source::exclude;
use crate::source::files_cache::{self, CacheEntry, FilesCache};
use crate::source::fsmeta::{self, Meta, Names};
use crate::util::id::ChunkId;
use crate::util::parallel::{oneshot, Budget};
use crate::util::progress::Progress;

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

/// A chunk after the workers: its id, and its sealed blob (with the blob's CRC-32 from right
/// after encryption) unless the repository had it.
pub struct Sealed {
    pub id: ChunkId,
    pub len: u32,
    pub blob: Option<Vec<u8>>,
    pub crc: u32,
    /// Bytes of the byte budget this chunk still holds: the sealed blob's, at most the
    /// plaintext's that the reader acquired (the worker released the rest once it had
    /// dropped the plaintext). The consumer releases them.
    pub held: u32,
}

/// Work for a sealing worker.
pub struct Job {
    pub data: Vec<u8>,
    pub reply: Sender<Result<Sealed>>,
}

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
        for root in &self.opts.paths {
            if self.root(root).is_err() {
                return;
            }
        }
        let _ = self.units.send(Unit::Done);
    }

    fn send(&self, u: Unit) -> Step {
        self.units.send(u).map_err(|_| Stop)
    }

    fn warn(&self, msg: String) -> Step {
        self.progress.println(&format!("warning: {msg}"));
        self.send(Unit::Warning(msg))
    }

    fn check(&self) -> Step {
        if self.interrupt.raised() {
            Err(Stop)
        } else {
            Ok(())
        }
    }

    fn root(&mut self, root: &Path) -> Step {
        let mut walk = Walk::new(root, self.opts.one_file_system);
        while let Some(next) = walk.next() {
            self.check()?;
            let entry = match next {
                Ok(e) => e,
                Err(e) => {
                    self.warn(e.to_string())?;
                    continue;
                }
            };
            let stored = stored_path(&entry.path);
            let is_dir = entry.meta.is_dir();
            if self.opts.excludes.is_excluded(&stored) {
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
                    return self.warn(format!(
                        "{}: cannot read symlink: {e}",
                        crate::util::text::printable_path(&entry.path)
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
                self.warn(format!(
                    "{}: cannot read extended attributes: {e}",
                    crate::util::text::printable_path(path)
                ))?;
                Ok((Vec::new(), false))
            }
        }
    }

    /// The inode flags and extended attributes of a file that is not read (its contents come
    /// from the files cache), through a descriptor when it opens as the file listed; and
    /// whether they are known whole (not when read by name, without the flags, or when the
    /// attributes could not be read).
    fn attributes_unread(
        &self,
        entry: &Entry,
    ) -> std::result::Result<(u32, fsmeta::Xattrs, bool), Stop> {
        let opened = entry.open().ok().filter(|f| {
            f.metadata()
                .is_ok_and(|m| Meta::of(&m).identity() == entry.meta.identity())
        });
        let Some(file) = opened else {
            // Not readable by this process (or gone): its attributes by name, through its
            // directory's descriptor.
            let xattrs = fsmeta::read_xattrs(&entry.fd_path(), &self.opts.meta);
            return Ok((0, self.xattrs_read(&entry.path, xattrs)?.0, false));
        };
        let flags = if self.opts.meta.flags || self.opts.exclude_nodump {
            fsmeta::read_flags(file.as_fd())
        } else {
            0
        };
        let xattrs = fsmeta::read_xattrs_fd(&file, &self.opts.meta);
        let (xattrs, known) = self.xattrs_read(&entry.path, xattrs)?;
        Ok((flags, xattrs, known))
    }

    fn file(&mut self, entry: &Entry, item: Box<Item>) -> Step {
        let stamp = Stamp::of(&entry.meta);
        let link = (entry.meta.nlink > 1).then_some((stamp.dev, stamp.inode));
        if let Some(key) = link {
            if self.links_read.contains(&key) {
                return self.send(Unit::Hardlink { item, key, stamp });
            }
        }
        let cached = self.old_cache.get(&item.path).filter(|e| {
            e.matches(stamp.inode, stamp.size, stamp.mtime, stamp.ctime)
                && e.chunks.iter().all(|c| self.known.contains_key(&c.id))
        });
        if let Some(mut cached) = cached {
            // Unchanged contents. The attributes and flags too when the cache holds them as
            // this backup reads them (changing any of them changes the ctime, which
            // matched): the file is not even opened. Else they are read from the file.
            let known = self
                .old_cache
                .attrs(&cached, &self.opts.meta)
                .filter(|_| !self.opts.exclude_nodump)
                .cloned();
            let (inode_flags, xattrs, whole) = match known {
                Some(a) => (a.inode_flags, a.xattrs, true),
                None => self.attributes_unread(entry)?,
            };
            cached.attrs = whole.then(|| files_cache::Attrs {
                inode_flags,
                xattrs: xattrs.clone(),
            });
            if self.opts.exclude_nodump && inode_flags & fsmeta::FL_NODUMP != 0 {
                return Ok(());
            }
            let mut item = item;
            item.xattrs = xattrs;
            if self.opts.meta.flags {
                item.inode_flags = inode_flags;
            }
            if let Some(key) = link {
                self.links_read.insert(key);
            }
            return self.send(Unit::Cached {
                item,
                entry: cached,
                link,
            });
        }
        self.read(entry, stamp, link, item)
    }

    fn read(
        &mut self,
        entry: &Entry,
        walked: Stamp,
        link: Option<LinkKey>,
        item: Box<Item>,
    ) -> Step {
        let path = entry.path.as_path();
        let file = match entry.open() {
            Ok(f) => f,
            Err(e) if Errno::from_io_error(&e) == Some(Errno::LOOP) => {
                return self.warn(format!(
                    "{}: changed during backup (replaced by a symlink); skipped",
                    crate::util::text::printable_path(path)
                ))
            }
            Err(e) => {
                return self.warn(format!("{}: {e}", crate::util::text::printable_path(path)))
            }
        };
        let start = match file.metadata() {
            Ok(m) if m.is_file() => Stamp::of(&Meta::of(&m)),
            Ok(_) => {
                return self.warn(format!(
                    "{}: was replaced by something that is not a file; skipped",
                    crate::util::text::printable_path(path)
                ))
            }
            Err(e) => {
                return self.warn(format!("{}: {e}", crate::util::text::printable_path(path)))
            }
        };
        if (start.dev, start.inode) != (walked.dev, walked.inode) {
            // Not the file that was listed (a rename in its place): storing it under this
            // path and owner could expose someone else's data.
            return self.warn(format!(
                "{}: changed during backup (replaced between listing and reading); skipped",
                crate::util::text::printable_path(path)
            ));
        }
        let inode_flags = if self.opts.meta.flags || self.opts.exclude_nodump {
            fsmeta::read_flags(file.as_fd())
        } else {
            0
        };
        if self.opts.exclude_nodump && inode_flags & fsmeta::FL_NODUMP != 0 {
            return Ok(());
        }
        // The real clock: compared with the file system's times, never shifted.
        let read_at = Timestamp::from_system(crate::util::clock::now());
        self.send(Unit::FileStart(item))?;
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.chunks(path, &file, &mut buf);
        self.buf = buf;
        let Some(size) = result? else {
            return self.send(Unit::FileEnd(FileEnd::failed()));
        };
        let end = file.metadata().map(|m| Stamp::of(&Meta::of(&m))).ok();
        let changed = start != walked || end != Some(start) || size != start.size;
        if changed {
            self.warn(format!(
                "{}: file changed while it was read",
                crate::util::text::printable_path(path)
            ))?;
        }
        let (xattrs, attrs_known) =
            self.xattrs_read(path, fsmeta::read_xattrs_fd(&file, &self.opts.meta))?;
        let cacheable = !changed
            && start.ctime.max(start.mtime).as_nanos() < read_at.as_nanos() - CACHE_MIN_AGE_NS;
        if let Some(key) = link {
            self.links_read.insert(key);
        }
        self.send(Unit::FileEnd(FileEnd {
            ok: true,
            start: Some(start),
            size,
            changed,
            cacheable,
            link,
            xattrs,
            inode_flags: if self.opts.meta.flags { inode_flags } else { 0 },
            attrs_known,
        }))
    }

    /// Reads and chunks one file, handing each chunk to the workers. `Ok(None)` after a read
    /// error (warned).
    fn chunks(
        &self,
        path: &Path,
        file: &File,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<Option<u64>, Stop> {
        match self.chunks_of(file, buf)? {
            Ok(size) => Ok(Some(size)),
            Err(e) => {
                self.warn(format!(
                    "{}: read error: {e}",
                    crate::util::text::printable_path(path)
                ))?;
                Ok(None)
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

    /// Stores standard input, or what a command writes to its standard output, as one file.
    /// A read error or a command that fails fails the backup.
    fn stdin(&mut self, stdin: &StdinSource) -> crate::error::Result<()> {
        use crate::error::Error;
        let now = Timestamp::now();
        let mut item = Box::new(Item::new(ItemKind::File, stdin.name.clone()));
        item.mode = stdin.mode;
        let (uid, gid) = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        (item.uid, item.gid) = (uid, gid);
        if !self.opts.meta.numeric_ids {
            item.user = self.names.user(uid);
            item.group = self.names.group(gid);
        }
        item.mtime = now;
        item.ctime = now;
        let stopped = || Error::Interrupted(0);
        let mut child = match &stdin.command {
            Some(argv) => {
                let (program, args) = argv
                    .split_first()
                    .ok_or_else(|| Error::invalid("--stdin-from-command needs a command"))?;
                let child = crate::util::secrets::scrub(&mut std::process::Command::new(program))
                    .args(args)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        Error::invalid(format!("cannot run {}: {e}", program.to_string_lossy()))
                    })?;
                Some(child)
            }
            None => None,
        };
        self.send(Unit::FileStart(item)).map_err(|_| stopped())?;
        let mut buf = std::mem::take(&mut self.buf);
        let read = match child.as_mut().and_then(|c| c.stdout.take()) {
            Some(out) => self.chunks_of(out, &mut buf),
            None => self.chunks_of(std::io::stdin().lock(), &mut buf),
        };
        self.buf = buf;
        let what = match &stdin.command {
            Some(argv) => format!(
                "the output of {}",
                argv.first()
                    .map_or(String::new(), |p| p.to_string_lossy().into_owned())
            ),
            None => "standard input".to_string(),
        };
        let read = match read {
            Ok(r) => r,
            Err(Stop) => {
                if let Some(c) = child.as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(stopped());
            }
        };
        if let Some(mut c) = child {
            let status = c
                .wait()
                .map_err(|e| Error::invalid(format!("waiting for {what}: {e}")))?;
            if !status.success() {
                return Err(Error::invalid(format!(
                    "{} failed ({status}); nothing was saved",
                    what.trim_start_matches("the output of ")
                )));
            }
        }
        let size = read.map_err(|e| Error::invalid(format!("reading {what}: {e}")))?;
        let stamp = Stamp {
            dev: 0,
            inode: 0,
            size,
            mtime: now,
            ctime: now,
        };
        self.send(Unit::FileEnd(FileEnd {
            ok: true,
            start: Some(stamp),
            size,
            changed: false,
            cacheable: false,
            link: None,
            xattrs: Vec::new(),
            inode_flags: 0,
            attrs_known: false,
        }))
        .map_err(|_| stopped())
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

/// A chunk as its sealing worker left it.
pub fn sealed(rx: Receiver<Result<Sealed>>) -> Result<Sealed> {
    rx.recv()
        .map_err(|_| crate::error::Error::internal("a sealing worker stopped"))?
}

/// `create -` and `--stdin-from-command`: one file made from a stream.
#[derive(Clone, Debug)]
pub struct StdinSource {
    /// The stored path (`--stdin-name`).
    pub name: Vec<u8>,
    /// Permission bits (`--stdin-mode`, 0600 by default).
    pub mode: u32,
    /// The command whose output is stored, instead of standard input.
    pub command: Option<Vec<std::ffi::OsString>>,
}

/// A sealing worker: keyed id, then compress and encrypt unless the repository has the chunk.
/// The budget counts what is really held: the plaintext until it is sealed, then the sealed
/// blob (for compressible data about half), so that more chunks are in flight within the same
/// bytes; a known chunk, which keeps nothing, gives back all of its bytes at once.
pub fn seal_worker(
    crypto: &crate::crypto::Crypto,
    known: &KnownChunks,
    jobs: Receiver<Job>,
    codec: crate::format::compress::Codec,
    budget: &Budget,
) {
    for job in jobs {
        let result = seal_job(crypto, known, &job.data, codec);
        let plain = job.data.len() as u32;
        drop(job.data);
        let held = match &result {
            Ok(sealed) => sealed.held,
            // The backup stops at this error; the consumer releases all of it.
            Err(_) => plain,
        };
        budget.release((plain - held) as usize);
        let _ = job.reply.send(result);
    }
}

/// One chunk's id and, unless the repository has it, its sealed blob.
fn seal_job(
    crypto: &crate::crypto::Crypto,
    known: &KnownChunks,
    data: &[u8],
    codec: crate::format::compress::Codec,
) -> Result<Sealed> {
    let id = crypto.id_of(data);
    let len = data.len() as u32;
    if known.contains_key(&id) {
        return Ok(Sealed {
            id,
            len,
            blob: None,
            crc: 0,
            held: 0,
        });
    }
    let mut blob = Vec::new();
    let kind = crate::format::blob::BlobKind::Chunk;
    let crc = crate::format::blob::seal_into(crypto, kind, &id.0, data, codec, &mut blob)?;
    #[cfg(feature = "testing")]
    corrupt_for_test(&mut blob);
    // Sealing reserved (and zeroed) room for the worst case, about the plaintext's size: give
    // the rest back, so that the blob's bytes are what it holds and what the budget counts.
    blob.shrink_to_fit();
    let held = (blob.len() as u32).min(len);
    Ok(Sealed {
        id,
        len,
        blob: Some(blob),
        crc,
        held,
    })
}

/// `CAIRN_TEST_CORRUPT_AFTER_SEAL=1` (test builds only, the `testing` feature): flip one bit of the first blob after it
/// was sealed and its CRC taken, as faulty memory would; the pack writer must refuse to store
/// it.
/// The variable is read once per process, not once per blob.
#[cfg(feature = "testing")]
fn corrupt_for_test(blob: &mut [u8]) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static ASKED: OnceLock<bool> = OnceLock::new();
    static DONE: AtomicBool = AtomicBool::new(false);
    let asked = *ASKED
        .get_or_init(|| std::env::var("CAIRN_TEST_CORRUPT_AFTER_SEAL").is_ok_and(|v| v == "1"));
    if asked && blob.len() > 100 && !DONE.swap(true, Ordering::SeqCst) {
        blob[blob.len() / 2] ^= 0x01;
    }
}

/// The chunk refs of a sealed sequence.
pub fn chunk_ref(s: &Sealed) -> ChunkRef {
    ChunkRef {
        id: s.id,
        len: s.len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Crypto, EncryptionMode, MasterKey, Padding};
    use crate::format::compress::Codec;
    use crate::index::table::KnownTable;
    use crate::index::StoredLoc;

    /// The budget holds what is really held: once a worker has sealed a chunk, only the sealed
    /// blob's bytes stay charged (fewer for compressible data, never more than the plaintext
    /// acquired), and a chunk the repository has gives all of its bytes back.
    #[test]
    fn a_sealed_chunk_holds_only_its_blob_in_the_budget() {
        let crypto = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        );
        let compressible = vec![7u8; 200_000];
        let mut x = 1u64;
        let random: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let old = b"a chunk the repository has".repeat(1000);
        let loc = StoredLoc {
            pack: 0,
            offset: 0,
            len: 10,
            plain_len: old.len() as u32,
        };
        let known: KnownChunks =
            std::sync::Arc::new(KnownTable::from_sorted(vec![(crypto.id_of(&old), loc)]));
        let budget = Budget::new(1 << 30);
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let mut replies = Vec::new();
        for data in [&compressible, &random, &old] {
            assert!(budget.acquire(data.len()));
            let (reply, rx) = oneshot();
            jobs_tx
                .send(Job {
                    data: data.clone(),
                    reply,
                })
                .unwrap();
            replies.push(rx);
        }
        drop(jobs_tx);
        seal_worker(&crypto, &known, jobs_rx, Codec::Lz4, &budget);
        let sealed: Vec<Sealed> = replies.into_iter().map(|rx| sealed(rx).unwrap()).collect();
        let blob_len = |s: &Sealed| s.blob.as_ref().map_or(0, Vec::len) as u32;
        assert!(sealed[0].held < 10_000, "{}", sealed[0].held);
        assert_eq!(sealed[0].held, blob_len(&sealed[0]));
        assert_eq!(
            sealed[1].held, sealed[1].len,
            "never more than the plaintext"
        );
        assert!(blob_len(&sealed[1]) > sealed[1].len);
        assert_eq!((sealed[2].held, blob_len(&sealed[2])), (0, 0));
        let held: u32 = sealed.iter().map(|s| s.held).sum();
        assert_eq!(budget.in_flight(), held as usize);
        for s in &sealed {
            budget.release(s.held as usize);
        }
        assert_eq!(budget.in_flight(), 0);
    }
}
