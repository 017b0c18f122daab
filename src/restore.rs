//! The restore engine behind `cairn extract`.
//!
//! Safety: nothing outside the target directory is ever written, linked or changed, whatever
//! the archive holds and whatever other processes do to the target meanwhile.
//! - An item path must be relative, without NUL and without empty, `.` or `..` components.
//! - Every directory is reached by `openat(parent, name, O_DIRECTORY | O_NOFOLLOW)` from a
//!   descriptor of the target, one component at a time: a symlink anywhere on the way
//!   (planted by the archive or by someone else, even mid-restore) refuses the item. All
//!   creation and metadata calls are relative to the parent's descriptor (`mkdirat`,
//!   `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `symlinkat`, `mknodat`, `linkat`) or made on the
//!   object's own descriptor (`fchmod`, `fchown`, `futimens`, `fsetxattr`); symlinks and
//!   special files get `…at(AT_SYMLINK_NOFOLLOW)` calls.
//! - An existing non-directory at the final path is unlinked, never followed; a directory is
//!   never replaced. Hardlinks only point at files restored in this run.
//! - Only `user.*` extended attributes are applied.
//!
//! Errors: a file whose chunks are missing or fail to verify, or that cannot be written, is
//! reported and removed (no wrong byte stays behind), and the restore goes on; those make the
//! command exit 2. Metadata that cannot be applied and refused items are warnings (exit 1).
//!
//! Speed: file contents are fetched by workers in coalesced reads and written as they arrive
//! (see [`fetch`]); everything else stays in this thread, in archive order.

pub mod fetch;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timestamps};
use rustix::io::Errno;

use crate::archive::item::{Item, ItemKind, Timestamp};
use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::fsmeta::Names;
use crate::index::ChunkIndex;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::signals::Interrupt;

pub struct RestoreOptions {
    pub target: PathBuf,
    /// Restore only these stored paths and what is below them (all when empty).
    pub filters: Vec<Vec<u8>>,
    /// Fetch workers.
    pub threads: usize,
}

#[derive(Default)]
pub struct RestoreReport {
    pub files: u64,
    pub items: u64,
    pub bytes: u64,
    /// Items not restored (exit 2).
    pub errors: Vec<String>,
    /// Items restored incompletely or skipped as unsafe (exit 1).
    pub warnings: Vec<String>,
}

/// The components of a stored path, or `None` when it could escape the target.
pub fn safe_components(path: &[u8]) -> Option<Vec<&[u8]>> {
    if path.is_empty() || path[0] == b'/' || path.contains(&0) {
        return None;
    }
    let comps: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if comps
        .iter()
        .any(|c| c.is_empty() || *c == b"." || *c == b"..")
    {
        return None;
    }
    Some(comps)
}

/// Whether `path` is selected by `filters` (a filter selects itself and what is below it).
pub fn selected(path: &[u8], filters: &[Vec<u8>]) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            path == f.as_slice() || (path.starts_with(f) && path.get(f.len()) == Some(&b'/'))
        })
}

/// True when a block of bytes is all zeros (a hole on restore).
fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(16);
    let body = words.all(|w| u128::from_ne_bytes(w.try_into().unwrap_or([1; 16])) == 0);
    body && words.remainder().iter().all(|x| *x == 0)
}

const BLOCK: u64 = 4096;

/// Writes `data` at `offset`, leaving whole zero blocks as holes.
fn write_sparse(f: &File, offset: u64, data: &[u8]) -> io::Result<()> {
    let mut pos = 0usize;
    let mut run: Option<usize> = None;
    while pos < data.len() {
        let abs = offset + pos as u64;
        let end = (pos + (BLOCK - abs % BLOCK) as usize).min(data.len());
        let zero = is_zero(&data[pos..end]);
        match (zero, run) {
            (false, None) => run = Some(pos),
            (true, Some(s)) => {
                f.write_all_at(&data[s..pos], offset + s as u64)?;
                run = None;
            }
            _ => {}
        }
        pos = end;
    }
    if let Some(s) = run {
        f.write_all_at(&data[s..], offset + s as u64)?;
    }
    Ok(())
}

/// Files open for writing at once (each holds a descriptor).
const MAX_OPEN_FILES: usize = 256;

fn timestamps(t: Timestamp) -> Timestamps {
    let ts = rustix::fs::Timespec {
        tv_sec: t.secs,
        tv_nsec: i64::from(t.nanos) as _,
    };
    Timestamps {
        last_access: ts,
        last_modification: ts,
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Opens directories component by component from the target's descriptor, never following a
/// symlink, keeping the chain of the last directory open (items arrive depth-first, so
/// neighbours share most of it).
struct DirWalker {
    root: OwnedFd,
    stack: Vec<(Vec<u8>, OwnedFd)>,
}

impl DirWalker {
    fn open_child(
        parent: &OwnedFd,
        name: &[u8],
        create: bool,
        shown: &[u8],
    ) -> std::result::Result<OwnedFd, String> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..2 {
            match rustix::fs::openat(parent, name, flags, Mode::empty()) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => {
                            return Err(format!("cannot create directory {}: {e}", lossy(shown)))
                        }
                    }
                }
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(format!(
                        "parent {} is not a directory (a symlink or file is in the way)",
                        lossy(shown)
                    ))
                }
                Err(e) => return Err(format!("{}: {e}", lossy(shown))),
            }
        }
        Err(format!("{}: keeps changing", lossy(shown)))
    }

    /// The directory `comps` (relative to the target), created if missing when `create`.
    fn dir(&mut self, comps: &[&[u8]], create: bool) -> std::result::Result<&OwnedFd, String> {
        let common = self
            .stack
            .iter()
            .zip(comps)
            .take_while(|((name, _), c)| name.as_slice() == **c)
            .count();
        self.stack.truncate(common);
        for i in common..comps.len() {
            let shown = comps[..=i].join(&b'/');
            let parent = self.stack.last().map(|(_, fd)| fd).unwrap_or(&self.root);
            let fd = Self::open_child(parent, comps[i], create, &shown)?;
            self.stack.push((comps[i].to_vec(), fd));
        }
        Ok(self.stack.last().map(|(_, fd)| fd).unwrap_or(&self.root))
    }

    /// Like `dir`, without disturbing the cached chain (for hardlinks).
    fn dir_fresh(&self, comps: &[&[u8]]) -> std::result::Result<OwnedFd, String> {
        let mut cur = rustix::io::dup(&self.root).map_err(|e| e.to_string())?;
        for i in 0..comps.len() {
            cur = Self::open_child(&cur, comps[i], false, &comps[..=i].join(&b'/'))?;
        }
        Ok(cur)
    }
}

/// The names of one hardlinked inode restored so far: the file written, and the links made to
/// it (removed too if its contents fail).
struct LinkGroup {
    first: Vec<u8>,
    others: Vec<Vec<u8>>,
}

struct Restorer<'a> {
    index: &'a ChunkIndex,
    dirs: DirWalker,
    /// Directories restored, to get their metadata after their contents.
    dirs_to_finish: Vec<Item>,
    hardlinks: HashMap<[u8; 16], LinkGroup>,
    planner: Option<fetch::Planner>,
    done: crossbeam_channel::Receiver<fetch::Done>,
    open_files: usize,
    names: Names,
    is_root: bool,
    report: RestoreReport,
    progress: &'a Progress,
}

enum Outcome {
    Done,
    /// Not restored: the reason.
    Failed(String),
}

impl Restorer<'_> {
    fn warn(&mut self, msg: String) {
        self.progress.println(&format!("warning: {msg}"));
        self.report.warnings.push(msg);
    }

    fn error(&mut self, msg: String) {
        self.progress.println(&format!("error: {msg}"));
        self.report.errors.push(msg);
    }

    fn owner(&mut self, item: &Item) -> (rustix::fs::Uid, rustix::fs::Gid) {
        let uid = self.names.uid_of(&item.user).unwrap_or(item.uid);
        let gid = self.names.gid_of(&item.group).unwrap_or(item.gid);
        (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        )
    }

    fn restore(&mut self, item: &Item) {
        let Some(comps) = safe_components(&item.path) else {
            self.warn(format!(
                "{}: unsafe path in archive; skipped",
                item.display_path()
            ));
            return;
        };
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        let parent = match self.dirs.dir(parents, true) {
            Ok(fd) => fd.as_fd().try_clone_to_owned(),
            Err(reason) => {
                self.warn(format!("{}: {reason}; skipped", item.display_path()));
                return;
            }
        };
        let parent = match parent {
            Ok(p) => p,
            Err(e) => {
                self.error(format!("{}: not restored: {e}", item.display_path()));
                return;
            }
        };
        self.report.items += 1;
        let outcome = match item.kind {
            ItemKind::Dir => self.restore_dir(&parent, name, item),
            ItemKind::File => self.restore_file(&parent, name, item),
            ItemKind::Symlink => self.restore_symlink(&parent, name, item),
            ItemKind::Fifo | ItemKind::CharDev | ItemKind::BlockDev => {
                self.restore_special(&parent, name, item)
            }
        };
        if let Outcome::Failed(reason) = outcome {
            self.error(format!("{}: not restored: {reason}", item.display_path()));
        }
    }

    /// Removes a non-directory at `parent/name` (never following it). Err if a directory is
    /// there.
    fn clear(parent: &OwnedFd, name: &[u8]) -> std::result::Result<(), String> {
        match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                Err("a directory is in the way".into())
            }
            Ok(_) => rustix::fs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| format!("cannot replace: {e}")),
            Err(_) => Ok(()),
        }
    }

    fn restore_dir(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
                    _ => {
                        if let Err(e) = rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                            return Outcome::Failed(format!("cannot replace: {e}"));
                        }
                        if let Err(e) =
                            rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700))
                        {
                            return Outcome::Failed(e.to_string());
                        }
                    }
                }
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        }
        // Mode, owner and times are applied after the contents, deepest first.
        self.dirs_to_finish.push(item.clone());
        Outcome::Done
    }

    fn restore_file(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(r) = Self::clear(parent, name) {
            return Outcome::Failed(r);
        }
        if let Some(h) = item.hardlink_id {
            if let Some(first) = self.hardlinks.get(&h).map(|g| g.first.clone()) {
                if let Some(comps) = safe_components(&first) {
                    let (first_name, first_parents) = comps.split_last().expect("non-empty");
                    if let Ok(first_parent) = self.dirs.dir_fresh(first_parents) {
                        // Flags 0: a symlink that replaced the first file is linked, not followed.
                        if rustix::fs::linkat(
                            &first_parent,
                            *first_name,
                            parent,
                            name,
                            AtFlags::empty(),
                        )
                        .is_ok()
                        {
                            if let Some(g) = self.hardlinks.get_mut(&h) {
                                g.others.push(item.path.clone());
                            }
                            self.report.files += 1;
                            return Outcome::Done;
                        }
                    }
                }
            }
        }
        // Every chunk must be locatable before anything is created.
        let mut locs = Vec::with_capacity(item.chunks.len());
        for c in &item.chunks {
            match self.index.stored(&c.id) {
                Some(l) => locs.push(l),
                None => {
                    return Outcome::Failed(format!(
                        "chunk {} is missing from the repository",
                        c.id
                    ))
                }
            }
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = match rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => File::from(fd),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if let Some(h) = item.hardlink_id {
            self.hardlinks.entry(h).or_insert_with(|| LinkGroup {
                first: item.path.clone(),
                others: Vec::new(),
            });
        }
        let owner = if self.is_root {
            Some(self.owner(item))
        } else {
            None
        };
        let open = fetch::OpenFile::new(file, item.clone(), owner);
        if item.chunks.is_empty() {
            let warnings = fetch::finalize(&open);
            self.finish_file(fetch::Done {
                file: open,
                error: None,
                warnings,
            });
            return Outcome::Done;
        }
        self.open_files += 1;
        let mut offset = 0u64;
        for (c, (pack, loc)) in item.chunks.iter().zip(locs) {
            let piece = fetch::Piece {
                file: Arc::clone(&open),
                file_offset: offset,
                id: c.id,
                plain_len: c.len,
                blob_offset: u64::from(loc.offset),
                blob_len: u64::from(loc.len),
            };
            offset += u64::from(c.len);
            let sent = self.planner.as_mut().is_some_and(|p| p.add(pack, piece));
            if !sent {
                return Outcome::Failed("the fetch workers stopped".into());
            }
        }
        // Bound the descriptors held by files still being written.
        while self.open_files >= MAX_OPEN_FILES {
            if let Some(p) = self.planner.as_mut() {
                p.flush();
            }
            match self.done.recv() {
                Ok(d) => self.finish_file(d),
                Err(_) => break,
            }
        }
        while let Ok(d) = self.done.try_recv() {
            self.finish_file(d);
        }
        Outcome::Done
    }

    /// A file the workers finished (or an empty one): count it, or report it and remove
    /// everything written under its names.
    fn finish_file(&mut self, d: fetch::Done) {
        if !d.file.item.chunks.is_empty() {
            self.open_files -= 1;
        }
        for w in d.warnings {
            self.warn(w);
        }
        let item = &d.file.item;
        match d.error {
            None => {
                self.report.files += 1;
                self.report.bytes += item.size;
                let (files, bytes) = (self.report.files, self.report.bytes);
                self.progress
                    .set(|| format!("{files} files, {}", crate::progress::size(bytes)));
            }
            Some(reason) => {
                let mut names = vec![item.path.clone()];
                if let Some(g) = item.hardlink_id.and_then(|h| self.hardlinks.remove(&h)) {
                    names.extend(g.others);
                }
                for n in names {
                    self.remove(&n);
                    self.error(format!("{}: not restored: {reason}", lossy(&n)));
                }
            }
        }
    }

    /// Removes a restored non-directory by its stored path (no symlink followed).
    fn remove(&self, path: &[u8]) {
        if let Some(comps) = safe_components(path) {
            let (name, parents) = comps.split_last().expect("non-empty");
            if let Ok(dir) = self.dirs.dir_fresh(parents) {
                let _ = rustix::fs::unlinkat(&dir, *name, AtFlags::empty());
            }
        }
    }

    /// xattrs, owner, mode, times on an open file or directory.
    fn apply_fd_metadata(&mut self, fd: std::os::fd::BorrowedFd<'_>, item: &Item) {
        for (k, v) in &item.xattrs {
            if !k.starts_with(b"user.") {
                continue;
            }
            if let Err(e) =
                rustix::fs::fsetxattr(fd, k.as_slice(), v, rustix::fs::XattrFlags::empty())
            {
                self.warn(format!(
                    "{}: cannot set xattr {}: {e}",
                    item.display_path(),
                    lossy(k)
                ));
            }
        }
        if self.is_root {
            let (uid, gid) = self.owner(item);
            if let Err(e) = rustix::fs::fchown(fd, Some(uid), Some(gid)) {
                self.warn(format!("{}: cannot set owner: {e}", item.display_path()));
            }
        }
        if let Err(e) = rustix::fs::fchmod(fd, Mode::from_raw_mode(item.mode & 0o7777)) {
            self.warn(format!("{}: cannot set mode: {e}", item.display_path()));
        }
        if let Err(e) = rustix::fs::futimens(fd, &timestamps(item.mtime)) {
            self.warn(format!("{}: cannot set times: {e}", item.display_path()));
        }
    }

    /// Owner and times of a symlink or special file, by name without following it (their
    /// mode is set at creation; Linux keeps no user xattrs on them).
    fn apply_at_metadata(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) {
        if self.is_root {
            let (uid, gid) = self.owner(item);
            if let Err(e) = rustix::fs::chownat(
                parent,
                name,
                Some(uid),
                Some(gid),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                self.warn(format!("{}: cannot set owner: {e}", item.display_path()));
            }
        }
        if let Err(e) = rustix::fs::utimensat(
            parent,
            name,
            &timestamps(item.mtime),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            self.warn(format!("{}: cannot set times: {e}", item.display_path()));
        }
    }

    fn restore_symlink(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(r) = Self::clear(parent, name) {
            return Outcome::Failed(r);
        }
        if let Err(e) = rustix::fs::symlinkat(item.link_target.as_slice(), parent, name) {
            return Outcome::Failed(e.to_string());
        }
        self.apply_at_metadata(parent, name, item);
        Outcome::Done
    }

    fn restore_special(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(r) = Self::clear(parent, name) {
            return Outcome::Failed(r);
        }
        let kind = match item.kind {
            ItemKind::Fifo => FileType::Fifo,
            _ if !self.is_root => {
                self.warn(format!(
                    "{}: device files can only be restored by root; skipped",
                    item.display_path()
                ));
                return Outcome::Done;
            }
            ItemKind::CharDev => FileType::CharacterDevice,
            _ => FileType::BlockDevice,
        };
        // Created owner-only; the final mode is set explicitly below (the process's umask is
        // never changed: it is shared with every thread, the lock refresher's too).
        if let Err(e) =
            rustix::fs::mknodat(parent, name, kind, Mode::from_raw_mode(0o600), item.rdev)
        {
            return Outcome::Failed(e.to_string());
        }
        self.apply_at_metadata(parent, name, item);
        if let Err(e) = chmod_nofollow(parent, name, item.mode & 0o7777) {
            self.warn(format!("{}: cannot set mode: {e}", item.display_path()));
        }
        Outcome::Done
    }

    fn finish_dirs(&mut self) {
        let mut dirs = std::mem::take(&mut self.dirs_to_finish);
        // Deepest first, so a read-only directory is closed only after its contents.
        dirs.sort_by(|a, b| b.path.cmp(&a.path));
        for item in &dirs {
            let Some(comps) = safe_components(&item.path) else {
                continue;
            };
            match self.dirs.dir(&comps, false) {
                Ok(fd) => {
                    let fd = fd.as_fd().try_clone_to_owned();
                    match fd {
                        Ok(fd) => self.apply_fd_metadata(fd.as_fd(), item),
                        Err(e) => {
                            self.warn(format!("{}: cannot set metadata: {e}", item.display_path()))
                        }
                    }
                }
                Err(reason) => self.warn(format!(
                    "{}: cannot set metadata: {reason}",
                    item.display_path()
                )),
            }
        }
    }
}

/// Restores the selected items of an archive into `opts.target`.
pub fn run(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
    opts: &RestoreOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<RestoreReport> {
    fs::create_dir_all(&opts.target).map_err(|e| Error::io(&opts.target, e))?;
    let root = rustix::fs::open(
        &opts.target,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(&opts.target, e.into()))?;
    let result = std::thread::scope(|scope| {
        let (batch_tx, batch_rx) = crossbeam_channel::bounded(2 * opts.threads);
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for _ in 0..opts.threads {
            let (batches, done) = (batch_rx.clone(), done_tx.clone());
            scope.spawn(move || fetch::worker(repo, batches, done));
        }
        drop((batch_rx, done_tx));
        let mut r = Restorer {
            index,
            dirs: DirWalker {
                root,
                stack: Vec::new(),
            },
            dirs_to_finish: Vec::new(),
            hardlinks: HashMap::new(),
            planner: Some(fetch::Planner::new(batch_tx)),
            done: done_rx,
            open_files: 0,
            names: Names::default(),
            is_root: rustix::process::geteuid().is_root(),
            report: RestoreReport::default(),
            progress,
        };
        let mut result = Ok(());
        for item in archive::items(repo, index, meta) {
            if let Err(e) = interrupt.check() {
                result = Err(e);
                break;
            }
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if selected(&item.path, &opts.filters) {
                r.restore(&item);
            }
        }
        // Let the workers finish what was handed out, then collect every file's outcome.
        if let Some(mut p) = r.planner.take() {
            p.flush();
        }
        while let Ok(d) = r.done.recv() {
            r.finish_file(d);
        }
        // Directories get their metadata last, even when the restore stopped early.
        r.finish_dirs();
        result.map(|()| r.report)
    });
    result
}

/// Sets the mode of `name` in `parent` without following a symlink: through an `O_PATH`
/// descriptor of the node itself (`fchmod` does not take one; `/proc/self/fd` does), so a
/// symlink swapped in after the node was made is refused, never followed.
fn chmod_nofollow(parent: &OwnedFd, name: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(std::io::Error::other("it was replaced by a symlink"));
    }
    rustix::fs::chmod(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        Mode::from_raw_mode(mode),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_paths_are_refused() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"../x",
            b"a/../../x",
            b"a//b",
            b"./a",
            b"a/.",
            b"a\0b",
        ] {
            assert!(
                safe_components(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(safe_components(b"a/b\xffc").unwrap().len(), 2);
    }

    #[test]
    fn filters_select_subtrees() {
        let f = vec![b"home/alice".to_vec()];
        assert!(selected(b"home/alice", &f));
        assert!(selected(b"home/alice/x", &f));
        assert!(!selected(b"home/alicex", &f));
        assert!(!selected(b"home", &f));
        assert!(selected(b"anything", &[]));
    }

    #[test]
    fn sparse_writes_leave_holes_and_right_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = File::create(&p).unwrap();
        let mut data = vec![0u8; 3 * 1024 * 1024];
        data[100] = 1;
        data[2 * 1024 * 1024 + 5] = 2;
        write_sparse(&f, 10, &data).unwrap();
        f.set_len(10 + data.len() as u64).unwrap();
        let back = fs::read(&p).unwrap();
        assert_eq!(&back[10..], &data[..]);
        use std::os::unix::fs::MetadataExt;
        assert!(fs::metadata(&p).unwrap().blocks() * 512 < 100_000);
    }

    #[test]
    fn walker_refuses_symlinked_parents() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("link")).unwrap();
        let root = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let mut w = DirWalker {
            root,
            stack: Vec::new(),
        };
        assert!(w.dir(&[b"real", b"new"], true).is_ok());
        assert!(dir.path().join("real/new").is_dir());
        let err = w.dir(&[b"link", b"etc"], true).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
    }
}
