//! Bringing the index in line with the packs that exist: entries of missing or short packs
//! are dropped (so nothing is deduplicated against data that is gone), and packs no fragment
//! names — left by a crash before the index was written, or whose fragment was lost — are
//! indexed from their tables of contents. A writer ([`Adopt::Verified`]) adopts a pack only
//! after reading it whole: its sha256 must be its name, its TOC must authenticate and the
//! blobs must be the ones the TOC lists; a reader ([`Adopt::Toc`]) needs only the TOC, since
//! every blob it reads is authenticated and its id recomputed anyway.
//!
//! It sits in the repository layer because it needs both the index and the pack format.

use std::collections::{HashMap, HashSet};

use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::format::blob::BlobKind;
use crate::index::persist::{list_packs, refill, Alternate, Damage};
use crate::index::ChunkIndex;
use crate::pack::format;
use crate::store::Store;
use crate::util::id::PackId;

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
    /// Entries in retired packs, left out.
    pub retired_entries: usize,
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

/// Brings the index in line with the packs that exist (see the module doc): entries of missing
/// or short packs are dropped, and their chunks fall back on `alternates` (other fragments'
/// locations) in packs that exist. With `adopt`, packs no fragment names are indexed too.
/// `retired` packs (`repo/retire.rs`) count as missing: a writer never deduplicates against a
/// pack that is being deleted or waits to be, nor adopts one.
pub fn reconcile(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    alternates: &[Alternate],
    adopt: Option<Adopt>,
    retired: &HashSet<PackId>,
) -> Result<ReconcileReport> {
    let mut existing = list_packs(store)?;
    let mut report = ReconcileReport::default();
    // Retired packs are neither indexed nor adopted (and never reported missing).
    let retired_here: Vec<PackId> = existing
        .keys()
        .filter(|p| retired.contains(p))
        .copied()
        .collect();
    for p in &retired_here {
        existing.remove(p);
    }
    report.retired_entries = index.forget_packs(&retired_here);

    // How far into each pack the index reaches.
    let mut reach: HashMap<PackId, u64> = HashMap::new();
    for (_, pack, loc) in index.iter_stored() {
        let end = u64::from(loc.offset) + u64::from(loc.len);
        let r = reach.entry(pack).or_insert(0);
        *r = (*r).max(end);
    }
    let gone = gone_packs(&reach, &existing, retired, &mut report);
    report.dropped_entries = index.forget_packs(&gone);
    if !gone.is_empty() {
        refill(index, alternates, |p| existing.get(p).copied());
    }
    for a in alternates {
        reach.entry(a.pack).or_insert(0);
    }
    for p in &retired_here {
        reach.entry(*p).or_insert(0);
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
        adopt_pack(
            store,
            crypto,
            index,
            (pack, existing[&pack]),
            adopt,
            &mut report,
        )?;
    }
    report.missing_packs.sort();
    report.short_packs.sort();
    Ok(report)
}

/// The packs whose entries go: those the index reaches into that do not exist (reported
/// missing, unless `retired`) or are too short for it (reported short).
fn gone_packs(
    reach: &HashMap<PackId, u64>,
    existing: &HashMap<PackId, u64>,
    retired: &HashSet<PackId>,
    report: &mut ReconcileReport,
) -> Vec<PackId> {
    let mut gone = Vec::new();
    for (pack, end) in reach {
        match existing.get(pack) {
            None if retired.contains(pack) => gone.push(*pack),
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
    gone
}

/// Indexes one pack no fragment names, of `size` bytes, once it is found genuine as `adopt`
/// asks; one that is not is reported damaged, one gone meanwhile is passed over, and a failing
/// store is an error.
fn adopt_pack(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    (pack, size): (PackId, u64),
    adopt: Adopt,
    report: &mut ReconcileReport,
) -> Result<()> {
    // The table of contents first, always (a bounded ranged read, authenticated): an object a
    // host planted under a pack's name is refused without being read whole.
    let toc = format::read_toc(store, crypto, &pack, size);
    let entries = match adopt {
        Adopt::Verified => toc.and_then(|_| format::read_verified_entries(store, crypto, &pack)),
        Adopt::Toc => toc.map(|t| t.entries),
    };
    match entries {
        Ok(entries) => {
            for e in entries.iter().filter(|e| e.kind == BlobKind::Chunk) {
                index.insert_stored(e.id, pack, e.offset, e.len, e.plain_len, false);
            }
            report.adopted_packs.push(pack);
        }
        Err(Error::Store(e)) if e.is_not_found() => {}
        // Larger than any pack: damage the host made, not a failing store.
        Err(Error::Store(e @ crate::store::StoreError::TooLarge { .. })) => {
            report.damaged_packs.push(Damage {
                name: pack.object_name(),
                reason: e.to_string(),
            })
        }
        Err(Error::Store(e)) => return Err(e.into()),
        Err(e) => report.damaged_packs.push(Damage {
            name: pack.object_name(),
            reason: e.to_string(),
        }),
    }
    Ok(())
}

/// Indexes, from their tables of contents, the `retired` packs that exist and that no entry of
/// `index` reaches (entries already there win). Returns how many packs were read.
pub fn adopt_retired(
    store: &dyn Store,
    crypto: &Crypto,
    index: &mut ChunkIndex,
    retired: &HashSet<PackId>,
) -> Result<usize> {
    if retired.is_empty() {
        return Ok(0);
    }
    let reached: HashSet<PackId> = index.iter_stored().map(|(_, p, _)| p).collect();
    let mut read = 0;
    for (pack, size) in list_packs(store)? {
        if !retired.contains(&pack) || reached.contains(&pack) {
            continue;
        }
        match format::read_toc(store, crypto, &pack, size) {
            Ok(toc) => {
                for e in toc.entries.iter().filter(|e| e.kind == BlobKind::Chunk) {
                    index.insert_stored(e.id, pack, e.offset, e.len, e.plain_len, true);
                }
                read += 1;
            }
            Err(Error::Store(e)) if e.is_not_found() => {}
            Err(Error::Store(e)) => return Err(e.into()),
            // A retired pack that does not open is of no use to anyone: left to check.
            Err(_) => {}
        }
    }
    Ok(read)
}
