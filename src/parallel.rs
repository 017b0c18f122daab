//! Small pieces shared by the parallel pipelines: one-shot replies, and a byte
//! budget that bounds how much data is in flight between stages.

use std::sync::{Condvar, Mutex};

/// A channel for exactly one reply.
pub fn oneshot<T>() -> (std::sync::mpsc::SyncSender<T>, std::sync::mpsc::Receiver<T>) {
    std::sync::mpsc::sync_channel(1)
}

/// Bytes in flight between a producer and a consumer. The producer acquires before it hands
/// data on, the consumer releases when it is done with it; closing wakes a waiting producer
/// for good (the consumer has stopped).
pub struct Budget {
    /// Bytes in flight, closed, paused.
    state: Mutex<(usize, bool, bool)>,
    cv: Condvar,
    max: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Self {
            state: Mutex::new((0, false, false)),
            cv: Condvar::new(),
            max,
        }
    }

    /// Waits until `n` more bytes fit (one item always fits when nothing is in flight).
    /// `false` once the budget is closed.
    pub fn acquire(&self, n: usize) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.1 {
                return false;
            }
            if !st.2 && (st.0 == 0 || st.0 + n <= self.max) {
                st.0 += n;
                return true;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub fn release(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 = st.0.saturating_sub(n);
        self.cv.notify_all();
    }

    /// While paused, producers wait (the synchronous store of a benchmark's sync side must
    /// not overlap assembly).
    pub fn pause(&self, paused: bool) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.2 = paused;
        self.cv.notify_all();
    }

    pub fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1 = true;
        self.cv.notify_all();
    }
}

/// Closes a budget when dropped, so a producer never waits on a consumer that is gone.
pub struct CloseOnDrop<'a>(pub &'a Budget);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_blocks_until_released_and_close_wakes() {
        let b = std::sync::Arc::new(Budget::new(10));
        assert!(b.acquire(8));
        assert!(b.acquire(2));
        let b2 = b.clone();
        let t = std::thread::spawn(move || b2.acquire(5));
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.release(8);
        assert!(t.join().unwrap());
        let b3 = b.clone();
        let t = std::thread::spawn(move || b3.acquire(100));
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.close();
        assert!(!t.join().unwrap());
    }
}
