//! The tree walk of `create`, by descriptors.
//!
//! Another local user may own part of the tree a backup reads, and may swap a directory for a
//! symlink (to a directory only root reads) at any moment. A walk by path would follow that
//! symlink when it lists or opens what is inside, and store root's files under the other
//! user's path. So every directory is opened relative to its parent's descriptor with
//! `O_DIRECTORY|O_NOFOLLOW`, and its (device, inode) checked against what the listing's stat
//! said; every entry is stat'ed, and every file opened ([`Entry::open`]), relative to the
//! descriptor of the directory it was listed in, without following a symlink. What was
//! swapped is a warning ("changed during backup") and nothing of what was swapped in is read.
//! Only the roots the user names are resolved as paths.
//!
//! The order is the one a backup needs to be reproducible: depth first, a directory before
//! what it holds, the entries of a directory sorted by name (as bytes). One descriptor stays
//! open per level of depth; [`raise_open_files_limit`] lifts the soft limit so that deep trees
//! fit.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use rustix::io::Errno;

use crate::source::fsmeta::Meta;
use crate::util::log::Warning;

/// Where an entry is: a root named by the user, or a name in an opened directory.
#[derive(Clone, Debug)]
enum At {
    Root(PathBuf),
    In { dir: Arc<File>, name: OsString },
}

/// An entry of the walk.
#[derive(Debug)]
pub struct Entry {
    /// The path as the user would write it (the root, then names): for messages, exclude
    /// patterns and the stored path; never used to open anything below a root.
    pub path: PathBuf,
    /// Its stat, taken without following a symlink. For a directory, from the opened
    /// directory itself.
    pub meta: Meta,
    /// A directory's own descriptor, checked to be the directory listed (`None` when it could
    /// not be opened: the walk reports why right after the entry).
    pub dir: Option<Arc<File>>,
    at: At,
    pub depth: usize,
}

/// Why something could not be walked: the path, and the reason.
#[derive(Debug)]
pub struct WalkError {
    pub path: PathBuf,
    pub reason: String,
    /// What it is, for programs (see [`Warning`]), and the system's error number.
    pub kind: &'static str,
    pub errno: Option<i32>,
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl WalkError {
    /// The warning a backup says for it.
    pub fn warning(&self) -> Warning {
        Warning {
            errno: self.errno,
            ..Warning::about(&self.path, self.kind, &self.reason)
        }
    }
}

type Found = std::result::Result<Entry, WalkError>;

/// `path` could not be walked: `e` says why.
fn walk_error(path: &Path, e: impl Into<std::io::Error>) -> WalkError {
    let e = e.into();
    WalkError {
        path: path.to_path_buf(),
        reason: e.to_string(),
        kind: match e.kind() {
            std::io::ErrorKind::NotFound => "vanished",
            _ => "unreadable",
        },
        errno: e.raw_os_error(),
    }
}

/// `path` was swapped for something else between listing and opening.
fn swapped(path: &Path) -> WalkError {
    WalkError {
        path: path.to_path_buf(),
        reason: SWAPPED.to_string(),
        kind: "replaced",
        errno: None,
    }
}

const SWAPPED: &str = "changed during backup (replaced between listing and opening); skipped";

const READ_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::CLOEXEC);

/// `openat` with `O_NOATIME` where the caller may use it (the owner, or root), without
/// where not (`EPERM`).
fn open_at(dir: impl AsFd, name: &OsStr, flags: OFlags) -> std::io::Result<File> {
    let fd: OwnedFd = match rustix::fs::openat(&dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::openat(&dir, name, flags, Mode::empty())?,
        r => r?,
    };
    Ok(File::from(fd))
}

impl Entry {
    /// Opens the entry for reading: relative to its directory's descriptor, never following a
    /// symlink, never blocking on a fifo put in its place. The caller checks that what it
    /// opened is what was listed ([`Meta::identity`]).
    pub fn open(&self) -> std::io::Result<File> {
        let flags = READ_FLAGS | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        match &self.at {
            At::Root(path) => open_at(rustix::fs::CWD, path.as_os_str(), flags),
            At::In { dir, name } => open_at(&**dir, name, flags),
        }
    }

    /// A symlink's target.
    pub fn read_link(&self) -> std::io::Result<Vec<u8>> {
        let target = match &self.at {
            At::Root(path) => rustix::fs::readlinkat(rustix::fs::CWD, path.as_os_str(), vec![]),
            At::In { dir, name } => rustix::fs::readlinkat(&**dir, name.as_os_str(), vec![]),
        }?;
        Ok(target.into_bytes())
    }

    /// A path that names this entry through its directory's descriptor
    /// (`/proc/self/fd/N/name`), for the calls that take only a path and do not follow a
    /// final symlink (`llistxattr`, `lgetxattr`); the plain path where `/proc` is missing.
    pub fn fd_path(&self) -> PathBuf {
        match &self.at {
            At::Root(path) => path.clone(),
            At::In { dir, name } => {
                let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
                if via.is_dir() {
                    via.join(name)
                } else {
                    self.path.clone()
                }
            }
        }
    }

    /// The entry `name` inside this directory, stat'ed through its descriptor (`None` when
    /// this is not an opened directory or there is no such entry).
    /// The entries of this directory named in `tags` (`--exclude-if-present`), whatever
    /// their type; none for anything but an opened directory.
    pub fn tags(&self, tags: &[String]) -> Vec<Entry> {
        if self.dir.is_none() {
            return Vec::new();
        }
        tags.iter().filter_map(|t| self.child(t)).collect()
    }

    pub fn child(&self, name: &str) -> Option<Entry> {
        let dir = self.dir.as_ref()?;
        let st = rustix::fs::statat(&**dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some(Entry {
            path: self.path.join(name),
            meta: Meta::of_stat(&st),
            dir: None,
            at: At::In {
                dir: dir.clone(),
                name: name.into(),
            },
            depth: self.depth + 1,
        })
    }
}

/// An opened directory whose entries are being walked.
struct Level {
    dir: Arc<File>,
    path: PathBuf,
    depth: usize,
    names: std::vec::IntoIter<OsString>,
}

/// The walk of one root.
pub struct Walk {
    root: Option<PathBuf>,
    one_file_system: bool,
    root_dev: u64,
    stack: Vec<Level>,
    /// The directory last returned, entered on the next call unless skipped.
    enter: Option<(Arc<File>, PathBuf, usize, u64)>,
    /// Reported on the next call: why the directory last returned could not be opened.
    pending: Option<WalkError>,
}

impl Walk {
    pub fn new(root: &Path, one_file_system: bool) -> Self {
        Self {
            root: Some(root.to_path_buf()),
            one_file_system,
            root_dev: 0,
            stack: Vec::new(),
            enter: None,
            pending: None,
        }
    }

    /// Does not enter the directory returned last.
    pub fn skip_current_dir(&mut self) {
        self.enter = None;
        self.pending = None;
    }

    fn root_entry(&mut self, path: PathBuf) -> Found {
        let st = rustix::fs::statat(rustix::fs::CWD, &path, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| walk_error(&path, e))?;
        let meta = Meta::of_stat(&st);
        self.root_dev = meta.dev;
        let at = At::Root(path.clone());
        self.found(path, meta, at, 0)
    }

    /// An entry whose stat says `listed`: a directory is opened (and checked to be the one
    /// listed) before it is returned, so that everything read of it comes from the directory
    /// that was listed.
    fn found(&mut self, path: PathBuf, listed: Meta, at: At, depth: usize) -> Found {
        if !listed.is_dir() {
            return Ok(Entry {
                path,
                meta: listed,
                dir: None,
                at,
                depth,
            });
        }
        let flags = READ_FLAGS | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let opened = match &at {
            At::Root(p) => open_at(rustix::fs::CWD, p.as_os_str(), flags),
            At::In { dir, name } => open_at(&**dir, name, flags),
        };
        let dir = match opened {
            Ok(d) => d,
            Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::LOOP | Errno::NOTDIR)) => {
                // A symlink or a file where the directory was listed.
                return Err(swapped(&path));
            }
            Err(e) if Errno::from_io_error(&e) == Some(Errno::NOENT) => {
                return Err(walk_error(&path, e))
            }
            Err(e) => {
                // Unreadable (permissions): the directory is stored as stat saw it, and the
                // reason follows.
                self.pending = Some(walk_error(&path, e));
                return Ok(Entry {
                    path,
                    meta: listed,
                    dir: None,
                    at,
                    depth,
                });
            }
        };
        let meta = match dir.metadata() {
            Ok(m) => Meta::of(&m),
            Err(e) => return Err(walk_error(&path, e)),
        };
        if meta.identity() != listed.identity() {
            return Err(swapped(&path));
        }
        let dir = Arc::new(dir);
        let crosses = self.one_file_system && depth > 0 && meta.dev != self.root_dev;
        if !crosses {
            self.enter = Some((dir.clone(), path.clone(), depth, meta.dev));
        }
        Ok(Entry {
            path,
            meta,
            dir: Some(dir),
            at,
            depth,
        })
    }

    /// Reads the names in a directory, sorted.
    fn list(dir: &File) -> std::io::Result<Vec<OsString>> {
        let mut buf = Vec::with_capacity(32 * 1024);
        let mut raw = rustix::fs::RawDir::new(dir, buf.spare_capacity_mut());
        let mut names = Vec::new();
        while let Some(entry) = raw.next() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(names)
    }
}

impl Iterator for Walk {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        if let Some((dir, path, depth, _)) = self.enter.take() {
            match Self::list(&dir) {
                Ok(names) => self.stack.push(Level {
                    dir,
                    path,
                    depth: depth + 1,
                    names: names.into_iter(),
                }),
                Err(e) => return Some(Err(walk_error(&path, e))),
            }
        }
        if let Some(root) = self.root.take() {
            return Some(self.root_entry(root));
        }
        loop {
            let level = self.stack.last_mut()?;
            let Some(name) = level.names.next() else {
                self.stack.pop();
                continue;
            };
            let path = level.path.join(&name);
            let (dir, depth) = (level.dir.clone(), level.depth);
            let listed =
                match rustix::fs::statat(&*dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Meta::of_stat(&st),
                    Err(e) => return Some(Err(walk_error(&path, e))),
                };
            return Some(self.found(path, listed, At::In { dir, name }, depth));
        }
    }
}

/// Lifts the soft limit of open files to the hard one (the walk keeps a descriptor per level
/// of depth); a failure leaves the limit as it was, and a tree deeper than it allows is
/// reported directory by directory ("too many open files").
pub fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(root: &Path) -> Vec<String> {
        Walk::new(root, false)
            .map(|e| {
                let e = e.unwrap();
                e.path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn depth_first_sorted_by_bytes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["b", "b/z", "a", "B"] {
            std::fs::create_dir(r.join(d)).unwrap();
        }
        for f in ["b/z/f", "b/y", "a/x", "c"] {
            std::fs::write(r.join(f), b"x").unwrap();
        }
        std::os::unix::fs::symlink("b", r.join("ln")).unwrap();
        assert_eq!(
            names(r),
            ["", "B", "a", "a/x", "b", "b/y", "b/z", "b/z/f", "c", "ln"]
        );
    }

    #[test]
    fn a_symlinked_directory_is_an_entry_not_a_walk() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("real")).unwrap();
        std::fs::write(t.path().join("real/secret"), b"x").unwrap();
        std::os::unix::fs::symlink("real", t.path().join("ln")).unwrap();
        let mut w = Walk::new(&t.path().join("ln"), false);
        let e = w.next().unwrap().unwrap();
        assert!(e.meta.is_symlink());
        assert!(w.next().is_none());
    }

    #[test]
    fn skip_current_dir_skips_its_contents() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f"), b"x").unwrap();
        std::fs::write(t.path().join("c"), b"x").unwrap();
        let mut w = Walk::new(t.path(), false);
        let mut seen = Vec::new();
        while let Some(e) = w.next() {
            let e = e.unwrap();
            let rel = e.path.strip_prefix(t.path()).unwrap().to_path_buf();
            if rel == Path::new("a/b") {
                w.skip_current_dir();
            }
            seen.push(rel.to_string_lossy().into_owned());
        }
        assert_eq!(seen, ["", "a", "a/b", "c"]);
    }

    /// The walk stats `d` (listing), then opens it: a swap in between is the pause.
    fn swap_between_stat_and_open(swap: impl FnOnce(&Path)) -> WalkError {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("r");
        std::fs::create_dir_all(r.join("d")).unwrap();
        std::fs::create_dir(t.path().join("other")).unwrap();
        std::fs::write(t.path().join("other/secret"), b"root only").unwrap();
        let parent = File::open(&r).unwrap();
        let listed =
            Meta::of_stat(&rustix::fs::statat(&parent, "d", AtFlags::SYMLINK_NOFOLLOW).unwrap());
        swap(t.path());
        let mut w = Walk::new(&r, false);
        let at = At::In {
            dir: Arc::new(parent),
            name: "d".into(),
        };
        let err = w.found(r.join("d"), listed, at, 1).unwrap_err();
        assert!(
            w.enter.is_none(),
            "the swapped-in directory would be walked"
        );
        err
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_listing_is_refused() {
        let err = swap_between_stat_and_open(|t| {
            std::fs::remove_dir(t.join("r/d")).unwrap();
            std::os::unix::fs::symlink(t.join("other"), t.join("r/d")).unwrap();
        });
        assert!(err.reason.contains("changed during backup"), "{err}");
    }

    #[test]
    fn a_directory_replaced_by_another_directory_is_refused() {
        let err = swap_between_stat_and_open(|t| {
            std::fs::rename(t.join("r/d"), t.join("old")).unwrap();
            std::fs::rename(t.join("other"), t.join("r/d")).unwrap();
        });
        assert!(err.reason.contains("changed during backup"), "{err}");
    }
}
