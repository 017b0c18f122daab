//! Settings from the environment (`CAIRN_*`), read the same way everywhere: a number in a
//! range, or a clear error naming the variable, its value and what it expects.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The number in `var`, if set; an error if it is not one in `range` (`what` names its unit,
/// as in "a number of packs").
pub fn env_number<T>(var: &str, range: RangeInclusive<T>, what: &str) -> Result<Option<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let expected = format!("{what} from {} to {}", range.start(), range.end());
    parse(var, |n| range.contains(n), &expected)
}

/// The number in `var`, if set; an error if it is not one of at least `min`.
pub fn env_at_least<T>(var: &str, min: T, what: &str) -> Result<Option<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let expected = format!("{what}, {min} or more");
    parse(var, |n| *n >= min, &expected)
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
        std::env::set_var("CAIRN_TEST_SETTING_B", "0");
        let err = env_at_least("CAIRN_TEST_SETTING_B", 1usize, "a number of threads")
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("expected a number of threads, 1 or more"),
            "{err}"
        );
    }
}
