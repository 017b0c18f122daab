//! Files a command writes where the user said (`export-tar FILE`, `key export FILE`, `man
//! DIR`), opened so that another local user cannot redirect them.
//!
//! Root runs `cairn export-tar home /tmp/home.tar`; another user had made `/tmp/home.tar` a
//! FIFO, or a symlink to one, or to a file of theirs: the tar (with `etc/shadow`) would go to
//! them. So, looked at without following links (`lstat`):
//!
//! - nothing there, or a regular file: the contents are written to a new temporary file beside
//!   the name (`O_CREAT|O_EXCL`, which never follows a link), then renamed over the name (a
//!   rename replaces a link planted meanwhile, never writes through it); in a sticky
//!   directory the kernel refuses to replace another user's file;
//! - a character device (`/dev/null`, a tape): written into, opened with `O_NOFOLLOW`;
//! - a FIFO owned by this user: written into, opened with `O_NOFOLLOW`; one owned by anyone
//!   else is refused;
//! - a symbolic link, a directory, a socket, a block device: refused.
//!
//! A device or FIFO is checked again after it is opened (the same device and inode as looked
//! at), so that a swap between the look and the open is refused too.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use rustix::fs::OFlags;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where the bytes go.
pub enum OutFile {
    /// Into a device or a FIFO, as they come.
    Special { file: File, path: PathBuf },
    /// Into a temporary file beside `path`, renamed over it by [`OutFile::finish`].
    Regular {
        tmp: tempfile::NamedTempFile,
        path: PathBuf,
    },
}

/// How a new regular file is made.
#[derive(Clone, Copy)]
pub struct NewFile {
    /// Its mode (the temporary file's, kept by the rename).
    pub mode: u32,
    /// Whether an existing regular file of that name may be replaced.
    pub replace: bool,
}

fn refuse(path: &Path, why: &str) -> Error {
    Error::invalid(format!(
        "{}: {why}; refusing to write there",
        path.display()
    ))
}

impl OutFile {
    /// Opens `path` for writing, by the rules of the module doc.
    pub fn create(path: &Path, new: NewFile) -> Result<OutFile> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::beside(path, new),
            Err(e) => Err(Error::io(path, e)),
            Ok(md) => {
                let t = md.file_type();
                if t.is_file() {
                    if !new.replace {
                        return Err(refuse(path, "exists already"));
                    }
                    Self::beside(path, new)
                } else if t.is_symlink() {
                    Err(refuse(path, "is a symbolic link"))
                } else if t.is_char_device() {
                    Self::special(path, &md)
                } else if t.is_fifo() {
                    if md.uid() != rustix::process::geteuid().as_raw() {
                        return Err(refuse(path, "is a FIFO of another user"));
                    }
                    Self::special(path, &md)
                } else {
                    Err(refuse(
                        path,
                        "is neither a regular file nor a character device nor a FIFO",
                    ))
                }
            }
        }
    }

    fn beside(path: &Path, new: NewFile) -> Result<OutFile> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".cairn-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(new.mode))
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        Ok(OutFile::Regular {
            tmp,
            path: path.to_path_buf(),
        })
    }

    fn special(path: &Path, seen: &std::fs::Metadata) -> Result<OutFile> {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags((OFlags::NOFOLLOW | OFlags::NOCTTY).bits() as i32)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let opened = file.metadata().map_err(|e| Error::io(path, e))?;
        if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
            return Err(refuse(path, "was replaced while it was being opened"));
        }
        Ok(OutFile::Special {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Where to write.
    pub fn writer(&self) -> &File {
        match self {
            OutFile::Special { file, .. } => file,
            OutFile::Regular { tmp, .. } => tmp.as_file(),
        }
    }

    /// Makes the written file durable and puts it in place.
    pub fn finish(self) -> Result<()> {
        match self {
            OutFile::Special { mut file, path } => file.flush().map_err(|e| Error::io(&path, e)),
            OutFile::Regular { tmp, path } => {
                tmp.as_file().sync_all().map_err(|e| Error::io(&path, e))?;
                tmp.persist(&path).map_err(|e| Error::io(&path, e.error))?;
                Ok(())
            }
        }
    }
}

/// Writes `bytes` as the whole of `path` by the rules of the module doc.
pub fn write_whole(path: &Path, bytes: &[u8], new: NewFile) -> Result<()> {
    let out = OutFile::create(path, new)?;
    out.writer()
        .write_all(bytes)
        .map_err(|e| Error::io(path, e))?;
    out.finish()
}

/// Makes a pipe on stdout as large as a user may make one (1 MiB unless the system says
/// less), for a stream of archive contents: written 64 KiB at a time, cairn and the reader
/// (`cat`, `tar`) took turns for every 64 KiB, and `export-tar` of 1 GiB to `cat` took 2.0 s
/// against 1.5 s. Anything else on stdout, or a refusal, leaves it as it is.
pub fn widen_stdout_pipe() {
    let out = std::io::stdout();
    let is_pipe = rustix::fs::fstat(&out)
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_fifo());
    if is_pipe {
        let _ = rustix::pipe::fcntl_setpipe_size(&out, 1 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAR: NewFile = NewFile {
        mode: 0o644,
        replace: true,
    };

    #[test]
    fn regular_files_are_replaced_links_and_foreign_fifos_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("out");
        write_whole(&f, b"one", TAR).unwrap();
        write_whole(&f, b"two", TAR).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let keep = NewFile {
            mode: 0o600,
            replace: false,
        };
        assert!(write_whole(&f, b"three", keep).is_err());
        // Through a link: refused, the link's target untouched.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"mine").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_whole(&link, b"x", TAR).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
        // A dangling link too.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(write_whole(&dangling, b"x", TAR).is_err());
        assert!(!dir.path().join("nowhere").exists());
        // A character device is written into.
        write_whole(Path::new("/dev/null"), b"gone", TAR).unwrap();
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".cairn-"))
            .collect();
        assert!(left.is_empty());
    }
}
