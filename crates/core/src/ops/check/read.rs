//! Reading one pack as deep as a check asks, and reading every pack in parallel.

use std::collections::BTreeMap;

use super::by_pack::TocSummary;
use crate::error::Result;
use crate::format::blob::BlobKind;
use crate::index::StoredLoc;
use crate::pack::format::{self, PackEntry};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::store::StoreError;
use crate::util::id::{ChunkId, PackId};
use crate::util::progress::Progress;

/// A pack's TOC as read, or why it does not open.
type TocResult = std::result::Result<Vec<PackEntry>, String>;

/// What a worker found reading one pack.
pub(super) struct PackRead {
    pub found: bool,
    /// Whether the pack's sha256 is its name; `None` when only its TOC was read.
    pub hash_ok: Option<bool>,
    /// The TOC compared with the index, or why it does not open (damaged, forged, or its
    /// blobs replaced).
    pub toc: std::result::Result<TocSummary, String>,
    /// Blobs that failed to verify (with --verify-data).
    pub bad_blobs: Vec<(ChunkId, String)>,
    pub verified: u64,
    /// Read whole with every blob opened ([`Depth::Blobs`]).
    pub blobs: bool,
}

impl PackRead {
    /// Read whole, every blob opened, and nothing wrong with it.
    pub fn sound_whole(&self) -> bool {
        self.blobs && self.hash_ok == Some(true) && self.toc.is_ok() && self.bad_blobs.is_empty()
    }
}

/// How much of a pack a worker reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Depth {
    /// Its TOC only (a ranged read of its tail).
    Toc,
    /// All of it: name, TOC, and the blob area against the TOC's hash.
    Whole,
    /// All of it, and every blob authenticated, decompressed and its id recomputed.
    Blobs,
}

/// Reads one pack as deep as asked, and compares its TOC with `indexed`, the locations the
/// index gives in it (kept whole only with `keep_toc`). With [`Depth::Blobs`] and a TOC that
/// does not open, `indexed` are what can still be verified.
pub(super) fn read_pack(
    repo: &Repository,
    pack: &PackId,
    size: u64,
    depth: Depth,
    indexed: &[(ChunkId, StoredLoc)],
    keep_toc: bool,
) -> Result<PackRead> {
    let summarize = |toc: TocResult| toc.map(|entries| TocSummary::of(entries, indexed, keep_toc));
    let name = pack.object_name();
    if depth == Depth::Toc {
        return read_toc(repo, pack, size, summarize);
    }
    let bytes = match format::read_whole(&**repo.store(), pack) {
        Ok(b) => b,
        Err(e) if not_found(&e) => return Ok(PackRead::missing()),
        Err(crate::error::Error::Store(StoreError::TooLarge { name, size, max })) => {
            return Ok(PackRead {
                found: true,
                hash_ok: Some(false),
                toc: Err(format!(
                    "{name}: {size} bytes, more than a pack can be ({max})"
                )),
                bad_blobs: Vec::new(),
                verified: 0,
                blobs: depth == Depth::Blobs,
            })
        }
        Err(e) => return Err(e),
    };
    let (hash, toc) = format::parse_and_hash(repo.crypto(), &bytes, &name);
    let hash_ok = hash == pack.0;
    let toc = toc.map(|t| t.entries).map_err(|e| e.to_string());
    let (bad_blobs, verified) = if depth == Depth::Blobs {
        verify_blobs(repo, &bytes, &name, &toc, indexed)
    } else {
        (Vec::new(), 0)
    };
    Ok(PackRead {
        found: true,
        hash_ok: Some(hash_ok),
        toc: summarize(toc),
        bad_blobs,
        verified,
        blobs: depth == Depth::Blobs,
    })
}

impl PackRead {
    /// A pack that is not there.
    fn missing() -> Self {
        PackRead {
            found: false,
            hash_ok: None,
            toc: Err("missing".into()),
            bad_blobs: Vec::new(),
            verified: 0,
            blobs: false,
        }
    }
}

/// Whether `e` says the pack is not there (any more).
fn not_found(e: &crate::error::Error) -> bool {
    matches!(e, crate::error::Error::Store(s) if s.is_not_found())
}

/// A pack's TOC only (a ranged read of its tail): a failing store is an error, a TOC that does
/// not open (or a pack too large to be one) is what the read found.
fn read_toc(
    repo: &Repository,
    pack: &PackId,
    size: u64,
    summarize: impl Fn(TocResult) -> std::result::Result<TocSummary, String>,
) -> Result<PackRead> {
    match format::read_toc(&**repo.store(), repo.crypto(), pack, size) {
        Err(e) if not_found(&e) => Ok(PackRead::missing()),
        Err(crate::error::Error::Store(e)) if !matches!(e, StoreError::TooLarge { .. }) => {
            Err(e.into())
        }
        toc => Ok(PackRead {
            found: true,
            hash_ok: None,
            toc: summarize(toc.map(|t| t.entries).map_err(|e| e.to_string())),
            bad_blobs: Vec::new(),
            verified: 0,
            blobs: false,
        }),
    }
}

/// Authenticates, decompresses and checks the id of every chunk blob in a pack's `bytes`: the
/// TOC's blobs, or, when it does not open, the ones the index places there (`indexed`).
/// Returns the blobs that failed, with why, and how many were tried.
fn verify_blobs(
    repo: &Repository,
    bytes: &[u8],
    name: &str,
    toc: &TocResult,
    indexed: &[(ChunkId, StoredLoc)],
) -> (Vec<(ChunkId, String)>, u64) {
    let mut bad_blobs = Vec::new();
    let mut verified = 0;
    let blobs: Vec<(ChunkId, u32, u32)> = match toc {
        Ok(entries) => entries
            .iter()
            .filter(|e| e.kind == BlobKind::Chunk)
            .map(|e| (e.id, e.offset, e.len))
            .collect(),
        Err(_) => indexed
            .iter()
            .map(|(id, l)| (*id, l.offset, l.len))
            .collect(),
    };
    for (id, offset, len) in blobs {
        verified += 1;
        let range = offset as usize..offset as usize + len as usize;
        let outcome = match bytes.get(range) {
            Some(blob) => repo.open_chunk(&id, blob, name).map(|_| ()),
            None => Err(crate::error::Error::corrupt(
                name,
                "shorter than the index says",
            )),
        };
        if let Err(err) = outcome {
            bad_blobs.push((id, err.to_string()));
        }
    }
    (bad_blobs, verified)
}

/// Runs `read` over every listed pack with `threads` workers and hands each result to `each`
/// in the calling thread as it comes, showing "`verb` packs: done of total" as progress.
/// Stops at an interrupt.
pub(crate) fn for_each_pack<R: Send>(
    listed: &BTreeMap<PackId, u64>,
    threads: usize,
    shown: (&Progress, &str),
    interrupt: &Interrupt,
    read: impl Fn(&PackId, u64) -> R + Sync,
    each: impl FnMut(PackId, R) -> Result<()>,
) -> Result<()> {
    let order: Vec<(PackId, u64)> = listed.iter().map(|(p, s)| (*p, *s)).collect();
    for_each_pack_in(&order, threads, shown, interrupt, read, each)
}

/// [`for_each_pack`] over the packs of `order`, started in that order.
pub(super) fn for_each_pack_in<R: Send>(
    order: &[(PackId, u64)],
    threads: usize,
    (progress, verb): (&Progress, &str),
    interrupt: &Interrupt,
    read: impl Fn(&PackId, u64) -> R + Sync,
    mut each: impl FnMut(PackId, R) -> Result<()>,
) -> Result<()> {
    let threads = threads.max(1);
    let total: u64 = order.iter().map(|(_, s)| s).sum();
    let mut done = 0u64;
    std::thread::scope(|scope| -> Result<()> {
        let (todo_tx, todo_rx) = crossbeam_channel::unbounded::<(PackId, u64)>();
        let (res_tx, res_rx) = crossbeam_channel::bounded::<(PackId, u64, R)>(threads);
        for (pack, size) in order {
            let _ = todo_tx.send((*pack, *size));
        }
        drop(todo_tx);
        for _ in 0..threads {
            let (todo, res, read) = (todo_rx.clone(), res_tx.clone(), &read);
            scope.spawn(move || {
                for (pack, size) in todo {
                    if interrupt.raised() || res.send((pack, size, read(&pack, size))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        for (pack, size, result) in res_rx {
            done += size;
            progress.set(|| crate::util::progress::Shown {
                message: format!(
                    "{verb} packs: {} of {}",
                    crate::util::progress::size(done),
                    crate::util::progress::size(total)
                ),
                figures: crate::util::progress::Figures {
                    bytes_done: Some(done),
                    bytes_total: Some(total),
                    ..Default::default()
                },
            });
            each(pack, result)?;
        }
        interrupt.check()
    })
}
