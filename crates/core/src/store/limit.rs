//! `--limit-upload` and `--limit-download`: the bytes a store sends and receives held to a rate,
//! as restic's and borg's limits do. Each transfer first takes its bytes from a bucket that
//! fills at the rate (a quarter of a second's worth at most): a transfer larger than what is
//! there waits until the bucket would have held it, and the debt it leaves makes the next one
//! wait too, so that over any stretch the bytes moved stay at the rate, however many threads
//! share the store.
//!
//! Locks are never held back: their objects (`locks/…`) are small, and a lock's refresh that
//! waited behind a limited upload could make other clients judge it abandoned (the slow-link
//! guarantee of the lock protocol holds under a limit). The lane a store gives for such small
//! operations ([`Store::lane`]) is passed through unlimited for the same reason.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wrapper::Wrapper;
use super::{ByteRange, Release, Store, StoreResult};

/// The rates, in bytes a second (`None`: unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub upload: Option<u64>,
    pub download: Option<u64>,
}

impl Limits {
    pub fn any(&self) -> bool {
        self.upload.is_some() || self.download.is_some()
    }
}

/// Bytes that may pass now, refilled at a rate; negative while transfers that went ahead are
/// paid off.
struct Bucket {
    rate: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        Bucket {
            rate: rate.max(1) as f64,
            state: Mutex::new((0.0, Instant::now())),
        }
    }

    /// How long a transfer of `n` bytes waits before it starts; takes its bytes.
    fn take(&self, n: usize) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let burst = self.rate / 4.0;
        let (tokens, at) = *s;
        let filled = (tokens + now.duration_since(at).as_secs_f64() * self.rate).min(burst);
        let left = filled - n as f64;
        *s = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.rate)
        }
    }

    fn pass(&self, name: &str, n: usize) {
        if !name.starts_with("locks/") {
            std::thread::sleep(self.take(n));
        }
    }
}

/// A store whose transfers are held to [`Limits`].
pub struct LimitedStore {
    inner: Arc<dyn Store>,
    up: Option<Bucket>,
    down: Option<Bucket>,
}

impl LimitedStore {
    pub fn new(inner: Arc<dyn Store>, limits: Limits) -> Self {
        Self {
            inner,
            up: limits.upload.map(Bucket::new),
            down: limits.download.map(Bucket::new),
        }
    }

    fn sending(&self, name: &str, n: usize) {
        if let Some(b) = &self.up {
            b.pass(name, n);
        }
    }

    fn receiving(&self, name: &str, n: usize) {
        if let Some(b) = &self.down {
            b.pass(name, n);
        }
    }
}

impl Wrapper for LimitedStore {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Through this decorator's own `get`.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        *buf = Wrapper::get(self, name, range)?;
        Ok(())
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.sending(name, data.len());
        self.inner.put(name, data)
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        self.sending(name, data.len());
        self.inner.put_releasing(name, data, release)
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.sending(name, data.len());
        self.inner.create_new(name, data)
    }

    // What is received is paid for after it came: its size is known then.
    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        let data = self.inner.get(name, range)?;
        self.receiving(name, data.len());
        Ok(data)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        let data = self.inner.get_bounded(name, max)?;
        self.receiving(name, data.len());
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_transfers_to_its_rate() {
        let b = Bucket::new(1_000_000);
        // A quarter of a second's worth may pass at once only after it filled; then each
        // transfer waits for what it takes beyond that.
        assert!(b.take(1_000_000) >= Duration::from_millis(990));
        // The debt is carried: the next waits for its own bytes and the rest of the debt.
        assert!(b.take(500_000) >= Duration::from_millis(1300));
    }

    #[test]
    fn locks_and_lanes_are_not_held_back() {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn Store> = Arc::new(crate::store::local::LocalStore::new(dir.path()));
        let s = LimitedStore::new(
            local,
            Limits {
                upload: Some(1),
                download: Some(1),
            },
        );
        let t = Instant::now();
        Store::put(&s, "locks/0123", &[0u8; 4096]).unwrap();
        assert_eq!(Store::get(&s, "locks/0123", None).unwrap().len(), 4096);
        // At 1 byte a second, either would have waited over an hour.
        assert!(t.elapsed() < Duration::from_secs(60));
    }
}
