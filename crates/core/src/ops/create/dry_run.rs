//! `create --dry-run`: the walk, the excludes, the files cache and the chunking of a real
//! backup, and the sealing too (so that what would be stored is measured, compressed), but
//! nothing is written: no pack, no index, no archive, no files cache. The repository is
//! only read (its index, and the last archive of the series when the files cache must be
//! rebuilt), under a shared lock like any reader.

use std::collections::HashSet;

use super::source::{self, Unit};
use super::{load_files_cache, walk, BackupOptions};
use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::ChunkId;
use crate::util::progress::Progress;

/// What a backup would do.
#[derive(Default)]
pub struct DryReport {
    /// Items the archive would hold.
    pub items: u64,
    pub files: u64,
    /// Bytes of the files it would hold.
    pub bytes: u64,
    /// Files that would be read (new or changed since the series' last backup).
    pub files_read: u64,
    pub bytes_read: u64,
    /// New data: bytes before and after compression and encryption.
    pub new_bytes: u64,
    pub new_stored: u64,
    pub warnings: Vec<String>,
}

impl DryReport {
    /// An item the archive would hold; a file's bytes counted as read when it would be `read`.
    fn count(&mut self, item: &Item, read: bool) {
        self.items += 1;
        if item.kind == ItemKind::File {
            self.files += 1;
            self.bytes += item.size;
            if read {
                self.files_read += 1;
                self.bytes_read += item.size;
            }
        }
    }

    /// A chunk new to the repository, of `len` bytes, met for the first time: `blob` is what
    /// would be stored.
    fn count_new(&mut self, len: u32, blob: &[u8]) {
        self.new_bytes += u64::from(len);
        self.new_stored += blob.len() as u64;
    }
}

/// How an item would be taken, as `--list` shows it: `A` a file the series' last archive
/// does not have, `M` one it has that is read again (changed, or too recent to trust its
/// times), `U` one taken unchanged from the files cache (or a later name of a hardlinked
/// file), and the item's type letter otherwise.
pub fn status_letter(item: &Item, read: bool, known_before: bool) -> char {
    match item.kind {
        ItemKind::File if !read => 'U',
        ItemKind::File if known_before => 'M',
        ItemKind::File => 'A',
        other => other.letter(),
    }
}

/// Runs the walk without writing; `each` sees every item with its status letter.
pub fn run(
    repo: &Repository,
    opts: &BackupOptions,
    progress: &Progress,
    interrupt: &Interrupt,
    mut each: impl FnMut(char, &Item) -> Result<()>,
) -> Result<DryReport> {
    let (mut index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        progress.println(&format!("note: {n}"));
    }
    let old_cache = load_files_cache(repo, &index, &opts.name, progress)?;
    let before = last_paths(repo, &index, &opts.name)?;
    let known = index.freeze()?;
    let mut report = DryReport::default();
    // New chunks met so far: a chunk new to the repository is stored once, however often
    // this backup meets it.
    let mut new: HashSet<ChunkId> = HashSet::new();
    let consume = |units: crossbeam_channel::Receiver<Unit>,
                   budget: &crate::util::parallel::Budget|
     -> Result<()> {
        let mut current: Option<Box<Item>> = None;
        loop {
            let unit = source::next_unit(&units, interrupt)?;
            let mut take = |item: &Item, read: bool, report: &mut DryReport| -> Result<()> {
                report.count(item, read);
                let known_before = before.contains(&item.path);
                each(status_letter(item, read, known_before), item)
            };
            match unit {
                Unit::Done => return Ok(()),
                Unit::Fail(e) => return Err(e),
                Unit::Warning(msg) => report.warnings.push(msg),
                Unit::Item(item) => take(&item, false, &mut report)?,
                Unit::Cached { item, entry, .. } => {
                    let mut item = item;
                    item.size = entry.size;
                    take(&item, false, &mut report)?;
                }
                Unit::Hardlink { item, stamp, .. } => {
                    let mut item = item;
                    item.size = stamp.size;
                    take(&item, false, &mut report)?;
                }
                Unit::FileStart(item) => current = Some(item),
                Unit::Chunk(rx) => {
                    let sealed = source::sealed(rx)?;
                    budget.release(sealed.len as usize);
                    if let Some(item) = current.as_mut() {
                        item.size += u64::from(sealed.len);
                    }
                    if let Some(blob) = sealed.blob {
                        if new.insert(sealed.id) {
                            report.count_new(sealed.len, &blob);
                        }
                    }
                }
                Unit::FileEnd(end) => {
                    let Some(mut item) = current.take() else {
                        return Err(Error::internal("file end without a start"));
                    };
                    if end.ok {
                        item.size = end.size;
                        take(&item, true, &mut report)?;
                    }
                }
            }
        }
    };
    walk(
        repo, opts, known, &old_cache, interrupt, progress, None, consume,
    )?;
    Ok(report)
}

/// The paths of the series' last archive (none when it has none, or it cannot be read: then
/// every file is `A`).
pub(super) fn last_paths(
    repo: &Repository,
    index: &crate::index::ChunkIndex,
    name: &str,
) -> Result<HashSet<Vec<u8>>> {
    let list = crate::archive::load_all(repo)?;
    let Some((_, meta)) = crate::archive::newest_of(list.archives, name) else {
        return Ok(HashSet::new());
    };
    let mut paths = HashSet::new();
    for item in crate::archive::items(repo, index, &meta) {
        match item {
            Ok(i) => {
                paths.insert(i.path);
            }
            Err(Error::Store(e)) => return Err(Error::Store(e)),
            Err(_) => break,
        }
    }
    Ok(paths)
}
