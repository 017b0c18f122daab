//! Parallel fetching for extract: file contents are read from packs in coalesced ranges,
//! authenticated and decompressed by workers, and written straight into the open files.
//!
//! The main thread creates each file (safely, relative to its parent's descriptor) and hands
//! its chunks to the [`Planner`] as pieces. The planner merges pieces that lie close together
//! in the same pack into one ranged read (items come in the order they were backed up, so
//! their chunks are mostly adjacent in packs). Workers take such batches, read once, and for
//! each piece verify, decompress and `pwrite` it at its offset. The worker that writes a
//! file's last piece sets its size and metadata and reports the file done; a file with a bad
//! piece is reported failed, and the main thread removes it.
//!
//! One thread writes a file at a time ([`OpenFile::write`]): a worker that finds another
//! writing the same file leaves its piece in the file's queue, for the writer to write next,
//! and goes on decoding. Two threads writing one file otherwise take turns on its inode lock,
//! the waiting one spinning: 14% of extract's CPU on a file of 1 GiB.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};

use super::attrs::Applier;
use crate::format::item::Item;
use crate::repo::Repository;
use crate::store::{ByteRange, StoreResult};
use crate::util::id::{ChunkId, PackId};

/// Reads of one pack are merged across gaps up to this size…
const MAX_GAP: u64 = 256 * 1024;
/// …into reads of at most this size.
const MAX_BATCH: u64 = 16 << 20;
/// Decoded bytes a file's queue holds before the workers that add to it wait for its writer.
const MAX_QUEUED: usize = 8 << 20;

/// A file being written by the workers.
pub struct OpenFile {
    pub file: File,
    pub item: Item,
    /// Owner to set (root only).
    pub owner: Option<(rustix::fs::Uid, rustix::fs::Gid)>,
    remaining: AtomicUsize,
    failed: Mutex<Option<String>>,
    /// A write failed because the target is full.
    no_space: AtomicBool,
    /// Where the last byte written so far ends: the file's size, as it was created empty.
    written_end: AtomicU64,
    writes: Mutex<Writes>,
    /// Signalled when the writer takes a piece from the queue, or stops.
    taken: Condvar,
}

/// Who writes a file, and what waits for that writer.
#[derive(Default)]
struct Writes {
    busy: bool,
    /// Decoded pieces and their offsets in the file.
    queue: VecDeque<(u64, Vec<u8>)>,
    queued: usize,
}

impl OpenFile {
    pub fn new(
        file: File,
        item: Item,
        owner: Option<(rustix::fs::Uid, rustix::fs::Gid)>,
    ) -> Arc<Self> {
        let pieces = item.chunks.len();
        Arc::new(Self {
            file,
            item,
            owner,
            remaining: AtomicUsize::new(pieces),
            failed: Mutex::new(None),
            no_space: AtomicBool::new(false),
            written_end: AtomicU64::new(0),
            writes: Mutex::new(Writes::default()),
            taken: Condvar::new(),
        })
    }

    fn writes(&self) -> MutexGuard<'_, Writes> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one decoded piece, or queues it when another thread is writing this file: the
    /// thread writing it then writes every piece queued meanwhile. Each written piece counts
    /// as done ([`piece_done`]). Waits only while the queue holds more than [`MAX_QUEUED`].
    fn write(
        self: &Arc<Self>,
        offset: u64,
        plain: Vec<u8>,
        done: &Sender<Done>,
        applier: &Applier<'_>,
    ) {
        let mut w = self.writes();
        if w.busy {
            w.queued += plain.len();
            w.queue.push_back((offset, plain));
            while w.busy && w.queued > MAX_QUEUED {
                w = self.taken.wait(w).unwrap_or_else(|p| p.into_inner());
            }
            return;
        }
        w.busy = true;
        drop(w);
        let mut next = Some((offset, plain));
        while let Some((offset, plain)) = next {
            match super::write_sparse(&self.file, offset, &plain) {
                Ok(end) => {
                    self.written_end.fetch_max(end, Ordering::AcqRel);
                }
                Err(e) => {
                    if is_no_space(&e) {
                        self.no_space.store(true, Ordering::Release);
                    }
                    self.fail(e.to_string());
                }
            }
            drop(plain);
            piece_done(self, done, applier);
            let mut w = self.writes();
            next = w.queue.pop_front();
            match &next {
                Some((_, p)) => w.queued -= p.len(),
                None => w.busy = false,
            }
            drop(w);
            self.taken.notify_all();
        }
    }

    fn fail(&self, reason: String) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(reason);
        }
    }
}

/// A file's outcome, sent to the main thread.
pub struct Done {
    pub file: Arc<OpenFile>,
    pub error: Option<String>,
    /// The error was the target's file system being full.
    pub no_space: bool,
    pub warnings: Vec<String>,
}

/// One chunk of one file: where it goes and where it is.
pub struct Piece {
    pub file: Arc<OpenFile>,
    pub file_offset: u64,
    pub id: ChunkId,
    pub plain_len: u32,
    pub blob_offset: u64,
    pub blob_len: u64,
}

pub struct Batch {
    pack: PackId,
    start: u64,
    end: u64,
    pieces: Vec<Piece>,
}

/// Groups pieces into coalesced reads.
pub struct Planner {
    pending: Option<Batch>,
    tx: Sender<Batch>,
}

impl Planner {
    pub fn new(tx: Sender<Batch>) -> Self {
        Self { pending: None, tx }
    }

    /// Adds a piece; may hand a finished batch to the workers (blocking while they are busy).
    /// `false` if the workers are gone.
    pub fn add(&mut self, pack: PackId, piece: Piece) -> bool {
        let (off, end) = (piece.blob_offset, piece.blob_offset + piece.blob_len);
        if let Some(b) = &mut self.pending {
            let fits = b.pack == pack
                && off >= b.start
                && off <= b.end + MAX_GAP
                && end.max(b.end) - b.start <= MAX_BATCH;
            if fits {
                b.end = b.end.max(end);
                b.pieces.push(piece);
                return true;
            }
        }
        let ok = self.flush();
        self.pending = Some(Batch {
            pack,
            start: off,
            end,
            pieces: vec![piece],
        });
        ok
    }

    /// Hands the pending batch to the workers.
    pub fn flush(&mut self) -> bool {
        match self.pending.take() {
            Some(b) => self.tx.send(b).is_ok(),
            None => true,
        }
    }
}

/// Sets a finished file's size and metadata. Returns warnings.
pub fn finalize(f: &OpenFile, applier: &Applier<'_>) -> Vec<String> {
    let mut warnings = Vec::new();
    // The file was created empty, so where its writes ended is its size: a file that ends in
    // data (most do) needs no call to set it; one that ends in a hole does.
    if f.written_end.load(Ordering::Acquire) != f.item.size {
        if let Err(e) = f.file.set_len(f.item.size) {
            warnings.push(format!("{}: cannot set size: {e}", f.item.display_path()));
        }
    }
    warnings.extend(applier.apply_fd(f.file.as_fd(), &f.item, f.owner));
    warnings
}

/// ENOSPC or EDQUOT: the target cannot take more.
pub fn is_no_space(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    matches!(Errno::from_io_error(e), Some(Errno::NOSPC | Errno::DQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

/// Called once per piece of `file`, written or not; the last one finishes the file.
fn piece_done(file: &Arc<OpenFile>, done: &Sender<Done>, applier: &Applier<'_>) {
    if file.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    let error = file.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    let warnings = if error.is_none() {
        finalize(file, applier)
    } else {
        Vec::new()
    };
    let _ = done.send(Done {
        file: Arc::clone(file),
        error,
        no_space: file.no_space.load(Ordering::Acquire),
        warnings,
    });
}

/// A batch and what reading its range gave.
pub struct Read {
    batch: Batch,
    data: StoreResult<Vec<u8>>,
}

/// Reads a batch's range from its pack into `buf` (whose memory a local store reuses).
fn read(repo: &Repository, batch: Batch, fetched: &AtomicU64, mut buf: Vec<u8>) -> Read {
    let name = batch.pack.object_name();
    let range = ByteRange::new(batch.start, batch.end - batch.start);
    let data = repo
        .store()
        .get_into(&name, Some(range), &mut buf)
        .map(|()| buf);
    if let Ok(bytes) = &data {
        fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
    Read { batch, data }
}

/// A fetch worker for a local store: read a batch's range, then verify, decompress and write
/// each piece. Each read goes into the buffer of the one before it: a fresh one had the
/// kernel map and zero its pages every time.
pub fn worker(
    repo: &Repository,
    batches: Receiver<Batch>,
    done: Sender<Done>,
    applier: &Applier<'_>,
    fetched: &AtomicU64,
) {
    let mut spare = Vec::new();
    for b in batches {
        let read = read(repo, b, fetched, std::mem::take(&mut spare));
        spare = decode(repo, read, &done, applier).unwrap_or_default();
    }
}

/// A reader for a remote store: reads batches' ranges ahead of the decoders, handing each on
/// as soon as it is read and starting the next, so that the link does not wait while the
/// decoders work (a worker that read and then decoded left the link idle between its reads,
/// and two such workers, sharing the link fairly, ended their reads together).
pub fn reader(
    repo: &Repository,
    batches: Receiver<Batch>,
    reads: Sender<Read>,
    fetched: &AtomicU64,
) {
    for b in batches {
        if reads.send(read(repo, b, fetched, Vec::new())).is_err() {
            return;
        }
    }
}

/// A decoder for a remote store: verifies, decompresses and writes the pieces of each batch
/// its readers read.
pub fn decoder(
    repo: &Repository,
    reads: Receiver<Read>,
    done: Sender<Done>,
    applier: &Applier<'_>,
) {
    for r in reads {
        decode(repo, r, &done, applier);
    }
}

/// Verifies, decompresses and writes each piece of a batch read; a piece that cannot be
/// fails its file. Gives back the buffer read into, for the next read.
fn decode(
    repo: &Repository,
    read: Read,
    done: &Sender<Done>,
    applier: &Applier<'_>,
) -> Option<Vec<u8>> {
    let Read { batch: b, data } = read;
    let name = b.pack.object_name();
    for piece in b.pieces {
        let decoded = match &data {
            Err(e) => Err(e.to_string()),
            Ok(bytes) => {
                let s = (piece.blob_offset - b.start) as usize;
                let blob = &bytes[s..s + piece.blob_len as usize];
                repo.open_chunk(&piece.id, blob, &name)
                    .map_err(|e| e.to_string())
                    .and_then(|plain| {
                        if plain.len() != piece.plain_len as usize {
                            return Err(format!(
                                "chunk {} has {} bytes, the item says {}",
                                piece.id,
                                plain.len(),
                                piece.plain_len
                            ));
                        }
                        Ok(plain)
                    })
            }
        };
        match decoded {
            Ok(plain) => piece.file.write(piece.file_offset, plain, done, applier),
            Err(reason) => {
                piece.file.fail(reason);
                piece_done(&piece.file, done, applier);
            }
        }
    }
    data.ok()
}

#[cfg(test)]
mod tests {
    use super::super::attrs::Unset;
    use super::*;
    use crate::format::item::{ChunkRef, ItemKind};
    use crate::util::id::ChunkId;

    /// Piece `i` of the test file: `len` bytes of `i`, some all zeros (holes).
    fn piece(i: usize, len: usize) -> Vec<u8> {
        if i % 7 == 3 {
            vec![0; len]
        } else {
            vec![(i % 251) as u8 + 1; len]
        }
    }

    fn applier(unset: &Unset) -> Applier<'_> {
        Applier {
            meta: crate::source::fsmeta::MetaOptions::default(),
            is_root: false,
            unset,
        }
    }

    fn open_file(dir: &std::path::Path, pieces: usize, len: usize) -> Arc<OpenFile> {
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join("f"))
            .unwrap();
        let mut item = Item::new(ItemKind::File, b"f".to_vec());
        item.size = (pieces * len) as u64;
        item.chunks = (0..pieces)
            .map(|_| ChunkRef {
                id: ChunkId([0; 32]),
                len: len as u32,
            })
            .collect();
        OpenFile::new(file, item, None)
    }

    #[test]
    fn threads_writing_one_file_queue_for_its_writer_and_every_piece_lands_once() {
        let dir = tempfile::tempdir().unwrap();
        // Pieces larger than the queue's bound together, so that adders also wait.
        let (pieces, len) = (64, 512 * 1024);
        let f = open_file(dir.path(), pieces, len);
        let unset = Unset::default();
        let applier = applier(&unset);
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (f, done, applier) = (Arc::clone(&f), done_tx.clone(), &applier);
                s.spawn(move || {
                    for i in (t..pieces).step_by(4) {
                        f.write((i * len) as u64, piece(i, len), &done, applier);
                    }
                });
            }
        });
        drop(done_tx);
        let reports: Vec<Done> = done_rx.iter().collect();
        assert_eq!(reports.len(), 1, "a file is reported done exactly once");
        assert!(reports[0].error.is_none());
        let w = f.writes();
        assert!(!w.busy && w.queue.is_empty() && w.queued == 0);
        drop(w);
        let written = std::fs::read(dir.path().join("f")).unwrap();
        let want: Vec<u8> = (0..pieces).flat_map(|i| piece(i, len)).collect();
        assert!(written == want, "the file holds every piece at its offset");
    }

    #[test]
    fn a_write_that_fails_fails_the_file_and_still_counts_its_piece() {
        let dir = tempfile::tempdir().unwrap();
        let f = open_file(dir.path(), 2, 4096);
        // A descriptor opened read-only: every write fails.
        let ro = File::open(dir.path().join("f")).unwrap();
        let f = OpenFile::new(ro, f.item.clone(), None);
        let unset = Unset::default();
        let applier = applier(&unset);
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        f.write(0, piece(0, 4096), &done_tx, &applier);
        assert!(done_rx.try_recv().is_err(), "one piece is still to come");
        f.write(4096, piece(1, 4096), &done_tx, &applier);
        let d = done_rx.try_recv().unwrap();
        assert!(d.error.is_some(), "the failed write is reported");
        assert!(!d.no_space);
    }
}
