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

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

pub mod addresses;

use crate::archive::item::{Item, FLAG_DAMAGED};
use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta};
use crate::blob::BlobKind;
use crate::error::Result;
use crate::id::{ArchiveId, ChunkId, PackId};
use crate::index::persist;
use crate::index::{ChunkIndex, StoredLoc};
use crate::pack::format::{self, PackEntry};
use crate::progress::Progress;
use crate::repo::Repository;
use crate::signals::Interrupt;
use crate::store::StoreError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
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

#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    pub verify_data: bool,
    pub repair: bool,
    /// Packs read and verified at once.
    pub threads: usize,
}

/// What a worker found reading one pack.
struct PackRead {
    found: bool,
    /// Whether the pack's sha256 is its name; `None` when only its TOC was read.
    hash_ok: Option<bool>,
    /// The TOC's blobs, or why it does not open (damaged, forged, or its blobs replaced).
    toc: std::result::Result<Vec<PackEntry>, String>,
    /// Blobs that failed to verify (with --verify-data).
    bad_blobs: Vec<(ChunkId, String)>,
    verified: u64,
}

/// How much of a pack a worker reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// Its TOC only (a ranged read of its tail).
    Toc,
    /// All of it: name, TOC, and the blob area against the TOC's hash.
    Whole,
    /// All of it, and every blob authenticated, decompressed and its id recomputed.
    Blobs,
}

/// Reads one pack as deep as asked. `indexed` are the index's entries for it: with
/// [`Depth::Blobs`] and a TOC that does not open, they are what can still be verified.
fn read_pack(
    repo: &Repository,
    pack: &PackId,
    size: u64,
    depth: Depth,
    indexed: &[(ChunkId, StoredLoc)],
) -> Result<PackRead> {
    let name = pack.object_name();
    let missing = PackRead {
        found: false,
        hash_ok: None,
        toc: Err("missing".into()),
        bad_blobs: Vec::new(),
        verified: 0,
    };
    let not_found =
        |e: &crate::error::Error| matches!(e, crate::error::Error::Store(s) if s.is_not_found());
    if depth == Depth::Toc {
        return match format::read_toc(&**repo.store(), repo.crypto(), pack, size) {
            Err(e) if not_found(&e) => Ok(missing),
            Err(crate::error::Error::Store(e)) if !matches!(e, StoreError::TooLarge { .. }) => {
                Err(e.into())
            }
            toc => Ok(PackRead {
                found: true,
                hash_ok: None,
                toc: toc.map(|t| t.entries).map_err(|e| e.to_string()),
                bad_blobs: Vec::new(),
                verified: 0,
            }),
        };
    }
    let bytes = match format::read_whole(&**repo.store(), pack) {
        Ok(b) => b,
        Err(e) if not_found(&e) => return Ok(missing),
        Err(crate::error::Error::Store(StoreError::TooLarge { name, size, max })) => {
            return Ok(PackRead {
                found: true,
                hash_ok: Some(false),
                toc: Err(format!(
                    "{name}: {size} bytes, more than a pack can be ({max})"
                )),
                bad_blobs: Vec::new(),
                verified: 0,
            })
        }
        Err(e) => return Err(e),
    };
    let (hash, toc) = format::parse_and_hash(repo.crypto(), &bytes, &name);
    let hash_ok = hash == pack.0;
    let toc = toc.map(|t| t.entries).map_err(|e| e.to_string());
    let mut bad_blobs = Vec::new();
    let mut verified = 0;
    if depth == Depth::Blobs {
        // The TOC's blobs; when it does not open, the ones the index places here.
        let blobs: Vec<(ChunkId, u32, u32)> = match &toc {
            Ok(entries) => entries
                .iter()
                .filter(|e| e.kind == BlobKind::Chunk)
                .map(|e| (e.id, e.offset, e.len))
                .collect(),
            Err(_) => indexed
                .iter()
                .map(|(id, l)| (*id, l.offset, l.len))
                .collect(),
        };
        for (id, offset, len) in blobs {
            verified += 1;
            let range = offset as usize..offset as usize + len as usize;
            let outcome = match bytes.get(range) {
                Some(blob) => repo.open_chunk(&id, blob, &name).map(|_| ()),
                None => Err(crate::error::Error::corrupt(
                    &name,
                    "shorter than the index says",
                )),
            };
            if let Err(err) = outcome {
                bad_blobs.push((id, err.to_string()));
            }
        }
    }
    Ok(PackRead {
        found: true,
        hash_ok: Some(hash_ok),
        toc,
        bad_blobs,
        verified,
    })
}

/// Runs `read` over every listed pack with `threads` workers and hands each result to `each`
/// in the calling thread as it comes, showing "`verb` packs: done of total" as progress.
/// Stops at an interrupt.
pub(crate) fn for_each_pack<R: Send>(
    listed: &BTreeMap<PackId, u64>,
    threads: usize,
    (progress, verb): (&Progress, &str),
    interrupt: &Interrupt,
    read: impl Fn(&PackId, u64) -> R + Sync,
    mut each: impl FnMut(PackId, R) -> Result<()>,
) -> Result<()> {
    let threads = threads.max(1);
    let total: u64 = listed.values().sum();
    let mut done = 0u64;
    std::thread::scope(|scope| -> Result<()> {
        let (todo_tx, todo_rx) = crossbeam_channel::unbounded::<(PackId, u64)>();
        let (res_tx, res_rx) = crossbeam_channel::bounded::<(PackId, u64, R)>(threads);
        for (pack, size) in listed {
            let _ = todo_tx.send((*pack, *size));
        }
        drop(todo_tx);
        for _ in 0..threads {
            let (todo, res, read) = (todo_rx.clone(), res_tx.clone(), &read);
            scope.spawn(move || {
                for (pack, size) in todo {
                    if interrupt.raised() || res.send((pack, size, read(&pack, size))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        for (pack, size, result) in res_rx {
            done += size;
            progress.set(|| {
                format!(
                    "{verb} packs: {} of {}",
                    crate::progress::size(done),
                    crate::progress::size(total)
                )
            });
            each(pack, result)?;
        }
        interrupt.check()
    })
}

/// Whether the index reads chunk `id` from this location (and not from another fragment's).
fn uses(index: &ChunkIndex, id: &ChunkId, pack: &PackId, loc: &StoredLoc) -> bool {
    index
        .stored(id)
        .is_some_and(|(p, l)| p == *pack && l.offset == loc.offset)
}

/// What reading one pack found.
struct PackScan {
    hash_ok: Option<bool>,
    /// The TOC's blobs, when it opened.
    toc: Option<Vec<PackEntry>>,
}

impl PackScan {
    /// Read whole, named right, TOC authentic and matching its blobs.
    fn sound(&self) -> bool {
        self.hash_ok == Some(true) && self.toc.is_some()
    }
}

struct Scan {
    index: ChunkIndex,
    /// The index's entries per pack.
    by_pack: HashMap<PackId, Vec<(ChunkId, StoredLoc)>>,
    packs: BTreeMap<PackId, PackScan>,
    /// Chunks that are damaged or whose location is unusable, with why.
    bad: HashMap<ChunkId, String>,
    archives: Vec<(ArchiveId, ArchiveMeta)>,
}

pub fn run(
    repo: &Repository,
    opts: CheckOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let mut scan = scan(repo, opts, progress, interrupt, &mut report)?;
    if !opts.repair {
        trace_archives(repo, &mut scan, progress, interrupt, &mut report)?;
        return Ok(report);
    }
    // The archives are judged against the rebuilt index, not the one that was damaged or lost.
    rebuild_index(repo, &mut scan, progress, interrupt, &mut report)?;
    let affected = trace_archives(repo, &mut scan, progress, interrupt, &mut report)?;
    mark_damaged_files(repo, &mut scan, &affected, interrupt, &mut report)?;
    // What is still wrong after the repair decides the outcome, not what was repaired.
    let plain = CheckOptions {
        verify_data: false,
        repair: false,
        ..opts
    };
    let after = run(repo, plain, progress, interrupt)?;
    report.after_repair = Some(Box::new(after));
    Ok(report)
}

fn scan(
    repo: &Repository,
    opts: CheckOptions,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<Scan> {
    let store = &**repo.store();
    let (mut index, load) = repo.load_index()?;
    for d in &load.damaged_fragments {
        report.add(
            Severity::Error,
            &d.name,
            format!("damaged or forged index fragment: {}", d.reason),
        );
    }

    let mut listed: BTreeMap<PackId, u64> = BTreeMap::new();
    for o in store.list("packs")? {
        match persist::pack_id_of(&o.name) {
            Some(id) => {
                listed.insert(id, o.size);
            }
            None => report.add(Severity::Warning, &o.name, "unexpected object in packs/"),
        }
    }
    report.packs = listed.len() as u64;
    report.pack_bytes = listed.values().sum();

    // Every location some fragment gives, per pack: the index's, and the alternates (a chunk
    // that another fragment places elsewhere).
    let mut by_pack: HashMap<PackId, Vec<(ChunkId, StoredLoc)>> = HashMap::new();
    for (id, pack, loc) in index.iter_stored() {
        by_pack.entry(pack).or_default().push((id, loc));
    }
    for a in &load.alternates {
        by_pack.entry(a.pack).or_default().push((a.id, a.loc));
    }
    let mut bad: HashMap<ChunkId, String> = HashMap::new();
    let mut missing = Vec::new();
    for (pack, entries) in &by_pack {
        if !listed.contains_key(pack) {
            report.add(
                Severity::Error,
                pack.object_name(),
                format!(
                    "the index names this pack for {} chunks, but it does not exist",
                    entries.len()
                ),
            );
            missing.push(*pack);
        }
    }
    // Chunks whose pack is gone fall back on another fragment's copy, if there is one.
    index.forget_packs(&missing);
    persist::refill(&mut index, &load.alternates, |p| listed.get(p).copied());
    for pack in &missing {
        for (id, _) in by_pack.remove(pack).unwrap_or_default() {
            if !index.contains(&id) {
                bad.insert(id, format!("its pack {} is missing", pack.object_name()));
            }
        }
    }
    report.chunks = index.len() as u64;

    // Read every pack in parallel, as deep as asked: its TOC only (plain check), or whole
    // (--repair; and packs no fragment names, to tell a crash's leftover from a forgery), or
    // whole with every blob opened (--verify-data). The comparisons with the index are cheap
    // and done here, in pack order.
    let deep = if opts.verify_data {
        Depth::Blobs
    } else if opts.repair {
        Depth::Whole
    } else {
        Depth::Toc
    };
    let depth_of = |pack: &PackId| {
        if deep == Depth::Toc && !by_pack.contains_key(pack) {
            Depth::Whole
        } else {
            deep
        }
    };
    let mut reads: BTreeMap<PackId, PackRead> = BTreeMap::new();
    for_each_pack(
        &listed,
        opts.threads,
        (progress, "checking"),
        interrupt,
        |pack, size| {
            let indexed = by_pack.get(pack).map(Vec::as_slice).unwrap_or(&[]);
            read_pack(repo, pack, size, depth_of(pack), indexed)
        },
        |pack, result| {
            reads.insert(pack, result?);
            Ok(())
        },
    )?;

    let mut packs = BTreeMap::new();
    for (pack, read) in reads {
        let name = pack.object_name();
        let PackRead {
            found,
            hash_ok,
            toc,
            bad_blobs,
            verified,
        } = read;
        if !found {
            report.add(Severity::Error, &name, "disappeared while checking");
            continue;
        }
        if hash_ok == Some(false) {
            report.add(
                Severity::Error,
                &name,
                "contents do not match the pack's name (sha256): the pack is damaged",
            );
        }
        let indexed = by_pack.get(&pack).map(Vec::as_slice).unwrap_or(&[]);
        if let Err(e) = &toc {
            report.add(Severity::Error, &name, format!("unusable: {e}"));
            // Its chunks cannot be located or vouched for (--verify-data and --repair open
            // them one by one, from the index's offsets).
            if !opts.verify_data {
                for (id, loc) in indexed {
                    if uses(&index, id, &pack, loc) {
                        bad.insert(*id, format!("its pack {name} is damaged"));
                    }
                }
            }
        }
        if let Ok(entries) = &toc {
            let at: HashMap<u32, &PackEntry> = entries.iter().map(|e| (e.offset, e)).collect();
            for (id, loc) in indexed {
                let agrees = at.get(&loc.offset).is_some_and(|e| {
                    e.id == *id && e.len == loc.len && e.plain_len == loc.plain_len
                });
                // Only the location the index uses decides whether the chunk is usable.
                let used = uses(&index, id, &pack, loc);
                if !agrees {
                    report.add(
                        Severity::Error,
                        &name,
                        format!(
                            "the index places chunk {id} at offset {} but the pack's table of contents disagrees",
                            loc.offset
                        ),
                    );
                    if used {
                        bad.insert(*id, format!("the index and pack {name} disagree"));
                    }
                } else if hash_ok == Some(false) && !opts.verify_data && used {
                    bad.insert(*id, format!("its pack {name} is damaged"));
                }
            }
        }
        if indexed.is_empty() && toc.is_ok() && hash_ok != Some(false) {
            report.add(
                Severity::Warning,
                &name,
                "not in the index (left by an interrupted command; check --repair or the next backup indexes it)",
            );
        }
        if opts.verify_data {
            report.chunks_verified += verified;
            for (id, reason) in bad_blobs {
                report.add(Severity::Error, format!("chunk {id}"), reason.clone());
                bad.insert(id, reason);
            }
        }
        packs.insert(
            pack,
            PackScan {
                hash_ok,
                toc: toc.ok(),
            },
        );
    }

    let list = archive::load_all(repo)?;
    for (id, e) in &list.damaged {
        report.add(
            Severity::Error,
            id.object_name(),
            format!("archive cannot be read: {e}"),
        );
    }
    report.archives = (list.archives.len() + list.damaged.len()) as u64;
    Ok(Scan {
        index,
        by_pack,
        packs,
        bad,
        archives: list.archives,
    })
}

/// Reads every archive's items; reports missing and damaged chunks with the files using them.
/// Returns, per archive, the paths of affected items.
fn trace_archives(
    repo: &Repository,
    scan: &mut Scan,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<HashMap<ArchiveId, HashSet<Vec<u8>>>> {
    let mut affected: HashMap<ArchiveId, HashSet<Vec<u8>>> = HashMap::new();
    for (aid, meta) in &scan.archives {
        interrupt.check()?;
        progress.set(|| format!("checking archive {}", meta.name));
        let label = format!("archive {} (aid:{})", meta.name, &aid.to_hex()[..8]);
        let meta_bad = meta
            .items
            .iter()
            .filter(|c| !scan.index.contains(&c.id) || scan.bad.contains_key(&c.id))
            .count();
        if meta_bad > 0 {
            report.add(
                Severity::Error,
                &label,
                format!("{meta_bad} metadata chunks are missing or damaged"),
            );
        }
        let (mut missing, mut known_lost) = (0usize, 0usize);
        for item in archive::items(repo, &scan.index, meta) {
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    report.add(
                        Severity::Error,
                        &label,
                        format!("item stream unreadable: {e}"),
                    );
                    break;
                }
            };
            let gone = item
                .chunks
                .iter()
                .filter(|c| !scan.index.contains(&c.id))
                .count();
            let damaged = item
                .chunks
                .iter()
                .filter(|c| scan.bad.contains_key(&c.id))
                .count();
            if item.flags & FLAG_DAMAGED != 0 && damaged == 0 {
                // Marked by an earlier repair: known, and healed once a later backup stores
                // the same data again.
                if gone > 0 {
                    known_lost += 1;
                }
                continue;
            }
            missing += gone;
            if gone + damaged > 0 {
                report.affected.push(Affected {
                    archive: meta.name.clone(),
                    archive_id: aid.to_hex(),
                    path: item.display_path(),
                    bad_chunks: gone + damaged,
                });
                affected.entry(*aid).or_default().insert(item.path.clone());
            }
        }
        if missing > 0 {
            report.add(
                Severity::Error,
                &label,
                format!("{missing} chunks it references are not in the index"),
            );
        }
        if known_lost > 0 {
            report.add(
                Severity::Warning,
                &label,
                format!("{known_lost} files were marked damaged by an earlier repair; their lost data is still missing"),
            );
        }
    }
    Ok(affected)
}

/// The index rebuilt from the packs: every chunk of every sound pack, minus chunks found
/// damaged, plus what still authenticates in damaged packs (salvaged into new packs). It
/// replaces every fragment, and the damaged packs go.
fn rebuild_index(
    repo: &Repository,
    scan: &mut Scan,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<()> {
    let store = repo.store().clone();
    let mut index = ChunkIndex::new();
    let mut damaged_packs = Vec::new();
    for (pack, ps) in &scan.packs {
        match &ps.toc {
            Some(entries) if ps.sound() => {
                for e in entries
                    .iter()
                    .filter(|e| e.kind == BlobKind::Chunk && !scan.bad.contains_key(&e.id))
                {
                    index.insert_stored(e.id, *pack, e.offset, e.len, e.plain_len, false);
                }
            }
            _ => damaged_packs.push(*pack),
        }
    }
    // Sound packs all of whose chunks the new index places elsewhere (two sessions stored the
    // same chunks, or a compact was interrupted) hold nothing the index needs: removed with
    // the damaged ones, so that no pack is left that no fragment names.
    let named: HashSet<PackId> = index.iter_stored().map(|(_, p, _)| p).collect();
    let redundant: Vec<PackId> = scan
        .packs
        .iter()
        .filter(|(p, ps)| ps.sound() && !named.contains(p))
        .map(|(p, _)| *p)
        .collect();
    // Salvage what still authenticates from damaged packs into new packs: the blobs their
    // TOC lists, or, when it does not open, the ones the index placed there.
    let mut session = repo.begin_write(index)?;
    for pack in &damaged_packs {
        if let Err(e) = interrupt.check() {
            return Err(session.stop(e));
        }
        let name = pack.object_name();
        progress.set(|| format!("salvaging {name}"));
        let bytes = match format::read_whole(&*store, pack) {
            Ok(b) => b,
            Err(crate::error::Error::Store(e @ StoreError::TooLarge { .. })) => {
                report
                    .repairs
                    .push(format!("nothing salvaged from {name}: {e}"));
                continue;
            }
            Err(e) => return Err(session.stop(e)),
        };
        let candidates: Vec<(ChunkId, u32, u32, u32)> = match &scan.packs[pack].toc {
            Some(entries) => entries
                .iter()
                .filter(|e| e.kind == BlobKind::Chunk)
                .map(|e| (e.id, e.offset, e.len, e.plain_len))
                .collect(),
            None => scan
                .by_pack
                .get(pack)
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .map(|(id, l)| (*id, l.offset, l.len, l.plain_len))
                .collect(),
        };
        let mut saved = 0;
        for (id, offset, len, plain_len) in candidates {
            if session.has(&id) {
                continue;
            }
            let Some(b) = bytes.get(offset as usize..offset as usize + len as usize) else {
                continue;
            };
            if repo
                .open_chunk(&id, b, &name)
                .is_ok_and(|p| p.len() == plain_len as usize)
            {
                if let Err(e) = session.add_blob(id, plain_len, b) {
                    return Err(session.stop(e));
                }
                scan.bad.remove(&id);
                saved += 1;
            }
        }
        report.repairs.push(format!(
            "salvaged {saved} intact chunks out of damaged pack {name}"
        ));
    }
    let retired: Vec<PackId> = damaged_packs.iter().chain(&redundant).copied().collect();
    let done = session.replace_index(&retired, |_| {})?;
    report.repairs.push(format!(
        "wrote a rebuilt index ({} chunks) as {}",
        done.index.len(),
        done.fragment
    ));
    for pack in &done.kept {
        // A salvaged pack can be byte-identical to the original of a damaged one (say, after
        // garbage was appended to it), and so carry its name: it was just rewritten whole.
        report.repairs.push(format!(
            "rewrote damaged pack {} whole from its intact blobs",
            pack.object_name()
        ));
    }
    for pack in &done.deleted {
        report.repairs.push(if redundant.contains(pack) {
            format!(
                "removed pack {}: every chunk in it is stored in another pack",
                pack.object_name()
            )
        } else {
            format!(
                "removed damaged pack {} (its intact chunks were saved)",
                pack.object_name()
            )
        });
    }
    scan.index = done.index;
    Ok(())
}

/// Marks the files whose chunks are gone, by rewriting their archives with the `damaged`
/// flag (the new archive is durable before the old one is removed).
fn mark_damaged_files(
    repo: &Repository,
    scan: &mut Scan,
    affected: &HashMap<ArchiveId, HashSet<Vec<u8>>>,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<()> {
    let missing =
        |item: &Item, index: &ChunkIndex| item.chunks.iter().any(|c| !index.contains(&c.id));
    for (aid, meta) in &scan.archives {
        if !affected.contains_key(aid) {
            continue;
        }
        interrupt.check()?;
        let mut items: Vec<Item> = match archive::all_items(repo, &scan.index, meta) {
            Ok(i) => i,
            Err(e) => {
                report.repairs.push(format!(
                    "archive {} (aid:{}) not marked: its items cannot be read ({e})",
                    meta.name,
                    &aid.to_hex()[..8]
                ));
                continue;
            }
        };
        let mut marked = 0;
        for item in &mut items {
            if missing(item, &scan.index) && item.flags & FLAG_DAMAGED == 0 {
                item.flags |= FLAG_DAMAGED;
                marked += 1;
            }
        }
        if marked == 0 {
            continue;
        }
        let mut session = repo.begin_write(std::mem::take(&mut scan.index))?;
        let mut w = ItemStreamWriter::new(repo.metadata_chunker()?);
        let stream = items
            .iter()
            .try_for_each(|item| w.push(item, &mut session))
            .and_then(|()| w.finish(&mut session));
        let stream = match stream {
            Ok(s) => s,
            Err(e) => return Err(session.stop(e)),
        };
        let new_meta = ArchiveMeta {
            items: stream,
            ..meta.clone()
        };
        let sealed = archive::seal(repo, &new_meta)?;
        let (new_id, index) = session.replace_archive(aid, &sealed)?;
        scan.index = index;
        report.repairs.push(format!(
            "archive {}: marked {marked} files as damaged (aid:{} replaces aid:{})",
            meta.name,
            &new_id.to_hex()[..8],
            &aid.to_hex()[..8]
        ));
    }
    Ok(())
}
