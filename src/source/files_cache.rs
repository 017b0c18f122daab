//! The files cache: what the last backup of a series knew about each regular file, so an
//! unchanged file (same inode, size, ctime and mtime) is not read again.
//!
//! Kept outside the repository, in `$XDG_CACHE_HOME/cairn/<repository id>/files-<hash of the
//! archive name>`, written atomically after an archive is committed. A lost cache is rebuilt
//! from the newest archive of the series. Its chunks are only reused if the index still has
//! them. Files whose ctime or mtime is within two seconds of when they were read are not
//! cached: a change in the same timestamp tick would otherwise go unnoticed.
//!
//! A cache written by a backup also holds each file's inode flags and extended attributes
//! (ACLs among them) as that backup read them, with which of them it read (`--noacls`,
//! `--noxattrs`, `--noflags`): a file whose inode, size, mtime and ctime match is then taken
//! whole from the cache, without being opened (setting an attribute, an ACL or a flag
//! changes the ctime). A cache rebuilt from an archive does not know how its attributes
//! were read, and they are read from the file as before.
//!
//! Format: magic "CAIRNFC2" · read-with u8 (bit 0 ACLs, bit 1 other xattrs, bit 2 flags,
//! bit 3 read as root; 0xff: attributes unknown) · entry count u32 · entries (path bytes · inode u64 · size u64 ·
//! mtime i64 s, u32 ns · ctime i64 s, u32 ns · chunk count u32 · (chunk id 32 · len u32)… ·
//! attributes u8 (0 none, 1 known) [· flags u32 · xattr count u32 · (name bytes · value
//! bytes)…]). A cache of the earlier format "CAIRNFC1" is not read: it is rebuilt.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp, FLAG_CHANGED, FLAG_DAMAGED};
use crate::util::id::{sha256, ChunkId};
use crate::util::wire::{Decoder, Encoder};

const MAGIC: [u8; 8] = *b"CAIRNFC2";

/// `read_with` of a cache whose attributes were not read by a backup.
const UNKNOWN: u8 = 0xff;

/// What a backup read of a file besides its contents: its inode flags (as read, before
/// `--noflags` leaves them out of the item) and its extended attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub inode_flags: u32,
    pub xattrs: crate::source::fsmeta::Xattrs,
}

/// Which attributes a backup read, as the cache records it: the options, and whether it ran
/// as root (who reads `trusted.*` attributes, which others cannot see).
pub fn read_with(meta: &crate::source::fsmeta::MetaOptions) -> u8 {
    // Asked once per cached file: the process's euid does not change, so one system call.
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let root = *ROOT.get_or_init(|| rustix::process::geteuid().is_root());
    u8::from(meta.acls)
        | u8::from(meta.xattrs) << 1
        | u8::from(meta.flags) << 2
        | u8::from(root) << 3
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub inode: u64,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub chunks: Vec<ChunkRef>,
    /// The attributes the backup that made the entry read (`None`: unknown).
    pub attrs: Option<Attrs>,
}

impl CacheEntry {
    /// Whether a file with this stat is unchanged since the entry was made.
    pub fn matches(&self, inode: u64, size: u64, mtime: Timestamp, ctime: Timestamp) -> bool {
        self.inode == inode && self.size == size && self.mtime == mtime && self.ctime == ctime
    }
}

pub struct FilesCache {
    entries: HashMap<Vec<u8>, CacheEntry>,
    /// Which attributes the entries' `attrs` were read with ([`read_with`]).
    read_with: u8,
}

impl Default for FilesCache {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            read_with: UNKNOWN,
        }
    }
}

impl FilesCache {
    /// An empty cache for a backup that reads attributes as `meta` says.
    pub fn reading(meta: &crate::source::fsmeta::MetaOptions) -> Self {
        Self {
            entries: HashMap::new(),
            read_with: read_with(meta),
        }
    }

    /// The attributes an entry holds, when they were read as `meta` asks now.
    pub fn attrs<'a>(
        &self,
        entry: &'a CacheEntry,
        meta: &crate::source::fsmeta::MetaOptions,
    ) -> Option<&'a Attrs> {
        (self.read_with == read_with(meta))
            .then_some(entry.attrs.as_ref())
            .flatten()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, path: &[u8]) -> Option<&CacheEntry> {
        self.entries.get(path)
    }

    pub fn insert(&mut self, path: Vec<u8>, entry: CacheEntry) {
        self.entries.insert(path, entry);
    }

    /// Rebuilds from the items of an archive started at `started`: regular files not flagged
    /// as changed or damaged, whose ctime was already `min_age_ns` old when the backup began
    /// (the rule a live backup applies at the moment it reads a file).
    pub fn from_items<'a>(
        items: impl IntoIterator<Item = &'a Item>,
        started: Timestamp,
        min_age_ns: i128,
    ) -> Self {
        let mut c = Self::default();
        for it in items {
            let old_enough = it.ctime.max(it.mtime).as_nanos() < started.as_nanos() - min_age_ns;
            if it.kind == ItemKind::File
                && it.flags & (FLAG_CHANGED | FLAG_DAMAGED) == 0
                && old_enough
            {
                c.insert(
                    it.path.clone(),
                    CacheEntry {
                        inode: it.inode,
                        size: it.size,
                        mtime: it.mtime,
                        ctime: it.ctime,
                        chunks: it.chunks.clone(),
                        attrs: None,
                    },
                );
            }
        }
        c
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.raw(&MAGIC)
            .u8(self.read_with)
            .u32(self.entries.len() as u32);
        let mut paths: Vec<&Vec<u8>> = self.entries.keys().collect();
        paths.sort();
        for p in paths {
            let x = &self.entries[p];
            e.bytes(p).u64(x.inode).u64(x.size);
            x.mtime.encode(&mut e);
            x.ctime.encode(&mut e);
            e.u32(x.chunks.len() as u32);
            for c in &x.chunks {
                e.raw(&c.id.0).u32(c.len);
            }
            match &x.attrs {
                None => {
                    e.u8(0);
                }
                Some(a) => {
                    e.u8(1).u32(a.inode_flags).u32(a.xattrs.len() as u32);
                    for (name, value) in &a.xattrs {
                        e.bytes(name).bytes(value);
                    }
                }
            }
        }
        e.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(bytes, "files cache");
        d.magic(&MAGIC, "a files cache")?;
        let read_with = d.u8()?;
        let n = d.count(49)?;
        let mut c = Self {
            entries: HashMap::new(),
            read_with,
        };
        for _ in 0..n {
            let path = d.bytes()?.to_vec();
            let inode = d.u64()?;
            let size = d.u64()?;
            let mtime = Timestamp::decode(&mut d)?;
            let ctime = Timestamp::decode(&mut d)?;
            let nc = d.count(36)?;
            let mut chunks = Vec::with_capacity(nc);
            for _ in 0..nc {
                chunks.push(ChunkRef {
                    id: ChunkId(d.id()?),
                    len: d.u32()?,
                });
            }
            let attrs = match d.u8()? {
                0 => None,
                1 => {
                    let inode_flags = d.u32()?;
                    let nx = d.count(8)?;
                    let mut xattrs = Vec::with_capacity(nx);
                    for _ in 0..nx {
                        xattrs.push((d.bytes()?.to_vec(), d.bytes()?.to_vec()));
                    }
                    Some(Attrs {
                        inode_flags,
                        xattrs,
                    })
                }
                _ => return Err(Error::corrupt("files cache", "bad attributes tag")),
            };
            c.insert(
                path,
                CacheEntry {
                    inode,
                    size,
                    mtime,
                    ctime,
                    chunks,
                    attrs,
                },
            );
        }
        d.expect_end()?;
        Ok(c)
    }
}

/// Where the cache of one series lives.
pub fn cache_path(repo_id: &str, archive_name: &str) -> Option<PathBuf> {
    let name = format!(
        "files-{}",
        &hex::encode(sha256(archive_name.as_bytes()))[..32]
    );
    Some(crate::repo::cache_dir::for_repository(repo_id)?.join(name))
}

/// Loads a cache; a missing or unreadable one is `None` (it is only a cache).
pub fn load(path: &Path) -> Option<FilesCache> {
    let bytes = std::fs::read(path).ok()?;
    FilesCache::decode(&bytes).ok()
}

/// Writes a cache atomically, private (0600 in a 0700 directory).
pub fn save(path: &Path, cache: &FilesCache) -> Result<()> {
    crate::repo::cache_dir::write_private(path, &cache.encode()).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut c = FilesCache::default();
        c.insert(
            b"a/\xffb".to_vec(),
            CacheEntry {
                inode: 5,
                size: 10,
                mtime: Timestamp { secs: 1, nanos: 2 },
                ctime: Timestamp { secs: 3, nanos: 4 },
                chunks: vec![ChunkRef {
                    id: ChunkId([1; 32]),
                    len: 10,
                }],
                attrs: Some(Attrs {
                    inode_flags: 0x80,
                    xattrs: vec![(b"user.x".to_vec(), b"\0v".to_vec())],
                }),
            },
        );
        c.insert(
            b"b".to_vec(),
            CacheEntry {
                inode: 6,
                size: 0,
                mtime: Timestamp { secs: 1, nanos: 2 },
                ctime: Timestamp { secs: 3, nanos: 4 },
                chunks: Vec::new(),
                attrs: None,
            },
        );
        let b = c.encode();
        let d = FilesCache::decode(&b).unwrap();
        assert_eq!(d.get(b"a/\xffb"), c.get(b"a/\xffb"));
        assert_eq!(d.get(b"b"), c.get(b"b"));
        assert_eq!(d.read_with, UNKNOWN);
        assert!(FilesCache::decode(&b[..b.len() - 1]).is_err());
        // Attributes are used only when read as they would be now.
        let meta = crate::source::fsmeta::MetaOptions::default();
        let mut read = FilesCache::reading(&meta);
        read.insert(b"a".to_vec(), c.get(b"a/\xffb").unwrap().clone());
        let back = FilesCache::decode(&read.encode()).unwrap();
        let entry = back.get(b"a").unwrap();
        assert!(back.attrs(entry, &meta).is_some());
        let noacls = crate::source::fsmeta::MetaOptions {
            acls: false,
            ..meta
        };
        assert!(back.attrs(entry, &noacls).is_none());
        assert!(d.attrs(d.get(b"a/\xffb").unwrap(), &meta).is_none());
    }
}
