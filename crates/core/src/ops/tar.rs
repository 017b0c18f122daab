//! Archive items written as a POSIX (PAX) tar stream: `export-tar`, and `dump` of a directory.
//!
//! Each entry is a ustar header, preceded by a PAX extended header (`x`) for whatever ustar
//! cannot hold: nanosecond mtimes (`mtime`), names and link targets over 100 bytes (`path`,
//! `linkpath`), ids over 2,097,151 (`uid`, `gid`), long user and group names, sizes of 8 GiB
//! and more (`size`), extended attributes (`SCHILY.xattr.NAME`, raw bytes, as GNU tar and
//! libarchive write them) and ACLs (`SCHILY.acl.access`, `SCHILY.acl.default`, in the short
//! text form). A later name of a hardlinked file is a link entry (`1`) to the first name
//! written. GNU tar restores all of it (`tar --xattrs --acls -xpf`). Inode flags are
//! `SCHILY.fflags` (libarchive's names: bsdtar `--fflags` restores them), and a file with
//! holes is written sparse ([`sparse`]: PAX sparse format 1.0, which GNU tar and bsdtar
//! restore with its holes).

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use tar::EntryType;

use crate::archive::content::Contents;
use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind};
use crate::ops::extract::Selection;
use crate::util::id::ChunkId;

mod ahead;
mod header;
mod sparse;

use header::{entry_head, padding};

/// Writes items to `out` as tar entries.
pub struct TarWriter<'a, W: Write> {
    out: BufWriter<W>,
    /// Names `out` in errors ("<stdout>", a file's path).
    sink: String,
    contents: Contents<'a>,
    /// The first name written of each hardlinked inode.
    first_names: HashMap<[u8; 16], Vec<u8>>,
    /// The id of a chunk of zeros of the largest size (a hole), once a file may have one.
    hole: Option<ChunkId>,
    pub entries: u64,
    pub bytes: u64,
}

impl<'a, W: Write> TarWriter<'a, W> {
    /// Writes to `out` through a buffer of 1 MiB (one write of that size fills a pipe widened
    /// to it).
    pub fn new(out: W, sink: &str, contents: Contents<'a>) -> Self {
        Self {
            out: BufWriter::with_capacity(1 << 20, out),
            sink: sink.to_string(),
            contents,
            first_names: HashMap::new(),
            hole: None,
            entries: 0,
            bytes: 0,
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.sink, e))
    }

    /// Writes `bytes`, entries made ahead, without copying them into the buffer first when
    /// they are many (what the buffer holds goes first).
    fn write_made(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() < MADE_DIRECT {
            return self.write(bytes);
        }
        self.out
            .flush()
            .and_then(|()| self.out.get_mut().write_all(bytes))
            .map_err(|e| Error::io(&self.sink, e))
    }

    /// Writes `items` under their stored paths, each small file's entry made ahead on the
    /// contents' threads ([`ahead`]) while the ones before it are written. A file left out is
    /// said on stderr and added to `skipped`.
    fn append_batch(&mut self, items: &[Item], skipped: &mut Vec<String>) -> Result<()> {
        let wanted = self.made_ahead(items);
        let groups = ahead::groups(items, &wanted);
        let contents = Contents {
            threads: 1,
            ..self.contents
        };
        let threads = self.contents.threads.min(ahead::THREADS);
        let make = |g: &ahead::Group| ahead::make(&contents, &items[g.clone()], &wanted[g.clone()]);
        let mut next = items.iter();
        crate::util::parallel::in_order(&groups, threads, make, |entries| -> Result<()> {
            let written = self.append_made(&mut next, &entries, skipped);
            entries.recycle();
            written
        })
    }

    /// Writes a group's items: the entries made ahead as they are, consecutive ones together;
    /// consecutive files written as they are stored through one pipeline
    /// ([`Self::append_files`]); the others one by one.
    fn append_made<'i>(
        &mut self,
        items: &mut impl Iterator<Item = &'i Item>,
        entries: &ahead::Entries,
        skipped: &mut Vec<String>,
    ) -> Result<()> {
        let mut pending: std::ops::Range<usize> = 0..0;
        let mut files: Vec<&Item> = Vec::new();
        for piece in &entries.pieces {
            let Some(item) = items.next() else {
                break;
            };
            if piece.is_none() && self.streams(item, &files) {
                self.write_made(&entries.bytes[std::mem::replace(&mut pending, 0..0)])?;
                files.push(item);
                continue;
            }
            self.append_files(&std::mem::take(&mut files))?;
            if let Some(entry) = piece {
                // The first name of a hardlinked file, remembered for its later names.
                let _ = self.first_name_of(item, &item.path);
                self.entries += 1;
                self.bytes += item.size;
                if pending.end != entry.start {
                    self.write_made(&entries.bytes[pending])?;
                    pending = entry.start..entry.start;
                }
                pending.end = entry.end;
                continue;
            }
            self.write_made(&entries.bytes[std::mem::replace(&mut pending, 0..0)])?;
            if let Some(why) = self.append_read(item, &item.path, None)? {
                crate::say!("warning: {why}");
                skipped.push(why);
            }
        }
        self.append_files(&files)?;
        self.write_made(&entries.bytes[pending])
    }

    /// Whether `item` is written as it is stored ([`ahead::as_stored`]) after `files`: every
    /// chunk of it in the repository, and neither a later name of a hardlinked file nor the
    /// inode of one of `files`.
    fn streams(&self, item: &Item, files: &[&Item]) -> bool {
        let max_chunk = self.contents.repo.config().chunker.params.max_size;
        let first = |h: [u8; 16]| {
            !self.first_names.contains_key(&h) && files.iter().all(|f| f.hardlink_id != Some(h))
        };
        ahead::as_stored(item, max_chunk)
            && item.hardlink_id.is_none_or(first)
            && item
                .chunks
                .iter()
                .all(|c| self.contents.index.stored(&c.id).is_some())
    }

    /// Writes `files` ([`Self::streams`]) one after another, their contents read and
    /// decrypted in one pipeline: the next file's first runs are decrypted while the end of
    /// the one before is written (a pipeline for each file left the threads waiting at each
    /// file's end: eight files of 128 MiB took 1.14 times their limit). A file's header is
    /// written when its turn comes, before its contents or the error that reading them met.
    fn append_files(&mut self, files: &[&Item]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let lists: Vec<&[ChunkRef]> = files.iter().map(|f| &f.chunks[..]).collect();
        let contents = self.contents;
        let mut current: Option<usize> = None;
        contents.decode_files(&lists, |i, piece| {
            if current != Some(i) {
                if let Some(done) = current {
                    self.end_file(files[done])?;
                }
                let item = files[i];
                let _ = self.first_name_of(item, &item.path);
                let mut head = Vec::with_capacity(1536);
                entry_head(item, &item.path, None, None, &mut head)?;
                self.write(&head)?;
                current = Some(i);
            }
            match piece {
                Ok(piece) => self.write(piece),
                // Returned by `decode_files`, after the header of the file it ends.
                Err(_) => Ok(()),
            }
        })?;
        match current {
            Some(done) => self.end_file(files[done]),
            None => Ok(()),
        }
    }

    /// The padding after a file's contents, and the file counted.
    fn end_file(&mut self, item: &Item) -> Result<()> {
        self.pad(item.size)?;
        self.entries += 1;
        self.bytes += item.size;
        Ok(())
    }

    /// Which of `items` are made ahead ([`ahead::wanted`]), each inode once (a later name of
    /// a hardlinked file is written as a link to the first, without its contents).
    fn made_ahead(&self, items: &[Item]) -> Vec<bool> {
        let max_chunk = self.contents.repo.config().chunker.params.max_size;
        let mut seen = std::collections::HashSet::new();
        items
            .iter()
            .map(|item| {
                let later = item.kind == ItemKind::File
                    && item
                        .hardlink_id
                        .is_some_and(|h| self.first_names.contains_key(&h) || !seen.insert(h));
                ahead::wanted(item, later, max_chunk)
            })
            .collect()
    }

    /// Writes one item, under `name` (its stored path, or a shorter one with
    /// `--strip-components`). A file some of whose chunks the repository does not have (say,
    /// marked damaged by `check --repair`) is left out, before anything of it is written:
    /// `Ok(Some(why))`.
    pub fn append(&mut self, item: &Item, name: &[u8]) -> Result<Option<String>> {
        self.append_read(item, name, None)
    }

    /// [`append`](Self::append), with a regular file's contents already read when `read`
    /// holds them.
    fn append_read(
        &mut self,
        item: &Item,
        name: &[u8],
        read: Option<&[u8]>,
    ) -> Result<Option<String>> {
        if let Some(why) = self.missing_chunk(item) {
            return Ok(Some(why));
        }
        let link_to = self.first_name_of(item, name);
        let holes = match (item.kind, &link_to) {
            (ItemKind::File, None) => self.sparse_plan(item)?,
            _ => None,
        };
        let mut head = Vec::with_capacity(1536);
        let segments = holes.as_ref().map(|p| &p.segments[..]);
        let kind = entry_head(item, name, link_to.as_deref(), segments, &mut head)?;
        self.write(&head)?;
        if kind == EntryType::Regular {
            self.write_contents(item, holes, read)?;
        }
        self.entries += 1;
        Ok(None)
    }

    /// Why a file cannot be exported: a chunk of it is missing from the repository.
    fn missing_chunk(&self, item: &Item) -> Option<String> {
        if item.kind != ItemKind::File {
            return None;
        }
        let c = item
            .chunks
            .iter()
            .find(|c| self.contents.index.stored(&c.id).is_none())?;
        Some(format!(
            "{}: not exported: chunk {} is missing from the repository",
            item.display_path(),
            c.id
        ))
    }

    /// For a later name of a hardlinked file, its first name; the first one is remembered.
    fn first_name_of(&mut self, item: &Item, name: &[u8]) -> Option<Vec<u8>> {
        let h = item.hardlink_id.filter(|_| item.kind == ItemKind::File)?;
        match self.first_names.get(&h) {
            Some(first) => Some(first.clone()),
            None => {
                self.first_names.insert(h, name.to_vec());
                None
            }
        }
    }

    /// A regular file's contents, checked against its size, and the padding after them; for
    /// a sparse file, the map of its segments and their bytes.
    fn write_contents(
        &mut self,
        item: &Item,
        holes: Option<SparsePlan>,
        read: Option<&[u8]>,
    ) -> Result<()> {
        let sink = self.sink.clone();
        let written = match holes {
            Some(plan) => {
                let map = sparse::map(&plan.segments);
                self.write(&map)?;
                let data = match plan.held {
                    Some(bytes) => {
                        self.write(&bytes)?;
                        bytes.len() as u64
                    }
                    None => self.contents.write_to(&plan.chunks, &mut self.out, &sink)?,
                };
                map.len() as u64 + data
            }
            None => match read {
                Some(data) => {
                    self.write(data)?;
                    data.len() as u64
                }
                None => self.contents.write_to(&item.chunks, &mut self.out, &sink)?,
            },
        };
        self.pad(written)?;
        self.bytes += item.size;
        Ok(())
    }

    /// How a file with holes is written (see [`sparse`]); `None` for a file without.
    fn sparse_plan(&mut self, item: &Item) -> Result<Option<SparsePlan>> {
        let stored: u64 = item.chunks.iter().map(|c| u64::from(c.len)).sum();
        if stored != item.size {
            return Err(Error::corrupt(
                format!("item {}", item.display_path()),
                format!("its chunks hold {stored} bytes, its size is {}", item.size),
            ));
        }
        let max = self.contents.repo.config().chunker.params.max_size;
        if !item.chunks.iter().any(|c| c.len == max) {
            return Ok(None);
        }
        let crypto = self.contents.repo.crypto();
        let hole = *self
            .hole
            .get_or_insert_with(|| crypto.id_of(&vec![0u8; max as usize]));
        let Some(coarse) = sparse::segments(&item.chunks, &hole) else {
            return Ok(None);
        };
        let chunks = sparse::data_chunks(&item.chunks, &hole);
        let data_len: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
        if data_len > sparse::READ_AHEAD {
            return Ok(Some(SparsePlan {
                segments: coarse,
                chunks,
                held: None,
            }));
        }
        let mut data = Vec::with_capacity(data_len as usize);
        self.contents.write_to(&chunks, &mut data, "memory")?;
        let pieces = sparse::refine(&coarse, &data, item.size);
        let mut held = Vec::new();
        for &(_, len, pos) in &pieces {
            held.extend_from_slice(&data[pos..pos + len as usize]);
        }
        Ok(Some(SparsePlan {
            segments: pieces.iter().map(|&(o, l, _)| (o, l)).collect(),
            chunks,
            held: Some(held),
        }))
    }

    /// Zeros up to the next 512-byte block.
    fn pad(&mut self, len: u64) -> Result<()> {
        self.write(&[0u8; 512][..padding(len)])
    }

    /// The two zero blocks that end a tar stream; returns the writer.
    pub fn finish(mut self) -> Result<W> {
        self.write(&[0u8; 1024])?;
        // Flushed through to `W` (stdout keeps what follows its last newline), so that an
        // output that fails at the end fails the export.
        self.out.flush().map_err(|e| Error::io(&self.sink, e))?;
        let sink = self.sink;
        self.out
            .into_inner()
            .map_err(|e| Error::io(&sink, e.into_error()))
    }
}

/// A sparse file's entry: its data segments, the chunks that hold them, and their bytes when
/// they were read ahead.
struct SparsePlan {
    segments: Vec<(u64, u64)>,
    chunks: Vec<crate::format::item::ChunkRef>,
    held: Option<Vec<u8>>,
}

/// What a tar stream held.
pub struct Written {
    pub entries: u64,
    pub bytes: u64,
    pub unmatched: Vec<String>,
    /// Files left out (their data is missing), with why; already said on stderr.
    pub skipped: Vec<String>,
}

/// Entries made ahead and written together are handed to the output directly, without
/// copying them into its buffer first, from this many bytes.
const MADE_DIRECT: usize = 64 << 10;

/// Writes the items `selection` picks (export-tar, dump) as tar entries to `out`, and the
/// end of the stream. The items are read and picked on a thread of their own, a batch ahead of
/// the one being written: read between batches, they left the threads that make entries idle
/// for a tenth of an export of small files.
pub fn write_selected(
    contents: Contents<'_>,
    items: impl Iterator<Item = Result<Item>> + Send,
    selection: Selection,
    out: impl Write,
    sink: &str,
) -> Result<Written> {
    let mut tar = TarWriter::new(out, sink, contents);
    let mut skipped = Vec::new();
    let (batches, ready) = std::sync::mpsc::sync_channel(1);
    let (written, selection) = std::thread::scope(|s| {
        let reader = s.spawn(move || read_batches(items, selection, batches));
        // Each batch of the items picked, and the first error reading them, if any: the items
        // before it are written first, as they were when each was written as it came. Ending
        // early drops `ready`, which stops the reader.
        let written = ready.iter().try_for_each(|(batch, failed)| {
            tar.append_batch(&batch, &mut skipped)?;
            failed.map_or(Ok(()), Err)
        });
        drop(ready);
        let selection = reader
            .join()
            .map_err(|_| Error::invalid("the thread reading the archive's items failed"));
        (written, selection)
    });
    written?;
    let selection = selection?;
    let (entries, bytes) = (tar.entries, tar.bytes);
    tar.finish()?;
    Ok(Written {
        entries,
        bytes,
        unmatched: selection.unmatched(),
        skipped,
    })
}

/// A batch of items picked, and the error that ended the reading, if one did.
type Batch = (Vec<Item>, Option<Error>);

/// Reads `items`, picks them with `selection`, and sends them in batches (from
/// [`ahead::FIRST_BATCH`] items, doubling up to [`ahead::BATCH`], each holding at most about
/// [`ahead::BATCH_HELD`] bytes of items) until they end, one fails, or the writer stops taking them. Returns the selection, which
/// knows what it matched.
fn read_batches(
    items: impl Iterator<Item = Result<Item>>,
    mut selection: Selection,
    batches: std::sync::mpsc::SyncSender<Batch>,
) -> Selection {
    let mut items = items.peekable();
    let mut size = ahead::FIRST_BATCH;
    while items.peek().is_some() {
        let mut batch = Vec::with_capacity(size);
        let (mut failed, mut held) = (None, 0);
        for item in items.by_ref() {
            match item {
                Ok(item) => {
                    if let Some(item) = selection.pick(item) {
                        held += ahead::held(&item);
                        batch.push(item);
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            if batch.len() == size || held >= ahead::BATCH_HELD {
                break;
            }
        }
        size = (size * 2).min(ahead::BATCH);
        let last = failed.is_some();
        if batches.send((batch, failed)).is_err() || last {
            break;
        }
    }
    selection
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::id::ChunkId;

    fn batches_of(items: Vec<Item>) -> Vec<Vec<Item>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(100);
        read_batches(items.into_iter().map(Ok), Selection::default(), tx);
        rx.iter()
            .map(|(batch, failed)| {
                assert!(failed.is_none());
                batch
            })
            .collect()
    }

    /// Batches grow from the first, and end at their bytes of items as well as their count.
    #[test]
    fn batches_grow_and_stay_within_their_bytes() {
        let small: Vec<Item> = (0..40_000)
            .map(|i| Item::new(ItemKind::Dir, format!("d{i}").into_bytes()))
            .collect();
        let sizes: Vec<usize> = batches_of(small).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1024, 2048, 4096, 8192, 16384, 8256]);
        let chunk = ChunkRef {
            id: ChunkId([0; 32]),
            len: 1,
        };
        let mut large = Item::new(ItemKind::File, b"f".to_vec());
        large.chunks = vec![chunk; 100_000];
        let batches = batches_of(vec![large; 200]);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 200);
        for b in &batches {
            let held: usize = b.iter().map(ahead::held).sum();
            let one = ahead::held(&b[0]);
            assert!(
                held < ahead::BATCH_HELD + one,
                "{} items, {held} bytes",
                b.len()
            );
        }
        assert!(batches.len() > 3, "{} batches", batches.len());
    }
}
