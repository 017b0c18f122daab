//! The scan: the index and the pack listing against each other, then every pack read (as deep
//! as asked) and judged against the index, then the archives loaded.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::by_pack::{ByPack, TocSummary};
use super::plan::{self, Plan};
use super::read::{for_each_pack_in, read_pack, Depth, PackRead};
use super::{uses, CheckOptions, CheckReport, PackScan, Scan, Severity};
use crate::archive;
use crate::error::Result;
use crate::index::{persist, StoredLoc};
use crate::repo::reconcile;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ChunkId, PackId};
use crate::util::progress::Progress;

/// What others are doing to the repository while it is checked: packs retired by a compact
/// (deleted later, or being deleted), and whether a backup is running (its packs are named by
/// no fragment until it commits).
struct Others {
    retired: HashSet<PackId>,
    doomed: HashSet<PackId>,
    /// A running backup's lock, described.
    writer: Option<String>,
}

impl Others {
    fn look(repo: &Repository) -> Result<Others> {
        let retired = repo.retired()?;
        let own = repo.lock_name();
        let live = crate::repo::lock::live_locks(
            &**repo.store(),
            own.as_deref(),
            crate::repo::lock_memory(&repo.id_hex()),
            &repo.lock_timing(),
            Some(&crate::repo::lock::LockSeal::of(repo.crypto())),
        )?;
        // A shared lock whose command is not known (taken while its key was being opened, or
        // sealed from us) may be a backup's; one of a command without the key is not.
        let writer = live
            .into_iter()
            .find(|l| {
                matches!(l.command.as_str(), "create" | "copy")
                    || (l.opaque() && l.kind == crate::repo::lock::LockKind::Shared && !l.keyless)
            })
            .map(|l| l.describe());
        Ok(Others {
            retired: retired.all(),
            doomed: retired.doomed(),
            writer,
        })
    }

    /// Why a pack that is retired is what it is.
    fn retired_why(&self, pack: &PackId) -> &'static str {
        if self.doomed.contains(pack) {
            "being deleted by a compact (an interrupted one finishes at the next compact)"
        } else {
            "retired by a compact: deleted by a later compact once no backup can need it"
        }
    }
}

pub(super) fn scan(
    repo: &Repository,
    opts: &CheckOptions,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<Scan> {
    // The archives are loaded while the index and the listings are read: on a far store, each
    // is a chain of round trips that does not wait for the other.
    let (located, archives) = std::thread::scope(|s| {
        let archives = s.spawn(|| {
            let mut found = CheckReport::default();
            load_archives(repo, &mut found).map(|a| (a, found))
        });
        let located = Others::look(repo).and_then(|others| {
            let (listed, scan) = locate(repo, &others, report)?;
            Ok((others, listed, scan))
        });
        let archives = archives
            .join()
            .unwrap_or_else(|_| Err(crate::error::Error::invalid("loading the archives failed")));
        (located, archives)
    });
    let (others, listed, mut scan) = located?;
    scan.keep_tocs = opts.repair;
    let (archives, found) = archives?;
    scan.archives = archives;
    report.findings.extend(found.findings);
    report.archives = found.archives;
    let plan = plan::plan(repo, &scan, &listed, opts, interrupt, report)?;
    if !opts.archives.is_empty() {
        scan.archives.retain(|(id, _)| opts.archives.contains(id));
        report.archives = scan.archives.len() as u64;
    }
    let reads = read_packs(
        repo,
        (&scan, &listed),
        plan,
        opts,
        (progress, interrupt),
        report,
    )?;
    let mut in_progress = 0u64;
    for (pack, read) in reads {
        judge_pack(
            &mut scan,
            (pack, repo.crypto().suite()),
            read,
            &others,
            &mut in_progress,
            report,
        );
    }
    if let (Some(writer), true) = (&others.writer, in_progress > 0) {
        report.add(
            Severity::Info,
            "packs/",
            format!(
                "{} that no index fragment names yet: in progress ({writer})",
                crate::util::progress::count(in_progress, "pack")
            ),
        );
    }
    let (blobs, bytes, packs) = scan.unaccounted;
    if blobs > 0 {
        report.add(
            Severity::Warning,
            "index/",
            format!(
                "{} ({}) in {} that no index entry names: no compact can free them until cairn check --repair indexes them again",
                crate::util::progress::count(blobs, "blob"),
                crate::util::progress::size(bytes),
                crate::util::progress::count(packs, "pack")
            ),
        );
    }
    Ok(scan)
}

/// Every archive, for the trace: the ones shown, the ones a replacement hides, and the ones
/// removed through an append-only connection; the ones that cannot be read are errors.
fn load_archives(
    repo: &Repository,
    report: &mut CheckReport,
) -> Result<Vec<(crate::util::id::ArchiveId, crate::archive::ArchiveMeta)>> {
    let list = archive::load_all(repo)?;
    for (id, e) in &list.damaged {
        report.add(
            Severity::Error,
            id.object_name(),
            format!("archive cannot be read: {e}"),
        );
    }
    for r in &list.replaced {
        report.add(
            Severity::Info,
            r.id.object_name(),
            format!(
                "archive {} is replaced by aid:{} (a rename, comment or rewrite stopped before it removed it): hidden, and removed by {}",
                r.meta.name,
                &r.by.to_hex()[..8],
                archive::FINISHERS
            ),
        );
    }
    report.archives = (list.archives.len() + list.damaged.len() + list.removed.len()) as u64;
    // Hidden archives are traced too: they still reference their data (compact removes them
    // first, or the broken replacement that hides them), and one whose replacement lost its
    // data is the copy that restores. So are the archives removed through an append-only
    // connection: the owner may take them back.
    let mut archives = list.archives;
    archives.extend(list.replaced.into_iter().map(|r| (r.id, r.meta)));
    archives.extend(list.removed.into_iter().map(|r| (r.id, r.meta)));
    Ok(archives)
}

/// The index and the listing of packs: every location some fragment gives, per pack, and the
/// chunks whose pack is gone (falling back on another fragment's copy where there is one).
fn locate(
    repo: &Repository,
    others: &Others,
    report: &mut CheckReport,
) -> Result<(BTreeMap<PackId, u64>, Scan)> {
    let (mut index, load) = repo.load_index()?;
    // A retired pack may hold the only copy of chunks an archive needs (committed by a
    // backup that another client judged gone): read from its table of contents, as readers do.
    reconcile::adopt_retired(&**repo.store(), repo.crypto(), &mut index, &others.retired)?;
    for d in &load.damaged_fragments {
        report.add(
            Severity::Error,
            &d.name,
            format!("damaged or forged index fragment: {}", d.reason),
        );
    }

    let listed = list_packs(repo, report)?;

    // How many locations some fragment gives in each pack: the index's, and the alternates
    // (a chunk that another fragment places elsewhere).
    let mut named = vec![0usize; index.packs().len()];
    for (_, _, loc) in index.iter_stored() {
        if let Some(n) = named.get_mut(loc.pack as usize) {
            *n += 1;
        }
    }
    let mut named: HashMap<PackId, usize> = index.packs().iter().copied().zip(named).collect();
    for a in &load.alternates {
        *named.entry(a.pack).or_default() += 1;
    }
    named.retain(|_, n| *n > 0);
    let missing = missing_packs(&named, &listed, others, report);
    let gone: HashSet<PackId> = missing.iter().copied().collect();
    // The chunks placed in those packs (no pass over the index when none is gone).
    let mut orphans: Vec<(ChunkId, PackId)> = Vec::new();
    if !gone.is_empty() {
        orphans.extend(
            index
                .iter_stored()
                .filter(|(_, p, _)| gone.contains(p))
                .map(|(id, p, _)| (id, p)),
        );
        orphans.extend(
            load.alternates
                .iter()
                .filter(|a| gone.contains(&a.pack))
                .map(|a| (a.id, a.pack)),
        );
    }
    // Chunks whose pack is gone fall back on another fragment's copy, if there is one.
    index.forget_packs(&missing);
    persist::refill(&mut index, &load.alternates, |p| listed.get(p).copied());
    let mut bad: HashMap<ChunkId, String> = HashMap::new();
    for (id, pack) in orphans {
        if !index.contains(&id) {
            bad.insert(id, format!("its pack {} is missing", pack.object_name()));
        }
    }
    report.chunks = index.len() as u64;
    // Frozen from here on (nothing below changes it), so that its positions number the
    // locations per pack.
    index.freeze()?;
    let alternates: Vec<_> = load
        .alternates
        .into_iter()
        .filter(|a| !gone.contains(&a.pack))
        .collect();
    let by_pack = ByPack::new(&index, &alternates)?;
    let scan = Scan {
        index,
        by_pack,
        packs: BTreeMap::new(),
        keep_tocs: false,
        bad,
        archives: Vec::new(),
        fragments: load.fragments,
        unaccounted: (0, 0, 0),
        referenced: Default::default(),
    };
    Ok((listed, scan))
}

/// The packs the store lists (counted in the report), by id; an object in `packs/` that is not
/// named as a pack is a warning.
fn list_packs(repo: &Repository, report: &mut CheckReport) -> Result<BTreeMap<PackId, u64>> {
    let mut listed: BTreeMap<PackId, u64> = BTreeMap::new();
    for o in repo.store().list("packs")? {
        match persist::pack_id_of(&o.name) {
            Some(id) => {
                listed.insert(id, o.size);
            }
            None => report.add(Severity::Warning, &o.name, "unexpected object in packs/"),
        }
    }
    report.packs = listed.len() as u64;
    report.pack_bytes = listed.values().sum();
    Ok(listed)
}

/// The packs some fragment places chunks in (`named`, with how many) that are not `listed`:
/// each reported, as an error, or as news when a compact deleted it.
fn missing_packs(
    named: &HashMap<PackId, usize>,
    listed: &BTreeMap<PackId, u64>,
    others: &Others,
    report: &mut CheckReport,
) -> Vec<PackId> {
    let mut missing = Vec::new();
    for (pack, entries) in named {
        if listed.contains_key(pack) {
            continue;
        }
        if others.retired.contains(pack) {
            // Deleted by a compact whose new index is not written yet (or is interrupted):
            // the index entries go with the next compact. Chunks an archive needs are
            // reported below like any missing chunk.
            report.add(
                Severity::Info,
                pack.object_name(),
                format!(
                    "deleted by a compact; the index still names it for {entries} chunks until the next compact"
                ),
            );
        } else {
            report.add(
                Severity::Error,
                pack.object_name(),
                format!("the index names this pack for {entries} chunks, but it does not exist"),
            );
        }
        missing.push(*pack);
    }
    missing
}

/// Reads the packs of `plan` in parallel, as deep as asked: whole with every blob opened (the
/// packs a verifying check chose, until its time is up), whole (--repair; and packs no
/// fragment names, to tell a crash's leftover from a forgery), or their TOC only. Each sound
/// pack read whole is noted in the verification record as it comes, so that an interrupted
/// check loses only the packs in progress.
fn read_packs(
    repo: &Repository,
    (scan, listed): (&Scan, &BTreeMap<PackId, u64>),
    plan: Plan,
    opts: &CheckOptions,
    (progress, interrupt): (&Progress, &Interrupt),
    report: &mut CheckReport,
) -> Result<BTreeMap<PackId, PackRead>> {
    let Plan {
        order,
        whole,
        deadline,
        mut record,
        mut slice,
    } = plan;
    // The first pack chosen is read whole whatever the time, so that every run gets on; once
    // the time is up, no chosen pack is read at all (the next run starts with them).
    let begun = std::sync::atomic::AtomicBool::new(false);
    let in_time = || {
        deadline.is_none_or(|d| std::time::Instant::now() < d)
            || !begun.swap(true, std::sync::atomic::Ordering::SeqCst)
    };
    let depth_of = |pack: &PackId| {
        if whole.contains(pack) {
            in_time().then(|| {
                begun.store(true, std::sync::atomic::Ordering::SeqCst);
                Depth::Blobs
            })
        } else if opts.repair || !scan.by_pack.contains(pack) {
            Some(Depth::Whole)
        } else {
            Some(Depth::Toc)
        }
    };
    let mut unrecorded: Option<std::io::Error> = None;
    let mut reads: BTreeMap<PackId, PackRead> = BTreeMap::new();
    for_each_pack_in(
        &order,
        opts.threads,
        (progress, "checking"),
        interrupt,
        |pack, size| {
            let indexed = scan.by_pack.entries(&scan.index, pack);
            let depth = depth_of(pack)?;
            Some(read_pack(repo, pack, size, depth, &indexed, scan.keep_tocs).map(|r| (r, size)))
        },
        |pack, result| {
            let Some(result) = result else {
                return Ok(());
            };
            let (read, size) = result?;
            if read.blobs {
                slice.verified_packs += 1;
                slice.verified_bytes += size;
            }
            if read.sound_whole() {
                if let Err(e) = record.note(&pack, crate::util::clock::now_secs()) {
                    unrecorded.get_or_insert(e);
                }
            }
            reads.insert(pack, read);
            Ok(())
        },
    )?;
    if let Some(e) = unrecorded {
        report.add(
            Severity::Warning,
            "verification record",
            format!("cannot note verified packs in this client's cache ({e}): the next slice reads them again"),
        );
    }
    if opts.verify_data {
        slice.left_packs = slice.chosen_packs - slice.verified_packs.min(slice.chosen_packs);
        slice.left_bytes = slice.chosen_bytes - slice.verified_bytes.min(slice.chosen_bytes);
        report.slice = Some(slice);
    }
    report.coverage = Some(record.coverage(listed, crate::util::clock::now_secs()));
    Ok(reads)
}

/// What one pack's read says: reported, and its chunks that cannot be used marked bad. The
/// comparisons with the index are cheap and done here, in pack order.
fn judge_pack(
    scan: &mut Scan,
    (pack, suite): (PackId, crate::crypto::Suite),
    read: PackRead,
    others: &Others,
    in_progress: &mut u64,
    report: &mut CheckReport,
) {
    let name = pack.object_name();
    let PackRead {
        found,
        hash_ok,
        toc,
        bad_blobs,
        verified,
        blobs,
    } = read;
    if !found {
        report.add(Severity::Error, &name, "disappeared while checking");
        return;
    }
    if hash_ok == Some(false) {
        report.add(
            Severity::Error,
            &name,
            format!(
                "contents do not match the pack's name ({}): the pack is damaged",
                suite.pack_hash_name()
            ),
        );
    }
    let indexed = scan.by_pack.entries(&scan.index, &pack);
    let unindexed = indexed.is_empty();
    let unusable: Vec<(ChunkId, String)> = match &toc {
        Err(e) => {
            report.add(Severity::Error, &name, format!("unusable: {e}"));
            // Its chunks cannot be located or vouched for (--verify-data and --repair open
            // them one by one, from the index's offsets).
            indexed
                .iter()
                .filter(|(id, loc)| !blobs && uses(&scan.index, id, &pack, loc))
                .map(|(id, _)| (*id, format!("its pack {name} is damaged")))
                .collect()
        }
        Ok(summary) => {
            let damaged = hash_ok == Some(false) && !blobs;
            if !unindexed && !others.retired.contains(&pack) {
                unaccounted(scan, summary);
            }
            compare_toc(scan, (&pack, &indexed), summary, damaged, report)
        }
    };
    scan.bad.extend(unusable);
    if others.retired.contains(&pack) {
        report.add(Severity::Info, &name, others.retired_why(&pack));
    } else if unindexed && toc.is_ok() && hash_ok != Some(false) {
        unindexed_pack(&name, others, in_progress, report);
    }
    if blobs {
        report.chunks_verified += verified;
        for (id, reason) in bad_blobs {
            report.add(Severity::Error, format!("chunk {id}"), reason.clone());
            scan.bad.insert(id, reason);
        }
    }
    scan.packs.insert(
        pack,
        PackScan {
            hash_ok,
            toc_ok: toc.is_ok(),
            toc: toc.ok().and_then(|s| s.entries),
        },
    );
}

/// A sound pack no fragment names: counted as a running backup's while one runs (said once,
/// for all of them), else a warning.
fn unindexed_pack(name: &str, others: &Others, in_progress: &mut u64, report: &mut CheckReport) {
    if others.writer.is_some() {
        *in_progress += 1;
    } else {
        report.add(
            Severity::Warning,
            name,
            "not in the index (left by an interrupted command; check --repair or the next backup indexes it)",
        );
    }
}

/// Counts the blobs of an indexed pack's TOC that no index location names: bytes nothing
/// accounts for, which no compact can free until `check --repair` indexes them again.
fn unaccounted(scan: &mut Scan, summary: &TocSummary) {
    let (blobs, bytes) = summary.unaccounted;
    if blobs > 0 {
        let (b, n, p) = &mut scan.unaccounted;
        *b += blobs;
        *n += bytes;
        *p += 1;
    }
}

/// The index's entries for a pack against its TOC; returns the chunks the index uses from
/// here that are unusable (the TOC disagrees, or the pack is `damaged`), with why.
fn compare_toc(
    scan: &Scan,
    (pack, indexed): (&PackId, &[(ChunkId, StoredLoc)]),
    summary: &TocSummary,
    damaged: bool,
    report: &mut CheckReport,
) -> Vec<(ChunkId, String)> {
    let name = pack.object_name();
    let mut bad = Vec::new();
    for (id, loc) in indexed {
        let agrees = summary.agrees(id, loc);
        // Only the location the index uses decides whether the chunk is usable.
        let used = uses(&scan.index, id, pack, loc);
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
                bad.push((*id, format!("the index and pack {name} disagree")));
            }
        } else if damaged && used {
            bad.push((*id, format!("its pack {name} is damaged")));
        }
    }
    bad
}
