//! The target directory, reached safely: stored paths checked before use, directories opened
//! one component at a time without following a symlink (and never cairn's own), modes set
//! without following, and file contents written with holes.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::lossy;
use crate::ops::own_dirs::OwnDir;

/// The components of a stored path, or `None` when it could escape the target.
pub fn safe_components(path: &[u8]) -> Option<Vec<&[u8]>> {
    if path.is_empty() || path[0] == b'/' || path.contains(&0) {
        return None;
    }
    let comps: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if comps
        .iter()
        .any(|c| c.is_empty() || *c == b"." || *c == b"..")
    {
        return None;
    }
    Some(comps)
}

/// True when a block of bytes is all zeros (a hole on restore).
fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(16);
    let body = words.all(|w| u128::from_ne_bytes(w.try_into().unwrap_or([1; 16])) == 0);
    body && words.remainder().iter().all(|x| *x == 0)
}

const BLOCK: u64 = 4096;

/// Zero runs inside a piece shorter than this are written, not left as holes: every hole
/// splits the write, and blocks of 4 KiB of zeros between data (a database's free pages, say)
/// cost a system call each and leave the file in as many extents. Measured on 1 GiB of 4 KiB
/// blocks, half of them zeros: 131,000 writes, and the threads that wrote one file spinning on
/// its inode lock. Zeros at either end of a piece are always holes (skipping them costs no
/// write), and a whole zero chunk is one hole; restic and borg make holes of whole chunks only.
const HOLE_MIN: usize = 64 * 1024;

/// Writes `data` at `offset`, leaving whole zero blocks at either end, and runs of them of at
/// least [`HOLE_MIN`] inside, as holes. Returns where the last byte written ends (`offset`
/// when nothing was written), so that a file whose writes reached its size needs no size set.
pub(super) fn write_sparse(f: &File, offset: u64, data: &[u8]) -> io::Result<u64> {
    let mut pos = 0usize;
    // The data not yet written starts here…
    let mut run: Option<usize> = None;
    // …and the zero blocks since this offset end it, unless data follows them soon.
    let mut zeros: Option<usize> = None;
    while pos < data.len() {
        let abs = offset + pos as u64;
        let end = (pos + (BLOCK - abs % BLOCK) as usize).min(data.len());
        if is_zero(&data[pos..end]) {
            zeros.get_or_insert(pos);
        } else {
            match (run, zeros.take()) {
                (None, _) => run = Some(pos),
                (Some(s), Some(z)) if pos - z >= HOLE_MIN => {
                    write_at(f, &data[s..z], offset + s as u64)?;
                    run = Some(pos);
                }
                _ => {}
            }
        }
        pos = end;
    }
    let mut written_end = offset;
    if let Some(s) = run {
        let end = zeros.unwrap_or(data.len());
        write_at(f, &data[s..end], offset + s as u64)?;
        written_end = offset + end as u64;
    }
    Ok(written_end)
}

/// Writes `data` at `offset` in writes of at most 1 MiB: larger ones cost this kernel more
/// time in its page-cache copy (extract of 1 GiB in chunks of 2 MiB on average: 1.17 s,
/// with writes of 1 MiB 1.00 s, medians of 7, interleaved).
fn write_at(f: &File, data: &[u8], offset: u64) -> io::Result<()> {
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        f.write_all_at(piece, offset + ((i as u64) << 20))?;
    }
    Ok(())
}

/// Opens directories component by component from the target's descriptor, never following a
/// symlink, keeping the chain of the last directory open (items arrive depth-first, so
/// neighbours share most of it). cairn's own directories (the repository being read, the
/// cache) are never entered: nothing is restored into them.
pub(super) struct DirWalker {
    pub root: OwnedFd,
    pub stack: Vec<(Vec<u8>, Rc<OwnedFd>)>,
    pub own: Vec<OwnDir>,
    /// `--delete`: a file or symlink where a parent directory goes is replaced by the
    /// directory (the tree ends as the archive's).
    pub replace: bool,
}

impl DirWalker {
    pub fn new(root: OwnedFd, own: Vec<OwnDir>, replace: bool) -> Self {
        Self {
            root,
            stack: Vec::new(),
            own,
            replace,
        }
    }

    fn open_child(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        create: bool,
        shown: &[u8],
    ) -> std::result::Result<OwnedFd, String> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..3 {
            match rustix::fs::openat(parent, name, flags, Mode::empty()) {
                Ok(fd) => {
                    if let Some(own) = OwnDir::of_fd(&self.own, &fd) {
                        return Err(format!(
                            "{} is left alone ({}): nothing is restored into it",
                            lossy(shown),
                            own.what
                        ));
                    }
                    return Ok(fd);
                }
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => {
                            return Err(format!("cannot create directory {}: {e}", lossy(shown)))
                        }
                    }
                }
                // A file or a symlink in the way: replaced with --delete (never followed).
                Err(Errno::LOOP) | Err(Errno::NOTDIR) if create && self.replace => {
                    if let Err(e) = rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                        return Err(format!(
                            "parent {} is not a directory and cannot be replaced: {e}",
                            lossy(shown)
                        ));
                    }
                }
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(format!(
                        "parent {} is not a directory (a symlink or file is in the way{})",
                        lossy(shown),
                        if create { "; --delete replaces it" } else { "" }
                    ))
                }
                Err(e) => return Err(format!("{}: {e}", lossy(shown))),
            }
        }
        Err(format!("{}: keeps changing", lossy(shown)))
    }

    /// The directory `comps` (relative to the target), created if missing when `create`.
    pub fn dir(&mut self, comps: &[&[u8]], create: bool) -> std::result::Result<&OwnedFd, String> {
        let common = self
            .stack
            .iter()
            .zip(comps)
            .take_while(|((name, _), c)| name.as_slice() == **c)
            .count();
        self.stack.truncate(common);
        for i in common..comps.len() {
            let shown = comps[..=i].join(&b'/');
            let parent = self.stack.last().map_or(&self.root, |(_, fd)| fd);
            let fd = self.open_child(parent, comps[i], create, &shown)?;
            self.stack.push((comps[i].to_vec(), Rc::new(fd)));
        }
        Ok(self.stack.last().map_or(&self.root, |(_, fd)| fd))
    }

    /// Like `dir`, the directory shared rather than borrowed, for a caller that holds it while
    /// it changes the walker: no descriptor is duplicated per item (the target itself is).
    pub fn dir_shared(
        &mut self,
        comps: &[&[u8]],
        create: bool,
    ) -> std::result::Result<Rc<OwnedFd>, String> {
        self.dir(comps, create)?;
        match self.stack.last() {
            Some((_, fd)) => Ok(Rc::clone(fd)),
            None => rustix::io::dup(&self.root)
                .map(Rc::new)
                .map_err(|e| io::Error::from(e).to_string()),
        }
    }

    /// Like `dir`, without disturbing the cached chain (for hardlinks).
    pub fn dir_fresh(&self, comps: &[&[u8]]) -> std::result::Result<OwnedFd, String> {
        let mut cur = rustix::io::dup(&self.root).map_err(|e| e.to_string())?;
        for i in 0..comps.len() {
            cur = self.open_child(&cur, comps[i], false, &comps[..=i].join(&b'/'))?;
        }
        Ok(cur)
    }

    /// The directory that holds `comps` (the target for a single component), without
    /// disturbing the cached chain.
    pub fn parent_fresh(&self, comps: &[&[u8]]) -> std::result::Result<OwnedFd, String> {
        match comps.split_last() {
            Some((_, parents)) if !parents.is_empty() => self.dir_fresh(parents),
            _ => rustix::io::dup(&self.root).map_err(|e| e.to_string()),
        }
    }
}

/// What the restore needs to know of a node: its type, device and inode, the mount it is on
/// (`None` on kernels before 5.8), its owner and how many names it has.
pub(super) struct Node {
    pub kind: FileType,
    pub dev: u64,
    pub ino: u64,
    pub mnt: Option<u64>,
    pub uid: u32,
    pub nlink: u64,
    /// The device a device node stands for.
    pub rdev: u64,
    /// When it was made (seconds and nanoseconds since the epoch), where the file system
    /// says.
    pub born: Option<(i64, u32)>,
}

const WANT: rustix::fs::StatxFlags = rustix::fs::StatxFlags::BASIC_STATS
    .union(rustix::fs::StatxFlags::MNT_ID)
    .union(rustix::fs::StatxFlags::BTIME);

impl Node {
    fn of(st: rustix::fs::Statx) -> Node {
        let has = |f: rustix::fs::StatxFlags| st.stx_mask & f.bits() != 0;
        Node {
            kind: FileType::from_raw_mode(u32::from(st.stx_mode)),
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mnt: has(rustix::fs::StatxFlags::MNT_ID).then_some(st.stx_mnt_id),
            uid: st.stx_uid,
            nlink: u64::from(st.stx_nlink),
            rdev: rustix::fs::makedev(st.stx_rdev_major, st.stx_rdev_minor),
            born: has(rustix::fs::StatxFlags::BTIME)
                .then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)),
        }
    }

    /// `name` in `dir`, not followed.
    pub fn at(dir: &OwnedFd, name: &[u8]) -> rustix::io::Result<Node> {
        rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, WANT).map(Node::of)
    }

    /// The node open as `fd`.
    pub fn open(fd: &OwnedFd) -> rustix::io::Result<Node> {
        rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, WANT).map(Node::of)
    }

    /// Whether `other` is on another file system or mount than this one (a bind mount of
    /// the same file system has the same device but another mount).
    pub fn other_mount(&self, other: &Node) -> bool {
        self.dev != other.dev || matches!((self.mnt, other.mnt), (Some(a), Some(b)) if a != b)
    }
}

/// Opens the restore's target once, and checks that very directory before anything is
/// restored into it (a check of the path and a later open of it could meet two different
/// directories, another user having swapped a symlink in between: issue 44): it is not one
/// of cairn's own directories (the repository being read, the cache) nor below one, and,
/// with `--delete`, not the root of a file system (`/`, a mount point, a bind mount) unless
/// `root_ok` (`--no-preserve-root`): `--delete` there removes what the archive does not hold
/// from all of it. With `create`, a missing target is made first; without, a missing one is
/// `None` (only the directories above it are checked).
pub fn open_target(
    target: &std::path::Path,
    create: bool,
    delete: bool,
    root_ok: bool,
    own: &[OwnDir],
) -> crate::error::Result<Option<OwnedFd>> {
    use crate::error::Error;
    let shown = crate::util::text::printable_path(target);
    let made = create && !target.exists();
    if create {
        std::fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
    }
    let checked = check_opened(target, create, delete, root_ok, own, &shown);
    if made && checked.is_err() {
        // Made for nothing (a refused target): gone again, when it is still empty.
        let _ = std::fs::remove_dir(target);
    }
    checked
}

/// [`open_target`] once the target is made (with `create`).
fn check_opened(
    target: &std::path::Path,
    create: bool,
    delete: bool,
    root_ok: bool,
    own: &[OwnDir],
    shown: &str,
) -> crate::error::Result<Option<OwnedFd>> {
    use crate::error::Error;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let (fd, is_target) = match rustix::fs::open(target, flags, Mode::empty()) {
        Ok(fd) => (fd, true),
        Err(Errno::NOENT) if !create => {
            // What would be made goes below the nearest directory that exists.
            let mut above = target;
            loop {
                above = match above.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => std::path::Path::new("."),
                };
                match rustix::fs::open(above, flags, Mode::empty()) {
                    Ok(fd) => break (fd, false),
                    Err(Errno::NOENT) if above != std::path::Path::new(".") => continue,
                    Err(e) => return Err(Error::io(above, e.into())),
                }
            }
        }
        Err(e) => return Err(Error::io(target, e.into())),
    };
    let mut dir = rustix::io::dup(&fd).map_err(|e| Error::io(target, e.into()))?;
    let mut first = true;
    loop {
        let here = Node::open(&dir).map_err(|e| Error::io(target, e.into()))?;
        if let Some(o) = OwnDir::by_identity(own, (here.dev, here.ino)) {
            return Err(Error::invalid(format!(
                "the target {shown} is {} ({}): nothing is restored there",
                if first && is_target {
                    "cairn's own directory"
                } else {
                    "inside cairn's own directory"
                },
                o.what
            )));
        }
        let up = rustix::fs::openat(&dir, "..", flags, Mode::empty())
            .map_err(|e| Error::io(target, e.into()))?;
        let above = Node::open(&up).map_err(|e| Error::io(target, e.into()))?;
        let is_root = (above.dev, above.ino) == (here.dev, here.ino);
        if first && is_target && delete && !root_ok && (is_root || here.other_mount(&above)) {
            return Err(Error::invalid(format!(
                "refusing --delete on {shown}: it is the root of a file system ({}), and --delete would remove from all of it what the archive does not hold. Restore into a directory below it, or add --no-preserve-root if that is what you want",
                if is_root { "/" } else { "a mount point" }
            )));
        }
        if is_root {
            return Ok(is_target.then_some(fd));
        }
        first = false;
        dir = up;
    }
}
