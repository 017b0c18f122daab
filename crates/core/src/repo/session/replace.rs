//! A session that ends by committing an archive in place of another (`rename`, `comment`,
//! `rewrite`, `check --repair`): two steps, the new archive (whose meta names the one it
//! replaces) and then the removal of the old one. Between them, readers show only the new
//! one ([`crate::repo::archives::ArchiveList::replaced`]), so the change looks whole to every
//! other client, and the next command that may delete finishes it if this one stops.
//!
//! The old archive is removed only while the lock is ours, read back from the store right
//! before; the lock is read once more after. A relabel paused between its commit and the
//! removal (SIGSTOP, a suspend) while a cron `prune` watched its lock go stale once lost a
//! whole series: the prune kept the old archive and pruned the new, and the relabel then
//! removed the old one (issue 44). Now a lost lock means no removal, and the command ends by
//! looking at what the repository holds: exactly one archive of the new content (the old one
//! gone or hidden) is a warning; anything else fails (exit 2) saying what is there.

use std::collections::HashSet;

use super::{SealedArchive, WriteSession};
use crate::error::{Error, Result};
use crate::index::ChunkIndex;
use crate::repo::archives;
use crate::repo::lock::{Confirmed, LockKind};
use crate::repo::Repository;
use crate::util::id::ArchiveId;

/// An archive committed in place of another.
pub struct Replacement {
    pub id: ArchiveId,
    pub index: ChunkIndex,
    /// What to tell the user when the lock was lost on the way but the repository holds
    /// exactly the new archive (exit 1).
    pub warning: Option<String>,
}

fn aid(id: &ArchiveId) -> String {
    format!("aid:{}", &id.to_hex()[..8])
}

impl WriteSession<'_> {
    /// Commits `archive` in place of `old`: see the module doc.
    pub(super) fn replace_archive(
        self,
        old: &ArchiveId,
        archive: &SealedArchive,
    ) -> Result<Replacement> {
        let repo = self.repo;
        repo.require_lock(LockKind::Exclusive)?;
        let (id, index) = self.commit_archive(archive)?;
        if id == *old {
            return Ok(Replacement {
                id,
                index,
                warning: None,
            });
        }
        // Whether the lock was still ours once the new archive had landed: then nobody could
        // have removed the old one before it (what removes it later sees the new one, and
        // finishes the replacement).
        let held = repo.lock_ok().is_ok();
        let ended = |reason: &str, removed_old| Ended {
            reason: reason.to_string(),
            removed_old,
            held_at_commit: held,
        };
        if let Err(lost) = repo.verify_lock(LockKind::Exclusive) {
            return settle(repo, old, id, index, ended(&lost.to_string(), false));
        }
        match repo.store().delete(&old.object_name()) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(Error::Invalid(format!(
                    "archive {} is committed, but the archive it replaces, {}, could not be removed ({e}); {} is hidden, and {} removes it",
                    aid(&id),
                    aid(old),
                    aid(old),
                    archives::FINISHERS
                )))
            }
        }
        match repo.confirm_lock()? {
            Confirmed::Held => Ok(Replacement {
                id,
                index,
                warning: None,
            }),
            Confirmed::Lost(reason) => settle(repo, old, id, index, ended(&reason, true)),
        }
    }
}

/// How a replacement ended once its lock was found lost.
struct Ended {
    reason: String,
    /// Whether this command removed the old archive.
    removed_old: bool,
    /// Whether the lock was ours when the new archive had landed.
    held_at_commit: bool,
}

/// After the lock was lost around a replacement of `old` by `new`: what the repository holds
/// now decides. Exactly `new` (the old one gone or hidden by it): a warning. Anything else:
/// an error saying what is there.
fn settle(
    repo: &Repository,
    old: &ArchiveId,
    new: ArchiveId,
    index: ChunkIndex,
    ended: Ended,
) -> Result<Replacement> {
    let Ended {
        reason,
        removed_old,
        held_at_commit,
    } = ended;
    let ids: HashSet<ArchiveId> = archives::list_ids(repo)?.into_iter().collect();
    let (has_new, has_old) = (ids.contains(&new), ids.contains(old));
    let rivals = rivals(repo, old, &new)?;
    let lost = format!("the repository lock was lost while this command ran ({reason})");
    if !has_new {
        return Err(Error::Locked(format!(
            "{lost}: the archive it wrote, {}, was removed by another client meanwhile; {}",
            aid(&new),
            if has_old {
                format!("{} is still in the repository", aid(old))
            } else {
                format!("{} is gone too", aid(old))
            }
        )));
    }
    if !rivals.is_empty() {
        return Err(Error::Locked(format!(
            "{lost}: another client also wrote {} in place of {}; the repository holds {} (this command's) and {}: delete the one you do not want with cairn delete",
            rivals.join(", "),
            aid(old),
            aid(&new),
            rivals.join(", ")
        )));
    }
    if !has_old && !removed_old && !held_at_commit {
        // Either that client removed it as the last step of this change (it found the new
        // archive in its place), or it deleted the archive before the new one landed; which,
        // this command cannot tell. The new one is the only copy in the first case: kept.
        return Ok(Replacement {
            id: new,
            index,
            warning: Some(format!(
                "{lost}: {} is gone: another client removed it while this command was stopped, either finishing this change (it found {} written in place of it) or deleting the archive before {} landed. {} is in the repository; if that client deleted the archive on purpose, delete {} as well",
                aid(old),
                aid(&new),
                aid(&new),
                aid(&new),
                aid(&new)
            )),
        });
    }
    Ok(Replacement {
        id: new,
        index,
        warning: Some(replaced_anyway(&lost, old, &new, has_old, removed_old)),
    })
}

/// The archives other than `new` written in place of `old` (hidden ones too), by id.
fn rivals(repo: &Repository, old: &ArchiveId, new: &ArchiveId) -> Result<Vec<String>> {
    let list = archives::load_all(repo)?;
    Ok(list
        .archives
        .iter()
        .map(|(id, m)| (id, m))
        .chain(list.replaced.iter().map(|r| (&r.id, &r.meta)))
        .filter(|(id, m)| *id != new && m.replaces == Some(*old))
        .map(|(id, _)| aid(id))
        .collect())
}

/// The warning when the repository holds exactly `new` in place of `old` though the lock was
/// lost (`lost` says so): `old` still there and hidden (`has_old`), or removed, by this
/// command (`removed_old`) or by the other client.
fn replaced_anyway(
    lost: &str,
    old: &ArchiveId,
    new: &ArchiveId,
    has_old: bool,
    removed_old: bool,
) -> String {
    if has_old {
        format!(
            "{lost}: archive {} is written in place of {}, which stays hidden until {} removes it",
            aid(new),
            aid(old),
            archives::FINISHERS
        )
    } else {
        format!(
            "{lost}: archive {} is written in place of {}, which is removed{}",
            aid(new),
            aid(old),
            if removed_old {
                ""
            } else {
                " (by the other client, which found it replaced)"
            }
        )
    }
}
