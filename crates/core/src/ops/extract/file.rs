//! Regular files: kept when the target holds them already ([`super::existing`], and
//! [`super::links`] for hardlinked ones), linked to the first name of a hardlinked inode this
//! run wrote, or created and their contents handed to the fetch workers ([`super::fetch`]);
//! then what the workers report back: a file counted, or removed under every name it got.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::existing::{self, Found};
use super::target::safe_components;
use super::{failed, fetch, LinkGroup, Outcome, Overwrite, Restorer};
use crate::format::item::Item;
use crate::index::StoredLoc;
use crate::util::id::PackId;

/// Files open for writing at once (each holds a descriptor).
const MAX_OPEN_FILES: usize = 256;

impl Restorer<'_> {
    pub(super) fn restore_file(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        // A later name of a hardlinked inode the target holds already.
        if let Some(done) = item
            .hardlink_id
            .and_then(|h| self.later_name(h, parent, name, item))
        {
            return done;
        }
        // The common case first: nothing where the file goes. Creating it exclusively finds
        // that out in one call (a look first cost a second lookup in the directory per
        // file); only when the call fails is what is there looked at, and kept or removed to
        // make room, as before. A hardlink's name goes the long way: its first name decides.
        let fresh = match item.hardlink_id {
            None => self.chunk_places(item).ok().and_then(|locs| {
                let file = create_new(parent, name).ok()?;
                Some((file, locs))
            }),
            Some(_) => None,
        };
        let (file, locs) = match fresh {
            Some(fresh) => fresh,
            None => match self.create_after_looking(parent, name, item) {
                Ok(created) => created,
                Err(outcome) => return outcome,
            },
        };
        if let Some(h) = item.hardlink_id {
            self.hardlinks.entry(h).or_insert_with(|| LinkGroup {
                first: item.path.clone(),
                others: Vec::new(),
            });
        }
        let owner = self.owner(item);
        let open = fetch::OpenFile::new(file, item.clone(), owner);
        if item.chunks.is_empty() {
            let warnings = fetch::finalize(&open, self.applier);
            self.finish_file(fetch::Done {
                file: open,
                error: None,
                no_space: false,
                warnings,
            });
            return Outcome::Done;
        }
        self.hand_to_workers(open, item, locs)
    }

    /// The file created after looking at what the target holds where it goes (see
    /// [`file_there`](Self::file_there)), or the outcome when it is not to be written.
    fn create_after_looking(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        item: &Item,
    ) -> Result<(File, Vec<(PackId, StoredLoc)>), Outcome> {
        if let Some(outcome) = self.file_there(parent, name, item) {
            return Err(outcome);
        }
        if let Some(h) = item.hardlink_id {
            if self.link_to_first(h, parent, name, item) {
                return Err(Outcome::Done);
            }
        }
        // Every chunk must be locatable before anything is created.
        let locs = self.chunk_places(item)?;
        match create_new(parent, name) {
            Ok(file) => Ok((file, locs)),
            Err(e) => Err(failed(e)),
        }
    }

    /// What the target holds where the file goes, and what becomes of it: the archive's file
    /// (kept, or a candidate for keeping with its other names: the file is done), something
    /// else (removed to make room, or the outcome when it stays), or nothing. `None`: the file
    /// is to be written.
    fn file_there(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Option<Outcome> {
        let later = item
            .hardlink_id
            .is_some_and(|h| self.hardlinks.contains_key(&h));
        let found = if self.overwrite == Overwrite::Always || later {
            existing::present(parent, name).then_some(Found::Other)
        } else {
            let owner = self.owners.of(item);
            Some(self.existing.look(parent, name, item, owner))
        };
        match (found.unwrap_or(Found::Nothing), item.hardlink_id) {
            (Found::Nothing, _) => None,
            (Found::Same(same), None) => {
                self.kept(same.file, item);
                Some(Outcome::Done)
            }
            (Found::Same(same), Some(h)) => {
                self.link_candidate(h, same, item);
                Some(Outcome::Done)
            }
            (Found::Other, _) => self.make_room(parent, name, item).err(),
        }
    }

    /// A later name of the hardlinked inode `h`, whose first name this run wrote: linked to
    /// that name. Whether it was (if not, the file is written as if it were the first).
    fn link_to_first(&mut self, h: [u8; 16], parent: &OwnedFd, name: &[u8], item: &Item) -> bool {
        let Some(first) = self.hardlinks.get(&h).map(|g| g.first.clone()) else {
            return false;
        };
        let Some(comps) = safe_components(&first) else {
            return false;
        };
        let (first_name, first_parents) = comps.split_last().expect("non-empty");
        let Ok(first_parent) = self.dirs.dir_fresh(first_parents) else {
            return false;
        };
        // Flags 0: a symlink that replaced the first file is linked, not followed.
        if rustix::fs::linkat(&first_parent, *first_name, parent, name, AtFlags::empty()).is_err() {
            return false;
        }
        if let Some(g) = self.hardlinks.get_mut(&h) {
            g.others.push(item.path.clone());
        }
        // A candidate's names are counted when it is settled.
        if self.is_candidate(&h) {
            self.linked_to_candidate(&h, item);
        } else {
            self.report.files += 1;
        }
        true
    }

    /// Where each of the file's chunks is stored; the outcome when one is missing.
    fn chunk_places(&self, item: &Item) -> Result<Vec<(PackId, StoredLoc)>, Outcome> {
        let mut locs = Vec::with_capacity(item.chunks.len());
        for c in &item.chunks {
            match self.index.stored(&c.id) {
                Some(l) => locs.push(l),
                None => {
                    return Err(Outcome::Failed(format!(
                        "chunk {} is missing from the repository",
                        c.id
                    )))
                }
            }
        }
        Ok(locs)
    }

    /// Hands the contents of the file just created to the fetch workers, a piece per chunk,
    /// then counts the files they finished meanwhile, waiting for some while too many are
    /// open.
    fn hand_to_workers(
        &mut self,
        open: Arc<fetch::OpenFile>,
        item: &Item,
        locs: Vec<(PackId, StoredLoc)>,
    ) -> Outcome {
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

    /// A file the target holds already, byte for byte: its metadata set, nothing fetched.
    pub(super) fn kept(&mut self, file: File, item: &Item) {
        let mut warnings = self.applier.clear_extra(&file, item);
        let owner = self.owner(item);
        warnings.extend(self.applier.apply_fd(file.as_fd(), item, owner));
        for w in warnings {
            self.warn_at(&item.path, "metadata", w);
        }
        self.report.files += 1;
        self.report.bytes += item.size;
        self.report.kept_files += 1;
        self.report.kept_bytes += item.size;
        self.show_progress(item);
    }

    /// A file the workers finished (or an empty one): count it, or report it and remove
    /// everything written under its names.
    pub(super) fn finish_file(&mut self, d: fetch::Done) {
        if !d.file.item.chunks.is_empty() {
            self.open_files -= 1;
        }
        for w in d.warnings {
            self.warn_at(&d.file.item.path, "metadata", w);
        }
        let item = &d.file.item;
        match d.error {
            None => {
                self.report.files += 1;
                self.report.bytes += item.size;
                self.repeated = None;
                self.show_progress(item);
            }
            Some(reason) => {
                let mut names = vec![item.path.clone()];
                if let Some(g) = item.hardlink_id.and_then(|h| self.hardlinks.remove(&h)) {
                    names.extend(g.others);
                }
                for n in names {
                    self.remove(&n);
                    if d.no_space {
                        self.target_full(&n, &reason);
                    } else {
                        self.not_restored(&n, &reason, &reason);
                    }
                }
            }
        }
    }

    /// Removes a restored non-directory by its stored path (no symlink followed).
    pub(super) fn remove(&self, path: &[u8]) {
        if let Some(comps) = safe_components(path) {
            let (name, parents) = comps.split_last().expect("non-empty");
            if let Ok(dir) = self.dirs.dir_fresh(parents) {
                let _ = rustix::fs::unlinkat(&dir, *name, AtFlags::empty());
            }
        }
    }
}

/// Creates `name` in `parent`, only if nothing is there (not even a symlink), writable by the
/// owner alone until its metadata is set.
fn create_new(parent: &OwnedFd, name: &[u8]) -> rustix::io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o600)).map(File::from)
}
