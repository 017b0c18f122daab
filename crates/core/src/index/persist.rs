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
use crate::index::fragment::{self, IndexFragment};
use crate::index::{ChunkIndex, StoredLoc};
use crate::store::{ObjectInfo, Store, StoreError};
use crate::util::id::{ChunkId, PackId};

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

/// One listed fragment, fetched and authenticated.
enum Fetched {
    Fragment(IndexFragment),
    /// Deleted between list and get (compact replaced it): its entries are elsewhere.
    Gone,
    Damaged(String),
    /// Over the bound it was fetched with.
    Large,
}

/// Fragments are fetched several at a time only up to this size (a backup's fragments hold
/// at most [`FRAGMENT_ENTRIES`], some 5 MB); a larger one (compact's whole index) is fetched
/// again alone, with the reader's bound. So a store that serves huge objects gets only this
/// much memory per reading thread and per fetched fragment waiting for its turn (at most
/// twice as many as threads) beyond what reading them one at a time would take.
const AT_ONCE_MAX_LEN: u64 = 32 << 20;

/// Fetches fragment `name` (at most `max` bytes) and authenticates it.
fn fetch_fragment(store: &dyn Store, crypto: &Crypto, name: &str, max: u64) -> Result<Fetched> {
    let bytes = match store.get_bounded(name, max) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(Fetched::Gone),
        Err(StoreError::TooLarge { .. }) if max < fragment::MAX_OBJECT_LEN => {
            return Ok(Fetched::Large)
        }
        Err(e @ StoreError::TooLarge { .. }) => return Ok(Fetched::Damaged(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    Ok(match verify_fragment(crypto, name, &bytes) {
        Ok(frag) => Fetched::Fragment(frag),
        Err(e) => Fetched::Damaged(e.to_string()),
    })
}

/// Reads and merges all index fragments.
pub fn load(store: &dyn Store, crypto: &Crypto) -> Result<(ChunkIndex, LoadReport)> {
    load_in(store, crypto, AT_ONCE_MAX_LEN)
}

/// [`load`], fetching fragments of up to `at_once` bytes several at a time.
fn load_in(store: &dyn Store, crypto: &Crypto, at_once: u64) -> Result<(ChunkIndex, LoadReport)> {
    let mut index = ChunkIndex::new();
    let mut report = LoadReport::default();
    // Every entry read, in order, then sorted into the index once. Room is made for each
    // fragment's entries once it has authenticated (never from the sizes a listing claims).
    let mut loaded: Vec<(ChunkId, StoredLoc)> = Vec::new();
    let listed = store.list("index")?;
    // Fetched and authenticated several at a time (a round trip each on a remote store), and
    // merged in the listing's order: where two fragments place a chunk, the first one wins.
    let fetch = |obj: &ObjectInfo| fetch_fragment(store, crypto, &obj.name, at_once);
    let mut names = listed.iter().map(|o| &o.name);
    crate::util::parallel::in_order(&listed, crate::store::readers_for(store), fetch, |got| {
        let name = names.next().cloned().unwrap_or_default();
        let got = match got? {
            // Larger than fragments several at a time may be: alone, with the reader's bound.
            Fetched::Large => fetch_fragment(store, crypto, &name, fragment::MAX_OBJECT_LEN)?,
            got => got,
        };
        match got {
            Fetched::Gone => {}
            Fetched::Fragment(frag) => {
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
                report.fragments.push(name);
            }
            Fetched::Damaged(reason) => report.damaged_fragments.push(Damage { name, reason }),
            Fetched::Large => report.damaged_fragments.push(Damage {
                name,
                reason: "larger than any index fragment may be".into(),
            }),
        }
        Ok::<(), Error>(())
    })?;
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
/// [`FRAGMENT_ENTRIES`] each, one after another; returns their names. Refused while entries are
/// pending. The entries count as persisted only once every fragment is durable; after a
/// failure part way, the fragments already written are valid and loading keeps the first
/// copy of an entry written twice.
pub fn save_unpersisted(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
) -> Result<Vec<String>> {
    save_unpersisted_in(store, crypto, index, FRAGMENT_ENTRIES)
}

fn save_unpersisted_in(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    max: usize,
) -> Result<Vec<String>> {
    let mut written = Vec::new();
    for frag in index.unpersisted_fragments(max)? {
        written.push(save_fragment(store, crypto, &frag)?);
    }
    if !written.is_empty() {
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
    use crate::format::blob::{BlobKind, PackEntry};
    use crate::store::mem::MemStore;

    fn crypto() -> Crypto {
        Crypto::random_for_tests()
    }

    /// 250 stored entries in 5 packs, none persisted yet.
    fn five_packs() -> ChunkIndex {
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
        idx
    }

    fn place(p: PackId, l: StoredLoc) -> (PackId, u32, u32, u32) {
        (p, l.offset, l.len, l.plain_len)
    }

    #[test]
    fn a_large_session_is_written_as_bounded_fragments() {
        let crypto = crypto();
        let store = MemStore::new();
        let mut idx = five_packs();
        assert_eq!(
            save_unpersisted_in(&store, &crypto, &mut idx, 100)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(idx.unpersisted_count(), 0);
        assert_eq!(store.list("index").unwrap().len(), 3);
        assert_eq!(
            save_unpersisted_in(&store, &crypto, &mut idx, 100)
                .unwrap()
                .len(),
            0
        );
        // Every entry loads back, at its place (the index numbers packs in the order it
        // meets them, which follows the fragments' random names: compare the pack ids).
        let (loaded, report) = load(&store, &crypto).unwrap();
        assert!(report.damaged_fragments.is_empty());
        assert_eq!(loaded.len(), 250);
        for (id, pack, loc) in idx.iter_stored() {
            let (p, l) = loaded.stored(&id).expect("entry loaded");
            assert_eq!(place(p, l), place(pack, loc));
        }
    }

    /// A memory store that says it is remote: its fragments are fetched eight at a time.
    struct Far(std::sync::Arc<dyn Store>);

    impl crate::store::wrapper::Wrapper for Far {
        fn inner(&self) -> &std::sync::Arc<dyn Store> {
            &self.0
        }

        fn get_into(
            &self,
            name: &str,
            range: Option<crate::store::ByteRange>,
            buf: &mut Vec<u8>,
        ) -> crate::store::StoreResult<()> {
            self.inner().get_into(name, range, buf)
        }
        fn put_releasing(
            &self,
            name: &str,
            data: Vec<u8>,
            release: crate::store::Release<'_>,
        ) -> crate::store::StoreResult<()> {
            self.0.put_releasing(name, data, release)
        }
        fn is_remote(&self) -> bool {
            true
        }
    }

    /// Fetched eight at a time, or each alone because it is over the bound for that: the same
    /// entries, the same damaged fragments in the same order, and where two fragments place
    /// a chunk, the first in the listing wins either way.
    #[test]
    fn fragments_merge_the_same_fetched_together_or_alone() {
        let crypto = crypto();
        let store = Far(std::sync::Arc::new(MemStore::new()));
        let mut idx = five_packs();
        assert_eq!(
            save_unpersisted_in(&store, &crypto, &mut idx, 20)
                .unwrap()
                .len(),
            13
        );
        // The same chunk placed again in another pack, by a later session.
        let again = idx.iter_stored().next().unwrap().0;
        let mut later = ChunkIndex::new();
        later.insert_pending(again, 100, 90);
        let entry = PackEntry {
            id: again,
            kind: BlobKind::Chunk,
            offset: 8,
            len: 100,
            plain_len: 90,
        };
        later.settle(PackId([9; 32]), &[entry]);
        save_unpersisted_in(&store, &crypto, &mut later, 20).unwrap();
        store
            .put(&format!("index/{}", "ab".repeat(32)), b"not a fragment")
            .unwrap();
        store
            .put(&format!("index/{}", "cd".repeat(32)), b"nor this")
            .unwrap();
        let (together, t_report) = load_in(&store, &crypto, AT_ONCE_MAX_LEN).unwrap();
        let (alone, a_report) = load_in(&store, &crypto, 8).unwrap();
        assert_eq!(together.len(), 250);
        assert_eq!(alone.len(), 250);
        let expected = store
            .list("index")
            .unwrap()
            .into_iter()
            .find_map(|o| {
                let f = verify_fragment(&crypto, &o.name, &store.get(&o.name, None).unwrap());
                let f = f.ok()?;
                let e = f.entries.iter().find(|e| e.id == again)?;
                Some(f.packs[e.pack as usize])
            })
            .unwrap();
        let winner = |index: &ChunkIndex| index.stored(&again).unwrap().0;
        assert_eq!(winner(&together), expected);
        assert_eq!(winner(&alone), expected);
        for (id, pack, loc) in idx.iter_stored().filter(|e| e.0 != again) {
            let expected = place(pack, loc);
            let (p, l) = together.stored(&id).unwrap();
            assert_eq!(place(p, l), expected);
            let (p, l) = alone.stored(&id).unwrap();
            assert_eq!(place(p, l), expected);
        }
        let damaged = |r: &LoadReport| -> Vec<String> {
            r.damaged_fragments.iter().map(|d| d.name.clone()).collect()
        };
        assert_eq!(damaged(&t_report).len(), 2);
        assert_eq!(damaged(&t_report), damaged(&a_report));
        assert_eq!(t_report.fragments, a_report.fragments);
        assert_eq!(t_report.alternates.len(), 1);
        assert_eq!(a_report.alternates.len(), 1);
    }
}
