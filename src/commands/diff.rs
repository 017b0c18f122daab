//! `cairn diff NAME1 NAME2`: what was added, removed or changed from the first archive to the
//! second. `+` added, `-` removed, `M` contents changed, `T` type changed, `U` metadata only.

use std::collections::BTreeMap;

use serde_json::json;

use crate::archive::item::Item;
use crate::archive::{self};
use crate::cli::DiffArgs;
use crate::commands::{output, Status};
use crate::error::Result;
use crate::repo::Repository;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Removed,
    Modified,
    TypeChanged,
    Metadata,
}

impl Change {
    fn mark(self) -> &'static str {
        match self {
            Change::Added => "+",
            Change::Removed => "-",
            Change::Modified => "M",
            Change::TypeChanged => "T",
            Change::Metadata => "U",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
            Change::TypeChanged => "type changed",
            Change::Metadata => "metadata changed",
        }
    }
}

/// What differs between two versions of one path; `None` when nothing does.
pub fn compare(a: &Item, b: &Item) -> Option<(Change, Vec<&'static str>)> {
    if a.kind != b.kind {
        return Some((Change::TypeChanged, vec!["type"]));
    }
    let mut what = Vec::new();
    let content = a
        .chunks
        .iter()
        .map(|c| c.id)
        .ne(b.chunks.iter().map(|c| c.id))
        || a.size != b.size
        || a.link_target != b.link_target
        || a.rdev != b.rdev;
    if content {
        what.push("content");
    }
    if a.mode != b.mode {
        what.push("mode");
    }
    if (a.uid, a.gid, &a.user, &a.group) != (b.uid, b.gid, &b.user, &b.group) {
        what.push("owner");
    }
    if a.mtime != b.mtime {
        what.push("mtime");
    }
    if a.xattrs != b.xattrs {
        what.push("xattrs");
    }
    if what.is_empty() {
        None
    } else if content {
        Some((Change::Modified, what))
    } else {
        Some((Change::Metadata, what))
    }
}

pub fn run(repo: &Repository, args: &DiffArgs) -> Result<Status> {
    let (_, m1) = archive::select(repo, &args.archive1)?;
    let (_, m2) = archive::select(repo, &args.archive2)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        eprintln!("note: {n}");
    }
    let load = |m| -> Result<BTreeMap<Vec<u8>, Item>> {
        Ok(archive::all_items(repo, &index, m)?
            .into_iter()
            .map(|i| (i.path.clone(), i))
            .collect())
    };
    let a = load(&m1)?;
    let b = load(&m2)?;
    let mut changes: Vec<(Change, &Item, Vec<&'static str>)> = Vec::new();
    for (path, ia) in &a {
        match b.get(path) {
            None => changes.push((Change::Removed, ia, vec![])),
            Some(ib) => {
                if let Some((c, what)) = compare(ia, ib) {
                    changes.push((c, ib, what));
                }
            }
        }
    }
    for (path, ib) in &b {
        if !a.contains_key(path) {
            changes.push((Change::Added, ib, vec![]));
        }
    }
    changes.sort_by(|x, y| x.1.path.cmp(&y.1.path));
    let (mut added, mut removed, mut changed) = (0, 0, 0);
    for (c, item, what) in &changes {
        match c {
            Change::Added => added += 1,
            Change::Removed => removed += 1,
            _ => changed += 1,
        }
        if args.json_lines {
            output::line(
                &json!({"change": c.word(), "path": item.display_path(), "what": what}).to_string(),
            )?;
        } else if what.is_empty() {
            output::line(&format!("{} {}", c.mark(), item.display_path()))?;
        } else {
            output::line(&format!(
                "{} {} [{}]",
                c.mark(),
                item.display_path(),
                what.join(", ")
            ))?;
        }
    }
    if !args.json_lines {
        eprintln!("{added} added, {removed} removed, {changed} changed");
    }
    Ok(Status::Ok)
}
