//! The engine behind `cairn copy`: archives of one repository copied into another.
//!
//! The repositories have their own keys, so every chunk is read from the source,
//! authenticated and decrypted, identified again under the destination's id key, and, if the
//! destination lacks it, sealed under the destination's keys with its compressed bytes as they
//! were (nothing is compressed twice). The item stream is written again with the new ids.
//!
//! Each archive is committed like a backup (packs durable → index fragment → archive object),
//! and remembers the archive it is a copy of: archives already copied are skipped, so an
//! interrupted copy, which keeps the packs it stored and indexes them, is resumed by running
//! it again.

use std::collections::{HashMap, HashSet};

use crate::archive::content::{self, Contents, RunPlanner};
use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta, Selected};
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind};
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::repo::session::{Commit, WriteSession};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, ChunkId};
use crate::util::progress::Progress;

/// Items are rewritten in batches whose new chunks add up to about this much: their reads
/// merge into runs, and memory stays bounded whatever the archive.
const BATCH_BYTES: u64 = 64 << 20;
/// …or of at most this many items (an archive of many small or empty files).
const BATCH_ITEMS: usize = 4096;
/// Ranged reads of the source are at most this long.
const MAX_READ: u64 = 16 << 20;

/// What happened to one selected archive.
pub enum Outcome {
    Copied {
        source: ArchiveId,
        id: ArchiveId,
        meta: ArchiveMeta,
        /// Chunks and bytes (as stored) the destination did not have.
        new_chunks: u64,
        new_bytes: u64,
    },
    /// The destination already holds it (or the archive it is a copy of).
    Present {
        source: ArchiveId,
        meta: ArchiveMeta,
    },
}

/// The source's archives that `specs` name (see [`archive::select_many`]).
pub fn select(src: &Repository, specs: &[String]) -> Result<Selected> {
    archive::select_many(src, specs, "the source")
}

/// The archives a destination holds, by their own ids and by the ids of the originals they
/// are copies of: an archive whose original is among them is not copied again.
pub fn present(dst: &Repository, progress: &Progress) -> Result<HashSet<ArchiveId>> {
    let list = archive::load_all(dst)?;
    for (id, e) in &list.damaged {
        progress.println(&format!(
            "note: destination archive {} cannot be read ({e}); if it is a copy, it may be copied again",
            id.object_name()
        ));
    }
    let mut ids = HashSet::new();
    for (id, meta) in list.archives {
        ids.insert(id);
        ids.extend(meta.copied_from);
    }
    Ok(ids)
}

/// Copies chunks from one repository into another, remembering each chunk's new id.
pub struct Copier<'a> {
    src: &'a Repository,
    src_index: &'a ChunkIndex,
    dst: &'a Repository,
    /// Source chunk id → destination chunk id, for every chunk seen in this run.
    ids: HashMap<ChunkId, ChunkId>,
    blob: Vec<u8>,
}

impl<'a> Copier<'a> {
    pub fn new(src: &'a Repository, src_index: &'a ChunkIndex, dst: &'a Repository) -> Self {
        Self {
            src,
            src_index,
            dst,
            ids: HashMap::new(),
            blob: Vec::new(),
        }
    }

    /// Copies one archive into the destination and commits it. Returns the destination's
    /// index, with this archive's chunks. An error ends the session as a backup's would: an
    /// interrupt keeps what is stored (indexed, for the next run), and nothing is committed
    /// that names chunks not durable.
    pub fn copy_archive(
        &mut self,
        index: ChunkIndex,
        source: ArchiveId,
        meta: &ArchiveMeta,
        progress: &Progress,
        interrupt: &Interrupt,
    ) -> Result<(Outcome, ChunkIndex)> {
        let dst = self.dst;
        let (id, index, copy, upload) = dst.write(index, |up| {
            let mut items = ItemStreamWriter::new(dst.metadata_chunker()?);
            let mut stats = meta.stats;
            stats.compressed_size = 0;
            self.rewrite(
                meta,
                up,
                &mut items,
                &mut stats.compressed_size,
                progress,
                interrupt,
            )?;
            interrupt.check()?;
            let stream = items.finish(up)?;
            let upload = up.stats();
            stats.deduplicated_size = upload.new_stored_bytes;
            stats.metadata_size = items.bytes;
            let copy = ArchiveMeta {
                items: stream,
                stats,
                copied_from: Some(meta.copied_from.unwrap_or(source)),
                replaces: None,
                ..meta.clone()
            };
            interrupt.check()?;
            let sealed = archive::seal(dst, &copy)?;
            Ok(Commit::archive(sealed).map(move |(id, index)| (id, index, copy, upload)))
        })?;
        let outcome = Outcome::Copied {
            source,
            id,
            meta: copy,
            new_chunks: upload.new_chunks,
            new_bytes: upload.new_stored_bytes,
        };
        Ok((outcome, index))
    }

    /// Reads the archive's items in batches, copies the chunks each batch needs, and writes
    /// the items again with their new ids.
    fn rewrite(
        &mut self,
        meta: &ArchiveMeta,
        up: &mut WriteSession,
        out: &mut ItemStreamWriter,
        compressed: &mut u64,
        progress: &Progress,
        interrupt: &Interrupt,
    ) -> Result<()> {
        let mut batch: Vec<Item> = Vec::new();
        let mut batch_bytes = 0u64;
        let (mut done_items, mut done_bytes) = (0u64, 0u64);
        let total_items =
            meta.stats.files + meta.stats.dirs + meta.stats.symlinks + meta.stats.others;
        for item in archive::items(self.src, self.src_index, meta) {
            let item = item?;
            batch_bytes += item
                .chunks
                .iter()
                .filter(|c| !self.ids.contains_key(&c.id))
                .map(|c| u64::from(c.len))
                .sum::<u64>();
            batch.push(item);
            if batch_bytes >= BATCH_BYTES || batch.len() >= BATCH_ITEMS {
                interrupt.check()?;
                done_bytes += batch_bytes;
                done_items += batch.len() as u64;
                self.copy_chunks(&batch, up)?;
                self.write_items(&mut batch, up, out, compressed)?;
                batch_bytes = 0;
                progress.set(|| crate::util::progress::Shown {
                    message: format!(
                        "copying {:?}: {done_items}/{total_items} items, {} read",
                        meta.name,
                        crate::util::progress::size(done_bytes)
                    ),
                    figures: crate::util::progress::Figures {
                        items_done: Some(done_items),
                        items_total: Some(total_items),
                        bytes_done: Some(done_bytes),
                        ..Default::default()
                    },
                });
            }
        }
        interrupt.check()?;
        self.copy_chunks(&batch, up)?;
        self.write_items(&mut batch, up, out, compressed)
    }

    /// Copies the chunks of `items` that this run has not seen, reading runs of neighbours in
    /// the source's packs with one ranged read each.
    fn copy_chunks(&mut self, items: &[Item], up: &mut WriteSession) -> Result<()> {
        let mut plan = RunPlanner::new(MAX_READ);
        let mut planned = HashSet::new();
        for c in items.iter().flat_map(|i| &i.chunks) {
            if self.ids.contains_key(&c.id) || !planned.insert(c.id) {
                continue;
            }
            let (pack, loc) = self
                .src_index
                .stored(&c.id)
                .ok_or_else(|| source_damaged(content::missing(c)))?;
            plan.push(*c, pack, u64::from(loc.offset), u64::from(loc.len));
        }
        let contents = Contents::new(self.src, self.src_index);
        let (src, dst) = (self.src, self.dst);
        let (ids, buf) = (&mut self.ids, &mut self.blob);
        for run in &plan.runs {
            contents.read_run_blobs(run, |c, sealed, pack| {
                let what = format!("chunk {} in {pack}", c.id);
                let opened =
                    blob::open_compressed(src.crypto(), BlobKind::Chunk, &c.id.0, sealed, &what)
                        .map_err(source_damaged)?;
                content::check_len(c, &opened.plain).map_err(source_damaged)?;
                let id = dst.crypto().id_of(&opened.plain);
                if up.has(&id) {
                    up.count_reused(u64::from(c.len));
                } else {
                    let crc = blob::seal_compressed_into(
                        dst.crypto(),
                        BlobKind::Chunk,
                        &id.0,
                        &opened,
                        buf,
                    )?;
                    up.add_sealed(id, buf, crc, c.len)?;
                }
                ids.insert(c.id, id);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Writes `items` (emptied) with their chunks' destination ids.
    fn write_items(
        &self,
        items: &mut Vec<Item>,
        up: &mut WriteSession,
        out: &mut ItemStreamWriter,
        compressed: &mut u64,
    ) -> Result<()> {
        for mut item in items.drain(..) {
            for c in &mut item.chunks {
                c.id = *self.ids.get(&c.id).ok_or_else(|| {
                    Error::corrupt(format!("chunk {}", c.id), "was not copied (a bug)")
                })?;
                if item.kind == ItemKind::File {
                    if let Some(loc) = up.index().get(&c.id) {
                        *compressed += u64::from(loc.sizes().0);
                    }
                }
            }
            out.push(&item, up)?;
        }
        Ok(())
    }
}

/// A source problem, said as one: the copy stops, and the source should be checked.
fn source_damaged(e: Error) -> Error {
    match e {
        Error::Corrupt { what, reason } => Error::Corrupt {
            what: format!("source {what}"),
            reason: format!("{reason}; run cairn check on the source"),
        },
        e => e,
    }
}
