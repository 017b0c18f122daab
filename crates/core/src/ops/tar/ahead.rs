//! Small files' tar entries made ahead, on the contents' threads, while the ones before them
//! are written: a group of consecutive files is read with as few ranged reads as their chunks
//! allow, and each file becomes its whole entry (its headers, its contents decrypted in
//! place, its padding) in one buffer that the writer hands to its output as it is.
//!
//! One thread reading and decrypting 20,000 files of 4 KiB one after another took 2.4 times
//! the time the machine needs. With the contents read ahead but the headers made, and every
//! byte copied again, on the writing thread, it took 1.19 times its limit: the step is bound
//! by its CPU, and that thread's copies and headers were the work beyond the limit's.

use std::ops::Range;

use crate::archive::content::Contents;
use crate::format::item::{ChunkRef, Item, ItemKind};
use crate::util::recycle::Recycler;

/// Items written together: the small files among them are made into entries on the
/// contents' threads, a few groups ahead of the one being written. At a batch's end the
/// threads wait for the writer to catch up, so batches grow from the first (small, so that
/// the threads start early) to the largest (so that they seldom wait).
pub const FIRST_BATCH: usize = 1024;
/// The largest batch.
pub const BATCH: usize = 16384;
/// A batch ends once its items hold this many bytes (their chunk lists, names and extended
/// attributes): three batches are in memory at once (one written, one waiting, one read).
pub const BATCH_HELD: usize = 16 << 20;

/// About how many bytes `item` holds in memory.
pub fn held(item: &Item) -> usize {
    let xattrs: usize = item.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum();
    std::mem::size_of::<Item>()
        + item.chunks.len() * std::mem::size_of::<ChunkRef>()
        + item.path.len()
        + item.link_target.len()
        + xattrs
}

/// Files up to this size are made ahead whole (consecutive large ones are read through one
/// pipeline of runs spread over the threads: `TarWriter::append_files`).
const SMALL_FILE: u64 = 1 << 20;

/// Small files made together: a group ends after this many…
const GROUP_FILES: usize = 64;
/// …or before it would hold more than this many bytes of them.
const GROUP_BYTES: u64 = 1 << 20;

/// Threads that work ahead at most, whatever `--threads` says: each may be two groups ahead
/// of what is written, so this bounds what waits in memory (about 16 MiB).
pub const THREADS: usize = 8;

/// A group's buffers, handed back once written and used again: fresh ones had the kernel
/// map and zero their pages for every group.
static BUFFERS: Recycler = Recycler::new();

/// A run of consecutive items of a batch, made ahead together.
pub type Group = Range<usize>;

/// Whether `item` is made ahead: a small file written as it is stored ([`as_stored`]).
/// `later` says it is a later name of a hardlinked file, which is written as a link to the
/// first, without contents.
pub fn wanted(item: &Item, later: bool, max_chunk: u32) -> bool {
    !later && item.size <= SMALL_FILE && as_stored(item, max_chunk)
}

/// Whether `item`'s entry holds its chunks as they are: a regular file with contents, its
/// chunks holding its size, none of them of the chunker's largest size `max_chunk` (a file
/// that may have holes is written sparse; one whose chunks do not hold its size is an error).
pub fn as_stored(item: &Item, max_chunk: u32) -> bool {
    let stored: u64 = item.chunks.iter().map(|c| u64::from(c.len)).sum();
    item.kind == ItemKind::File
        && !item.chunks.is_empty()
        && stored == item.size
        && item.chunks.iter().all(|c| c.len != max_chunk)
}

/// The batch cut into groups: consecutive items holding up to [`GROUP_FILES`] files made
/// ahead, of [`GROUP_BYTES`] together (whatever else lies among them rides along).
pub fn groups(items: &[Item], wanted: &[bool]) -> Vec<Group> {
    let mut groups = Vec::new();
    let (mut start, mut files, mut bytes) = (0, 0, 0u64);
    for (i, item) in items.iter().enumerate() {
        if !wanted[i] {
            continue;
        }
        if files == GROUP_FILES || (files > 0 && bytes + item.size > GROUP_BYTES) {
            groups.push(start..i);
            (start, files, bytes) = (i, 0, 0);
        }
        files += 1;
        bytes += item.size;
    }
    if start < items.len() {
        groups.push(start..items.len());
    }
    groups
}

/// A group's entries: for each item, where its whole entry lies in `bytes` (`None`: not made
/// ahead, so written when its turn comes). Entries of consecutive items lie one after another.
pub struct Entries {
    pub bytes: Vec<u8>,
    pub pieces: Vec<Option<Range<usize>>>,
}

impl Entries {
    /// Hands the buffer back for a later group.
    pub fn recycle(self) {
        BUFFERS.give(self.bytes);
    }
}

/// Makes the entries of the files of `group` that are `wanted`, under their stored paths:
/// each file's headers, then room for its contents and padding, into which its chunks are
/// decrypted where they belong. When reading them together fails, each file is read on its
/// own, and one that fails is left to be written when its turn comes: it then writes what it
/// can and fails there, as it would have without working ahead.
pub fn make(contents: &Contents<'_>, group: &[Item], wanted: &[bool]) -> Entries {
    let room: u64 = group
        .iter()
        .zip(wanted)
        .filter(|(_, w)| **w)
        .map(|(i, _)| i.size + 3 * 512)
        .sum();
    let mut bytes = BUFFERS.take(usize::try_from(room).unwrap_or(usize::MAX));
    bytes.clear();
    let mut chunks: Vec<(ChunkRef, usize)> = Vec::new();
    // Each item's entry, and which of `chunks` are its contents.
    let mut made: Vec<Option<(Range<usize>, Range<usize>)>> = Vec::with_capacity(group.len());
    for (item, wanted) in group.iter().zip(wanted) {
        let start = bytes.len();
        if !*wanted || super::header::entry_head(item, &item.path, None, None, &mut bytes).is_err()
        {
            bytes.truncate(start);
            made.push(None);
            continue;
        }
        let first = chunks.len();
        let mut at = bytes.len();
        for c in &item.chunks {
            chunks.push((*c, at));
            at += c.len as usize;
        }
        let end = at + super::header::padding(item.size);
        bytes.resize(end, 0);
        made.push(Some((start..end, first..chunks.len())));
    }
    if contents.decode_at(&chunks, &mut bytes).is_err() {
        // A file with a chunk the index lacks (say, after `check --repair`) is left out, and
        // the others are read together again; when that fails too, each on its own.
        for m in made.iter_mut() {
            let missing = m.as_ref().is_some_and(|(_, mine)| {
                let mut own = chunks[mine.clone()].iter();
                own.any(|(c, _)| contents.index.stored(&c.id).is_none())
            });
            if missing {
                *m = None;
            }
        }
        let rest: Vec<(ChunkRef, usize)> = made
            .iter()
            .flatten()
            .flat_map(|(_, mine)| chunks[mine.clone()].iter().copied())
            .collect();
        if contents.decode_at(&rest, &mut bytes).is_err() {
            for m in made.iter_mut() {
                if let Some((_, mine)) = m {
                    if contents
                        .decode_at(&chunks[mine.clone()], &mut bytes)
                        .is_err()
                    {
                        *m = None;
                    }
                }
            }
        }
    }
    let pieces = made
        .into_iter()
        .map(|m| m.map(|(entry, _)| entry))
        .collect();
    Entries { bytes, pieces }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::id::ChunkId;

    fn file(size: u64, chunks: &[u32]) -> Item {
        let mut item = Item::new(ItemKind::File, b"f".to_vec());
        item.size = size;
        item.chunks = chunks
            .iter()
            .map(|&len| ChunkRef {
                id: ChunkId([1; 32]),
                len,
            })
            .collect();
        item
    }

    #[test]
    fn only_small_whole_files_without_holes_are_made_ahead() {
        let max = 8 << 20;
        assert!(wanted(&file(5, &[2, 3]), false, max));
        assert!(!wanted(&file(5, &[2, 3]), true, max), "a later hardlink");
        assert!(
            !wanted(&file(6, &[2, 3]), false, max),
            "chunks short of its size"
        );
        assert!(!wanted(&file(0, &[]), false, max), "empty");
        assert!(
            !wanted(&file(2 << 20, &[1 << 20, 1 << 20]), false, max),
            "large"
        );
        assert!(
            !wanted(&file(4, &[4]), false, 4),
            "a chunk of the largest size"
        );
        let mut dir = file(5, &[5]);
        dir.kind = ItemKind::Dir;
        assert!(!wanted(&dir, false, max));
    }

    #[test]
    fn groups_end_at_their_count_or_their_bytes() {
        let items: Vec<Item> = (0..200).map(|_| file(4096, &[4096])).collect();
        let all = vec![true; items.len()];
        let g = groups(&items, &all);
        assert_eq!(
            g.iter().map(|r| r.len()).collect::<Vec<_>>(),
            [64, 64, 64, 8]
        );
        let big: Vec<Item> = (0..5).map(|_| file(400 << 10, &[400 << 10])).collect();
        let g = groups(&big, &[true; 5]);
        assert_eq!(g, [0..2, 2..4, 4..5]);
    }
}
