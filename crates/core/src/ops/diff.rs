//! Two archives compared path by path (`cairn diff`): what was added, removed or changed from
//! the first to the second, and for a change, what differs, with its old and new values. The
//! front end says them (`[content +18 B -10 B, mode -rw-r--r-- -> -rw-------]`, or as JSON).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use crate::archive::{self, ArchiveMeta};
use crate::error::Result;
use crate::format::item::{tree_order, ChunkRef, Item, ItemKind, Timestamp};
use crate::index::ChunkIndex;
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
    /// The change's letter: `+` added, `-` removed, `M` contents changed, `T` type changed,
    /// `U` metadata only.
    pub fn mark(self) -> &'static str {
        match self {
            Change::Added => "+",
            Change::Removed => "-",
            Change::Modified => "M",
            Change::TypeChanged => "T",
            Change::Metadata => "U",
        }
    }

    /// The change in words, as scripts get it.
    pub fn word(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
            Change::TypeChanged => "type changed",
            Change::Metadata => "metadata changed",
        }
    }
}

/// One path that differs.
pub struct Difference {
    pub change: Change,
    /// The new item, or the old one for a removal.
    pub item: Item,
    /// What differs, for a change (none for an addition or a removal).
    pub details: Vec<Detail>,
}

/// One thing that differs, old → new.
pub struct Detail {
    /// What differs: `type`, `target`, `device`, `content`, `mode`, `owner`, `mtime`, `acl`,
    /// `xattrs` or `flags`.
    pub what: &'static str,
    pub values: Values,
}

/// The old and new values of what differs.
#[derive(Debug, PartialEq, Eq)]
pub enum Values {
    /// As text: a type, a symlink's target, a device number, a mode, an owner, ACLs, flags.
    Text { old: String, new: String },
    /// Modification times, which the front end shows as it shows times.
    Time { old: Timestamp, new: Timestamp },
    /// A file's contents, as borg counts them: the bytes of chunks that are new, and of chunks
    /// gone; and the sizes.
    Content {
        added: u64,
        removed: u64,
        old_size: u64,
        new_size: u64,
    },
    /// Only that it differs (the extended attributes).
    Differs,
}

/// What differs from the archive `a` to the archive `b`, by path, sorted by path. `index` is
/// the repository's, loaded to read.
///
/// The two archives are read side by side, one item of each at a time, so what diff holds is
/// what differs: an archive of ten million files is never in memory. That needs both in tree
/// order, as create writes them (depth first, each directory's entries by name). An archive
/// that is not (made from several paths given out of order) is compared in memory instead.
pub fn run(
    repo: &Repository,
    index: &ChunkIndex,
    a: &ArchiveMeta,
    b: &ArchiveMeta,
) -> Result<Vec<Difference>> {
    let side_by_side = merged(
        archive::items(repo, index, a),
        archive::items(repo, index, b),
    )?;
    match side_by_side {
        Some(changes) => Ok(changes),
        None => {
            let a = archive::all_items(repo, index, a)?;
            let b = archive::all_items(repo, index, b)?;
            Ok(between(a, b))
        }
    }
}

/// An archive's items, checked to come in tree order, each path once.
struct InOrder<I> {
    items: I,
    last: Option<Vec<u8>>,
    out_of_order: bool,
}

impl<I: Iterator<Item = Result<Item>>> InOrder<I> {
    fn new(items: I) -> Self {
        InOrder {
            items,
            last: None,
            out_of_order: false,
        }
    }

    /// The next item; `None` at the end, or at an item out of order (then `out_of_order`).
    fn next(&mut self) -> Result<Option<Item>> {
        let Some(item) = self.items.next().transpose()? else {
            return Ok(None);
        };
        if let Some(last) = &self.last {
            if tree_order(last, &item.path) != Ordering::Less {
                self.out_of_order = true;
                return Ok(None);
            }
        }
        self.last = Some(item.path.clone());
        Ok(Some(item))
    }
}

/// What differs from the items `a` to the items `b`, read side by side, sorted by path; `None`
/// when either is not in tree order.
fn merged(
    a: impl Iterator<Item = Result<Item>>,
    b: impl Iterator<Item = Result<Item>>,
) -> Result<Option<Vec<Difference>>> {
    let (mut a, mut b) = (InOrder::new(a), InOrder::new(b));
    let mut changes = Vec::new();
    let (mut x, mut y) = (a.next()?, b.next()?);
    loop {
        if a.out_of_order || b.out_of_order {
            return Ok(None);
        }
        let (ia, ib) = match (x.take(), y.take()) {
            (None, None) => break,
            (Some(ia), None) => (Some(ia), None),
            (None, Some(ib)) => (None, Some(ib)),
            (Some(ia), Some(ib)) => match tree_order(&ia.path, &ib.path) {
                Ordering::Less => {
                    y = Some(ib);
                    (Some(ia), None)
                }
                Ordering::Greater => {
                    x = Some(ia);
                    (None, Some(ib))
                }
                Ordering::Equal => (Some(ia), Some(ib)),
            },
        };
        match (ia, ib) {
            (Some(ia), Some(ib)) => {
                changes.extend(changed(&ia, ib));
                x = a.next()?;
                y = b.next()?;
            }
            (Some(ia), None) => {
                changes.push(Difference {
                    change: Change::Removed,
                    item: ia,
                    details: Vec::new(),
                });
                x = a.next()?;
            }
            (None, Some(ib)) => {
                changes.push(Difference {
                    change: Change::Added,
                    item: ib,
                    details: Vec::new(),
                });
                y = b.next()?;
            }
            (None, None) => break,
        }
    }
    changes.sort_by(|x, y| x.item.path.cmp(&y.item.path));
    Ok(Some(changes))
}

/// What differs from the items `a` to the items `b`, by path, sorted by path.
pub fn between(a: Vec<Item>, b: Vec<Item>) -> Vec<Difference> {
    let by_path = |items: Vec<Item>| -> BTreeMap<Vec<u8>, Item> {
        items.into_iter().map(|i| (i.path.clone(), i)).collect()
    };
    let (a, mut b) = (by_path(a), by_path(b));
    let mut changes = Vec::new();
    for (path, ia) in a {
        match b.remove(&path) {
            None => changes.push(Difference {
                change: Change::Removed,
                item: ia,
                details: Vec::new(),
            }),
            Some(ib) => changes.extend(changed(&ia, ib)),
        }
    }
    // What is left of `b` is what `a` does not have.
    changes.extend(b.into_values().map(|ib| Difference {
        change: Change::Added,
        item: ib,
        details: Vec::new(),
    }));
    changes.sort_by(|x, y| x.item.path.cmp(&y.item.path));
    changes
}

/// The difference between two versions of one path, if there is one.
fn changed(ia: &Item, ib: Item) -> Option<Difference> {
    let (change, what) = compare(ia, &ib)?;
    let details = details(ia, &ib, &what);
    Some(Difference {
        change,
        item: ib,
        details,
    })
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
        values: Values::Text { old, new },
    };
    what.iter()
        .map(|w| match *w {
            "type" => old_new("type", a.kind.name().into(), b.kind.name().into()),
            "content" if a.kind == ItemKind::Symlink => old_new(
                "target",
                printable(&String::from_utf8_lossy(&a.link_target)),
                printable(&String::from_utf8_lossy(&b.link_target)),
            ),
            "content" if a.kind == ItemKind::File => Detail {
                what: "content",
                values: content(a, b),
            },
            "content" => old_new("device", a.rdev.to_string(), b.rdev.to_string()),
            "mode" => old_new("mode", a.mode_string(), b.mode_string()),
            "owner" => old_new("owner", owner(a), owner(b)),
            "mtime" => Detail {
                what: "mtime",
                values: Values::Time {
                    old: a.mtime,
                    new: b.mtime,
                },
            },
            "acl" => old_new("acl", acl_of(a), acl_of(b)),
            "flags" => old_new(
                "flags",
                fsmeta::flag_names(a.inode_flags).join("+"),
                fsmeta::flag_names(b.inode_flags).join("+"),
            ),
            other => Detail {
                what: other,
                values: Values::Differs,
            },
        })
        .collect()
}

/// How a file's contents changed, as borg counts it: the bytes of chunks that are new, and of
/// chunks gone.
fn content(a: &Item, b: &Item) -> Values {
    let old: HashSet<_> = a.chunks.iter().map(|c| c.id).collect();
    let new: HashSet<_> = b.chunks.iter().map(|c| c.id).collect();
    let sum = |cs: &[ChunkRef], other: &HashSet<ChunkId>| -> u64 {
        cs.iter()
            .filter(|c| !other.contains(&c.id))
            .map(|c| u64::from(c.len))
            .sum()
    };
    Values::Content {
        added: sum(&b.chunks, &old),
        removed: sum(&a.chunks, &new),
        old_size: a.size,
        new_size: b.size,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, chunks: &[(u8, u32)]) -> Item {
        let mut it = Item::new(ItemKind::File, path.as_bytes().to_vec());
        it.chunks = chunks
            .iter()
            .map(|&(id, len)| ChunkRef {
                id: ChunkId([id; 32]),
                len,
            })
            .collect();
        it.size = chunks.iter().map(|&(_, len)| u64::from(len)).sum();
        it
    }

    #[test]
    fn paths_added_removed_and_changed_come_sorted_by_path() {
        let mut private = file("a", &[]);
        private.mode = 0o600;
        let a = vec![
            file("b", &[(1, 10)]),
            file("gone", &[]),
            file("same", &[]),
            file("a", &[]),
        ];
        let b = vec![
            file("same", &[]),
            file("new", &[(2, 5)]),
            file("b", &[(1, 10), (3, 8)]),
            private,
        ];
        let found: Vec<(Change, String)> = between(a, b)
            .into_iter()
            .map(|d| (d.change, d.item.display_path()))
            .collect();
        assert_eq!(
            found,
            [
                (Change::Metadata, "a".to_string()),
                (Change::Modified, "b".to_string()),
                (Change::Removed, "gone".to_string()),
                (Change::Added, "new".to_string()),
            ]
        );
    }

    fn said(changes: Vec<Difference>) -> Vec<(Change, String, Vec<&'static str>)> {
        changes
            .into_iter()
            .map(|d| {
                let what = d.details.iter().map(|d| d.what).collect();
                (d.change, d.item.display_path(), what)
            })
            .collect()
    }

    fn stream(items: &[Item]) -> impl Iterator<Item = Result<Item>> + '_ {
        items.iter().cloned().map(Ok)
    }

    #[test]
    fn archives_out_of_tree_order_are_compared_in_memory() {
        let a = vec![file("b", &[]), file("a", &[])];
        let b = vec![file("a", &[(1, 1)])];
        assert!(merged(stream(&a), stream(&b)).unwrap().is_none());
        assert!(merged(stream(&b), stream(&a)).unwrap().is_none());
        let twice = vec![file("a", &[]), file("a", &[])];
        assert!(merged(stream(&twice), stream(&b)).unwrap().is_none());
    }

    proptest::proptest! {
        /// Side by side says what the comparison in memory says, in the same order.
        #[test]
        fn side_by_side_says_what_the_comparison_in_memory_says(
            a in proptest::collection::btree_map("[a./-]{1,5}", (0u8..3, 0u8..2), 0..40),
            b in proptest::collection::btree_map("[a./-]{1,5}", (0u8..3, 0u8..2), 0..40),
        ) {
            let items = |m: &std::collections::BTreeMap<String, (u8, u8)>| -> Vec<Item> {
                let mut v: Vec<Item> = m
                    .iter()
                    .map(|(p, &(id, mode))| {
                        let mut it = file(p, &[(id, 4)]);
                        it.mode = 0o600 + u32::from(mode);
                        it
                    })
                    .collect();
                v.sort_by(|x, y| tree_order(&x.path, &y.path));
                v
            };
            let (a, b) = (items(&a), items(&b));
            let merged = merged(stream(&a), stream(&b)).unwrap().expect("in tree order");
            proptest::prop_assert_eq!(said(merged), said(between(a, b)));
        }
    }

    #[test]
    fn a_file_s_content_counts_the_bytes_of_new_and_gone_chunks() {
        let a = file("f", &[(1, 10), (2, 20)]);
        let b = file("f", &[(1, 10), (3, 7)]);
        let (change, what) = compare(&a, &b).expect("they differ");
        assert_eq!((change, what.clone()), (Change::Modified, vec!["content"]));
        let d = details(&a, &b, &what);
        assert_eq!(d[0].what, "content");
        assert_eq!(
            d[0].values,
            Values::Content {
                added: 7,
                removed: 20,
                old_size: 30,
                new_size: 17
            }
        );
    }

    #[test]
    fn a_changed_type_says_only_the_type() {
        let a = file("x", &[]);
        let b = Item::new(ItemKind::Dir, b"x".to_vec());
        let (change, what) = compare(&a, &b).expect("they differ");
        assert_eq!(change, Change::TypeChanged);
        let d = details(&a, &b, &what);
        assert_eq!(
            d[0].values,
            Values::Text {
                old: "file".into(),
                new: "dir".into()
            }
        );
        assert!(compare(&a, &a.clone()).is_none());
    }
}
