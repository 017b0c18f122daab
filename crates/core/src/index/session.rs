//! The entries of the current write session: chunks whose packs are being built or stored,
//! and chunks stored since the session began.
//!
//! A new entry goes into a hash map, where its pack's outcome then settles it (or rolls it
//! back) in place. Stored entries are moved from time to time into a sorted table
//! ([`KnownTable`]) of 50 bytes a chunk, where the map takes 60 to 170 (its load factor, its
//! power-of-two growth, both tables while it grows): a backup of a million new files held
//! 167 MB in the map alone. The map's stored entries are moved when they reach an eighth of
//! the table (at least [`MIN_BATCH`]), so each entry is copied about nine times in a session
//! and the map stays a fraction of the table. The table is the session's own, never shared
//! with workers, so growing it copies nothing else.

use crate::index::table::KnownTable;
use crate::index::{IdMap, Location, PendingLoc, StoredLoc};
use crate::util::id::ChunkId;

/// The fewest stored entries moved at once: below this the map is small anyway.
const MIN_BATCH: usize = 1 << 16;

#[derive(Default)]
pub struct SessionEntries {
    /// Pending entries, and stored ones not yet moved to `settled`.
    map: IdMap<ChunkId, Location>,
    /// Stored entries, sorted; no id is in both.
    settled: KnownTable,
    pending: usize,
    /// Stored entries in `map`.
    stored_in_map: usize,
}

impl SessionEntries {
    pub fn len(&self) -> usize {
        self.map.len() + self.settled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pending(&self) -> usize {
        self.pending
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.map.contains_key(id) || self.settled.contains_key(id)
    }

    pub fn get(&self, id: &ChunkId) -> Option<Location> {
        match self.map.get(id) {
            Some(l) => Some(*l),
            None => self.settled.get(id).map(|l| Location::Stored(*l)),
        }
    }

    /// Adds a pending entry; the caller has checked that the id is new.
    pub fn insert_pending(&mut self, id: ChunkId, loc: PendingLoc) {
        self.map.insert(id, Location::Pending(loc));
        self.pending += 1;
    }

    /// Adds a stored entry; the caller has checked that the id is new.
    pub fn insert_stored(&mut self, id: ChunkId, loc: StoredLoc) {
        self.map.insert(id, Location::Stored(loc));
        self.stored_in_map += 1;
        self.maybe_move();
    }

    /// A pending entry's pack was stored: `false` if `id` is not pending.
    pub fn settle(&mut self, id: &ChunkId, loc: StoredLoc) -> bool {
        match self.map.get_mut(id) {
            Some(slot) if slot.is_pending() => {
                *slot = Location::Stored(loc);
                self.pending -= 1;
                self.stored_in_map += 1;
                true
            }
            _ => false,
        }
    }

    /// Call after a pack's entries are settled: moves the stored entries to the table when
    /// enough have gathered.
    pub fn maybe_move(&mut self) {
        if self.stored_in_map >= MIN_BATCH.max(self.settled.len() / 8) {
            self.move_stored();
        }
    }

    fn move_stored(&mut self) {
        let mut moved = Vec::with_capacity(self.stored_in_map);
        // `retain` keeps the map's capacity: the next batch fills it again without growing.
        self.map.retain(|id, loc| match loc {
            Location::Stored(l) => {
                moved.push((*id, *l));
                false
            }
            Location::Pending(_) => true,
        });
        self.stored_in_map = 0;
        self.settled.extend(moved);
    }

    /// Forgets a pending entry: `false` if `id` is not pending.
    pub fn rollback(&mut self, id: &ChunkId) -> bool {
        if self.map.get(id).is_some_and(Location::is_pending) {
            self.map.remove(id);
            self.pending -= 1;
            return true;
        }
        false
    }

    /// Forgets a stored entry: `false` if `id` is pending or not here.
    pub fn forget(&mut self, id: &ChunkId) -> bool {
        match self.map.get(id) {
            Some(Location::Stored(_)) => {
                self.map.remove(id);
                self.stored_in_map -= 1;
                true
            }
            Some(Location::Pending(_)) => false,
            None => self.settled.remove(id).is_some(),
        }
    }

    /// Keeps the stored entries `keep` says to keep (pending ones are all kept).
    pub fn retain_stored(&mut self, keep: impl Fn(&StoredLoc) -> bool) {
        let mut dropped = 0;
        self.map.retain(|_, loc| match loc {
            Location::Stored(l) if !keep(l) => {
                dropped += 1;
                false
            }
            _ => true,
        });
        self.stored_in_map -= dropped;
        if self.settled.values().any(|l| !keep(l)) {
            self.settled.retain(|_, l| keep(l));
        }
    }

    /// Every stored entry, in no particular order.
    pub fn iter_stored(&self) -> impl Iterator<Item = (&ChunkId, &StoredLoc)> + '_ {
        let recent = self.map.iter().filter_map(|(id, loc)| match loc {
            Location::Stored(l) => Some((id, l)),
            Location::Pending(_) => None,
        });
        self.settled.iter().chain(recent)
    }

    /// Takes every stored entry out (the pending ones stay), in no particular order.
    pub fn take_stored(&mut self) -> Vec<(ChunkId, StoredLoc)> {
        self.move_stored();
        self.map.shrink_to_fit();
        std::mem::take(&mut self.settled).into_entries()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn stored(n: u32) -> StoredLoc {
        StoredLoc {
            pack: n % 5,
            offset: n,
            len: 10,
            plain_len: 9,
        }
    }

    /// Enough entries that the map is moved into the table several times, with entries
    /// pending across each move: every answer is the one a plain map would give.
    #[test]
    fn entries_moved_to_the_table_are_found_as_before() {
        let mut s = SessionEntries::default();
        let mut model: BTreeMap<ChunkId, Location> = BTreeMap::new();
        let id = |n: u32| ChunkId(crate::util::id::sha256(&n.to_le_bytes()));
        let n = (MIN_BATCH * 3) as u32;
        for i in 0..n {
            s.insert_pending(
                id(i),
                PendingLoc {
                    len: 10,
                    plain_len: 9,
                },
            );
            model.insert(
                id(i),
                Location::Pending(PendingLoc {
                    len: 10,
                    plain_len: 9,
                }),
            );
            // Settle the one before, so one entry is always pending when the map moves.
            if i > 0 {
                assert!(s.settle(&id(i - 1), stored(i - 1)));
                model.insert(id(i - 1), Location::Stored(stored(i - 1)));
                s.maybe_move();
            }
        }
        assert!(!s.settled.is_empty(), "moved at least once");
        assert_eq!(s.pending(), 1);
        assert_eq!(s.len(), model.len());
        for (k, v) in &model {
            assert_eq!(s.get(k), Some(*v));
        }
        assert!(!s.settle(&id(3), stored(3)), "already stored");
        assert!(!s.rollback(&id(3)), "stored, not pending");
        assert!(s.rollback(&id(n - 1)));
        assert!(s.forget(&id(3)), "a moved entry can be forgotten");
        assert!(!s.contains(&id(3)));
        s.retain_stored(|l| l.pack != 2);
        let left = model
            .iter()
            .filter(|(k, v)| {
                **k != id(3) && **k != id(n - 1) && !matches!(v, Location::Stored(l) if l.pack == 2)
            })
            .count();
        assert_eq!(s.iter_stored().count(), left);
        let taken = s.take_stored();
        assert_eq!(taken.len(), left);
        assert!(s.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Random operations, with the table in play from the first move: the same answers
        /// as a map of the same entries.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((0u8..6, 0u16..400), 0..800)) {
            let mut s = SessionEntries::default();
            let mut model: BTreeMap<ChunkId, Location> = BTreeMap::new();
            let pending = Location::Pending(PendingLoc { len: 10, plain_len: 9 });
            for (op, k) in ops {
                let mut b = [0u8; 32];
                b[..2].copy_from_slice(&k.to_be_bytes());
                let id = ChunkId(b);
                match op {
                    0 if !model.contains_key(&id) => {
                        s.insert_pending(id, PendingLoc { len: 10, plain_len: 9 });
                        model.insert(id, pending);
                    }
                    1 => {
                        let was = model.get(&id) == Some(&pending);
                        prop_assert_eq!(s.settle(&id, stored(k.into())), was);
                        if was {
                            model.insert(id, Location::Stored(stored(k.into())));
                        }
                    }
                    2 => {
                        let was = model.get(&id) == Some(&pending);
                        prop_assert_eq!(s.rollback(&id), was);
                        if was {
                            model.remove(&id);
                        }
                    }
                    3 => {
                        let was = matches!(model.get(&id), Some(Location::Stored(_)));
                        prop_assert_eq!(s.forget(&id), was);
                        if was {
                            model.remove(&id);
                        }
                    }
                    4 => s.move_stored(),
                    5 if !model.contains_key(&id) => {
                        s.insert_stored(id, stored(k.into()));
                        model.insert(id, Location::Stored(stored(k.into())));
                    }
                    _ => {}
                }
                prop_assert_eq!(s.get(&id), model.get(&id).copied());
            }
            prop_assert_eq!(s.len(), model.len());
            let pend = model.values().filter(|l| l.is_pending()).count();
            prop_assert_eq!(s.pending(), pend);
            for (k, v) in &model {
                prop_assert_eq!(s.get(k), Some(*v));
            }
            let mut listed: Vec<_> = s.iter_stored().map(|(k, v)| (*k, *v)).collect();
            listed.sort_by_key(|e| e.0);
            let wanted: Vec<_> = model
                .iter()
                .filter_map(|(k, v)| match v {
                    Location::Stored(l) => Some((*k, *l)),
                    Location::Pending(_) => None,
                })
                .collect();
            prop_assert_eq!(listed, wanted);
        }
    }
}
