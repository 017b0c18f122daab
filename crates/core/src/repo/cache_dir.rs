//! cairn's local cache directory: `$XDG_CACHE_HOME/cairn/` (or `~/.cache/cairn/`; for a service
//! started without `HOME`, root's `/var/cache/cairn/` or the user's home's). It holds,
//! per repository id, the files cache, and, per repository location, what this machine knows
//! about the repository there (`locations/`). Losing it costs time (and the memory of which
//! repositories were seen), never data. Everything in it is private: directories 0700, files
//! 0600, whatever the umask.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::store::local::{create_private_dir_all, DIR_MODE, FILE_MODE};

/// `$XDG_CACHE_HOME/cairn`, or `$HOME/.cache/cairn`; without either (a system service started
/// with no `HOME`), root's is `/var/cache/cairn` and another user's is under the home the user
/// database gives. `None` when no home is known at all.
pub fn base() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(x) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("cairn"));
    }
    if let Some(h) = var("HOME") {
        return Some(PathBuf::from(h).join(".cache").join("cairn"));
    }
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return Some(PathBuf::from("/var/cache/cairn"));
    }
    let home = crate::util::identity::home_of(uid.as_raw())?;
    (home.is_absolute() && home != Path::new("/")).then(|| home.join(".cache").join("cairn"))
}

/// The cache directory of one repository (by its canonical id).
pub fn for_repository(repo_id: &str) -> Option<PathBuf> {
    Some(base()?.join(repo_id))
}

/// Where this client remembers what it saw of a repository's locks (so that it can judge
/// them abandoned by its own clock).
pub fn lock_memory(id_hex: &str) -> Option<PathBuf> {
    for_repository(id_hex).map(|d| d.join("locks-seen"))
}

/// Creates `dir` and its missing parents 0700, and makes the cache's own directory 0700
/// (an older cairn made it with the umask).
pub fn ensure(dir: &Path) -> std::io::Result<()> {
    create_private_dir_all(dir)?;
    if let Some(b) = base().filter(|b| dir.starts_with(b)) {
        make_private(&b)?;
    }
    Ok(())
}

/// Sets directory `dir` to 0700 if it is a directory of this user's, by name: a symlink there
/// (a user's cache moved to another disk, or one planted) is not followed, and whatever it
/// points to keeps its mode.
fn make_private(dir: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Ok(());
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(DIR_MODE.into()))?;
    Ok(())
}

/// Writes a file of the cache atomically (temporary file, fsync, rename), mode 0600.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    write_private_with(path, |f| f.write_all(data))
}

/// [`write_private`] of what `write` writes into the file.
pub fn write_private_with(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a cache file needs a directory"))?;
    ensure(dir)?;
    let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
    let all = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE.into())
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE.into()))?;
        write(&mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    all().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A private file with no name in `dir` (made 0700 if missing), for data a command keeps
/// aside while it runs (`O_TMPFILE`, 0600): only the same user, or root, can reach it (through
/// `/proc`), and it is gone when closed, a crash included, unless it is linked under a name.
/// An error where the file system has no such files.
pub fn unnamed_file(dir: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    ensure(dir)?;
    let fd = rustix::fs::open(
        dir,
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(FILE_MODE.into()),
    )?;
    Ok(std::fs::File::from(fd))
}
