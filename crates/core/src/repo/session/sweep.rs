//! Deleting packs (compact, `check --repair`): the one way, in three steps that no paused
//! writer can outrun.
//!
//! 1. [`WriteSession::announce`]: a record naming the packs about to be deleted is made
//!    durable (and one naming the packs that must wait, `repo/retire.rs`), then the archives
//!    are listed again: the chunks of any archive committed since the plan was made are
//!    returned, so that the caller copies out of the doomed packs what they need.
//! 2. [`WriteSession::delete_packs`] (optional: packs with nothing live, deleted first so that
//!    a full disk gets room for what follows): the lock is verified, then they go.
//! 3. [`WriteSession::replace_index`]: the session's index, made the whole index in one
//!    fragment, replaces the fragments the plan was made from; then the remaining announced
//!    packs go, and the records last.
//!
//! A commit that landed before step 1's listing is seen and kept; one that lands after it and
//! then looks (`confirm.rs`) finds the record, or the packs gone, and is removed again rather
//! than reported saved. Deletion needs the exclusive lock, verified from the store before the
//! first deletion.

use std::collections::HashSet;

use super::WriteSession;
use crate::error::Result;
use crate::index::{persist, ChunkIndex};
use crate::repo::archives;
use crate::repo::lock::LockKind;
use crate::repo::retire::{self, Mode};
use crate::util::id::{ArchiveId, ChunkId, PackId};

/// What [`WriteSession::announce`] did.
#[derive(Debug, Default)]
pub struct Announced {
    /// Chunks of archives committed since the plan was made (not among the known ones): the
    /// caller must not delete the only copy of any of them.
    pub newly_live: HashSet<ChunkId>,
    /// The deferred record written, if any.
    pub deferred: Option<String>,
    /// The deleting record written, if any (removed last by [`WriteSession::replace_index`]),
    /// and the packs it names: nothing else may be deleted.
    deleting: Option<String>,
    announced: HashSet<PackId>,
}

impl Announced {
    fn check(&self, packs: &[PackId]) -> Result<()> {
        if packs.iter().all(|p| self.announced.contains(p)) {
            Ok(())
        } else {
            Err(crate::error::Error::internal(
                "deleting a pack that was not announced",
            ))
        }
    }
}

/// What [`WriteSession::replace_index`] did.
pub struct IndexReplaced {
    /// Packs this session wrote.
    pub packs_written: u64,
    pub index: ChunkIndex,
    /// The name of the one fragment now.
    pub fragment: String,
    /// Retired packs deleted.
    pub deleted: Vec<PackId>,
    /// Retired packs kept because the new index names them (rewritten byte for byte).
    pub kept: Vec<PackId>,
}

fn delete_pack(store: &dyn crate::store::Store, pack: &PackId) -> Result<()> {
    match store.delete(&pack.object_name()) {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl WriteSession<'_> {
    /// Step 1 (see the module doc): records `deleting` (packs this run will delete) and
    /// `deferring` (packs that wait for the grace interval), then lists the archives again
    /// and returns the chunks of those not in `known`.
    pub fn announce(
        &mut self,
        deleting: &[PackId],
        deferring: &[PackId],
        known: &HashSet<ArchiveId>,
    ) -> Result<Announced> {
        let repo = self.repo;
        repo.require_lock(LockKind::Exclusive)?;
        let (store, crypto) = (repo.store(), repo.crypto());
        let mut done = Announced::default();
        if !deferring.is_empty() {
            done.deferred = Some(retire::write(&**store, crypto, Mode::Deferred, deferring)?);
        }
        if deleting.is_empty() {
            return Ok(done);
        }
        done.deleting = Some(retire::write(&**store, crypto, Mode::Deleting, deleting)?);
        done.announced = deleting.iter().copied().collect();
        let new: Vec<ArchiveId> = archives::list_ids(repo)?
            .into_iter()
            .filter(|id| !known.contains(id))
            .collect();
        if !new.is_empty() {
            // Their item streams are read through the index as it is now (their writers
            // wrote fragments before them).
            let (now, _) = repo.load_index()?;
            for id in new {
                let meta = match archives::load(repo, &id) {
                    Ok(m) => m,
                    Err(crate::error::Error::Store(e)) if e.is_not_found() => continue,
                    Err(e) => return Err(e),
                };
                done.newly_live
                    .extend(archives::chunks_of(repo, &now, &meta)?);
            }
        }
        Ok(done)
    }

    /// Step 2: deletes `packs` (announced, with nothing any archive needs) after verifying the
    /// lock from the store. `each` hears of every deletion.
    pub fn delete_packs(
        &mut self,
        announced: &Announced,
        packs: &[PackId],
        each: impl Fn(&PackId),
    ) -> Result<()> {
        if packs.is_empty() {
            return Ok(());
        }
        announced.check(packs)?;
        let repo = self.repo;
        repo.verify_lock(LockKind::Exclusive)?;
        for pack in packs {
            repo.lock_ok()?;
            each(pack);
            delete_pack(&**repo.store(), pack)?;
        }
        Ok(())
    }

    /// Step 3: ends the session by making its index the repository's whole index: one full
    /// fragment replaces `replaced` (the fragments the plan was made from: a fragment written
    /// since is not touched), then the `retired` packs are deleted, except any the new index
    /// names (packs are named by their contents, so a rewrite can reproduce one), then the
    /// announcement's record and the `finished` records go. `each` hears of every deletion.
    pub(super) fn replace_index(
        self,
        replaced: &[String],
        retired: &[PackId],
        announced: Announced,
        finished: &[String],
        each: impl Fn(&PackId),
    ) -> Result<IndexReplaced> {
        self.repo.require_lock(LockKind::Exclusive)?;
        announced.check(retired)?;
        let repo = self.repo;
        let mut me = self;
        me.writer.flush()?;
        let packs_written = me.writer.stats().packs;
        let (mut index, _) = me.writer.close();
        let store = repo.store();
        // Second copies in packs about to go are not recorded.
        index.drop_spares_in(&retired.iter().copied().collect());
        let frag = index.full_fragment()?;
        repo.verify_lock(LockKind::Exclusive)?;
        let fragment = persist::save_fragment(&**store, repo.crypto(), &frag)?;
        index.mark_persisted();
        for old in replaced.iter().filter(|n| **n != fragment) {
            repo.lock_ok()?;
            match store.delete(old) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        let referenced: HashSet<PackId> = index.iter_stored().map(|(_, p, _)| p).collect();
        let (mut deleted, mut kept) = (Vec::new(), Vec::new());
        for pack in retired {
            if referenced.contains(pack) {
                kept.push(*pack);
                continue;
            }
            repo.lock_ok()?;
            each(pack);
            delete_pack(&**store, pack)?;
            deleted.push(*pack);
        }
        for record in announced.deleting.iter().chain(finished) {
            retire::remove(&**store, record)?;
        }
        Ok(IndexReplaced {
            packs_written,
            index,
            fragment,
            deleted,
            kept,
        })
    }
}
