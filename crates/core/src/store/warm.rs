//! Listings made ahead of time: while the passphrase's key derivation keeps one core busy for
//! a fifth of a second, a second thread takes the lock and lists what the command will read
//! first (`index`, `packs`, `archives`), so that those round trips to a far-away store cost no
//! time of their own.
//!
//! Each listing is answered once, then the store is asked again. A listing is never answered
//! after this process wrote or deleted anything under its prefix (its own objects must be in
//! what it lists). What others write is a race that listing a little later would have too:
//! the listings are made with the lock held, as they would have been without warming.

use std::sync::{Arc, Mutex};

use super::{ObjectInfo, Release, Store, StoreResult};

pub struct WarmStore {
    inner: Arc<dyn Store>,
    state: Mutex<Warm>,
}

#[derive(Default)]
struct Warm {
    /// Listings not yet answered, by prefix (a failed one is answered with its failure).
    listings: Vec<(String, StoreResult<Vec<ObjectInfo>>)>,
    /// Writes and deletes so far: a listing made while one happened is not kept.
    changes: u64,
}

/// Whether `name` is listed under `prefix` (a listing of `packs` holds `packs/ab/…`).
fn covers(prefix: &str, name: &str) -> bool {
    prefix.is_empty()
        || name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl WarmStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            state: Mutex::new(Warm::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Warm> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists each prefix now, for the next `list` of it. A listing that fails is kept too:
    /// the command meets its error where it would have listed (never a second attempt that
    /// hides a failing store).
    ///
    /// A far store lists them all at once, each on its own thread: one round trip's wait for
    /// all of them rather than one each.
    pub fn warm(&self, prefixes: &[&str]) {
        if self.inner.is_remote() && prefixes.len() > 1 {
            std::thread::scope(|s| {
                for prefix in prefixes {
                    // A thread that cannot start leaves its prefix to be listed when asked.
                    let _ = std::thread::Builder::new()
                        .name("cairn-warm".into())
                        .spawn_scoped(s, || self.warm_one(prefix));
                }
            });
        } else {
            for prefix in prefixes {
                self.warm_one(prefix);
            }
        }
    }

    fn warm_one(&self, prefix: &str) {
        let before = self.state().changes;
        let listing = self.inner.list(prefix);
        let mut state = self.state();
        if state.changes == before {
            state.listings.retain(|(p, _)| p != prefix);
            state.listings.push((prefix.to_string(), listing));
        }
    }

    /// A change to `name`: listings that hold it are out of date.
    fn changed(&self, name: &str) {
        let mut state = self.state();
        state.changes += 1;
        state.listings.retain(|(p, _)| !covers(p, name));
    }
}

impl super::wrapper::Wrapper for WarmStore {
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

    // A change is counted before and after it reaches the store: a listing made while it
    // was on its way is not kept, whichever way it saw it.
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.changed(name);
        let done = self.inner.put(name, data);
        self.changed(name);
        done
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        self.changed(name);
        let done = self.inner.put_releasing(name, data, release);
        self.changed(name);
        done
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.changed(name);
        let done = self.inner.create_new(name, data);
        self.changed(name);
        done
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        let warmed = {
            let mut state = self.state();
            let at = state.listings.iter().position(|(p, _)| p == prefix);
            at.map(|i| state.listings.swap_remove(i).1)
        };
        match warmed {
            Some(listing) => listing,
            None => self.inner.list(prefix),
        }
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.changed(name);
        let done = self.inner.delete(name);
        self.changed(name);
        done
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::store::logged::LoggedStore;
    use crate::store::mem::MemStore;

    fn names(l: &[ObjectInfo]) -> Vec<&str> {
        l.iter().map(|o| o.name.as_str()).collect()
    }

    /// A store whose operations are counted through the log.
    fn counted() -> (tempfile::TempDir, Arc<dyn Store>, WarmStore) {
        let dir = tempfile::tempdir().unwrap();
        let mem: Arc<dyn Store> = Arc::new(MemStore::default());
        let logged: Arc<dyn Store> =
            Arc::new(LoggedStore::new(mem.clone(), &dir.path().join("log")).unwrap());
        (dir, mem, WarmStore::new(logged))
    }

    fn ops(dir: &tempfile::TempDir) -> usize {
        std::fs::read_to_string(dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    #[test]
    fn a_warmed_listing_is_answered_once_without_asking_the_store() {
        let (dir, mem, warm) = counted();
        mem.put("index/a", b"1").unwrap();
        mem.put("packs/0a/x", b"2").unwrap();
        warm.warm(&["index", "packs"]);
        assert_eq!(ops(&dir), 2);
        assert_eq!(names(&warm.list("packs").unwrap()), ["packs/0a/x"]);
        assert_eq!(names(&warm.list("index").unwrap()), ["index/a"]);
        assert_eq!(ops(&dir), 2, "both answered from the warmed listings");
        // Once answered, the store is asked again, and sees what changed since.
        mem.put("index/b", b"3").unwrap();
        assert_eq!(names(&warm.list("index").unwrap()), ["index/a", "index/b"]);
        assert_eq!(ops(&dir), 3);
    }

    #[test]
    fn our_own_writes_are_never_missing_from_a_listing() {
        let (_dir, _mem, warm) = counted();
        warm.warm(&["index", "packs", "archives"]);
        warm.put("index/new", b"x").unwrap();
        warm.put("packs/ab/new", b"y").unwrap();
        warm.put("locks/ours", b"z").unwrap();
        assert_eq!(names(&warm.list("index").unwrap()), ["index/new"]);
        assert_eq!(names(&warm.list("packs").unwrap()), ["packs/ab/new"]);
        // A prefix that merely starts the same does not cover it: `archives` still warm.
        warm.put("archivesx/y", b"w").unwrap();
        assert!(warm.list("archives").unwrap().is_empty());
        warm.put("archives/a", b"v").unwrap();
        warm.delete("archives/a").unwrap();
        assert!(warm.list("archives").unwrap().is_empty());
    }

    #[test]
    fn a_deletion_makes_the_listing_be_asked_again() {
        let (dir, mem, warm) = counted();
        mem.put("index/a", b"1").unwrap();
        warm.warm(&["index"]);
        warm.delete("index/a").unwrap();
        let before = ops(&dir);
        assert!(warm.list("index").unwrap().is_empty());
        assert_eq!(ops(&dir), before + 1);
    }

    /// A store that fails one listing: the failure is what the command sees, once.
    struct FailsListing(Arc<dyn Store>);

    impl crate::store::wrapper::Wrapper for FailsListing {
        fn inner(&self) -> &Arc<dyn Store> {
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
            release: Release<'_>,
        ) -> StoreResult<()> {
            self.0.put_releasing(name, data, release)
        }
        fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
            if prefix == "packs" {
                return Err(crate::store::StoreError::NoSpace {
                    name: prefix.into(),
                });
            }
            self.0.list(prefix)
        }
    }

    #[test]
    fn a_failed_listing_is_answered_with_its_failure() {
        let warm = WarmStore::new(Arc::new(FailsListing(Arc::new(MemStore::default()))));
        warm.warm(&["packs", "index"]);
        assert!(warm.list("packs").is_err());
        assert!(warm.list("index").unwrap().is_empty());
    }

    /// A far store whose listings wait (up to 10 s) until three are on their way at once.
    struct FarListings {
        inner: Arc<dyn Store>,
        at_once: Mutex<(usize, usize)>,
        moved: std::sync::Condvar,
    }

    impl crate::store::wrapper::Wrapper for FarListings {
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
        fn put_releasing(
            &self,
            name: &str,
            data: Vec<u8>,
            release: Release<'_>,
        ) -> StoreResult<()> {
            self.inner.put_releasing(name, data, release)
        }
        fn is_remote(&self) -> bool {
            true
        }
        fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
            let mut n = self.at_once.lock().unwrap();
            n.0 += 1;
            n.1 = n.1.max(n.0);
            self.moved.notify_all();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while n.1 < 3 && std::time::Instant::now() < deadline {
                n = self
                    .moved
                    .wait_timeout(n, std::time::Duration::from_millis(50))
                    .unwrap()
                    .0;
            }
            n.0 -= 1;
            drop(n);
            self.inner.list(prefix)
        }
    }

    #[test]
    fn a_far_store_is_listed_for_every_prefix_at_once() {
        let mem: Arc<dyn Store> = Arc::new(MemStore::default());
        mem.put("index/a", b"1").unwrap();
        mem.put("packs/0a/x", b"2").unwrap();
        let far = Arc::new(FarListings {
            inner: mem,
            at_once: Mutex::new((0, 0)),
            moved: std::sync::Condvar::new(),
        });
        let warm = WarmStore::new(far.clone());
        warm.warm(&["index", "packs", "archives"]);
        assert_eq!(far.at_once.lock().unwrap().1, 3, "listed one after another");
        assert_eq!(names(&warm.list("packs").unwrap()), ["packs/0a/x"]);
        assert_eq!(names(&warm.list("index").unwrap()), ["index/a"]);
        assert!(warm.list("archives").unwrap().is_empty());
    }

    #[test]
    fn prefixes_cover_only_their_own_objects() {
        assert!(covers("packs", "packs/ab/cd"));
        assert!(covers("", "config"));
        assert!(!covers("packs", "packsx/a"));
        assert!(!covers("index", "packs/ab"));
    }
}
