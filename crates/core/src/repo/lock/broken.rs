//! Records of broken locks: whoever removes a lock it does not hold (judged abandoned, or
//! `cairn break-lock`) first writes `broken/<the lock's name>`.
//!
//! The holder of a removed lock may not be gone: a process stopped for an hour, a suspended
//! laptop, a write stuck in a hung mount. Until it notices, it can still commit an archive
//! against packs it stored or deduplicated against. The record outlives the command that
//! removed the lock, so that every client that may delete packs afterwards, on any machine,
//! knows: until it has watched the record for the grace interval by its own clock
//! ([`super::LockTiming::grace`]), packs it would delete are retired instead, and deleted by a
//! later run if no archive then needs them (`repo/retire.rs`). The record holds nothing about
//! anyone; its name is the removed lock's random name.

use crate::store::{ObjectInfo, Store, StoreError};

/// Where the records live.
pub const PREFIX: &str = "broken";

/// What a record holds: it is its existence that counts.
const CONTENTS: &[u8] = b"cairn: a lock was removed by another client\n";

/// The record of the removal of lock object `lock_name` (`locks/<hex>`).
pub fn record_name(lock_name: &str) -> String {
    let base = lock_name.rsplit('/').next().unwrap_or(lock_name);
    format!("{PREFIX}/{base}")
}

/// Records that `lock_name` is being removed by someone other than its holder.
pub fn record(store: &dyn Store, lock_name: &str) -> Result<(), StoreError> {
    store.put(&record_name(lock_name), CONTENTS)
}

/// Every record.
pub fn list(store: &dyn Store) -> Result<Vec<ObjectInfo>, StoreError> {
    store.list(PREFIX)
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn a_record_is_named_after_the_lock_it_outlives() {
        let store = MemStore::new();
        record(&store, "locks/0123abcd").unwrap();
        let l = list(&store).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name, "broken/0123abcd");
    }
}
