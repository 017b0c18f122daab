//! `cairn check`: verify a repository and name everything that is damaged.
//!
//! The plain check reads every pack once: its sha256 must equal its name (no key needed), its
//! blob headers must walk cleanly and agree with the index, and every index entry must lie in
//! an existing pack. It then decodes every archive and checks that every chunk it references
//! is in the index. `--verify-data` also decrypts and authenticates every blob and recomputes
//! its id. Every damaged chunk is traced to the archives and files that use it.
//!
//! `--repair` (exclusive lock) rebuilds the index from the packs, salvaging the blobs that
//! still authenticate out of damaged packs into new packs, drops damaged chunks from the index
//! (so the next backup stores them again), and marks files whose chunks are gone by rewriting
//! their archives with the `damaged` flag. New data is durable before anything old is
//! removed, and every removal is reported.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::archive::item::{Item, FLAG_DAMAGED};
use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta};
use crate::blob::{BlobKind, Verify};
use crate::error::Result;
use crate::id::{sha256, ArchiveId, ChunkId, PackId};
use crate::index::persist;
use crate::index::ChunkIndex;
use crate::pack::format::{self, PackEntry};
use crate::pack::writer::PackWriter;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::signals::Interrupt;

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

    /// 0 clean, 1 warnings only, 2 damage.
    pub fn exit_code(&self) -> u8 {
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
    hash_ok: bool,
    entries: Vec<PackEntry>,
    walk_err: Option<String>,
    /// Blobs that failed to verify (with --verify-data).
    bad_blobs: Vec<(ChunkId, String)>,
    verified: u64,
}

/// Reads one pack: hash, walk, and optionally authenticate every chunk blob.
fn read_pack(repo: &Repository, pack: &PackId, verify: bool) -> Result<PackRead> {
    let name = pack.object_name();
    let bytes = match repo.store().get(&name, None) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => {
            return Ok(PackRead {
                found: false,
                hash_ok: false,
                entries: Vec::new(),
                walk_err: None,
                bad_blobs: Vec::new(),
                verified: 0,
            })
        }
        Err(e) => return Err(e.into()),
    };
    let hash_ok = sha256(&bytes) == pack.0;
    let (entries, walk_err) = format::walk_prefix(&bytes, &name);
    let mut bad_blobs = Vec::new();
    let mut verified = 0;
    if verify {
        for e in entries.iter().filter(|e| e.kind == BlobKind::Chunk) {
            let blob = &bytes[e.offset as usize..(e.offset + e.len) as usize];
            verified += 1;
            if let Err(err) = repo.open_chunk(&e.id, blob, &name, Verify::Id) {
                bad_blobs.push((e.id, err.to_string()));
            }
        }
    }
    Ok(PackRead {
        found: true,
        hash_ok,
        entries,
        walk_err: walk_err.map(|e| e.to_string()),
        bad_blobs,
        verified,
    })
}

/// What reading one pack found.
struct PackScan {
    hash_ok: bool,
    /// The blobs whose headers walked cleanly (all of them when the walk succeeded).
    entries: Vec<PackEntry>,
    walk_ok: bool,
}

struct Scan {
    index: ChunkIndex,
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
    let affected = trace_archives(repo, &mut scan, progress, interrupt, &mut report)?;
    if opts.repair {
        repair(repo, &mut scan, &affected, progress, interrupt, &mut report)?;
    }
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
    let (index, load) = persist::load(store)?;
    for d in &load.damaged_fragments {
        report.add(
            Severity::Error,
            &d.name,
            format!("damaged index fragment: {}", d.reason),
        );
    }
    report.chunks = index.len() as u64;

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

    let mut by_pack: HashMap<PackId, Vec<(ChunkId, crate::index::StoredLoc)>> = HashMap::new();
    for (id, pack, loc) in index.iter_stored() {
        by_pack.entry(pack).or_default().push((id, loc));
    }
    let mut bad: HashMap<ChunkId, String> = HashMap::new();
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
            for (id, _) in entries {
                bad.insert(*id, format!("its pack {} is missing", pack.object_name()));
            }
        }
    }

    // Read, hash, walk and (with --verify-data) authenticate every pack in parallel; the
    // comparisons with the index are cheap and done here, in pack order.
    let threads = opts.threads.max(1);
    let mut reads: BTreeMap<PackId, PackRead> = BTreeMap::new();
    std::thread::scope(|scope| -> Result<()> {
        let (todo_tx, todo_rx) = crossbeam_channel::unbounded::<PackId>();
        let (res_tx, res_rx) = crossbeam_channel::bounded::<(PackId, Result<PackRead>)>(threads);
        for pack in listed.keys() {
            let _ = todo_tx.send(*pack);
        }
        drop(todo_tx);
        for _ in 0..threads {
            let (todo, res) = (todo_rx.clone(), res_tx.clone());
            let verify = opts.verify_data;
            scope.spawn(move || {
                for pack in todo {
                    if interrupt.raised() {
                        return;
                    }
                    if res.send((pack, read_pack(repo, &pack, verify))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        let mut done = 0u64;
        for (pack, result) in res_rx {
            done += listed.get(&pack).copied().unwrap_or(0);
            progress.set(|| {
                format!(
                    "checking packs: {} of {}",
                    crate::commands::output::size(done),
                    crate::commands::output::size(report.pack_bytes)
                )
            });
            reads.insert(pack, result?);
        }
        interrupt.check()
    })?;

    let mut packs = BTreeMap::new();
    for (pack, read) in reads {
        let name = pack.object_name();
        let PackRead {
            found,
            hash_ok,
            entries,
            walk_err,
            bad_blobs,
            verified,
        } = read;
        if !found {
            report.add(Severity::Error, &name, "disappeared while checking");
            continue;
        }
        if !hash_ok {
            report.add(
                Severity::Error,
                &name,
                "contents do not match the pack's name (sha256): the pack is damaged",
            );
        }
        if let Some(e) = &walk_err {
            report.add(Severity::Error, &name, format!("malformed: {e}"));
        }
        let at: HashMap<u32, &PackEntry> = entries.iter().map(|e| (e.offset, e)).collect();
        let indexed = by_pack.get(&pack).map(Vec::as_slice).unwrap_or(&[]);
        for (id, loc) in indexed {
            let agrees = at
                .get(&loc.offset)
                .is_some_and(|e| e.id == *id && e.len == loc.len);
            if !agrees {
                report.add(
                    Severity::Error,
                    &name,
                    format!(
                        "the index places chunk {id} at offset {} but the pack's headers disagree",
                        loc.offset
                    ),
                );
                bad.insert(*id, format!("the index and pack {name} disagree"));
            } else if !hash_ok && !opts.verify_data {
                bad.insert(*id, format!("its pack {name} is damaged"));
            }
        }
        if indexed.is_empty() && walk_err.is_none() && hash_ok {
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
            if !hash_ok && walk_err.is_some() {
                // Chunks the index places beyond the damage cannot be verified at all.
                for (id, loc) in indexed {
                    if !at.contains_key(&loc.offset) {
                        bad.insert(*id, format!("its pack {name} is damaged"));
                    }
                }
            }
        }
        packs.insert(
            pack,
            PackScan {
                hash_ok,
                entries,
                walk_ok: walk_err.is_none(),
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

fn repair(
    repo: &Repository,
    scan: &mut Scan,
    affected: &HashMap<ArchiveId, HashSet<Vec<u8>>>,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<()> {
    let store = repo.store().clone();
    // The new index: every chunk of every sound pack, minus chunks found damaged.
    let mut index = ChunkIndex::new();
    let mut damaged_packs = Vec::new();
    for (pack, ps) in &scan.packs {
        if ps.hash_ok && ps.walk_ok {
            for e in ps
                .entries
                .iter()
                .filter(|e| e.kind == BlobKind::Chunk && !scan.bad.contains_key(&e.id))
            {
                index.insert_stored(e.id, *pack, e.offset, e.len, e.plain_len, false);
            }
        } else {
            damaged_packs.push(*pack);
        }
    }
    // Salvage what still authenticates from damaged packs into new packs.
    let mut writer = PackWriter::new(store.clone(), index, repo.pack_options()?);
    for pack in &damaged_packs {
        interrupt.check()?;
        let name = pack.object_name();
        progress.set(|| format!("salvaging {name}"));
        let bytes = store.get(&name, None)?;
        let mut saved = 0;
        for e in &scan.packs[pack].entries {
            if e.kind != BlobKind::Chunk || writer.index().contains(&e.id) {
                continue;
            }
            let b = &bytes[e.offset as usize..(e.offset + e.len) as usize];
            if repo.open_chunk(&e.id, b, &name, Verify::Id).is_ok() {
                writer.add(e.id, b)?;
                scan.bad.remove(&e.id);
                saved += 1;
            }
        }
        report.repairs.push(format!(
            "salvaged {saved} intact chunks out of damaged pack {name}"
        ));
    }
    writer.flush()?;
    let (mut index, _) = writer.close();
    let frag = index.full_fragment()?;
    let new_name = persist::save_fragment(&*store, &frag)?;
    index.mark_persisted();
    report.repairs.push(format!(
        "wrote a rebuilt index ({} chunks) as {new_name}",
        index.len()
    ));
    for old in store.list("index")? {
        if old.name != new_name {
            store.delete(&old.name)?;
        }
    }
    let referenced: HashSet<PackId> = index.iter_stored().map(|(_, p, _)| p).collect();
    for pack in &damaged_packs {
        // A salvaged pack can be byte-identical to the original of a damaged one (say, after
        // garbage was appended to it), and so carry its name: it was just rewritten whole.
        if referenced.contains(pack) {
            report.repairs.push(format!(
                "rewrote damaged pack {} whole from its intact blobs",
                pack.object_name()
            ));
            continue;
        }
        store.delete(&pack.object_name())?;
        report.repairs.push(format!(
            "removed damaged pack {} (its intact chunks were saved)",
            pack.object_name()
        ));
    }

    // Mark files whose chunks are gone.
    let missing =
        |item: &Item, index: &ChunkIndex| item.chunks.iter().any(|c| !index.contains(&c.id));
    for (aid, meta) in &scan.archives {
        if !affected.contains_key(aid) {
            continue;
        }
        interrupt.check()?;
        let items: Vec<Item> = match archive::all_items(repo, &index, meta) {
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
        let mut up = repo.uploader(index)?;
        let mut w = ItemStreamWriter::new(repo.metadata_chunker()?);
        let mut marked = 0;
        for mut item in items {
            if missing(&item, up.index()) && item.flags & FLAG_DAMAGED == 0 {
                item.flags |= FLAG_DAMAGED;
                marked += 1;
            }
            w.push(&item, &mut up)?;
        }
        let stream = w.finish(&mut up)?;
        index = up.finish()?;
        if marked == 0 {
            continue;
        }
        let new_meta = ArchiveMeta {
            items: stream,
            ..meta.clone()
        };
        let new_id = archive::commit(repo, &new_meta)?;
        store.delete(&aid.object_name())?;
        report.repairs.push(format!(
            "archive {}: marked {marked} files as damaged (aid:{} replaces aid:{})",
            meta.name,
            &new_id.to_hex()[..8],
            &aid.to_hex()[..8]
        ));
    }
    Ok(())
}
