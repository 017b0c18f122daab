//! The writer's pack buffers: given back by the stores as soon as they no longer need them
//! ([`crate::store::Store::put_releasing`]), and reused for the next packs.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Pack buffers given back by stores, and the news that a store thread ended.
#[derive(Default)]
pub(super) struct BufferPool {
    state: Mutex<Returned>,
    changed: Condvar,
}

#[derive(Default)]
pub(super) struct Returned {
    pub(super) free: Vec<Vec<u8>>,
    /// Buffers that store threads took with them (a thread that panicked before giving its
    /// back): no longer counted as held.
    pub(super) lost: usize,
}

impl BufferPool {
    pub(super) fn lock(&self) -> MutexGuard<'_, Returned> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn give(&self, buf: Vec<u8>) {
        self.lock().free.push(buf);
        self.changed.notify_all();
    }

    /// Waits, with the state held by `guard`, until a buffer is given back or a store thread
    /// ends, or for `timeout` at most.
    pub(super) fn wait(&self, guard: MutexGuard<'_, Returned>, timeout: Duration) {
        let _ = self.changed.wait_timeout(guard, timeout);
    }
}

/// A store thread's hold on its pack buffer: gives it back to the pool once, or, if the thread
/// ends without doing so (a panic), counts it lost. Either way the writer is woken.
pub(super) struct Lender {
    pool: Arc<BufferPool>,
    given: bool,
}

impl Lender {
    pub(super) fn new(pool: Arc<BufferPool>) -> Self {
        Self { pool, given: false }
    }

    pub(super) fn give(&mut self, buf: Vec<u8>) {
        self.given = true;
        self.pool.give(buf);
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        if !self.given {
            self.pool.lock().lost += 1;
        }
        self.pool.changed.notify_all();
    }
}
