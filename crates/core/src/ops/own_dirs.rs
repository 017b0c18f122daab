//! cairn's own directories: the repository a command reads or writes (when it is a local
//! directory) and cairn's cache. `create` never stores them and `extract` never writes into,
//! replaces or deletes them (`--delete` included), recognised by device and inode so that a
//! symlink or a bind mount to them counts too.

use std::path::Path;

/// One of cairn's own directories, and what it is ("it is the repository being read").
#[derive(Clone, Debug)]
pub struct OwnDir {
    pub dev: u64,
    pub ino: u64,
    pub what: &'static str,
}

impl OwnDir {
    /// `dir`, if it exists, as `what`.
    pub fn dir(dir: &Path, what: &'static str) -> Option<OwnDir> {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(dir).ok().filter(|m| m.is_dir())?;
        Some(OwnDir {
            dev: md.dev(),
            ino: md.ino(),
            what,
        })
    }

    /// The one of `own` that `md` is, if it is a directory and one of them.
    pub fn find<'n>(own: &'n [OwnDir], md: &crate::source::fsmeta::Meta) -> Option<&'n OwnDir> {
        if !md.is_dir() {
            return None;
        }
        Self::by_identity(own, md.identity())
    }

    /// The one of `own` with device and inode `id`.
    pub fn by_identity(own: &[OwnDir], id: (u64, u64)) -> Option<&OwnDir> {
        own.iter().find(|n| (n.dev, n.ino) == id)
    }

    /// The one of `own` that the directory open as `fd` is.
    pub fn of_fd<'n>(own: &'n [OwnDir], fd: &impl std::os::fd::AsFd) -> Option<&'n OwnDir> {
        if own.is_empty() {
            return None;
        }
        let st = rustix::fs::fstat(fd).ok()?;
        Self::by_identity(own, (st.st_dev, st.st_ino))
    }
}
