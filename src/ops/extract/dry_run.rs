//! `extract --dry-run`: what a restore into the target would write, fix and delete, found by
//! the same comparisons the restore makes (file contents by keyed chunk ids), with nothing
//! created, changed or fetched. Directories are opened as the restore opens them (one
//! component at a time, never following a symlink), and only read.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::existing::{self, Existing, Found, Overwrite};
use super::extras::Extras;
use super::selection::{self, Selection};
use super::target::{safe_components, DirWalker};
use crate::archive::{self, ArchiveMeta};
use crate::error::Result;
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;

/// What the restore would do with one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// Made or written anew (missing, or different from the archive's).
    Write,
    /// Already holds the archive's contents; its metadata would be set.
    Fix,
    /// Already as in the archive (contents, mode, times, and owner as root).
    Same,
    /// Something is there and `--overwrite never` keeps it.
    Keep,
    /// Not in the archive; `--delete` would remove it.
    Delete,
}

impl Planned {
    /// The word `--list` prints.
    pub fn word(self) -> &'static str {
        match self {
            Planned::Write => "write",
            Planned::Fix => "fix",
            Planned::Same => "same",
            Planned::Keep => "keep",
            Planned::Delete => "delete",
        }
    }
}

#[derive(Default)]
pub struct DryRunReport {
    pub write_items: u64,
    pub write_files: u64,
    /// Bytes of the files that would be written (what would be fetched, before dedup).
    pub write_bytes: u64,
    pub fix: u64,
    pub same: u64,
    pub same_bytes: u64,
    pub keep: u64,
    pub delete: u64,
    pub unmatched: Vec<String>,
    pub warnings: Vec<String>,
}

pub struct DryRunOptions {
    pub target: std::path::PathBuf,
    pub selection: Selection,
    pub overwrite: Overwrite,
    pub delete: bool,
}

/// Walks the selected items and the target; `each` is told every path's fate (items in
/// archive order, then what would be deleted).
pub fn run(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
    mut opts: DryRunOptions,
    interrupt: &Interrupt,
    mut each: impl FnMut(Planned, &[u8], bool) -> Result<()>,
) -> Result<DryRunReport> {
    let root = rustix::fs::open(
        &opts.target,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok();
    let mut walker = root.map(|root| DirWalker {
        root,
        stack: Vec::new(),
    });
    let mut existing = Existing::new(repo.data_chunker()?, repo.crypto());
    let is_root = rustix::process::geteuid().is_root();
    let mut extras = opts
        .delete
        .then(|| Extras::new(opts.selection.has_no_paths()));
    let strip = opts.selection.strip();
    let mut report = DryRunReport::default();
    // A non-directory `--overwrite never` keeps where a directory goes.
    let mut kept_in_the_way: Option<Vec<u8>> = None;
    for item in archive::items(repo, index, meta) {
        interrupt.check()?;
        let item = item?;
        if let (Some(x), Some(name)) = (&mut extras, selection::stripped(&item.path, strip)) {
            x.held(name);
        }
        let Some(item) = opts.selection.pick(item) else {
            continue;
        };
        let Some(comps) = safe_components(&item.path) else {
            report.warnings.push(format!(
                "{}: unsafe path in archive; it would be skipped",
                item.display_path()
            ));
            continue;
        };
        if let (Some(x), ItemKind::Dir) = (&mut extras, item.kind) {
            x.restored_dir(&item.path);
        }
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        let parent = walker
            .as_mut()
            .and_then(|w| w.dir(parents, false).ok())
            .and_then(|fd| fd.as_fd().try_clone_to_owned().ok());
        let below_kept = kept_in_the_way
            .as_ref()
            .is_some_and(|k| item.path.starts_with(k) && item.path.get(k.len()) == Some(&b'/'));
        let planned = match parent {
            _ if below_kept => Planned::Keep,
            None => Planned::Write,
            Some(parent) => plan(&mut existing, &parent, name, &item, opts.overwrite, is_root),
        };
        if planned == Planned::Keep && item.kind == ItemKind::Dir && !below_kept {
            kept_in_the_way = Some(item.path.clone());
        }
        match planned {
            Planned::Write => {
                report.write_items += 1;
                if item.kind == ItemKind::File {
                    report.write_files += 1;
                    report.write_bytes += item.size;
                }
            }
            Planned::Fix => report.fix += 1,
            Planned::Same => {
                report.same += 1;
                report.same_bytes += item.size;
            }
            Planned::Keep => report.keep += 1,
            Planned::Delete => {}
        }
        each(planned, &item.path, item.kind == ItemKind::Dir)?;
    }
    if let (Some(x), Some(w)) = (&extras, &walker) {
        for extra in x.find(w) {
            report.delete += 1;
            each(Planned::Delete, &extra.path, extra.is_dir)?;
        }
    }
    report.unmatched = opts.selection.unmatched();
    Ok(report)
}

/// What the restore would do with `item` at `name` in `parent` (which exists).
fn plan(
    existing: &mut Existing<'_>,
    parent: &OwnedFd,
    name: &[u8],
    item: &Item,
    overwrite: Overwrite,
    is_root: bool,
) -> Planned {
    let Ok(st) = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return Planned::Write;
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    if overwrite == Overwrite::Never {
        return if item.kind == ItemKind::Dir && kind == FileType::Directory {
            // An existing directory is kept as it is, and what is below it looked at.
            Planned::Same
        } else {
            Planned::Keep
        };
    }
    let same_node = match item.kind {
        ItemKind::Dir => kind == FileType::Directory,
        ItemKind::File => {
            // A hardlinked file is always written anew (see the restore), as is every file
            // with `--overwrite always`.
            overwrite != Overwrite::Always
                && item.hardlink_id.is_none()
                && matches!(existing.look(parent, name, item), Found::Same(_))
        }
        ItemKind::Symlink => {
            kind == FileType::Symlink
                && rustix::fs::readlinkat(parent, name, Vec::new())
                    .is_ok_and(|t| t.as_bytes() == item.link_target.as_slice())
        }
        ItemKind::Fifo => kind == FileType::Fifo,
        ItemKind::CharDev => kind == FileType::CharacterDevice && st.st_rdev == item.rdev,
        ItemKind::BlockDev => kind == FileType::BlockDevice && st.st_rdev == item.rdev,
    };
    // Symlinks have no mode of their own to compare.
    let meta_differs = if item.kind == ItemKind::Symlink {
        st.st_mtime != item.mtime.secs
    } else {
        existing::meta_differs(&st, item, is_root)
    };
    match (same_node, meta_differs) {
        (false, _) => Planned::Write,
        (true, true) => Planned::Fix,
        (true, false) => Planned::Same,
    }
}
