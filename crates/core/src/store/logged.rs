//! A record of every store operation: one line per operation (`N kind name`), numbered from 1
//! in the order they reach the store. `CAIRN_STORE_LOG=FILE` turns it on; benchmarks count a
//! run's operations with it, and tests count them before failing each one in turn.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{ByteRange, ObjectInfo, OpKind, Release, Store, StoreResult};

pub struct LoggedStore {
    inner: Arc<dyn Store>,
    /// The file, and the number of operations so far (under one lock, so that the numbers in
    /// the file are in order).
    log: Arc<Mutex<(File, u64)>>,
}

impl LoggedStore {
    /// Appends to `path`, creating it.
    pub fn new(inner: Arc<dyn Store>, path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            inner,
            log: Arc::new(Mutex::new((file, 0))),
        })
    }

    fn record(&self, kind: OpKind, name: &str) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.1 += 1;
        let seq = log.1;
        // A log that cannot be written must not fail the backup it records.
        let _ = writeln!(log.0, "{seq} {} {name}", kind.as_str());
    }
}

impl super::wrapper::Wrapper for LoggedStore {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Through this decorator's own `get`.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        *buf = super::wrapper::Wrapper::get(self, name, range)?;
        Ok(())
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.record(OpKind::Put, name);
        self.inner.put(name, data)
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        self.record(OpKind::Put, name);
        self.inner.put_releasing(name, data, release)
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.record(OpKind::Put, name);
        self.inner.create_new(name, data)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        self.record(OpKind::Get, name);
        self.inner.get_bounded(name, max)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.record(OpKind::Get, name);
        self.inner.get(name, range)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        self.record(OpKind::List, prefix);
        self.inner.list(prefix)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.record(OpKind::Delete, name);
        self.inner.delete(name)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.record(OpKind::Info, name);
        self.inner.info(name)
    }

    /// The inner store's lane, logged into the same file with the same numbering.
    fn wrap_lane(&self, lane: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(LoggedStore {
            inner: lane,
            log: Arc::clone(&self.log),
        })
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn every_operation_is_one_numbered_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ops");
        let s = LoggedStore::new(Arc::new(MemStore::new()), &path).unwrap();
        s.put("packs/a", b"1").unwrap();
        s.get("packs/a", None).unwrap();
        assert!(s.delete("packs/b").is_err());
        s.list("packs").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "1 put packs/a\n2 get packs/a\n3 delete packs/b\n4 list packs\n"
        );
    }
}
