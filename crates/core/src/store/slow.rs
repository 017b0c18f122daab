//! Slow-backend emulation for benchmarks and tests. Every operation takes at least
//! `latency + bytes / bandwidth`, and holds one of the backend's connections for the whole of
//! it; operations wait for a connection in the order they came, as requests queue on a link.
//! By default there is one connection, so the backend is serial like a single slow link: a
//! pack upload in the store thread delays a read from the calling thread, as a real slow link
//! does. A lock's refresh goes through the lane ([`Store::lane`]): a connection of its own. `CAIRN_STORE_CONNECTIONS=N` gives it N, each with that latency and
//! bandwidth, like an object store reached over N HTTP connections. (The command line reads
//! the settings: `CAIRN_STORE_LATENCY` in µs, `CAIRN_STORE_BANDWIDTH` in bit/s.)

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{ByteRange, ObjectInfo, Release, Store, StoreResult};

pub struct SlowStore {
    inner: Arc<dyn Store>,
    latency: Duration,
    /// Bits per second; `None` is unlimited.
    bandwidth: Option<u64>,
    /// Connections free, and the operations waiting for one, served in the order they came
    /// (a link is a queue: what was sent first goes first).
    line: Mutex<Line>,
    freed: Condvar,
}

struct Line {
    free: usize,
    /// Tickets of the waiting operations, oldest first.
    waiting: std::collections::VecDeque<u64>,
    next: u64,
}

impl Line {
    fn new(connections: usize) -> Mutex<Line> {
        Mutex::new(Line {
            free: connections.max(1),
            waiting: std::collections::VecDeque::new(),
            next: 0,
        })
    }
}

impl SlowStore {
    pub fn new(inner: Arc<dyn Store>, latency: Duration, bandwidth_bits: Option<u64>) -> Self {
        Self::with_connections(inner, latency, bandwidth_bits, 1)
    }

    pub fn with_connections(
        inner: Arc<dyn Store>,
        latency: Duration,
        bandwidth_bits: Option<u64>,
        connections: usize,
    ) -> Self {
        Self {
            inner,
            latency,
            bandwidth: bandwidth_bits.filter(|b| *b > 0),
            line: Line::new(connections),
            freed: Condvar::new(),
        }
    }

    fn cost(&self, bytes: u64) -> Duration {
        let transfer = match self.bandwidth {
            Some(bw) => Duration::from_secs_f64(bytes as f64 * 8.0 / bw as f64),
            None => Duration::ZERO,
        };
        self.latency + transfer
    }

    /// Runs `op` on a free connection, then sleeps (still holding it) for what the emulated
    /// link would have taken beyond the real time.
    fn throttled<T>(
        &self,
        op: impl FnOnce() -> StoreResult<T>,
        bytes: impl Fn(&T) -> u64,
    ) -> StoreResult<T> {
        let _connection = self.connect();
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

/// A connection in use; given back when dropped.
struct Connection<'a>(&'a SlowStore);

impl SlowStore {
    /// Waits for a free connection, in the order operations came.
    fn connect(&self) -> Connection<'_> {
        let mut line = self.line.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = line.next;
        line.next += 1;
        line.waiting.push_back(ticket);
        while line.free == 0 || line.waiting.front() != Some(&ticket) {
            line = self.freed.wait(line).unwrap_or_else(|p| p.into_inner());
        }
        line.waiting.pop_front();
        line.free -= 1;
        // The next in line may take another free connection.
        self.freed.notify_all();
        Connection(self)
    }
}

impl Drop for Connection<'_> {
    fn drop(&mut self) {
        self.0.line.lock().unwrap_or_else(|p| p.into_inner()).free += 1;
        self.0.freed.notify_all();
    }
}

impl super::wrapper::Wrapper for SlowStore {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Through this decorator's own `get`.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        *buf = super::wrapper::Wrapper::get(self, name, range)?;
        Ok(())
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        let n = data.len() as u64;
        self.throttled(|| self.inner.put(name, data), |_| n)
    }

    /// The bytes come back when the store wrapped gives them back; the link's time is
    /// taken after, as a far store keeps the connection until the object is stored.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let n = data.len() as u64;
        self.throttled(|| self.inner.put_releasing(name, data, release), |_| n)
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        let n = data.len() as u64;
        self.throttled(|| self.inner.create_new(name, data), |_| n)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.throttled(|| self.inner.get(name, range), |v| v.len() as u64)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        self.throttled(|| self.inner.get_bounded(name, max), |v| v.len() as u64)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        // A listing moves roughly a name and a size per object.
        self.throttled(|| self.inner.list(prefix), |v| v.len() as u64 * 100)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.throttled(|| self.inner.delete(name), |_| 0)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.throttled(|| self.inner.info(name), |_| 0)
    }

    fn is_remote(&self) -> bool {
        true
    }

    /// A connection of its own, with the same latency and bandwidth, that bulk transfers on
    /// the others never hold.
    fn has_lane(&self) -> bool {
        true
    }

    fn lane(&self) -> Option<Arc<dyn Store>> {
        let inner = self.inner.lane().unwrap_or_else(|| Arc::clone(&self.inner));
        Some(Arc::new(SlowStore {
            inner,
            latency: self.latency,
            bandwidth: self.bandwidth,
            line: Line::new(1),
            freed: Condvar::new(),
        }))
    }
}

/// A disk whose flush is slow (`CAIRN_STORE_FLUSH_MS`, for benchmarks): every write takes
/// `delay` longer, after the store wrapped has given its bytes back and before the write
/// ends, as an fsync that waits for a slow device does. The store stays what it is (a local
/// disk is not made remote).
pub struct SlowFlush {
    inner: Arc<dyn Store>,
    delay: Duration,
}

impl SlowFlush {
    pub fn new(inner: Arc<dyn Store>, delay: Duration) -> Self {
        Self { inner, delay }
    }

    fn flushed<T>(&self, done: StoreResult<T>) -> StoreResult<T> {
        std::thread::sleep(self.delay);
        done
    }
}

impl super::wrapper::Wrapper for SlowFlush {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        self.inner().get_into(name, range, buf)
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.flushed(self.inner.put(name, data))
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        self.flushed(self.inner.put_releasing(name, data, release))
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.flushed(self.inner.create_new(name, data))
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

    /// Two connections: two operations hold them, a third waits until one is given back.
    /// (Shown with the connections themselves, not by timing.)
    #[test]
    fn connections_bound_concurrency() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let s = Arc::new(SlowStore::with_connections(
            Arc::new(MemStore::new()),
            Duration::ZERO,
            None,
            2,
        ));
        let first = s.connect();
        let _second = s.connect();
        let got_third = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (s, got_third) = (Arc::clone(&s), Arc::clone(&got_third));
            std::thread::spawn(move || {
                let _third = s.connect();
                got_third.store(true, Ordering::SeqCst);
            })
        };
        // Until the third is in line: from then on only a freed connection lets it through.
        while s.line.lock().unwrap().waiting.is_empty() {
            std::thread::yield_now();
        }
        assert!(
            !got_third.load(Ordering::SeqCst),
            "a third connection while two are held"
        );
        drop(first);
        waiter.join().unwrap();
        assert!(got_third.load(Ordering::SeqCst));
    }

    /// One connection (the default) serialises: four 50 ms operations from four threads take
    /// at least 200 ms.
    #[test]
    fn one_connection_is_serial() {
        let s = Arc::new(SlowStore::new(
            Arc::new(MemStore::new()),
            Duration::from_millis(50),
            None,
        ));
        let t = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || s.put(&format!("o{i}"), b"x").unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(t.elapsed() >= Duration::from_millis(200));
    }
}
