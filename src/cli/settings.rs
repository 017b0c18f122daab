//! Every `CAIRN_*` tunable, read from the environment once, at the edge (the command line),
//! into typed settings that are passed down. Nothing below the command line reads `CAIRN_*`
//! (the platform's own variables, `XDG_*`, `HOME`, `USER`, `AWS_*`, stay where they are used,
//! and test hooks are compiled only with the `testing` feature).
//!
//! A number out of range is a clear error naming the variable, its value and what it expects.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pack::writer::{PackTuning, Trace, MAX_IN_FLIGHT, MAX_PACK_SIZE};
use crate::repo::lock::LockTiming;
use crate::repo::session::CheckpointPolicy;
use crate::repo::Tuning;
use crate::store::{RemoteSettings, SlowSettings, StoreSettings};

/// What the environment tunes, parsed.
#[derive(Clone)]
pub struct Settings {
    /// `CAIRN_THREADS`: worker threads when `--threads` is not given.
    pub threads: Option<usize>,
    pub tuning: Tuning,
    pub store: StoreSettings,
}

impl Settings {
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            threads: env_number(
                "CAIRN_THREADS",
                1..=crate::cli::args::MAX_THREADS,
                "a number of threads",
            )?,
            tuning: Tuning {
                pack: pack_tuning()?,
                checkpoint: checkpoint_policy()?,
                lock: lock_timing()?,
            },
            store: store_settings()?,
        })
    }

    /// Worker threads: `requested` (from `--threads`), else `CAIRN_THREADS`, else the number
    /// of cores.
    /// Threads for reading packs from `store`: as [`Settings::threads`] when given, else, on a
    /// remote store, at least as many as keep its link busy
    /// ([`crate::store::readers_for`]): the reads wait on the link more than on the cores.
    pub fn readers(
        &self,
        requested: Option<usize>,
        store: &dyn crate::store::Store,
    ) -> Result<usize> {
        let cores = self.threads(requested)?;
        Ok(match requested.or(self.threads) {
            Some(_) => cores,
            None => cores.max(crate::store::readers_for(store)),
        })
    }

    pub fn threads(&self, requested: Option<usize>) -> Result<usize> {
        match requested.or(self.threads) {
            Some(0) => Err(Error::invalid("--threads must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)),
        }
    }
}

/// `CAIRN_PACK_SIZE` (bytes), `CAIRN_PACK_ASYNC=no`, `CAIRN_PACK_INFLIGHT=N[:B]`,
/// `CAIRN_PACK_TRACE=yes|time`.
fn pack_tuning() -> Result<PackTuning> {
    let mut t = PackTuning {
        size: env_number("CAIRN_PACK_SIZE", 1..=MAX_PACK_SIZE, "a number of bytes")?,
        ..PackTuning::default()
    };
    if let Some(v) = env_flag("CAIRN_PACK_ASYNC") {
        t.async_store = v;
    }
    if let Some((n, buffers)) = in_flight()? {
        t.max_in_flight = Some(n);
        t.max_buffers = buffers;
    }
    match std::env::var("CAIRN_PACK_TRACE").as_deref() {
        Ok("time") => t.trace = Trace::StderrTimed(Instant::now()),
        Ok(v) if truthy(v) => t.trace = Trace::Stderr,
        _ => {}
    }
    Ok(t)
}

/// `CAIRN_PACK_INFLIGHT=N` (N packs in flight, N + 1 buffers) or `N:B` (within B buffers,
/// N or N + 1).
fn in_flight() -> Result<Option<(usize, Option<usize>)>> {
    const VAR: &str = "CAIRN_PACK_INFLIGHT";
    let Ok(v) = std::env::var(VAR) else {
        return Ok(None);
    };
    let bad = || {
        Error::invalid(format!(
            "{VAR}={v:?}: expected a number of packs from 1 to {MAX_IN_FLIGHT}, or N:B with B (buffers) N or N + 1"
        ))
    };
    let (n, b) = match v.trim().split_once(':') {
        Some((n, b)) => (n, Some(b)),
        None => (v.trim(), None),
    };
    let n: usize = n.trim().parse().map_err(|_| bad())?;
    if !(1..=MAX_IN_FLIGHT).contains(&n) {
        return Err(bad());
    }
    let b = match b {
        None => None,
        Some(b) => Some(
            b.trim()
                .parse::<usize>()
                .ok()
                .filter(|b| *b == n || *b == n + 1)
                .ok_or_else(bad)?,
        ),
    };
    Ok(Some((n, b)))
}

/// `CAIRN_CHECKPOINT_PACKS`, `CAIRN_CHECKPOINT_SECS`.
fn checkpoint_policy() -> Result<CheckpointPolicy> {
    let mut p = CheckpointPolicy::default();
    if let Some(n) = env_number("CAIRN_CHECKPOINT_PACKS", 1..=1_000_000, "a number of packs")? {
        p.every_packs = n;
    }
    if let Some(s) = env_number("CAIRN_CHECKPOINT_SECS", 0..=86400, "a number of seconds")? {
        p.every = Duration::from_secs(s);
    }
    Ok(p)
}

/// `CAIRN_LOCK_REFRESH_SECS` (default 300), `CAIRN_LOCK_STALE_SECS` (default 1800, and at
/// least three refreshes: a live holder that is merely slow must never look stale) and
/// `CAIRN_LOCK_GRACE_SECS` (default 86400, at least the stale interval).
fn lock_timing() -> Result<LockTiming> {
    let d = LockTiming::default();
    const YEAR: u64 = 366 * 86400;
    let secs = |name: &str| env_number(name, 1..=YEAR, "a number of seconds");
    let refresh = secs("CAIRN_LOCK_REFRESH_SECS")?.map_or(d.refresh, Duration::from_secs);
    let stale = secs("CAIRN_LOCK_STALE_SECS")?
        .map_or(d.stale, Duration::from_secs)
        .max(3 * refresh);
    let grace = secs("CAIRN_LOCK_GRACE_SECS")?
        .map_or(d.grace, Duration::from_secs)
        .max(stale);
    Ok(LockTiming {
        refresh,
        stale,
        grace,
    })
}

/// The store and its wrappers: `CAIRN_STORE_FLUSH_MS` (a slow flush after every write, for
/// benchmarks), `CAIRN_STORE_LATENCY` (µs), `CAIRN_STORE_BANDWIDTH` (bit/s),
/// `CAIRN_STORE_CONNECTIONS` (slow-store emulation), `CAIRN_STORE_LOG` (a line per operation),
/// `CAIRN_RSH`, `CAIRN_S3_RETRIES`, `CAIRN_S3_ALLOW_HTTP`; with the `testing` feature,
/// `CAIRN_FAULT` (fault injection).
fn store_settings() -> Result<StoreSettings> {
    let latency = env_number(
        "CAIRN_STORE_LATENCY",
        0..=10_000_000u64,
        "a number of microseconds",
    )?;
    let bandwidth = env_number(
        "CAIRN_STORE_BANDWIDTH",
        1..=1_000_000_000_000u64,
        "a number of bits per second",
    )?;
    let connections = env_number(
        "CAIRN_STORE_CONNECTIONS",
        1..=64usize,
        "a number of connections",
    )?;
    let slow = (latency.is_some() || bandwidth.is_some()).then(|| SlowSettings {
        latency: Duration::from_micros(latency.unwrap_or(0)),
        bandwidth_bits: bandwidth,
        connections: connections.unwrap_or(1),
    });
    let flush_delay = env_number(
        "CAIRN_STORE_FLUSH_MS",
        1..=60_000u64,
        "a number of milliseconds",
    )?
    .map(Duration::from_millis);
    let log = std::env::var_os("CAIRN_STORE_LOG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let rsh = match std::env::var("CAIRN_RSH") {
        Ok(v) if !v.trim().is_empty() => v.split_whitespace().map(String::from).collect(),
        _ => vec!["ssh".to_string()],
    };
    let remote_path = match std::env::var("CAIRN_REMOTE_PATH") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => "cairn".to_string(),
    };
    let remote = RemoteSettings {
        rsh,
        remote_path,
        s3_retries: env_number("CAIRN_S3_RETRIES", 0..=100usize, "a number of retries")?
            .unwrap_or(6),
        s3_allow_http: env_flag("CAIRN_S3_ALLOW_HTTP").unwrap_or(false),
    };
    Ok(StoreSettings {
        slow,
        flush_delay,
        log,
        limits: Default::default(),
        #[cfg(feature = "testing")]
        faults: fault_rules()?,
        remote,
    })
}

#[cfg(feature = "testing")]
fn fault_rules() -> Result<Vec<crate::store::faulty::Rule>> {
    let spec = std::env::var("CAIRN_FAULT").unwrap_or_default();
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(crate::store::faulty::Rule::parse)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::invalid(format!("CAIRN_FAULT: {e}")))
}

fn truthy(v: &str) -> bool {
    matches!(v, "yes" | "1" | "true" | "on")
}

/// A yes/no variable: `None` when unset.
fn env_flag(var: &str) -> Option<bool> {
    let v = std::env::var(var).ok()?;
    let v = v.trim();
    (!v.is_empty()).then_some(!matches!(v, "no" | "0" | "false" | "off"))
}

/// The number in `var`, if set; an error if it is not one in `range` (`what` names its unit,
/// as in "a number of packs").
fn env_number<T>(var: &str, range: RangeInclusive<T>, what: &str) -> Result<Option<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let expected = format!("{what} from {} to {}", range.start(), range.end());
    parse(var, |n| range.contains(n), &expected)
}

fn parse<T: FromStr>(var: &str, ok: impl Fn(&T) -> bool, expected: &str) -> Result<Option<T>> {
    let Ok(v) = std::env::var(var) else {
        return Ok(None);
    };
    v.trim()
        .parse::<T>()
        .ok()
        .filter(ok)
        .map(Some)
        .ok_or_else(|| Error::invalid(format!("{var}={v:?}: expected {expected}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_range_and_clear_errors() {
        std::env::set_var("CAIRN_TEST_SETTING_A", " 12 ");
        assert_eq!(
            env_number("CAIRN_TEST_SETTING_A", 1..=20u64, "x").unwrap(),
            Some(12)
        );
        let err = env_number("CAIRN_TEST_SETTING_A", 1..=10u64, "a number of packs")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CAIRN_TEST_SETTING_A=\" 12 \": expected a number of packs from 1 to 10"),
            "{err}"
        );
        std::env::set_var("CAIRN_TEST_SETTING_A", "lots");
        assert!(env_number("CAIRN_TEST_SETTING_A", 1..=10u64, "x").is_err());
        assert_eq!(
            env_number("CAIRN_TEST_SETTING_UNSET", 1..=10u64, "x").unwrap(),
            None
        );
        // Huge values are out of range, not wrapped or saturated.
        std::env::set_var("CAIRN_TEST_SETTING_B", "18446744073709551616");
        let err = env_number("CAIRN_TEST_SETTING_B", 1..=1024usize, "a number of threads")
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("expected a number of threads from 1 to 1024"),
            "{err}"
        );
    }
}
