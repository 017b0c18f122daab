//! Writing to stdout without panicking on a closed pipe (`cairn list | head`).

use std::io::Write;

use crate::error::{Error, Result};
pub use crate::progress::size;

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
