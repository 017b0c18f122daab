//! Every archive's items against the index: what is missing or damaged, and the files that
//! use it.

use std::collections::{HashMap, HashSet};

use super::{Affected, CheckReport, Scan, Severity};
use crate::archive;
use crate::error::Result;
use crate::format::item::{Item, FLAG_DAMAGED};
use crate::index::ChunkIndex;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId};
use crate::util::progress::Progress;

/// Reads every archive's items; reports missing and damaged chunks with the files using them.
/// Returns, per archive, the paths of affected items.
pub(super) fn trace_archives(
    repo: &Repository,
    scan: &mut Scan,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<HashMap<ArchiveId, HashSet<Vec<u8>>>> {
    let mut affected: HashMap<ArchiveId, HashSet<Vec<u8>>> = HashMap::new();
    // Every entry in the frozen base, so that each has a bit in `referenced`.
    scan.index.freeze()?;
    scan.referenced = super::Referenced::for_index(&scan.index);
    for (aid, meta) in &scan.archives {
        interrupt.check()?;
        progress.set(|| format!("checking archive {}", meta.name));
        let label = format!("archive {} (aid:{})", meta.name, &aid.to_hex()[..8]);
        for c in &meta.items {
            scan.referenced.insert(&scan.index, &c.id);
        }
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
        let mut lost = Lost::default();
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
            for c in &item.chunks {
                scan.referenced.insert(&scan.index, &c.id);
            }
            if let Some(bad_chunks) = lost.count(&scan.index, &scan.bad, &item) {
                report.affected.push(Affected {
                    archive: meta.name.clone(),
                    archive_id: aid.to_hex(),
                    path: item.display_path(),
                    bad_chunks,
                });
                affected.entry(*aid).or_default().insert(item.path.clone());
            }
        }
        lost.report(&label, report);
    }
    Ok(affected)
}

/// What an archive's items lost, counted as they are read.
#[derive(Default)]
struct Lost {
    /// Chunks they reference that are not in the index.
    missing: usize,
    /// Files an earlier repair marked damaged whose lost data is still missing.
    known_lost: usize,
}

impl Lost {
    /// Counts `item`'s chunks that are gone from `index` or known `bad`; returns how many when
    /// the item is affected (not when an earlier repair marked it damaged and nothing more of
    /// it is found damaged).
    fn count(
        &mut self,
        index: &ChunkIndex,
        bad: &HashMap<ChunkId, String>,
        item: &Item,
    ) -> Option<usize> {
        let gone = item
            .chunks
            .iter()
            .filter(|c| !index.contains(&c.id))
            .count();
        let damaged = item
            .chunks
            .iter()
            .filter(|c| bad.contains_key(&c.id))
            .count();
        if item.flags & FLAG_DAMAGED != 0 && damaged == 0 {
            // Marked by an earlier repair: known, and healed once a later backup stores
            // the same data again.
            if gone > 0 {
                self.known_lost += 1;
            }
            return None;
        }
        self.missing += gone;
        (gone + damaged > 0).then_some(gone + damaged)
    }

    /// Reports what the archive `label` names lost.
    fn report(&self, label: &str, report: &mut CheckReport) {
        let (missing, known_lost) = (self.missing, self.known_lost);
        if missing > 0 {
            report.add(
                Severity::Error,
                label,
                format!("{missing} chunks it references are not in the index"),
            );
        }
        if known_lost > 0 {
            report.add(
                Severity::Warning,
                label,
                format!("{known_lost} files were marked damaged by an earlier repair; their lost data is still missing"),
            );
        }
    }
}
