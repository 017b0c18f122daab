//! cairn's local cache directory: `$XDG_CACHE_HOME/cairn/<repository id>/` (or
//! `~/.cache/cairn/…`). It holds the files cache and what this machine knows about each
//! repository; losing it costs time, never data.

use std::path::PathBuf;

/// The cache directory of one repository, if a home or cache directory is known.
pub fn for_repository(repo_id: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("cairn").join(repo_id))
}
