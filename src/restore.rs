//! The restore engine behind `cairn extract`.
//!
//! Safety: nothing outside the target directory is ever written, linked or changed, whatever
//! the archive holds. An item path must be relative with no empty, `.` or `..` component;
//! every parent is checked to be a real directory (never a symlink — an archive could have
//! put one there) before anything is created in it; an existing entry at the final path is
//! unlinked (not followed) before it is replaced, and a directory is never replaced; hardlinks
//! only ever point at files this run has restored. Unsafe items are reported and skipped.
//!
//! Errors: a file whose chunks are missing or fail to verify, or that cannot be written, is
//! reported and removed (no wrong byte stays behind) and the restore goes on; those make the
//! command exit 2. Metadata that cannot be applied (owner, xattrs) are warnings (exit 1).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::archive::item::{Item, ItemKind};
use crate::archive::{self, ArchiveMeta};
use crate::blob::Verify;
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

fn os(b: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(b))
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

struct Restorer<'a> {
    repo: &'a Repository,
    index: &'a ChunkIndex,
    root: PathBuf,
    dirs_ok: HashSet<Vec<u8>>,
    dirs_to_finish: Vec<(PathBuf, Item)>,
    hardlinks: HashMap<[u8; 16], PathBuf>,
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

    /// Makes sure every parent of `comps` is a real directory inside the root, creating
    /// missing ones. Err with a reason when one is not (a symlink, a file).
    fn prepare_parents(&mut self, comps: &[&[u8]]) -> std::result::Result<(), String> {
        for i in 1..comps.len() {
            let prefix = comps[..i].join(&b'/');
            if self.dirs_ok.contains(&prefix) {
                continue;
            }
            let p = self.root.join(os(&prefix));
            match fs::symlink_metadata(&p) {
                Ok(md) if md.file_type().is_dir() => {}
                Ok(_) => {
                    return Err(format!(
                        "parent {} is not a directory (a symlink or file is in the way)",
                        String::from_utf8_lossy(&prefix)
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&p)
                        .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
                }
                Err(e) => return Err(format!("{}: {e}", p.display())),
            }
            self.dirs_ok.insert(prefix);
        }
        Ok(())
    }

    /// Removes a non-directory at `p` (never following it). Err if a directory is there.
    fn clear(&self, p: &Path) -> std::result::Result<(), String> {
        match fs::symlink_metadata(p) {
            Ok(md) if md.file_type().is_dir() => {
                Err(format!("{}: a directory is in the way", p.display()))
            }
            Ok(_) => {
                fs::remove_file(p).map_err(|e| format!("{}: cannot replace: {e}", p.display()))
            }
            Err(_) => Ok(()),
        }
    }

    fn restore(&mut self, item: &Item) -> Result<()> {
        let Some(comps) = safe_components(&item.path) else {
            self.warn(format!(
                "{}: unsafe path in archive; skipped",
                item.display_path()
            ));
            return Ok(());
        };
        if let Err(reason) = self.prepare_parents(&comps) {
            self.warn(format!("{}: {reason}; skipped", item.display_path()));
            return Ok(());
        }
        let p = self.root.join(os(&item.path));
        self.report.items += 1;
        let outcome = match item.kind {
            ItemKind::Dir => self.restore_dir(&p, item),
            ItemKind::File => self.restore_file(&p, item),
            ItemKind::Symlink => self.restore_symlink(&p, item),
            ItemKind::Fifo | ItemKind::CharDev | ItemKind::BlockDev => {
                self.restore_special(&p, item)
            }
        };
        if let Outcome::Failed(reason) = outcome {
            self.error(format!("{}: not restored: {reason}", item.display_path()));
        }
        Ok(())
    }

    fn restore_dir(&mut self, p: &Path, item: &Item) -> Outcome {
        match fs::symlink_metadata(p) {
            Ok(md) if md.file_type().is_dir() => {}
            Ok(_) => {
                if let Err(e) = fs::remove_file(p) {
                    return Outcome::Failed(format!("cannot replace: {e}"));
                }
                if let Err(e) = fs::DirBuilder::new().mode(0o700).create(p) {
                    return Outcome::Failed(e.to_string());
                }
            }
            Err(_) => {
                if let Err(e) = fs::DirBuilder::new().mode(0o700).create(p) {
                    return Outcome::Failed(e.to_string());
                }
            }
        }
        self.dirs_ok.insert(item.path.clone());
        // Mode, owner and times are applied after the contents, deepest first.
        self.dirs_to_finish.push((p.to_path_buf(), item.clone()));
        Outcome::Done
    }

    fn restore_file(&mut self, p: &Path, item: &Item) -> Outcome {
        if let Err(r) = self.clear(p) {
            return Outcome::Failed(r);
        }
        if let Some(first) = item
            .hardlink_id
            .and_then(|h| self.hardlinks.get(&h))
            .cloned()
        {
            if fs::hard_link(&first, p).is_ok() {
                self.report.files += 1;
                return Outcome::Done;
            }
        }
        let f = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
        {
            Ok(f) => f,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        match self.write_contents(&f, item) {
            Ok(()) => {}
            Err(reason) => {
                drop(f);
                let _ = fs::remove_file(p);
                return Outcome::Failed(reason);
            }
        }
        self.apply_file_metadata(&f, p, item);
        drop(f);
        if let Some(h) = item.hardlink_id {
            self.hardlinks.insert(h, p.to_path_buf());
        }
        self.report.files += 1;
        Outcome::Done
    }

    fn write_contents(&mut self, f: &File, item: &Item) -> std::result::Result<(), String> {
        let mut offset = 0u64;
        for c in &item.chunks {
            let data = self
                .repo
                .read_chunk(self.index, &c.id, Verify::Auth)
                .map_err(|e| e.to_string())?;
            if data.len() != c.len as usize {
                return Err(format!(
                    "chunk {} has {} bytes, the item says {}",
                    c.id,
                    data.len(),
                    c.len
                ));
            }
            write_sparse(f, offset, &data).map_err(|e| e.to_string())?;
            offset += data.len() as u64;
            self.report.bytes += data.len() as u64;
            self.progress.set(|| {
                format!(
                    "{} files, {}",
                    self.report.files,
                    crate::commands::output::size(self.report.bytes)
                )
            });
        }
        if offset != item.size {
            return Err(format!(
                "chunks hold {offset} bytes, the item says {}",
                item.size
            ));
        }
        f.set_len(offset).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn owner(&mut self, item: &Item) -> (u32, u32) {
        let uid = self.names.uid_of(&item.user).unwrap_or(item.uid);
        let gid = self.names.gid_of(&item.group).unwrap_or(item.gid);
        (uid, gid)
    }

    fn apply_file_metadata(&mut self, f: &File, p: &Path, item: &Item) {
        use xattr::FileExt as _;
        for (k, v) in &item.xattrs {
            if let Err(e) = f.set_xattr(OsStr::from_bytes(k), v) {
                self.warn(format!(
                    "{}: cannot set xattr {}: {e}",
                    p.display(),
                    String::from_utf8_lossy(k)
                ));
            }
        }
        if self.is_root {
            let (uid, gid) = self.owner(item);
            if let Err(e) = std::os::unix::fs::fchown(f, Some(uid), Some(gid)) {
                self.warn(format!("{}: cannot set owner: {e}", p.display()));
            }
        }
        if let Err(e) = f.set_permissions(fs::Permissions::from_mode(item.mode & 0o7777)) {
            self.warn(format!("{}: cannot set mode: {e}", p.display()));
        }
        let times = fs::FileTimes::new()
            .set_modified(item.mtime.to_system())
            .set_accessed(item.mtime.to_system());
        if let Err(e) = f.set_times(times) {
            self.warn(format!("{}: cannot set times: {e}", p.display()));
        }
    }

    /// Owner, mode, times by path, never following a symlink (for dirs, symlinks, specials).
    fn apply_path_metadata(&mut self, p: &Path, item: &Item) {
        if item.kind != ItemKind::Symlink {
            for (k, v) in &item.xattrs {
                if let Err(e) = xattr::set(p, OsStr::from_bytes(k), v) {
                    self.warn(format!(
                        "{}: cannot set xattr {}: {e}",
                        p.display(),
                        String::from_utf8_lossy(k)
                    ));
                }
            }
        }
        if self.is_root {
            let (uid, gid) = self.owner(item);
            if let Err(e) = std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
                self.warn(format!("{}: cannot set owner: {e}", p.display()));
            }
        }
        if item.kind != ItemKind::Symlink {
            if let Err(e) = fs::set_permissions(p, fs::Permissions::from_mode(item.mode & 0o7777)) {
                self.warn(format!("{}: cannot set mode: {e}", p.display()));
            }
        }
        let t = nix::sys::time::TimeSpec::new(item.mtime.secs, i64::from(item.mtime.nanos));
        if let Err(e) = nix::sys::stat::utimensat(
            None,
            p,
            &t,
            &t,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        ) {
            self.warn(format!("{}: cannot set times: {e}", p.display()));
        }
    }

    fn restore_symlink(&mut self, p: &Path, item: &Item) -> Outcome {
        if let Err(r) = self.clear(p) {
            return Outcome::Failed(r);
        }
        if let Err(e) = std::os::unix::fs::symlink(os(&item.link_target), p) {
            return Outcome::Failed(e.to_string());
        }
        self.apply_path_metadata(p, item);
        Outcome::Done
    }

    fn restore_special(&mut self, p: &Path, item: &Item) -> Outcome {
        use nix::sys::stat::{Mode, SFlag};
        if let Err(r) = self.clear(p) {
            return Outcome::Failed(r);
        }
        let mode = Mode::from_bits_truncate((item.mode & 0o777) as nix::libc::mode_t);
        let made = match item.kind {
            ItemKind::Fifo => nix::unistd::mkfifo(p, mode),
            _ if !self.is_root => {
                self.warn(format!(
                    "{}: device files can only be restored by root; skipped",
                    item.display_path()
                ));
                return Outcome::Done;
            }
            ItemKind::CharDev => {
                nix::sys::stat::mknod(p, SFlag::S_IFCHR, mode, item.rdev as nix::libc::dev_t)
            }
            _ => nix::sys::stat::mknod(p, SFlag::S_IFBLK, mode, item.rdev as nix::libc::dev_t),
        };
        if let Err(e) = made {
            return Outcome::Failed(e.to_string());
        }
        self.apply_path_metadata(p, item);
        Outcome::Done
    }

    fn finish_dirs(&mut self) {
        let dirs = std::mem::take(&mut self.dirs_to_finish);
        for (p, item) in dirs.iter().rev() {
            self.apply_path_metadata(p, item);
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
    let mut r = Restorer {
        repo,
        index,
        root: opts.target.clone(),
        dirs_ok: HashSet::new(),
        dirs_to_finish: Vec::new(),
        hardlinks: HashMap::new(),
        names: Names::default(),
        is_root: nix::unistd::geteuid().is_root(),
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
        if !selected(&item.path, &opts.filters) {
            continue;
        }
        r.restore(&item)?;
    }
    // Directories get their metadata even when the restore stopped early.
    r.finish_dirs();
    result.map(|()| r.report)
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
}
