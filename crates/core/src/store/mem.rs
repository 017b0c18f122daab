//! In-memory backend for tests: the same contract as the local one, without a disk.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

/// A listing of the objects held in `map` below the directory `prefix` (already validated),
/// sorted by name.
pub(crate) fn list_map(map: &BTreeMap<String, Vec<u8>>, prefix: &str) -> Vec<ObjectInfo> {
    let dir = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    map.iter()
        .filter(|(k, _)| k.starts_with(&dir))
        .map(|(k, v)| ObjectInfo {
            name: k.clone(),
            size: v.len() as u64,
        })
        .collect()
}

#[derive(Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // A panic while holding the lock cannot leave a half-written map (every mutation is a
        // single insert or remove), so a poisoned lock is still usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces an object's bytes behind the store's back (for damage tests).
    pub fn tamper(&self, name: &str, f: impl FnOnce(&mut Vec<u8>)) {
        if let Some(v) = self.objects().get_mut(name) {
            f(v);
        }
    }
}

impl Store for MemStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        self.objects().insert(name.to_string(), data.to_vec());
        Ok(())
    }

    /// The bytes are kept as they are (no copy), and a buffer of the same room goes back at
    /// once, before the object is there: as early as a local disk gives its back, so that
    /// tests on memory see the pack writer refill buffers while stores still run.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        if let Err(e) = validate_name(name) {
            release(data);
            return Err(e);
        }
        release(Vec::with_capacity(data.capacity()));
        self.objects().insert(name.to_string(), data);
        Ok(())
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let mut objects = self.objects();
        if objects.contains_key(name) {
            return Err(StoreError::Exists {
                name: name.to_string(),
            });
        }
        objects.insert(name.to_string(), data.to_vec());
        Ok(())
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let objects = self.objects();
        let data = objects.get(name).ok_or_else(|| StoreError::NotFound {
            name: name.to_string(),
        })?;
        super::check_size(name, data.len() as u64, max)?;
        Ok(data.clone())
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let objects = self.objects();
        let data = objects.get(name).ok_or_else(|| StoreError::NotFound {
            name: name.to_string(),
        })?;
        super::read_range(name, data, range)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        Ok(list_map(&self.objects(), prefix))
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        self.objects()
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| StoreError::NotFound {
                name: name.to_string(),
            })
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        validate_name(name)?;
        let objects = self.objects();
        let data = objects.get(name).ok_or_else(|| StoreError::NotFound {
            name: name.to_string(),
        })?;
        Ok(ObjectInfo {
            name: name.to_string(),
            size: data.len() as u64,
        })
    }
}
