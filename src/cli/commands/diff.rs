//! `cairn diff NAME1 NAME2`: what was added, removed or changed from the first archive to the
//! second ([`crate::ops::diff`]). `+` added, `-` removed, `M` contents changed, `T` type
//! changed, `U` metadata only; each change with its old and new values (`[content +18 B -10 B,
//! mode -rw-r--r-- -> -rw-------]`), and in `--json-lines` as `{"mode": {"old": …, "new":
//! …}}`.

use serde_json::json;

use crate::archive;
use crate::cli::args::DiffArgs;
use crate::cli::commands::Status;
use crate::cli::output;
use crate::error::Result;
use crate::format::item::{Item, ItemKind};
use crate::ops::diff::{self, Change, Detail, Difference, Values};
use crate::repo::Repository;

pub fn run(repo: &Repository, args: &DiffArgs) -> Result<Status> {
    let (_, m1) = archive::select(repo, &args.archive1)?;
    let (_, m2) = archive::select(repo, &args.archive2)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let changes = diff::run(repo, &index, &m1, &m2)?;
    let (mut added, mut removed, mut changed) = (0, 0, 0);
    for d in &changes {
        match d.change {
            Change::Added => added += 1,
            Change::Removed => removed += 1,
            _ => changed += 1,
        }
        if args.json_lines {
            output::line(&json_line(d).to_string())?;
        } else {
            output::line(&text_line(d))?;
        }
    }
    if !args.json_lines {
        crate::say!("{added} added, {removed} removed, {changed} changed");
    }
    Ok(Status::Ok)
}

/// A change for people: `M path [content +18 B -10 B, mode -rw-r--r-- -> -rw-------]`, or `+
/// path (12 B)` for an added file.
fn text_line(d: &Difference) -> String {
    if d.details.is_empty() {
        format!(
            "{} {}{}",
            d.change.mark(),
            d.item.display_path(),
            size_note(&d.item)
        )
    } else {
        let texts: Vec<String> = d.details.iter().map(text).collect();
        format!(
            "{} {} [{}]",
            d.change.mark(),
            d.item.display_path(),
            texts.join(", ")
        )
    }
}

/// A change for scripts, with each detail under its name.
pub fn json_line(d: &Difference) -> serde_json::Value {
    let mut v = json!({
        "change": d.change.word(),
        "path": String::from_utf8_lossy(&d.item.path),
        "what": d.details.iter().map(|d| d.what).collect::<Vec<_>>(),
    });
    for detail in &d.details {
        v[detail.what] = json_of(detail);
    }
    if matches!(d.change, Change::Added | Change::Removed) && d.item.kind == ItemKind::File {
        v["size"] = json!(d.item.size);
    }
    v
}

/// One thing that differs, for people: `mode -rw-r--r-- -> -rw-------`.
fn text(d: &Detail) -> String {
    match &d.values {
        Values::Text { old, new } => format!("{} {old} -> {new}", d.what),
        Values::Time { old, new } => {
            format!(
                "{} {} -> {}",
                d.what,
                output::time(*old),
                output::time(*new)
            )
        }
        Values::Content { added, removed, .. } => format!(
            "content +{} -{}",
            output::size(*added),
            output::size(*removed)
        ),
        Values::Differs => d.what.to_string(),
    }
}

/// One thing that differs, for scripts: `{"old": …, "new": …}`.
fn json_of(d: &Detail) -> serde_json::Value {
    match &d.values {
        Values::Text { old, new } => json!({"old": old, "new": new}),
        Values::Time { old, new } => {
            json!({"old": output::time(*old), "new": output::time(*new)})
        }
        Values::Content {
            added,
            removed,
            old_size,
            new_size,
        } => json!({"added": added, "removed": removed,
                     "old_size": old_size, "new_size": new_size}),
        Values::Differs => json!(true),
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
