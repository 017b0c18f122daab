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
//! driver and follows no link), and only a regular file of the right size is opened again,
//! through that descriptor, to be read and to have its metadata set. A file is kept only when
//! no other user can have a hold on it (issue 44: a local user planted a copy of a set-uid
//! program in a restore target, kept a writable mapping of it, and the kept copy was given
//! root and mode 4755):
//! - it already has the owner the restore gives it (as root the item's, else the restoring
//!   user): extract never hands an inode it did not create to another owner;
//! - its group and others can write it no more than the item's mode lets them (a file the
//!   target's other users could open for writing may be open still);
//! - the item carries nothing that grants privilege (set-uid or set-gid bits, file
//!   capabilities, any `security.*` attribute): such an item is always written anew, since
//!   whether someone opened the old inode while it was writable cannot be known;
//! - it has no other name, unless the item is hardlinked, and then every name the inode has
//!   must be one of the item's names in the target (the restore checks that once it has seen
//!   them all, before it sets anything): a link planted to a file elsewhere is replaced.

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

/// The owner an item is restored with: as root the item's (by name where the name exists
/// here, else by number; by number only with `--numeric-ids`), else the restoring user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    /// The group, as root (others cannot choose it).
    pub gid: Option<u32>,
}

/// Whether `item` carries something that grants privilege: set-uid or set-gid bits, file
/// capabilities, or any other `security.*` attribute.
pub fn privileged(item: &Item) -> bool {
    item.mode & 0o6000 != 0 || item.xattrs.iter().any(|(k, _)| k.starts_with(b"security."))
}

/// Whether a directory with `st` belongs to somebody else: neither the restoring user
/// (`euid`) nor the owner the item is given. Extract does not give such a directory to
/// anyone, nor set its mode or attributes.
pub fn foreign_dir(st: &rustix::fs::Stat, owner: Owner, euid: u32) -> bool {
    st.st_uid != euid && st.st_uid != owner.uid
}

/// Whether the metadata extract sets differs between `st` and `item`: permission bits, the
/// modification time, and (as root, who can set them) the numeric owner.
pub fn meta_differs(st: &rustix::fs::Stat, item: &Item, owner: Owner) -> bool {
    (st.st_mode & 0o7777) != (item.mode & 0o7777)
        || st.st_mtime != item.mtime.secs
        || i128::from(st.st_mtime_nsec) != i128::from(item.mtime.nanos)
        || st.st_uid != owner.uid
        || owner.gid.is_some_and(|g| st.st_gid != g)
}

/// Whether anything (a dangling symlink included) is at `name` in `parent`.
pub fn present(parent: &OwnedFd, name: &[u8]) -> bool {
    rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// A file the target holds with the item's contents, opened for its metadata to be set.
pub struct Same {
    pub file: File,
    /// Its device and inode, and how many names it has.
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
}

/// What the target holds where an item goes.
pub enum Found {
    Nothing,
    Same(Same),
    /// Something else (another file, a link, a directory, something unreadable, something
    /// that may not be kept).
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

    /// What the target holds at `name` in `parent`, against `item` restored with `owner`.
    pub fn look(&mut self, parent: &OwnedFd, name: &[u8], item: &Item, owner: Owner) -> Found {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let node = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(node) => node,
            Err(rustix::io::Errno::NOENT) => return Found::Nothing,
            Err(_) => return Found::Other,
        };
        match self.holding(&node, item, owner) {
            Some(same) => Found::Same(same),
            None => Found::Other,
        }
    }

    /// The node, opened for its metadata to be set, when it is a regular file holding
    /// exactly `item`'s contents that may be kept (see the module's rules).
    fn holding(&mut self, node: &OwnedFd, item: &Item, owner: Owner) -> Option<Same> {
        let st = rustix::fs::fstat(node).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || u64::try_from(st.st_size).ok()? != item.size
            || (st.st_nlink != 1 && item.hardlink_id.is_none())
            || st.st_uid != owner.uid
            || owner.gid.is_some_and(|g| st.st_gid != g)
            || (st.st_mode & 0o022 & !item.mode) != 0
            || privileged(item)
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
        self.same_contents(&file, item).then_some(Same {
            file,
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
        })
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
