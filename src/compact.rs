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

use crate::archive;
use crate::error::{Error, Result};
use crate::id::{ChunkId, PackId};
use crate::index::{persist, ChunkIndex, StoredLoc};
use crate::pack::format;
use crate::progress::Progress;
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

    // Mark.
    let mut live: HashSet<ChunkId> = HashSet::new();
    for (_, meta) in &list.archives {
        interrupt.check()?;
        progress.set(|| format!("marking chunks of {}", meta.name));
        live.extend(meta.items.iter().map(|c| c.id));
        for item in archive::items(repo, &index, meta) {
            live.extend(item?.chunks.iter().map(|c| c.id));
        }
    }
    let missing = live.iter().filter(|id| !index.contains(id)).count();
    if missing > 0 {
        return Err(Error::invalid(format!(
            "{missing} chunks used by archives are not in the index; refusing to compact. Run cairn check --repair."
        )));
    }
    report.chunks_live = live.len() as u64;
    report.chunks_dropped = (index.len() - live.len()) as u64;

    // Sweep plan.
    let sizes = persist::list_packs(&*store)?;
    report.packs_before = sizes.len() as u64;
    report.bytes_before = sizes.values().sum();
    let mut live_in: HashMap<PackId, Vec<(ChunkId, StoredLoc)>> = HashMap::new();
    // How many of each pack's blobs the index knows, live or not.
    let mut indexed_in: HashMap<PackId, usize> = HashMap::new();
    for (id, pack, loc) in index.iter_stored() {
        *indexed_in.entry(pack).or_default() += 1;
        if live.contains(&id) {
            live_in.entry(pack).or_default().push((id, loc));
        }
    }
    // Parsed once: the same options size the plan and write the packs.
    let pack_options = repo.pack_options()?;
    let target = pack_options.target_size as u64;
    let tiny = (target / 10).max(1);
    let threshold = opts.threshold_percent.clamp(0.0, 100.0) / 100.0;
    let tiny_count = sizes
        .iter()
        .filter(|(p, s)| **s < tiny && live_in.contains_key(p))
        .count();
    let mut plans: Vec<(PackId, u64, Plan)> = Vec::new();
    for (pack, size) in &sizes {
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

    if opts.dry_run {
        for (_, size, plan) in &plans {
            match plan {
                Plan::Delete => report.packs_deleted += 1,
                Plan::Rewrite => report.packs_rewritten += 1,
                Plan::Keep => {
                    report.packs_after += 1;
                    report.bytes_after += size;
                }
            }
        }
        return Ok(report);
    }

    // New index: live entries of kept packs, then live blobs copied out of rewritten packs.
    let mut new_index = ChunkIndex::new();
    for (pack, _, plan) in &plans {
        if matches!(plan, Plan::Keep) {
            for (id, loc) in live_in.get(pack).map(Vec::as_slice).unwrap_or(&[]) {
                new_index.insert_stored(*id, *pack, loc.offset, loc.len, loc.plain_len, false);
            }
        }
    }
    let mut session = repo.begin_write_with(
        new_index,
        pack_options,
        crate::repo::session::CheckpointPolicy::from_env()?,
    )?;
    let mut removed: Vec<(PackId, u64)> = Vec::new();
    for (pack, size, plan) in &plans {
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
        let name = pack.object_name();
        progress.set(|| format!("rewriting {name}"));
        // One read per pack: live data is at least a tenth of it, and remote stores charge
        // per request.
        let bytes = match format::read_whole(&*store, pack) {
            Ok(b) => b,
            Err(e) => return Err(session.stop(e)),
        };
        let mut blobs = Vec::new();
        let mut damaged = None;
        let mut entries = live_in.get(pack).cloned().unwrap_or_default();
        entries.sort_by_key(|(_, l)| l.offset);
        for (id, loc) in entries {
            let (start, end) = (loc.offset as usize, loc.offset as usize + loc.len as usize);
            let Some(blob) = bytes.get(start..end) else {
                damaged = Some(Error::corrupt(&name, "shorter than the index says"));
                break;
            };
            if let Err(e) = repo.open_chunk(&id, blob, &name) {
                damaged = Some(e);
                break;
            }
            blobs.push((id, loc.plain_len, blob));
        }
        if let Some(e) = damaged {
            // Leave the pack as it is: its live entries stay where they are.
            report.damaged_packs_kept.push(format!("{name}: {e}"));
            for (id, loc) in live_in.get(pack).map(Vec::as_slice).unwrap_or(&[]) {
                session.keep_stored(*id, *pack, *loc);
            }
            continue;
        }
        for (id, plain_len, blob) in blobs {
            if let Err(e) = session.add_blob(id, plain_len, blob) {
                return Err(session.stop(e));
            }
        }
        report.packs_rewritten += 1;
        removed.push((*pack, *size));
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
