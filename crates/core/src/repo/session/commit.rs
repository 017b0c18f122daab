//! How a write session ends. A session is only ever lent to the work done in it
//! ([`crate::repo::Repository::write`]); the work says how it ends by returning a [`Commit`],
//! and a failure ends it with [`WriteSession::stop`]. There is no third way out: the
//! session's ends are private to this module's parent, so no caller can drop a session half
//! written or forget the stop that indexes what an interrupted run stored.

use super::{Announced, IndexReplaced, Replacement, SealedArchive, WriteSession};
use crate::error::Result;
use crate::index::ChunkIndex;
use crate::util::id::{ArchiveId, PackId};

type End<'r, 'c, T> = Box<dyn FnOnce(WriteSession<'r>) -> Result<T> + 'c>;

/// The end a session's work chose, run once the work has returned.
pub struct Commit<'r, 'c, T> {
    end: End<'r, 'c, T>,
}

impl<'r, 'c> Commit<'r, 'c, ChunkIndex> {
    /// The chunks stored and indexed, and nothing referencing them yet.
    pub fn chunks() -> Self {
        Self::new(WriteSession::commit_chunks)
    }

    /// Nothing new committed (nothing was added that anything references); the store in
    /// flight is waited for.
    pub fn nothing() -> Self {
        Self::new(|s: WriteSession<'r>| Ok(s.discard()))
    }
}

impl<'r, 'c> Commit<'r, 'c, (ArchiveId, ChunkIndex)> {
    /// An archive (sealed by [`crate::archive::seal`]): its id and the index.
    pub fn archive(archive: SealedArchive) -> Self {
        Self::new(move |s: WriteSession<'r>| s.commit_archive(&archive))
    }
}

impl<'r, 'c> Commit<'r, 'c, Replacement> {
    /// An archive in place of archive `old` (relabel, rewrite, check --repair; its meta says
    /// it replaces `old`): the new one is durable before the old one is removed, and the old
    /// one only while the lock is ours (see [`super::replace`]).
    pub fn archive_replacing(old: ArchiveId, archive: SealedArchive) -> Self {
        Self::new(move |s: WriteSession<'r>| s.replace_archive(&old, &archive))
    }
}

impl<'r, 'c> Commit<'r, 'c, IndexReplaced> {
    /// The session's index as the repository's whole index (compact, check --repair), after
    /// [`WriteSession::announce`]: see [`WriteSession::replace_index`].
    pub fn index_replacing(
        replaced: &'c [String],
        retired: Vec<PackId>,
        announced: Announced,
        finished: Vec<String>,
        each: impl Fn(&PackId) + 'c,
    ) -> Self {
        Self::new(move |s: WriteSession<'r>| {
            s.replace_index(replaced, &retired, announced, &finished, each)
        })
    }
}

impl<'r, 'c, T: 'c> Commit<'r, 'c, T> {
    fn new(end: impl FnOnce(WriteSession<'r>) -> Result<T> + 'c) -> Self {
        Self { end: Box::new(end) }
    }

    /// The same end, with `f` applied to what it returns (to carry the work's own results
    /// out beside the commit's).
    pub fn map<U: 'c>(self, f: impl FnOnce(T) -> U + 'c) -> Commit<'r, 'c, U>
    where
        'r: 'c,
    {
        let end = self.end;
        Commit::new(move |s| end(s).map(f))
    }
}

/// Lends `session` to `work`, then ends it as `work` says, or stops it on failure.
pub(in crate::repo) fn run<'r, 'c, T: 'c>(
    mut session: WriteSession<'r>,
    work: impl FnOnce(&mut WriteSession<'r>) -> Result<Commit<'r, 'c, T>>,
) -> Result<T> {
    match work(&mut session) {
        Ok(commit) => (commit.end)(session),
        Err(e) => Err(session.stop(e)),
    }
}
