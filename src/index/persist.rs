//! Loading, checking and saving the chunk index.
//!
//! - [`load`] merges every fragment under `index/`, verifying each against its name (sha256)
//!   and authenticating it; a damaged or forged fragment is skipped and reported.
//! - [`reconcile`] compares the index with the packs that exist: entries of missing or short
//!   packs are dropped (so nothing is deduplicated against data that is gone), and packs no
//!   fragment names — left by a crash before the index was written, or whose fragment was lost
//!   — are indexed from their tables of contents. A writer ([`Adopt::Verified`]) adopts a pack
//!   only after reading it whole: its sha256 must be its name, its TOC must authenticate and
//!   the blobs must be the ones the TOC lists; a reader ([`Adopt::Toc`]) needs only the TOC,
//!   since every blob it reads is authenticated and its id recomputed anyway.
//! - [`save_unpersisted`] writes the stored entries no fragment holds yet as a new fragment.
//!   It is called only right after a flush barrier, and refuses to run while anything is
//!   pending.

use std::collections::HashMap;

use crate::blob::BlobKind;
use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::id::{ChunkId, PackId};
use crate::index::fragment::{self, IndexFragment};
use crate::index::{ChunkIndex, StoredLoc};
use crate::pack::format;
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
    /// [`reconcile`] can fall back on them when the first location's pack is gone.
    pub alternates: Vec<Alternate>,
}

/// A second location of a chunk, from another fragment.
#[derive(Clone, Copy, Debug)]
pub struct Alternate {
    pub id: ChunkId,
    pub pack: PackId,
    pub loc: StoredLoc,
}

#[derive(Debug, Default)]
pub struct ReconcileReport {
    /// Packs the index names that do not exist; their entries were dropped.
    pub missing_packs: Vec<PackId>,
    /// Packs too short for the index's entries; those entries were dropped.
    pub short_packs: Vec<PackId>,
    /// Packs that were not indexed and have been indexed from their tables of contents.
    pub adopted_packs: Vec<PackId>,
    /// Unindexed packs that could not be read back (wrong hash, malformed, forged).
    pub damaged_packs: Vec<Damage>,
    /// Entries dropped.
    pub dropped_entries: usize,
}

impl ReconcileReport {
    pub fn changed(&self) -> bool {
        self.dropped_entries > 0 || !self.adopted_packs.is_empty()
    }
}

/// How [`reconcile`] makes sure a pack no fragment names is genuine before indexing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adopt {
    /// The TOC authenticates (readers: every blob is verified when read).
    Toc,
    /// The whole pack is read: name, TOC and blob area all check out (writers, which will
    /// deduplicate against it).
    Verified,
}

/// Reads and merges all index fragments.
pub fn load(store: &dyn Store, crypto: &Crypto) -> Result<(ChunkIndex, LoadReport)> {
    let mut index = ChunkIndex::new();
    let mut report = LoadReport::default();
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
        match verify_fragment(crypto, &obj.name, &bytes) {
            Ok(frag) => {
                merge(&mut index, &frag, &mut report.alternates);
                report.fragments.push(obj.name);
            }
            Err(e) => report.damaged_fragments.push(Damage {
                name: obj.name,
                reason: e.to_string(),
            }),
        }
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

fn merge(index: &mut ChunkIndex, frag: &IndexFragment, alternates: &mut Vec<Alternate>) {
    for e in &frag.entries {
        let pack = frag.packs[e.pack as usize];
        if !index.insert_stored(e.id, pack, e.offset, e.len, e.plain_len, true)
            && index
                .stored(&e.id)
                .is_some_and(|(p, l)| (p, l.offset) != (pack, e.offset))
        {
            alternates.push(Alternate {
                id: e.id,
                pack,
                loc: StoredLoc {
                    pack: 0,
                    offset: e.offset,
                    len: e.len,
                    plain_len: e.plain_len,
                },
            });
        }
    }
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

/// Brings the index in line with the packs that exist (see the module doc): entries of missing
/// or short packs are dropped, and their chunks fall back on `alternates` (other fragments'
/// locations) in packs that exist. With `adopt`, packs no fragment names are indexed too.
pub fn reconcile(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    alternates: &[Alternate],
    adopt: Option<Adopt>,
) -> Result<ReconcileReport> {
    let existing = list_packs(store)?;
    let mut report = ReconcileReport::default();

    // How far into each pack the index reaches.
    let mut reach: HashMap<PackId, u64> = HashMap::new();
    for (_, pack, loc) in index.iter_stored() {
        let end = u64::from(loc.offset) + u64::from(loc.len);
        let r = reach.entry(pack).or_insert(0);
        *r = (*r).max(end);
    }
    let mut gone = Vec::new();
    for (pack, end) in &reach {
        match existing.get(pack) {
            None => {
                report.missing_packs.push(*pack);
                gone.push(*pack);
            }
            Some(size) if size < end => {
                report.short_packs.push(*pack);
                gone.push(*pack);
            }
            Some(_) => {}
        }
    }
    report.dropped_entries = index.forget_packs(&gone);
    if !gone.is_empty() {
        refill(index, alternates, |p| existing.get(p).copied());
    }
    for a in alternates {
        reach.entry(a.pack).or_insert(0);
    }
    let Some(adopt) = adopt else {
        return Ok(report);
    };

    let mut unindexed: Vec<PackId> = existing
        .keys()
        .filter(|p| !reach.contains_key(p))
        .copied()
        .collect();
    unindexed.sort();
    for pack in unindexed {
        let entries = match adopt {
            Adopt::Verified => read_pack_entries(store, crypto, &pack),
            Adopt::Toc => {
                format::read_toc(store, crypto, &pack, existing[&pack]).map(|t| t.entries)
            }
        };
        match entries {
            Ok(entries) => {
                for e in entries.iter().filter(|e| e.kind == BlobKind::Chunk) {
                    index.insert_stored(e.id, pack, e.offset, e.len, e.plain_len, false);
                }
                report.adopted_packs.push(pack);
            }
            Err(Error::Store(e)) if e.is_not_found() => {}
            Err(Error::Store(e)) => return Err(e.into()),
            Err(e) => report.damaged_packs.push(Damage {
                name: pack.object_name(),
                reason: e.to_string(),
            }),
        }
    }
    report.missing_packs.sort();
    report.short_packs.sort();
    Ok(report)
}

/// Reads a whole pack, checks it against its name and its TOC, and lists its blobs.
pub fn read_pack_entries(
    store: &dyn Store,
    crypto: &Crypto,
    pack: &PackId,
) -> Result<Vec<format::PackEntry>> {
    let name = pack.object_name();
    let bytes = format::read_whole(store, pack)?;
    let (hash, toc) = format::parse_and_hash(crypto, &bytes, &name);
    if hash != pack.0 {
        return Err(Error::corrupt(
            &name,
            "contents do not match the pack's name (sha256)",
        ));
    }
    Ok(toc?.entries)
}

/// Builds an index from the packs alone (each read whole and verified).
pub fn rebuild(store: &dyn Store, crypto: &Crypto) -> Result<(ChunkIndex, ReconcileReport)> {
    let mut index = ChunkIndex::new();
    let report = reconcile(store, crypto, &mut index, &[], Some(Adopt::Verified))?;
    Ok((index, report))
}

/// Writes the not-yet-persisted stored entries as a new fragment; returns its name. Refused
/// while entries are pending.
pub fn save_unpersisted(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
) -> Result<Option<String>> {
    let Some(frag) = index.unpersisted_fragment()? else {
        return Ok(None);
    };
    let name = save_fragment(store, crypto, &frag)?;
    index.mark_persisted();
    Ok(Some(name))
}

/// Writes one fragment; returns its name.
pub fn save_fragment(store: &dyn Store, crypto: &Crypto, frag: &IndexFragment) -> Result<String> {
    let bytes = frag.seal(crypto)?;
    let name = IndexFragment::object_name(&bytes);
    store.put(&name, &bytes)?;
    Ok(name)
}
