//! Which packs a verifying check reads whole: all of them, a fixed part of them (`--subset
//! N/M`, restic's meaning), or a share chosen by the verification record, least recently
//! verified first (`--subset P%`, `--subset SIZE`); and, with `--max-duration`, as many of
//! those as fit in the time, least recently verified first, so that the next run goes on
//! where this one stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::record::Record;
use crate::error::{Error, Result};
use crate::util::id::PackId;

/// A part of the repository's packs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Subset {
    /// The N-th (from 1) of M fixed parts: a pack's part is decided by its id alone, so the
    /// M parts together hold every pack once, whenever each is checked.
    Part { n: u32, m: u32 },
    /// This share of the bytes, least recently verified first.
    Percent(f64),
    /// About this many bytes, least recently verified first.
    Bytes(u64),
}

impl Subset {
    /// `N/M`, `P%` or a size (`500M`, `2G`; powers of 1024).
    pub fn parse(s: &str) -> Result<Subset> {
        let t = s.trim();
        if let Some((n, m)) = t.split_once('/') {
            let bad = || {
                Error::invalid(format!(
                    "--subset {s:?}: expected N/M with 1 ≤ N ≤ M, like 1/7"
                ))
            };
            let (n, m): (u32, u32) = (
                n.trim().parse().map_err(|_| bad())?,
                m.trim().parse().map_err(|_| bad())?,
            );
            return if n >= 1 && n <= m {
                Ok(Subset::Part { n, m })
            } else {
                Err(bad())
            };
        }
        if let Some(p) = t.strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && (0.001..=100.0).contains(&v) => Ok(Subset::Percent(v)),
                _ => Err(Error::invalid(format!(
                    "--subset {s:?}: a percentage is from 0.001 to 100, like 10%"
                ))),
            };
        }
        if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(Error::invalid(format!(
                "--subset {s:?}: a bare number is ambiguous: write {t}/7 for a part, {t}% for a share, or {t}G (or {t}B: bytes) for a size"
            )));
        }
        match crate::util::progress::parse_size(t) {
            Ok(b) if b > 0 => Ok(Subset::Bytes(b)),
            _ => Err(Error::invalid(format!(
                "--subset {s:?}: expected N/M (like 1/7), a percentage (like 10%) or a size (like 500M or 2G)"
            ))),
        }
    }

    /// Whether `pack` is in part `n` of `m`.
    fn holds(n: u32, m: u32, pack: &PackId) -> bool {
        let head = u64::from_be_bytes(pack.0[..8].try_into().unwrap_or_default());
        ((u128::from(head) * u128::from(m)) >> 64) as u32 == n - 1
    }

    /// As given.
    pub fn describe(&self) -> String {
        match self {
            Subset::Part { n, m } => format!("part {n} of {m}"),
            Subset::Percent(p) => format!("{p}% least recently verified"),
            Subset::Bytes(b) => format!(
                "{} least recently verified",
                crate::util::progress::size(*b)
            ),
        }
    }
}

/// `--max-duration`: seconds, or a number with s, m, h or d (`90s`, `30m`, `2h`, `1d`).
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let bad = || {
        Error::invalid(format!(
            "--max-duration {s:?}: expected a number of seconds, or a number and s, m, h or d (like 30m or 2h)"
        ))
    };
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let v: f64 = number.trim().parse().map_err(|_| bad())?;
    let secs = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => return Err(bad()),
    };
    let total = v * secs;
    if !(total.is_finite() && total > 0.0 && total <= 366.0 * 86400.0) {
        return Err(Error::invalid(format!(
            "--max-duration {s:?}: more than zero and at most a year"
        )));
    }
    Ok(Duration::from_secs_f64(total))
}

/// The packs to read whole, in the order to read them: least recently verified first (never
/// verified first of all, then by id).
pub fn choose(
    listed: &BTreeMap<PackId, u64>,
    record: &Record,
    subset: Option<Subset>,
) -> Vec<(PackId, u64)> {
    let mut all: Vec<(PackId, u64)> = listed.iter().map(|(p, s)| (*p, *s)).collect();
    // Among packs verified at the same time (never, above all), the order is drawn anew each
    // run: without a record (no cache, or one that cannot be written) slices still wander
    // over every pack instead of reading the same ones forever.
    let salt: u64 = rand::random();
    let drawn = |p: &PackId| u64::from_be_bytes(p.0[..8].try_into().unwrap_or_default()) ^ salt;
    all.sort_by_key(|(p, _)| (record.last(p).map_or(0, |t| t + 1), drawn(p), *p));
    let total: u64 = listed.values().sum();
    let budget = match subset {
        None => return all,
        Some(Subset::Part { n, m }) => {
            all.retain(|(p, _)| Subset::holds(n, m, p));
            return all;
        }
        Some(Subset::Percent(p)) => (total as f64 * p / 100.0).ceil() as u64,
        Some(Subset::Bytes(b)) => b,
    };
    // Whole packs until the budget is spent: the last one may take it a pack past.
    let mut spent = 0u64;
    all.into_iter()
        .take_while(|(_, size)| {
            let more = spent < budget;
            spent += size;
            more
        })
        .collect()
}

/// What this run verified of what it chose.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SliceReport {
    /// The slice asked for (`all`, `part 1 of 7`, `10% least recently verified`, an archive).
    pub chosen: String,
    pub chosen_packs: u64,
    pub chosen_bytes: u64,
    /// Read whole and verified.
    pub verified_packs: u64,
    pub verified_bytes: u64,
    /// `--max-duration` ran out before these were read: the next run starts with them.
    pub left_packs: u64,
    pub left_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_parse_and_say_what_is_wrong() {
        assert_eq!(Subset::parse("1/7").ok(), Some(Subset::Part { n: 1, m: 7 }));
        assert_eq!(Subset::parse("10%").ok(), Some(Subset::Percent(10.0)));
        assert_eq!(Subset::parse("2G").ok(), Some(Subset::Bytes(2 << 30)));
        for bad in [
            "0/7", "8/7", "1/0", "x/7", "0%", "101%", "1e-300%", "", "12Q", "0", "1",
        ] {
            let e = Subset::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("--subset"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90").ok(), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m").ok(), Some(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1.5h").ok(), Some(Duration::from_secs(5400)));
        for bad in ["", "0", "-5m", "3x", "400d", "m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_parts_hold_every_pack_once() {
        let packs: Vec<PackId> = (0..2000u32)
            .map(|i| PackId(crate::util::id::sha256(&i.to_le_bytes())))
            .collect();
        for m in [1u32, 2, 7, 10] {
            for p in &packs {
                let parts = (1..=m).filter(|n| Subset::holds(*n, m, p)).count();
                assert_eq!(parts, 1);
            }
        }
    }
}
