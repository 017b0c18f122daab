//! Which archives `cairn prune` keeps, with borg's rules, applied to each archive name
//! (series) separately.
//!
//! Rules run in this order: `--keep-within`, then `--keep-last` (one archive per second, as
//! borg's `--keep-secondly`), minutely, hourly, daily, weekly (ISO weeks), monthly, yearly.
//! Each rule walks the archives newest first and keeps the newest archive of each period not
//! yet kept by an earlier rule, until it has kept N; an archive already kept still uses up its
//! period. If a rule runs out of archives before keeping N, it also keeps the oldest archive.
//! Periods are computed in local time, as borg does.

use chrono::{DateTime, TimeZone};

use crate::error::{Error, Result};
use crate::format::item::Timestamp;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepRules {
    /// Keep everything newer than this many seconds before now.
    pub within: Option<u64>,
    pub last: u32,
    pub minutely: u32,
    pub hourly: u32,
    pub daily: u32,
    pub weekly: u32,
    pub monthly: u32,
    pub yearly: u32,
}

impl KeepRules {
    pub fn is_empty(&self) -> bool {
        *self == KeepRules::default()
    }
}

/// Parses an interval: a number and a unit, S (seconds), M (minutes), H (hours), d (days),
/// w (weeks), m (months = 31 days), y (years = 365 days).
pub fn parse_interval(s: &str) -> Result<u64> {
    let bad = || {
        Error::invalid(format!(
            "bad interval {s:?}: expected a number and a unit (S, M, H, d, w, m, y), like 7d"
        ))
    };
    let (num, unit) = s.split_at(s.len().checked_sub(1).ok_or_else(bad)?);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "S" => 1,
        "M" => 60,
        "H" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        "m" => 31 * 86400,
        "y" => 365 * 86400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(Error::invalid(format!(
            "interval {s:?} must be greater than zero"
        )));
    }
    match n.checked_mul(secs) {
        Some(v) if v <= MAX_INTERVAL => Ok(v),
        _ => Err(Error::invalid(format!(
            "interval {s:?} is longer than 1000 years"
        ))),
    }
}

/// The longest interval a rule may give: 1000 years (any longer is a typing error, and far
/// past what a timestamp in seconds can be compared with safely).
pub const MAX_INTERVAL: u64 = 1000 * 365 * 86400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Last,
    Minutely,
    Hourly,
    Daily,
    Weekly,
    Monthly,
    Yearly,
}

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::Last => "last",
            Rule::Minutely => "minutely",
            Rule::Hourly => "hourly",
            Rule::Daily => "daily",
            Rule::Weekly => "weekly",
            Rule::Monthly => "monthly",
            Rule::Yearly => "yearly",
        }
    }

    fn period<Tz: TimeZone>(self, t: &DateTime<Tz>) -> String
    where
        Tz::Offset: std::fmt::Display,
    {
        let pattern = match self {
            Rule::Last => "%Y-%m-%d %H:%M:%S",
            Rule::Minutely => "%Y-%m-%d %H:%M",
            Rule::Hourly => "%Y-%m-%d %H",
            Rule::Daily => "%Y-%m-%d",
            Rule::Weekly => "%G-%V",
            Rule::Monthly => "%Y-%m",
            Rule::Yearly => "%Y",
        };
        t.format(pattern).to_string()
    }
}

/// For archives given as (key, start time), the reason each one is kept (`None`: pruned).
/// `now` is used by `within`; `tz` gives the local periods.
pub fn decide<K: Clone + Eq + std::hash::Hash, Tz: TimeZone>(
    archives: &[(K, Timestamp)],
    rules: &KeepRules,
    now: Timestamp,
    tz: &Tz,
) -> Vec<(K, Option<String>)>
where
    Tz::Offset: std::fmt::Display,
{
    use std::collections::HashMap;
    let mut sorted: Vec<&(K, Timestamp)> = archives.iter().collect();
    sorted.sort_by_key(|a| std::cmp::Reverse(a.1));
    let mut kept: HashMap<K, String> = HashMap::new();
    if let Some(within) = rules.within {
        // Whatever the caller gives, never a negative interval (which would keep nothing).
        let within = i64::try_from(within).unwrap_or(i64::MAX);
        let cutoff = now.secs.saturating_sub(within);
        let mut n = 0;
        for (k, t) in &sorted {
            if t.secs > cutoff || (t.secs == cutoff && t.nanos > now.nanos) {
                n += 1;
                kept.insert(k.clone(), format!("within #{n}"));
            }
        }
    }
    let rules_in_order = [
        (Rule::Last, rules.last),
        (Rule::Minutely, rules.minutely),
        (Rule::Hourly, rules.hourly),
        (Rule::Daily, rules.daily),
        (Rule::Weekly, rules.weekly),
        (Rule::Monthly, rules.monthly),
        (Rule::Yearly, rules.yearly),
    ];
    for (rule, n) in rules_in_order {
        if n == 0 {
            continue;
        }
        let mut last_period: Option<String> = None;
        let mut count = 0u32;
        let mut oldest = None;
        for (k, t) in &sorted {
            oldest = Some(k);
            let local = tz.timestamp_opt(t.secs, t.nanos).single();
            let period = match local {
                Some(l) => rule.period(&l),
                None => t.secs.to_string(),
            };
            if last_period.as_ref() != Some(&period) {
                last_period = Some(period);
                if !kept.contains_key(k) {
                    count += 1;
                    kept.insert(k.clone(), format!("{} #{count}", rule.name()));
                    if count == n {
                        break;
                    }
                }
            }
        }
        if count < n {
            if let Some(k) = oldest {
                if !kept.contains_key(k) {
                    count += 1;
                    kept.insert(k.clone(), format!("{}[oldest] #{count}", rule.name()));
                }
            }
        }
    }
    archives
        .iter()
        .map(|(k, _)| (k.clone(), kept.get(k).cloned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn ts(s: &str) -> Timestamp {
        let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M")
            .unwrap()
            .and_utc();
        Timestamp {
            secs: t.timestamp(),
            nanos: 0,
        }
    }

    fn kept(archives: &[(&str, &str)], rules: KeepRules, now: &str) -> Vec<String> {
        let list: Vec<(String, Timestamp)> = archives
            .iter()
            .map(|(k, t)| (k.to_string(), ts(t)))
            .collect();
        let mut out: Vec<String> = decide(&list, &rules, ts(now), &Utc)
            .into_iter()
            .filter_map(|(k, why)| why.map(|w| format!("{k}:{w}")))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("7d").unwrap(), 7 * 86400);
        assert_eq!(parse_interval("2H").unwrap(), 7200);
        assert_eq!(parse_interval("1m").unwrap(), 31 * 86400);
        for bad in ["", "d", "7", "7x", "0d", "-1d"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    /// Hand-computed: daily archives at 23:00 from Jan 1 to Jan 20 plus an extra one on
    /// Jan 20 at 10:00.
    fn january() -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = (1..=20)
            .map(|d| (format!("d{d:02}"), format!("2026-01-{d:02} 23:00")))
            .collect();
        v.push(("d20am".into(), "2026-01-20 10:00".into()));
        v
    }

    fn as_refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
        v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
    }

    #[test]
    fn keep_daily_keeps_the_newest_of_each_day() {
        let v = january();
        let got = kept(
            &as_refs(&v),
            KeepRules {
                daily: 3,
                ..Default::default()
            },
            "2026-01-21 00:00",
        );
        assert_eq!(got, vec!["d18:daily #3", "d19:daily #2", "d20:daily #1"]);
    }

    #[test]
    fn keep_last_then_daily_skips_periods_already_kept() {
        let v = january();
        let got = kept(
            &as_refs(&v),
            KeepRules {
                last: 2,
                daily: 2,
                ..Default::default()
            },
            "2026-01-21 00:00",
        );
        // last keeps d20 and d20am; daily: Jan 20 is taken (d20 kept already, period used),
        // then d19, d18.
        assert_eq!(
            got,
            vec![
                "d18:daily #2",
                "d19:daily #1",
                "d20:last #1",
                "d20am:last #2"
            ]
        );
    }

    #[test]
    fn weekly_uses_iso_weeks_and_oldest_fills_up() {
        let v = january();
        // ISO weeks of Jan 2026: Jan 1-4 (week 1), 5-11 (w2), 12-18 (w3), 19-20 (w4).
        let got = kept(
            &as_refs(&v),
            KeepRules {
                weekly: 6,
                ..Default::default()
            },
            "2026-01-21 00:00",
        );
        assert_eq!(
            got,
            vec![
                "d01:weekly[oldest] #5",
                "d04:weekly #4",
                "d11:weekly #3",
                "d18:weekly #2",
                "d20:weekly #1"
            ]
        );
    }

    #[test]
    fn monthly_and_yearly() {
        let list = [
            ("a", "2024-12-31 12:00"),
            ("b", "2025-06-15 12:00"),
            ("c", "2025-06-30 12:00"),
            ("d", "2025-12-01 12:00"),
            ("e", "2026-01-02 12:00"),
        ];
        let got = kept(
            &list,
            KeepRules {
                monthly: 2,
                yearly: 2,
                ..Default::default()
            },
            "2026-02-01 00:00",
        );
        // monthly: e (2026-01), d (2025-12). yearly: 2026 → e taken (period used), 2025 → d
        // taken, 2024 → a.
        assert_eq!(got, vec!["a:yearly #1", "d:monthly #2", "e:monthly #1"]);
    }

    #[test]
    fn within_is_relative_to_now() {
        let v = january();
        let got = kept(
            &as_refs(&v),
            KeepRules {
                within: Some(2 * 86400),
                ..Default::default()
            },
            "2026-01-21 00:00",
        );
        assert_eq!(
            got,
            vec!["d19:within #3", "d20:within #1", "d20am:within #2"]
        );
    }

    #[test]
    fn hourly_and_minutely() {
        let list = [
            ("a", "2026-03-01 10:05"),
            ("b", "2026-03-01 10:55"),
            ("c", "2026-03-01 11:01"),
            ("d", "2026-03-01 11:01"),
        ];
        let got = kept(
            &list,
            KeepRules {
                hourly: 5,
                ..Default::default()
            },
            "2026-03-02 00:00",
        );
        // 11h: c or d (same minute: the first in newest-first order); 10h: b; then oldest a.
        assert_eq!(got.len(), 3);
        assert!(got.contains(&"b:hourly #2".to_string()));
        assert!(got.contains(&"a:hourly[oldest] #3".to_string()));
    }
}
