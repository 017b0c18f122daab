//! The chunk index: chunk id → where its blob lives.
//!
//! The index is owned by one thread (the one driving the [`PackWriter`]); the pack store thread
//! never sees it. A chunk whose pack is still being built or stored is
//! [`Location::Pending`]; only [`Location::Stored`] entries carry a pack and can be persisted.
//! Fragments are built from [`StoredLoc`] values only, and building one while anything is
//! pending is refused, so a persisted fragment can never name a pack that does not exist yet.
//!
//! [`PackWriter`]: crate::pack::writer::PackWriter

pub mod fragment;
pub mod persist;
pub mod session;
pub mod table;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::util::id::{ChunkId, PackId};
use fragment::IndexFragment;
use session::SessionEntries;
use table::KnownTable;

/// Where a stored chunk is: pack (as an index into the pack table), byte range, plain size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredLoc {
    pub pack: u32,
    pub offset: u32,
    pub len: u32,
    pub plain_len: u32,
}

/// A chunk whose pack is being built or stored: its sizes are known, its pack is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingLoc {
    pub len: u32,
    pub plain_len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Buffered in the pack being built, or in the pack being stored.
    Pending(PendingLoc),
    Stored(StoredLoc),
}

impl Location {
    pub fn is_pending(&self) -> bool {
        matches!(self, Location::Pending(_))
    }

    /// Stored length (header included) and plaintext length.
    pub fn sizes(&self) -> (u32, u32) {
        match self {
            Location::Pending(p) => (p.len, p.plain_len),
            Location::Stored(s) => (s.len, s.plain_len),
        }
    }
}

/// Chunk ids are uniformly random already; hashing their first 8 bytes is enough and much
/// cheaper than SipHash on every lookup.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 ^= u64::from(*b) << (i * 8);
        }
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Stored entries frozen at the start of a write session: immutable, shared with worker
/// threads so they can skip sealing chunks the repository already has, without touching the
/// live index. What was loaded from the fragments starts here, in a sorted table of 50 bytes a
/// chunk ([`KnownTable`]).
pub type KnownChunks = Arc<KnownTable>;

/// The chunk index: a frozen base of stored entries plus the entries of the current session
/// (pending or stored), owned by one thread. The two never hold the same id.
#[derive(Default)]
pub struct ChunkIndex {
    base: KnownChunks,
    session: SessionEntries,
    packs: Vec<PackId>,
    pack_numbers: IdMap<PackId, u32>,
    /// Stored entries not yet written to any fragment.
    unpersisted: Vec<ChunkId>,
    /// Second copies of chunks the index places elsewhere (two sessions stored the same
    /// chunk): never read, but written into a full fragment, so that the bytes they take stay
    /// known until compact frees them (issue 44). Loading reports them as alternates.
    spares: Vec<(ChunkId, u32, StoredLoc)>,
}

impl ChunkIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.base.len() + self.session.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pending_count(&self) -> usize {
        self.session.pending()
    }

    pub fn unpersisted_count(&self) -> usize {
        self.unpersisted.len()
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.session.contains(id) || self.base.contains_key(id)
    }

    pub fn get(&self, id: &ChunkId) -> Option<Location> {
        match self.session.get(id) {
            Some(l) => Some(l),
            None => self.base.get(id).map(|l| Location::Stored(*l)),
        }
    }

    /// Entries in the frozen base ([`Self::freeze`]).
    pub fn base_len(&self) -> usize {
        self.base.len()
    }

    /// The position of chunk `id` among the frozen base's entries (`0..base_len()`): a dense
    /// number for a set of chunks kept as bits. `None` for a chunk not in the base.
    pub fn base_position(&self, id: &ChunkId) -> Option<usize> {
        self.base.position_of(id)
    }

    /// The chunk at `position` of the frozen base ([`Self::base_position`]), with its pack and
    /// location.
    pub fn base_entry(&self, position: usize) -> Option<(ChunkId, PackId, StoredLoc)> {
        self.base
            .entry_at(position)
            .map(|(id, l)| (*id, self.packs[l.pack as usize], *l))
    }

    /// The pack and location of a stored chunk.
    pub fn stored(&self, id: &ChunkId) -> Option<(PackId, StoredLoc)> {
        match self.get(id) {
            Some(Location::Stored(loc)) => Some((self.packs[loc.pack as usize], loc)),
            _ => None,
        }
    }

    pub fn pack_id(&self, loc: &StoredLoc) -> PackId {
        self.packs[loc.pack as usize]
    }

    /// Every pack some entry refers to (packs whose entries were all removed may remain).
    pub fn packs(&self) -> &[PackId] {
        &self.packs
    }

    pub fn has_pack(&self, pack: &PackId) -> bool {
        self.pack_numbers.contains_key(pack)
    }

    fn pack_number(&mut self, pack: PackId) -> u32 {
        if let Some(n) = self.pack_numbers.get(&pack) {
            return *n;
        }
        let n = self.packs.len() as u32;
        self.packs.push(pack);
        self.pack_numbers.insert(pack, n);
        n
    }

    /// Moves every stored session entry into the frozen base and returns it, for workers to
    /// consult. Refused while entries are pending (they must stay where the writer settles or
    /// rolls them back).
    pub fn freeze(&mut self) -> Result<KnownChunks> {
        if self.pending_count() > 0 {
            return Err(Error::PendingEntries(self.pending_count()));
        }
        if !self.session.is_empty() {
            let stored = self.session.take_stored();
            Arc::make_mut(&mut self.base).extend(stored);
        }
        Ok(Arc::clone(&self.base))
    }

    /// Adds the entries of every fragment, in the order they were read (pack numbers from
    /// [`Self::number_pack`]), to the frozen base: sorted once, not inserted one by one into
    /// a map. The first entry of an id wins (as an id already known does); each later one in
    /// another place is returned, as an alternate location.
    pub fn add_loaded(
        &mut self,
        mut loaded: Vec<(ChunkId, StoredLoc)>,
    ) -> Vec<(ChunkId, PackId, StoredLoc)> {
        let mut alternates = Vec::new();
        let mut alternate = |id: ChunkId, kept: StoredLoc, other: StoredLoc| {
            if (kept.pack, kept.offset) != (other.pack, other.offset) {
                alternates.push((id, self.packs[other.pack as usize], other));
            }
        };
        // Stable: equal ids stay in the order they were read.
        loaded.sort_by_key(|e| e.0);
        let mut kept = 0;
        for r in 0..loaded.len() {
            let (id, loc) = loaded[r];
            if let Some(known) = self.get(&id) {
                if let Location::Stored(k) = known {
                    alternate(id, k, loc);
                }
            } else if kept > 0 && loaded[kept - 1].0 == id {
                alternate(id, loaded[kept - 1].1, loc);
            } else {
                loaded[kept] = (id, loc);
                kept += 1;
            }
        }
        loaded.truncate(kept);
        if self.base.is_empty() {
            self.base = Arc::new(KnownTable::from_sorted(loaded));
        } else {
            Arc::make_mut(&mut self.base).extend(loaded);
        }
        alternates
    }

    /// The number of `pack` in this index's pack table (added if new), for [`Self::add_loaded`].
    pub fn number_pack(&mut self, pack: PackId) -> u32 {
        self.pack_number(pack)
    }

    /// Marks a new chunk as pending. `false` if the id is already known.
    pub fn insert_pending(&mut self, id: ChunkId, len: u32, plain_len: u32) -> bool {
        if self.contains(&id) {
            return false;
        }
        self.session
            .insert_pending(id, PendingLoc { len, plain_len });
        true
    }

    /// A pack was stored: its pending entries become stored (and unpersisted).
    pub fn settle(&mut self, pack: PackId, entries: &[crate::format::blob::PackEntry]) {
        let n = self.pack_number(pack);
        for e in entries {
            let loc = StoredLoc {
                pack: n,
                offset: e.offset,
                len: e.len,
                plain_len: e.plain_len,
            };
            if self.session.settle(&e.id, loc) {
                self.unpersisted.push(e.id);
            }
        }
        self.session.maybe_move();
    }

    /// A pack failed or was discarded: its pending entries are forgotten.
    pub fn rollback<'a>(&mut self, ids: impl IntoIterator<Item = &'a ChunkId>) -> usize {
        let mut n = 0;
        for id in ids {
            if self.session.rollback(id) {
                n += 1;
            }
        }
        n
    }

    /// Adds a stored entry from a fragment or a pack scan. Existing entries win (both copies
    /// are valid). `persisted` says whether some fragment already records it.
    pub fn insert_stored(
        &mut self,
        id: ChunkId,
        pack: PackId,
        offset: u32,
        len: u32,
        plain_len: u32,
        persisted: bool,
    ) -> bool {
        if self.contains(&id) {
            return false;
        }
        let n = self.pack_number(pack);
        self.session.insert_stored(
            id,
            StoredLoc {
                pack: n,
                offset,
                len,
                plain_len,
            },
        );
        if !persisted {
            self.unpersisted.push(id);
        }
        true
    }

    /// Removes every entry located in one of `packs` (packs found missing or damaged).
    pub fn forget_packs(&mut self, packs: &[PackId]) -> usize {
        let numbers: std::collections::HashSet<u32> = packs
            .iter()
            .filter_map(|p| self.pack_numbers.get(p).copied())
            .collect();
        if numbers.is_empty() {
            return 0;
        }
        let before = self.len();
        self.session.retain_stored(|l| !numbers.contains(&l.pack));
        if self.base.values().any(|l| numbers.contains(&l.pack)) {
            Arc::make_mut(&mut self.base).retain(|_, l| !numbers.contains(&l.pack));
        }
        let mut unpersisted = std::mem::take(&mut self.unpersisted);
        unpersisted.retain(|id| self.contains(id));
        self.unpersisted = unpersisted;
        before - self.len()
    }

    /// Removes one stored entry (a chunk found damaged).
    pub fn forget(&mut self, id: &ChunkId) -> bool {
        let removed = match self.session.get(id) {
            Some(_) => self.session.forget(id),
            None => {
                self.base.contains_key(id) && Arc::make_mut(&mut self.base).remove(id).is_some()
            }
        };
        if removed {
            self.unpersisted.retain(|x| x != id);
        }
        removed
    }

    /// All stored entries, in no particular order.
    pub fn iter_stored(&self) -> impl Iterator<Item = (ChunkId, PackId, StoredLoc)> + '_ {
        let base = self
            .base
            .iter()
            .map(|(id, l)| (*id, self.packs[l.pack as usize], *l));
        let delta = self
            .session
            .iter_stored()
            .map(|(id, l)| (*id, self.packs[l.pack as usize], *l));
        base.chain(delta)
    }

    /// A fragment of the stored entries no fragment holds yet; `None` when there are none.
    /// Refused while anything is pending: fragments are written only after a flush barrier.
    pub fn unpersisted_fragment(&self) -> Result<Option<IndexFragment>> {
        Ok(self.unpersisted_fragments(usize::MAX)?.next())
    }

    /// The same entries as [`Self::unpersisted_fragment`], as fragments of at most `max`
    /// entries each, built one at a time as the iterator is advanced.
    pub fn unpersisted_fragments(
        &self,
        max: usize,
    ) -> Result<impl Iterator<Item = IndexFragment> + '_> {
        if self.pending_count() > 0 {
            return Err(Error::PendingEntries(self.pending_count()));
        }
        Ok(self.unpersisted.chunks(max.max(1)).map(|ids| {
            IndexFragment::from_entries(
                ids.iter()
                    .filter_map(|id| self.stored(id).map(|(pack, loc)| (*id, pack, loc))),
            )
        }))
    }

    /// Records a second copy of chunk `id` in `pack` (see the field): kept only when the
    /// index places the chunk elsewhere.
    pub fn add_spare(&mut self, id: ChunkId, pack: PackId, loc: StoredLoc) {
        let n = self.pack_number(pack);
        self.spares.push((id, n, StoredLoc { pack: n, ..loc }));
    }

    /// The second copies recorded, with their packs.
    pub fn spares(&self) -> impl Iterator<Item = (ChunkId, PackId, StoredLoc)> + '_ {
        self.spares
            .iter()
            .map(|(id, p, l)| (*id, self.packs[*p as usize], *l))
    }

    /// Forgets the second copies in `packs` (packs about to be deleted).
    pub fn drop_spares_in(&mut self, packs: &std::collections::HashSet<PackId>) {
        let packs_of = &self.packs;
        self.spares
            .retain(|(_, p, _)| !packs.contains(&packs_of[*p as usize]));
    }

    /// A fragment holding every stored entry (compact and repair write the whole index),
    /// the second copies after the entries the index reads (the first entry of an id wins).
    pub fn full_fragment(&self) -> Result<IndexFragment> {
        if self.pending_count() > 0 {
            return Err(Error::PendingEntries(self.pending_count()));
        }
        let spares = self.spares().filter(|(id, pack, loc)| {
            self.stored(id)
                .is_some_and(|(p, l)| (p, l.offset) != (*pack, loc.offset))
        });
        Ok(IndexFragment::from_entries(
            self.iter_stored().chain(spares),
        ))
    }

    /// Call after the fragment from [`Self::unpersisted_fragment`] is durable.
    pub fn mark_persisted(&mut self) {
        self.unpersisted.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::blob::BlobKind;
    use crate::format::blob::PackEntry;

    fn entry(i: u8) -> PackEntry {
        PackEntry {
            id: ChunkId([i; 32]),
            kind: BlobKind::Chunk,
            offset: 8 + u32::from(i) * 100,
            len: 100,
            plain_len: 90,
        }
    }

    #[test]
    fn pending_entries_cannot_be_persisted() {
        let mut idx = ChunkIndex::new();
        assert!(idx.insert_pending(ChunkId([1; 32]), 100, 90));
        assert!(!idx.insert_pending(ChunkId([1; 32]), 100, 90));
        assert!(matches!(
            idx.unpersisted_fragment(),
            Err(Error::PendingEntries(1))
        ));
        assert!(idx.full_fragment().is_err());
        idx.settle(PackId([9; 32]), &[entry(1)]);
        assert_eq!(idx.pending_count(), 0);
        let frag = idx.unpersisted_fragment().unwrap().unwrap();
        assert_eq!(frag.entries.len(), 1);
        idx.mark_persisted();
        assert!(idx.unpersisted_fragment().unwrap().is_none());
    }

    #[test]
    fn rollback_forgets_only_pending() {
        let mut idx = ChunkIndex::new();
        idx.insert_pending(ChunkId([1; 32]), 100, 90);
        idx.insert_pending(ChunkId([2; 32]), 100, 90);
        idx.settle(PackId([9; 32]), &[entry(1)]);
        assert_eq!(idx.rollback(&[ChunkId([1; 32]), ChunkId([2; 32])]), 1);
        assert!(idx.contains(&ChunkId([1; 32])));
        assert!(!idx.contains(&ChunkId([2; 32])));
        assert_eq!(idx.pending_count(), 0);
    }

    /// Loading: the first entry of an id read wins, later ones elsewhere are alternates (the
    /// same place twice is not), and an id already known keeps its place.
    #[test]
    fn loaded_entries_first_wins_and_the_rest_are_alternates() {
        let mut idx = ChunkIndex::new();
        let (p1, p2, p3) = (PackId([1; 32]), PackId([2; 32]), PackId([3; 32]));
        idx.insert_stored(ChunkId([9; 32]), p3, 0, 10, 5, true);
        let (n1, n2) = (idx.number_pack(p1), idx.number_pack(p2));
        let at = |pack: u32, offset: u32| StoredLoc {
            pack,
            offset,
            len: 10,
            plain_len: 5,
        };
        let loaded = vec![
            (ChunkId([5; 32]), at(n2, 100)),
            (ChunkId([7; 32]), at(n1, 0)),
            (ChunkId([5; 32]), at(n1, 200)),
            (ChunkId([7; 32]), at(n1, 0)),
            (ChunkId([9; 32]), at(n2, 300)),
        ];
        let mut alternates = idx.add_loaded(loaded);
        alternates.sort_by_key(|a| a.0);
        assert_eq!(
            alternates,
            vec![
                (ChunkId([5; 32]), p1, at(n1, 200)),
                (ChunkId([9; 32]), p2, at(n2, 300)),
            ]
        );
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.stored(&ChunkId([5; 32])), Some((p2, at(n2, 100))));
        assert_eq!(idx.stored(&ChunkId([7; 32])).map(|s| s.0), Some(p1));
        assert_eq!(idx.stored(&ChunkId([9; 32])).map(|s| s.0), Some(p3));
        // Frozen with the session's entries: one table, every entry still found.
        let known = idx.freeze().unwrap();
        assert_eq!(known.len(), 3);
        assert!(known.contains_key(&ChunkId([9; 32])));
    }

    #[test]
    fn frozen_base_and_session_entries_behave_as_one_index() {
        let mut idx = ChunkIndex::new();
        idx.insert_stored(ChunkId([1; 32]), PackId([7; 32]), 8, 10, 10, true);
        idx.insert_pending(ChunkId([2; 32]), 100, 90);
        assert!(
            idx.freeze().is_err(),
            "pending entries stay in the session part"
        );
        idx.settle(PackId([9; 32]), &[entry(2)]);
        let known = idx.freeze().unwrap();
        assert!(known.contains_key(&ChunkId([1; 32])) && known.contains_key(&ChunkId([2; 32])));
        // After freezing: same answers, and new entries go to the session part.
        assert_eq!(idx.len(), 2);
        assert!(!idx.insert_pending(ChunkId([1; 32]), 1, 1));
        assert!(idx.insert_pending(ChunkId([3; 32]), 100, 90));
        assert!(idx.unpersisted_fragment().is_err(), "entry 3 is pending");
        idx.settle(PackId([9; 32]), &[entry(3)]);
        let frag = idx.unpersisted_fragment().unwrap().unwrap();
        assert_eq!(
            frag.entries.len(),
            2,
            "entry 2 (frozen, unpersisted) and entry 3"
        );
        assert_eq!(idx.forget_packs(&[PackId([9; 32])]), 2);
        assert_eq!(idx.len(), 1);
        assert_eq!(known.len(), 2, "workers keep their snapshot");
        assert!(idx.forget(&ChunkId([1; 32])));
        assert!(idx.is_empty());
    }

    #[test]
    fn forget_packs_drops_their_entries() {
        let mut idx = ChunkIndex::new();
        idx.insert_stored(ChunkId([1; 32]), PackId([7; 32]), 8, 10, 10, true);
        idx.insert_stored(ChunkId([2; 32]), PackId([8; 32]), 8, 10, 10, false);
        assert_eq!(idx.forget_packs(&[PackId([8; 32])]), 1);
        assert!(idx.contains(&ChunkId([1; 32])));
        assert!(!idx.contains(&ChunkId([2; 32])));
        assert_eq!(idx.unpersisted_count(), 0);
    }

    /// A second copy of a chunk is written into a full fragment after the entry the index
    /// reads, so that loading it back keeps the index's place and reports the copy as an
    /// alternate; copies in packs about to go are not written.
    #[test]
    fn second_copies_are_written_after_the_entry_read() {
        let mut idx = ChunkIndex::new();
        let (a, b, c) = (PackId([1; 32]), PackId([2; 32]), PackId([3; 32]));
        let id = ChunkId([7; 32]);
        idx.insert_stored(id, b, 8, 100, 90, false);
        let loc = |offset| StoredLoc {
            pack: 0,
            offset,
            len: 100,
            plain_len: 90,
        };
        idx.add_spare(id, a, loc(16));
        idx.add_spare(id, c, loc(24));
        // The place the index reads is no second copy.
        idx.add_spare(id, b, loc(8));
        idx.drop_spares_in(&[c].into_iter().collect());
        let frag = idx.full_fragment().unwrap();
        let places: Vec<(PackId, u32)> = frag
            .entries
            .iter()
            .map(|e| (frag.packs[e.pack as usize], e.offset))
            .collect();
        assert_eq!(places, vec![(b, 8), (a, 16)]);
        let mut back = ChunkIndex::new();
        let loaded = frag
            .entries
            .iter()
            .map(|e| {
                let n = back.number_pack(frag.packs[e.pack as usize]);
                (
                    e.id,
                    StoredLoc {
                        pack: n,
                        ..loc(e.offset)
                    },
                )
            })
            .collect();
        let alternates = back.add_loaded(loaded);
        assert_eq!(back.stored(&id).map(|(p, l)| (p, l.offset)), Some((b, 8)));
        assert_eq!(alternates.len(), 1);
        assert_eq!((alternates[0].1, alternates[0].2.offset), (a, 16));
    }

    // The session part across its moves into the sorted table.

    fn nid(n: u32) -> ChunkId {
        ChunkId(crate::util::id::sha256(&n.to_le_bytes()))
    }

    fn pack_entry(n: u32) -> PackEntry {
        PackEntry {
            id: nid(n),
            kind: BlobKind::Chunk,
            offset: n,
            len: 10,
            plain_len: 9,
        }
    }

    fn fragment_ids(idx: &ChunkIndex) -> Vec<ChunkId> {
        let mut ids: Vec<ChunkId> = idx
            .unpersisted_fragments(10_000)
            .unwrap()
            .flat_map(|f| f.entries.into_iter().map(|e| e.id))
            .collect();
        ids.sort();
        ids
    }

    /// Enough settled entries that the session moves them into its table; then a second pack
    /// settles half and fails (rollback of all of its ids), a moved entry is forgotten and
    /// written again, freeze is refused with one pending and then succeeds with the table
    /// non-empty, and forget_packs runs across base, table and map. At each step every
    /// stored id is found once, in the fragments too, and pending/unpersisted agree.
    #[test]
    fn moves_rollback_forget_freeze_keep_one_consistent_index() {
        const N: u32 = 70_000; // past MIN_BATCH (65,536): the first settle moves everything
        let (pa, pb, pc) = (PackId([0xa; 32]), PackId([0xb; 32]), PackId([0xc; 32]));
        let mut idx = ChunkIndex::new();
        for i in 0..N {
            assert!(idx.insert_pending(nid(i), 10, 9));
        }
        let a: Vec<PackEntry> = (0..N).map(pack_entry).collect();
        idx.settle(pa, &a);
        assert_eq!(idx.pending_count(), 0);
        assert_eq!(idx.len(), N as usize);
        assert_eq!(idx.unpersisted_count(), N as usize);
        // Pack B: 10 pending, 5 settled, then the pack "fails": rollback of all 10 ids only
        // drops the 5 still pending (the settled ones, and anything moved, stay).
        for i in N..N + 10 {
            assert!(idx.insert_pending(nid(i), 10, 9));
        }
        // an id already moved into the table is not new
        assert!(!idx.insert_pending(nid(3), 10, 9));
        let b: Vec<PackEntry> = (N..N + 5).map(pack_entry).collect();
        idx.settle(pb, &b);
        // settling an already-moved id again changes nothing
        idx.settle(pb, &[pack_entry(7)]);
        assert_eq!(idx.stored(&nid(7)).unwrap().0, pa);
        let all_b: Vec<ChunkId> = (N..N + 10).map(nid).chain([nid(1)]).collect();
        assert_eq!(idx.rollback(all_b.iter()), 5);
        assert_eq!(idx.pending_count(), 0);
        assert_eq!(idx.len(), N as usize + 5);
        assert_eq!(idx.unpersisted_count(), N as usize + 5);
        // Forget one moved entry, then write it again in pack C.
        assert!(idx.forget(&nid(3)));
        assert!(!idx.forget(&nid(3)));
        assert!(!idx.contains(&nid(3)));
        assert_eq!(idx.unpersisted_count(), N as usize + 4);
        assert!(idx.insert_pending(nid(3), 10, 9));
        // Freeze refused while one is pending, and nothing is lost by the refusal.
        assert!(matches!(idx.freeze(), Err(Error::PendingEntries(1))));
        assert!(idx.stored(&nid(5)).is_some());
        assert!(idx.unpersisted_fragments(10).is_err());
        idx.settle(pc, &[pack_entry(3)]);
        assert_eq!(idx.stored(&nid(3)).unwrap().0, pc);
        assert_eq!(idx.unpersisted_count(), N as usize + 5);
        let mut want: Vec<ChunkId> = (0..N + 5).map(nid).collect();
        want.sort();
        assert_eq!(fragment_ids(&idx), want, "every unpersisted entry is found");
        // full_fragment / iter_stored: no id twice
        let full = idx.full_fragment().unwrap();
        assert_eq!(full.entries.len(), N as usize + 5);
        // Freeze with the table non-empty: all in the base now, still found, still listed.
        let base = idx.freeze().unwrap();
        assert_eq!(base.len(), N as usize + 5);
        assert_eq!(idx.len(), N as usize + 5);
        assert_eq!(fragment_ids(&idx), want);
        assert!(!idx.insert_pending(nid(9), 10, 9));
        drop(base);
        // A second session on top: more moves, then forget_packs across base + table + map.
        for i in N + 10..2 * N + 10 {
            assert!(idx.insert_pending(nid(i), 10, 9));
        }
        let c2: Vec<PackEntry> = (N + 10..2 * N + 10).map(pack_entry).collect();
        idx.settle(pc, &c2[..N as usize - 10]);
        idx.settle(pb, &c2[N as usize - 10..]); // 10 entries stay in the map
        assert_eq!(idx.len(), 2 * N as usize + 5);
        let dropped = idx.forget_packs(&[pa, pc]);
        // pa: N - 1 (id 3 moved to pc); pc: id 3 + N - 10 of the second session
        assert_eq!(dropped, (N as usize - 1) + 1 + (N as usize - 10));
        assert_eq!(idx.len(), 5 + 10);
        assert_eq!(idx.unpersisted_count(), 15);
        let mut left: Vec<ChunkId> = (N..N + 5).chain(2 * N..2 * N + 10).map(nid).collect();
        left.sort();
        assert_eq!(fragment_ids(&idx), left);
        idx.mark_persisted();
        assert_eq!(idx.unpersisted_count(), 0);
        let base = idx.freeze().unwrap();
        assert_eq!(base.len(), 15);
    }

    /// Fragments loaded while the session's table holds some of the same ids: those are
    /// alternates, not second entries (a duplicate would trip KnownTable's sortedness later).
    #[test]
    fn loading_ids_already_in_the_session_table_adds_no_duplicate() {
        const N: u32 = 66_000;
        let mut idx = ChunkIndex::new();
        let pa = PackId([0xa; 32]);
        for i in 0..N {
            idx.insert_pending(nid(i), 10, 9);
        }
        idx.settle(pa, &(0..N).map(pack_entry).collect::<Vec<_>>());
        let other = idx.number_pack(PackId([0xd; 32]));
        let loaded: Vec<(ChunkId, StoredLoc)> = (N - 100..N + 100)
            .map(|i| {
                (
                    nid(i),
                    StoredLoc {
                        pack: other,
                        offset: 1,
                        len: 10,
                        plain_len: 9,
                    },
                )
            })
            .collect();
        let alternates = idx.add_loaded(loaded);
        assert_eq!(alternates.len(), 100);
        assert_eq!(idx.len(), N as usize + 100);
        assert_eq!(idx.stored(&nid(N - 1)).unwrap().0, pa);
        let base = idx.freeze().unwrap();
        assert_eq!(base.len(), N as usize + 100);
        assert_eq!(idx.full_fragment().unwrap().entries.len(), N as usize + 100);
    }

    /// insert_stored (compact, reconcile, repair) moves on its own once 65,536 have gathered;
    /// forget of moved entries, and forget_packs of just the table, keep counts right.
    #[test]
    fn insert_stored_moves_and_forgets_across_map_and_table() {
        const N: u32 = 140_000;
        let mut idx = ChunkIndex::new();
        let (pa, pb) = (PackId([0xa; 32]), PackId([0xb; 32]));
        for i in 0..N {
            let p = if i < 65_536 { pa } else { pb };
            assert!(idx.insert_stored(nid(i), p, i, 10, 9, i % 2 == 0));
            assert!(!idx.insert_stored(nid(i), pb, i, 10, 9, false));
        }
        assert_eq!(idx.unpersisted_count(), N as usize / 2);
        for i in (0..N).step_by(1000) {
            assert!(idx.forget(&nid(i)), "{i}");
        }
        let forgotten = (N as usize).div_ceil(1000);
        assert_eq!(idx.len(), N as usize - forgotten);
        assert_eq!(idx.forget_packs(&[pa]), 65_536 - 66);
        assert_eq!(idx.len(), N as usize - 65_536 - (forgotten - 66));
        let odd_left = (65_536..N).filter(|i| i % 2 == 1 && i % 1000 != 0).count();
        assert_eq!(idx.unpersisted_count(), odd_left);
        assert_eq!(fragment_ids(&idx).len(), odd_left);
        assert_eq!(idx.iter_stored().count(), idx.len());
    }
}
