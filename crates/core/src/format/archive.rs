//! The archive object: one per backup, `archives/<id>`, whose presence is the commit point.
//!
//! The object is `"CAIRNAR" 0x03` followed by the archive sealed as a blob of kind 2 (see
//! [`crate::format::blob`]); its id, and name, is the sha256 of the object's bytes, so that anyone can
//! check the name and nobody can move the object under another one. Its plaintext:
//!
//! ```text
//! magic "CAIRNARC" · version u32 (1) · name bytes · comment bytes · hostname bytes ·
//! username bytes · start (i64 s, u32 ns) · end (i64 s, u32 ns) ·
//! command line (u32 count, then bytes each) · item stream chunks (u32 count, then
//! chunk id 32 · length u32) · stats (u32 count N, then N u64 values, see ArchiveStats) ·
//! copied from (u8 0, or 1 then the source archive id 32: the archive `cairn copy` made this
//! one from, or the one that archive was copied from) · replaces (u8 0, or 1 then an archive
//! id 32: the archive a `rename`, `comment`, `rewrite` or `check --repair` wrote this one in
//! place of; while both exist, readers show only this one)
//! ```
//!
//! Readers ignore fields after those they know; a missing last field reads as 0.

use crate::error::{Error, Result};
use crate::format::blob;
use crate::format::item::{ChunkRef, Timestamp};
use crate::util::id::{sha256, ArchiveId, ChunkId};
use crate::util::wire::{Decoder, Encoder};

const MAGIC: [u8; 8] = *b"CAIRNARC";
const VERSION: u32 = 1;
/// The largest archive object a reader accepts (a million metadata chunks take 36 MB).
pub const MAX_OBJECT_LEN: u64 = 256 << 20;
/// The clear prefix of an archive object.
pub const OBJECT_MAGIC: [u8; 8] = *b"CAIRNAR\x03";

/// Statistics recorded with an archive, in this order on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArchiveStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub others: u64,
    /// Sum of the sizes of the regular files.
    pub original_size: u64,
    /// What those files' chunks take in the repository (compressed, encrypted).
    pub compressed_size: u64,
    /// What this backup added to the repository (new chunks, metadata included).
    pub deduplicated_size: u64,
    pub files_read: u64,
    pub files_unchanged: u64,
    pub warnings: u64,
    pub metadata_size: u64,
}

impl ArchiveStats {
    fn values(&self) -> [u64; 11] {
        [
            self.files,
            self.dirs,
            self.symlinks,
            self.others,
            self.original_size,
            self.compressed_size,
            self.deduplicated_size,
            self.files_read,
            self.files_unchanged,
            self.warnings,
            self.metadata_size,
        ]
    }

    fn from_values(v: &[u64]) -> Self {
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        Self {
            files: g(0),
            dirs: g(1),
            symlinks: g(2),
            others: g(3),
            original_size: g(4),
            compressed_size: g(5),
            deduplicated_size: g(6),
            files_read: g(7),
            files_unchanged: g(8),
            warnings: g(9),
            metadata_size: g(10),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveMeta {
    pub name: String,
    pub comment: String,
    pub hostname: String,
    pub username: String,
    pub start: Timestamp,
    pub end: Timestamp,
    pub command_line: Vec<String>,
    pub items: Vec<ChunkRef>,
    pub stats: ArchiveStats,
    /// The archive this one is a copy of (`cairn copy`): the first original, however many
    /// copies lie between.
    pub copied_from: Option<ArchiveId>,
    /// The archive this one was written in place of (a relabel, a rewrite, a repair): while
    /// that one still exists (its removal is the second step of the same change), it is
    /// hidden, and the next command that may delete removes it.
    pub replaces: Option<ArchiveId>,
    /// Labels people filter on (`create --tag`, `cairn tag`), sorted, each once.
    pub tags: Vec<String>,
}

impl ArchiveMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::with_capacity(256 + 36 * self.items.len());
        e.raw(&MAGIC)
            .u32(VERSION)
            .str(&self.name)
            .str(&self.comment)
            .str(&self.hostname)
            .str(&self.username);
        self.start.encode(&mut e);
        self.end.encode(&mut e);
        e.u32(self.command_line.len() as u32);
        for a in &self.command_line {
            e.str(a);
        }
        e.u32(self.items.len() as u32);
        for c in &self.items {
            e.raw(&c.id.0).u32(c.len);
        }
        let v = self.stats.values();
        e.u32(v.len() as u32);
        for x in v {
            e.u64(x);
        }
        for field in [&self.copied_from, &self.replaces] {
            match field {
                None => e.u8(0),
                Some(id) => e.u8(1).raw(&id.0),
            };
        }
        // Added later still, and only when there are some: an archive without tags is
        // written as before them, and a cairn before them reads one with tags.
        if !self.tags.is_empty() {
            e.u32(self.tags.len() as u32);
            for t in &self.tags {
                e.str(t);
            }
        }
        e.finish()
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<Self> {
        let mut d = Decoder::new(bytes, what);
        d.magic(&MAGIC, "an archive")?;
        d.version(VERSION, "archive")?;
        let name = d.string()?;
        let comment = d.string()?;
        let hostname = d.string()?;
        let username = d.string()?;
        let start = Timestamp::decode(&mut d)?;
        let end = Timestamp::decode(&mut d)?;
        let n = d.count(4)?;
        let mut command_line = Vec::with_capacity(n);
        for _ in 0..n {
            command_line.push(d.string()?);
        }
        let n = d.count(36)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(ChunkRef {
                id: ChunkId(d.id()?),
                len: d.u32()?,
            });
        }
        let n = d.count(8)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(d.u64()?);
        }
        // Added after the first archives were written: absent reads as none.
        let mut optional_id = |what: &str| -> Result<Option<ArchiveId>> {
            if d.is_empty() {
                return Ok(None);
            }
            match d.u8()? {
                0 => Ok(None),
                1 => Ok(Some(ArchiveId(d.id()?))),
                f => Err(d.invalid(format!("unknown {what} flag {f}"))),
            }
        };
        let copied_from = optional_id("copied-from")?;
        let replaces = optional_id("replaces")?;
        let mut tags = Vec::new();
        if !d.is_empty() {
            let n = d.count(4)?;
            for _ in 0..n {
                tags.push(d.string()?);
            }
        }
        Ok(Self {
            name,
            comment,
            hostname,
            username,
            start,
            end,
            command_line,
            items,
            stats: ArchiveStats::from_values(&v),
            copied_from,
            replaces,
            tags,
        })
    }
}

/// Checks an archive object's name and clear framing (no key needed).
pub fn check_object(id: &ArchiveId, object: &[u8]) -> Result<()> {
    let name = id.object_name();
    if sha256(object) != id.0 {
        return Err(Error::corrupt(
            &name,
            "contents do not match the name (sha256)",
        ));
    }
    if object.len() >= 8 && object[..7] == OBJECT_MAGIC[..7] && object[7] != OBJECT_MAGIC[7] {
        return Err(Error::corrupt(
            &name,
            format!(
                "an archive of format {} (this cairn reads format {})",
                object[7], OBJECT_MAGIC[7]
            ),
        ));
    }
    if object.len() < OBJECT_MAGIC.len() + blob::OVERHEAD || object[..8] != OBJECT_MAGIC {
        return Err(Error::corrupt(&name, "not an archive object (bad magic)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_after_the_fields_before_them() {
        let m = ArchiveMeta {
            name: "home".into(),
            comment: String::new(),
            hostname: "h".into(),
            username: "u".into(),
            start: Timestamp { secs: 1, nanos: 0 },
            end: Timestamp { secs: 2, nanos: 0 },
            command_line: Vec::new(),
            items: Vec::new(),
            stats: ArchiveStats::default(),
            copied_from: None,
            replaces: None,
            tags: vec!["daily".into(), "laptop".into()],
        };
        let b = m.encode();
        assert_eq!(ArchiveMeta::decode(&b, "a").unwrap(), m);
        let untagged = ArchiveMeta {
            tags: Vec::new(),
            ..m.clone()
        };
        // Without tags, not a byte more than before them; an archive with tags cut inside
        // them is an error.
        assert_eq!(b.len(), untagged.encode().len() + 4 + 4 + 5 + 4 + 6);
        for cut in untagged.encode().len() + 1..b.len() {
            assert!(ArchiveMeta::decode(&b[..cut], "a").is_err(), "cut {cut}");
        }
    }

    #[test]
    fn meta_round_trip_and_truncation() {
        let m = ArchiveMeta {
            name: "home".into(),
            comment: "nightly".into(),
            hostname: "h".into(),
            username: "u".into(),
            start: Timestamp {
                secs: 100,
                nanos: 5,
            },
            end: Timestamp {
                secs: 101,
                nanos: 6,
            },
            command_line: vec!["cairn".into(), "create".into()],
            items: vec![ChunkRef {
                id: ChunkId([4; 32]),
                len: 77,
            }],
            stats: ArchiveStats {
                files: 3,
                original_size: 99,
                ..Default::default()
            },
            copied_from: Some(ArchiveId([9; 32])),
            replaces: Some(ArchiveId([8; 32])),
            tags: Vec::new(),
        };
        let b = m.encode();
        assert_eq!(ArchiveMeta::decode(&b, "a").unwrap(), m);
        // Archives written before the copied-from field end with the stats: originals; those
        // written before the replaces field end after copied-from.
        let original = ArchiveMeta {
            copied_from: None,
            replaces: None,
            ..m.clone()
        };
        let copy = ArchiveMeta {
            replaces: None,
            ..m.clone()
        };
        let stats_end = b.len() - 66;
        for cut in 0..b.len() {
            match ArchiveMeta::decode(&b[..cut], "a") {
                Ok(d) if cut == stats_end => assert_eq!(d, original),
                Ok(d) if cut == stats_end + 33 => assert_eq!(d, copy),
                r => assert!(r.is_err(), "cut {cut}"),
            }
        }
        let mut bad = original.encode();
        *bad.last_mut().unwrap() = 2;
        assert!(ArchiveMeta::decode(&bad, "a").is_err());
    }
}
