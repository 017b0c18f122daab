//! After a commit whose lock was lost meanwhile: never "saved" for an archive that does not
//! restore.
//!
//! Every check of the lock passed before the archive's write, and then the write stalled, or
//! the process was stopped, long enough for another client to judge the lock abandoned,
//! remove it and start deleting. What that client may delete is always announced first
//! (`repo/retire.rs`): a pack is deleted only after a record naming it is durable and the
//! archives were listed once more after the record. So, looked at after our archive landed:
//!
//! - a pack the archive needs that is gone, or named by a *deleting* record, is lost (or
//!   about to be): the archive is removed again and the command fails, saying why;
//! - a pack named by a *deferred* record waits for the grace interval, and whoever deletes it
//!   later lists the archives first and sees ours: it is in use again;
//! - a chunk the remover left out of the index it rewrote (no archive used it then), in a
//!   pack it kept for other chunks, is still there.
//!
//! Every chunk of the archive that the index as it is now does not hold is then indexed again,
//! where it is, in a fragment of its own: the archive can be read at once, and no later
//! compact takes its packs for unused.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::index::fragment::IndexFragment;
use crate::index::persist;
use crate::index::{ChunkIndex, StoredLoc};
use crate::repo::archives;
use crate::repo::retire::Retired;
use crate::repo::session::SealedArchive;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId, PackId};
use crate::util::progress::count;

/// Where each chunk of the archive is, by `index`; `None` if one cannot be placed (its item
/// stream cannot be read, or a chunk is not in the index).
fn placed(
    repo: &Repository,
    index: &ChunkIndex,
    archive: &SealedArchive,
) -> Option<HashMap<ChunkId, (PackId, StoredLoc)>> {
    let meta = archives::open_object(repo, &archive.id, &archive.object).ok()?;
    let ids = archives::chunks_of(repo, index, &meta).ok()?;
    ids.into_iter()
        .map(|id| index.stored(&id).map(|at| (id, at)))
        .collect()
}

/// Checks a committed archive against what the client that removed our lock may have
/// deleted (see the module doc). Returns what to tell the user when the archive stands; an
/// error when it was removed again.
///
/// Each chunk is looked for where this session's index places it, and, if that pack is gone
/// or being deleted, where the repository's index places it now: the client that removed
/// the lock may have copied what our archive needs out of the packs it deleted (it reads
/// every archive that appeared before it deletes), which this session's index cannot know.
/// An archive written in place of another that is gone by now is never removed again (that
/// would leave neither: issue 44); it stays, and the command fails saying why.
pub(super) fn after_lost_lock(
    repo: &Repository,
    index: &ChunkIndex,
    archive: &SealedArchive,
    fragments: &[String],
    reason: &str,
) -> Result<String> {
    let store = repo.store();
    let unchecked = |e: Error| {
        Error::Locked(format!(
            "{reason}; the archive aid:{} was written, but whether every pack it needs is still there could not be checked ({e}): run cairn check",
            &archive.id.to_hex()[..8]
        ))
    };
    let retired = Retired::load(&**store, repo.crypto()).map_err(unchecked)?;
    let existing = persist::list_packs(&**store).map_err(unchecked)?;
    let (now, _) = repo.load_index().map_err(unchecked)?;
    let doomed = retired.doomed();
    let usable = |p: &PackId| existing.contains_key(p) && !doomed.contains(p);
    // Where each chunk can be read now: this session's place if its pack stands, else the
    // repository's.
    let place = placed(repo, index, archive).or_else(|| placed(repo, &now, archive));
    let mut lost: HashSet<PackId> = HashSet::new();
    let at: Option<HashMap<ChunkId, (PackId, StoredLoc)>> = place.map(|place| {
        place
            .into_iter()
            .filter_map(|(id, (p, l))| {
                if usable(&p) {
                    return Some((id, (p, l)));
                }
                match now.stored(&id).filter(|(q, _)| usable(q)) {
                    Some(moved) => Some((id, moved)),
                    None => {
                        lost.insert(p);
                        None
                    }
                }
            })
            .collect()
    });
    let Some(at) = at.filter(|_| lost.is_empty()) else {
        return Err(not_restorable(repo, archive, fragments, reason, &lost));
    };
    let revived = reindex(repo, archive, reason, (&at, &now), &retired.deferred())?;
    Ok(format!(
        "{reason}, while this backup was stopped; its archive was checked against what that client may delete: every pack it needs is there{}",
        if revived == 0 {
            String::new()
        } else {
            format!(" ({revived} of them retired by that client, and in use again)")
        }
    ))
}

/// The remover may also have rewritten the index without the chunks no archive used then
/// (ours was not there yet), keeping their packs for other chunks: every chunk of the archive
/// (`at`: where each is) that the index as it is now (`now`) does not hold is indexed again,
/// where it is, in a fragment of its own. Returns how many of its packs were retired by that
/// client (in `deferred`), and are in use again.
fn reindex(
    repo: &Repository,
    archive: &SealedArchive,
    reason: &str,
    (at, now): (&HashMap<ChunkId, (PackId, StoredLoc)>, &ChunkIndex),
    deferred: &HashSet<PackId>,
) -> Result<usize> {
    let revived: Vec<(ChunkId, PackId, StoredLoc)> = at
        .iter()
        .filter(|(id, _)| !now.contains(id))
        .map(|(id, (p, l))| (*id, *p, *l))
        .collect();
    let packs: HashSet<PackId> = revived
        .iter()
        .map(|(_, p, _)| *p)
        .filter(|p| deferred.contains(p))
        .collect();
    if !revived.is_empty() {
        persist::save_fragment(
            &**repo.store(),
            repo.crypto(),
            &IndexFragment::from_entries(revived),
        )
        .map_err(|e| {
            Error::Locked(format!(
                "{reason}; the archive aid:{} was written and every pack it needs is there, but indexing its chunks in packs that client retired failed ({e}): run cairn check",
                &archive.id.to_hex()[..8]
            ))
        })?;
    }
    Ok(packs.len())
}

/// The error for an archive that does not restore since the lock was lost (`lost`: the packs
/// it needs that the client that removed the lock deleted, or is deleting). It is removed
/// again, with the index fragments `fragments` that name packs now gone, unless it was written
/// in place of an archive that is gone by now: then it stays, as the only copy left.
fn not_restorable(
    repo: &Repository,
    archive: &SealedArchive,
    fragments: &[String],
    reason: &str,
    lost: &HashSet<PackId>,
) -> Error {
    let what = if lost.is_empty() {
        "some of its data can no longer be read".to_string()
    } else {
        format!(
            "{} it needs {} deleted by that client",
            count(lost.len() as u64, "pack"),
            if lost.len() == 1 { "was" } else { "were" }
        )
    };
    if let Some(old) = predecessor_gone(repo, archive) {
        return Error::Locked(format!(
            "{reason}; meanwhile {what}, and the archive aid:{} it was written in place of is gone: the new one, aid:{}, is left in the repository (run cairn check to see what of it restores)",
            &old.to_hex()[..8],
            &archive.id.to_hex()[..8]
        ));
    }
    withdraw(repo, fragments);
    match repo.store().delete(&archive.id.object_name()) {
        Ok(()) => Error::Locked(format!(
            "{reason}; meanwhile {what}: the archive was written, then removed again (nothing is committed: run the backup again)"
        )),
        Err(e) if e.is_not_found() => Error::Locked(format!(
            "{reason}; meanwhile {what}, and the archive is gone (nothing is committed: run the backup again)"
        )),
        Err(e) => Error::Locked(format!(
            "{reason}; meanwhile {what}, and the archive {} could not be removed ({e}): it does not restore, delete it with cairn delete aid:{}",
            archive.id.object_name(),
            &archive.id.to_hex()[..8]
        )),
    }
}

/// The archive `archive` was written in place of, when it names one that no longer exists.
fn predecessor_gone(repo: &Repository, archive: &SealedArchive) -> Option<ArchiveId> {
    let meta = archives::open_object(repo, &archive.id, &archive.object).ok()?;
    let old = meta.replaces?;
    match repo.store().info(&old.object_name()) {
        Err(e) if e.is_not_found() => Some(old),
        _ => None,
    }
}

/// After a lost lock: the fragments of `fragments` that name packs now gone or being deleted
/// are removed (best effort; what is left is told by `check` and cleaned by `compact`).
pub(super) fn withdraw(repo: &Repository, fragments: &[String]) {
    let store = repo.store();
    let (Ok(existing), Ok(retired)) = (
        persist::list_packs(&**store),
        Retired::load(&**store, repo.crypto()),
    ) else {
        return;
    };
    let doomed = retired.doomed();
    for name in fragments {
        let names_lost = store
            .get_bounded(name, crate::index::fragment::MAX_OBJECT_LEN)
            .ok()
            .and_then(|b| persist::verify_fragment(repo.crypto(), name, &b).ok())
            .is_some_and(|f| {
                f.packs
                    .iter()
                    .any(|p| !existing.contains_key(p) || doomed.contains(p))
            });
        if names_lost {
            let _ = store.delete(name);
        }
    }
}

/// [`withdraw`] when `cause` is a lost lock.
pub(super) fn withdraw_if_lost(repo: &Repository, fragments: &[String], cause: &Error) {
    if matches!(cause, Error::Locked(_)) && !fragments.is_empty() {
        withdraw(repo, fragments);
    }
}
