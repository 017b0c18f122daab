//! Loading, checking and saving the chunk index.
//!
//! - [`load`] merges every fragment under `index/`, verifying each against its name (sha256)
//!   and authenticating it; a damaged or forged fragment is skipped and reported.
//! - [`save_unpersisted`] writes the stored entries no fragment holds yet as new fragments (of
//!   at most [`FRAGMENT_ENTRIES`] each).
//!   It is called only right after a flush barrier, and refuses to run while anything is
//!   pending.

use std::collections::HashMap;

use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::id::{ChunkId, PackId};
use crate::index::fragment::{self, IndexFragment};
use crate::index::{ChunkIndex, StoredLoc};
use crate::store::{Store, StoreError};

/// A damaged object found while loading, with the reason.
#[derive(Debug)]
pub struct Damage {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct LoadReport {
    pub fragments: Vec<String>,
    pub damaged_fragments: Vec<Damage>,
    /// Locations of chunks that an earlier fragment already placed elsewhere (two sessions
    /// stored the same chunk, or a lost pack's chunks were stored again): kept so that
    /// reconciling can fall back on them when the first location's pack is gone
    /// (`crate::repo::reconcile`).
    pub alternates: Vec<Alternate>,
}

/// A second location of a chunk, from another fragment.
#[derive(Clone, Copy, Debug)]
pub struct Alternate {
    pub id: ChunkId,
    pub pack: PackId,
    pub loc: StoredLoc,
}

/// Reads and merges all index fragments.
pub fn load(store: &dyn Store, crypto: &Crypto) -> Result<(ChunkIndex, LoadReport)> {
    let mut index = ChunkIndex::new();
    let mut report = LoadReport::default();
    // Every entry read, in order, then sorted into the index once. Room is made for each
    // fragment's entries once it has authenticated (never from the sizes a listing claims).
    let mut loaded: Vec<(ChunkId, StoredLoc)> = Vec::new();
    for obj in store.list("index")? {
        let bytes = match store.get_bounded(&obj.name, fragment::MAX_OBJECT_LEN) {
            Ok(b) => b,
            // Deleted between list and get (compact replaced it): its entries are elsewhere.
            Err(e) if e.is_not_found() => continue,
            Err(e @ StoreError::TooLarge { .. }) => {
                report.damaged_fragments.push(Damage {
                    name: obj.name,
                    reason: e.to_string(),
                });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let verified = verify_fragment(crypto, &obj.name, &bytes);
        drop(bytes);
        match verified {
            Ok(frag) => {
                let numbers: Vec<u32> = frag.packs.iter().map(|p| index.number_pack(*p)).collect();
                loaded.reserve_exact(frag.entries.len());
                loaded.extend(frag.entries.iter().map(|e| {
                    let loc = StoredLoc {
                        pack: numbers[e.pack as usize],
                        offset: e.offset,
                        len: e.len,
                        plain_len: e.plain_len,
                    };
                    (e.id, loc)
                }));
                report.fragments.push(obj.name);
            }
            Err(e) => report.damaged_fragments.push(Damage {
                name: obj.name,
                reason: e.to_string(),
            }),
        }
    }
    for (id, pack, loc) in index.add_loaded(loaded) {
        report.alternates.push(Alternate {
            id,
            pack,
            loc: StoredLoc { pack: 0, ..loc },
        });
    }
    Ok((index, report))
}

/// Checks a fragment's bytes against its name, authenticates and decodes it.
pub fn verify_fragment(crypto: &Crypto, name: &str, bytes: &[u8]) -> Result<IndexFragment> {
    if IndexFragment::object_name(bytes) != name {
        return Err(Error::corrupt(
            name,
            "contents do not match the name (sha256)",
        ));
    }
    IndexFragment::open(crypto, bytes, name)
}

/// Gives chunks that lost their location (its pack is gone) an alternate one from another
/// fragment, in a pack that `exists` (with its size). Returns how many were placed.
pub fn refill(
    index: &mut ChunkIndex,
    alternates: &[Alternate],
    exists: impl Fn(&PackId) -> Option<u64>,
) -> usize {
    let mut placed = 0;
    for a in alternates {
        let end = u64::from(a.loc.offset) + u64::from(a.loc.len);
        if exists(&a.pack).is_some_and(|size| size >= end)
            && index.insert_stored(a.id, a.pack, a.loc.offset, a.loc.len, a.loc.plain_len, true)
        {
            placed += 1;
        }
    }
    placed
}

/// Parses `packs/xx/<hex>` into a pack id.
pub fn pack_id_of(name: &str) -> Option<PackId> {
    let rest = name.strip_prefix("packs/")?;
    let (dir, hex) = rest.split_once('/')?;
    let id = PackId::from_hex(hex).ok()?;
    (dir.len() == 2 && hex.starts_with(dir)).then_some(id)
}

/// Lists the packs that exist, with their sizes.
pub fn list_packs(store: &dyn Store) -> Result<HashMap<PackId, u64>> {
    Ok(store
        .list("packs")?
        .into_iter()
        .filter_map(|o| pack_id_of(&o.name).map(|id| (id, o.size)))
        .collect())
}

/// Entries in one fragment that a session writes. Building and sealing a fragment holds
/// about 250 bytes per entry at once (the entries sorted, encoded, compressed, encrypted): a
/// first backup of a million files held 250 MB for it at its commit. Fragments of at most
/// this many entries hold 25 MB, and a million chunks load from 10 of them.
pub const FRAGMENT_ENTRIES: usize = 100_000;

/// Writes the not-yet-persisted stored entries as new fragments of at most
/// [`FRAGMENT_ENTRIES`] each, one after another; returns how many. Refused while entries are
/// pending. The entries count as persisted only once every fragment is durable; after a
/// failure part way, the fragments already written are valid and loading keeps the first
/// copy of an entry written twice.
pub fn save_unpersisted(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
) -> Result<usize> {
    save_unpersisted_in(store, crypto, index, FRAGMENT_ENTRIES)
}

fn save_unpersisted_in(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    max: usize,
) -> Result<usize> {
    let mut written = 0;
    for frag in index.unpersisted_fragments(max)? {
        save_fragment(store, crypto, &frag)?;
        written += 1;
    }
    if written > 0 {
        index.mark_persisted();
    }
    Ok(written)
}

/// Writes one fragment; returns its name.
pub fn save_fragment(store: &dyn Store, crypto: &Crypto, frag: &IndexFragment) -> Result<String> {
    let bytes = frag.seal(crypto)?;
    let name = IndexFragment::object_name(&bytes);
    store.put(&name, &bytes)?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::{BlobKind, PackEntry};
    use crate::crypto::{EncryptionMode, MasterKey, Padding};
    use crate::store::mem::MemStore;

    #[test]
    fn a_large_session_is_written_as_bounded_fragments() {
        let crypto = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        );
        let store = MemStore::new();
        let mut idx = ChunkIndex::new();
        // 250 entries in 5 packs.
        for p in 0..5u8 {
            let entries: Vec<PackEntry> = (0..50u32)
                .map(|i| {
                    let mut id = [p; 32];
                    id[..4].copy_from_slice(&i.to_le_bytes());
                    idx.insert_pending(ChunkId(id), 100, 90);
                    PackEntry {
                        id: ChunkId(id),
                        kind: BlobKind::Chunk,
                        offset: 8 + i * 100,
                        len: 100,
                        plain_len: 90,
                    }
                })
                .collect();
            idx.settle(PackId([p; 32]), &entries);
        }
        assert_eq!(
            save_unpersisted_in(&store, &crypto, &mut idx, 100).unwrap(),
            3
        );
        assert_eq!(idx.unpersisted_count(), 0);
        assert_eq!(store.list("index").unwrap().len(), 3);
        assert_eq!(
            save_unpersisted_in(&store, &crypto, &mut idx, 100).unwrap(),
            0
        );
        // Every entry loads back, at its place (the index numbers packs in the order it
        // meets them, which follows the fragments' random names: compare the pack ids).
        let (loaded, report) = load(&store, &crypto).unwrap();
        assert!(report.damaged_fragments.is_empty());
        assert_eq!(loaded.len(), 250);
        let place = |p: PackId, l: StoredLoc| (p, l.offset, l.len, l.plain_len);
        for (id, pack, loc) in idx.iter_stored() {
            let (p, l) = loaded.stored(&id).expect("entry loaded");
            assert_eq!(place(p, l), place(pack, loc));
        }
    }
}
