//! A write session: chunks in, packs and index fragments out.
//!
//! The [`Uploader`] owns the [`PackWriter`] (which owns the index) and adds what the writer
//! does not decide: keyed ids, deduplication, sealing, and when to persist the index.
//! Persisting happens only right after a flush barrier, at a pack boundary (every N packs or T
//! seconds) and at the end, so a crash loses at most the work since the last checkpoint and no
//! fragment ever names a pack that is not durable. The commit order of every command is:
//! packs durable → index fragment durable → whatever references the chunks.

use std::time::{Duration, Instant};

use crate::blob;
use crate::error::{Error, Result};
use crate::id::ChunkId;
use crate::index::persist;
use crate::index::ChunkIndex;
use crate::pack::writer::{CloseReport, PackOptions, PackWriter, WriterStats};
use crate::repo::Repository;

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

impl CheckpointPolicy {
    /// `CAIRN_CHECKPOINT_PACKS`, `CAIRN_CHECKPOINT_SECS` override the defaults.
    pub fn from_env() -> Result<Self> {
        let mut p = Self::default();
        let num = |var: &str| -> Result<Option<u64>> {
            match std::env::var(var) {
                Ok(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| Error::invalid(format!("{var}={v:?} is not a whole number"))),
                Err(_) => Ok(None),
            }
        };
        if let Some(n) = num("CAIRN_CHECKPOINT_PACKS")? {
            p.every_packs = n.max(1);
        }
        if let Some(s) = num("CAIRN_CHECKPOINT_SECS")? {
            p.every = Duration::from_secs(s);
        }
        Ok(p)
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

pub struct Uploader<'r> {
    repo: &'r Repository,
    writer: PackWriter,
    policy: CheckpointPolicy,
    last_checkpoint: Instant,
    handoffs_at_checkpoint: u64,
    stats: UploadStats,
}

impl<'r> Uploader<'r> {
    pub fn new(
        repo: &'r Repository,
        index: ChunkIndex,
        opts: PackOptions,
        policy: CheckpointPolicy,
    ) -> Self {
        Self {
            repo,
            writer: PackWriter::new(repo.store().clone(), repo.crypto_arc(), index, opts),
            policy,
            last_checkpoint: Instant::now(),
            handoffs_at_checkpoint: 0,
            stats: UploadStats::default(),
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

    /// Whether adding a blob of `len` bytes stores a pack synchronously in this call (only
    /// with `CAIRN_PACK_ASYNC=no`).
    pub fn stores_now(&self, len: usize) -> bool {
        !self.writer.is_async() && self.writer.fills_pack(len)
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
    pub fn checkpoint(&mut self) -> Result<()> {
        self.writer.flush()?;
        let (store, crypto) = (self.repo.store(), self.repo.crypto());
        if persist::save_unpersisted(&**store, crypto, self.writer.index_mut())?.is_some() {
            self.stats.checkpoints += 1;
        }
        self.last_checkpoint = Instant::now();
        self.handoffs_at_checkpoint = self.writer.stats().handoffs;
        Ok(())
    }

    /// Reads back a chunk this session may have just written (read barrier included).
    pub fn read_chunk(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        let blob = self.writer.read_blob(id)?;
        self.repo.open_chunk(id, &blob, "pack")
    }

    /// Success path: everything durable and indexed. Returns the index.
    pub fn finish(mut self) -> Result<ChunkIndex> {
        self.checkpoint()?;
        let (index, _) = self.writer.close();
        Ok(index)
    }

    /// Failure path: waits for the store in flight and discards the buffer, without failing
    /// (the caller is returning an error already).
    pub fn abort(self) -> (ChunkIndex, CloseReport) {
        self.writer.close()
    }
}
