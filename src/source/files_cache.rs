//! The files cache: what the last backup of a series knew about each regular file, so an
//! unchanged file (same inode, size, ctime and mtime) is not read again.
//!
//! Kept outside the repository, in `$XDG_CACHE_HOME/cairn/<repository id>/files-<hash of the
//! archive name>`, written atomically after an archive is committed. A lost cache is rebuilt
//! from the newest archive of the series. Its chunks are only reused if the index still has
//! them. Files whose ctime or mtime is within two seconds of when they were read are not
//! cached: a change in the same timestamp tick would otherwise go unnoticed.
//!
//! Format: magic "CAIRNFC1" · entry count u32 · entries (path bytes · inode u64 · size u64 ·
//! mtime i64 s, u32 ns · ctime i64 s, u32 ns · chunk count u32 · (chunk id 32 · len u32)…).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp, FLAG_CHANGED, FLAG_DAMAGED};
use crate::util::id::{sha256, ChunkId};
use crate::util::wire::{Decoder, Encoder};

const MAGIC: [u8; 8] = *b"CAIRNFC1";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub inode: u64,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub chunks: Vec<ChunkRef>,
}

impl CacheEntry {
    /// Whether a file with this stat is unchanged since the entry was made.
    pub fn matches(&self, inode: u64, size: u64, mtime: Timestamp, ctime: Timestamp) -> bool {
        self.inode == inode && self.size == size && self.mtime == mtime && self.ctime == ctime
    }
}

#[derive(Default)]
pub struct FilesCache {
    entries: HashMap<Vec<u8>, CacheEntry>,
}

impl FilesCache {
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
                    },
                );
            }
        }
        c
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.raw(&MAGIC).u32(self.entries.len() as u32);
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
        }
        e.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(bytes, "files cache");
        d.magic(&MAGIC, "a files cache")?;
        let n = d.count(48)?;
        let mut c = Self::default();
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
            c.insert(
                path,
                CacheEntry {
                    inode,
                    size,
                    mtime,
                    ctime,
                    chunks,
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
            },
        );
        let b = c.encode();
        let d = FilesCache::decode(&b).unwrap();
        assert_eq!(d.get(b"a/\xffb"), c.get(b"a/\xffb"));
        assert!(FilesCache::decode(&b[..b.len() - 1]).is_err());
    }
}
