//! The target directory, reached safely: stored paths checked before use, directories opened
//! one component at a time without following a symlink, nodes replaced only when they are not
//! directories, modes set without following, and file contents written with holes.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::lossy;

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
/// least [`HOLE_MIN`] inside, as holes.
pub(super) fn write_sparse(f: &File, offset: u64, data: &[u8]) -> io::Result<()> {
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
                    f.write_all_at(&data[s..z], offset + s as u64)?;
                    run = Some(pos);
                }
                _ => {}
            }
        }
        pos = end;
    }
    if let Some(s) = run {
        let end = zeros.unwrap_or(data.len());
        f.write_all_at(&data[s..end], offset + s as u64)?;
    }
    Ok(())
}

/// Opens directories component by component from the target's descriptor, never following a
/// symlink, keeping the chain of the last directory open (items arrive depth-first, so
/// neighbours share most of it).
pub(super) struct DirWalker {
    pub root: OwnedFd,
    pub stack: Vec<(Vec<u8>, OwnedFd)>,
}

impl DirWalker {
    fn open_child(
        parent: &OwnedFd,
        name: &[u8],
        create: bool,
        shown: &[u8],
    ) -> std::result::Result<OwnedFd, String> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..2 {
            match rustix::fs::openat(parent, name, flags, Mode::empty()) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => {
                            return Err(format!("cannot create directory {}: {e}", lossy(shown)))
                        }
                    }
                }
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(format!(
                        "parent {} is not a directory (a symlink or file is in the way)",
                        lossy(shown)
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
            let parent = self.stack.last().map(|(_, fd)| fd).unwrap_or(&self.root);
            let fd = Self::open_child(parent, comps[i], create, &shown)?;
            self.stack.push((comps[i].to_vec(), fd));
        }
        Ok(self.stack.last().map(|(_, fd)| fd).unwrap_or(&self.root))
    }

    /// Like `dir`, without disturbing the cached chain (for hardlinks).
    pub fn dir_fresh(&self, comps: &[&[u8]]) -> std::result::Result<OwnedFd, String> {
        let mut cur = rustix::io::dup(&self.root).map_err(|e| e.to_string())?;
        for i in 0..comps.len() {
            cur = Self::open_child(&cur, comps[i], false, &comps[..=i].join(&b'/'))?;
        }
        Ok(cur)
    }
}

/// Removes a non-directory at `parent/name` (never following it). Err if a directory is
/// there.
pub(super) fn clear(parent: &OwnedFd, name: &[u8]) -> std::result::Result<(), String> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            Err("a directory is in the way".into())
        }
        Ok(_) => rustix::fs::unlinkat(parent, name, AtFlags::empty())
            .map_err(|e| format!("cannot replace: {e}")),
        Err(_) => Ok(()),
    }
}

/// Sets the mode of `name` in `parent` without following a symlink: through an `O_PATH`
/// descriptor of the node itself (`fchmod` does not take one; `/proc/self/fd` does), so a
/// symlink swapped in after the node was made is refused, never followed.
pub(super) fn chmod_nofollow(parent: &OwnedFd, name: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(std::io::Error::other("it was replaced by a symlink"));
    }
    rustix::fs::chmod(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        Mode::from_raw_mode(mode),
    )?;
    Ok(())
}
