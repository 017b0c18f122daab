//! An archive's tree as the page browses it: for each name only what a listing shows (type,
//! permissions, owner, size, time, a symlink's target), the names in one buffer, each
//! directory's entries sorted by name. Built in one pass over the items; about a quarter of
//! the memory of `mount`'s tree, which keeps chunk lists and attributes for reading files.
//!
//! As extract and mount do: items with unsafe paths are left out, parent directories the
//! archive does not hold are made up, and a name given twice keeps the later item.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::ops::extract::safe_components;

/// One name of the tree.
#[derive(Clone, Copy)]
pub struct Entry {
    pub kind: ItemKind,
    pub perm: u16,
    /// Indices into [`Tree::owners`].
    pub user: u32,
    pub group: u32,
    pub size: u64,
    pub mtime: i64,
    name_at: usize,
    name_len: u32,
}

/// The tree; entry 0 is the root.
pub struct Tree {
    entries: Vec<Entry>,
    names: Vec<u8>,
    /// The entries of each directory (by entry number), sorted by name.
    children: HashMap<u32, Vec<u32>>,
    /// Symlinks' targets.
    targets: HashMap<u32, Box<[u8]>>,
    /// Owner names (or numbers, when the archive has no name), shared.
    pub owners: Vec<String>,
}

impl Tree {
    /// Builds the tree of `items`; made-up directories get `time`.
    pub fn build(
        items: impl Iterator<Item = Result<Item>>,
        time: i64,
        expected: u64,
    ) -> Result<Self> {
        let mut b = Builder {
            tree: Tree {
                entries: Vec::with_capacity(
                    usize::try_from(expected).unwrap_or(0).min(1 << 26) + 1,
                ),
                names: Vec::new(),
                children: HashMap::new(),
                targets: HashMap::new(),
                owners: vec![String::new()],
            },
            dirs: HashMap::new(),
            last_dir: (Vec::new(), 0),
            owners: HashMap::new(),
            time,
        };
        let root = b.dir_entry(&[]);
        b.tree.entries.push(root);
        b.tree.children.insert(0, Vec::new());
        for item in items {
            b.add(item?);
        }
        let mut tree = b.tree;
        let (entries, names) = (&tree.entries, &tree.names);
        let name = |i: u32| {
            let e = &entries[i as usize];
            &names[e.name_at..e.name_at + e.name_len as usize]
        };
        for list in tree.children.values_mut() {
            if !list.is_sorted_by(|a, b| name(*a) < name(*b)) {
                // A name given twice keeps the later item (sorted stably, the later last).
                list.sort_by(|a, b| name(*a).cmp(name(*b)));
                list.reverse();
                list.dedup_by(|later, earlier| name(*later) == name(*earlier));
                list.reverse();
            }
        }
        Ok(tree)
    }

    pub fn entry(&self, n: u32) -> &Entry {
        &self.entries[n as usize]
    }

    pub fn name(&self, n: u32) -> &[u8] {
        let e = &self.entries[n as usize];
        &self.names[e.name_at..e.name_at + e.name_len as usize]
    }

    pub fn target(&self, n: u32) -> Option<&[u8]> {
        self.targets.get(&n).map(|t| &t[..])
    }

    /// A directory's entries, sorted by name (none for what is not a directory).
    pub fn children(&self, n: u32) -> &[u32] {
        self.children.get(&n).map_or(&[], |c| &c[..])
    }

    /// The bytes of the files at and below entry `n`.
    pub fn size_below(&self, n: u32) -> u64 {
        let mut total = 0u64;
        let mut stack = vec![n];
        while let Some(n) = stack.pop() {
            let e = self.entry(n);
            if e.kind == ItemKind::File {
                total = total.saturating_add(e.size);
            }
            stack.extend_from_slice(self.children(n));
        }
        total
    }

    /// The entry at stored path `path` (empty: the root).
    pub fn find(&self, path: &[u8]) -> Result<u32> {
        let mut n = 0u32;
        for comp in path.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
            let list = self.children(n);
            n = list
                .binary_search_by(|c| self.name(*c).cmp(comp))
                .map(|i| list[i])
                .map_err(|_| {
                    Error::invalid(format!(
                        "no {} in the archive",
                        crate::util::text::printable_bytes(path)
                    ))
                })?;
        }
        Ok(n)
    }
}

/// Whether `joined` is `comps` joined by '/'.
fn is_path(joined: &[u8], comps: &[&[u8]]) -> bool {
    let mut rest = joined;
    for (i, c) in comps.iter().enumerate() {
        if i > 0 {
            match rest.split_first() {
                Some((b'/', r)) => rest = r,
                _ => return false,
            }
        }
        match rest.strip_prefix(*c) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

struct Builder {
    tree: Tree,
    /// Directories by stored path.
    dirs: HashMap<Vec<u8>, u32>,
    /// The directory found last: the next item is most often its sibling.
    last_dir: (Vec<u8>, u32),
    owners: HashMap<String, u32>,
    time: i64,
}

impl Builder {
    fn dir_entry(&mut self, name: &[u8]) -> Entry {
        let at = self.tree.names.len();
        self.tree.names.extend_from_slice(name);
        Entry {
            kind: ItemKind::Dir,
            perm: 0o755,
            user: 0,
            group: 0,
            size: 0,
            mtime: self.time,
            name_at: at,
            name_len: name.len() as u32,
        }
    }

    fn owner(&mut self, name: &str, id: u32) -> u32 {
        let text = if name.is_empty() {
            id.to_string()
        } else {
            name.to_string()
        };
        if let Some(&n) = self.owners.get(&text) {
            return n;
        }
        let n = self.tree.owners.len() as u32;
        self.tree.owners.push(text.clone());
        self.owners.insert(text, n);
        n
    }

    /// The directory at `comps` (made up, with its parents, if the archive has not given it).
    fn dir(&mut self, comps: &[&[u8]]) -> u32 {
        if comps.is_empty() {
            return 0;
        }
        if is_path(&self.last_dir.0, comps) {
            return self.last_dir.1;
        }
        let path = comps.join(&b'/');
        let n = match self.dirs.get(&path) {
            Some(&n) => n,
            None => {
                let (name, parents) = comps.split_last().expect("not empty");
                let parent = self.dir(parents);
                let n = self.tree.entries.len() as u32;
                let e = self.dir_entry(name);
                self.tree.entries.push(e);
                self.tree.children.entry(parent).or_default().push(n);
                self.tree.children.insert(n, Vec::new());
                self.dirs.insert(path.clone(), n);
                n
            }
        };
        self.last_dir = (path, n);
        n
    }

    fn add(&mut self, item: Item) {
        let Some(comps) = safe_components(&item.path) else {
            return;
        };
        let (user, group) = (
            self.owner(&item.user, item.uid),
            self.owner(&item.group, item.gid),
        );
        let set = |e: &mut Entry| {
            e.kind = item.kind;
            e.perm = (item.mode & 0o7777) as u16;
            e.user = user;
            e.group = group;
            e.size = item.size;
            e.mtime = item.mtime.secs;
        };
        if item.kind == ItemKind::Dir {
            let n = self.dir(&comps);
            set(&mut self.tree.entries[n as usize]);
            return;
        }
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        let parent = self.dir(parents);
        let n = self.tree.entries.len() as u32;
        let mut e = self.dir_entry(name);
        set(&mut e);
        self.tree.entries.push(e);
        self.tree.children.entry(parent).or_default().push(n);
        if item.kind == ItemKind::Symlink {
            self.tree
                .targets
                .insert(n, item.link_target.into_boxed_slice());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: ItemKind, path: &str, size: u64) -> Item {
        let mut i = Item::new(kind, path.as_bytes().to_vec());
        i.mode = 0o640;
        i.size = size;
        i.user = "alice".into();
        i
    }

    fn names(t: &Tree, path: &str) -> Vec<String> {
        let n = t.find(path.as_bytes()).unwrap();
        t.children(n)
            .iter()
            .map(|c| String::from_utf8_lossy(t.name(*c)).into_owned())
            .collect()
    }

    #[test]
    fn a_joined_path_is_told_from_its_components() {
        assert!(is_path(b"a/bc", &[b"a", b"bc"]));
        assert!(is_path(b"", &[]));
        assert!(!is_path(b"a/bc", &[b"a", b"b"]));
        assert!(!is_path(b"a/b", &[b"a", b"b", b"c"]));
        assert!(!is_path(b"ab", &[b"a", b"b"]));
        assert!(!is_path(b"a/b/c", &[b"a", b"b"]));
    }

    #[test]
    fn siblings_apart_and_parents_seen_again_land_in_their_directories() {
        let items = vec![
            item(ItemKind::File, "a/x", 1),
            item(ItemKind::File, "b/y", 1),
            item(ItemKind::File, "a/z", 1),
            item(ItemKind::File, "a/sub/w", 1),
            item(ItemKind::File, "a/v", 1),
        ];
        let t = Tree::build(items.into_iter().map(Ok), 0, 5).unwrap();
        assert_eq!(names(&t, "a"), ["sub", "v", "x", "z"]);
        assert_eq!(names(&t, "b"), ["y"]);
        assert_eq!(names(&t, "a/sub"), ["w"]);
    }

    #[test]
    fn directories_list_their_names_sorted_and_the_later_of_two() {
        let mut link = item(ItemKind::Symlink, "home/alice/l", 0);
        link.link_target = b"a.txt".to_vec();
        let items = vec![
            item(ItemKind::File, "home/alice/b", 2),
            item(ItemKind::File, "home/alice/a.txt", 1),
            item(ItemKind::Dir, "home/alice/sub", 0),
            item(ItemKind::File, "home/alice/sub/x", 3),
            item(ItemKind::File, "../escape", 9),
            item(ItemKind::File, "home/alice/b", 7),
            link,
        ];
        let t = Tree::build(items.into_iter().map(Ok), 5, 0).unwrap();
        assert_eq!(names(&t, ""), ["home"]);
        assert_eq!(names(&t, "home/alice"), ["a.txt", "b", "l", "sub"]);
        assert_eq!(names(&t, "home/alice/sub"), ["x"]);
        let b = t.find(b"home/alice/b").unwrap();
        assert_eq!(t.entry(b).size, 7);
        assert_eq!(t.owners[t.entry(b).user as usize], "alice");
        let home = t.entry(t.find(b"home").unwrap());
        assert_eq!(
            (home.kind, home.perm, home.mtime),
            (ItemKind::Dir, 0o755, 5)
        );
        let sub = t.entry(t.find(b"home/alice/sub").unwrap());
        assert_eq!(sub.perm, 0o640);
        assert_eq!(
            t.target(t.find(b"home/alice/l").unwrap()),
            Some(&b"a.txt"[..])
        );
        assert!(t.find(b"home/bob").is_err());
        assert_eq!(t.size_below(t.find(b"home/alice").unwrap()), 1 + 7 + 3);
        assert_eq!(t.size_below(t.find(b"home/alice/sub/x").unwrap()), 3);
        assert!(t.find(b"escape").is_err());
    }
}
