//! Slow-backend emulation for benchmarks and tests. Every operation takes at least
//! `latency + bytes / bandwidth`, and the store's lock is held for the whole of it, so the
//! backend is serial like a single slow connection: a pack upload in the store thread delays a
//! read or lock refresh from the calling thread, as a real slow link does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ByteRange, ObjectInfo, Store, StoreResult};

pub struct SlowStore {
    inner: Arc<dyn Store>,
    latency: Duration,
    /// Bits per second; `None` is unlimited.
    bandwidth: Option<u64>,
    lock: Mutex<()>,
}

impl SlowStore {
    pub fn new(inner: Arc<dyn Store>, latency: Duration, bandwidth_bits: Option<u64>) -> Self {
        Self {
            inner,
            latency,
            bandwidth: bandwidth_bits.filter(|b| *b > 0),
            lock: Mutex::new(()),
        }
    }

    /// Reads `CAIRN_STORE_LATENCY` (µs per operation) and `CAIRN_STORE_BANDWIDTH` (bit/s).
    pub fn from_env(inner: Arc<dyn Store>) -> Result<Option<Self>, String> {
        let parse = |var: &str| -> Result<Option<u64>, String> {
            match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("{var}={v:?} is not a whole number")),
                _ => Ok(None),
            }
        };
        let latency = parse("CAIRN_STORE_LATENCY")?;
        let bandwidth = parse("CAIRN_STORE_BANDWIDTH")?;
        if latency.is_none() && bandwidth.is_none() {
            return Ok(None);
        }
        Ok(Some(Self::new(
            inner,
            Duration::from_micros(latency.unwrap_or(0)),
            bandwidth,
        )))
    }

    fn cost(&self, bytes: u64) -> Duration {
        let transfer = match self.bandwidth {
            Some(bw) => Duration::from_secs_f64(bytes as f64 * 8.0 / bw as f64),
            None => Duration::ZERO,
        };
        self.latency + transfer
    }

    /// Runs `op` under the lock, then sleeps (still holding it) for what the emulated link
    /// would have taken beyond the real time.
    fn throttled<T>(
        &self,
        op: impl FnOnce() -> StoreResult<T>,
        bytes: impl Fn(&T) -> u64,
    ) -> StoreResult<T> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let start = Instant::now();
        let result = op();
        let moved = match &result {
            Ok(v) => bytes(v),
            Err(_) => 0,
        };
        let target = self.cost(moved);
        let spent = start.elapsed();
        if target > spent {
            std::thread::sleep(target - spent);
        }
        result
    }
}

impl Store for SlowStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        let n = data.len() as u64;
        self.throttled(|| self.inner.put(name, data), |_| n)
    }

    fn put_new(&self, name: &str, data: &[u8]) -> StoreResult<bool> {
        let n = data.len() as u64;
        self.throttled(|| self.inner.put_new(name, data), |_| n)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.throttled(|| self.inner.get(name, range), |v| v.len() as u64)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        // A listing moves roughly a name and a size per object.
        self.throttled(|| self.inner.list(prefix), |v| v.len() as u64 * 100)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.throttled(|| self.inner.delete(name), |_| 0)
    }

    fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.throttled(|| self.inner.rename(from, to), |_| 0)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.throttled(|| self.inner.info(name), |_| 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn operations_take_latency_plus_transfer_time() {
        let s = SlowStore::new(
            Arc::new(MemStore::new()),
            Duration::from_millis(20),
            Some(8 * 100_000), // 100 kB/s
        );
        let t = Instant::now();
        s.put("a", &[0u8; 10_000]).unwrap(); // 20 ms + 100 ms
        assert!(t.elapsed() >= Duration::from_millis(120));
        let t = Instant::now();
        s.delete("a").unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
