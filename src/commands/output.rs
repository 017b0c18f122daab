//! Writing to stdout without panicking on a closed pipe (`cairn list | head`).

use std::io::Write;

use crate::error::{Error, Result};

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

/// Human-readable byte count (powers of 1000, as `ls -h --si` and borg print).
pub fn size(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::size(0), "0 B");
        assert_eq!(super::size(999), "999 B");
        assert_eq!(super::size(1500), "1.50 kB");
        assert_eq!(super::size(52_000_000), "52.00 MB");
    }
}
