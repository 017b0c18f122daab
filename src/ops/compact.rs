//! `cairn compact`: reclaim the space of chunks no archive uses.
//!
//! 1. Every archive must be readable, and every chunk they reference must be in the index
//!    (otherwise compact refuses: it cannot know what is still needed).
//! 2. Mark: the chunks reachable from any archive (item streams and file contents).
//! 3. Per pack: delete it when nothing in it is live; rewrite it when its unused share is at
//!    or above the threshold, or when it is tiny and there are other tiny packs to merge with.
//!    Live blobs are copied as they are (already compressed and encrypted), after checking they
//!    still authenticate; a pack with a damaged live blob is left alone and reported.
//! 4. The write session's end does the rest ([`crate::repo::session::WriteSession::replace_index`]): new packs
//!    durable → new full index fragment durable → lock verified → old fragments deleted → old
//!    packs deleted. A crash at any point leaves every live chunk reachable through the index.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::id::{ArchiveId, ChunkId, PackId};
use crate::index::{persist, ChunkIndex, StoredLoc};
use crate::pack::format;
use crate::pack::writer::PackOptions;
use crate::progress::Progress;
use crate::repo::session::WriteSession;
use crate::repo::Repository;
use crate::signals::Interrupt;

#[derive(Clone, Copy, Debug)]
pub struct CompactOptions {
    /// Rewrite a pack when at least this share (0–100) of it is unused.
    pub threshold_percent: f64,
    pub dry_run: bool,
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
    pub chunks_dropped: u64,
    pub damaged_packs_kept: Vec<String>,
}

impl CompactReport {
    pub fn freed(&self) -> i64 {
        self.bytes_before as i64 - self.bytes_after as i64
    }
}

enum Plan {
    Keep,
    Delete,
    Rewrite,
}

/// What compact decided for every pack, and the live entries it needs to act on it.
struct Sweep {
    /// Per pack, sorted by pack: its size and what happens to it.
    plans: Vec<(PackId, u64, Plan)>,
    /// The live chunks of each pack, with their locations.
    live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>>,
}

impl Sweep {
    fn live_in(&self, pack: &PackId) -> &[(ChunkId, StoredLoc)] {
        self.live_in.get(pack).map(Vec::as_slice).unwrap_or(&[])
    }
}

pub fn run(
    repo: &Repository,
    opts: &CompactOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<CompactReport> {
    let store = repo.store().clone();
    let mut report = CompactReport::default();

    let list = archive::load_all(repo)?;
    if let Some((id, e)) = list.damaged.first() {
        return Err(Error::invalid(format!(
            "archive {id} cannot be read ({e}); compact would not know which chunks it needs. Run cairn check."
        )));
    }
    let (index, _, _) = repo.load_index_for_writing()?;
    let live = mark(repo, &index, &list.archives, progress, interrupt)?;
    report.chunks_live = live.len() as u64;
    report.chunks_dropped = (index.len() - live.len()) as u64;

    let sizes = persist::list_packs(&*store)?;
    report.packs_before = sizes.len() as u64;
    report.bytes_before = sizes.values().sum();
    // The same options size the plan and write the packs.
    let pack_options = repo.pack_options();
    let sweep = plan(
        repo,
        &index,
        &live,
        &sizes,
        &pack_options,
        opts.threshold_percent,
    );

    if opts.dry_run {
        predict(repo, &sweep, &pack_options, &mut report);
        return Ok(report);
    }

    // New index: live entries of kept packs, then live blobs copied out of rewritten packs.
    let mut new_index = ChunkIndex::new();
    for (pack, _, plan) in &sweep.plans {
        if matches!(plan, Plan::Keep) {
            for (id, loc) in sweep.live_in(pack) {
                new_index.insert_stored(*id, *pack, loc.offset, loc.len, loc.plain_len, false);
            }
        }
    }
    let mut session = repo.begin_write_with(new_index, pack_options, repo.checkpoint_policy())?;
    let mut removed: Vec<(PackId, u64)> = Vec::new();
    for (pack, size, plan) in &sweep.plans {
        match plan {
            Plan::Keep => continue,
            Plan::Delete => {
                removed.push((*pack, *size));
                continue;
            }
            Plan::Rewrite => {}
        }
        if let Err(e) = interrupt.check() {
            return Err(session.stop(e));
        }
        progress.set(|| format!("rewriting {}", pack.object_name()));
        match rewrite(repo, &mut session, pack, sweep.live_in(pack)) {
            Ok(Rewritten::Done) => {
                report.packs_rewritten += 1;
                removed.push((*pack, *size));
            }
            Ok(Rewritten::Damaged(why)) => report.damaged_packs_kept.push(why),
            Err(e) => return Err(session.stop(e)),
        }
    }
    if let Err(e) = interrupt.check() {
        return Err(session.stop(e));
    }
    // The new index replaces every fragment; then the packs it no longer needs go.
    let retired: Vec<PackId> = removed.iter().map(|(p, _)| *p).collect();
    let done = session.replace_index(&retired, |pack| {
        progress.set(|| format!("deleting {}", pack.object_name()))
    })?;
    report.packs_written = done.packs_written;
    removed.retain(|(pack, _)| done.deleted.contains(pack));
    report.packs_deleted = (removed.len() as u64).saturating_sub(report.packs_rewritten);
    let after = persist::list_packs(&*store)?;
    report.packs_after = after.len() as u64;
    report.bytes_after = after.values().sum();
    Ok(report)
}

/// What the plan will do, as the real run reports it: the packs deleted and rewritten, and
/// the packs the rewritten packs' live blobs make, filled as the pack writer fills them (in the
/// order the run copies them). Only damage found while copying (a pack then left as it is)
/// can make the run differ.
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
            Plan::Keep => {
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
fn plan(
    repo: &Repository,
    index: &ChunkIndex,
    live: &HashSet<ChunkId>,
    sizes: &HashMap<PackId, u64>,
    pack_options: &PackOptions,
    threshold_percent: f64,
) -> Sweep {
    let mut live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>> = HashMap::new();
    // How many of each pack's blobs the index knows, live or not.
    let mut indexed_in: HashMap<PackId, usize> = HashMap::new();
    for (id, pack, loc) in index.iter_stored() {
        *indexed_in.entry(pack).or_default() += 1;
        if live.contains(&id) {
            live_in.entry(pack).or_default().push((id, loc));
        }
    }
    let target = pack_options.target_size as u64;
    let tiny = (target / 10).max(1);
    let threshold = threshold_percent.clamp(0.0, 100.0) / 100.0;
    let tiny_count = sizes
        .iter()
        .filter(|(p, s)| **s < tiny && live_in.contains_key(p))
        .count();
    let mut plans: Vec<(PackId, u64, Plan)> = Vec::new();
    for (pack, size) in sizes {
        let live_bytes: u64 = live_in
            .get(pack)
            .map(|v| v.iter().map(|(_, l)| u64::from(l.len)).sum())
            .unwrap_or(0);
        let plan = if live_bytes == 0 {
            Plan::Delete
        } else {
            // The unused share: what is neither a live blob nor the overhead of a pack (magic,
            // table of contents, its length).
            let blobs = indexed_in.get(pack).copied().unwrap_or(0);
            let overhead = (format::HEADER_SIZE
                + format::sealed_toc_len(repo.crypto(), blobs)
                + format::TRAILER_LEN) as u64;
            let unused = size.saturating_sub(live_bytes + overhead) as f64 / (*size).max(1) as f64;
            if (threshold > 0.0 && unused >= threshold) || (*size < tiny && tiny_count >= 2) {
                Plan::Rewrite
            } else {
                Plan::Keep
            }
        };
        plans.push((*pack, *size, plan));
    }
    plans.sort_by_key(|(p, _, _)| *p);
    Sweep { plans, live_in }
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
