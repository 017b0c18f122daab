//! The chunks a mount has read, decrypted, kept up to a byte budget and dropped least
//! recently used first: memory stays bounded whatever is read, and the 128 KiB reads the
//! kernel makes of a file are served from one chunk read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::util::id::ChunkId;

pub struct ChunkCache {
    inner: Mutex<Inner>,
    budget: usize,
}

#[derive(Default)]
struct Inner {
    chunks: HashMap<ChunkId, (Arc<Vec<u8>>, u64)>,
    /// Last use → chunk, oldest first.
    order: BTreeMap<u64, ChunkId>,
    tick: u64,
    bytes: usize,
}

impl ChunkCache {
    pub fn new(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &ChunkId) -> Option<Arc<Vec<u8>>> {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        let (data, used) = inner.chunks.get_mut(id)?;
        inner.order.remove(used);
        *used = tick;
        inner.order.insert(tick, *id);
        Some(Arc::clone(data))
    }

    pub fn contains(&self, id: &ChunkId) -> bool {
        self.lock().chunks.contains_key(id)
    }

    /// Keeps `data`, dropping the least recently used chunks beyond the budget.
    pub fn insert(&self, id: ChunkId, data: Arc<Vec<u8>>) {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        let len = data.len();
        if let Some((old, used)) = inner.chunks.insert(id, (data, tick)) {
            inner.order.remove(&used);
            inner.bytes -= old.len();
        }
        inner.order.insert(tick, id);
        inner.bytes += len;
        while inner.bytes > self.budget && inner.chunks.len() > 1 {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some((old, _)) = inner.chunks.remove(&oldest) {
                inner.bytes -= old.len();
            }
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 32])
    }

    #[test]
    fn stays_within_budget_dropping_the_least_recently_used() {
        let c = ChunkCache::new(300);
        for n in 0..3 {
            c.insert(id(n), Arc::new(vec![n; 100]));
        }
        assert!(c.get(&id(0)).is_some()); // 1 is now the oldest
        c.insert(id(3), Arc::new(vec![3; 100]));
        assert!(c.bytes() <= 300);
        assert!(!c.contains(&id(1)));
        assert!(c.contains(&id(0)) && c.contains(&id(2)) && c.contains(&id(3)));
        c.insert(id(3), Arc::new(vec![3; 100]));
        assert_eq!(c.bytes(), 300);
    }
}
