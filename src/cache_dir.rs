//! cairn's local cache directory: `$XDG_CACHE_HOME/cairn/` (or `~/.cache/cairn/`). It holds,
//! per repository id, the files cache, and, per repository location, what this machine knows
//! about the repository there (`locations/`). Losing it costs time (and the memory of which
//! repositories were seen), never data. Everything in it is private: directories 0700, files
//! 0600, whatever the umask.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::store::local::{create_private_dir_all, DIR_MODE, FILE_MODE};

/// `$XDG_CACHE_HOME/cairn`, or `~/.cache/cairn`, if a home or cache directory is known.
pub fn base() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("cairn"))
}

/// The cache directory of one repository (by its canonical id).
pub fn for_repository(repo_id: &str) -> Option<PathBuf> {
    Some(base()?.join(repo_id))
}

/// Creates `dir` and its missing parents 0700, and makes the cache's own directory 0700
/// (an older cairn made it with the umask).
pub fn ensure(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    create_private_dir_all(dir)?;
    if let Some(b) = base().filter(|b| dir.starts_with(b)) {
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(DIR_MODE.into()))?;
    }
    Ok(())
}

/// Writes a file of the cache atomically (temporary file, fsync, rename), mode 0600.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a cache file needs a directory"))?;
    ensure(dir)?;
    let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE.into())
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE.into()))?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
