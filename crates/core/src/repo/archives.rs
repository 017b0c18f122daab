//! Reading archives from the repository: the listing, each object authenticated and decoded,
//! and the chunks an archive references (what the write session's sweep and confirmation
//! need, so it lives below [`crate::archive`]).

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::format::archive::{check_object, ArchiveMeta, MAX_OBJECT_LEN, OBJECT_MAGIC};
use crate::format::blob::{self, BlobKind, NO_ID};
use crate::format::item::{ChunkRef, Item, ItemReader};
use crate::index::ChunkIndex;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId};

/// Reads and authenticates one archive object.
pub fn load(repo: &Repository, id: &ArchiveId) -> Result<ArchiveMeta> {
    load_within(repo, id, MAX_OBJECT_LEN)
}

/// Archive objects are read several at a time only up to this size (that of an archive of
/// some hundred thousand files); a larger one is read again alone, with the reader's bound.
const AT_ONCE_MAX_LEN: u64 = 4 << 20;

/// [`load`], for an object of at most `max` bytes.
fn load_within(repo: &Repository, id: &ArchiveId, max: u64) -> Result<ArchiveMeta> {
    let object = repo.store().get_bounded(&id.object_name(), max)?;
    open_object(repo, id, &object)
}

/// Checks an archive object's bytes against its id, authenticates and decodes it.
pub fn open_object(repo: &Repository, id: &ArchiveId, object: &[u8]) -> Result<ArchiveMeta> {
    let name = id.object_name();
    check_object(id, object)?;
    let plain = blob::open(
        repo.crypto(),
        BlobKind::Archive,
        &NO_ID,
        &object[OBJECT_MAGIC.len()..],
        &name,
    )?;
    ArchiveMeta::decode(&plain, &name)
}

/// Every chunk an archive references: its item stream's, and every file's contents (the item
/// stream is read through `index`).
pub fn chunks_of(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
) -> Result<HashSet<ChunkId>> {
    let mut ids: HashSet<ChunkId> = meta.items.iter().map(|c| c.id).collect();
    for item in items(repo, index, meta) {
        ids.extend(item?.chunks.iter().map(|c| c.id));
    }
    Ok(ids)
}

/// The ids of all archives (from the listing; nothing is read).
pub fn list_ids(repo: &Repository) -> Result<Vec<ArchiveId>> {
    let mut ids = Vec::new();
    for o in repo.store().list("archives")? {
        let id = o
            .name
            .strip_prefix("archives/")
            .and_then(|h| ArchiveId::from_hex(h).ok())
            .ok_or_else(|| Error::corrupt(&o.name, "unexpected object in archives/"))?;
        ids.push(id);
    }
    Ok(ids)
}

/// All archives, oldest first, and the ones that could not be read.
pub struct ArchiveList {
    /// The archives people see: every one that no other archive replaces.
    pub archives: Vec<(ArchiveId, ArchiveMeta)>,
    pub damaged: Vec<(ArchiveId, Error)>,
    /// Archives another archive was written in place of, still there (the change that
    /// replaced them was stopped before it removed them): hidden everywhere, and removed by
    /// the next command that may delete ([`crate::archive::finish_replaced`]).
    pub replaced: Vec<Replaced>,
    /// Archives removed through an append-only connection (`crate::repo::removed`): hidden
    /// from what people see, their data kept until the owner says otherwise.
    pub removed: Vec<RemovedArchive>,
}

/// An archive a client removed through an append-only connection, with when.
pub struct RemovedArchive {
    pub id: ArchiveId,
    pub meta: ArchiveMeta,
    /// When the server recorded the removal (seconds since the epoch).
    pub time: i64,
}

/// The commands that remove a hidden archive, as notes name them.
pub const FINISHERS: &str = "the next delete, prune, compact, rewrite, rename or comment";

/// An archive another archive replaces.
pub struct Replaced {
    pub id: ArchiveId,
    pub meta: ArchiveMeta,
    /// The archive written in its place.
    pub by: ArchiveId,
}

pub fn load_all(repo: &Repository) -> Result<ArchiveList> {
    let mut archives = Vec::new();
    let mut damaged = Vec::new();
    let ids = list_ids(repo)?;
    let readers = crate::store::readers_for(&**repo.store());
    let read = |id: &ArchiveId| (*id, load_within(repo, id, AT_ONCE_MAX_LEN));
    crate::util::parallel::in_order(&ids, readers, read, |(id, got)| {
        let got = match got {
            Err(Error::Store(crate::store::StoreError::TooLarge { .. })) => load(repo, &id),
            got => got,
        };
        match got {
            Ok(m) => archives.push((id, m)),
            Err(Error::Store(e))
                if !e.is_not_found() && !matches!(e, crate::store::StoreError::TooLarge { .. }) =>
            {
                return Err(Error::Store(e))
            }
            Err(e) => damaged.push((id, e)),
        }
        Ok::<(), Error>(())
    })?;
    archives.sort_by(|a, b| (a.1.start, &a.1.name).cmp(&(b.1.start, &b.1.name)));
    // What append-only connections removed is set apart: hidden, kept.
    let removals: std::collections::HashMap<ArchiveId, i64> =
        crate::repo::removed::removals(&**repo.store())?
            .into_iter()
            .map(|r| (r.id, r.time))
            .collect();
    let (archives, removed): (Vec<_>, Vec<_>) = archives
        .into_iter()
        .partition(|(id, _)| !removals.contains_key(id));
    let removed = removed
        .into_iter()
        .map(|(id, meta)| RemovedArchive {
            time: removals[&id],
            id,
            meta,
        })
        .collect();
    // An archive another (readable) archive replaces is hidden. A chain (A replaced by B,
    // B by C) hides all but its last. An archive written through an append-only connection
    // hides nothing: what such a client removes is a removal record, which the owner can
    // take back; letting its word hide an archive would let it remove one for good.
    let appended: HashSet<ArchiveId> = crate::repo::removed::appended(&**repo.store())?
        .into_iter()
        .collect();
    let by: std::collections::HashMap<ArchiveId, ArchiveId> = archives
        .iter()
        .filter(|(id, _)| !appended.contains(id))
        .filter_map(|(id, m)| m.replaces.map(|old| (old, *id)))
        .filter(|(old, new)| old != new)
        .collect();
    let (archives, hidden): (Vec<_>, Vec<_>) = archives
        .into_iter()
        .partition(|(id, _)| !by.contains_key(id));
    let replaced = hidden
        .into_iter()
        .map(|(id, meta)| Replaced {
            by: by[&id],
            id,
            meta,
        })
        .collect();
    Ok(ArchiveList {
        archives,
        damaged,
        replaced,
        removed,
    })
}

/// The items of an archive, read as they are needed.
pub fn items<'a>(
    repo: &'a Repository,
    index: &'a ChunkIndex,
    meta: &ArchiveMeta,
) -> ItemReader<impl FnMut(&ChunkRef) -> Result<Vec<u8>> + 'a> {
    ItemReader::new(meta.items.clone(), move |c: &ChunkRef| {
        repo.read_chunk(index, &c.id)
    })
}

/// Collects all items (for diff and for rebuilding the files cache).
pub fn all_items(repo: &Repository, index: &ChunkIndex, meta: &ArchiveMeta) -> Result<Vec<Item>> {
    items(repo, index, meta).collect()
}
