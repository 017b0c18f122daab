//! Metadata applied to what was restored: extended attributes, owner (by name, as stored),
//! mode and times; directories last, deepest first.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, Timestamps};

use super::target::safe_components;
use super::{lossy, Restorer};
use crate::archive::item::{Item, Timestamp};

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

impl Restorer<'_> {
    pub(super) fn owner(&mut self, item: &Item) -> (rustix::fs::Uid, rustix::fs::Gid) {
        let uid = self.names.uid_of(&item.user).unwrap_or(item.uid);
        let gid = self.names.gid_of(&item.group).unwrap_or(item.gid);
        (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        )
    }

    /// xattrs, owner, mode, times on an open file or directory.
    pub(super) fn apply_fd_metadata(&mut self, fd: std::os::fd::BorrowedFd<'_>, item: &Item) {
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
    pub(super) fn apply_at_metadata(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) {
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

    /// Applies the restored directories' metadata, deepest first. `stopped_at`: the path where
    /// an unfinished restore stopped; its parent directories are incomplete and keep the
    /// times of now, so that nobody takes them for complete copies.
    pub(super) fn finish_dirs(&mut self, stopped_at: Option<&[u8]>) {
        let mut dirs = std::mem::take(&mut self.dirs_to_finish);
        // Deepest first, so a read-only directory is closed only after its contents.
        dirs.sort_by(|a, b| b.path.cmp(&a.path));
        let incomplete = |dir: &[u8]| {
            stopped_at.is_some_and(|at| {
                at == dir || (at.starts_with(dir) && at.get(dir.len()) == Some(&b'/'))
            })
        };
        for item in dirs.iter().filter(|d| !incomplete(&d.path)) {
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
