//! `extract --dry-run`: what a restore into the target would write, fix and delete, found by
//! the same comparisons the restore makes (file contents by keyed chunk ids), with nothing
//! created, changed or fetched. Directories are opened as the restore opens them (one
//! component at a time, never following a symlink), and only read.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Stat};
use rustix::io::Errno;

use super::existing::{self, Existing, Found, Overwrite, Owner};
use super::extras::{self, Extras, Swept};
use super::metadata::Owners;
use super::room::{self, DirThere};
use super::selection::{self, Selection};
use super::target::{safe_components, DirWalker};
use crate::archive::{self, ArchiveMeta};
use crate::error::Result;
use crate::format::item::{Item, ItemKind};
use crate::index::ChunkIndex;
use crate::ops::own_dirs::OwnDir;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::log::Warning;

/// What the restore would do with one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// Made or written anew (missing, or different from the archive's).
    Write,
    /// Already holds the archive's contents; its metadata would be set.
    Fix,
    /// Already as in the archive (contents, mode, times, and owner as root).
    Same,
    /// Something is there and `--overwrite never` keeps it, or it is one of cairn's own
    /// directories, which `--delete` keeps.
    Keep,
    /// Not restored (or, a directory, not given its metadata): a warning says why.
    Skip,
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
            Planned::Skip => "skip",
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
    pub skip: u64,
    pub delete: u64,
    pub unmatched: Vec<String>,
    pub warnings: Vec<Warning>,
    /// What the run would fail on (exit 2): a directory it could not enter or write.
    pub errors: Vec<Warning>,
    /// What the run would say in notes (cairn's own directories kept).
    pub notes: Vec<String>,
}

pub struct DryRunOptions {
    pub target: std::path::PathBuf,
    pub selection: Selection,
    pub overwrite: Overwrite,
    pub delete: bool,
    pub numeric_ids: bool,
    /// cairn's own directories: never restored into, replaced or deleted.
    pub own: Vec<OwnDir>,
    /// `--no-preserve-root`.
    pub root_ok: bool,
}

/// A hardlinked inode the target holds with the archive's contents: its names' fates wait
/// until all of them were seen, as the restore's do ([`super::links`]).
struct LinkedThere {
    dev: u64,
    ino: u64,
    nlink: u64,
    /// Whether its metadata differs from the item's.
    differs: bool,
    size: u64,
    /// Every name in archive order, and whether it is that inode already.
    names: Vec<(Vec<u8>, bool)>,
}

/// The dry run's state while it walks the items.
struct Planner<'a> {
    existing: Existing<'a>,
    owners: Owners,
    overwrite: Overwrite,
    delete: bool,
    walker: Option<DirWalker>,
    /// A non-directory `--overwrite never` keeps where a directory goes: nothing below it is
    /// restored.
    kept_in_the_way: Option<Vec<u8>>,
    /// Directories that would be made (or made anew), the innermost last: everything below
    /// them is written.
    made: Vec<Vec<u8>>,
    /// Hardlink groups whose first name was found in place.
    linked: HashMap<[u8; 16], LinkedThere>,
    /// Hardlink groups seen so far.
    groups: std::collections::HashSet<[u8; 16]>,
    /// What `--delete` would remove from the way of the item at hand (said before it).
    in_way: Vec<Swept>,
    report: DryRunReport,
}

fn under(path: &[u8], dir: &[u8]) -> bool {
    path.starts_with(dir) && path.get(dir.len()) == Some(&b'/')
}

/// Walks the selected items and the target; `each` is told every path's fate (items in
/// archive order, hardlinked files found in place once all their names were seen, then what
/// would be deleted).
pub fn run(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
    mut opts: DryRunOptions,
    interrupt: &Interrupt,
    mut each: impl FnMut(Planned, &[u8], bool) -> Result<()>,
) -> Result<DryRunReport> {
    let root =
        super::target::open_target(&opts.target, false, opts.delete, opts.root_ok, &opts.own)?;
    let own = std::mem::take(&mut opts.own);
    let mut p = Planner {
        existing: Existing::new(repo.data_chunker()?, repo.crypto()),
        owners: Owners::new(opts.numeric_ids),
        overwrite: opts.overwrite,
        delete: opts.delete,
        walker: root.map(|root| DirWalker::new(root, own, false)),
        kept_in_the_way: None,
        made: Vec::new(),
        linked: HashMap::new(),
        groups: Default::default(),
        in_way: Vec::new(),
        report: DryRunReport::default(),
    };
    let mut extras = opts
        .delete
        .then(|| Extras::new(opts.selection.has_no_paths()));
    let strip = opts.selection.strip();
    for item in archive::items(repo, index, meta) {
        interrupt.check()?;
        let item = item?;
        if let (Some(x), Some(name)) = (&mut extras, selection::stripped(&item.path, strip)) {
            x.held(name);
        }
        let Some(item) = opts.selection.pick(item) else {
            continue;
        };
        if safe_components(&item.path).is_none() {
            p.report.warnings.push(Warning::at(
                &item.path,
                "unsafe-path",
                format!(
                    "{}: unsafe path in archive; it would be skipped",
                    item.display_path()
                ),
            ));
            continue;
        }
        if let (Some(x), ItemKind::Dir) = (&mut extras, item.kind) {
            x.restored_dir(&item.path);
        }
        p.plan_item(&item, &mut each)?;
    }
    for (planned, path, size) in p.settle_links() {
        p.count_file(planned, size);
        each(planned, &path, false)?;
    }
    // The run deletes nothing after a restore that was not complete.
    let complete = p.report.warnings.is_empty() && p.report.errors.is_empty();
    if extras.is_some() && !complete {
        p.report.warnings.push(Warning::plain(
            "nothing would be deleted (--delete): not every item would be restored",
        ));
    }
    if let (Some(x), true) = (&extras, complete) {
        p.plan_extras(x, &mut each)?;
    }
    let mut report = p.report;
    report.unmatched = opts.selection.unmatched();
    Ok(report)
}

impl Planner<'_> {
    /// One selected item's fate, after what `--delete` would remove from its way: told to
    /// `each`, and counted.
    fn plan_item(
        &mut self,
        item: &Item,
        each: &mut impl FnMut(Planned, &[u8], bool) -> Result<()>,
    ) -> Result<()> {
        let planned = self.item(item);
        for s in std::mem::take(&mut self.in_way) {
            if let Swept::Gone { path, is_dir } = s {
                self.report.delete += 1;
                each(Planned::Delete, &path, is_dir)?;
            }
        }
        if let Some(planned) = planned {
            self.count(planned, item);
            each(planned, &item.path, item.kind == ItemKind::Dir)?;
        }
        Ok(())
    }

    /// What `--delete` would remove beyond what the archive holds, told to `each`: cairn's
    /// own directories are kept (a note says so), and what could not be removed is a warning.
    fn plan_extras(
        &mut self,
        extras: &Extras,
        each: &mut impl FnMut(Planned, &[u8], bool) -> Result<()>,
    ) -> Result<()> {
        let Some(w) = &self.walker else {
            return Ok(());
        };
        for extra in extras.find(w) {
            let swept =
                extras::sweep(w, &extra.path, true).map_err(crate::error::Error::invalid)?;
            for s in swept {
                match s {
                    Swept::Gone { path, is_dir } => {
                        self.report.delete += 1;
                        each(Planned::Delete, &path, is_dir)?;
                    }
                    Swept::Kept { path, why, note } => {
                        let shown = crate::util::text::printable_bytes(&path);
                        if note {
                            self.report.notes.push(format!("kept {shown}: {why}"));
                            self.report.keep += 1;
                            each(Planned::Keep, &path, true)?;
                        } else {
                            self.report.warnings.push(Warning::at(
                                &path,
                                "not-deleted",
                                format!("{shown}: cannot delete: {why}"),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn count(&mut self, planned: Planned, item: &Item) {
        match planned {
            Planned::Write => {
                self.report.write_items += 1;
                if item.kind == ItemKind::File {
                    self.report.write_files += 1;
                    self.report.write_bytes += item.size;
                }
            }
            Planned::Fix => self.report.fix += 1,
            Planned::Same => {
                self.report.same += 1;
                self.report.same_bytes += item.size;
            }
            Planned::Keep => self.report.keep += 1,
            Planned::Skip => self.report.skip += 1,
            Planned::Delete => {}
        }
    }

    fn count_file(&mut self, planned: Planned, size: u64) {
        let mut item = Item::new(ItemKind::File, Vec::new());
        item.size = size;
        self.count(planned, &item);
    }

    fn warn(&mut self, item: &Item, why: &str) -> Planned {
        let said = format!("{}: {why}", item.display_path());
        self.report
            .warnings
            .push(Warning::at(&item.path, "skipped", said));
        Planned::Skip
    }

    /// The fate of one selected item; `None` when it waits for its hardlink group.
    fn item(&mut self, item: &Item) -> Option<Planned> {
        if let Some(k) = &self.kept_in_the_way {
            if under(&item.path, k) {
                return Some(Planned::Keep);
            }
        }
        // Items come depth-first: a made directory stops mattering once its subtree ends.
        while self.made.last().is_some_and(|d| !under(&item.path, d)) {
            self.made.pop();
        }
        if !self.made.is_empty() {
            if item.kind == ItemKind::Dir {
                self.made.push(item.path.clone());
            }
            return Some(Planned::Write);
        }
        let comps = safe_components(&item.path)?;
        let (name, parents) = comps.split_last()?;
        let parent = match self.parent(parents) {
            Ok(Some(parent)) => parent,
            // Missing, or made by the restore.
            Ok(None) => {
                if item.kind == ItemKind::Dir {
                    self.made.push(item.path.clone());
                }
                return Some(Planned::Write);
            }
            Err(why) if why.is_empty() => return Some(Planned::Skip),
            Err(why) => return Some(self.warn(item, &why)),
        };
        let mut planned = self.plan(&parent, name, item)?;
        if planned == Planned::Write {
            planned = self.writable(&parent, item);
        }
        // A hardlinked file written anew (over a directory in its way, say): its later names
        // are linked to it, as the restore links them.
        if let (Planned::Write, Some(h)) = (planned, item.hardlink_id) {
            self.groups.insert(h);
        }
        match (planned, item.kind) {
            (Planned::Keep, ItemKind::Dir) => self.kept_in_the_way = Some(item.path.clone()),
            (Planned::Write, ItemKind::Dir) => self.made.push(item.path.clone()),
            _ => {}
        }
        Some(planned)
    }

    /// `Write`, when the restore can make the item in `parent`; else `Skip`, with the error
    /// the restore would give.
    fn writable(&mut self, parent: &OwnedFd, item: &Item) -> Planned {
        let need = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
        match rustix::fs::accessat(parent, ".", need, AtFlags::EACCESS) {
            Ok(()) => Planned::Write,
            Err(e) => {
                let said = format!("{}: not restored: {e}", item.display_path());
                self.report
                    .errors
                    .push(Warning::at(&item.path, "not-restored", said));
                Planned::Skip
            }
        }
    }

    /// The parent directory as the restore would find it: `None` when the restore makes it
    /// (it is missing, or with `--delete` a file is in its place); `Err` when it would refuse.
    fn parent(&mut self, parents: &[&[u8]]) -> std::result::Result<Option<OwnedFd>, String> {
        let Some(w) = self.walker.as_mut() else {
            return Ok(None);
        };
        match w.dir(parents, false) {
            Ok(fd) => Ok(fd.as_fd().try_clone_to_owned().ok()),
            Err(why) if why.contains("not a directory") => {
                if self.delete {
                    Ok(None)
                } else {
                    Err(why)
                }
            }
            Err(why) if why.contains("nothing is restored into it") => Err(why),
            // Missing: made by the restore.
            Err(why) if why.contains(&Errno::NOENT.to_string()) => Ok(None),
            // One it cannot enter: the restore fails there (an error, not a warning).
            Err(why) => {
                self.report.errors.push(Warning::plain(why));
                Err(String::new())
            }
        }
    }

    /// What the restore would do with `item` at `name` in `parent` (which exists).
    fn plan(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Option<Planned> {
        let Ok(st) = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return Some(Planned::Write);
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if self.overwrite == Overwrite::Never {
            return Some(
                if item.kind == ItemKind::Dir && kind == FileType::Directory {
                    // An existing directory is kept as it is, and what is below it looked at.
                    Planned::Same
                } else {
                    Planned::Keep
                },
            );
        }
        let owner = self.owners.of(item);
        if kind == FileType::Directory {
            return Some(self.dir_there(item, &st, owner));
        }
        match item.kind {
            ItemKind::File => self.file(parent, name, item, &st, owner),
            // What stands there is replaced: a directory item's file, and every symlink,
            // FIFO and device node, which the restore always makes anew (never keeping one it
            // did not make).
            _ => Some(Planned::Write),
        }
    }

    /// A directory where `item` goes.
    fn dir_there(&mut self, item: &Item, st: &Stat, owner: Owner) -> Planned {
        if item.kind != ItemKind::Dir {
            if !self.delete {
                return self.warn(item, room::DIR_IN_THE_WAY);
            }
            return self.replaced(item);
        }
        let own = self.walker.as_ref().map_or(&[][..], |w| &w.own[..]);
        match room::plan_dir(st, owner, self.owners.euid, own) {
            DirThere::Use => fate(true, existing::meta_differs(st, item, owner)),
            DirThere::Own(what) => {
                let why = format!("left alone ({what}): nothing is restored into it");
                self.warn(item, &why)
            }
            DirThere::Foreign(uid) if !self.delete => self.warn(item, &room::foreign_warning(uid)),
            DirThere::Foreign(_) => self.replaced(item),
        }
    }

    /// With `--delete`, a directory in the way: written if it can be removed whole.
    fn replaced(&mut self, item: &Item) -> Planned {
        let result = self
            .walker
            .as_ref()
            .map_or(Ok(Vec::new()), |w| room::plan_in_way(w, &item.path));
        match result {
            Ok(swept) => {
                self.in_way = swept;
                Planned::Write
            }
            Err(why) => self.warn(item, &why),
        }
    }

    /// A file item where a non-directory is.
    fn file(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        item: &Item,
        st: &Stat,
        owner: Owner,
    ) -> Option<Planned> {
        if self.overwrite == Overwrite::Always {
            return Some(Planned::Write);
        }
        let Some(h) = item.hardlink_id else {
            let same = matches!(
                self.existing.look(parent, name, item, owner),
                Found::Same(_)
            );
            return Some(fate(same, differs(st, item, owner)));
        };
        if let Some(group) = self.linked.get_mut(&h) {
            let here = (st.st_dev, st.st_ino) == (group.dev, group.ino);
            group.names.push((item.path.clone(), here));
            return None;
        }
        if !self.groups.insert(h) {
            // A later name of a group written anew: linked to it.
            return Some(Planned::Write);
        }
        match self.existing.look(parent, name, item, owner) {
            Found::Same(same) => {
                self.linked.insert(
                    h,
                    LinkedThere {
                        dev: same.dev,
                        ino: same.ino,
                        nlink: same.nlink,
                        differs: differs(st, item, owner),
                        size: item.size,
                        names: vec![(item.path.clone(), true)],
                    },
                );
                None
            }
            _ => Some(Planned::Write),
        }
    }

    /// The fates of the names of hardlinked files found in place: kept when the inode has no
    /// name but the archive's (names that are other files would be linked to it), else all
    /// written anew.
    fn settle_links(&mut self) -> Vec<(Planned, Vec<u8>, u64)> {
        let mut out = Vec::new();
        for group in std::mem::take(&mut self.linked).into_values() {
            let here = group.names.iter().filter(|(_, h)| *h).count() as u64;
            let kept = here == group.nlink;
            for (path, is_here) in group.names {
                let planned = match (kept, is_here) {
                    (true, true) => fate(true, group.differs),
                    _ => Planned::Write,
                };
                out.push((planned, path, group.size));
            }
        }
        out.sort_by(|a, b| a.1.cmp(&b.1));
        out
    }
}

/// Whether the metadata of `st` differs from what the restore sets (a symlink has no mode of
/// its own to compare).
fn differs(st: &Stat, item: &Item, owner: Owner) -> bool {
    if item.kind == ItemKind::Symlink {
        st.st_mtime != item.mtime.secs
    } else {
        existing::meta_differs(st, item, owner)
    }
}

fn fate(same_node: bool, meta_differs: bool) -> Planned {
    match (same_node, meta_differs) {
        (false, _) => Planned::Write,
        (true, true) => Planned::Fix,
        (true, false) => Planned::Same,
    }
}
