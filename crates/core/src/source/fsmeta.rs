//! Reading file-system metadata: stat results to [`Item`] fields, owner names, extended
//! attributes of every namespace (ACLs and file capabilities among them), Linux inode flags.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use std::ffi::CStr;

use rustix::fs::FileType;
use rustix::io::Errno;

use crate::format::item::{Item, ItemKind, Timestamp};
use crate::util::identity;

/// Caches uid/gid → name lookups and back.
#[derive(Default)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
    user_ids: HashMap<String, Option<u32>>,
    group_ids: HashMap<String, Option<u32>>,
}

/// Looks `key` up in `cache`, asking `find` (the system's user or group database) once.
fn cached<K: std::hash::Hash + Eq, V: Clone>(
    cache: &mut HashMap<K, V>,
    key: K,
    find: impl FnOnce(&K) -> V,
) -> V {
    if let Some(v) = cache.get(&key) {
        return v.clone();
    }
    let v = find(&key);
    cache.insert(key, v.clone());
    v
}

impl Names {
    pub fn user(&mut self, uid: u32) -> String {
        cached(&mut self.users, uid, |uid| identity::user_name_of(*uid))
    }

    pub fn group(&mut self, gid: u32) -> String {
        cached(&mut self.groups, gid, |gid| identity::group_name_of(*gid))
    }

    /// The local uid of a user name, if it exists here.
    pub fn uid_of(&mut self, name: &str) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        cached(&mut self.user_ids, name.to_string(), |n| {
            identity::uid_of(n)
        })
    }

    /// The local gid of a group name, if it exists here.
    pub fn gid_of(&mut self, name: &str) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        cached(&mut self.group_ids, name.to_string(), |n| {
            identity::gid_of(n)
        })
    }
}

/// What stat tells of a file system entry, whether it came from a path, an open descriptor
/// or a name relative to a directory descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub dev: u64,
    pub ino: u64,
    /// The whole `st_mode`: type and permission bits.
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub rdev: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

fn timestamp(secs: i64, nanos: i64) -> Timestamp {
    Timestamp {
        secs,
        nanos: nanos.clamp(0, 999_999_999) as u32,
    }
}

impl Meta {
    pub fn of(md: &Metadata) -> Self {
        Self {
            dev: md.dev(),
            ino: md.ino(),
            mode: md.mode(),
            nlink: md.nlink(),
            uid: md.uid(),
            gid: md.gid(),
            size: md.len(),
            rdev: md.rdev(),
            mtime: timestamp(md.mtime(), md.mtime_nsec()),
            ctime: timestamp(md.ctime(), md.ctime_nsec()),
        }
    }

    #[allow(clippy::unnecessary_cast)] // the field types differ between architectures
    pub fn of_stat(st: &rustix::fs::Stat) -> Self {
        Self {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            nlink: st.st_nlink as u64,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            size: st.st_size as u64,
            rdev: st.st_rdev as u64,
            mtime: timestamp(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: timestamp(st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }

    fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    /// (device, inode): which file this is.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// The kind of entry, or `None` for sockets (and anything else cairn does not keep).
pub fn kind_of(md: &Meta) -> Option<ItemKind> {
    Some(match md.file_type() {
        FileType::RegularFile => ItemKind::File,
        FileType::Directory => ItemKind::Dir,
        FileType::Symlink => ItemKind::Symlink,
        FileType::Fifo => ItemKind::Fifo,
        FileType::CharacterDevice => ItemKind::CharDev,
        FileType::BlockDevice => ItemKind::BlockDev,
        _ => return None,
    })
}

/// An item with everything stat tells (no contents, xattrs or link target yet).
pub fn item_from_metadata(kind: ItemKind, stored: Vec<u8>, md: &Meta, names: &mut Names) -> Item {
    let mut it = Item::new(kind, stored);
    it.mode = md.mode & 0o7777;
    it.uid = md.uid;
    it.gid = md.gid;
    it.user = names.user(md.uid);
    it.group = names.group(md.gid);
    it.mtime = md.mtime;
    it.ctime = md.ctime;
    it.inode = md.ino;
    if kind == ItemKind::File {
        it.size = md.size;
    }
    if matches!(kind, ItemKind::CharDev | ItemKind::BlockDev) {
        it.rdev = md.rdev;
    }
    it
}

/// What a backup keeps and a restore applies beyond what stat tells (borg's switches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaOptions {
    /// POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`); `--noacls`.
    pub acls: bool,
    /// Every other extended attribute the process can read; `--noxattrs`.
    pub xattrs: bool,
    /// Linux inode flags (immutable, append-only, nodump, noatime, …); `--noflags`.
    pub flags: bool,
    /// Owners by number only: a backup stores no names, a restore ignores them.
    pub numeric_ids: bool,
}

impl Default for MetaOptions {
    fn default() -> Self {
        Self {
            acls: true,
            xattrs: true,
            flags: true,
            numeric_ids: false,
        }
    }
}

impl MetaOptions {
    /// Whether the extended attribute `name` is kept.
    pub fn keeps_xattr(&self, name: &[u8]) -> bool {
        if is_acl(name) {
            self.acls
        } else {
            self.xattrs
        }
    }
}

/// Extended attributes: (name, value), sorted by name.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The access ACL, as Linux keeps it.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// A directory's default ACL.
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

pub fn is_acl(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// Linux inode flags (`FS_IOC_GETFLAGS`) kept: the ones `chattr` sets. (Others, such as
/// ext4's extents flag, describe how the file system stores the file, not the file.)
pub const KEPT_FLAGS: u32 = FL_SECRM
    | FL_UNRM
    | FL_COMPR
    | FL_SYNC
    | FL_IMMUTABLE
    | FL_APPEND
    | FL_NODUMP
    | FL_NOATIME
    | FL_NOCOMP
    | FL_JOURNAL_DATA
    | FL_NOTAIL
    | FL_DIRSYNC
    | FL_TOPDIR
    | FL_NOCOW
    | FL_PROJINHERIT;
const FL_SECRM: u32 = 0x1;
const FL_UNRM: u32 = 0x2;
const FL_COMPR: u32 = 0x4;
const FL_SYNC: u32 = 0x8;
pub const FL_IMMUTABLE: u32 = 0x10;
pub const FL_APPEND: u32 = 0x20;
pub const FL_NODUMP: u32 = 0x40;
const FL_NOATIME: u32 = 0x80;
const FL_NOCOMP: u32 = 0x400;
const FL_JOURNAL_DATA: u32 = 0x4000;
const FL_NOTAIL: u32 = 0x8000;
const FL_DIRSYNC: u32 = 0x10000;
const FL_TOPDIR: u32 = 0x20000;
const FL_NOCOW: u32 = 0x80_0000;
const FL_PROJINHERIT: u32 = 0x2000_0000;

/// The names of inode flags, as `chattr` knows them.
pub fn flag_names(flags: u32) -> Vec<&'static str> {
    set_in(
        flags,
        &[
            (FL_SECRM, "secure-deletion"),
            (FL_UNRM, "undeletable"),
            (FL_COMPR, "compressed"),
            (FL_SYNC, "sync"),
            (FL_IMMUTABLE, "immutable"),
            (FL_APPEND, "append-only"),
            (FL_NODUMP, "nodump"),
            (FL_NOATIME, "noatime"),
            (FL_NOCOMP, "nocompress"),
            (FL_JOURNAL_DATA, "journal-data"),
            (FL_NOTAIL, "notail"),
            (FL_DIRSYNC, "dirsync"),
            (FL_TOPDIR, "topdir"),
            (FL_NOCOW, "nocow"),
            (FL_PROJINHERIT, "project-inherit"),
        ],
    )
}

/// The names in `table` of the flags set in `flags`, in the table's order.
fn set_in(flags: u32, table: &[(u32, &'static str)]) -> Vec<&'static str> {
    table
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// Inode flags as tar's `SCHILY.fflags` holds them: the names libarchive (bsdtar `--fflags`)
/// gives Linux's flags, in its order, comma-separated; `None` when none is set. A flag it has
/// no name for (`nocompress`) is left out.
pub fn fflags_text(flags: u32) -> Option<String> {
    let names = set_in(
        flags,
        &[
            (FL_APPEND, "sappnd"),
            (FL_IMMUTABLE, "schg"),
            (FL_NODUMP, "nodump"),
            (FL_UNRM, "undel"),
            (FL_COMPR, "compress"),
            (FL_NOATIME, "noatime"),
            (FL_DIRSYNC, "dirsync"),
            (FL_JOURNAL_DATA, "journal-data"),
            (FL_SECRM, "secdel"),
            (FL_SYNC, "sync"),
            (FL_NOTAIL, "notail"),
            (FL_TOPDIR, "topdir"),
            (FL_NOCOW, "nocow"),
            (FL_PROJINHERIT, "projinherit"),
        ],
    );
    (!names.is_empty()).then(|| names.join(","))
}

/// A POSIX ACL in its extended-attribute form as text, as `getfacl` writes it on one line
/// (ids by number): `user::rw-,user:65534:rw-,group::r--,mask::rw-,other::r--`. `None` when
/// the bytes are not an ACL.
pub fn acl_text(bytes: &[u8]) -> Option<String> {
    const VERSION: u32 = 2;
    let (head, body) = bytes.split_at_checked(4)?;
    if u32::from_le_bytes(head.try_into().ok()?) != VERSION || body.len() % 8 != 0 {
        return None;
    }
    let mut parts = Vec::new();
    for e in body.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let rwx: String = [(4, 'r'), (2, 'w'), (1, 'x')]
            .iter()
            .map(|(b, c)| if perm & b != 0 { *c } else { '-' })
            .collect();
        let who = match tag {
            0x01 => "user:".to_string(),
            0x02 => format!("user:{id}"),
            0x04 => "group:".to_string(),
            0x08 => format!("group:{id}"),
            0x10 => "mask:".to_string(),
            0x20 => "other:".to_string(),
            _ => return None,
        };
        parts.push(format!("{who}:{rwx}"));
    }
    Some(parts.join(","))
}

/// The kept inode flags of an open file or directory; none where the file system has none.
pub fn read_flags(fd: std::os::fd::BorrowedFd<'_>) -> u32 {
    rustix::fs::ioctl_getflags(fd).map_or(0, |f| f.bits() & KEPT_FLAGS)
}

/// The extended attributes of a path (not following symlinks) that `opts` keeps, sorted by
/// name: every namespace the process can read (`user`; `trusted` as root; `security`, with
/// file capabilities; `system`, with ACLs).
pub fn read_xattrs(path: &Path, opts: &MetaOptions) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if !opts.acls && !opts.xattrs {
        return Ok(Vec::new());
    }
    kept_xattrs(
        sized(|buf| rustix::fs::llistxattr(path, buf)),
        opts,
        |name| sized(|buf| rustix::fs::lgetxattr(path, name, buf)),
    )
}

/// The extended attributes of an open file that `opts` keeps, sorted by name.
pub fn read_xattrs_fd(
    f: &std::fs::File,
    opts: &MetaOptions,
) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if !opts.acls && !opts.xattrs {
        return Ok(Vec::new());
    }
    kept_xattrs(sized(|buf| rustix::fs::flistxattr(f, buf)), opts, |name| {
        sized(|buf| rustix::fs::fgetxattr(f, name, buf))
    })
}

/// The whole value of a call that fills a buffer and fails with ERANGE when it is too small
/// (the size asked with an empty buffer is not used: it can change before the second call).
/// Linux caps a value, and a listing, at 64 KiB.
fn sized(mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>) -> std::io::Result<Vec<u8>> {
    const MAX: usize = 1 << 20;
    // Most files have no attributes, or a few short ones: a first try on the stack.
    let mut first = [0u8; 256];
    match call(&mut first) {
        Ok(n) => return Ok(first[..n].to_vec()),
        Err(Errno::RANGE) => {}
        Err(e) => return Err(e.into()),
    }
    let mut buf = vec![0; 1024];
    loop {
        match call(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(Errno::RANGE) if buf.len() < MAX => buf.resize(buf.len() * 4, 0),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Collects the kept attributes from a listing and a getter. A file system without xattrs
/// has none to keep; an attribute that vanished or that the process may not read (some
/// security modules hide theirs) is left out.
fn kept_xattrs(
    listed: std::io::Result<Vec<u8>>,
    opts: &MetaOptions,
    get: impl Fn(&CStr) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let names = match listed {
        Ok(n) => n,
        Err(e) if Errno::from_io_error(&e) == Some(Errno::NOTSUP) => return Ok(out),
        Err(e) => return Err(e),
    };
    // The listing: names, each ended by a NUL.
    for name in names.split_inclusive(|b| *b == 0) {
        let Ok(name) = CStr::from_bytes_with_nul(name) else {
            continue;
        };
        let bytes = name.to_bytes();
        if bytes.is_empty() || !opts.keeps_xattr(bytes) {
            continue;
        }
        match get(name) {
            Ok(value) => out.push((bytes.to_vec(), value)),
            Err(e)
                if matches!(
                    Errno::from_io_error(&e),
                    Some(Errno::NODATA | Errno::NOTSUP | Errno::PERM | Errno::ACCESS)
                ) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattrs_read_by_path_and_by_descriptor_are_what_was_set() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let big = vec![7u8; 3000];
        if xattr::set(&p, "user.cairn.a", b"one").is_err() {
            return; // a file system without user xattrs: nothing to read
        }
        xattr::set(&p, "user.cairn.big", &big).unwrap();
        let opts = MetaOptions {
            xattrs: true,
            ..MetaOptions::default()
        };
        let want = vec![
            (b"user.cairn.a".to_vec(), b"one".to_vec()),
            (b"user.cairn.big".to_vec(), big),
        ];
        assert_eq!(read_xattrs(&p, &opts).unwrap(), want);
        let f = std::fs::File::open(&p).unwrap();
        assert_eq!(read_xattrs_fd(&f, &opts).unwrap(), want);
    }
}
