//! Reading and restoring file-system metadata: stat results to [`Item`] fields, owner names,
//! user extended attributes.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::archive::item::{Item, ItemKind, Timestamp};

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
        cached(&mut self.users, uid, |uid| {
            let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*uid));
            user.ok().flatten().map(|u| u.name).unwrap_or_default()
        })
    }

    pub fn group(&mut self, gid: u32) -> String {
        cached(&mut self.groups, gid, |gid| {
            let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*gid));
            group.ok().flatten().map(|g| g.name).unwrap_or_default()
        })
    }

    /// The local uid of a user name, if it exists here.
    pub fn uid_of(&mut self, name: &str) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        cached(&mut self.user_ids, name.to_string(), |n| {
            nix::unistd::User::from_name(n)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        })
    }

    /// The local gid of a group name, if it exists here.
    pub fn gid_of(&mut self, name: &str) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        cached(&mut self.group_ids, name.to_string(), |n| {
            nix::unistd::Group::from_name(n)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw())
        })
    }
}

/// The kind of entry, or `None` for sockets (and anything else cairn does not keep).
pub fn kind_of(md: &Metadata) -> Option<ItemKind> {
    let ft = md.file_type();
    Some(if ft.is_file() {
        ItemKind::File
    } else if ft.is_dir() {
        ItemKind::Dir
    } else if ft.is_symlink() {
        ItemKind::Symlink
    } else if ft.is_fifo() {
        ItemKind::Fifo
    } else if ft.is_char_device() {
        ItemKind::CharDev
    } else if ft.is_block_device() {
        ItemKind::BlockDev
    } else {
        return None;
    })
}

/// An item with everything stat tells (no contents, xattrs or link target yet).
pub fn item_from_metadata(
    kind: ItemKind,
    stored: Vec<u8>,
    md: &Metadata,
    names: &mut Names,
) -> Item {
    let mut it = Item::new(kind, stored);
    it.mode = md.mode() & 0o7777;
    it.uid = md.uid();
    it.gid = md.gid();
    it.user = names.user(md.uid());
    it.group = names.group(md.gid());
    it.mtime = Timestamp {
        secs: md.mtime(),
        nanos: md.mtime_nsec().clamp(0, 999_999_999) as u32,
    };
    it.ctime = Timestamp {
        secs: md.ctime(),
        nanos: md.ctime_nsec().clamp(0, 999_999_999) as u32,
    };
    it.inode = md.ino();
    if kind == ItemKind::File {
        it.size = md.len();
    }
    if matches!(kind, ItemKind::CharDev | ItemKind::BlockDev) {
        it.rdev = md.rdev();
    }
    it
}

/// The `user.*` extended attributes of a path (not following symlinks), sorted by name.
pub fn read_xattrs(path: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    user_xattrs(xattr::list(path), |name| xattr::get(path, name))
}

/// The `user.*` extended attributes of an open file, sorted by name.
pub fn read_xattrs_fd(f: &std::fs::File) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use xattr::FileExt;
    user_xattrs(f.list_xattr(), |name| f.get_xattr(name))
}

/// Collects the `user.*` attributes from a listing and a getter. A file system without
/// xattrs has none to keep.
fn user_xattrs(
    listed: std::io::Result<xattr::XAttrs>,
    get: impl Fn(&std::ffi::OsStr) -> std::io::Result<Option<Vec<u8>>>,
) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let names = match listed {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(out),
        Err(e) => return Err(e),
    };
    for name in names {
        let bytes = name.as_bytes();
        if !bytes.starts_with(b"user.") {
            continue;
        }
        if let Some(value) = get(&name)? {
            out.push((bytes.to_vec(), value));
        }
    }
    out.sort();
    Ok(out)
}
