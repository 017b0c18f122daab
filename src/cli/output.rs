//! Writing to stdout without panicking on a closed pipe (`cairn list | head`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use std::collections::HashMap;

use serde_json::json;

use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::source::fsmeta;
pub use crate::util::progress::{count, size};
use crate::util::text::printable;

/// `--utc`: times for people in UTC rather than local time.
static UTC: AtomicBool = AtomicBool::new(false);

/// Set once, from the command line.
pub fn show_times_in_utc(utc: bool) {
    UTC.store(utc, Ordering::Relaxed);
}

/// A time for people to read: local with its offset, or UTC with `--utc`.
pub fn time(t: crate::util::clock::Timestamp) -> String {
    if UTC.load(Ordering::Relaxed) {
        t.display_utc()
    } else {
        t.display_local()
    }
}

/// A time for a file name: `2026-12-03T19:16:03`, local (or UTC with `--utc`), no spaces.
pub fn time_for_name(t: crate::util::clock::Timestamp) -> String {
    if UTC.load(Ordering::Relaxed) {
        t.name_utc()
    } else {
        t.name_local()
    }
}

/// Writes a line to stdout. A closed pipe becomes [`Error::Io`] with kind `BrokenPipe`, which
/// `main` turns into a quiet exit.
pub fn line(s: &str) -> Result<()> {
    // No escape sequence or carriage return reaches the terminal; newlines stay (a JSON
    // document printed whole), and names are escaped where lines are made.
    let s = crate::util::text::safe_output(s);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{s}").map_err(|e| Error::io("<stdout>", e))
}

/// Warns that `pattern` (a path given to extract or export-tar) matches nothing in
/// `archive`: in `--log-json` with the pattern as `path` and `kind` `no-match`.
pub fn unmatched(pattern: &str, archive: &str) {
    crate::util::log::Warning {
        message: format!("{pattern}: matches nothing in archive {archive}"),
        path: pattern.to_string(),
        kind: "no-match",
        errno: None,
    }
    .say(false);
}

/// Writes lines to stdout.
pub fn lines(ls: &[String]) -> Result<()> {
    for l in ls {
        line(l)?;
    }
    Ok(())
}

/// The first name of each hardlinked inode, for the later ones.
#[derive(Default)]
pub struct FirstNames(HashMap<[u8; 16], Vec<u8>>);

impl FirstNames {
    /// For a later name of a hardlinked inode, its first name; the first one is remembered.
    pub fn link_to(&mut self, item: &Item) -> Option<Vec<u8>> {
        let h = item.hardlink_id?;
        match self.0.get(&h) {
            Some(first) => Some(first.clone()),
            None => {
                self.0.insert(h, item.path.clone());
                None
            }
        }
    }
}

/// One item as JSON; `link_to`: the first name of the inode, for a later hardlink.
pub fn item_json(it: &Item, link_to: Option<&[u8]>) -> serde_json::Value {
    let mut v = json!({
        "path": String::from_utf8_lossy(&it.path),
        "type": it.kind.name(),
        "mode": it.mode_string(),
        "user": it.user,
        "group": it.group,
        "uid": it.uid,
        "gid": it.gid,
        "size": it.size,
        "mtime": it.mtime.rfc3339(),
    });
    if it.kind == ItemKind::Symlink {
        v["target"] = json!(String::from_utf8_lossy(&it.link_target));
    }
    if let Some(first) = link_to {
        v["hardlink_to"] = json!(String::from_utf8_lossy(first));
    }
    let mut names = Vec::new();
    for (k, value) in &it.xattrs {
        match k.as_slice() {
            fsmeta::ACL_ACCESS => v["acl_access"] = json!(fsmeta::acl_text(value)),
            fsmeta::ACL_DEFAULT => v["acl_default"] = json!(fsmeta::acl_text(value)),
            _ => names.push(String::from_utf8_lossy(k).into_owned()),
        }
    }
    if !names.is_empty() {
        v["xattrs"] = json!(names);
    }
    if it.inode_flags != 0 {
        v["flags"] = json!(fsmeta::flag_names(it.inode_flags));
    }
    if std::str::from_utf8(&it.path).is_err() {
        v["path_hex"] = json!(hex::encode(&it.path));
    }
    v
}

/// One item as a line, `ls -l` style, names escaped; a later name of a hardlinked inode says
/// `link to` its first.
pub fn item_line(it: &Item, link_to: Option<&[u8]>) -> String {
    let owner = format!(
        "{}/{}",
        if it.user.is_empty() {
            it.uid.to_string()
        } else {
            it.user.clone()
        },
        if it.group.is_empty() {
            it.gid.to_string()
        } else {
            it.group.clone()
        }
    );
    // As `ls -l`: a `+` after the mode when the item has an access ACL.
    let acl = if it.xattrs.iter().any(|(k, _)| k == fsmeta::ACL_ACCESS) {
        "+"
    } else {
        " "
    };
    // As `ls -l`: a device shows its major and minor numbers where a file shows its size.
    let size = match it.kind {
        ItemKind::BlockDev | ItemKind::CharDev => format!(
            "{},{:>4}",
            rustix::fs::major(it.rdev),
            rustix::fs::minor(it.rdev)
        ),
        _ => it.size.to_string(),
    };
    let mut line = format!(
        "{}{acl} {:<17} {:>12} {} {}",
        it.mode_string(),
        owner,
        size,
        time(it.mtime),
        it.display_path()
    );
    if it.kind == ItemKind::Symlink {
        line.push_str(" -> ");
        line.push_str(&printable(&String::from_utf8_lossy(&it.link_target)));
    }
    if let Some(first) = link_to {
        line.push_str(" link to ");
        line.push_str(&printable(&String::from_utf8_lossy(first)));
    }
    line
}

/// The entry counts of an archive, as `info` and `create --stats` print them.
pub fn count_lines(s: &crate::archive::ArchiveStats) -> [String; 4] {
    [
        format!(
            "Files:             {} (read {}, unchanged {})",
            s.files, s.files_read, s.files_unchanged
        ),
        format!("Directories:       {}", s.dirs),
        format!("Symlinks, other:   {}, {}", s.symlinks, s.others),
        format!("Warnings:          {}", s.warnings),
    ]
}

/// What to say after archives were removed: how their space is freed.
pub fn after_removal(repo: &crate::repo::Repository) -> &'static str {
    if repo.store().append_only() {
        "The server is append-only: it recorded the removal and keeps the data (its owner can bring the archive back)."
    } else {
        "Run cairn compact to free the space."
    }
}

/// What a verification record says of a repository, for people: how much this client verified
/// in the last day, week and month, and how old its oldest verification is.
pub fn coverage_line(c: &crate::ops::check::record::Coverage) -> String {
    if c.packs == 0 {
        return "Verified data: the repository holds no pack".into();
    }
    if c.never_packs == c.packs {
        return "Verified data: none yet by this client (cairn check --verify-data, or --subset 10% nightly)".into();
    }
    let share = |bytes: u64| {
        let p = bytes as f64 * 100.0 / c.bytes.max(1) as f64;
        if bytes > 0 && p < 1.0 {
            "<1%".to_string()
        } else {
            format!("{p:.0}%")
        }
    };
    let within: Vec<String> = c
        .within
        .iter()
        .map(|w| match w.days {
            1 => format!("{} in the last day", share(w.bytes)),
            d => format!("{} in {d} days", share(w.bytes)),
        })
        .collect();
    let oldest = match (c.oldest_age_secs, c.never_packs) {
        (Some(age), _) => format!("the oldest verification is {} old", age_text(age)),
        (None, n) => format!(
            "{} ({}) never verified here",
            count(n, "pack"),
            size(c.never_bytes)
        ),
    };
    format!(
        "Verified data (by this client): {}; {oldest}",
        within.join(", ")
    )
}

/// An age for people: `40 seconds`, `12 minutes`, `5 hours`, `3 days`.
pub fn age_text(secs: u64) -> String {
    match secs {
        0..=119 => count(secs, "second"),
        120..=7199 => count(secs / 60, "minute"),
        7200..=172_799 => count(secs / 3600, "hour"),
        _ => count(secs / 86_400, "day"),
    }
}
