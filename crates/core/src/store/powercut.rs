//! A test store that models what survives a power cut.
//!
//! Each operation is carried out the way the local backend does it, as separate file-system
//! steps: a put writes a temporary file, fsyncs it, renames it over the final name and fsyncs
//! the directory; a delete unlinks and fsyncs the directory. Until its directory is fsynced,
//! a rename or unlink is *volatile*: the running program sees it, a power cut may lose it.
//! File contents are durable once fsynced; a temporary file never has a reachable name.
//!
//! Steps are numbered from 1. With `cut_at = k`, step k does not happen: the power goes off,
//! the operation in progress and every later one fail. [`PowerCutStore::after_cut`] then gives
//! the state a reboot would find, resolving volatile changes as asked ([`Volatile`]): all
//! lost, or all kept (a directory may be written back without an fsync), which bound what a
//! real file system can do.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::mem::MemStore;
use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

/// How volatile (not yet fsynced) directory changes are resolved at the cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Volatile {
    Lost,
    Kept,
}

#[derive(Default)]
struct State {
    /// Names and contents a reboot finds for sure.
    durable: BTreeMap<String, Vec<u8>>,
    /// What the running program sees.
    visible: BTreeMap<String, Vec<u8>>,
    /// Renames and unlinks not yet fsynced, in order: (name, new contents or None if removed).
    pending: Vec<(String, Option<Vec<u8>>)>,
    cut: bool,
}

pub struct PowerCutStore {
    state: Mutex<State>,
    steps: AtomicU64,
    cut_at: AtomicU64,
    /// When set, puts skip the directory fsync (a deliberately broken backend, to show the
    /// checks built on this model have teeth).
    skip_dir_fsync: bool,
}

impl PowerCutStore {
    /// A store holding `objects` (durable), cutting power at step `cut_at` (0: never).
    pub fn new(objects: impl IntoIterator<Item = (String, Vec<u8>)>, cut_at: u64) -> Self {
        let durable: BTreeMap<String, Vec<u8>> = objects.into_iter().collect();
        Self {
            state: Mutex::new(State {
                visible: durable.clone(),
                durable,
                pending: Vec::new(),
                cut: false,
            }),
            steps: AtomicU64::new(0),
            cut_at: AtomicU64::new(cut_at),
            skip_dir_fsync: false,
        }
    }

    /// Models a backend that forgets to fsync directories.
    pub fn without_dir_fsync(mut self) -> Self {
        self.skip_dir_fsync = true;
        self
    }

    /// Cuts the power `k` steps from now (k ≥ 1; 0: never).
    pub fn arm(&self, k: u64) {
        let at = if k == 0 { 0 } else { self.steps() + k };
        self.cut_at.store(at, Ordering::SeqCst);
    }

    /// Steps carried out so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    pub fn was_cut(&self) -> bool {
        self.lock().cut
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One file-system step; fails once the power is off.
    fn step(&self, st: &mut State, name: &str) -> StoreResult<()> {
        if st.cut {
            return Err(cut_error(name));
        }
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.cut_at.load(Ordering::SeqCst) {
            st.cut = true;
            return Err(cut_error(name));
        }
        Ok(())
    }

    fn fsync_dir(&self, st: &mut State, name: &str) -> StoreResult<()> {
        if self.skip_dir_fsync {
            return Ok(());
        }
        self.step(st, name)?;
        // Directory fsync makes every pending change durable (one directory per object kind
        // is close enough: the backend fsyncs after each change).
        let pending: Vec<_> = st.pending.drain(..).collect();
        for (n, v) in pending {
            match v {
                Some(data) => st.durable.insert(n, data),
                None => st.durable.remove(&n),
            };
        }
        Ok(())
    }

    /// The objects a reboot after the cut would find.
    pub fn after_cut(&self, volatile: Volatile) -> MemStore {
        self.after_cut_keeping(|_| volatile == Volatile::Kept)
    }

    /// Like [`after_cut`](Self::after_cut), deciding for each volatile change (by object name)
    /// whether it reached the disk: any subset is possible on a real file system.
    pub fn after_cut_keeping(&self, keep: impl Fn(&str) -> bool) -> MemStore {
        let st = self.lock();
        let mut objects = st.durable.clone();
        for (n, v) in &st.pending {
            if !keep(n) {
                continue;
            }
            match v {
                Some(data) => objects.insert(n.clone(), data.clone()),
                None => objects.remove(n),
            };
        }
        let mem = MemStore::new();
        for (n, data) in objects {
            let _ = mem.put(&n, &data);
        }
        mem
    }
}

fn cut_error(name: &str) -> StoreError {
    StoreError::Io {
        name: name.to_string(),
        source: std::io::Error::other("power cut (simulated)"),
    }
}

impl Store for PowerCutStore {
    /// As a local disk does: the bytes go back once the temporary file is written, before
    /// its fsync, rename and the directory's fsync (each a step the power can be cut at).
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        if let Err(e) = validate_name(name) {
            release(data);
            return Err(e);
        }
        let mut st = self.lock();
        // The temporary file is written: the bytes are no longer needed.
        let written = self.step(&mut st, name);
        let kept = data.clone();
        release(data);
        written?;
        self.step(&mut st, name)?; // fsync it: contents durable, not yet reachable
        self.step(&mut st, name)?; // rename over the final name: visible, volatile
        st.visible.insert(name.to_string(), kept.clone());
        st.pending.push((name.to_string(), Some(kept)));
        self.fsync_dir(&mut st, name)
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let mut st = self.lock();
        self.step(&mut st, name)?; // write the temporary file
        self.step(&mut st, name)?; // fsync it: contents durable, not yet reachable
        self.step(&mut st, name)?; // rename over the final name: visible, volatile
        st.visible.insert(name.to_string(), data.to_vec());
        st.pending.push((name.to_string(), Some(data.to_vec())));
        self.fsync_dir(&mut st, name)
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let mut st = self.lock();
        self.step(&mut st, name)?; // write the temporary file
        self.step(&mut st, name)?; // fsync it: contents durable, not yet reachable
        if st.visible.contains_key(name) {
            return Err(StoreError::Exists {
                name: name.to_string(),
            });
        }
        self.step(&mut st, name)?; // link to the final name: visible, volatile
        st.visible.insert(name.to_string(), data.to_vec());
        st.pending.push((name.to_string(), Some(data.to_vec())));
        self.fsync_dir(&mut st, name)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        let data = self.get(name, None)?;
        super::check_size(name, data.len() as u64, max)?;
        Ok(data)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let mut st = self.lock();
        self.step(&mut st, name)?;
        let data = st.visible.get(name).ok_or_else(|| StoreError::NotFound {
            name: name.to_string(),
        })?;
        super::read_range(name, data, range)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        let mut st = self.lock();
        self.step(&mut st, prefix)?;
        Ok(super::mem::list_map(&st.visible, prefix))
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        let mut st = self.lock();
        self.step(&mut st, name)?; // unlink: volatile
        if st.visible.remove(name).is_none() {
            return Err(StoreError::NotFound {
                name: name.to_string(),
            });
        }
        st.pending.push((name.to_string(), None));
        self.fsync_dir(&mut st, name)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        validate_name(name)?;
        let mut st = self.lock();
        self.step(&mut st, name)?;
        let data = st.visible.get(name).ok_or_else(|| StoreError::NotFound {
            name: name.to_string(),
        })?;
        Ok(ObjectInfo {
            name: name.to_string(),
            size: data.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_survives_only_once_its_directory_is_fsynced() {
        // put = 4 steps; cutting at step 4 (the directory fsync) leaves it volatile.
        for cut in 1..=4 {
            let s = PowerCutStore::new(Vec::new(), cut);
            assert!(s.put("index/a", b"x").is_err());
            assert!(
                s.after_cut(Volatile::Lost).get("index/a", None).is_err(),
                "cut {cut}"
            );
            let kept = s.after_cut(Volatile::Kept).get("index/a", None).is_ok();
            assert_eq!(
                kept,
                cut == 4,
                "cut {cut}: the rename happened but was not fsynced"
            );
        }
        let s = PowerCutStore::new(Vec::new(), 5);
        s.put("index/a", b"x").unwrap();
        assert!(s.put("index/b", b"y").is_err());
        assert!(s.after_cut(Volatile::Lost).get("index/a", None).is_ok());
    }

    #[test]
    fn without_dir_fsync_nothing_is_durable() {
        let s = PowerCutStore::new(Vec::new(), 100).without_dir_fsync();
        s.put("index/a", b"x").unwrap();
        assert!(s.after_cut(Volatile::Lost).get("index/a", None).is_err());
    }
}
