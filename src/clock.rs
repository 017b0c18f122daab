//! The two clocks cairn reads.
//!
//! - [`now`]: the wall clock, for what people read (archive times, lock timestamps) and for
//!   prune's age rules. Tests and the many-clients torture shift it with
//!   `CAIRN_TEST_CLOCK_OFFSET=SECONDS` (signed), to play a host whose clock is wrong.
//! - [`since_boot`]: time since this machine booted, suspend included (`CLOCK_BOOTTIME`). It
//!   never jumps when someone sets the wall clock, so intervals that decide safety (how long a
//!   lock was watched without a change, how long ago our own lock was refreshed) use it.
//!
//! No decision compares one host's clock with another's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock, shifted by `CAIRN_TEST_CLOCK_OFFSET` seconds when set.
pub fn now() -> SystemTime {
    let offset = std::env::var("CAIRN_TEST_CLOCK_OFFSET")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0);
    let t = SystemTime::now();
    if offset >= 0 {
        t + Duration::from_secs(offset as u64)
    } else {
        t - Duration::from_secs(offset.unsigned_abs())
    }
}

/// Seconds since the epoch by [`now`] (0 before 1970).
pub fn now_secs() -> u64 {
    now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Time since boot, suspend included; monotonic within one boot.
pub fn since_boot() -> Duration {
    // CLOCK_BOOTTIME exists on every Linux since 2.6.39. Should it fail, no time passes,
    // which errs on the side of keeping locks.
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => Duration::new(
            ts.tv_sec().max(0) as u64,
            ts.tv_nsec().clamp(0, 999_999_999) as u32,
        ),
        Err(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_moves_forward() {
        let a = since_boot();
        std::thread::sleep(Duration::from_millis(20));
        let b = since_boot();
        assert!(
            a > Duration::ZERO && b >= a + Duration::from_millis(15),
            "{a:?} {b:?}"
        );
    }
}
