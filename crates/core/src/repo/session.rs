//! A write session: chunks in, packs, index fragments and commits out. It is the only way
//! any command writes to a repository's data, and its ends are the one commit protocol.
//!
//! The [`WriteSession`] owns the [`PackWriter`] (which owns the index) and adds what the
//! writer does not decide: keyed ids, deduplication, sealing, and when to persist the index.
//! Persisting happens only right after a flush barrier, at a pack boundary (every N packs or T
//! seconds) and at the end, so a crash loses at most the work since the last checkpoint and no
//! fragment ever names a pack that is not durable.
//!
//! A session exists only inside [`Repository::write`], which lends it to the work done in it
//! and ends it as the work's [`Commit`] says, or with [`WriteSession::stop`] when the work
//! fails: it cannot be left any other way. It ends in exactly one of:
//! - [`WriteSession::commit_archive`] (create, copy): packs durable → lock verified → index
//!   fragment durable → lock verified again, unless the first verification is less than
//!   [`LockTiming::fresh_for`](crate::repo::lock::LockTiming::fresh_for) old by the time since boot
//!   (which counts a suspend) → archive object → lock confirmed ([`confirm`]: if it was lost
//!   meanwhile, the archive is checked against what the client that removed it may have
//!   deleted, and removed again if it needs anything gone);
//! - [`WriteSession::replace_index`] (compact, check --repair; exclusive lock), after
//!   [`WriteSession::announce`] and [`WriteSession::delete_packs`] ([`sweep`]): packs durable
//!   → one full fragment durable → the fragments it replaces deleted → the retired packs it
//!   does not name deleted → the records of the retirement removed;
//! - [`WriteSession::stop`] (any failure): what is durable is indexed when that is safe, a
//!   store failure is never hidden behind an interrupt, and after a lost lock the fragments
//!   this session wrote that name packs now gone are withdrawn.
//!
//! "Lock verified" reads our lock object back ([`crate::repo::lock::Lock::verify`]): a command whose
//! lock was broken (judged abandoned, or `cairn break-lock`) commits nothing.

mod commit;
mod confirm;
mod replace;
mod sweep;

pub(in crate::repo) use commit::run;
pub use commit::Commit;
pub use replace::Replacement;
pub use sweep::{Announced, IndexReplaced};

use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::blob;
use crate::index::persist;
use crate::index::{ChunkIndex, StoredLoc};
use crate::pack::writer::{PackOptions, PackWriter, WriterStats};
use crate::repo::lock::{Confirmed, LockKind};
use crate::repo::Repository;
use crate::util::clock::{self, Mono};
use crate::util::id::{ArchiveId, ChunkId, PackId};

/// When to persist the index during long work.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointPolicy {
    pub every_packs: u64,
    pub every: Duration,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        Self {
            every_packs: 64,
            every: Duration::from_secs(300),
        }
    }
}

/// What a session added.
#[derive(Clone, Copy, Debug, Default)]
pub struct UploadStats {
    /// Chunks passed in, and their plaintext bytes.
    pub chunks: u64,
    pub plain_bytes: u64,
    /// Chunks that were new to the repository, their plaintext and stored (compressed,
    /// encrypted, with headers) bytes.
    pub new_chunks: u64,
    pub new_plain_bytes: u64,
    pub new_stored_bytes: u64,
    /// Index fragments written.
    pub checkpoints: u64,
}

pub struct WriteSession<'r> {
    repo: &'r Repository,
    writer: PackWriter,
    policy: CheckpointPolicy,
    last_checkpoint: Mono,
    handoffs_at_checkpoint: u64,
    stats: UploadStats,
    /// The index fragments this session wrote.
    fragments: Vec<String>,
}

impl<'r> WriteSession<'r> {
    pub(in crate::repo) fn new(
        repo: &'r Repository,
        index: ChunkIndex,
        opts: PackOptions,
        policy: CheckpointPolicy,
    ) -> Self {
        Self {
            repo,
            writer: PackWriter::new(repo.store().clone(), repo.crypto_arc(), index, opts),
            policy,
            last_checkpoint: Mono::now(),
            handoffs_at_checkpoint: 0,
            stats: UploadStats::default(),
            fragments: Vec::new(),
        }
    }

    pub fn repo(&self) -> &'r Repository {
        self.repo
    }

    pub fn index(&self) -> &ChunkIndex {
        self.writer.index()
    }

    pub fn stats(&self) -> UploadStats {
        self.stats
    }

    pub fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }

    /// Freezes the index's stored entries for worker threads (see [`ChunkIndex::freeze`]).
    pub fn freeze_known(&mut self) -> Result<crate::index::KnownChunks> {
        self.writer.index_mut().freeze()
    }

    pub fn has(&self, id: &ChunkId) -> bool {
        self.writer.index().contains(id)
    }

    /// Stores one chunk of plaintext (if new); returns its id.
    pub fn store_chunk(&mut self, data: &[u8]) -> Result<ChunkId> {
        let id = self.repo.crypto().id_of(data);
        self.stats.chunks += 1;
        self.stats.plain_bytes += data.len() as u64;
        if !self.has(&id) {
            let mut blob = Vec::new();
            let crc = blob::seal_into(
                self.repo.crypto(),
                blob::BlobKind::Chunk,
                &id.0,
                data,
                crate::format::compress::Codec::Lz4,
                &mut blob,
            )?;
            self.add_sealed(id, &blob, crc, data.len() as u32)?;
        }
        Ok(id)
    }

    /// Adds a chunk sealed elsewhere (by a worker), with the CRC-32 taken when it was sealed.
    /// Returns whether it was new.
    pub fn add_sealed(
        &mut self,
        id: ChunkId,
        blob: &[u8],
        crc: u32,
        plain_len: u32,
    ) -> Result<bool> {
        let handoffs = self.writer.stats().handoffs;
        let added = self.writer.add_checked(id, plain_len, blob, crc)?;
        if added {
            self.stats.new_chunks += 1;
            self.stats.new_plain_bytes += u64::from(plain_len);
            self.stats.new_stored_bytes += blob.len() as u64;
        }
        if self.writer.stats().handoffs != handoffs {
            self.maybe_checkpoint()?;
        }
        Ok(added)
    }

    /// Whether adding the next blob stores a pack synchronously in this call (only with
    /// `CAIRN_PACK_ASYNC=no`).
    pub fn stores_now(&self) -> bool {
        !self.writer.is_async() && self.writer.fills_pack()
    }

    /// Whether adding the next blob will wait for a pack still being stored (the pipeline is
    /// full): progress can say so rather than look hung.
    pub fn waits_for_store(&self) -> bool {
        self.writer.fills_pack() && self.writer.in_flight()
    }

    /// Counts a chunk that was deduplicated before reaching this session.
    pub fn count_reused(&mut self, plain_len: u64) {
        self.stats.chunks += 1;
        self.stats.plain_bytes += plain_len;
    }

    fn maybe_checkpoint(&mut self) -> Result<()> {
        let packs = self.writer.stats().handoffs - self.handoffs_at_checkpoint;
        if packs >= self.policy.every_packs || self.last_checkpoint.elapsed() >= self.policy.every {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Flush barrier, then persist the new index entries.
    /// The lock is verified before a fragment is written: a session whose lock was broken (a
    /// compact may have deleted packs since) writes nothing that names them. Returns when that
    /// verification began (time since boot), if there was one.
    pub fn checkpoint(&mut self) -> Result<Option<Duration>> {
        self.writer.flush()?;
        let mut verified = None;
        if self.writer.index().unpersisted_count() > 0 {
            verified = Some(clock::since_boot());
            self.repo.verify_lock(LockKind::Shared)?;
        }
        let (store, crypto) = (self.repo.store(), self.repo.crypto());
        let written = persist::save_unpersisted(&**store, crypto, self.writer.index_mut())?;
        if !written.is_empty() {
            self.stats.checkpoints += 1;
            self.fragments.extend(written);
        }
        self.last_checkpoint = Mono::now();
        self.handoffs_at_checkpoint = self.writer.stats().handoffs;
        Ok(verified)
    }

    /// Reads back a chunk this session may have just written (read barrier included).
    pub fn read_chunk(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        let blob = self.writer.read_blob(id)?;
        self.repo.open_chunk(id, &blob, "pack")
    }

    /// Adds a blob sealed earlier (copied out of another pack by compact or repair).
    pub fn add_blob(&mut self, id: ChunkId, plain_len: u32, blob: &[u8]) -> Result<bool> {
        let handoffs = self.writer.stats().handoffs;
        let added = self.writer.add(id, plain_len, blob)?;
        if self.writer.stats().handoffs != handoffs {
            self.maybe_checkpoint()?;
        }
        Ok(added)
    }

    /// Keeps a chunk where it already is (an entry of the index this session will write).
    pub fn keep_stored(&mut self, id: ChunkId, pack: PackId, loc: StoredLoc) {
        self.writer
            .index_mut()
            .insert_stored(id, pack, loc.offset, loc.len, loc.plain_len, false);
    }

    /// Ends the session with its chunks stored and indexed, and nothing referencing them yet
    /// (a later session commits what uses them). Returns the index.
    fn commit_chunks(mut self) -> Result<ChunkIndex> {
        if let Err(e) = self.checkpoint() {
            return Err(self.stop(e));
        }
        Ok(self.writer.close().0)
    }

    /// Ends the session by committing an archive (sealed by [`crate::archive::seal`]).
    /// Returns its id and the index.
    fn commit_archive(mut self, archive: &SealedArchive) -> Result<(ArchiveId, ChunkIndex)> {
        let verified = match self.checkpoint() {
            Ok(v) => v,
            Err(e) => return Err(self.stop(e)),
        };
        // The verification before the index fragment covers the archive too when only writing
        // the fragment came between them, quickly: nobody can have judged the lock abandoned
        // since (that takes watching it unchanged for the whole stale interval). "Quickly" is
        // measured with the time since boot, which counts a suspend: the monotonic clock does
        // not, and after a night suspended would call an evening's verification fresh.
        // What this process knows without asking the store (the refresher found the lock
        // gone, say) is still checked.
        let fresh = verified.is_some_and(|t| {
            clock::since_boot().saturating_sub(t) < self.repo.lock_timing().fresh_for()
        });
        let checked = if fresh {
            self.repo.lock_ok()
        } else {
            self.repo.verify_lock(LockKind::Shared)
        };
        if let Err(e) = checked {
            return Err(self.stop(e));
        }
        let id = archive.id;
        if let Err(e) = self.repo.store().put(&id.object_name(), &archive.object) {
            return Err(self.stop(e.into()));
        }
        let (index, _) = self.writer.close();
        // Every check of the lock passed before the archive's write; the write itself may
        // have stalled (a hung mount, a stuck request, the machine suspended) while another
        // client removed the lock and deleted packs. A lock that is still ours now was ours
        // throughout (a lost lock is never written again).
        match self.repo.confirm_lock()? {
            Confirmed::Held => {}
            Confirmed::Lost(reason) => {
                let note =
                    confirm::after_lost_lock(self.repo, &index, archive, &self.fragments, &reason)?;
                crate::say!("note: {note}");
            }
        }
        Ok((id, index))
    }

    /// Ends a session that failed with `cause`. After an interrupt, what is stored is indexed
    /// (the next backup need not store it again); and if the repository failed (no space,
    /// say), that failure is returned, not hidden behind the interrupt. Otherwise the store in
    /// flight is waited for and the buffer discarded.
    fn stop(mut self, cause: Error) -> Error {
        match cause {
            Error::Interrupted(_) => match self.checkpoint() {
                Ok(_) => cause,
                Err(e) => {
                    self.writer.close();
                    confirm::withdraw_if_lost(self.repo, &self.fragments, &e);
                    Error::FailedWhileInterrupted(Box::new(e))
                }
            },
            cause => {
                self.writer.close();
                confirm::withdraw_if_lost(self.repo, &self.fragments, &cause);
                cause
            }
        }
    }

    /// Ends the session without committing anything new (nothing was added that anything
    /// references); waits for the store in flight.
    fn discard(self) -> ChunkIndex {
        self.writer.close().0
    }
}

/// An archive object ready to commit: its name (the sha256 of its bytes) and its bytes.
pub struct SealedArchive {
    pub id: ArchiveId,
    pub object: Vec<u8>,
}
