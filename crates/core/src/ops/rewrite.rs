//! `cairn rewrite`, `rename` and `comment`: an archive written again with a change (items
//! left out, another name, another comment), the new archive committed in place of the old
//! one in one write session ([`crate::repo::session::Replacement`]). The new object names the
//! one it replaces and is durable before the old one is removed: an interrupt, a full disk,
//! a kill or a lost lock at any point leaves the old archive, or the new one with the old one
//! hidden until the next command that may delete removes it, never neither and never half of
//! one. The data only the removed items used stays in packs until `compact` frees it.

use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta, ArchiveStats};
use crate::error::Result;
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::ops::extract::Selection;
use crate::repo::session::Commit;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::ArchiveId;

/// What changes in an archive.
#[derive(Default)]
pub struct Change {
    /// Items to leave out, with everything below them (`create --exclude`'s rules).
    pub remove: Option<Selection>,
    pub name: Option<String>,
    pub comment: Option<String>,
    /// The archive's new tags.
    pub tags: Option<Vec<String>>,
    /// Said in the comment when items were removed ("rewritten …: 3 items removed").
    pub note: Option<String>,
}

/// One archive's rewrite.
pub struct Rewritten {
    pub old: ArchiveId,
    /// The archive committed in its place; `None` when nothing changed (or a dry run).
    pub new: Option<ArchiveId>,
    /// Whether anything changes (in a dry run: would change).
    pub changed: bool,
    pub meta: ArchiveMeta,
    /// Items left out, and the bytes of the files among them.
    pub removed: u64,
    pub removed_bytes: u64,
    /// Said when the lock was lost on the way but the repository holds just the new
    /// archive (see [`crate::repo::session::Replacement`]).
    pub warning: Option<String>,
}

/// Rewrites archive `id` as `change` says; `each_removed` is told every item left out.
/// With `dry_run` nothing is written. Returns the index (as the session left it) and what
/// was done. The items are read through `reading` when given (an index for reading, which
/// places chunks in packs a compact retired: a writer's index leaves those out, and a
/// rewrite beside an interrupted compact found its archive's chunks "missing"), else through
/// `index`.
pub fn rewrite(
    repo: &Repository,
    (index, reading): (ChunkIndex, Option<&ChunkIndex>),
    (id, meta): (ArchiveId, ArchiveMeta),
    change: &mut Change,
    dry_run: bool,
    interrupt: &Interrupt,
    mut each_removed: impl FnMut(&Item),
) -> Result<(ChunkIndex, Rewritten)> {
    let mut new_meta = meta.clone();
    let mut kept = Vec::new();
    let mut removed = ArchiveStats::default();
    if let Some(selection) = &mut change.remove {
        for item in archive::items(repo, reading.unwrap_or(&index), &meta) {
            interrupt.check()?;
            let item = item?;
            if selection.selects(&item.path) {
                kept.push(item);
            } else {
                each_removed(&item);
                count(&mut removed, &item, reading.unwrap_or(&index));
            }
        }
    }
    let removed_items = removed.files + removed.dirs + removed.symlinks + removed.others;
    if let Some(name) = &change.name {
        new_meta.name.clone_from(name);
    }
    if let Some(comment) = &change.comment {
        new_meta.comment.clone_from(comment);
    }
    new_meta.tags = change.tags.clone().unwrap_or(new_meta.tags);
    if let (Some(note), true) = (&change.note, removed_items > 0) {
        let note = format!(
            "{note}: {} removed",
            crate::util::progress::count(removed_items, "item")
        );
        new_meta.comment = if new_meta.comment.is_empty() {
            note
        } else {
            format!("{}; {note}", new_meta.comment)
        };
    }
    subtract(&mut new_meta.stats, &removed);
    let label = |m: &ArchiveMeta| (m.name.clone(), m.comment.clone(), m.tags.clone());
    let unchanged = removed_items == 0 && label(&new_meta) == label(&meta);
    let mut done = Rewritten {
        old: id,
        new: None,
        changed: !unchanged,
        meta: new_meta,
        removed: removed_items,
        removed_bytes: removed.original_size,
        warning: None,
    };
    if unchanged || dry_run {
        return Ok((index, done));
    }
    interrupt.check()?;
    let items_changed = removed_items > 0;
    done.meta.replaces = Some(id);
    let replaced = repo.write(index, |session| {
        if items_changed {
            let mut w = ItemStreamWriter::new(repo.metadata_chunker()?);
            for item in &kept {
                interrupt.check()?;
                w.push(item, session)?;
            }
            done.meta.items = w.finish(session)?;
        }
        let sealed = archive::seal(repo, &done.meta)?;
        Ok(Commit::archive_replacing(id, sealed))
    })?;
    done.new = Some(replaced.id);
    done.warning = replaced.warning;
    Ok((replaced.index, done))
}

/// Adds a removed item to the statistics to take off the archive's.
fn count(stats: &mut ArchiveStats, item: &Item, index: &ChunkIndex) {
    match item.kind {
        ItemKind::File => {
            stats.files += 1;
            stats.original_size += item.size;
            stats.compressed_size += item
                .chunks
                .iter()
                .filter_map(|c| index.stored(&c.id))
                .map(|(_, loc)| u64::from(loc.len))
                .sum::<u64>();
        }
        ItemKind::Dir => stats.dirs += 1,
        ItemKind::Symlink => stats.symlinks += 1,
        _ => stats.others += 1,
    }
}

/// The archive's statistics without what was removed. What the backup added to the
/// repository when it was made (`deduplicated_size`) stays the history it is.
fn subtract(stats: &mut ArchiveStats, removed: &ArchiveStats) {
    stats.files = stats.files.saturating_sub(removed.files);
    stats.dirs = stats.dirs.saturating_sub(removed.dirs);
    stats.symlinks = stats.symlinks.saturating_sub(removed.symlinks);
    stats.others = stats.others.saturating_sub(removed.others);
    stats.original_size = stats.original_size.saturating_sub(removed.original_size);
    stats.compressed_size = stats
        .compressed_size
        .saturating_sub(removed.compressed_size);
}
