//! Writing to stdout without panicking on a closed pipe (`cairn list | head`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
pub use crate::progress::{count, size};

/// `--utc`: times for people in UTC rather than local time.
static UTC: AtomicBool = AtomicBool::new(false);

/// Set once, from the command line.
pub fn show_times_in_utc(utc: bool) {
    UTC.store(utc, Ordering::Relaxed);
}

/// A time for people to read: local with its offset, or UTC with `--utc`.
pub fn time(t: crate::clock::Timestamp) -> String {
    if UTC.load(Ordering::Relaxed) {
        t.display_utc()
    } else {
        t.display_local()
    }
}

/// A time for a file name: `2026-12-03T19:16:03`, local (or UTC with `--utc`), no spaces.
pub fn time_for_name(t: crate::clock::Timestamp) -> String {
    if UTC.load(Ordering::Relaxed) {
        t.name_utc()
    } else {
        t.name_local()
    }
}

/// Writes a line to stdout. A closed pipe becomes [`Error::Io`] with kind `BrokenPipe`, which
/// `main` turns into a quiet exit.
pub fn line(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{s}").map_err(|e| Error::io("<stdout>", e))
}

/// Writes lines to stdout.
pub fn lines(ls: &[String]) -> Result<()> {
    for l in ls {
        line(l)?;
    }
    Ok(())
}
