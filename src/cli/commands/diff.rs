//! `cairn diff NAME1 NAME2`: what was added, removed or changed from the first archive to the
//! second. `+` added, `-` removed, `M` contents changed, `T` type changed, `U` metadata only;
//! each change with its old and new values (`[content +18 B -10 B, mode -rw-r--r-- ->
//! -rw-------]`), and in `--json-lines` as `{"mode": {"old": …, "new": …}}`.

use std::collections::{BTreeMap, HashSet};

use serde_json::json;

use crate::archive::{self};
use crate::cli::args::DiffArgs;
use crate::cli::commands::Status;
use crate::cli::output;
use crate::error::Result;
use crate::format::item::{ChunkRef, Item, ItemKind};
use crate::repo::Repository;
use crate::source::fsmeta;
use crate::util::id::ChunkId;
use crate::util::text::printable;

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
    let acls = |i: &Item| -> Vec<(Vec<u8>, Vec<u8>)> {
        i.xattrs
            .iter()
            .filter(|(k, _)| fsmeta::is_acl(k))
            .cloned()
            .collect()
    };
    let others = |i: &Item| -> Vec<(Vec<u8>, Vec<u8>)> {
        i.xattrs
            .iter()
            .filter(|(k, _)| !fsmeta::is_acl(k))
            .cloned()
            .collect()
    };
    if acls(a) != acls(b) {
        what.push("acl");
    }
    if others(a) != others(b) {
        what.push("xattrs");
    }
    if a.inode_flags != b.inode_flags {
        what.push("flags");
    }
    if what.is_empty() {
        None
    } else if content {
        Some((Change::Modified, what))
    } else {
        Some((Change::Metadata, what))
    }
}

/// One thing that differs, old → new: for people (`mode -rw-r--r-- -> -rw-------`) and for
/// scripts (`"mode": {"old": …, "new": …}`).
pub struct Detail {
    pub what: &'static str,
    pub text: String,
    pub json: serde_json::Value,
}

fn owner(it: &Item) -> String {
    let name = |n: &str, id: u32| {
        if n.is_empty() {
            id.to_string()
        } else {
            printable(n)
        }
    };
    format!("{}:{}", name(&it.user, it.uid), name(&it.group, it.gid))
}

/// The old and new values of what `compare` found different.
pub fn details(a: &Item, b: &Item, what: &[&'static str]) -> Vec<Detail> {
    let old_new = |what: &'static str, old: String, new: String| Detail {
        what,
        text: format!("{what} {old} -> {new}"),
        json: json!({"old": old, "new": new}),
    };
    what.iter()
        .map(|w| match *w {
            "type" => old_new("type", a.kind.name().into(), b.kind.name().into()),
            "content" if a.kind == ItemKind::Symlink => old_new(
                "target",
                printable(&String::from_utf8_lossy(&a.link_target)),
                printable(&String::from_utf8_lossy(&b.link_target)),
            ),
            "content" if a.kind == ItemKind::File => {
                // As borg counts it: the bytes of chunks that are new, and of chunks gone.
                let old: HashSet<_> = a.chunks.iter().map(|c| c.id).collect();
                let new: HashSet<_> = b.chunks.iter().map(|c| c.id).collect();
                let sum = |cs: &[ChunkRef], other: &HashSet<ChunkId>| -> u64 {
                    cs.iter()
                        .filter(|c| !other.contains(&c.id))
                        .map(|c| u64::from(c.len))
                        .sum()
                };
                let (added, removed) = (sum(&b.chunks, &old), sum(&a.chunks, &new));
                Detail {
                    what: "content",
                    text: format!(
                        "content +{} -{}",
                        output::size(added),
                        output::size(removed)
                    ),
                    json: json!({"added": added, "removed": removed,
                                 "old_size": a.size, "new_size": b.size}),
                }
            }
            "content" => old_new("device", a.rdev.to_string(), b.rdev.to_string()),
            "mode" => old_new("mode", a.mode_string(), b.mode_string()),
            "owner" => old_new("owner", owner(a), owner(b)),
            "mtime" => old_new("mtime", output::time(a.mtime), output::time(b.mtime)),
            "acl" => old_new("acl", acl_of(a), acl_of(b)),
            "flags" => old_new(
                "flags",
                fsmeta::flag_names(a.inode_flags).join("+"),
                fsmeta::flag_names(b.inode_flags).join("+"),
            ),
            other => Detail {
                what: other,
                text: other.to_string(),
                json: json!(true),
            },
        })
        .collect()
}

/// An item's ACLs as text (`access` then `default:`), or `none`.
fn acl_of(it: &Item) -> String {
    let mut parts = Vec::new();
    for (k, v) in &it.xattrs {
        let text = fsmeta::acl_text(v).unwrap_or_else(|| "?".into());
        match k.as_slice() {
            fsmeta::ACL_ACCESS => parts.push(text),
            fsmeta::ACL_DEFAULT => parts.push(format!("default:{text}")),
            _ => {}
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" ")
    }
}

/// The size shown with an added or removed file.
fn size_note(it: &Item) -> String {
    if it.kind == ItemKind::File {
        format!(" ({})", output::size(it.size))
    } else {
        String::new()
    }
}

pub fn run(repo: &Repository, args: &DiffArgs) -> Result<Status> {
    let (_, m1) = archive::select(repo, &args.archive1)?;
    let (_, m2) = archive::select(repo, &args.archive2)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let load = |m| -> Result<BTreeMap<Vec<u8>, Item>> {
        Ok(archive::all_items(repo, &index, m)?
            .into_iter()
            .map(|i| (i.path.clone(), i))
            .collect())
    };
    let a = load(&m1)?;
    let b = load(&m2)?;
    // Per change: the item (the new one, or the old one for a removal) and what differs.
    let mut changes: Vec<(Change, &Item, Vec<Detail>)> = Vec::new();
    for (path, ia) in &a {
        match b.get(path) {
            None => changes.push((Change::Removed, ia, vec![])),
            Some(ib) => {
                if let Some((c, what)) = compare(ia, ib) {
                    changes.push((c, ib, details(ia, ib, &what)));
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
    for (c, item, details) in &changes {
        match c {
            Change::Added => added += 1,
            Change::Removed => removed += 1,
            _ => changed += 1,
        }
        if args.json_lines {
            let mut v = json!({
                "change": c.word(),
                "path": String::from_utf8_lossy(&item.path),
                "what": details.iter().map(|d| d.what).collect::<Vec<_>>(),
            });
            for d in details {
                v[d.what] = d.json.clone();
            }
            if matches!(c, Change::Added | Change::Removed) && item.kind == ItemKind::File {
                v["size"] = json!(item.size);
            }
            output::line(&v.to_string())?;
        } else if details.is_empty() {
            output::line(&format!(
                "{} {}{}",
                c.mark(),
                item.display_path(),
                size_note(item)
            ))?;
        } else {
            let texts: Vec<&str> = details.iter().map(|d| d.text.as_str()).collect();
            output::line(&format!(
                "{} {} [{}]",
                c.mark(),
                item.display_path(),
                texts.join(", ")
            ))?;
        }
    }
    if !args.json_lines {
        crate::say!("{added} added, {removed} removed, {changed} changed");
    }
    Ok(Status::Ok)
}
