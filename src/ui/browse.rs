//! What the page reads: a repository's archives and figures, an archive's tree (built once,
//! served a page at a time), find, diff, and a tar of one path. Every path goes to the page
//! printable (`name`) and as the hex of its bytes (`key`), which is what the page sends back:
//! a name that is not UTF-8 is restored as it is.

use std::os::unix::ffi::OsStrExt;

use serde_json::{json, Value};

use crate::archive::{self, ArchiveMeta};
use crate::error::{Error, Result};
use crate::format::item::ItemKind;
use crate::repo::Repository;
use crate::source::exclude::Excludes;
use crate::ui::tree::Tree;
use crate::util::id::ArchiveId;
use crate::util::text::printable_bytes;

/// The most entries one page of a directory holds.
pub const PAGE_MAX: usize = 5000;

/// The repository's archives, oldest first, with their figures, and the repository's.
pub fn archives(repo: &Repository) -> Result<Value> {
    let list = archive::load_all(repo)?;
    let packs = crate::index::persist::list_packs(&**repo.store())?;
    let coverage = crate::ops::check::record::Record::load(repo)
        .coverage(&packs, crate::util::clock::now_secs());
    let archives: Vec<Value> = list
        .archives
        .iter()
        .map(|(id, m)| archive_json(id, m))
        .collect();
    let damaged: Vec<String> = list
        .damaged
        .iter()
        .map(|(id, e)| format!("archive {id} cannot be read: {e}"))
        .collect();
    Ok(json!({
        "id": repo.id_hex(),
        "encryption": repo.config().encryption,
        "size": packs.values().sum::<u64>(),
        "packs": packs.len(),
        "verification": coverage,
        "archives": archives,
        "damaged": damaged,
    }))
}

fn archive_json(id: &ArchiveId, m: &ArchiveMeta) -> Value {
    json!({
        "id": id.to_hex(),
        "name": m.name,
        "time": m.start.rfc3339(),
        "start": m.start.secs,
        "end": m.end.secs,
        "hostname": m.hostname,
        "username": m.username,
        "comment": m.comment,
        "tags": m.tags,
        "stats": m.stats,
    })
}

/// The archive `id` (hex, whole) of the repository.
pub fn select(repo: &Repository, id: &str) -> Result<(ArchiveId, ArchiveMeta)> {
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::invalid("an archive is named by its whole id"));
    }
    archive::select(repo, &format!("aid:{id}"))
}

/// Builds the tree of an archive.
pub fn build_tree(repo: &Repository, meta: &ArchiveMeta) -> Result<Tree> {
    let (index, _) = repo.load_index_for_reading()?;
    let s = &meta.stats;
    Tree::build(
        archive::items(repo, &index, meta),
        meta.start.secs,
        s.files + s.dirs + s.symlinks + s.others,
    )
}

/// A stored path from the page's key (the hex of its bytes; empty: the root).
pub fn path_of_key(key: &str) -> Result<Vec<u8>> {
    hex::decode(key).map_err(|_| Error::invalid("a path is given as the hex of its bytes"))
}

/// `path` as extract and export-tar take a path: as it is, or, when it holds a character
/// their patterns use (`*`, `?`, `[`), with each such character escaped, so that it names
/// the one path chosen and nothing else (`a*` not `abc`, `[x]` not `x`).
pub fn literal(path: &[u8]) -> Vec<u8> {
    if !path.iter().any(|b| matches!(b, b'*' | b'?' | b'[')) {
        return path.to_vec();
    }
    let mut out = Vec::with_capacity(path.len() + 8);
    for b in path {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'{' | b'}' | b'\\') {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out
}

/// One page of the directory at `path` in `tree`: its entries from `offset`, at most `limit`.
pub fn directory(tree: &Tree, path: &[u8], offset: usize, limit: usize) -> Result<Value> {
    let mut path = path;
    while let Some(p) = path.strip_suffix(b"/") {
        path = p;
    }
    let node = tree.find(path)?;
    if tree.entry(node).kind != ItemKind::Dir {
        return Err(Error::invalid(format!(
            "{} is not a directory",
            printable_bytes(path)
        )));
    }
    let limit = limit.clamp(1, PAGE_MAX);
    let children = tree.children(node);
    let entries: Vec<Value> = children
        .iter()
        .skip(offset)
        .take(limit)
        .map(|n| {
            let c = tree.entry(*n);
            let name = tree.name(*n);
            let mut full = path.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            let mut v = json!({
                "name": printable_bytes(name),
                "key": hex::encode(&full),
                "type": c.kind.name(),
                "perm": c.perm,
                "user": tree.owners[c.user as usize],
                "group": tree.owners[c.group as usize],
                "size": c.size,
                "mtime": c.mtime,
            });
            if c.kind == ItemKind::Dir {
                v["entries"] = json!(tree.children(*n).len());
            }
            if let Some(target) = tree.target(*n) {
                v["target"] = json!(printable_bytes(target));
            }
            v
        })
        .collect();
    Ok(json!({
        "path": printable_bytes(path),
        "key": hex::encode(path),
        "total": children.len(),
        "offset": offset,
        "entries": entries,
    }))
}

/// The items matching `pattern` (the rules of `find`), newest archive first, at most `limit`.
pub fn find(repo: &Repository, pattern: &str, limit: usize) -> Result<Value> {
    if pattern.bytes().all(|b| b == b'/') {
        return Err(Error::invalid("find needs a pattern, such as '*.pdf'"));
    }
    let matcher = Excludes::new(&[pattern], false)?;
    let list = archive::load_all(repo)?;
    let (index, _) = repo.load_index_for_reading()?;
    let mut found = Vec::new();
    let mut more = false;
    'archives: for (id, meta) in list.archives.iter().rev() {
        for item in archive::items(repo, &index, meta) {
            let item = item?;
            if !matcher.is_excluded(&item.path) {
                continue;
            }
            if found.len() == limit {
                more = true;
                break 'archives;
            }
            let mut v = crate::cli::output::item_json(&item, None);
            v["key"] = json!(hex::encode(&item.path));
            v["archive"] = json!(meta.name);
            v["archive_id"] = json!(id.to_hex());
            v["archive_time"] = json!(meta.start.rfc3339());
            found.push(v);
        }
    }
    Ok(json!({"found": found, "more": more}))
}

/// What differs from archive `a` to archive `b` (as `diff --json-lines` says it), at most
/// `limit` paths.
pub fn diff(repo: &Repository, a: &str, b: &str, limit: usize) -> Result<Value> {
    let (_, ma) = select(repo, a)?;
    let (_, mb) = select(repo, b)?;
    let (index, _) = repo.load_index_for_reading()?;
    let all = crate::ops::diff::run(repo, &index, &ma, &mb)?;
    let total = all.len();
    let changes: Vec<Value> = all
        .iter()
        .take(limit)
        .map(crate::cli::commands::diff::json_line)
        .collect();
    Ok(json!({"from": ma.name, "to": mb.name, "total": total, "changes": changes}))
}

/// Writes the tar stream of `path` (and what is below it) of archive `meta` to `out`.
pub fn tar(
    repo: &Repository,
    meta: &ArchiveMeta,
    path: &[u8],
    out: impl std::io::Write,
) -> Result<()> {
    let paths = [std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        &literal(path),
    ))];
    let selection =
        crate::cli::select::selection(&paths, &crate::cli::args::ReshapeArgs::default())?;
    let (index, _) = repo.load_index_for_reading()?;
    let contents = crate::archive::content::Contents::new(repo, &index);
    let items = archive::items(repo, &index, meta);
    let written = crate::ops::tar::write_selected(contents, items, selection, out, "the download")?;
    if written.entries == 0 {
        return Err(Error::invalid(format!(
            "nothing at {} in the archive",
            printable_bytes(path)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::literal;

    #[test]
    fn a_chosen_path_is_passed_on_as_itself() {
        assert_eq!(literal(b"home/a.txt"), b"home/a.txt");
        assert_eq!(literal(b"home/a\\b"), b"home/a\\b");
        assert_eq!(literal(b"g/[x]"), b"g/\\[x\\]");
        assert_eq!(literal(b"g/a*{1,2}\\"), b"g/a\\*\\{1,2\\}\\\\");
        let sel = |given: &[u8]| {
            crate::ops::extract::selection::Selection::new(&[literal(given)], |p| p.to_vec())
                .unwrap()
        };
        let mut s = sel(b"g/[x]");
        assert!(s
            .pick(crate::format::item::Item::new(
                crate::format::item::ItemKind::File,
                b"g/x".to_vec()
            ))
            .is_none());
        assert!(s
            .pick(crate::format::item::Item::new(
                crate::format::item::ItemKind::File,
                b"g/[x]".to_vec()
            ))
            .is_some());
        let mut s = sel(b"g/a*");
        assert!(s
            .pick(crate::format::item::Item::new(
                crate::format::item::ItemKind::File,
                b"g/abc".to_vec()
            ))
            .is_none());
        assert!(s
            .pick(crate::format::item::Item::new(
                crate::format::item::ItemKind::File,
                b"g/a*".to_vec()
            ))
            .is_some());
    }
}
