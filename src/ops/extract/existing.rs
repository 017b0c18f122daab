//! A file already in the target that holds what the archive holds: restored by setting its
//! metadata, without fetching or writing its contents. An interrupted extract run again
//! fetches only what is missing, and an extract over an older restore only what changed.
//!
//! "What the archive holds" is decided by content, never by size and mtime alone: the file is
//! cut as `create` cuts it (the repository's keyed chunker) and each piece's keyed id compared
//! with the archive's, stopping at the first difference. A file that differs is replaced as
//! before.
//!
//! The node is looked at through an `O_PATH` descriptor (opening it that way runs no device
//! driver and follows no link), and only a regular file of the right size with no other name
//! is opened again, through that descriptor, to be read and to have its metadata set. A file
//! with other names could be a link planted to a file elsewhere; it is replaced, as before.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};

use crate::chunker::{ChunkReader, Chunker};
use crate::crypto::Crypto;
use crate::format::item::Item;

/// What extract does where the target holds something already (`--overwrite`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overwrite {
    /// Compare contents; write only files that differ, set metadata on the rest.
    #[default]
    IfChanged,
    /// Write every file again.
    Always,
    /// Leave whatever is there as it is, metadata included; restore only what is missing.
    Never,
}

/// Whether the metadata extract sets differs between `st` and `item`: permission bits, the
/// modification time, and (as root, who can set them) the numeric owner.
pub fn meta_differs(st: &rustix::fs::Stat, item: &Item, is_root: bool) -> bool {
    (st.st_mode & 0o7777) != (item.mode & 0o7777)
        || st.st_mtime != item.mtime.secs
        || i128::from(st.st_mtime_nsec) != i128::from(item.mtime.nanos)
        || (is_root && (st.st_uid != item.uid || st.st_gid != item.gid))
}

/// Whether anything (a dangling symlink included) is at `name` in `parent`.
pub fn present(parent: &OwnedFd, name: &[u8]) -> bool {
    rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// What the target holds where an item goes.
pub enum Found {
    Nothing,
    /// A regular file with the item's contents, opened for its metadata to be set.
    Same(File),
    /// Something else (another file, a link, a directory, something unreadable).
    Other,
}

/// What compares a file in the target with an item.
pub struct Existing<'a> {
    pub chunker: Chunker,
    pub crypto: &'a Crypto,
    buf: Vec<u8>,
}

impl<'a> Existing<'a> {
    pub fn new(chunker: Chunker, crypto: &'a Crypto) -> Self {
        Self {
            chunker,
            crypto,
            buf: Vec::new(),
        }
    }

    /// What the target holds at `name` in `parent`, against `item`.
    pub fn look(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Found {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let node = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(node) => node,
            Err(rustix::io::Errno::NOENT) => return Found::Nothing,
            Err(_) => return Found::Other,
        };
        match self.holding(&node, item) {
            Some(file) => Found::Same(file),
            None => Found::Other,
        }
    }

    /// The node, opened for its metadata to be set, when it is a regular file holding
    /// exactly `item`'s contents.
    fn holding(&mut self, node: &OwnedFd, item: &Item) -> Option<File> {
        let st = rustix::fs::fstat(node).ok()?;
        // A file with another name may be another's (a link planted to a file elsewhere):
        // it is replaced, never given the item's owner and mode.
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_nlink != 1
            || u64::try_from(st.st_size).ok()? != item.size
        {
            return None;
        }
        // The same inode, opened for reading (a read-only file is kept too: its owner, mode,
        // times, attributes and flags are set through this descriptor, which needs no write
        // access).
        let again = format!("/proc/self/fd/{}", node.as_raw_fd());
        let file = File::from(
            rustix::fs::open(
                again.as_str(),
                OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .ok()?,
        );
        self.same_contents(&file, item).then_some(file)
    }

    /// Whether `file` cuts into the chunks of `item`, id for id.
    fn same_contents(&mut self, file: &File, item: &Item) -> bool {
        let mut reader = ChunkReader::new(&self.chunker, file, &mut self.buf);
        for want in &item.chunks {
            match reader.next_chunk() {
                Ok(Some(piece))
                    if piece.len() == want.len as usize && self.crypto.id_of(piece) == want.id => {}
                _ => return false,
            }
        }
        matches!(reader.next_chunk(), Ok(None))
    }
}
