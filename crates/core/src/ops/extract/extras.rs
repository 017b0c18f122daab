//! `extract --delete`: what the target holds under the restored directories that the archive
//! does not, found after the restore and removed (or, in a dry run, named).
//!
//! "The restored directories" are the directories the selection restored, and the target
//! itself when no path was given. A name the archive holds is never deleted, even when
//! `--exclude` left it out of this restore: only what the archive does not hold at all goes.
//!
//! The archive holds a path's parents too, even when it has no item for them (`create
//! /home/alice` stores `home/alice/…` and no `home`): they are never extras.
//!
//! Removal never follows a symlink: each directory is opened from its parent's descriptor
//! with `O_NOFOLLOW`, and a symlink is removed as the link it is. It never crosses into
//! another file system: an extra that is a mount point, or holds one, is left there and
//! named in a warning. It never removes cairn's own directories ([`crate::ops::own_dirs`]:
//! the repository being read, the cache), found by device and inode wherever they are
//! below: `cd ~ && cairn extract home --target ~ --delete` once deleted the repository in
//! `~/backup-repo` (issue 44); it is left there with the directories that hold it, and said
//! in a note. A dry run walks the same way and says the same.

use std::collections::HashSet;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::target::{safe_components, DirWalker, Node};
use super::{lossy, Restorer};
use crate::ops::own_dirs::OwnDir;
use crate::repo::signals::Interrupt;

/// Directories deeper than this below an extra are not removed (the removal says so).
const MAX_DEPTH: usize = 4096;

/// What the archive holds, and which directories of the target the restore owns.
#[derive(Default)]
pub struct Extras {
    /// Every path the archive holds, as named in the target (after `--strip-components`).
    held: HashSet<Vec<u8>>,
    /// The restored directories, as named in the target; the empty path is the target.
    dirs: Vec<Vec<u8>>,
}

/// Something in the target that the archive does not hold.
pub struct Extra {
    pub path: Vec<u8>,
}

impl Extras {
    /// `whole`: no path was given, so the target itself is a restored directory.
    pub fn new(whole: bool) -> Self {
        Self {
            held: HashSet::new(),
            dirs: if whole { vec![Vec::new()] } else { Vec::new() },
        }
    }

    /// A path the archive holds, selected or not, and its parents.
    pub fn held(&mut self, name: &[u8]) {
        if !self.held.insert(name.to_vec()) {
            return;
        }
        for (i, b) in name.iter().enumerate() {
            if *b == b'/' && i > 0 {
                self.held.insert(name[..i].to_vec());
            }
        }
    }

    /// A directory this restore made or restored.
    pub fn restored_dir(&mut self, name: &[u8]) {
        self.dirs.push(name.to_vec());
    }

    /// What the restored directories hold beyond the archive, shallowest first; an extra
    /// directory is named once, not with what is below it.
    pub fn find(&self, walker: &DirWalker) -> Vec<Extra> {
        let mut found = Vec::new();
        for dir in &self.dirs {
            let fd = if dir.is_empty() {
                rustix::io::dup(&walker.root).ok()
            } else {
                safe_components(dir).and_then(|comps| walker.dir_fresh(&comps).ok())
            };
            let Some(fd) = fd else { continue };
            for name in entries(&fd).unwrap_or_default() {
                let path = if dir.is_empty() {
                    name
                } else {
                    [dir.as_slice(), b"/", name.as_slice()].concat()
                };
                if !self.held.contains(&path) {
                    found.push(Extra { path });
                }
            }
        }
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found
    }
}

/// The names in a directory (without `.` and `..`).
fn entries(dir: &OwnedFd) -> rustix::io::Result<Vec<Vec<u8>>> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    Ok(out)
}

/// What removing a tree came to, entry by entry: the largest subtrees that went (or, in a
/// dry run, would go) whole, and what stays, with why.
#[derive(Debug, PartialEq, Eq)]
pub enum Swept {
    Gone {
        path: Vec<u8>,
        is_dir: bool,
    },
    /// Left there: one of cairn's own directories (`note`), or a mount point, or something
    /// that could not be removed (a warning).
    Kept {
        path: Vec<u8>,
        why: String,
        note: bool,
    },
}

/// Removes `path` (a stored path, relative to the target) with everything below it, never
/// following a symlink, never crossing into another file system, never touching cairn's own
/// directories (nor, so, the directories that hold them); with `dry`, only says what it would
/// do. A directory `path` that does not exist comes to nothing.
pub fn sweep(walker: &DirWalker, path: &[u8], dry: bool) -> Result<Vec<Swept>, String> {
    let comps = safe_components(path).ok_or("unsafe path")?;
    let (name, _) = comps.split_last().ok_or("unsafe path")?;
    let parent = walker.parent_fresh(&comps)?;
    // The target's mount, not the parent's: a restored directory that is itself a mount point
    // (a bind mount of another tree, a tmpfs) is not swept into (issue 44).
    let top = Node::open(&walker.root).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut at = Sweep {
        own: &walker.own,
        top,
        dry,
        out: &mut out,
    };
    at.tree(&parent, name, path, 0);
    Ok(out)
}

impl Restorer<'_> {
    /// `--delete`: removes what the restored directories hold beyond the archive, until an
    /// interrupt. cairn's own directories stay, with the directories that hold them (a note
    /// says so); what cannot be removed is a warning.
    pub(super) fn delete_extras(&mut self, extras: &Extras, interrupt: &Interrupt) {
        for extra in extras.find(&self.dirs) {
            if interrupt.raised() {
                self.warn("interrupted: not every extra was deleted (--delete)".to_string());
                return;
            }
            let swept = match sweep(&self.dirs, &extra.path, false) {
                Ok(s) => s,
                Err(e) => {
                    let msg = format!("{}: cannot delete: {e}", lossy(&extra.path));
                    self.warn_at(&extra.path, "not-deleted", msg);
                    continue;
                }
            };
            for s in swept {
                match s {
                    Swept::Gone { .. } => self.report.deleted += 1,
                    Swept::Kept {
                        path,
                        why,
                        note: true,
                    } => {
                        self.progress
                            .println(&format!("note: kept {}: {why}", lossy(&path)));
                        self.report.protected += 1;
                    }
                    Swept::Kept { path, why, .. } => {
                        let msg = format!("{}: cannot delete: {why}", lossy(&path));
                        self.warn_at(&path, "not-deleted", msg)
                    }
                }
            }
        }
    }
}

struct Sweep<'a> {
    own: &'a [OwnDir],
    /// The target: nothing on another file system or mount than its (a bind mount of the same
    /// file system included) is touched.
    top: Node,
    dry: bool,
    out: &'a mut Vec<Swept>,
}

impl Sweep<'_> {
    fn kept(&mut self, path: &[u8], why: impl Into<String>, note: bool) {
        self.out.push(Swept::Kept {
            path: path.to_vec(),
            why: why.into(),
            note,
        });
    }

    /// Whether `node` may be swept: on the starting mount, not one of cairn's own
    /// directories (said when it is not).
    fn may(&mut self, path: &[u8], node: &Node) -> bool {
        if self.top.other_mount(node) {
            self.kept(path, MOUNT_POINT, false);
            return false;
        }
        if node.kind == FileType::Directory {
            if let Some(own) = OwnDir::by_identity(self.own, (node.dev, node.ino)) {
                self.kept(path, own.what, true);
                return false;
            }
        }
        true
    }

    /// `name` in `parent` (shown as `path`) and what is below it; whether it went whole.
    fn tree(&mut self, parent: &OwnedFd, name: &[u8], path: &[u8], depth: usize) -> bool {
        let node = match Node::at(parent, name) {
            Ok(n) => n,
            Err(Errno::NOENT) => return true,
            Err(e) => {
                self.kept(path, e.to_string(), false);
                return false;
            }
        };
        if !self.may(path, &node) {
            return false;
        }
        // A dry run says what the removal would meet: no permission to remove from the
        // directory, or an entry (or the directory) immutable or append-only.
        if self.dry {
            if let Err(why) = removable(parent, name, &node) {
                self.kept(path, why, false);
                return false;
            }
        }
        if node.kind != FileType::Directory {
            return self.leaf(parent, name, path);
        }
        if depth >= MAX_DEPTH {
            self.kept(path, "too deep to remove", false);
            return false;
        }
        let Some((dir, children)) = self.open_dir(parent, name, path) else {
            return false;
        };
        let mark = self.out.len();
        let mut whole = true;
        for child in children {
            let below = [path, b"/", child.as_slice()].concat();
            whole &= self.tree(&dir, &child, &below, depth + 1);
        }
        if !whole {
            return false;
        }
        // Everything below went: the directory is named alone.
        self.out.truncate(mark);
        if !self.dry {
            if let Err(e) = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
                self.kept(path, e.to_string(), false);
                return false;
            }
        }
        self.out.push(Swept::Gone {
            path: path.to_vec(),
            is_dir: true,
        });
        true
    }

    /// A non-directory `name` in `parent` (shown as `path`), removed; whether it went.
    fn leaf(&mut self, parent: &OwnedFd, name: &[u8], path: &[u8]) -> bool {
        let gone = self.dry || rustix::fs::unlinkat(parent, name, AtFlags::empty()).is_ok();
        if gone {
            self.out.push(Swept::Gone {
                path: path.to_vec(),
                is_dir: false,
            });
        } else {
            self.kept(path, "cannot be removed", false);
        }
        gone
    }

    /// The directory `name` in `parent` (shown as `path`), opened without following a
    /// symlink, and its entries; `None`, and why it stays, when it cannot be opened or read,
    /// or what opened may not be swept.
    fn open_dir(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        path: &[u8],
    ) -> Option<(OwnedFd, Vec<Vec<u8>>)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(d) => d,
            Err(e) => {
                self.kept(path, e.to_string(), false);
                return None;
            }
        };
        // The directory opened, not the one looked at a moment before (a swap in between).
        match Node::open(&dir) {
            Ok(opened) if !self.may(path, &opened) => return None,
            Ok(_) => {}
            Err(e) => {
                self.kept(path, e.to_string(), false);
                return None;
            }
        }
        match entries(&dir) {
            Ok(children) => Some((dir, children)),
            Err(e) => {
                self.kept(path, e.to_string(), false);
                None
            }
        }
    }
}

/// Whether `name` in `parent` (a `node`) can be unlinked, as far as can be told without
/// trying: `parent` writable by this process and not immutable or append-only, nor `name`
/// (a regular file or directory; nothing else is opened, not to run a device's driver).
fn removable(parent: &OwnedFd, name: &[u8], node: &Node) -> Result<(), String> {
    let need = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
    if let Err(e) = rustix::fs::accessat(parent, ".", need, AtFlags::EACCESS) {
        return Err(format!("cannot be removed: {e}"));
    }
    let pinned = |fd: &OwnedFd| {
        rustix::fs::ioctl_getflags(fd)
            .is_ok_and(|f| f.intersects(rustix::fs::IFlags::IMMUTABLE | rustix::fs::IFlags::APPEND))
    };
    let own = match node.kind {
        FileType::RegularFile | FileType::Directory => rustix::fs::openat(
            parent,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok(),
        _ => None,
    };
    if pinned(parent) || own.as_ref().is_some_and(pinned) {
        return Err("cannot be removed: immutable or append-only".into());
    }
    Ok(())
}

const MOUNT_POINT: &str = "it is, or holds, a mount point of another file system; left there";

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn walker(root: &std::path::Path) -> DirWalker {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        DirWalker::new(fd, Vec::new(), false)
    }

    #[test]
    fn finds_and_removes_only_what_the_archive_does_not_hold() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("precious"), b"x").unwrap();
        fs::create_dir_all(t.path().join("a/old/deep")).unwrap();
        fs::write(t.path().join("a/old/deep/f"), b"1").unwrap();
        fs::write(t.path().join("a/kept"), b"2").unwrap();
        fs::write(t.path().join("a/gone"), b"3").unwrap();
        fs::write(t.path().join("top"), b"4").unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("a/link")).unwrap();
        let mut extras = Extras::new(false);
        extras.restored_dir(b"a");
        extras.held(b"a/kept");
        let w = walker(t.path());
        let found = extras.find(&w);
        let names: Vec<_> = found.iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            names,
            vec![b"a/gone".to_vec(), b"a/link".to_vec(), b"a/old".to_vec()]
        );
        let swept: Vec<Swept> = found
            .iter()
            .flat_map(|e| sweep(&w, &e.path, false).unwrap())
            .collect();
        assert_eq!(
            swept,
            vec![
                Swept::Gone {
                    path: b"a/gone".to_vec(),
                    is_dir: false
                },
                Swept::Gone {
                    path: b"a/link".to_vec(),
                    is_dir: false
                },
                Swept::Gone {
                    path: b"a/old".to_vec(),
                    is_dir: true
                }
            ]
        );
        assert!(t.path().join("a/kept").exists());
        assert!(t.path().join("top").exists(), "outside the restored dirs");
        assert!(
            outside.path().join("precious").exists(),
            "a link is not followed"
        );
        assert!(!t.path().join("a/old").exists());
    }

    #[test]
    fn removal_never_crosses_into_another_file_system() {
        let t = tempfile::tempdir().unwrap();
        let mnt = t.path().join("a/old/mnt");
        fs::create_dir_all(&mnt).unwrap();
        fs::write(t.path().join("a/old/before"), b"").unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (not root?)");
            return;
        }
        fs::write(mnt.join("precious"), b"on another file system").unwrap();
        let mut extras = Extras::new(false);
        extras.restored_dir(b"a");
        let w = walker(t.path());
        let found = extras.find(&w);
        assert_eq!(found.len(), 1);
        let swept = sweep(&w, &found[0].path, false).unwrap();
        let kept = fs::read(mnt.join("precious"));
        let _ = std::process::Command::new("umount").arg(&mnt).status();
        assert_eq!(swept.len(), 2, "{swept:?}");
        assert!(
            swept
                .iter()
                .any(|s| matches!(s, Swept::Gone { path, .. } if path == b"a/old/before")),
            "{swept:?}"
        );
        assert!(
            swept.iter().any(
                |s| matches!(s, Swept::Kept { why, note: false, .. } if why.contains("mount point"))
            ),
            "{swept:?}"
        );
        assert_eq!(kept.unwrap(), b"on another file system");
    }

    #[test]
    fn parents_without_items_are_held() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("home/alice")).unwrap();
        fs::write(t.path().join("home/alice/f"), b"").unwrap();
        let mut extras = Extras::new(true);
        // `create x /home/alice`: no item for `home`.
        extras.held(b"home/alice");
        extras.held(b"home/alice/f");
        extras.restored_dir(b"home/alice");
        assert!(extras.find(&walker(t.path())).is_empty());
    }

    #[test]
    fn the_whole_target_is_restored_when_no_path_is_given() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("x"), b"").unwrap();
        fs::write(t.path().join("y"), b"").unwrap();
        let mut extras = Extras::new(true);
        extras.held(b"x");
        let found = extras.find(&walker(t.path()));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, b"y");
    }

    /// `--delete` never removes cairn's own directories, nor the directories that hold them;
    /// a dry run says the same as the run does.
    #[test]
    fn own_directories_and_what_holds_them_are_kept() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("backups/repo/packs")).unwrap();
        fs::write(t.path().join("backups/repo/config"), b"c").unwrap();
        fs::write(t.path().join("backups/old.tar"), b"x").unwrap();
        fs::create_dir_all(t.path().join("backups/older")).unwrap();
        fs::write(t.path().join("backups/older/f"), b"y").unwrap();
        let own = crate::ops::own_dirs::OwnDir::dir(
            &t.path().join("backups/repo"),
            "it is the repository being read",
        )
        .unwrap();
        let fd =
            rustix::fs::open(t.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let w = DirWalker::new(fd, vec![own], false);
        let dry = sweep(&w, b"backups", true).unwrap();
        let gone = |p: &[u8], is_dir| Swept::Gone {
            path: p.to_vec(),
            is_dir,
        };
        let expected = vec![
            gone(b"backups/old.tar", false),
            gone(b"backups/older", true),
            Swept::Kept {
                path: b"backups/repo".to_vec(),
                why: "it is the repository being read".into(),
                note: true,
            },
        ];
        let sorted = |mut v: Vec<Swept>| {
            v.sort_by_key(|s| match s {
                Swept::Gone { path, .. } | Swept::Kept { path, .. } => path.clone(),
            });
            v
        };
        assert_eq!(sorted(dry), expected);
        assert!(
            t.path().join("backups/older/f").exists(),
            "a dry run removes nothing"
        );
        let real = sweep(&w, b"backups", false).unwrap();
        assert_eq!(sorted(real), expected);
        assert!(t.path().join("backups/repo/config").exists());
        assert!(!t.path().join("backups/older").exists());
        assert!(!t.path().join("backups/old.tar").exists());
    }
}
