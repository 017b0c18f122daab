//! What the kernel is told about a node: its `stat` attributes in FUSE's form.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};

use super::tree::{Defaults, Node};
use crate::format::item::{ItemKind, Timestamp};

fn system_time(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
            + Duration::from_nanos(u64::from(t.nanos))
    }
}

pub fn file_type(kind: ItemKind) -> FileType {
    match kind {
        ItemKind::File => FileType::RegularFile,
        ItemKind::Dir => FileType::Directory,
        ItemKind::Symlink => FileType::Symlink,
        ItemKind::Fifo => FileType::NamedPipe,
        ItemKind::CharDev => FileType::CharDevice,
        ItemKind::BlockDev => FileType::BlockDevice,
    }
}

pub fn dir_attr(ino: u64, d: Defaults) -> FileAttr {
    let t = system_time(d.time);
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: d.uid,
        gid: d.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// A device number as FUSE passes it (the kernel's 32-bit encoding: 12 bits of major, 20 of
/// minor).
fn kernel_dev(rdev: u64) -> u32 {
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

pub fn node_attr(ino: u64, n: &Node) -> FileAttr {
    let mtime = system_time(n.mtime);
    let size = match n.kind {
        ItemKind::Symlink => n.link_target.len() as u64,
        _ => n.size,
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: mtime,
        mtime,
        ctime: system_time(n.ctime),
        crtime: mtime,
        kind: file_type(n.kind),
        perm: n.perm,
        nlink: n.nlink,
        uid: n.uid,
        gid: n.gid,
        rdev: kernel_dev(n.rdev),
        blksize: 4096,
        flags: 0,
    }
}
