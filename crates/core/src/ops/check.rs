//! `cairn check`: verify a repository and name everything that is damaged.
//!
//! The plain check authenticates every index fragment and reads only each pack's table of
//! contents (a ranged read of its tail): the TOC must authenticate, tile the pack exactly and
//! agree with the index, and every index entry must lie in an existing pack. A pack no
//! fragment names is read whole, to tell a crash's leftover (sound: a warning) from damage or
//! a forgery (an error). It then decodes every archive and its item stream (every metadata
//! chunk authenticated and its id recomputed) and checks that every chunk referenced is in the
//! index. `--verify-data` also reads every pack whole: its sha256 must be its name, its blobs
//! the ones its TOC lists, and every blob must authenticate, decompress and have the id it is
//! stored under. Every damaged chunk is traced to the archives and files that use it.
//!
//! `--repair` (exclusive lock) rebuilds the index from the packs, salvaging the blobs that
//! still authenticate out of damaged packs into new packs, drops damaged chunks from the index
//! (so the next backup stores them again), and marks files whose chunks are gone by rewriting
//! their archives with the `damaged` flag. New data is durable before anything old is
//! removed, and every removal is reported.
//!
//! The steps, one module each: [`scan`] (the index, the listing, every pack read as deep as
//! asked by [`read`]), [`trace`] (archives and the files using damaged chunks), [`repair`]
//! (the rebuilt index, salvage, damaged files marked).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

pub mod addresses;
mod by_pack;
mod plan;
mod read;
pub mod record;
mod repair;
mod scan;
pub mod slice;
mod trace;

use crate::archive::ArchiveMeta;
use crate::error::{Error, Result};
use crate::index::{ChunkIndex, StoredLoc};
use crate::pack::format::PackEntry;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId, PackId};
use crate::util::progress::Progress;
use by_pack::ByPack;

pub(crate) use read::for_each_pack;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, nothing wrong (the exit status stays 0): packs of a backup that is
    /// running, packs retired by a compact.
    Info,
    Warning,
    Error,
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub object: String,
    pub message: String,
}

/// A file (or archive metadata) that uses damaged or missing chunks.
#[derive(Clone, Debug, Serialize)]
pub struct Affected {
    pub archive: String,
    pub archive_id: String,
    pub path: String,
    pub bad_chunks: usize,
}

#[derive(Debug, Default, Serialize)]
pub struct CheckReport {
    pub findings: Vec<Finding>,
    pub affected: Vec<Affected>,
    pub repairs: Vec<String>,
    pub archives: u64,
    pub packs: u64,
    pub pack_bytes: u64,
    pub chunks: u64,
    pub chunks_verified: u64,
    /// Blobs no archive uses (index entries, and second copies of chunks read from
    /// elsewhere), and their bytes: what compact can free.
    pub unused_chunks: u64,
    pub unused_bytes: u64,
    /// How much of the repository this client verified, and when (not for a repair's
    /// second look).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<record::Coverage>,
    /// What a verifying check chose to read whole, and what it read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<slice::SliceReport>,
    /// With --repair: a plain check of the repository as the repair left it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_repair: Option<Box<CheckReport>>,
}

impl CheckReport {
    fn add(&mut self, severity: Severity, object: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding {
            severity,
            object: object.into(),
            message: message.into(),
        });
    }

    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count()
    }

    /// 0 clean, 1 warnings only, 2 damage; after a repair, of what the repair left.
    pub fn exit_code(&self) -> u8 {
        if let Some(after) = &self.after_repair {
            return after.exit_code();
        }
        if self.errors() > 0 {
            2
        } else if self.warnings() > 0 {
            1
        } else {
            0
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    pub verify_data: bool,
    pub repair: bool,
    /// Packs read and verified at once.
    pub threads: usize,
    /// With `verify_data`: the packs to read whole (all of them when `None`).
    pub subset: Option<slice::Subset>,
    /// With `verify_data`: start no whole read after this long; the next run goes on where
    /// this one stopped.
    pub max_duration: Option<std::time::Duration>,
    /// Only these archives, and only the packs they need (all of them when empty).
    pub archives: Vec<ArchiveId>,
}

impl CheckOptions {
    /// Whether every pack is read (whole or its table of contents): not a slice.
    pub fn reads_every_pack(&self) -> bool {
        self.subset.is_none() && self.max_duration.is_none()
    }
}

/// What reading one pack found.
struct PackScan {
    hash_ok: Option<bool>,
    /// Whether its TOC opened.
    toc_ok: bool,
    /// The TOC's blobs, when it opened, kept for a repair ([`Scan::keep_tocs`]).
    toc: Option<Vec<PackEntry>>,
}

impl PackScan {
    /// Read whole, named right, TOC authentic and matching its blobs.
    fn sound(&self) -> bool {
        self.hash_ok == Some(true) && self.toc_ok
    }
}

/// What the scan found, for the steps after it.
struct Scan {
    index: ChunkIndex,
    /// Every location some fragment gives, per pack.
    by_pack: ByPack,
    packs: BTreeMap<PackId, PackScan>,
    /// Whether the packs' TOCs are kept past their comparison with the index (a repair
    /// rebuilds the index from them).
    keep_tocs: bool,
    /// Chunks that are damaged or whose location is unusable, with why.
    bad: HashMap<ChunkId, String>,
    archives: Vec<(ArchiveId, ArchiveMeta)>,
    /// The index fragments the scan loaded (a rebuilt index replaces exactly these).
    fragments: Vec<String>,
    /// Blobs in indexed packs that no index entry names (a compact before issue 44 dropped
    /// them from its index), their bytes, and the packs holding them.
    unaccounted: (u64, u64, u64),
    /// Every chunk of the index an archive references (item streams and file contents).
    referenced: Referenced,
}

/// Chunks of the index, as one bit for each entry of its frozen base (archives are traced
/// with the index frozen): ten million chunks take 1.25 MB, where a set of their ids took
/// about 100 bytes each. A chunk not in the index is not recorded (`unused` asks only about
/// the index's entries; missing chunks are counted as the items are read).
#[derive(Default)]
struct Referenced(Vec<u64>);

impl Referenced {
    /// An empty set for `index`, frozen: entries added to it later have no bit.
    fn for_index(index: &ChunkIndex) -> Self {
        Self(vec![0; index.base_len().div_ceil(64)])
    }

    fn insert(&mut self, index: &ChunkIndex, id: &ChunkId) {
        if let Some(i) = index.base_position(id) {
            if let Some(word) = self.0.get_mut(i / 64) {
                *word |= 1 << (i % 64);
            }
        }
    }

    fn contains(&self, index: &ChunkIndex, id: &ChunkId) -> bool {
        index
            .base_position(id)
            .and_then(|i| self.0.get(i / 64).map(|w| w & (1 << (i % 64)) != 0))
            .unwrap_or(false)
    }
}

pub fn run(
    repo: &Repository,
    opts: CheckOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<CheckReport> {
    if opts.repair
        && (opts.subset.is_some() || opts.max_duration.is_some() || !opts.archives.is_empty())
    {
        return Err(Error::invalid(
            "a repair reads every pack and every archive: it takes no --subset, --max-duration or --archive",
        ));
    }
    if opts.repair && repo.store().append_only() {
        return Err(Error::invalid(
            "the repository's server is append-only: a repair removes and rewrites objects, and is run on the server, by its owner (cairn check --repair there)",
        ));
    }
    let mut report = CheckReport::default();
    let mut scan = scan::scan(repo, &opts, progress, interrupt, &mut report)?;
    if !opts.repair {
        trace::trace_archives(repo, &mut scan, progress, interrupt, &mut report)?;
        // What no archive uses is known only when every archive and every pack was read.
        if opts.archives.is_empty() && opts.reads_every_pack() {
            unused(&scan, &mut report);
        }
        return Ok(report);
    }
    // The archives are judged against the rebuilt index, not the one that was damaged or lost.
    repair::rebuild_index(repo, &mut scan, progress, interrupt, &mut report)?;
    let affected = trace::trace_archives(repo, &mut scan, progress, interrupt, &mut report)?;
    repair::mark_damaged_files(repo, &mut scan, &affected, interrupt, &mut report)?;
    // What is still wrong after the repair decides the outcome, not what was repaired.
    let plain = CheckOptions {
        threads: opts.threads,
        ..CheckOptions::default()
    };
    let after = run(repo, plain, progress, interrupt)?;
    report.after_repair = Some(Box::new(after));
    Ok(report)
}

/// What no archive uses: the index's entries that no archive references, and the second
/// copies of chunks the index reads from elsewhere, in packs that exist.
fn unused(scan: &Scan, report: &mut CheckReport) {
    let (mut chunks, mut bytes, mut packs) = (0u64, 0u64, 0u64);
    for pack in scan.by_pack.packs() {
        if !scan.packs.contains_key(pack) {
            continue;
        }
        let before = chunks;
        for (id, loc) in scan.by_pack.entries(&scan.index, pack) {
            if !(uses(&scan.index, &id, pack, &loc) && scan.referenced.contains(&scan.index, &id)) {
                chunks += 1;
                bytes += u64::from(loc.len);
            }
        }
        packs += u64::from(chunks > before);
    }
    report.unused_chunks = chunks;
    report.unused_bytes = bytes;
    if chunks > 0 {
        report.add(
            Severity::Info,
            "index/",
            format!(
                "{} ({}) in {} no archive uses: cairn compact frees them (--threshold 0: all of them)",
                crate::util::progress::count(chunks, "blob"),
                crate::util::progress::size(bytes),
                crate::util::progress::count(packs, "pack")
            ),
        );
    }
}

/// Whether the index reads chunk `id` from this location (and not from another fragment's).
fn uses(index: &ChunkIndex, id: &ChunkId, pack: &PackId, loc: &StoredLoc) -> bool {
    index
        .stored(id)
        .is_some_and(|(p, l)| p == *pack && l.offset == loc.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One bit per entry of the frozen index: what was inserted is found, nothing else is,
    /// chunks outside the index are not recorded, and words boundaries hold.
    #[test]
    fn referenced_chunks_are_one_bit_each_of_the_frozen_index() {
        let mut index = ChunkIndex::new();
        let id = |i: u32| ChunkId(crate::util::id::sha256(&i.to_le_bytes()));
        for i in 0..200 {
            index.insert_stored(id(i), PackId([1; 32]), i * 10, 10, 9, true);
        }
        index.freeze().unwrap();
        let mut r = Referenced::for_index(&index);
        for i in (0..200).filter(|i| i % 3 == 0) {
            r.insert(&index, &id(i));
        }
        r.insert(&index, &id(1000));
        for i in 0..200 {
            assert_eq!(r.contains(&index, &id(i)), i % 3 == 0, "chunk {i}");
        }
        assert!(!r.contains(&index, &id(1000)));
        assert_eq!(r.0.len(), 4);
        assert_eq!(r.0.iter().map(|w| w.count_ones()).sum::<u32>(), 67);
    }
}
