//! A reserve of space, so that a full disk can be freed.
//!
//! A backup that fills the disk fails and commits nothing; but `delete`, `prune` and `compact`
//! must then still be able to write their lock and the records and index that deleting needs,
//! on a disk where not one more block is free. Every repository keeps an object `reserve` of
//! [`SIZE`] random bytes (random, so that a compressing file system stores all of it). The
//! commands that free space go through [`Releasing`]: a write refused for lack of space deletes
//! the reserve and is tried once more. At their end the reserve is made again
//! ([`restore`]), if there is room. Nothing else releases it: a `create` on a full disk stops
//! as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Release, Store, StoreError, StoreResult};

/// The reserve's object name.
pub const NAME: &str = "reserve";
/// Its size: room for the locks, a record of some 30,000 packs to delete (480 GB of packs),
/// and the directories they need; small enough that `init` over a slow link does not notice
/// it (8 s at 1 Mbit/s).
pub const SIZE: usize = 1 << 20;

/// Writes the reserve.
pub fn create(store: &dyn Store) -> StoreResult<()> {
    let mut bytes = vec![0u8; SIZE];
    rand::Rng::fill(&mut rand::rng(), &mut bytes[..]);
    store.put(NAME, &bytes)
}

/// Makes the reserve again if it is missing. Returns a note for the user when it is missing
/// and there is no room for it.
pub fn restore(store: &dyn Store) -> StoreResult<Option<String>> {
    match store.info(NAME) {
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => match create(store) {
            Ok(()) => Ok(None),
            Err(StoreError::NoSpace { .. }) => Ok(Some(format!(
                "the repository's reserve of {} MiB could not be made again: the disk is still full (free space, then run cairn compact)",
                SIZE >> 20
            ))),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// A store whose writes, when refused for lack of space, release the reserve and try again.
pub struct Releasing {
    inner: Arc<dyn Store>,
    released: AtomicBool,
}

impl Releasing {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            released: AtomicBool::new(false),
        }
    }

    /// Runs a write; on `NoSpace`, once, deletes the reserve and runs it again.
    fn write(&self, op: impl Fn() -> StoreResult<()>) -> StoreResult<()> {
        match op() {
            Err(StoreError::NoSpace { .. }) if !self.released.swap(true, Ordering::SeqCst) => {
                match self.inner.delete(NAME) {
                    Ok(()) => {
                        crate::say!(
                            "note: the disk is full: the repository's reserve of {} MiB is used to free space",
                            SIZE >> 20
                        );
                        op()
                    }
                    Err(e) if e.is_not_found() => op(),
                    Err(e) => Err(e),
                }
            }
            other => other,
        }
    }
}

impl super::wrapper::Wrapper for Releasing {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn get_into(
        &self,
        name: &str,
        range: Option<crate::store::ByteRange>,
        buf: &mut Vec<u8>,
    ) -> crate::store::StoreResult<()> {
        self.inner().get_into(name, range, buf)
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.write(|| self.inner.put(name, data))
    }

    /// A put that may have to be made twice keeps its bytes until it is done: the commands
    /// that free space write little, and never in the pack writer's pipeline.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let done = self.write(|| self.inner.put(name, &data));
        release(data);
        done
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.write(|| self.inner.create_new(name, data))
    }

    fn wrap_lane(&self, lane: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Releasing::new(lane))
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::store::faulty::{Fault, FaultyStore, OpKind, Rule, Selector};
    use crate::store::mem::MemStore;

    #[test]
    fn a_write_refused_for_space_releases_the_reserve_once() {
        let mem = Arc::new(MemStore::new());
        create(&*mem).unwrap();
        // The first two writes after the reserve find the disk full.
        let full: Arc<dyn Store> = Arc::new(FaultyStore::new(
            mem.clone(),
            vec![
                Rule::new(Selector::Nth(1), Fault::NoSpace).only(OpKind::Put),
                Rule::new(Selector::Nth(4), Fault::NoSpace).only(OpKind::Put),
                Rule::new(Selector::Nth(5), Fault::NoSpace).only(OpKind::Put),
            ],
        ));
        let s = Releasing::new(full);
        s.create_new("locks/a", b"lock").unwrap();
        assert!(mem.get(NAME, None).is_err(), "the reserve was released");
        assert_eq!(mem.get("locks/a", None).unwrap(), b"lock");
        // Released once only: a later shortage is the caller's error.
        assert!(matches!(
            s.put("index/x", b"1"),
            Err(StoreError::NoSpace { .. })
        ));
        assert_eq!(restore(&*mem).unwrap(), None);
        assert_eq!(mem.get(NAME, None).unwrap().len(), SIZE);
    }
}
