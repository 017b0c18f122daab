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
mod metadata;
mod target;

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::archive::item::{Item, ItemKind};
use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::fsmeta::Names;
use crate::index::ChunkIndex;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::signals::Interrupt;
pub use target::safe_components;
use target::{chmod_nofollow, clear, write_sparse, DirWalker};

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

/// Whether `path` is selected by `filters` (a filter selects itself and what is below it).
pub fn selected(path: &[u8], filters: &[Vec<u8>]) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            path == f.as_slice() || (path.starts_with(f) && path.get(f.len()) == Some(&b'/'))
        })
}

/// Files open for writing at once (each holds a descriptor).
const MAX_OPEN_FILES: usize = 256;

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
        if let Err(r) = clear(parent, name) {
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

    fn restore_symlink(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(r) = clear(parent, name) {
            return Outcome::Failed(r);
        }
        if let Err(e) = rustix::fs::symlinkat(item.link_target.as_slice(), parent, name) {
            return Outcome::Failed(e.to_string());
        }
        self.apply_at_metadata(parent, name, item);
        Outcome::Done
    }

    fn restore_special(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(r) = clear(parent, name) {
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
