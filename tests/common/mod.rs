//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::sync::{Arc, Condvar, Mutex};

use cairn::blob::seal_chunk;
use cairn::crypto::{Crypto, EncryptionMode, MasterKey};
use cairn::id::ChunkId;
use cairn::store::{ByteRange, ObjectInfo, Store, StoreResult};

pub fn crypto() -> Crypto {
    Crypto::new(EncryptionMode::Repokey, &MasterKey::generate())
}

/// Incompressible pseudo-random bytes.
pub fn random_bytes(seed: u64, size: usize) -> Vec<u8> {
    let mut data = vec![0u8; size];
    let mut x = (seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    data
}

/// `n` distinct sealed chunks of about `size` bytes.
pub fn chunks(c: &Crypto, n: usize, size: usize) -> Vec<(ChunkId, Vec<u8>)> {
    (0..n)
        .map(|i| seal_chunk(c, &random_bytes(i as u64, size)).unwrap())
        .collect()
}

/// A store whose puts block until the test opens the gate: makes "the store of pack N is
/// still running" a state the test controls, so overlap is shown by event order, not timing.
pub struct GatedStore {
    pub inner: Arc<dyn Store>,
    open: Mutex<bool>,
    cv: Condvar,
}

impl GatedStore {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            open: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    pub fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
}

impl Store for GatedStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.wait();
        self.inner.put(name, data)
    }
    fn put_new(&self, name: &str, data: &[u8]) -> StoreResult<bool> {
        self.wait();
        self.inner.put_new(name, data)
    }
    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.inner.get(name, range)
    }
    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> StoreResult<()> {
        self.inner.delete(name)
    }
    fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.inner.rename(from, to)
    }
    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.inner.info(name)
    }
}

/// Waits until `f` holds (polling), failing the test after 10 s.
pub fn wait_until(mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed().as_secs() < 10,
            "condition not reached in 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Runs the real binary with a scrubbed environment (no CAIRN_* from the caller), cheap KDF
/// parameters, and the given extra variables.
pub fn cairn(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1");
    cmd.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("cairn-test-cache"),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args);
    cmd.stdin(std::process::Stdio::null());
    cmd.output().expect("run cairn")
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
