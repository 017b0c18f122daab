//! What stands where an item goes, and how the restore makes room for it.
//!
//! - Nothing: the item is made.
//! - A file, a symlink or a special file where anything goes: removed (never followed).
//! - A directory where a file, a symlink or a special file goes: with `--delete` it is
//!   removed with what it holds ([`super::extras::sweep`]: never cairn's own directories,
//!   never across a mount point), so that the tree ends as the archive's; without it, the item
//!   is not restored and a warning says why (exit 1). Issue 44: `--delete --overwrite always`
//!   stopped at "a directory is in the way" with exit 2, deleting nothing, while the dry run
//!   had predicted a plain write.
//! - A directory where a directory goes: kept, unless it belongs to somebody else (neither
//!   the restoring user nor the item's owner): extract never gives another user's inode to
//!   anyone, nor sets its mode or attributes. With `--delete` it is replaced by a new one;
//!   without it, it keeps its owner, mode and attributes, with a warning, and the restore
//!   goes on inside it (everything restored there is made anew by this run).
//!
//! The dry run ([`super::dry_run`]) decides with [`plan_dir`] and [`plan_in_way`], the same
//! rules.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Stat};

use super::existing::{self, Owner};
use super::extras::{self, Swept};
use super::target::DirWalker;
use super::{lossy, Outcome, Restorer};
use crate::format::item::Item;
use crate::ops::own_dirs::OwnDir;

/// What to do with a directory found where a directory item goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DirThere {
    /// Restore into it and give it the item's metadata.
    Use,
    /// One of cairn's own directories: left alone, nothing restored into it.
    Own(&'static str),
    /// Somebody else's: replaced with `--delete`, else used without its metadata set.
    Foreign(u32),
}

/// Judges a directory `st` found where `item`, restored with `owner`, goes.
pub(super) fn plan_dir(st: &Stat, owner: Owner, euid: u32, own: &[OwnDir]) -> DirThere {
    if let Some(o) = OwnDir::by_identity(own, (st.st_dev, st.st_ino)) {
        return DirThere::Own(o.what);
    }
    if existing::foreign_dir(st, owner, euid) {
        return DirThere::Foreign(st.st_uid);
    }
    DirThere::Use
}

/// Why a foreign directory keeps its metadata (without `--delete`).
pub(super) fn foreign_warning(uid: u32) -> String {
    format!(
        "a directory of another user (uid {uid}) is there: it keeps its owner, mode and attributes (extract gives nobody an inode it did not make; --delete replaces it)"
    )
}

/// Without `--delete`, why a directory in the way of a non-directory stays.
pub(super) const DIR_IN_THE_WAY: &str =
    "a directory is in the way; not replaced (--delete replaces it)";

/// Whether a directory at `path` could be removed whole: the same walk a removal makes, in a
/// dry run. `Ok` has what would go; `Err` says why not.
pub(super) fn plan_in_way(walker: &DirWalker, path: &[u8]) -> Result<Vec<Swept>, String> {
    let swept = extras::sweep(walker, path, true)?;
    match swept.iter().find(|s| matches!(s, Swept::Kept { .. })) {
        Some(Swept::Kept { path, why, .. }) => Err(format!(
            "it cannot be replaced: {} is left there ({why})",
            lossy(path)
        )),
        _ => Ok(swept),
    }
}

impl Restorer<'_> {
    /// Makes room for a non-directory `item` at `name` in `parent`.
    pub(super) fn make_room(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        item: &Item,
    ) -> Result<(), Outcome> {
        match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(_) => Ok(()),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                if !self.delete {
                    return Err(Outcome::Skipped(DIR_IN_THE_WAY.into()));
                }
                self.remove_in_way(item)
            }
            Ok(_) => rustix::fs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| Outcome::Failed(format!("cannot replace: {e}"))),
        }
    }

    /// Removes the directory at `item`'s path with what it holds (`--delete`), counting what
    /// went as deleted. What stays is said, and the item is then not restored.
    pub(super) fn remove_in_way(&mut self, item: &Item) -> Result<(), Outcome> {
        // Planned first, as the dry run plans it: a directory that cannot go whole (it holds
        // one of cairn's own, a mount point, something that will not be removed) is left
        // untouched, not half deleted before the item is skipped.
        if let Err(why) = plan_in_way(&self.dirs, &item.path) {
            return Err(Outcome::Skipped(why));
        }
        let swept = extras::sweep(&self.dirs, &item.path, false).map_err(Outcome::Failed)?;
        // Directories below the path may be open in the walker's chain: never reused.
        self.dirs.stack.clear();
        let mut blocked = None;
        for s in swept {
            match s {
                Swept::Gone { .. } => self.report.deleted += 1,
                Swept::Kept { path, why, note } => {
                    if note {
                        crate::say!("note: kept {}: {why}", lossy(&path));
                    }
                    blocked.get_or_insert(format!(
                        "it cannot be replaced: {} is left there ({why})",
                        lossy(&path)
                    ));
                }
            }
        }
        match blocked {
            Some(why) => Err(Outcome::Skipped(why)),
            None => Ok(()),
        }
    }

    /// A directory item whose name is taken: what is there is used, replaced or left.
    /// `Ok(true)`: a directory to restore into is there now.
    pub(super) fn dir_there(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        item: &Item,
    ) -> Result<bool, Outcome> {
        let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => return Err(Outcome::Failed(format!("cannot look at it: {e}"))),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            // A file or a symlink where a directory belongs: replaced.
            rustix::fs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| Outcome::Failed(format!("cannot replace: {e}")))?;
            return Ok(false);
        }
        let owner = self.owners.of(item);
        match plan_dir(&st, owner, self.owners.euid, &self.dirs.own) {
            DirThere::Use => Ok(true),
            DirThere::Own(what) => Err(Outcome::Skipped(format!(
                "left alone ({what}): nothing is restored into it"
            ))),
            DirThere::Foreign(uid) if !self.delete => Err(Outcome::Skipped(foreign_warning(uid))),
            DirThere::Foreign(_) => {
                self.remove_in_way(item)?;
                Ok(false)
            }
        }
    }
}
