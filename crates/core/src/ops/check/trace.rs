//! Every archive's items against the index: what is missing or damaged, and the files that
//! use it.

use std::collections::{HashMap, HashSet};

use super::{Affected, CheckReport, Scan, Severity};
use crate::archive;
use crate::error::Result;
use crate::format::item::FLAG_DAMAGED;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::ArchiveId;
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
    for (aid, meta) in &scan.archives {
        interrupt.check()?;
        progress.set(|| format!("checking archive {}", meta.name));
        let label = format!("archive {} (aid:{})", meta.name, &aid.to_hex()[..8]);
        scan.referenced.extend(meta.items.iter().map(|c| c.id));
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
            scan.referenced.extend(item.chunks.iter().map(|c| c.id));
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
