//! The values the command line's options take: sizes, durations, times, slices, keys; each
//! parser says what it expected.

/// `--lock-wait`: seconds, from 0 to a day (a wait longer than that is a job for a retry
/// loop, and a huge one is a typing error).
pub(super) fn seconds(s: &str) -> Result<f64, String> {
    bounded(s, "a number of seconds", 86400.0, "seconds")
}

/// `ui --listen`: ADDRESS:PORT (`127.0.0.1:8484`, `[::1]:8484`), `localhost:PORT`, or a port
/// alone (on 127.0.0.1).
pub(super) fn listen(s: &str) -> Result<std::net::SocketAddr, String> {
    let loopback = |port: &str| {
        port.parse::<u16>()
            .ok()
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
    };
    let found = match s.strip_prefix("localhost:") {
        Some(port) => loopback(port),
        None => loopback(s).or_else(|| s.parse().ok()),
    };
    found.ok_or_else(|| {
        "give ADDRESS:PORT (127.0.0.1:8484, [::1]:8484), localhost:PORT, or a port; port 0 picks a free one"
            .to_string()
    })
}

/// A finite number from 0 to `max`; the errors name what was expected.
pub(super) fn bounded(s: &str, what: &str, max: f64, unit: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not {what}"))?;
    if v.is_finite() && (0.0..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s} is out of range: expected {unit} from 0 to {max}"
        ))
    }
}

/// Most threads any command may be given.
pub const MAX_THREADS: usize = 1024;

/// `--threads`: from 1 to [`MAX_THREADS`].
pub(super) fn threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s} is out of range: expected a number of threads from 1 to {MAX_THREADS}"
        )),
    }
}

/// A size: bytes, or a number with k, M, G or T (powers of 1024; "2.5G", "500k", "1MiB").
pub fn size_arg(s: &str) -> Result<u64, String> {
    crate::util::progress::parse_size(s)
}

/// `create --timestamp`: RFC 3339, or a local date with an optional time.
pub(super) fn timestamp(s: &str) -> Result<crate::util::clock::Timestamp, String> {
    use chrono::TimeZone;
    let t = s.trim();
    let system = if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        std::time::SystemTime::from(d)
    } else {
        let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
            .or_else(|| {
                chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
            .ok_or_else(|| {
                format!("{s:?} is not a time: expected 2024-05-01, \"2024-05-01 13:45\" or 2024-05-01T13:45:00Z")
            })?;
        let local = chrono::Local
            .from_local_datetime(&naive)
            .earliest()
            .ok_or_else(|| format!("{s:?} does not exist in the local time zone"))?;
        std::time::SystemTime::from(local)
    };
    if system > std::time::SystemTime::now() + std::time::Duration::from_secs(86_400) {
        return Err(format!("{s:?} is in the future"));
    }
    Ok(crate::util::clock::Timestamp::from_system(system))
}

/// What archives are grouped by in `prune --group-by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKey {
    Name,
    Host,
    User,
    Tags,
}

/// The keys of `prune --group-by`, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBy(pub Vec<GroupKey>);

/// `prune --group-by`: `name`, `host`, `user`, `tags`, or several separated by commas.
pub(super) fn group_by(s: &str) -> Result<GroupBy, String> {
    let mut keys = Vec::new();
    for k in s.split(',').map(str::trim) {
        keys.push(match k {
            "name" => GroupKey::Name,
            "host" | "hostname" => GroupKey::Host,
            "user" | "username" => GroupKey::User,
            "tags" | "tag" => GroupKey::Tags,
            _ => {
                return Err(format!(
                    "{k:?}: --group-by takes name, host, user and tags, separated by commas (e.g. host,tags)"
                ))
            }
        });
    }
    keys.dedup();
    Ok(GroupBy(keys))
}

/// `check --subset`.
pub(super) fn subset(s: &str) -> Result<crate::ops::check::slice::Subset, String> {
    crate::ops::check::slice::Subset::parse(s).map_err(|e| e.to_string())
}

/// `check --max-duration`.
pub(super) fn max_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::ops::check::slice::parse_duration(s).map_err(|e| e.to_string())
}

/// `--threshold`: a percentage, from 0 to 100.
pub(super) fn percent(s: &str) -> Result<f64, String> {
    bounded(s, "a number", 100.0, "a percentage")
}

/// `--keep-within`: checked as prune reads it ([`crate::ops::prune::parse_interval`]).
pub(super) fn interval(s: &str) -> Result<String, String> {
    crate::ops::prune::parse_interval(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::size_arg;

    #[test]
    fn sizes_in_powers_of_1024() {
        assert_eq!(size_arg("1024"), Ok(1024));
        assert_eq!(size_arg("500k"), Ok(500 * 1024));
        assert_eq!(size_arg("1M"), Ok(1 << 20));
        assert_eq!(size_arg("1MiB"), Ok(1 << 20));
        assert_eq!(size_arg("2.5G"), Ok(5 << 29));
        assert_eq!(size_arg("1t"), Ok(1 << 40));
        for bad in ["", "M", "-1M", "1X", "1e400", "nan"] {
            assert!(size_arg(bad).is_err(), "{bad}");
        }
    }
}
