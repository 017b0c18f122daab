//! What a local directory that is not the repository asked for is: another tool's
//! repository, a cairn repository where `init` was asked for, or one the user may not read;
//! said in words instead of "corrupt config" or "permission denied".

use std::path::Path;

/// The kinds of repository a directory can hold, by what each tool writes at its top.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cairn,
    Borg,
    Restic,
    Kopia,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cairn => "a cairn repository",
            Kind::Borg => "a Borg repository",
            Kind::Restic => "a restic repository",
            Kind::Kopia => "a kopia repository",
        }
    }
}

/// What `dir` holds, when it is some tool's repository. Only small files are read, without
/// following a symlink.
pub fn kind_of(dir: &Path) -> Option<Kind> {
    let head = |name: &str| -> Vec<u8> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        let mut buf = Vec::new();
        if let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(dir.join(name))
        {
            if f.metadata().is_ok_and(|m| m.is_file()) {
                let _ = f.take(4096).read_to_end(&mut buf);
            }
        }
        buf
    };
    let is_dir = |name: &str| {
        std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.file_type().is_dir())
    };
    let config = head("config");
    if crate::repo::config::Config::parse(&config).is_ok() {
        return Some(Kind::Cairn);
    }
    let readme = head("README");
    if readme.starts_with(b"This is a Borg Backup repository")
        || config.starts_with(b"[repository]")
    {
        return Some(Kind::Borg);
    }
    if !config.is_empty()
        && ["data", "index", "keys", "snapshots"]
            .iter()
            .all(|d| is_dir(d))
    {
        return Some(Kind::Restic);
    }
    if std::fs::symlink_metadata(dir.join("kopia.repository.f")).is_ok() {
        return Some(Kind::Kopia);
    }
    None
}

/// Opens `path` for reading without waiting for a writer (a FIFO put there).
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
}

/// Why `dir/config` cannot be read by this user, when that is so: whose the repository is.
pub fn unreadable_config(dir: &Path) -> Option<String> {
    let config = dir.join("config");
    let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    // The config itself, or, when the directory may not be entered, the directory.
    let (path, meta) = match std::fs::symlink_metadata(&config) {
        Ok(m) => match open_nonblocking(&config) {
            Err(e) if denied(&e) => (config, m),
            _ => return None,
        },
        Err(e) if denied(&e) => (dir.to_path_buf(), std::fs::symlink_metadata(dir).ok()?),
        Err(_) => return None,
    };
    Some(not_yours(&path, &meta))
}

/// `what` (a path in the repository at `dir`, as the store names it: `keys`,
/// `keys/…`) could not be read for lack of permission: whose the repository is.
pub fn unreadable_within(dir: &Path, what: &Path) -> Option<String> {
    let path = dir.join(what);
    let meta = std::fs::symlink_metadata(&path)
        .or_else(|_| std::fs::symlink_metadata(dir))
        .ok()?;
    Some(not_yours(&path, &meta))
}

/// `path` may not be read by this user: who owns it, and what to do.
fn not_yours(path: &Path, meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let owner = match crate::util::identity::user_name_of(meta.uid()) {
        name if name.is_empty() => format!("#{}", meta.uid()),
        name => name,
    };
    format!(
        "{}: permission denied: the repository belongs to {owner} (uid {}), and this user ({}) may not read it; run cairn as {owner} (sudo -u {owner} cairn …), or give this user read access",
        crate::util::text::printable_path(path),
        meta.uid(),
        crate::util::identity::user_name(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tools_repositories_are_named() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(kind_of(d.path()), None);
        std::fs::write(
            d.path().join("README"),
            "This is a Borg Backup repository.\nSee https://borgbackup.readthedocs.io/\n",
        )
        .unwrap();
        assert_eq!(kind_of(d.path()), Some(Kind::Borg));
        let r = tempfile::tempdir().unwrap();
        std::fs::write(r.path().join("config"), [0x8c_u8, 1, 2, 3]).unwrap();
        for sub in ["data", "index", "keys", "snapshots", "locks"] {
            std::fs::create_dir(r.path().join(sub)).unwrap();
        }
        assert_eq!(kind_of(r.path()), Some(Kind::Restic));
        let k = tempfile::tempdir().unwrap();
        std::fs::write(k.path().join("kopia.repository.f"), "{}").unwrap();
        assert_eq!(kind_of(k.path()), Some(Kind::Kopia));
    }
}
