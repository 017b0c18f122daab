//! The index's locations grouped per pack, and a pack's table of contents compared with them.
//!
//! At ten million chunks a copy of the index's entries per pack took 48 bytes a chunk beside
//! the index's own 50, and every pack's TOC was held until the scan ended (48 bytes a blob
//! more). Now a group is positions in the frozen index (4 bytes a chunk), and a TOC is
//! compared where it is read, then kept only for a repair, which rebuilds the index from it.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::index::persist::Alternate;
use crate::index::{ChunkIndex, IdMap, StoredLoc};
use crate::pack::format::PackEntry;
use crate::util::id::{ChunkId, PackId};

/// The locations some index fragment gives, per pack.
#[derive(Default)]
pub(super) struct ByPack {
    /// The index's own entries, as positions in its frozen base.
    positions: IdMap<PackId, Vec<u32>>,
    /// Other fragments' locations of chunks (second copies, or a copy where the index places
    /// the chunk elsewhere).
    alternates: IdMap<PackId, Vec<(ChunkId, StoredLoc)>>,
}

impl ByPack {
    /// The groups of `index`, which must be frozen ([`ChunkIndex::freeze`]: every entry in
    /// its base, whose positions stay put while nothing changes it), and of `alternates`,
    /// less the ones the index gives itself.
    pub fn new(index: &ChunkIndex, alternates: &[Alternate]) -> Result<Self> {
        if index.base_len() != index.len() || u32::try_from(index.base_len()).is_err() {
            return Err(Error::invalid(format!(
                "an index of {} chunks, {} of them frozen, cannot be grouped per pack",
                index.len(),
                index.base_len()
            )));
        }
        let mut numbered: Vec<Vec<u32>> = vec![Vec::new(); index.packs().len()];
        for position in 0..index.base_len() {
            if let Some((_, _, loc)) = index.base_entry(position) {
                if let Some(group) = numbered.get_mut(loc.pack as usize) {
                    group.push(position as u32);
                }
            }
        }
        let mut positions = IdMap::default();
        for (pack, group) in index.packs().iter().zip(numbered) {
            if !group.is_empty() {
                positions.insert(*pack, group);
            }
        }
        let mut by_pack = Self {
            positions,
            alternates: IdMap::default(),
        };
        for a in alternates {
            let own = index
                .stored(&a.id)
                .is_some_and(|(p, l)| p == a.pack && l.offset == a.loc.offset);
            if !own {
                by_pack
                    .alternates
                    .entry(a.pack)
                    .or_default()
                    .push((a.id, a.loc));
            }
        }
        Ok(by_pack)
    }

    /// Whether some fragment places a chunk in `pack`.
    pub fn contains(&self, pack: &PackId) -> bool {
        self.positions.contains_key(pack) || self.alternates.contains_key(pack)
    }

    /// Every location some fragment gives in `pack`: the index's, then the alternates.
    pub fn entries(&self, index: &ChunkIndex, pack: &PackId) -> Vec<(ChunkId, StoredLoc)> {
        let own = self.positions.get(pack).map(Vec::as_slice).unwrap_or(&[]);
        let more = self.alternates.get(pack).map(Vec::as_slice).unwrap_or(&[]);
        let mut entries = Vec::with_capacity(own.len() + more.len());
        entries.extend(
            own.iter()
                .filter_map(|p| index.base_entry(*p as usize))
                .map(|(id, _, loc)| (id, loc)),
        );
        entries.extend_from_slice(more);
        entries
    }

    /// Every pack some fragment places a chunk in.
    pub fn packs(&self) -> impl Iterator<Item = &PackId> + '_ {
        let more = self
            .alternates
            .keys()
            .filter(|p| !self.positions.contains_key(*p));
        self.positions.keys().chain(more)
    }
}

/// What the scan keeps of a pack's table of contents: how it compares with the locations the
/// index gives there, and the entries themselves only when asked (a repair).
pub(super) struct TocSummary {
    /// The locations (id and offset) the TOC does not list as the index has them.
    pub disagree: HashSet<(ChunkId, u32)>,
    /// Blobs the TOC lists at offsets no location names, and their bytes.
    pub unaccounted: (u64, u64),
    /// The TOC's entries, kept for a repair.
    pub entries: Option<Vec<PackEntry>>,
}

impl TocSummary {
    /// `entries` against `indexed`, the locations the fragments give in this pack.
    pub fn of(entries: Vec<PackEntry>, indexed: &[(ChunkId, StoredLoc)], keep: bool) -> Self {
        let at: std::collections::HashMap<u32, &PackEntry> =
            entries.iter().map(|e| (e.offset, e)).collect();
        let disagree = indexed
            .iter()
            .filter(|(id, loc)| {
                !at.get(&loc.offset).is_some_and(|e| {
                    e.id == *id && e.len == loc.len && e.plain_len == loc.plain_len
                })
            })
            .map(|(id, loc)| (*id, loc.offset))
            .collect();
        let named: HashSet<u32> = indexed.iter().map(|(_, loc)| loc.offset).collect();
        let mut unaccounted = (0, 0);
        for e in entries.iter().filter(|e| !named.contains(&e.offset)) {
            unaccounted.0 += 1;
            unaccounted.1 += u64::from(e.len);
        }
        Self {
            disagree,
            unaccounted,
            entries: keep.then_some(entries),
        }
    }

    /// Whether the TOC lists the chunk at this location as the index has it.
    pub fn agrees(&self, id: &ChunkId, loc: &StoredLoc) -> bool {
        !self.disagree.contains(&(*id, loc.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::blob::BlobKind;

    fn id(i: u32) -> ChunkId {
        ChunkId(crate::util::id::sha256(&i.to_le_bytes()))
    }

    fn loc(offset: u32) -> StoredLoc {
        StoredLoc {
            pack: 0,
            offset,
            len: 10,
            plain_len: 9,
        }
    }

    /// The groups give each pack exactly the locations a plain grouping of the index's
    /// entries and the alternates gives, whatever order the entries were added in; an
    /// alternate the index gives itself (placed there by a refill) is not given twice.
    #[test]
    fn groups_are_the_index_entries_and_alternates_per_pack() {
        let mut index = ChunkIndex::new();
        let packs = [PackId([1; 32]), PackId([2; 32]), PackId([3; 32])];
        for i in 0..300u32 {
            let pack = packs[(i % 2) as usize];
            index.insert_stored(id(i), pack, i * 10, 10, 9, true);
        }
        index.freeze().unwrap();
        let alternates = [
            // A second copy in a third pack.
            Alternate {
                id: id(4),
                pack: packs[2],
                loc: loc(0),
            },
            // The index's own location again.
            Alternate {
                id: id(5),
                pack: packs[1],
                loc: loc(50),
            },
        ];
        let by_pack = ByPack::new(&index, &alternates).unwrap();
        let mut expected: std::collections::HashMap<PackId, Vec<(ChunkId, u32)>> =
            Default::default();
        for (id, pack, loc) in index.iter_stored() {
            expected.entry(pack).or_default().push((id, loc.offset));
        }
        expected.entry(packs[2]).or_default().push((id(4), 0));
        let mut seen: Vec<PackId> = by_pack.packs().copied().collect();
        seen.sort();
        assert_eq!(seen, packs.to_vec());
        for pack in &packs {
            let mut got: Vec<(ChunkId, u32)> = by_pack
                .entries(&index, pack)
                .into_iter()
                .map(|(id, l)| (id, l.offset))
                .collect();
            got.sort();
            let mut want = expected[pack].clone();
            want.sort();
            assert_eq!(got, want, "pack {pack:?}");
            assert!(by_pack.contains(pack));
        }
        assert!(!by_pack.contains(&PackId([9; 32])));
        assert!(by_pack.entries(&index, &PackId([9; 32])).is_empty());
    }

    /// An index with entries outside its frozen base has no stable positions: refused.
    #[test]
    fn an_index_not_frozen_is_refused() {
        let mut index = ChunkIndex::new();
        index.insert_stored(id(1), PackId([1; 32]), 0, 10, 9, true);
        assert!(ByPack::new(&index, &[]).is_err());
    }

    /// A TOC compared with the index's locations: a chunk listed elsewhere, with another
    /// size, or not at all disagrees; a blob no location names is counted with its bytes.
    #[test]
    fn toc_summary_finds_disagreements_and_unnamed_blobs() {
        let entry = |i: u32, offset: u32, len: u32| PackEntry {
            id: id(i),
            kind: BlobKind::Chunk,
            offset,
            len,
            plain_len: 9,
        };
        let toc = vec![
            entry(1, 0, 10),
            entry(2, 10, 10),
            entry(3, 20, 7),
            entry(4, 27, 5),
        ];
        let indexed = [
            (id(1), loc(0)),
            (id(9), loc(10)),
            (id(3), loc(20)),
            (id(5), loc(40)),
        ];
        let s = TocSummary::of(toc.clone(), &indexed, false);
        assert!(s.agrees(&id(1), &loc(0)));
        assert!(!s.agrees(&id(9), &loc(10)), "another chunk at that offset");
        assert!(!s.agrees(&id(3), &loc(20)), "another length");
        assert!(!s.agrees(&id(5), &loc(40)), "nothing at that offset");
        assert_eq!(s.unaccounted, (1, 5));
        assert!(s.entries.is_none());
        assert_eq!(
            TocSummary::of(toc, &indexed, true).entries.map(|e| e.len()),
            Some(4)
        );
    }
}
