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

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use super::attrs::Applier;
use crate::format::item::Item;
use crate::repo::Repository;
use crate::store::ByteRange;
use crate::util::id::{ChunkId, PackId};

/// Reads of one pack are merged across gaps up to this size…
const MAX_GAP: u64 = 256 * 1024;
/// …into reads of at most this size.
const MAX_BATCH: u64 = 16 << 20;

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
        })
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
    if let Err(e) = f.file.set_len(f.item.size) {
        warnings.push(format!("{}: cannot set size: {e}", f.item.display_path()));
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

/// Called once per piece, written or not; the last one finishes the file.
fn piece_done(piece: &Piece, done: &Sender<Done>, applier: &Applier<'_>) {
    if piece.file.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    let error = piece
        .file
        .failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let warnings = if error.is_none() {
        finalize(&piece.file, applier)
    } else {
        Vec::new()
    };
    let _ = done.send(Done {
        file: Arc::clone(&piece.file),
        error,
        no_space: piece.file.no_space.load(Ordering::Acquire),
        warnings,
    });
}

/// A fetch worker: read a batch's range, then verify, decompress and write each piece.
pub fn worker(
    repo: &Repository,
    batches: Receiver<Batch>,
    done: Sender<Done>,
    applier: &Applier<'_>,
    fetched: &AtomicU64,
) {
    for b in batches {
        let name = b.pack.object_name();
        let data = repo
            .store()
            .get(&name, Some(ByteRange::new(b.start, b.end - b.start)));
        if let Ok(bytes) = &data {
            fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        for piece in &b.pieces {
            let result = match &data {
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
                            super::write_sparse(&piece.file.file, piece.file_offset, &plain)
                                .map_err(|e| {
                                    if is_no_space(&e) {
                                        piece.file.no_space.store(true, Ordering::Release);
                                    }
                                    e.to_string()
                                })
                        })
                }
            };
            if let Err(reason) = result {
                piece.file.fail(reason);
            }
            piece_done(piece, &done, applier);
        }
    }
}
