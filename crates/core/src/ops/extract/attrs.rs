//! Applying what an item carries beyond its contents, in the order that keeps each piece:
//! owner first (`chown` clears set-id bits and file capabilities), then the mode, then the
//! ACLs (the access ACL's mask is the mode's group bits, so both agree), then every other
//! extended attribute (file capabilities among them), then the times, and the inode flags
//! last (an immutable or append-only file takes no other change).
//!
//! What the process may not set (an owner other than its own, `trusted.*` and
//! `security.*` attributes, file capabilities, the immutable and append-only flags, when not
//! root) is counted by kind for one summary line each, not reported per file.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Gid, IFlags, Mode, Uid, XattrFlags};
use rustix::io::Errno;

use super::metadata::timestamps;
use crate::format::item::Item;
use crate::source::fsmeta::{is_acl, MetaOptions, KEPT_FLAGS};

/// Counts of what could not be set for lack of privilege.
#[derive(Default)]
pub struct Unset {
    owners: AtomicU64,
    trusted: AtomicU64,
    security: AtomicU64,
    capabilities: AtomicU64,
    flags: AtomicU64,
}

/// [`Unset`], read at the end: one count for each kind that has any ("3 owners").
pub fn summary(u: &Unset) -> Vec<String> {
    [
        (&u.owners, "owner", "owners"),
        (&u.capabilities, "file capability", "file capabilities"),
        (&u.security, "security.* attribute", "security.* attributes"),
        (&u.trusted, "trusted.* attribute", "trusted.* attributes"),
        (
            &u.flags,
            "set of inode flags (immutable, append-only)",
            "sets of inode flags (immutable, append-only)",
        ),
    ]
    .into_iter()
    .filter_map(|(n, one, many)| match n.load(Ordering::Relaxed) {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    })
    .collect()
}

impl Unset {
    fn count(&self, which: &AtomicU64) {
        which.fetch_add(1, Ordering::Relaxed);
    }

    /// The counter for an attribute that needs privilege to set, if it is one.
    fn for_xattr(&self, name: &[u8]) -> Option<&AtomicU64> {
        if name == b"security.capability" {
            Some(&self.capabilities)
        } else if name.starts_with(b"security.") {
            Some(&self.security)
        } else if name.starts_with(b"trusted.") {
            Some(&self.trusted)
        } else {
            None
        }
    }
}

/// How the restore applies metadata: what is kept, and who is restoring.
pub struct Applier<'a> {
    pub meta: MetaOptions,
    pub is_root: bool,
    pub unset: &'a Unset,
}

fn lacks_privilege(e: Errno) -> bool {
    e == Errno::PERM || e == Errno::ACCESS
}

impl Applier<'_> {
    /// Owner, mode, ACLs, extended attributes, times and flags of an open file or directory;
    /// `owner` is the owner to give it (root only; `None` otherwise). Returns warnings.
    pub fn apply_fd(
        &self,
        fd: BorrowedFd<'_>,
        item: &Item,
        owner: Option<(Uid, Gid)>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut warn = |what: &str, e: Errno| {
            warnings.push(format!("{}: cannot set {what}: {e}", item.display_path()));
        };
        match owner {
            Some((uid, gid)) => {
                if let Err(e) = rustix::fs::fchown(fd, Some(uid), Some(gid)) {
                    warn("owner", e);
                }
            }
            None => self.owner_not_set(item),
        }
        if let Err(e) = rustix::fs::fchmod(fd, Mode::from_raw_mode(item.mode & 0o7777)) {
            warn("mode", e);
        }
        // ACLs before the other attributes, and all of them after the owner.
        let (acls, others): (Vec<_>, Vec<_>) = item.xattrs.iter().partition(|(k, _)| is_acl(k));
        for (k, v) in acls.into_iter().chain(others) {
            if !self.meta.keeps_xattr(k) {
                continue;
            }
            if let Err(e) = rustix::fs::fsetxattr(fd, k.as_slice(), v, XattrFlags::empty()) {
                self.xattr_failed(item, k, e, &mut warnings);
            }
        }
        if let Err(e) = rustix::fs::futimens(fd, &timestamps(item.mtime)) {
            warnings.push(format!("{}: cannot set times: {e}", item.display_path()));
        }
        if self.meta.flags && item.inode_flags != 0 {
            // As chattr does: the flags the file system keeps for itself (ext4's extents
            // flag, say) stay as they are.
            let current = rustix::fs::ioctl_getflags(fd).map_or(0, |f| f.bits());
            let wanted = (current & !KEPT_FLAGS) | item.inode_flags;
            let flags = IFlags::from_bits_retain(wanted);
            match rustix::fs::ioctl_setflags(fd, flags) {
                Ok(()) => {}
                Err(e) if lacks_privilege(e) => self.unset.count(&self.unset.flags),
                Err(e) => warnings.push(format!(
                    "{}: cannot set inode flags: {e}",
                    item.display_path()
                )),
            }
        }
        warnings
    }

    /// For a file kept from an earlier restore: removes the extended attributes of the kinds
    /// restored that the item does not have, and the inode flags when it has none (those it
    /// has are set by [`Applier::apply_fd`]), so that only what the archive holds is left.
    /// Returns warnings.
    pub fn clear_extra(&self, file: &std::fs::File, item: &Item) -> Vec<String> {
        let mut warnings = Vec::new();
        let held = crate::source::fsmeta::read_xattrs_fd(file, &self.meta).unwrap_or_default();
        for (name, _) in held {
            if item.xattrs.iter().any(|(k, _)| *k == name) {
                continue;
            }
            if let Err(e) = rustix::fs::fremovexattr(file, name.as_slice()) {
                self.xattr_failed(item, &name, e, &mut warnings);
            }
        }
        if self.meta.flags && item.inode_flags == 0 {
            let current = rustix::fs::ioctl_getflags(file).map_or(0, |f| f.bits());
            if current & KEPT_FLAGS != 0 {
                let flags = IFlags::from_bits_retain(current & !KEPT_FLAGS);
                if let Err(e) = rustix::fs::ioctl_setflags(file, flags) {
                    let path = item.display_path();
                    warnings.push(format!("{path}: cannot clear inode flags: {e}"));
                }
            }
        }
        warnings
    }

    /// Owner, mode (`None` for a symlink, which has none), extended attributes and times of
    /// a symlink or special file the restore made, through `node`, an `O_PATH` descriptor of
    /// it ([`super::target::open_made`]): `/proc/self/fd/N` followed reaches that very node (a
    /// symlink itself, not what it points at), never one swapped in under its name. Returns
    /// warnings.
    pub fn apply_node(
        &self,
        node: BorrowedFd<'_>,
        item: &Item,
        owner: Option<(Uid, Gid)>,
        mode: Option<u32>,
    ) -> Vec<String> {
        use std::os::fd::AsRawFd;
        let mut warnings = Vec::new();
        let path = format!("/proc/self/fd/{}", node.as_raw_fd());
        let mut warn = |what: &str, e: Errno| {
            warnings.push(format!("{}: cannot set {what}: {e}", item.display_path()));
        };
        match owner {
            Some((uid, gid)) => {
                if let Err(e) = rustix::fs::chown(path.as_str(), Some(uid), Some(gid)) {
                    warn("owner", e);
                }
            }
            None => self.owner_not_set(item),
        }
        if let Some(mode) = mode {
            if let Err(e) = rustix::fs::chmod(path.as_str(), Mode::from_raw_mode(mode)) {
                warn("mode", e);
            }
        }
        for (k, v) in &item.xattrs {
            if !self.meta.keeps_xattr(k) {
                continue;
            }
            if let Err(e) =
                rustix::fs::setxattr(path.as_str(), k.as_slice(), v, XattrFlags::empty())
            {
                self.xattr_failed(item, k, e, &mut warnings);
            }
        }
        if let Err(e) = rustix::fs::utimensat(
            rustix::fs::CWD,
            path.as_str(),
            &timestamps(item.mtime),
            rustix::fs::AtFlags::empty(),
        ) {
            warnings.push(format!("{}: cannot set times: {e}", item.display_path()));
        }
        warnings
    }

    /// Not root: an owner other than this process's is not given, and counted.
    fn owner_not_set(&self, item: &Item) {
        let me = rustix::process::geteuid().as_raw();
        if !self.is_root && item.uid != me {
            self.unset.count(&self.unset.owners);
        }
    }

    fn xattr_failed(&self, item: &Item, name: &[u8], e: Errno, warnings: &mut Vec<String>) {
        match self.unset.for_xattr(name) {
            Some(counter) if lacks_privilege(e) && !self.is_root => self.unset.count(counter),
            _ => warnings.push(format!(
                "{}: cannot set xattr {}: {e}",
                item.display_path(),
                String::from_utf8_lossy(name)
            )),
        }
    }
}
