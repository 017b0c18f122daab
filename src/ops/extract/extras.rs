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
//! named in a warning.

use std::collections::HashSet;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::target::{safe_components, DirWalker};

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
    pub is_dir: bool,
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
            for (name, is_dir) in entries(&fd).unwrap_or_default() {
                let path = if dir.is_empty() {
                    name
                } else {
                    [dir.as_slice(), b"/", name.as_slice()].concat()
                };
                if !self.held.contains(&path) {
                    found.push(Extra { path, is_dir });
                }
            }
        }
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found
    }
}

/// The names in a directory (without `.` and `..`), each with whether it is a directory.
fn entries(dir: &OwnedFd) -> rustix::io::Result<Vec<(Vec<u8>, bool)>> {
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
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            t => t == FileType::Directory,
        };
        out.push((name.to_vec(), is_dir));
    }
    Ok(out)
}

/// Removes an extra and everything below it; returns how many entries went.
pub fn remove(walker: &DirWalker, extra: &Extra) -> Result<u64, String> {
    let comps = safe_components(&extra.path).ok_or("unsafe path")?;
    let (name, parents) = comps.split_last().ok_or("unsafe path")?;
    let parent = if parents.is_empty() {
        rustix::io::dup(&walker.root).map_err(|e| e.to_string())?
    } else {
        walker.dir_fresh(parents)?
    };
    let dev = rustix::fs::fstat(&parent)
        .map_err(|e| e.to_string())?
        .st_dev;
    remove_tree(&parent, name, dev, 0).map_err(|e| match e {
        Errno::XDEV => "it is, or holds, a mount point of another file system; left there".into(),
        e => e.to_string(),
    })
}

/// Removes `name` in `parent`, a directory with its contents, on the file system `dev`; a
/// symlink is removed, never followed. `EXDEV` when something on another file system is met
/// (what was removed before it stays removed).
fn remove_tree(parent: &OwnedFd, name: &[u8], dev: u64, depth: usize) -> rustix::io::Result<u64> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if st.st_dev != dev {
        return Err(Errno::XDEV);
    }
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
        return Ok(1);
    }
    if depth >= MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(parent, name, flags, Mode::empty())?;
    // The directory opened, not the one looked at a moment before (a swap in between).
    if rustix::fs::fstat(&dir)?.st_dev != dev {
        return Err(Errno::XDEV);
    }
    let mut removed = 0;
    for (child, _) in entries(&dir)? {
        removed += remove_tree(&dir, &child, dev, depth + 1)?;
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    Ok(removed + 1)
}

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
        DirWalker {
            root: fd,
            stack: Vec::new(),
        }
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
        let names: Vec<_> = found.iter().map(|e| (e.path.clone(), e.is_dir)).collect();
        assert_eq!(
            names,
            vec![
                (b"a/gone".to_vec(), false),
                (b"a/link".to_vec(), false),
                (b"a/old".to_vec(), true)
            ]
        );
        let removed: u64 = found.iter().map(|e| remove(&w, e).unwrap()).sum();
        assert_eq!(removed, 5);
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
        let err = remove(&w, &found[0]).unwrap_err();
        let kept = fs::read(mnt.join("precious"));
        let _ = std::process::Command::new("umount").arg(&mnt).status();
        assert!(err.contains("mount point"), "{err}");
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
}
