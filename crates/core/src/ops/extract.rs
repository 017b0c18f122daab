//! The restore engine behind `cairn extract`.
//!
//! Safety: nothing outside the target directory is ever written, linked or changed, whatever
//! the archive holds and whatever other processes do to the target meanwhile.
//! - An item path must be relative, without NUL and without empty, `.` or `..` components.
//! - Every directory is reached by `openat(parent, name, O_DIRECTORY | O_NOFOLLOW)` from a
//!   descriptor of the target, one component at a time: a symlink anywhere on the way
//!   (planted by the archive or by someone else, even mid-restore) refuses the item. All
//!   creation and metadata calls are relative to the parent's descriptor (`mkdirat`,
//!   `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `symlinkat`, `mknodat`, `linkat`) or made on the
//!   object's own descriptor (`fchmod`, `fchown`, `futimens`, `fsetxattr`); symlinks and
//!   special files get `…at(AT_SYMLINK_NOFOLLOW)` calls.
//! - An existing non-directory at the final path is unlinked, never followed; a directory is
//!   never replaced. Hardlinks only point at files restored in this run.
//! - Extended attributes (every namespace stored), ACLs and inode flags are applied on the
//!   object's own descriptor, or by name without following (see [`attrs`]).
//!
//! Errors: a file whose chunks are missing or fail to verify, or that cannot be written, is
//! reported and removed (no wrong byte stays behind), and the restore goes on; those make the
//! command exit 2. Metadata that cannot be applied and refused items are warnings (exit 1).
//!
//! Speed: file contents are fetched by workers in coalesced reads and written as they arrive
//! (see [`fetch`]); everything else stays in this thread, in archive order.

mod attrs;
pub mod dry_run;
mod existing;
mod extras;
pub mod fetch;
mod file;
mod links;
mod made;
mod metadata;
mod nodes;
mod read_back;
mod report;
mod room;
pub mod selection;
mod target;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::Receiver;
use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::ops::own_dirs::OwnDir;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::source::fsmeta::MetaOptions;
use crate::util::progress::Progress;
use existing::Existing;
pub use existing::Overwrite;
use extras::Extras;
use metadata::Owners;
pub use read_back::ReadBack;
pub use selection::Selection;
pub use target::safe_components;
use target::{write_sparse, DirWalker};

pub struct RestoreOptions {
    pub target: PathBuf,
    /// What is applied beyond contents, mode and times (`--noacls`, `--noxattrs`,
    /// `--noflags`, `--numeric-ids`).
    pub meta: MetaOptions,
    /// What to restore (everything by default).
    pub selection: Selection,
    /// Fetch workers.
    pub threads: usize,
    /// What to do where the target holds something already.
    pub overwrite: Overwrite,
    /// Remove what the restored directories hold beyond the archive (`--delete`), and
    /// whatever stands in the way of an item.
    pub delete: bool,
    /// cairn's own directories: never restored into, replaced or deleted.
    pub own: Vec<OwnDir>,
    /// `--no-preserve-root`: `--delete` on the root of a file system.
    pub root_ok: bool,
    /// `--verify`: once restored, the files this selects (the same as `selection`) are read
    /// back from the target and compared with the archive.
    pub verify: Option<Selection>,
}

#[derive(Default)]
pub struct RestoreReport {
    pub files: u64,
    pub items: u64,
    pub bytes: u64,
    /// Items not restored (exit 2).
    pub errors: Vec<String>,
    /// Items restored incompletely or skipped as unsafe (exit 1).
    pub warnings: Vec<String>,
    /// Paths and patterns given that selected nothing.
    pub unmatched: Vec<String>,
    /// Set when the restore stopped early: the target ran out of space, or its file system
    /// gave the same error for several files in a row.
    pub stopped: Option<Stopped>,
    /// Selected files not restored once it stopped (partial copies are removed).
    pub files_not_restored: u64,
    /// What could not be set for lack of privilege: how many, of what kind.
    pub unset: Vec<String>,
    /// Files (counted in `files` and `bytes` too) the target held already with the
    /// archive's contents: only their metadata was set.
    pub kept_files: u64,
    pub kept_bytes: u64,
    /// Items left as they were (`--overwrite never`), not counted in `items`.
    pub untouched: u64,
    /// Items not restored where something stood in the way, each said in a warning (not
    /// counted in `items`).
    pub skipped: u64,
    /// Bytes read from the repository.
    pub fetched: u64,
    /// What `--delete` removed: each an entry the archive does not hold, with what was
    /// below it, or a directory in the way of an item.
    pub deleted: u64,
    /// cairn's own directories `--delete` left where they are.
    pub protected: u64,
    /// With `--verify`: what reading the restored files back found.
    pub read_back: Option<read_back::ReadBack>,
}

pub struct Stopped {
    /// What the file system said.
    pub cause: String,
    /// ENOSPC or EDQUOT.
    pub full: bool,
}

/// The same error from the target's file system for this many items in a row stops the
/// restore: a target that refuses one file refuses the next (read-only, no permission).
pub const SAME_ERROR_STOPS: u32 = 5;

/// A stored path as messages show it (escaped as `list` shows it).
fn lossy(b: &[u8]) -> String {
    crate::util::text::printable_bytes(b)
}

/// The names of one hardlinked inode restored so far: the file written, and the links made to
/// it (removed too if its contents fail).
struct LinkGroup {
    first: Vec<u8>,
    others: Vec<Vec<u8>>,
}

struct Restorer<'a> {
    index: &'a ChunkIndex,
    dirs: DirWalker,
    /// Directories restored, to get their metadata after their contents, each with its device
    /// and inode.
    dirs_to_finish: Vec<(Item, (u64, u64))>,
    hardlinks: HashMap<[u8; 16], LinkGroup>,
    /// Hardlinked inodes the target holds already, kept once all their names were seen.
    candidates: links::Candidates,
    /// The nodes and directories this run made or uses, by device and inode.
    made: made::Made,
    planner: Option<fetch::Planner>,
    done: crossbeam_channel::Receiver<fetch::Done>,
    open_files: usize,
    owners: Owners,
    is_root: bool,
    /// `--delete`: what stands in the way of an item is removed.
    delete: bool,
    /// Applies metadata (shared with the fetch workers, which finish files).
    applier: &'a attrs::Applier<'a>,
    report: RestoreReport,
    progress: &'a Progress,
    /// Bytes of the files to restore, when known (the whole archive).
    total: Option<u64>,
    /// The last error from the target's file system, and how many items in a row had it.
    repeated: Option<(String, u32)>,
    started: std::time::Instant,
    /// Compares what the target holds already with what is restored.
    existing: Existing<'a>,
    overwrite: Overwrite,
    /// With `--overwrite never`: a non-directory kept where a directory goes (what the
    /// archive holds below it is not restored).
    kept_in_the_way: Option<Vec<u8>>,
    /// Bytes the fetch workers have read.
    fetched: &'a AtomicU64,
}

enum Outcome {
    Done,
    /// Not restored: the reason.
    Failed(String),
    /// Left as it is, for a reason said in a warning (exit 1): something the restore may not
    /// or without `--delete` does not replace.
    Skipped(String),
    /// Not restored because the target is full.
    NoSpace(String),
}

/// The outcome of a failed system call while making an item.
fn failed(e: Errno) -> Outcome {
    if e == Errno::NOSPC || e == Errno::DQUOT {
        Outcome::NoSpace(e.to_string())
    } else {
        Outcome::Failed(e.to_string())
    }
}

impl Restorer<'_> {
    fn restore(&mut self, item: &Item) {
        let Some(comps) = safe_components(&item.path) else {
            self.warn_at(
                &item.path,
                "unsafe-path",
                format!("{}: unsafe path in archive; skipped", item.display_path()),
            );
            return;
        };
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        // Below something `--overwrite never` kept where a directory goes: kept too (the
        // directory cannot be made).
        if self
            .kept_in_the_way
            .as_ref()
            .is_some_and(|k| item.path.starts_with(k) && item.path.get(k.len()) == Some(&b'/'))
        {
            self.report.untouched += 1;
            return;
        }
        let parent = match self.dirs.dir_shared(parents, true) {
            Ok(fd) => fd,
            // The target's file system refused to make a parent: a failure, like any other
            // it gives.
            Err(reason) if reason.contains("(os error ") => {
                let cause = reason.rsplit_once(": ").map_or(reason.as_str(), |(_, c)| c);
                let cause = cause.to_string();
                self.not_restored(&item.path, &reason, &cause);
                return;
            }
            // Refused for safety (a symlink or file in the way).
            Err(reason) => {
                let msg = format!("{}: {reason}; skipped", item.display_path());
                self.warn_at(&item.path, "skipped", msg);
                self.report.skipped += 1;
                return;
            }
        };
        if self.overwrite == Overwrite::Never {
            let there = rustix::fs::statat(&parent, *name, AtFlags::SYMLINK_NOFOLLOW).ok();
            let kept_dir = item.kind == ItemKind::Dir
                && there
                    .is_some_and(|st| FileType::from_raw_mode(st.st_mode) != FileType::Directory);
            if kept_dir || (item.kind != ItemKind::Dir && there.is_some()) {
                if kept_dir {
                    self.kept_in_the_way = Some(item.path.clone());
                }
                self.report.untouched += 1;
                return;
            }
        }
        self.report.items += 1;
        let outcome = match item.kind {
            ItemKind::Dir => self.restore_dir(&parent, name, item),
            ItemKind::File => self.restore_file(&parent, name, item),
            ItemKind::Symlink | ItemKind::Fifo | ItemKind::CharDev | ItemKind::BlockDev => {
                self.restore_node(&parent, name, item)
            }
        };
        match outcome {
            // A success breaks a run of identical errors.
            Outcome::Done => self.repeated = None,
            Outcome::Failed(reason) => self.not_restored(&item.path, &reason, &reason),
            Outcome::Skipped(reason) => {
                let msg = format!("{}: {reason}", item.display_path());
                self.warn_at(&item.path, "skipped", msg)
            }
            Outcome::NoSpace(reason) => self.target_full(&item.path, &reason),
        }
    }
}

impl<'a> Restorer<'a> {
    /// A restorer into `dirs` that has restored nothing yet. It hands file contents to the
    /// fetch workers through `planner` and counts the files they finish from `done`; its
    /// progress line shows the `total` bytes to restore (when known) and what `fetched` counts.
    fn new(
        index: &'a ChunkIndex,
        dirs: DirWalker,
        (planner, done): (fetch::Planner, Receiver<fetch::Done>),
        existing: Existing<'a>,
        opts: &RestoreOptions,
        applier: &'a attrs::Applier<'a>,
        (progress, total, fetched): (&'a Progress, Option<u64>, &'a AtomicU64),
    ) -> Self {
        Restorer {
            index,
            dirs,
            dirs_to_finish: Vec::new(),
            hardlinks: HashMap::new(),
            candidates: links::Candidates::new(),
            made: made::Made::default(),
            planner: Some(planner),
            done,
            open_files: 0,
            owners: Owners::new(opts.meta.numeric_ids),
            is_root: applier.is_root,
            delete: opts.delete,
            applier,
            report: RestoreReport::default(),
            progress,
            total,
            repeated: None,
            started: std::time::Instant::now(),
            existing,
            overwrite: opts.overwrite,
            kept_in_the_way: None,
            fetched,
        }
    }

    /// After the last item (`restored`: how handing the items over ended; `last`: the path of
    /// the last one handed over): hardlinked files found in place settled, every file the
    /// workers were given counted, what the archive does not hold deleted (`--delete`, after
    /// a complete restore only), and the directories given their metadata. Returns how the
    /// restore ended.
    fn conclude(
        &mut self,
        restored: Result<()>,
        extras: Option<&RefCell<Extras>>,
        interrupt: &Interrupt,
        last: &[u8],
    ) -> Result<()> {
        let mut result = restored;
        // Hardlinked files found in place are kept or written anew, once all names are seen.
        if result.is_ok() && self.report.stopped.is_none() {
            self.settle_links();
            result = interrupt.check();
        }
        // Let the workers finish what was handed out, then collect every file's outcome.
        if let Some(mut p) = self.planner.take() {
            p.flush();
        }
        while let Ok(d) = self.done.recv() {
            self.finish_file(d);
        }
        self.report.fetched = self.fetched.load(Ordering::Relaxed);
        // What the archive does not hold goes only after a complete restore (every item
        // restored, no interrupt), and before the directories get their times.
        let complete = result.is_ok()
            && self.report.stopped.is_none()
            && self.report.errors.is_empty()
            && self.report.warnings.is_empty();
        let result = result.and_then(|()| interrupt.check());
        if let (Some(x), true, Ok(())) = (extras, complete, &result) {
            self.delete_extras(&x.borrow(), interrupt);
        } else if extras.is_some() && result.is_ok() {
            self.warn("nothing was deleted (--delete): not every item was restored".to_string());
        }
        // Directories get their metadata last; when the restore stopped early, only those
        // that are complete (not a parent of where it stopped).
        let stopped_at = result.is_err().then_some(last);
        crate::util::pause::point("extract:dirs-finish");
        self.finish_dirs(stopped_at);
        result
    }
}

/// Restores the selected items of an archive into `opts.target`. The target is created only
/// once an item is selected: a selection that matches nothing leaves nothing behind.
pub fn run(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
    mut opts: RestoreOptions,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<RestoreReport> {
    // Refused before the archive is read; checked again on the directory the restore uses.
    target::open_target(&opts.target, false, opts.delete, opts.root_ok, &opts.own)?;
    // With --delete: every name the archive holds, and the directories restored.
    let extras = opts
        .delete
        .then(|| RefCell::new(Extras::new(opts.selection.has_no_paths())));
    let strip = opts.selection.strip();
    let mut items = archive::items(repo, index, meta).inspect(|item| {
        if let (Some(x), Ok(item)) = (&extras, item) {
            if let Some(name) = selection::stripped(&item.path, strip) {
                x.borrow_mut().held(name);
            }
        }
    });
    // The first selected item, before anything is created.
    let first = first_selected(&mut items, &mut opts.selection, interrupt)?;
    let Some(first) = first else {
        return Ok(RestoreReport {
            unmatched: opts.selection.unmatched(),
            ..RestoreReport::default()
        });
    };
    crate::util::pause::point("extract:target-open");
    let root = target::open_target(&opts.target, true, opts.delete, opts.root_ok, &opts.own)?
        .ok_or_else(|| Error::invalid("the target could not be made"))?;
    let read_back = read_back::Later::prepare(&root, &mut opts)?;
    let dirs = DirWalker::new(root, std::mem::take(&mut opts.own), opts.delete);
    let unset = attrs::Unset::default();
    let applier = &attrs::Applier {
        meta: opts.meta,
        is_root: rustix::process::geteuid().is_root(),
        unset: &unset,
    };
    let fetched = &AtomicU64::new(0);
    let whole = opts.selection.is_everything();
    let shown = (progress, whole.then_some(meta.stats.original_size), fetched);
    note_dir(extras.as_ref(), &first);
    let result = std::thread::scope(|scope| {
        let workers = start_workers(scope, repo, opts.threads, applier, fetched);
        let existing = Existing::new(repo.data_chunker()?, repo.crypto());
        let mut r = Restorer::new(index, dirs, workers, existing, &opts, applier, shown);
        // The last item handed to the restorer: its parent directories may not be complete.
        let mut last: Vec<u8> = Vec::new();
        let rest = items.filter_map(|item| match item {
            Ok(item) => {
                let picked = opts.selection.pick(item);
                picked.inspect(|i| note_dir(extras.as_ref(), i)).map(Ok)
            }
            Err(e) => Some(Err(e)),
        });
        let all = std::iter::once(Ok(first)).chain(rest);
        let restored = restore_items(&mut r, all, interrupt, &mut last);
        match r.conclude(restored, extras.as_ref(), interrupt, &last) {
            Ok(()) => Ok(r.report),
            Err(Error::Interrupted(signal)) => Err(Error::InterruptedIncomplete {
                signal,
                what: incomplete(&r.report, meta, whole),
            }),
            Err(e) => Err(e),
        }
    });
    let mut report = result?;
    report.unmatched = opts.selection.unmatched();
    report.unset = attrs::summary(&unset);
    if let Some(later) = read_back {
        report.read_back = Some(later.run((repo, index, meta), (progress, interrupt))?);
    }
    Ok(report)
}

/// Reads a remote store serves at once for extract, at least: a read is of up to 16 MiB of
/// one pack, and its readers read on while the workers decode (see [`fetch::reader`]). With
/// more workers than that, as many readers as workers (as many reads as before).
const FAR_READS: usize = 3;

/// Starts `threads` fetch workers in `scope`: they take batches from the planner returned, and
/// send each file they finish to the receiver returned. From a remote store, [`FAR_READS`] (or
/// `threads`, if more) readers read the batches and the workers only decode them.
fn start_workers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    repo: &'env Repository,
    threads: usize,
    applier: &'env attrs::Applier<'env>,
    fetched: &'env AtomicU64,
) -> (fetch::Planner, Receiver<fetch::Done>) {
    let (batch_tx, batch_rx) = crossbeam_channel::bounded(2 * threads);
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    if repo.store().is_remote() {
        let (read_tx, read_rx) = crossbeam_channel::bounded(0);
        for _ in 0..FAR_READS.max(threads) {
            let (batches, reads) = (batch_rx.clone(), read_tx.clone());
            scope.spawn(move || fetch::reader(repo, batches, reads, fetched));
        }
        for _ in 0..threads {
            let (reads, done) = (read_rx.clone(), done_tx.clone());
            scope.spawn(move || fetch::decoder(repo, reads, done, applier));
        }
    } else {
        for _ in 0..threads {
            let (batches, done) = (batch_rx.clone(), done_tx.clone());
            scope.spawn(move || fetch::worker(repo, batches, done, applier, fetched));
        }
    }
    drop((batch_rx, done_tx));
    (fetch::Planner::new(batch_tx), done_rx)
}

/// With `--delete`: notes a directory the restore makes, whose extras then go.
fn note_dir(extras: Option<&RefCell<Extras>>, item: &Item) {
    if let Some(x) = extras {
        if item.kind == ItemKind::Dir {
            x.borrow_mut().restored_dir(&item.path);
        }
    }
}

/// The first item of `items` that `selection` picks (none: the selection matches nothing).
fn first_selected(
    items: &mut impl Iterator<Item = Result<Item>>,
    selection: &mut Selection,
    interrupt: &Interrupt,
) -> Result<Option<Item>> {
    loop {
        interrupt.check()?;
        match items.next() {
            None => return Ok(None),
            Some(item) => {
                if let Some(item) = selection.pick(item?) {
                    return Ok(Some(item));
                }
            }
        }
    }
}

/// Hands every item to the restorer in order, until the end, an interrupt or an error;
/// `last` is the path of the last one handed over.
fn restore_items(
    r: &mut Restorer<'_>,
    items: impl Iterator<Item = Result<Item>>,
    interrupt: &Interrupt,
    last: &mut Vec<u8>,
) -> Result<()> {
    for item in items {
        interrupt.check()?;
        let item = item?;
        if r.report.stopped.is_some() {
            // Only counted: the target cannot take more.
            if item.kind == ItemKind::File {
                r.report.files_not_restored += 1;
            }
            continue;
        }
        r.restore(&item);
        *last = item.path;
    }
    Ok(())
}

/// What an interrupted restore left undone: "restore incomplete (68 of 600 files)", the total
/// known when the whole archive was asked for.
fn incomplete(report: &RestoreReport, meta: &ArchiveMeta, whole: bool) -> String {
    if whole {
        format!(
            "restore incomplete ({} of {} files)",
            report.files, meta.stats.files
        )
    } else {
        format!("restore incomplete ({} files restored)", report.files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::fs::{self, File};

    #[test]
    fn unsafe_paths_are_refused() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"../x",
            b"a/../../x",
            b"a//b",
            b"./a",
            b"a/.",
            b"a\0b",
        ] {
            assert!(
                safe_components(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(safe_components(b"a/b\xffc").unwrap().len(), 2);
    }

    #[test]
    fn sparse_writes_leave_holes_and_right_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = File::create(&p).unwrap();
        let mut data = vec![0u8; 3 * 1024 * 1024];
        data[100] = 1;
        data[2 * 1024 * 1024 + 5] = 2;
        write_sparse(&f, 10, &data).unwrap();
        f.set_len(10 + data.len() as u64).unwrap();
        let back = fs::read(&p).unwrap();
        assert_eq!(&back[10..], &data[..]);
        use std::os::unix::fs::MetadataExt;
        assert!(fs::metadata(&p).unwrap().blocks() * 512 < 100_000);
    }

    /// What a write returns is where its last written byte ends: the piece's end when it ends
    /// in data, before its trailing zeros when it ends in a hole, its start when all zeros.
    /// (The file's size is set only when the writes did not reach it.)
    #[test]
    fn a_sparse_write_says_where_its_data_ends() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        let mut data = vec![7u8; 20 << 10];
        assert_eq!(write_sparse(&f, 100, &data).unwrap(), 100 + (20 << 10));
        data[8 << 10..].fill(0);
        assert_eq!(write_sparse(&f, 4096, &data).unwrap(), 4096 + (8 << 10));
        assert_eq!(write_sparse(&f, 4096, &[0u8; 9000]).unwrap(), 4096);
        // A trailing zero run shorter than a block after data is written with it: the block
        // is not whole zeros.
        let mut tail = vec![5u8; 5000];
        tail[4500..].fill(0);
        assert_eq!(write_sparse(&f, 0, &tail).unwrap(), 5000);
    }

    /// A piece longer than one write lands whole at an offset that is not a block's.
    #[test]
    fn a_long_piece_is_written_in_parts_at_the_right_places() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = File::create(&p).unwrap();
        let data: Vec<u8> = (0..(5u32 << 19) + 3)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
            .collect();
        assert_eq!(write_sparse(&f, 7, &data).unwrap(), 7 + data.len() as u64);
        let back = fs::read(&p).unwrap();
        assert_eq!(back.len(), 7 + data.len());
        assert!(back[7..] == data[..]);
    }

    #[test]
    fn short_zero_runs_inside_a_piece_are_written_and_long_ones_and_ends_are_holes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let used = |name: &str, data: &[u8]| {
            let p = dir.path().join(name);
            let f = File::create(&p).unwrap();
            write_sparse(&f, 0, data).unwrap();
            f.set_len(data.len() as u64).unwrap();
            assert_eq!(fs::read(&p).unwrap(), data);
            fs::metadata(&p).unwrap().blocks() * 512
        };
        // Data, 8 KiB of zeros, data: one write, no hole.
        let mut short = vec![0u8; 16 << 10];
        short[..4096].fill(1);
        short[12 << 10..].fill(2);
        assert!(used("short", &short) >= 16 << 10);
        // Data, 1 MiB of zeros, data: a hole between two writes.
        let mut long = vec![0u8; (1 << 20) + (8 << 10)];
        long[..4096].fill(1);
        long[(1 << 20) + 4096..].fill(2);
        assert!(used("long", &long) < 64 << 10);
        // Zeros at the ends of a piece are holes however short.
        let mut ends = vec![0u8; 24 << 10];
        ends[8 << 10..12 << 10].fill(3);
        assert!(used("ends", &ends) < 16 << 10);
    }

    #[test]
    fn walker_refuses_symlinked_parents() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("link")).unwrap();
        let root = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let mut w = DirWalker::new(root, Vec::new(), false);
        assert!(w.dir(&[b"real", b"new"], true).is_ok());
        assert!(dir.path().join("real/new").is_dir());
        let err = w.dir(&[b"link", b"etc"], true).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
    }
}
