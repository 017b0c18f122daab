//! The frozen base of the chunk index: stored entries in one array sorted by chunk id, with a
//! directory of the ids' leading bits.
//!
//! Chunk ids are uniformly random (keyed HMACs), so the leading `bits` bits of an id say
//! almost exactly where it sits: `dir[b]` is the position of the first entry whose id starts
//! with `b`, and a lookup binary-searches the handful of entries between `dir[b]` and
//! `dir[b + 1]` (2 on average), comparing their leading 8 bytes first.
//!
//! An entry is 48 bytes (id 32, pack number, offset, length, plain length); the directory adds
//! 4 bytes per 2 entries: 50 bytes a chunk, where a hash map of the same entries takes 56 to
//! 112 (its load factor and power-of-two growth), and no more while it is built. A hash map
//! answers faster (a miss is often decided by its control bytes, which stay in the cache): at
//! 10 M chunks, 11 M hits and 20 M misses a second against the table's 6 M and 7 M
//! (`examples/index_scale.rs`) — at most a tenth of a second per million chunks looked up.

use crate::index::StoredLoc;
use crate::util::id::ChunkId;

/// Entries per directory slot, on average.
const PER_SLOT: usize = 2;
/// The directory's largest size: 2^26 slots (256 MiB) serve 134 M chunks at 2 a slot.
const MAX_BITS: u32 = 26;

#[derive(Clone, Debug, Default)]
pub struct KnownTable {
    /// Sorted by id, no id twice.
    entries: Vec<(ChunkId, StoredLoc)>,
    /// `2^bits + 1` positions into `entries`.
    dir: Vec<u32>,
    bits: u32,
}

fn prefix(id: &ChunkId) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&id.0[..8]);
    u64::from_be_bytes(b)
}

impl KnownTable {
    /// A table of `entries`, which must be sorted by id with no id twice.
    pub fn from_sorted(entries: Vec<(ChunkId, StoredLoc)>) -> Self {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        let mut t = Self {
            entries,
            dir: Vec::new(),
            bits: 0,
        };
        t.rebuild_directory();
        t
    }

    fn rebuild_directory(&mut self) {
        let n = self.entries.len();
        self.entries.shrink_to_fit();
        self.bits = (n / PER_SLOT).max(1).ilog2().min(MAX_BITS);
        let slots = 1usize << self.bits;
        let mut dir = Vec::with_capacity(slots + 1);
        let mut pos = 0usize;
        for b in 0..slots as u64 {
            while pos < n && self.slot(&self.entries[pos].0) < b {
                pos += 1;
            }
            dir.push(pos as u32);
        }
        dir.push(n as u32);
        self.dir = dir;
    }

    fn slot(&self, id: &ChunkId) -> u64 {
        match self.bits {
            0 => 0,
            bits => prefix(id) >> (64 - bits),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, id: &ChunkId) -> Result<usize, usize> {
        if self.entries.is_empty() {
            return Err(0);
        }
        let s = self.slot(id) as usize;
        let (lo, hi) = (self.dir[s] as usize, self.dir[s + 1] as usize);
        if hi - lo > 16 {
            // Only ids made to share their leading bits crowd a slot like this.
            return self.entries[lo..hi]
                .binary_search_by(|e| e.0.cmp(id))
                .map(|i| lo + i)
                .map_err(|i| lo + i);
        }
        // A few neighbours in a row: compare their leading 8 bytes, the whole id only when
        // those are equal.
        let key = prefix(id);
        for (i, e) in self.entries[lo..hi].iter().enumerate() {
            let p = prefix(&e.0);
            if p > key || (p == key && e.0 >= *id) {
                return if e.0 == *id { Ok(lo + i) } else { Err(lo + i) };
            }
        }
        Err(hi)
    }

    pub fn get(&self, id: &ChunkId) -> Option<&StoredLoc> {
        self.position(id).ok().map(|i| &self.entries[i].1)
    }

    /// Where `id` is among the entries, in id order.
    pub fn position_of(&self, id: &ChunkId) -> Option<usize> {
        self.position(id).ok()
    }

    /// The entry at `position`, in id order.
    pub fn entry_at(&self, position: usize) -> Option<(&ChunkId, &StoredLoc)> {
        self.entries.get(position).map(|(id, l)| (id, l))
    }

    pub fn contains_key(&self, id: &ChunkId) -> bool {
        self.position(id).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ChunkId, &StoredLoc)> + '_ {
        self.entries.iter().map(|(id, l)| (id, l))
    }

    pub fn values(&self) -> impl Iterator<Item = &StoredLoc> + '_ {
        self.entries.iter().map(|(_, l)| l)
    }

    /// The entries, sorted by id.
    pub fn into_entries(self) -> Vec<(ChunkId, StoredLoc)> {
        self.entries
    }

    /// Keeps the entries `keep` says to keep.
    pub fn retain(&mut self, mut keep: impl FnMut(&ChunkId, &StoredLoc) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|(id, l)| keep(id, l));
        if self.entries.len() != before {
            self.rebuild_directory();
        }
    }

    pub fn remove(&mut self, id: &ChunkId) -> Option<StoredLoc> {
        let i = self.position(id).ok()?;
        let (_, loc) = self.entries.remove(i);
        self.rebuild_directory();
        Some(loc)
    }

    /// Adds `more` (ids not in the table, in any order), merging in place from the back: no
    /// second copy of the table is made.
    pub fn extend(&mut self, mut more: Vec<(ChunkId, StoredLoc)>) {
        if more.is_empty() {
            return;
        }
        more.sort_unstable_by_key(|e| e.0);
        let old = self.entries.len();
        self.entries.reserve_exact(more.len());
        let filler = more[0];
        self.entries.resize(old + more.len(), filler);
        let (mut i, mut j, mut k) = (old, more.len(), old + more.len());
        while j > 0 {
            k -= 1;
            if i > 0 && self.entries[i - 1].0 > more[j - 1].0 {
                self.entries[k] = self.entries[i - 1];
                i -= 1;
            } else {
                self.entries[k] = more[j - 1];
                j -= 1;
            }
        }
        debug_assert!(self.entries.windows(2).all(|w| w[0].0 < w[1].0));
        self.rebuild_directory();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn loc(n: u32) -> StoredLoc {
        StoredLoc {
            pack: n,
            offset: n * 2,
            len: n * 3,
            plain_len: n * 4,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The table answers as an ordered map of the same entries does, through building,
        /// extending, retaining and removing; ids clustered on few leading bytes included.
        #[test]
        fn behaves_as_a_map(
            first in proptest::collection::vec((any::<[u8; 32]>(), 0u8..4), 0..600),
            more in proptest::collection::vec((any::<[u8; 32]>(), 0u8..4), 0..600),
            probes in proptest::collection::vec(any::<[u8; 32]>(), 0..50),
            drop_pack in 0u32..8,
        ) {
            let id = |(mut b, c): ([u8; 32], u8)| {
                // Some ids share their first bytes: slots with many entries, and empty ones.
                if c == 0 { b[..6].fill(0x42); }
                ChunkId(b)
            };
            let mut model: BTreeMap<ChunkId, StoredLoc> = BTreeMap::new();
            for (n, e) in first.iter().enumerate() {
                model.entry(id(*e)).or_insert(loc(n as u32 % 8));
            }
            let mut t = KnownTable::from_sorted(model.iter().map(|(k, v)| (*k, *v)).collect());
            let mut extra = Vec::new();
            for (n, e) in more.iter().enumerate() {
                let k = id(*e);
                if let std::collections::btree_map::Entry::Vacant(v) = model.entry(k) {
                    v.insert(loc(n as u32 % 8));
                    extra.push((k, loc(n as u32 % 8)));
                }
            }
            t.extend(extra);
            let check = |t: &KnownTable, model: &BTreeMap<ChunkId, StoredLoc>| {
                prop_assert_eq!(t.len(), model.len());
                for (k, v) in model {
                    prop_assert_eq!(t.get(k), Some(v));
                }
                for p in &probes {
                    prop_assert_eq!(t.get(&ChunkId(*p)), model.get(&ChunkId(*p)));
                }
                let listed: Vec<_> = t.iter().map(|(k, v)| (*k, *v)).collect();
                let wanted: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(listed, wanted);
                Ok(())
            };
            check(&t, &model)?;
            t.retain(|_, l| l.pack != drop_pack);
            model.retain(|_, l| l.pack != drop_pack);
            check(&t, &model)?;
            if let Some(k) = model.keys().nth(model.len() / 2).copied() {
                prop_assert_eq!(t.remove(&k), model.remove(&k));
                prop_assert_eq!(t.remove(&k), None);
            }
            check(&t, &model)?;
        }
    }

    #[test]
    fn empty_and_single() {
        let t = KnownTable::default();
        assert!(t.get(&ChunkId([1; 32])).is_none());
        let t = KnownTable::from_sorted(vec![(ChunkId([7; 32]), loc(1))]);
        assert_eq!(t.get(&ChunkId([7; 32])), Some(&loc(1)));
        assert!(!t.contains_key(&ChunkId([8; 32])));
        assert!(!t.contains_key(&ChunkId([0; 32])));
    }
}
