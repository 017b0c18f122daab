//! How many packs may be in flight for a remote store, chosen as the backup goes from what the
//! store is measured to do; kept apart from the writer as rustic keeps its pack sizer.

use std::time::Duration;

use super::{Trace, MAX_IN_FLIGHT};
use crate::util::clock::Mono;

/// The pack buffers a chosen (not fixed) number of packs in flight may hold, all told.
const AUTO_MEMORY: usize = 256 << 20;

/// Packs in flight before the first store is measured. Far away, a store's opening and
/// closing requests (open, fsync, rename) take round trips in which it sends nothing: with two,
/// which share the link and so end together, the link stood idle while both closed.
const START: usize = 4;

/// Chooses how many packs may be in flight for a remote store, from what it is measured to
/// do: if a store takes S seconds and the caller fills a pack in F (not counting its waits for
/// the store), ⌈S / F⌉ stores at once keep the caller from ever waiting. S is the shortest
/// store of the session: a store that queued behind others (more in flight than the store
/// serves at once) took longer than storing costs, and must not push the number up further —
/// once every store queues, a recent window holds only such stores (measured: with a window
/// of 8, the emulated 4-connection store drove the number to 16).
pub(super) struct Pacer {
    cap: usize,
    now: usize,
    /// Seconds to fill a pack, smoothed.
    fill: Option<f64>,
    /// The shortest store so far, in seconds.
    store: Option<f64>,
    last_hand_off: Mono,
    /// Time spent waiting for stores since the last hand-off.
    waited: Duration,
    /// A barrier emptied the pipeline; the next pack's filling starts with its first blob.
    idle: bool,
}

impl Pacer {
    pub(super) fn new(target_size: usize) -> Self {
        let cap = (AUTO_MEMORY / target_size.max(1)).clamp(1, MAX_IN_FLIGHT);
        Self {
            cap,
            now: cap.min(START),
            fill: None,
            store: None,
            last_hand_off: Mono::now(),
            waited: Duration::ZERO,
            idle: false,
        }
    }

    /// A pack was filled: how many may now be in flight.
    pub(super) fn handed_off(&mut self, trace: &Trace) -> usize {
        let now = Mono::now();
        let took = now
            .since(self.last_hand_off)
            .saturating_sub(self.waited)
            .as_secs_f64();
        (self.last_hand_off, self.waited) = (now, Duration::ZERO);
        self.fill = Some(match self.fill {
            None => took,
            Some(f) => 0.7 * f + 0.3 * took,
        });
        if let (Some(fill), Some(store)) = (self.fill, self.store) {
            let n = Self::choose(store, fill, self.cap);
            if n != self.now {
                trace.note(&format!("in flight: {n}"));
                self.now = n;
            }
        }
        self.now
    }

    /// Stores at once so that a pack filled every `fill` seconds never waits for one that
    /// takes `store` seconds: ⌈store / fill⌉, from 1 to `cap`.
    fn choose(store: f64, fill: f64, cap: usize) -> usize {
        let n = (store / fill.max(1e-3)).ceil();
        (n.min(cap as f64) as usize).clamp(1, cap)
    }

    /// A pack starts filling: after a barrier, its filling time counts from here.
    pub(super) fn pack_started(&mut self) {
        if self.idle {
            self.idle = false;
            (self.last_hand_off, self.waited) = (Mono::now(), Duration::ZERO);
        }
    }

    /// A store took `secs`.
    pub(super) fn stored(&mut self, secs: f64) {
        self.store = Some(self.store.map_or(secs, |s| s.min(secs)));
    }

    /// The shortest store so far, in seconds.
    #[cfg(test)]
    pub(super) fn shortest_store(&self) -> Option<f64> {
        self.store
    }

    /// The caller waited `d` for a store: not time spent filling the pack.
    pub(super) fn waited_for_store(&mut self, d: Duration) {
        self.waited += d;
    }

    /// A barrier emptied the pipeline: what happens until the next pack's first blob (the
    /// barrier's waits, the partial pack's store, the caller's work after it) is not filling.
    pub(super) fn went_idle(&mut self) {
        self.idle = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::clock;

    #[test]
    fn the_pacer_keeps_the_caller_from_waiting_within_its_memory() {
        // A store of 0.2 s and a pack filled every 0.05 s: 4 at once.
        assert_eq!(Pacer::choose(0.2, 0.05, 16), 4);
        assert_eq!(Pacer::choose(0.21, 0.05, 16), 5);
        // A store faster than the caller: one is enough.
        assert_eq!(Pacer::choose(0.01, 0.05, 16), 1);
        assert_eq!(Pacer::choose(0.0, 0.05, 16), 1);
        // However slow the store, no more than the cap.
        assert_eq!(Pacer::choose(30.0, 0.0, 16), 16);
        assert_eq!(Pacer::choose(f64::INFINITY, 0.05, 5), 5);
        // The cap: 256 MiB of pack buffers, from 1 to 16 packs.
        assert_eq!(Pacer::new(50_000_000).cap, 5);
        assert_eq!(Pacer::new(16_000_000).cap, 16);
        assert_eq!(Pacer::new(1 << 30).cap, 1);
        assert_eq!(Pacer::new(0).cap, 16);
    }

    #[test]
    fn a_barrier_and_what_follows_it_do_not_count_as_filling_a_pack() {
        let pause = std::time::Duration::from_millis(60);
        // Without a barrier, the time since the last hand-off is filling time.
        let mut p = Pacer::new(16 << 20);
        clock::advance(pause);
        p.pack_started();
        p.handed_off(&Trace::Off);
        assert!(p.fill.unwrap() >= pause.as_secs_f64());
        // After a barrier, filling counts from the next pack's first blob.
        let mut p = Pacer::new(16 << 20);
        p.went_idle();
        clock::advance(pause);
        p.pack_started();
        p.handed_off(&Trace::Off);
        assert!(p.fill.unwrap() < pause.as_secs_f64() / 2.0, "{:?}", p.fill);
    }
}
