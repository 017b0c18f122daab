//! Hardlinked files the target already holds, identical and linked the same way: kept, as
//! single-link files are (issue 44: they were always fetched and written again).
//!
//! The first name of a hardlinked inode that holds the archive's contents (and may be kept:
//! [`super::existing`]'s rules) becomes a candidate; nothing is set on it yet. Each later name
//! of the same inode in the archive is either that inode already (counted) or made a link to
//! it. Once every item has been seen, the inode must have exactly as many names as the archive
//! gives it in the target: then every one of them is ours to keep, and its metadata is set.
//! An inode with a name besides (a link planted to a file elsewhere, or a name the archive does
//! not have) is not kept: every name is removed, and the file is written anew and linked again,
//! as if nothing had been there.

use std::collections::HashMap;

use rustix::fs::AtFlags;

use super::existing::Same;
use super::{Outcome, Restorer};
use crate::format::item::Item;

/// A hardlinked inode the target holds with the archive's contents, while its names are seen.
pub(super) struct Candidate {
    same: Same,
    first: Item,
    /// The later names, each the inode already or linked to it by this run (a name that is
    /// neither, skipped for what stands there, is not one of them: it would be counted
    /// against a link another user planted elsewhere).
    others: Vec<Item>,
}

/// The candidates, by hardlink id.
pub(super) type Candidates = HashMap<[u8; 16], Candidate>;

impl Restorer<'_> {
    /// The first name of a hardlinked inode, found holding the archive's contents: kept for
    /// now, settled once every name has been seen ([`Self::settle_links`]).
    pub(super) fn link_candidate(&mut self, h: [u8; 16], same: Same, item: &Item) {
        self.hardlinks.insert(
            h,
            super::LinkGroup {
                first: item.path.clone(),
                others: Vec::new(),
            },
        );
        self.candidates.insert(
            h,
            Candidate {
                same,
                first: item.clone(),
                others: Vec::new(),
            },
        );
    }

    /// A later name of a candidate's inode: `Some(Done)` when it is that inode already. Else
    /// it is linked to the first name by the caller, and counted here.
    pub(super) fn later_name(
        &mut self,
        h: [u8; 16],
        parent: &std::os::fd::OwnedFd,
        name: &[u8],
        item: &Item,
    ) -> Option<Outcome> {
        let c = self.candidates.get_mut(&h)?;
        let there = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if (there.st_dev, there.st_ino) == (c.same.dev, c.same.ino) {
            c.others.push(item.clone());
            if let Some(g) = self.hardlinks.get_mut(&h) {
                g.others.push(item.path.clone());
            }
            return Some(Outcome::Done);
        }
        None
    }

    /// A later name of a candidate's inode was linked to it by this run.
    pub(super) fn linked_to_candidate(&mut self, h: &[u8; 16], item: &Item) {
        if let Some(c) = self.candidates.get_mut(h) {
            c.others.push(item.clone());
        }
    }

    /// Whether every name of `c` in the target is still its inode (another user may have
    /// moved one away and linked a file of theirs in its place).
    fn names_hold(&self, c: &Candidate) -> bool {
        std::iter::once(&c.first).chain(&c.others).all(|item| {
            let Some(comps) = super::target::safe_components(&item.path) else {
                return false;
            };
            let Some((name, _)) = comps.split_last() else {
                return false;
            };
            self.dirs.parent_fresh(&comps).is_ok_and(|parent| {
                rustix::fs::statat(&parent, *name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| (st.st_dev, st.st_ino) == (c.same.dev, c.same.ino))
            })
        })
    }

    /// Whether `h` is a candidate (its later names are counted when settled, not when linked).
    pub(super) fn is_candidate(&self, h: &[u8; 16]) -> bool {
        self.candidates.contains_key(h)
    }

    /// Settles every candidate once all items were seen: kept when the inode has no name but
    /// the archive's, else written anew under all of them.
    pub(super) fn settle_links(&mut self) {
        let candidates: Vec<Candidate> =
            std::mem::take(&mut self.candidates).into_values().collect();
        for c in candidates {
            let names = 1 + c.others.len() as u64;
            let nlink = rustix::fs::fstat(&c.same.file).map(|st| st.st_nlink);
            if nlink.is_ok_and(|n| n == names) && self.names_hold(&c) {
                self.kept(c.same.file, &c.first);
                // Its other names are there already too (their bytes are the first's).
                self.report.files += c.others.len() as u64;
                self.report.kept_files += c.others.len() as u64;
                continue;
            }
            // A name besides the archive's: every name goes, and the file is made again.
            drop(c.same);
            if let Some(h) = c.first.hardlink_id {
                self.hardlinks.remove(&h);
            }
            self.remove(&c.first.path);
            for o in &c.others {
                self.remove(&o.path);
            }
            self.report.items = self.report.items.saturating_sub(names);
            self.restore(&c.first);
            for o in &c.others {
                self.restore(o);
            }
        }
    }
}
