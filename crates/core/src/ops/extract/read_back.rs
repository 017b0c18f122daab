//! `extract --verify`: once the restore is done, every regular file it restored is read back
//! from the target and cut by the archive's own chunk lengths, and each piece's keyed id is
//! compared with the archive's; a file that is missing, of another size or another content is
//! an error. Each file is flushed to its disk and dropped from the page cache before it is
//! read (fsync, then `POSIX_FADV_DONTNEED`), so that what is compared comes from the disk
//! where the kernel lets it: a disk or file system that silently lost a write is caught.
//!
//! Files are reached as the restore reached them: from the target's descriptor, one
//! component at a time, never following a symlink.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::selection::Selection;
use super::target::{safe_components, DirWalker};
use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::progress::Progress;

/// What reading the restored files back found.
#[derive(Debug, Default)]
pub struct ReadBack {
    pub files: u64,
    pub bytes: u64,
    /// Files that are missing or differ from the archive, with why.
    pub failures: Vec<String>,
    /// Files the restoring user may not read (their mode), not read back (a warning).
    pub unread: Vec<String>,
}

/// A read back to do once the restore is done: the target's directory as the restore opened
/// it, and what to read back.
pub(super) struct Later {
    root: OwnedFd,
    selection: Selection,
}

impl Later {
    /// With `--verify`: the target's directory `root` (the one the restore uses) kept for the
    /// read back, and what it reads.
    pub fn prepare(root: &OwnedFd, opts: &mut super::RestoreOptions) -> Result<Option<Later>> {
        let Some(selection) = opts.verify.take() else {
            return Ok(None);
        };
        let root = rustix::io::dup(root).map_err(|e| Error::io(&opts.target, e.into()))?;
        Ok(Some(Later { root, selection }))
    }

    /// Reads back every regular file the selection picks from `meta`.
    pub fn run(
        self,
        (repo, index, meta): (&Repository, &ChunkIndex, &ArchiveMeta),
        (progress, interrupt): (&Progress, &Interrupt),
    ) -> Result<ReadBack> {
        read_back(
            (repo, index, meta),
            (self.root, self.selection),
            (progress, interrupt),
        )
    }
}

/// Reads back every regular file `selection` picks from `meta`, below `root`.
fn read_back(
    (repo, index, meta): (&Repository, &ChunkIndex, &ArchiveMeta),
    (root, mut selection): (OwnedFd, Selection),
    (progress, interrupt): (&Progress, &Interrupt),
) -> Result<ReadBack> {
    crate::util::pause::point("extract:read-back");
    let mut dirs = DirWalker::new(root, Vec::new(), false);
    let mut out = ReadBack::default();
    let mut buf = Vec::new();
    for item in archive::items(repo, index, meta) {
        interrupt.check()?;
        let Some(item) = selection.pick(item?) else {
            continue;
        };
        // A hardlink's other names carry no contents of their own: the first is read.
        if item.kind != ItemKind::File || (item.chunks.is_empty() && item.size > 0) {
            continue;
        }
        out.files += 1;
        out.bytes += item.size;
        progress.set(|| {
            format!(
                "reading back: {} files, {}",
                out.files,
                crate::util::progress::size(out.bytes)
            )
        });
        if let Err(why) = compare(&mut dirs, &item, repo, &mut buf) {
            let said = format!("{}: {why}", crate::util::text::printable_bytes(&item.path));
            match why.starts_with(UNREADABLE) {
                true => out.unread.push(said),
                false => out.failures.push(said),
            }
        }
    }
    Ok(out)
}

/// What a file that its mode makes unreadable to the restoring user is said to be.
const UNREADABLE: &str = "its mode lets this user not read it: not read back";

/// The restored file of `item` against the archive: `Err` says how it differs.
fn compare(
    dirs: &mut DirWalker,
    item: &Item,
    repo: &Repository,
    buf: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    let comps = safe_components(&item.path).ok_or("unsafe path in archive")?;
    let (name, parents) = comps.split_last().ok_or("empty path")?;
    let parent = dirs.dir(parents, false)?;
    // Looked at through an O_PATH descriptor first (opening a device or a FIFO that someone
    // put in its place runs no driver and waits for no writer), and opened for reading only
    // when it is a regular file of the right size, through that same descriptor.
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let node = match rustix::fs::openat(parent, *name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err("missing from the target".into()),
        Err(e) => return Err(format!("cannot be read back: {e}")),
    };
    let st = rustix::fs::fstat(&node).map_err(|e| format!("cannot be read back: {e}"))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Symlink => return Err("a symlink is where the file was restored".into()),
        _ => return Err("not a regular file any more".into()),
    }
    if u64::try_from(st.st_size).ok() != Some(item.size) {
        return Err(format!(
            "{} bytes on disk, the archive holds {}",
            st.st_size, item.size
        ));
    }
    let again = format!("/proc/self/fd/{}", node.as_raw_fd());
    let fd = rustix::fs::open(
        again.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| match e {
        // The restoring user owns it, and its mode lets no one read it (as the archive
        // holds it): not something the disk did.
        Errno::ACCESS | Errno::PERM => format!("{UNREADABLE} ({e})"),
        e => format!("cannot be read back: {e}"),
    })?;
    // What the disk holds, not what the page cache remembers of the writes.
    let _ = rustix::fs::fsync(&fd);
    let _ = rustix::fs::fadvise(&fd, 0, None, rustix::fs::Advice::DontNeed);
    let mut file = std::fs::File::from(fd);
    let mut at = 0u64;
    for want in &item.chunks {
        buf.resize(want.len as usize, 0);
        file.read_exact(buf)
            .map_err(|e| format!("cannot be read back at byte {at}: {e}"))?;
        if repo.crypto().id_of(buf) != want.id {
            return Err(format!(
                "differs from the archive in the {} bytes from byte {at}",
                want.len
            ));
        }
        at += u64::from(want.len);
    }
    if at != item.size {
        return Err(format!(
            "the archive's chunks hold {at} bytes, its size is {}",
            item.size
        ));
    }
    Ok(())
}
