//! `cairn compact`: reclaim the space of chunks no archive uses.
//!
//! 1. Every archive must be readable, and every chunk they reference must be in the index
//!    (otherwise compact refuses: it cannot know what is still needed).
//! 2. Mark: the chunks reachable from any archive (item streams and file contents).
//! 3. Per pack: delete it when nothing in it is live; rewrite it when its unused share is at
//!    or above the threshold, or when it is tiny and there are other tiny packs to merge with.
//!    Live blobs are copied as they are (already compressed and encrypted), after checking they
//!    still authenticate; a pack with a damaged live blob is left alone and reported.
//!    Retired packs (`repo/retire.rs`): those another run was deleting are finished off (what
//!    an archive needs copied out first); deferred ones whose wait is over are deleted if
//!    nothing in them is live, and kept (in use again) if something is; deferred ones still
//!    waiting are left alone.
//! 4. While a broken lock's record is younger than the grace interval by this client's clock
//!    (`repo/maintenance.rs`), packs newly found unused are not deleted but deferred, and
//!    nothing is rewritten: the holder of that lock may still commit against them.
//! 5. The write session's steps do the rest (`repo/session/sweep.rs`): the packs to delete
//!    are announced in a record and the archives listed again (what an archive committed
//!    since needs is kept) → packs with nothing live deleted → live blobs copied → new full
//!    index fragment → old fragments deleted → rewritten packs deleted → records removed. A
//!    crash at any point leaves every live chunk reachable through the index, and the record
//!    tells the next run (and `check`) what was being deleted.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;

use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::index::{persist, ChunkIndex, StoredLoc};
use crate::pack::format;
use crate::pack::writer::PackOptions;
use crate::repo::maintenance::Maintenance;
use crate::repo::session::{Commit, WriteSession};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId, PackId};
use crate::util::progress::Progress;

#[derive(Clone, Copy, Debug)]
pub struct CompactOptions {
    /// Rewrite a pack when at least this share (0–100) of it is unused.
    pub threshold_percent: f64,
    pub dry_run: bool,
    /// Archives removed through an append-only connection at least this many seconds ago
    /// are removed for good and their data freed; the others (all, without it) are kept.
    pub removed_older_than: Option<u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct CompactReport {
    pub packs_before: u64,
    pub bytes_before: u64,
    pub packs_deleted: u64,
    pub packs_rewritten: u64,
    pub packs_written: u64,
    pub packs_after: u64,
    pub bytes_after: u64,
    pub chunks_live: u64,
    /// Unused blobs in the packs deleted or rewritten: freed.
    pub chunks_dropped: u64,
    /// Unused blobs left in packs that stay (below the threshold, or deferred), and their
    /// bytes: still indexed, freed by a later compact.
    pub chunks_unused_kept: u64,
    pub bytes_unused_kept: u64,
    /// Nothing is rewritten while a broken lock's grace runs: what stays unused waits for it.
    pub rewrites_wait: bool,
    /// Archives others replace, removed first (in a dry run: that would be).
    pub hidden_removed: u64,
    /// Archives removed through an append-only connection that this run removed for good
    /// (`--removed-older-than`).
    pub removed_freed: u64,
    pub damaged_packs_kept: Vec<String>,
    /// Unused packs retired by this run rather than deleted (a lock was removed by another
    /// client within the grace interval), with their bytes.
    pub packs_deferred: u64,
    pub bytes_deferred: u64,
    /// Everything that waits to be freed (deferred by this run or an earlier one), and how
    /// long the longest wait is, in seconds, by this client's clock.
    pub packs_waiting: u64,
    pub bytes_waiting: u64,
    pub wait_seconds: u64,
}

impl CompactReport {
    pub fn freed(&self) -> i64 {
        self.bytes_before as i64 - self.bytes_after as i64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Keep,
    Delete,
    Rewrite,
    /// Unused, but deleted only once the grace interval has passed.
    Defer,
    /// Deferred earlier and still waiting: left as it is.
    Wait,
}

/// What compact decided for every pack, and the live entries it needs to act on it.
struct Sweep {
    /// Per pack, sorted by pack: its size and what happens to it.
    plans: Vec<(PackId, u64, Plan)>,
    /// The live chunks of each pack, with their locations.
    live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>>,
    /// The blobs of each pack no archive uses: the index's entries that are not live, and
    /// second copies of chunks the index places elsewhere. A pack that stays keeps them in
    /// the new index (issue 44: they were dropped, and no later compact could free them).
    unused_in: HashMap<PackId, Vec<Unused>>,
}

/// A blob no archive uses.
#[derive(Clone, Copy)]
struct Unused {
    id: ChunkId,
    loc: StoredLoc,
    /// A second copy (the index reads the chunk from elsewhere).
    spare: bool,
}

impl Sweep {
    fn live_in(&self, pack: &PackId) -> &[(ChunkId, StoredLoc)] {
        self.live_in.get(pack).map(Vec::as_slice).unwrap_or(&[])
    }

    fn packs(&self, which: Plan) -> Vec<PackId> {
        self.plans
            .iter()
            .filter(|(_, _, p)| *p == which)
            .map(|(id, _, _)| *id)
            .collect()
    }

    /// A chunk that an archive committed since the plan needs: kept where it is, or copied
    /// out of a pack that goes.
    fn needs(&mut self, session: &mut WriteSession<'_>, id: ChunkId, pack: PackId, loc: StoredLoc) {
        let Some(plan) = self.plans.iter_mut().find(|(p, _, _)| *p == pack) else {
            // In a pack this run does not touch (written since it listed them).
            return;
        };
        let live = self.live_in.entry(pack).or_default();
        if live.iter().any(|(c, _)| *c == id) {
            return;
        }
        live.push((id, loc));
        match plan.2 {
            Plan::Keep | Plan::Wait | Plan::Defer => session.keep_stored(id, pack, loc),
            Plan::Rewrite => {}
            Plan::Delete => plan.2 = Plan::Rewrite,
        }
    }
}

/// The index of what stays: the live entries of the packs that are kept, waited for or
/// deferred, and what the packs that are kept hold unused (entries and second copies), so
/// that a later compact still knows of it.
fn kept_index(sweep: &Sweep) -> ChunkIndex {
    let mut index = ChunkIndex::new();
    for (pack, _, plan) in &sweep.plans {
        if matches!(plan, Plan::Keep | Plan::Wait | Plan::Defer) {
            for (id, loc) in sweep.live_in(pack) {
                index.insert_stored(*id, *pack, loc.offset, loc.len, loc.plain_len, false);
            }
        }
    }
    for (pack, _, plan) in &sweep.plans {
        if *plan != Plan::Keep {
            continue;
        }
        for u in sweep.unused_in.get(pack).map(Vec::as_slice).unwrap_or(&[]) {
            let placed = !u.spare
                && index.insert_stored(
                    u.id,
                    *pack,
                    u.loc.offset,
                    u.loc.len,
                    u.loc.plain_len,
                    false,
                );
            if !placed {
                index.add_spare(u.id, *pack, u.loc);
            }
        }
    }
    index
}

/// Finds the chunks in `unplaced` in the tables of contents of the packs `going`, and has
/// them copied out. A pack gone, or unreadable, has nothing to copy; a failing store is an
/// error.
fn find_unplaced(
    repo: &Repository,
    sweep: &mut Sweep,
    session: &mut WriteSession<'_>,
    going: &[PackId],
    sizes: &HashMap<PackId, u64>,
    unplaced: &HashSet<ChunkId>,
) -> Result<()> {
    for pack in going {
        let toc = match format::read_toc(&**repo.store(), repo.crypto(), pack, sizes[pack]) {
            Ok(toc) => toc,
            Err(Error::Store(e)) if !e.is_not_found() => return Err(e.into()),
            Err(_) => continue,
        };
        for e in toc.entries.iter().filter(|e| unplaced.contains(&e.id)) {
            let loc = StoredLoc {
                pack: 0,
                offset: e.offset,
                len: e.len,
                plain_len: e.plain_len,
            };
            sweep.needs(session, e.id, *pack, loc);
        }
    }
    Ok(())
}

/// The retirement records this run completes: every pack they name is gone now, live
/// again, or was not there.
fn finished_records(
    state: &Maintenance,
    gone: &HashSet<PackId>,
    revived: &HashSet<PackId>,
    sizes: &HashMap<PackId, u64>,
) -> Vec<String> {
    state
        .finished()
        .into_iter()
        .filter(|name| {
            state
                .retired
                .records
                .iter()
                .find(|r| &r.name == name)
                .is_some_and(|r| {
                    r.packs
                        .iter()
                        .all(|p| gone.contains(p) || revived.contains(p) || !sizes.contains_key(p))
                })
        })
        .collect()
}

/// Every archive, and their ids; refuses when one cannot be read (compact would not know
/// which chunks it needs). With `finish`, the archives others replace are removed first (the
/// second step of an interrupted rewrite: what only they used is then freed with the rest);
/// a dry run counts them as removed.
fn readable_archives(
    repo: &Repository,
    finish: bool,
    opts_removed_older_than: Option<u64>,
    report: &mut CompactReport,
) -> Result<(archive::ArchiveList, HashSet<ArchiveId>)> {
    let mut list = archive::load_all(repo)?;
    report.hidden_removed = list.replaced.len() as u64;
    if let Some((id, e)) = list.damaged.first() {
        return Err(Error::invalid(format!(
            "archive {id} cannot be read ({e}); compact would not know which chunks it needs. Run cairn check."
        )));
    }
    if finish && archive::finish_replaced(repo, &list)? > 0 {
        list = archive::load_all(repo)?;
    }
    // What append-only connections removed stays live, unless the owner set a period and
    // the removal is older: those archives are removed for good first.
    let cutoff = removal_cutoff(opts_removed_older_than);
    let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut list.removed)
        .into_iter()
        .partition(|r| cutoff.is_some_and(|c| r.time <= c));
    report.removed_freed = expired.len() as u64;
    if finish {
        for r in &expired {
            repo.delete_archive(&r.id)?;
            match crate::repo::removed::undo(&**repo.store(), &r.id) {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
    }
    list.archives
        .extend(kept.into_iter().map(|r| (r.id, r.meta)));
    let known = list.archives.iter().map(|(id, _)| *id).collect();
    Ok((list, known))
}

/// The newest removal time that `--removed-older-than` frees, if given.
fn removal_cutoff(older_than: Option<u64>) -> Option<i64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    older_than.map(|s| now.saturating_sub(s as i64))
}

pub fn run(
    repo: &Repository,
    opts: &CompactOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<CompactReport> {
    let store = repo.store().clone();
    let mut report = CompactReport::default();
    let mut state = Maintenance::load(repo)?;

    let (list, known) =
        readable_archives(repo, !opts.dry_run, opts.removed_older_than, &mut report)?;
    report.rewrites_wait = state.deferring.is_some();
    let (mut index, mut load, _) = repo.load_index_for_maintenance(&state.retired)?;
    let live = mark(repo, &index, &list.archives, progress, interrupt)?;
    report.chunks_live = live.len() as u64;
    keep_the_authentic_copy(repo, &mut index, &mut load.alternates, &live);

    let sizes = persist::list_packs(&*store)?;
    report.packs_before = sizes.len() as u64;
    report.bytes_before = sizes.values().sum();
    // The same options size the plan and write the packs.
    let pack_options = repo.pack_options();
    let mut sweep = plan(
        (&index, &load.alternates),
        &live,
        &sizes,
        &pack_options,
        opts.threshold_percent,
        &state,
    );
    report.chunks_dropped = sweep.dropped();
    (report.chunks_unused_kept, report.bytes_unused_kept) = sweep.unused_kept();
    waiting(&sweep, &state, repo.lock_timing().grace, &mut report);

    if opts.dry_run {
        predict(repo, &sweep, &pack_options, &mut report);
        return Ok(report);
    }

    // New index: live entries of the packs that stay, then live blobs copied out of the
    // packs that go.
    let new_index = kept_index(&sweep);
    let mut going = sweep.packs(Plan::Delete);
    going.extend(sweep.packs(Plan::Rewrite));
    let policy = repo.checkpoint_policy();
    let deleting = |pack: &PackId| progress.set(|| format!("deleting {}", pack.object_name()));
    let done = repo.write_with(new_index, pack_options, policy, |session| {
        let announced = session.announce(&going, &sweep.packs(Plan::Defer), &known)?;
        if let Some(record) = &announced.deferred {
            state.remember(record);
        }
        let newly_live = &announced.newly_live;
        keep_newly_live(
            repo, &index, newly_live, &mut sweep, session, &going, &sizes,
        )?;
        // Packs with nothing live first: on a full disk, they make the room the rest needs.
        let dead = sweep.packs(Plan::Delete);
        session.delete_packs(&announced, &dead, deleting)?;
        report.packs_deleted = dead.len() as u64;
        let rewritten = rewrite_packs(repo, session, &sweep, progress, interrupt, &mut report)?;
        interrupt.check()?;
        // Records this run completes: every pack they name is gone now, or live again.
        let gone: HashSet<PackId> = dead.iter().chain(&rewritten).copied().collect();
        let revived: HashSet<PackId> = sweep.packs(Plan::Keep).into_iter().collect();
        let finished = finished_records(&state, &gone, &revived, &sizes);
        Ok(Commit::index_replacing(
            &load.fragments,
            rewritten,
            announced,
            finished,
            deleting,
        ))
    })?;
    state.expire(repo)?;
    report.packs_written = done.packs_written;
    report.packs_rewritten = done.deleted.len() as u64;
    let after = persist::list_packs(&*store)?;
    report.packs_after = after.len() as u64;
    report.bytes_after = after.values().sum();
    Ok(report)
}

/// What archives committed since the plan need (`newly_live`) is kept: where it is, or copied
/// out of a pack that goes. A chunk such an archive needs that no fragment names (an earlier
/// compact left it out of its index, and kept its pack for other chunks) is found in the tables
/// of contents of the packs about to go (`going`).
fn keep_newly_live(
    repo: &Repository,
    index: &ChunkIndex,
    newly_live: &HashSet<ChunkId>,
    sweep: &mut Sweep,
    session: &mut WriteSession<'_>,
    going: &[PackId],
    sizes: &HashMap<PackId, u64>,
) -> Result<()> {
    for id in newly_live {
        if let Some((pack, loc)) = index.stored(id) {
            sweep.needs(session, *id, pack, loc);
        }
    }
    let unplaced: HashSet<ChunkId> = newly_live
        .iter()
        .filter(|id| !index.contains(id))
        .copied()
        .collect();
    if !unplaced.is_empty() {
        find_unplaced(repo, sweep, session, going, sizes, &unplaced)?;
    }
    Ok(())
}

/// For a live chunk that some fragments place in two packs, the copy the index reads must be
/// one that authenticates before the other is freed as a spare: a client that holds the key
/// can write a fragment that places existing chunks in a pack of junk, named to be loaded
/// first (through an append-only server, this is how it would make the owner's compact free
/// the real data). Where the index's place does not authenticate and another copy does, that
/// copy becomes the index's place and the junk the spare. Costs one ranged read per live
/// chunk with a second copy (rare: two sessions stored the same chunk at once).
fn keep_the_authentic_copy(
    repo: &Repository,
    index: &mut ChunkIndex,
    alternates: &mut [persist::Alternate],
    live: &HashSet<ChunkId>,
) {
    // The index's copies of the live chunks that have a second one, read several at a time
    // (on a remote store each is a round trip); the few that fail are settled one by one.
    let mut asked = HashSet::new();
    let places: Vec<(ChunkId, PackId, StoredLoc)> = alternates
        .iter()
        .filter(|a| live.contains(&a.id) && asked.insert(a.id))
        .filter_map(|a| index.stored(&a.id).map(|(p, l)| (a.id, p, l)))
        .collect();
    let mut failed: HashSet<ChunkId> = HashSet::new();
    let readers = crate::store::readers_for(&**repo.store());
    let check = |(id, pack, loc): &(ChunkId, PackId, StoredLoc)| {
        (*id, repo.copy_authenticates(pack, loc, id))
    };
    let _ = crate::util::parallel::in_order(&places, readers, check, |(id, ok)| {
        if !ok {
            failed.insert(id);
        }
        Ok::<(), ()>(())
    });
    for a in alternates.iter_mut() {
        if !failed.contains(&a.id) {
            continue;
        }
        let Some((pack, loc)) = index.stored(&a.id) else {
            continue;
        };
        if (a.pack, a.loc.offset) != (pack, loc.offset)
            && repo.copy_authenticates(&a.pack, &a.loc, &a.id)
        {
            index.forget(&a.id);
            index.insert_stored(a.id, a.pack, a.loc.offset, a.loc.len, a.loc.plain_len, true);
            (a.pack, a.loc) = (pack, loc);
            failed.remove(&a.id);
        }
    }
}

/// Rewrites every pack the plan rewrites; one with a damaged live blob is left as it is, and
/// reported. Returns the packs rewritten.
fn rewrite_packs(
    repo: &Repository,
    session: &mut WriteSession<'_>,
    sweep: &Sweep,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CompactReport,
) -> Result<Vec<PackId>> {
    let mut rewritten = Vec::new();
    for pack in sweep.packs(Plan::Rewrite) {
        interrupt.check()?;
        progress.set(|| format!("rewriting {}", pack.object_name()));
        match rewrite(repo, session, &pack, sweep.live_in(&pack))? {
            Rewritten::Done => rewritten.push(pack),
            Rewritten::Damaged(why) => report.damaged_packs_kept.push(why),
        }
    }
    Ok(rewritten)
}

/// What waits to be freed: packs this run defers, and packs deferred earlier still waiting.
fn waiting(sweep: &Sweep, state: &Maintenance, grace: Duration, report: &mut CompactReport) {
    let left = state.still_waiting();
    for (pack, size, plan) in &sweep.plans {
        let wait = match plan {
            Plan::Defer => {
                report.packs_deferred += 1;
                report.bytes_deferred += size;
                grace
            }
            Plan::Wait => left.get(pack).copied().unwrap_or(grace),
            _ => continue,
        };
        report.packs_waiting += 1;
        report.bytes_waiting += size;
        report.wait_seconds = report.wait_seconds.max(wait.as_secs());
    }
}

/// What the plan will do, as the real run reports it: the packs deleted and rewritten, and
/// the packs the rewritten packs' live blobs make, filled as the pack writer fills them (in the
/// order the run copies them). Only damage found while copying (a pack then left as it is),
/// or an archive committed meanwhile, can make the run differ.
fn predict(
    repo: &Repository,
    sweep: &Sweep,
    pack_options: &PackOptions,
    report: &mut CompactReport,
) {
    let mut copied = Vec::new();
    for (pack, size, plan) in &sweep.plans {
        match plan {
            Plan::Delete => report.packs_deleted += 1,
            Plan::Rewrite => {
                report.packs_rewritten += 1;
                let mut live = sweep.live_in(pack).to_vec();
                live.sort_by_key(|(_, l)| l.offset);
                copied.extend(live.iter().map(|(_, l)| l.len as usize));
            }
            Plan::Keep | Plan::Defer | Plan::Wait => {
                report.packs_after += 1;
                report.bytes_after += size;
            }
        }
    }
    let new_packs = format::pack_sizes(repo.crypto(), pack_options.target_size, copied);
    report.packs_written = new_packs.len() as u64;
    report.packs_after += new_packs.len() as u64;
    report.bytes_after += new_packs.iter().sum::<u64>();
}

/// Mark: the chunks reachable from any archive (item streams and file contents). Every one
/// must be in the index, or compact cannot know what is still needed.
fn mark(
    repo: &Repository,
    index: &ChunkIndex,
    archives: &[(ArchiveId, ArchiveMeta)],
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<HashSet<ChunkId>> {
    let mut live: HashSet<ChunkId> = HashSet::new();
    for (_, meta) in archives {
        interrupt.check()?;
        progress.set(|| format!("marking chunks of {}", meta.name));
        live.extend(meta.items.iter().map(|c| c.id));
        for item in archive::items(repo, index, meta) {
            live.extend(item?.chunks.iter().map(|c| c.id));
        }
    }
    let missing = live.iter().filter(|id| !index.contains(id)).count();
    if missing > 0 {
        return Err(Error::invalid(format!(
            "{missing} chunks used by archives are not in the index; refusing to compact. Run cairn check --repair."
        )));
    }
    Ok(live)
}

/// Plan: per pack, delete it when nothing in it is live; rewrite it when its unused share is
/// at or above the threshold, or when it is tiny and there are other tiny packs to merge with.
/// Retired packs and the grace interval as the module doc says.
fn plan(
    (index, alternates): (&ChunkIndex, &[persist::Alternate]),
    live: &HashSet<ChunkId>,
    sizes: &HashMap<PackId, u64>,
    pack_options: &PackOptions,
    threshold_percent: f64,
    state: &Maintenance,
) -> Sweep {
    let Holdings {
        live_in,
        unused_in,
        indexed_in,
    } = blobs_by_pack((index, alternates), live, sizes);
    let tiny = (pack_options.target_size as u64 / 10).max(1);
    let rules = Rules {
        doomed: state.doomed(),
        matured: state.matured(),
        still: state.still_waiting(),
        deferring: state.deferring.is_some(),
        tiny,
        tiny_count: sizes
            .iter()
            .filter(|(p, s)| **s < tiny && live_in.contains_key(p))
            .count(),
        threshold: threshold_percent.clamp(0.0, 100.0) / 100.0,
    };
    let mut plans: Vec<(PackId, u64, Plan)> = Vec::new();
    for (pack, size) in sizes {
        let live_bytes: u64 = live_in
            .get(pack)
            .map(|v| v.iter().map(|(_, l)| u64::from(l.len)).sum())
            .unwrap_or(0);
        let indexed = indexed_in.get(pack).copied().unwrap_or(0);
        plans.push((*pack, *size, rules.plan(pack, *size, live_bytes, indexed)));
    }
    plans.sort_by_key(|(p, _, _)| *p);
    Sweep {
        plans,
        live_in,
        unused_in,
    }
}

/// What each pack holds, by the index and the archives.
struct Holdings {
    /// The live chunks of each pack, with their locations.
    live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>>,
    /// The blobs of each pack no archive uses.
    unused_in: HashMap<PackId, Vec<Unused>>,
    /// The bytes of each pack's blobs the index knows, live or not.
    indexed_in: HashMap<PackId, u64>,
}

/// Per pack, its live chunks, the blobs in it no archive uses (the index's entries that are not
/// live, and second copies of chunks the index reads from elsewhere), and the bytes of its
/// blobs the index knows.
fn blobs_by_pack(
    (index, alternates): (&ChunkIndex, &[persist::Alternate]),
    live: &HashSet<ChunkId>,
    sizes: &HashMap<PackId, u64>,
) -> Holdings {
    let mut live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>> = HashMap::new();
    let mut unused_in: HashMap<PackId, Vec<Unused>> = HashMap::new();
    let mut indexed_in: HashMap<PackId, u64> = HashMap::new();
    for (id, pack, loc) in index.iter_stored() {
        *indexed_in.entry(pack).or_default() += u64::from(loc.len);
        if live.contains(&id) {
            live_in.entry(pack).or_default().push((id, loc));
        } else {
            let spare = false;
            unused_in
                .entry(pack)
                .or_default()
                .push(Unused { id, loc, spare });
        }
    }
    // Second copies are unused wherever the chunk is read from: the index's place, if it
    // still exists (else the copy is a place to read it from, and stays out of this count).
    for a in alternates {
        let end = u64::from(a.loc.offset) + u64::from(a.loc.len);
        let readable_elsewhere = index.stored(&a.id).is_some_and(|(p, l)| {
            (p, l.offset) != (a.pack, a.loc.offset) && sizes.contains_key(&p)
        });
        if sizes.get(&a.pack).is_some_and(|s| *s >= end) && readable_elsewhere {
            *indexed_in.entry(a.pack).or_default() += u64::from(a.loc.len);
            let (id, loc, spare) = (a.id, a.loc, true);
            unused_in
                .entry(a.pack)
                .or_default()
                .push(Unused { id, loc, spare });
        }
    }
    Holdings {
        live_in,
        unused_in,
        indexed_in,
    }
}

/// What a pack's plan follows besides what it holds: the retired packs, the grace interval, and
/// when a pack is worth rewriting.
struct Rules {
    /// Being deleted by some run.
    doomed: HashSet<PackId>,
    /// Deferred earlier, and their wait is over.
    matured: HashSet<PackId>,
    /// Deferred earlier and still waiting.
    still: HashMap<PackId, Duration>,
    /// A broken lock's grace runs: nothing unused is deleted at once, nothing rewritten.
    deferring: bool,
    /// Packs smaller than this are tiny, and merged when there are two or more.
    tiny: u64,
    /// Tiny packs that hold something live.
    tiny_count: usize,
    /// The unused share (0 to 1) from which a pack is rewritten.
    threshold: f64,
}

impl Rules {
    /// The plan for `pack`, of `size` bytes, whose blobs the index knows `indexed` bytes of,
    /// `live_bytes` of them live.
    fn plan(&self, pack: &PackId, size: u64, live_bytes: u64, indexed: u64) -> Plan {
        if self.doomed.contains(pack) {
            // Being deleted by some run (perhaps one that is stopped, not gone): finished off.
            if live_bytes == 0 {
                Plan::Delete
            } else {
                Plan::Rewrite
            }
        } else if self.matured.contains(pack) {
            if live_bytes == 0 {
                Plan::Delete
            } else {
                Plan::Keep
            }
        } else if self.still.contains_key(pack) {
            Plan::Wait
        } else if live_bytes == 0 {
            if self.deferring {
                Plan::Defer
            } else {
                Plan::Delete
            }
        } else {
            // The unused share: the blobs the index knows that are no longer live. Filler is
            // not unused: a rewrite would pad its session again, so counting it would rewrite
            // a padded pack on every run.
            let unused_bytes = indexed.saturating_sub(live_bytes);
            let unused = unused_bytes as f64 / size.max(1) as f64;
            // `--threshold 0`: every pack that holds anything unused.
            let worth = (unused_bytes > 0 && unused >= self.threshold)
                || (size < self.tiny && self.tiny_count >= 2);
            if worth && !self.deferring {
                Plan::Rewrite
            } else {
                Plan::Keep
            }
        }
    }
}

impl Sweep {
    /// The unused blobs of the packs that stay, and their bytes.
    fn unused_kept(&self) -> (u64, u64) {
        self.plans
            .iter()
            .filter(|(_, _, plan)| *plan == Plan::Keep)
            .filter_map(|(p, _, _)| self.unused_in.get(p))
            .flatten()
            .fold((0, 0), |(n, b), u| (n + 1, b + u64::from(u.loc.len)))
    }

    /// The unused blobs of the packs this plan deletes or rewrites: what it frees.
    fn dropped(&self) -> u64 {
        self.plans
            .iter()
            .filter(|(_, _, plan)| matches!(plan, Plan::Delete | Plan::Rewrite))
            .map(|(p, _, _)| self.unused_in.get(p).map_or(0, Vec::len) as u64)
            .sum()
    }
}

enum Rewritten {
    Done,
    /// A live blob did not authenticate: the pack is left as it is (with why).
    Damaged(String),
}

/// Rewrite: copies a pack's live blobs as they are (already compressed and encrypted) into
/// the session's new packs, after checking they still authenticate. A pack with a damaged live
/// blob is left alone: its live entries stay where they are.
fn rewrite(
    repo: &Repository,
    session: &mut WriteSession<'_>,
    pack: &PackId,
    live: &[(ChunkId, StoredLoc)],
) -> Result<Rewritten> {
    let name = pack.object_name();
    // One read per pack: live data is at least a tenth of it, and remote stores charge per
    // request.
    let bytes = format::read_whole(&**repo.store(), pack)?;
    let mut blobs = Vec::new();
    let mut entries = live.to_vec();
    entries.sort_by_key(|(_, l)| l.offset);
    for (id, loc) in entries {
        let (start, end) = (loc.offset as usize, loc.offset as usize + loc.len as usize);
        let damage = match bytes.get(start..end) {
            None => Some(Error::corrupt(&name, "shorter than the index says")),
            Some(blob) => match repo.open_chunk(&id, blob, &name) {
                Ok(_) => {
                    blobs.push((id, loc.plain_len, blob));
                    None
                }
                Err(e) => Some(e),
            },
        };
        if let Some(e) = damage {
            for (id, loc) in live {
                session.keep_stored(*id, *pack, *loc);
            }
            return Ok(Rewritten::Damaged(format!("{name}: {e}")));
        }
    }
    for (id, plain_len, blob) in blobs {
        session.add_blob(id, plain_len, blob)?;
    }
    Ok(Rewritten::Done)
}
