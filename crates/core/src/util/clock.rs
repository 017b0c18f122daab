//! The two clocks cairn reads.
//!
//! - [`now`]: the wall clock, for what people read (archive times, lock timestamps) and for
//!   prune's age rules. Tests and the many-clients torture shift it with
//!   `CAIRN_TEST_CLOCK_OFFSET=SECONDS` (signed), to play a host whose clock is wrong.
//! - [`since_boot`]: time since this machine booted, suspend included (`CLOCK_BOOTTIME`). It
//!   never jumps when someone sets the wall clock, so intervals that decide safety (how long a
//!   lock was watched without a change, how long ago our own lock was refreshed) use it.
//!
//! - [`Mono`]: the monotonic clock (`CLOCK_MONOTONIC`), which stops while the machine is
//!   suspended. Only for what may stop with the machine (progress, pacing); never for how long
//!   ago something was verified.
//!
//! No decision compares one host's clock with another's. [`Timestamp`] is how archives and
//! items store a time.
//!
//! Test builds (the `testing` feature) can move both interval clocks: a pause hook that plays
//! a suspend ([`suspended`]) takes the time it was stopped out of [`Mono`], as a real suspend
//! does, and `CAIRN_TEST_BOOT_OFFSET=SECONDS` adds to [`since_boot`], so that a test can play
//! an observer that has watched for an hour without waiting one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::util::wire::{Decoder, Encoder};

/// The wall clock; in test builds (the `testing` feature) shifted by
/// `CAIRN_TEST_CLOCK_OFFSET` seconds when set, to play a host whose clock is wrong.
pub fn now() -> SystemTime {
    let offset = test_offset();
    let t = SystemTime::now();
    if offset >= 0 {
        t + Duration::from_secs(offset as u64)
    } else {
        t - Duration::from_secs(offset.unsigned_abs())
    }
}

#[cfg(feature = "testing")]
fn test_offset() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var("CAIRN_TEST_CLOCK_OFFSET")
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0)
    })
}

#[cfg(not(feature = "testing"))]
fn test_offset() -> i64 {
    0
}

/// Seconds since the epoch by [`now`] (0 before 1970).
pub fn now_secs() -> u64 {
    now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn read_clock(id: rustix::time::ClockId) -> Duration {
    let ts = rustix::time::clock_gettime(id);
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Time since boot, suspend included; monotonic within one boot.
pub fn since_boot() -> Duration {
    // CLOCK_BOOTTIME exists on every Linux since 2.6.39.
    read_clock(rustix::time::ClockId::Boottime) + test_boot_offset() + advanced()
}

#[cfg(test)]
thread_local! {
    static ADVANCED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Unit tests: moves this thread's clocks (time since boot and [`Mono`]) forward by `d`, as
/// if it had passed, so that a test of what time changes need not sleep. Other threads'
/// clocks do not move.
#[cfg(test)]
pub fn advance(d: Duration) {
    ADVANCED.with(|a| a.set(a.get() + d));
}

#[cfg(test)]
fn advanced() -> Duration {
    ADVANCED.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn advanced() -> Duration {
    Duration::ZERO
}

#[cfg(feature = "testing")]
fn test_boot_offset() -> Duration {
    static OFFSET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var("CAIRN_TEST_BOOT_OFFSET")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or_default()
    })
}

#[cfg(not(feature = "testing"))]
fn test_boot_offset() -> Duration {
    Duration::ZERO
}

/// A point of the monotonic clock, which does not advance while the machine is suspended
/// (like [`std::time::Instant`], which reads the same clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mono(Duration);

impl Mono {
    pub fn now() -> Self {
        let read = read_clock(rustix::time::ClockId::Monotonic) + advanced();
        Mono(read.saturating_sub(suspended_total()))
    }

    pub fn elapsed(self) -> Duration {
        Mono::now().since(self)
    }

    /// The time from `earlier` to this point (zero if `earlier` is later).
    pub fn since(self, earlier: Mono) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(feature = "testing")]
static SUSPENDED_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Test builds: counts `d` as time the machine was suspended (the monotonic clock did not
/// see it pass).
#[cfg(feature = "testing")]
pub fn suspended(d: Duration) {
    SUSPENDED_NS.fetch_add(
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::SeqCst,
    );
}

#[cfg(feature = "testing")]
fn suspended_total() -> Duration {
    Duration::from_nanos(SUSPENDED_NS.load(std::sync::atomic::Ordering::SeqCst))
}

#[cfg(not(feature = "testing"))]
fn suspended_total() -> Duration {
    Duration::ZERO
}

/// A point in time with nanoseconds, as archives store it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// This time, `d` later.
    pub fn plus(self, d: Duration) -> Self {
        let nanos = u64::from(self.nanos) + u64::from(d.subsec_nanos());
        Self {
            secs: self
                .secs
                .saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
                .saturating_add((nanos / 1_000_000_000) as i64),
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }

    /// Now, by [`now`] (the wall clock, shifted in tests by `CAIRN_TEST_CLOCK_OFFSET`).
    pub fn now() -> Self {
        Self::from_system(now())
    }

    pub fn from_system(t: std::time::SystemTime) -> Self {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Self {
                secs: d.as_secs() as i64,
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Self {
                        secs: -(d.as_secs() as i64),
                        nanos: 0,
                    }
                } else {
                    Self {
                        secs: -(d.as_secs() as i64) - 1,
                        nanos: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> i128 {
        i128::from(self.secs) * 1_000_000_000 + i128::from(self.nanos)
    }

    pub fn to_system(self) -> std::time::SystemTime {
        let base = std::time::UNIX_EPOCH;
        if self.secs >= 0 {
            base + std::time::Duration::new(self.secs as u64, self.nanos)
        } else {
            base - std::time::Duration::from_secs(self.secs.unsigned_abs())
                + std::time::Duration::from_nanos(u64::from(self.nanos))
        }
    }

    /// Local time with its offset, `YYYY-MM-DD HH:MM:SS +HHMM`.
    pub fn display_local(self) -> String {
        use chrono::TimeZone;
        match chrono::Local.timestamp_opt(self.secs, self.nanos).single() {
            Some(t) => t.format("%Y-%m-%d %H:%M:%S %z").to_string(),
            None => format!("@{}", self.secs),
        }
    }

    /// UTC, `YYYY-MM-DD HH:MM:SS UTC`.
    pub fn display_utc(self) -> String {
        match chrono::DateTime::from_timestamp(self.secs, self.nanos) {
            Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            None => format!("@{}", self.secs),
        }
    }

    /// Local time for a file name, `YYYY-MM-DDTHH:MM:SS`.
    pub fn name_local(self) -> String {
        use chrono::TimeZone;
        match chrono::Local.timestamp_opt(self.secs, self.nanos).single() {
            Some(t) => t.format("%Y-%m-%dT%H:%M:%S").to_string(),
            None => format!("@{}", self.secs),
        }
    }

    /// UTC for a file name, `YYYY-MM-DDTHH:MM:SS`.
    pub fn name_utc(self) -> String {
        match chrono::DateTime::from_timestamp(self.secs, self.nanos) {
            Some(t) => t.format("%Y-%m-%dT%H:%M:%S").to_string(),
            None => format!("@{}", self.secs),
        }
    }

    /// RFC 3339 in local time with the offset, for JSON.
    pub fn rfc3339(self) -> String {
        use chrono::TimeZone;
        match chrono::Local.timestamp_opt(self.secs, self.nanos).single() {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, false),
            None => format!("@{}", self.secs),
        }
    }

    pub(crate) fn encode(self, e: &mut Encoder) {
        e.i64(self.secs).u32(self.nanos);
    }

    pub(crate) fn decode(d: &mut Decoder) -> Result<Self> {
        let secs = d.i64()?;
        let nanos = d.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(d.invalid("timestamp nanoseconds out of range"));
        }
        Ok(Self { secs, nanos })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_moves_forward() {
        let a = since_boot();
        // Real time (one of the few fixed sleeps left): this tests the clock itself.
        std::thread::sleep(Duration::from_millis(20));
        let b = since_boot();
        assert!(
            a > Duration::ZERO && b >= a + Duration::from_millis(15),
            "{a:?} {b:?}"
        );
    }
}
