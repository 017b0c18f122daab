//! Metadata applied to what was restored (in the order of [`super::attrs`]): owner (by name,
//! as stored, or by number), mode, ACLs, extended attributes, times, inode flags; directories
//! last, deepest first.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::Timestamps;

use super::existing::Owner;
use super::target::safe_components;
use super::Restorer;
use crate::format::item::{Item, Timestamp};
use crate::source::fsmeta::Names;

pub(super) fn timestamps(t: Timestamp) -> Timestamps {
    let ts = rustix::fs::Timespec {
        tv_sec: t.secs,
        tv_nsec: i64::from(t.nanos) as _,
    };
    Timestamps {
        last_access: ts,
        last_modification: ts,
    }
}

/// Who restored items belong to: the item's owner as root (by name where the name exists
/// here, else by number; by number only with `--numeric-ids`), else the restoring user.
pub(super) struct Owners {
    names: Names,
    numeric_ids: bool,
    is_root: bool,
    pub euid: u32,
}

impl Owners {
    pub fn new(numeric_ids: bool) -> Self {
        let euid = rustix::process::geteuid();
        Self {
            names: Names::default(),
            numeric_ids,
            is_root: euid.is_root(),
            euid: euid.as_raw(),
        }
    }

    /// The owner `item` is restored with.
    pub fn of(&mut self, item: &Item) -> Owner {
        if !self.is_root {
            return Owner {
                uid: self.euid,
                gid: None,
            };
        }
        let (uid, gid) = if self.numeric_ids {
            (item.uid, item.gid)
        } else {
            (
                self.names.uid_of(&item.user).unwrap_or(item.uid),
                self.names.gid_of(&item.group).unwrap_or(item.gid),
            )
        };
        Owner {
            uid,
            gid: Some(gid),
        }
    }
}

impl Restorer<'_> {
    /// The owner to give an item (root only: others cannot choose one).
    pub(super) fn owner(&mut self, item: &Item) -> Option<(rustix::fs::Uid, rustix::fs::Gid)> {
        let owner = self.owners.of(item);
        owner.gid.map(|gid| {
            (
                rustix::fs::Uid::from_raw(owner.uid),
                rustix::fs::Gid::from_raw(gid),
            )
        })
    }

    /// Owner, mode, ACLs, xattrs, times and flags on an open directory (see [`super::attrs`]).
    pub(super) fn apply_fd_metadata(&mut self, fd: std::os::fd::BorrowedFd<'_>, item: &Item) {
        let owner = self.owner(item);
        for w in self.applier.apply_fd(fd, item, owner) {
            self.warn_at(&item.path, "metadata", w);
        }
    }

    /// Owner, mode (special files), xattrs and times of a symlink or special file this run
    /// made at `name` in `parent`, through a descriptor of that node (never by name: another
    /// user may have swapped a node of theirs in).
    pub(super) fn apply_at_metadata(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        item: &Item,
        (kind, rdev): (rustix::fs::FileType, Option<u64>),
        since: std::time::SystemTime,
    ) {
        let node = match self.made.open(parent, name, kind, rdev, since) {
            Ok(n) => n,
            Err(why) => {
                let msg = format!("{}: {why}; left as it is", item.display_path());
                self.warn_at(&item.path, "metadata", msg);
                return;
            }
        };
        let owner = self.owner(item);
        let mode = (kind != rustix::fs::FileType::Symlink).then_some(item.mode & 0o7777);
        for w in self.applier.apply_node(node.as_fd(), item, owner, mode) {
            self.warn_at(&item.path, "metadata", w);
        }
    }

    /// Applies the restored directories' metadata, deepest first. `stopped_at`: the path where
    /// an unfinished restore stopped; its parent directories are incomplete and keep the
    /// times of now, so that nobody takes them for complete copies.
    pub(super) fn finish_dirs(&mut self, stopped_at: Option<&[u8]>) {
        let mut dirs = std::mem::take(&mut self.dirs_to_finish);
        // Deepest first, so a read-only directory is closed only after its contents.
        dirs.sort_by(|a, b| b.0.path.cmp(&a.0.path));
        let incomplete = |dir: &[u8]| {
            stopped_at.is_some_and(|at| {
                at == dir || (at.starts_with(dir) && at.get(dir.len()) == Some(&b'/'))
            })
        };
        for (item, id) in dirs.iter().filter(|(d, _)| !incomplete(&d.path)) {
            let Some(comps) = safe_components(&item.path) else {
                continue;
            };
            let fd = match self.dirs.dir(&comps, false) {
                Ok(fd) => fd.as_fd().try_clone_to_owned().map_err(|e| e.to_string()),
                Err(reason) => Err(reason),
            };
            let same = fd.and_then(|fd| {
                let node = super::target::Node::open(&fd).map_err(|e| e.to_string())?;
                if (node.dev, node.ino) == *id {
                    Ok(fd)
                } else {
                    Err("it was replaced during the restore".to_string())
                }
            });
            match same {
                Ok(fd) => self.apply_fd_metadata(fd.as_fd(), item),
                Err(reason) => {
                    let msg = format!("{}: cannot set metadata: {reason}", item.display_path());
                    self.warn_at(&item.path, "metadata", msg)
                }
            }
        }
    }
}
