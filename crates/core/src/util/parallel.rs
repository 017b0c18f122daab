//! Small pieces shared by the parallel pipelines: one-shot replies, and a byte
//! budget that bounds how much data is in flight between stages.

use std::sync::{Condvar, Mutex};

/// A channel for exactly one reply.
pub fn oneshot<T>() -> (crossbeam_channel::Sender<T>, crossbeam_channel::Receiver<T>) {
    crossbeam_channel::bounded(1)
}

/// Bytes in flight between a producer and a consumer. The producer acquires before it hands
/// data on, the consumer releases when it is done with it; closing wakes a waiting producer
/// for good (the consumer has stopped).
pub struct Budget {
    state: Mutex<BudgetState>,
    cv: Condvar,
    max: usize,
}

#[derive(Default)]
struct BudgetState {
    in_flight: usize,
    closed: bool,
    paused: bool,
    /// Producers blocked in `acquire` (tests wait for one instead of sleeping).
    waiting: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Self {
            state: Mutex::new(BudgetState::default()),
            cv: Condvar::new(),
            max,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `n` more bytes fit (one item always fits when nothing is in flight).
    /// `false` once the budget is closed.
    pub fn acquire(&self, n: usize) -> bool {
        let mut st = self.state();
        loop {
            if st.closed {
                return false;
            }
            if !st.paused && (st.in_flight == 0 || st.in_flight + n <= self.max) {
                st.in_flight += n;
                return true;
            }
            st.waiting += 1;
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiting -= 1;
        }
    }

    pub fn release(&self, n: usize) {
        let mut st = self.state();
        st.in_flight = st.in_flight.saturating_sub(n);
        self.cv.notify_all();
    }

    /// While paused, producers wait (the synchronous store of a benchmark's sync side must
    /// not overlap assembly).
    pub fn pause(&self, paused: bool) {
        self.state().paused = paused;
        self.cv.notify_all();
    }

    pub fn close(&self) {
        self.state().closed = true;
        self.cv.notify_all();
    }

    /// Bytes acquired and not yet released.
    pub fn in_flight(&self) -> usize {
        self.state().in_flight
    }

    /// How many producers are blocked in [`Budget::acquire`].
    pub fn waiting(&self) -> usize {
        self.state().waiting
    }
}

/// Closes a budget when dropped, so a producer never waits on a consumer that is gone.
pub struct CloseOnDrop<'a>(pub &'a Budget);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Reads that a remote store serves at once when a command fetches many small objects (index
/// fragments, archive objects): each costs a round trip, and one after another they cost the
/// store's latency times their number.
pub const REMOTE_READS: usize = 8;

/// Runs `work` on every item, up to `threads` at once, and gives the results to `take` in the
/// items' order, in the calling thread. Work runs at most `2 × threads` items ahead of what
/// `take` has had, so results waiting for their turn stay few. When `take` fails, no more work
/// starts and that error is returned once the work under way has ended.
pub fn in_order<T, R, E>(
    items: &[T],
    threads: usize,
    work: impl Fn(&T) -> R + Sync,
    mut take: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E>
where
    T: Sync,
    R: Send,
{
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    if threads <= 1 || items.len() <= 1 {
        return items.iter().try_for_each(|item| take(work(item)));
    }
    let window = 2 * threads;
    let next = AtomicUsize::new(0);
    // Items taken so far, and whether to stop; workers wait on it to stay within the window.
    let taken = (Mutex::new((0usize, false)), Condvar::new());
    let (tx, rx) = crossbeam_channel::unbounded::<(usize, R)>();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(items.len()) {
            let tx = tx.clone();
            let (next, taken, work) = (&next, &taken, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, SeqCst);
                if i >= items.len() {
                    return;
                }
                {
                    let guard = taken.0.lock().unwrap_or_else(|p| p.into_inner());
                    let guard = taken
                        .1
                        .wait_while(guard, |(done, stop)| !*stop && i >= *done + window)
                        .unwrap_or_else(|p| p.into_inner());
                    if guard.1 {
                        return;
                    }
                }
                if tx.send((i, work(&items[i]))).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let set = |done: Option<usize>| {
            let mut st = taken.0.lock().unwrap_or_else(|p| p.into_inner());
            match done {
                Some(n) => st.0 = n,
                None => st.1 = true,
            }
            taken.1.notify_all();
        };
        // Results that arrived before their turn.
        let mut early: std::collections::BTreeMap<usize, R> = std::collections::BTreeMap::new();
        let mut turn = 0;
        for (i, r) in rx.iter() {
            early.insert(i, r);
            while let Some(r) = early.remove(&turn) {
                turn += 1;
                if let Err(e) = take(r) {
                    set(None);
                    return Err(e);
                }
                set(Some(turn));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_whatever_order_the_work_ends_in() {
        let items: Vec<u64> = (0..40).collect();
        let mut seen = Vec::new();
        in_order(
            &items,
            4,
            |&i| {
                // Later items end first: earlier ones take longer (work, not a clock).
                for _ in 0..(40 - i) * 50 {
                    std::thread::yield_now();
                }
                i * 2
            },
            |r| -> Result<(), ()> {
                seen.push(r);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, items.iter().map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_failure_to_take_stops_the_work_and_is_returned() {
        let items: Vec<u32> = (0..1000).collect();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let mut taken = 0;
        let r = in_order(
            &items,
            3,
            |&i| {
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                i
            },
            |i| {
                taken += 1;
                if i == 5 {
                    Err("five")
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(r, Err("five"));
        assert_eq!(taken, 6);
        // Nothing starts 2 × 3 items or more past what was taken (5 when it failed).
        let done = done.load(std::sync::atomic::Ordering::SeqCst);
        assert!(done <= 5 + 6, "{done} items were worked on");
    }

    #[test]
    fn work_stays_within_its_window_of_what_was_taken() {
        let items: Vec<usize> = (0..200).collect();
        let started = std::sync::atomic::AtomicUsize::new(0);
        let mut taken = 0;
        in_order(
            &items,
            4,
            |&i| {
                started.fetch_max(i, std::sync::atomic::Ordering::SeqCst);
                i
            },
            |i| -> Result<(), ()> {
                // Items before i are taken: none from i + 2 × 4 on can have started.
                let furthest = started.load(std::sync::atomic::Ordering::SeqCst);
                assert!(furthest < i + 8, "item {furthest} started while taking {i}");
                taken += 1;
                // A slow taker, so that workers run ahead if the window lets them.
                for _ in 0..20 {
                    std::thread::yield_now();
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(taken, 200);
    }

    #[test]
    fn one_thread_or_one_item_works_in_the_calling_thread() {
        let here = std::thread::current().id();
        in_order(
            &[1, 2, 3],
            1,
            |_| std::thread::current().id(),
            |id| -> Result<(), ()> {
                assert_eq!(id, here);
                Ok(())
            },
        )
        .unwrap();
    }

    /// Until a producer is blocked in `acquire` (so that what follows wakes it, rather than
    /// finding the budget free before it asked).
    fn wait_for_a_waiter(b: &Budget) {
        while b.waiting() == 0 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn budget_blocks_until_released_and_close_wakes() {
        let b = std::sync::Arc::new(Budget::new(10));
        assert!(b.acquire(8));
        assert!(b.acquire(2));
        let b2 = b.clone();
        let t = std::thread::spawn(move || b2.acquire(5));
        wait_for_a_waiter(&b);
        b.release(8);
        assert!(t.join().unwrap());
        let b3 = b.clone();
        let t = std::thread::spawn(move || b3.acquire(100));
        wait_for_a_waiter(&b);
        b.close();
        assert!(!t.join().unwrap());
    }
}
