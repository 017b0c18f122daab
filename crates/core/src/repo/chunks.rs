//! Reading one chunk back: from the store by the index, or from a blob already read, each
//! authenticated, decrypted and checked by recomputing its id.

use super::Repository;
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind};
use crate::index::{ChunkIndex, StoredLoc};
use crate::store::ByteRange;
use crate::util::id::{ChunkId, PackId};

impl Repository {
    /// Reads, authenticates, decrypts and checks (by recomputing its id) one stored chunk.
    pub fn read_chunk(&self, index: &ChunkIndex, id: &ChunkId) -> Result<Vec<u8>> {
        let (pack, loc) = index
            .stored(id)
            .ok_or_else(|| Error::corrupt(format!("chunk {id}"), "not in the index (missing)"))?;
        let name = pack.object_name();
        let blob = self.store().get(
            &name,
            Some(ByteRange::new(u64::from(loc.offset), u64::from(loc.len))),
        )?;
        self.open_chunk(id, &blob, &name)
    }

    /// Whether the copy of chunk `id` at `loc` in `pack` can be read: its blob opens and its
    /// id is recomputed. What maintenance asks before it lets another copy go.
    pub fn copy_authenticates(&self, pack: &PackId, loc: &StoredLoc, id: &ChunkId) -> bool {
        let name = pack.object_name();
        let range = ByteRange::new(u64::from(loc.offset), u64::from(loc.len));
        self.store()
            .get(&name, Some(range))
            .is_ok_and(|blob| self.open_chunk(id, &blob, &name).is_ok())
    }

    /// Authenticates and decrypts a chunk's blob read from `pack_name`, and recomputes its id.
    pub fn open_chunk(&self, id: &ChunkId, blob: &[u8], pack_name: &str) -> Result<Vec<u8>> {
        blob::open(self.crypto(), BlobKind::Chunk, &id.0, blob, "chunk")
            .map_err(|e| name_chunk(e, id, pack_name))
    }

    /// [`open_chunk`](Self::open_chunk) into `out[at..at + len]` (see [`blob::open_into`]).
    pub fn open_chunk_into(
        &self,
        (id, blob, pack_name): (&ChunkId, &[u8], &str),
        out: &mut Vec<u8>,
        at: usize,
        len: usize,
    ) -> Result<()> {
        blob::open_into(
            self.crypto(),
            BlobKind::Chunk,
            &id.0,
            blob,
            "chunk",
            (out, at, len),
        )
        .map_err(|e| name_chunk(e, id, pack_name))
    }
}

/// An error from opening a chunk, naming it (its id and its pack). The name is made only for
/// an error: made for every chunk opened, it was 4 % of the CPU that `export-tar` of 20,000
/// small files took.
fn name_chunk(e: Error, id: &ChunkId, pack_name: &str) -> Error {
    match e {
        Error::Corrupt { reason, .. } => {
            Error::corrupt(format!("chunk {id} in {pack_name}"), reason)
        }
        other => other,
    }
}
