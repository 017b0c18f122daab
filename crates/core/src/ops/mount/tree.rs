//! One archive's items as a directory tree, for `mount`: names, attributes and chunk lists
//! in memory, built in one pass over the item stream.
//!
//! - Parent directories an archive does not hold (`create /home/alice` stores no `home`) are
//!   made up, with mode 0755 and the archive's time.
//! - The names of one hardlinked inode share one node, so they share an inode number and
//!   `st_nlink` counts them.
//! - Items with unsafe paths (`..`, empty components) are left out, as extract leaves them.

use std::collections::HashMap;

use crate::error::Result;
use crate::format::item::{ChunkRef, Item, ItemKind, Timestamp};
use crate::ops::extract::safe_components;

/// An extended attribute: name and value.
pub type Xattr = (Box<[u8]>, Box<[u8]>);

/// A file, directory, link or special file.
pub struct Node {
    pub kind: ItemKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub rdev: u64,
    pub nlink: u32,
    pub link_target: Box<[u8]>,
    /// The `user.` extended attributes.
    pub xattrs: Box<[Xattr]>,
    pub chunks: Box<[ChunkRef]>,
    /// Where each chunk ends in the file, for finding the chunk at an offset.
    pub ends: Box<[u64]>,
    /// Directories: the parent (the root is its own), and the entries sorted by name.
    pub parent: u32,
    pub children: Vec<(Box<[u8]>, u32)>,
}

impl Node {
    fn dir(parent: u32, time: Timestamp, uid: u32, gid: u32) -> Self {
        Self {
            kind: ItemKind::Dir,
            perm: 0o755,
            uid,
            gid,
            size: 0,
            mtime: time,
            ctime: time,
            rdev: 0,
            nlink: 2,
            link_target: Box::default(),
            xattrs: Box::default(),
            chunks: Box::default(),
            ends: Box::default(),
            parent,
            children: Vec::new(),
        }
    }

    /// Takes an item's attributes (not its place in the tree).
    fn set_from(&mut self, item: Item) {
        self.kind = item.kind;
        self.perm = (item.mode & 0o7777) as u16;
        self.uid = item.uid;
        self.gid = item.gid;
        self.size = item.size;
        self.mtime = item.mtime;
        self.ctime = item.ctime;
        self.rdev = item.rdev;
        self.link_target = item.link_target.into_boxed_slice();
        self.xattrs = item
            .xattrs
            .into_iter()
            .filter(|(k, _)| k.starts_with(b"user."))
            .map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice()))
            .collect();
        let mut end = 0u64;
        self.ends = item
            .chunks
            .iter()
            .map(|c| {
                end += u64::from(c.len);
                end
            })
            .collect();
        self.chunks = item.chunks.into_boxed_slice();
    }

    /// The index of the chunk holding byte `offset`, if the file has it.
    pub fn chunk_at(&self, offset: u64) -> Option<usize> {
        let i = self.ends.partition_point(|e| *e <= offset);
        (i < self.chunks.len()).then_some(i)
    }

    /// Where chunk `i` starts in the file.
    pub fn chunk_start(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.ends[i - 1]
        }
    }
}

/// The tree of one archive; node 0 is its root directory.
pub struct Tree {
    pub nodes: Vec<Node>,
}

/// Who owns, and when, the directories a tree makes up.
#[derive(Clone, Copy)]
pub struct Defaults {
    pub time: Timestamp,
    pub uid: u32,
    pub gid: u32,
}

impl Tree {
    /// Builds the tree from an archive's items, in one pass.
    pub fn build(items: impl Iterator<Item = Result<Item>>, d: Defaults) -> Result<Self> {
        let mut b = Builder {
            nodes: vec![Node::dir(0, d.time, d.uid, d.gid)],
            dirs: HashMap::new(),
            links: HashMap::new(),
            d,
        };
        for item in items {
            b.add(item?);
        }
        let mut nodes = b.nodes;
        for i in 0..nodes.len() {
            if nodes[i].kind != ItemKind::Dir {
                continue;
            }
            let mut children = std::mem::take(&mut nodes[i].children);
            // A name given twice keeps the later item, as extract does.
            children.reverse();
            children.sort_by(|a, b| a.0.cmp(&b.0));
            children.dedup_by(|later, earlier| later.0 == earlier.0);
            let subdirs = children
                .iter()
                .filter(|(_, c)| nodes[*c as usize].kind == ItemKind::Dir)
                .count();
            nodes[i].nlink = 2 + subdirs as u32;
            nodes[i].children = children;
        }
        Ok(Self { nodes })
    }

    /// The entry `name` of directory `dir`.
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Option<u32> {
        let children = &self.nodes.get(dir as usize)?.children;
        children
            .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            .ok()
            .map(|i| children[i].1)
    }
}

struct Builder {
    nodes: Vec<Node>,
    /// Directories by stored path.
    dirs: HashMap<Vec<u8>, u32>,
    /// The node of each hardlinked inode.
    links: HashMap<[u8; 16], u32>,
    d: Defaults,
}

impl Builder {
    /// The directory at `comps` (made up, with its parents, if the archive has not given it).
    fn dir(&mut self, comps: &[&[u8]]) -> u32 {
        if comps.is_empty() {
            return 0;
        }
        let path = comps.join(&b'/');
        if let Some(&n) = self.dirs.get(&path) {
            return n;
        }
        let (name, parents) = comps.split_last().expect("not empty");
        let parent = self.dir(parents);
        let n = self.nodes.len() as u32;
        self.nodes
            .push(Node::dir(parent, self.d.time, self.d.uid, self.d.gid));
        self.nodes[parent as usize]
            .children
            .push((name.to_vec().into_boxed_slice(), n));
        self.dirs.insert(path, n);
        n
    }

    fn add(&mut self, item: Item) {
        let Some(comps) = safe_components(&item.path) else {
            return;
        };
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        let name = name.to_vec().into_boxed_slice();
        if item.kind == ItemKind::Dir {
            let n = self.dir(&comps);
            self.nodes[n as usize].set_from(item);
            return;
        }
        let parent = self.dir(parents);
        if let Some(&n) = item.hardlink_id.as_ref().and_then(|h| self.links.get(h)) {
            self.nodes[n as usize].nlink += 1;
            self.nodes[parent as usize].children.push((name, n));
            return;
        }
        let n = self.nodes.len() as u32;
        let mut node = Node::dir(parent, self.d.time, self.d.uid, self.d.gid);
        node.nlink = 1;
        if let Some(h) = item.hardlink_id {
            self.links.insert(h, n);
        }
        node.set_from(item);
        self.nodes.push(node);
        self.nodes[parent as usize].children.push((name, n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::id::ChunkId;

    fn item(kind: ItemKind, path: &str) -> Item {
        let mut i = Item::new(kind, path.as_bytes().to_vec());
        i.mode = 0o640;
        i
    }

    fn build(items: Vec<Item>) -> Tree {
        let d = Defaults {
            time: Timestamp { secs: 7, nanos: 0 },
            uid: 0,
            gid: 0,
        };
        Tree::build(items.into_iter().map(Ok), d).unwrap()
    }

    fn path(t: &Tree, p: &str) -> Option<u32> {
        p.split('/')
            .try_fold(0u32, |dir, name| t.lookup(dir, name.as_bytes()))
    }

    #[test]
    fn missing_parents_are_made_up_and_dirs_count_their_links() {
        let t = build(vec![
            item(ItemKind::File, "home/alice/a.txt"),
            item(ItemKind::Dir, "home/alice/sub"),
            item(ItemKind::File, "home/alice/sub/b"),
        ]);
        let alice = path(&t, "home/alice").unwrap();
        assert_eq!(t.nodes[alice as usize].perm, 0o755);
        assert_eq!(t.nodes[alice as usize].nlink, 3);
        let sub = path(&t, "home/alice/sub").unwrap();
        assert_eq!(t.nodes[sub as usize].perm, 0o640);
        assert_eq!(t.nodes[sub as usize].parent, alice);
        assert!(path(&t, "home/alice/sub/b").is_some());
        assert!(path(&t, "home/bob").is_none());
    }

    #[test]
    fn hardlinks_share_a_node_and_unsafe_paths_are_left_out() {
        let mut a = item(ItemKind::File, "d/a");
        a.hardlink_id = Some([1; 16]);
        let mut b = item(ItemKind::File, "d/b");
        b.hardlink_id = Some([1; 16]);
        let t = build(vec![a, b, item(ItemKind::File, "../evil")]);
        let (na, nb) = (path(&t, "d/a").unwrap(), path(&t, "d/b").unwrap());
        assert_eq!(na, nb);
        assert_eq!(t.nodes[na as usize].nlink, 2);
        assert_eq!(t.nodes[0].children.len(), 1);
    }

    #[test]
    fn chunks_are_found_by_offset() {
        let mut f = item(ItemKind::File, "f");
        f.chunks = [3u32, 5, 2]
            .iter()
            .map(|l| ChunkRef {
                id: ChunkId([*l as u8; 32]),
                len: *l,
            })
            .collect();
        f.size = 10;
        let t = build(vec![f]);
        let n = &t.nodes[path(&t, "f").unwrap() as usize];
        let found: Vec<_> = (0..11).map(|o| n.chunk_at(o)).collect();
        let want = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2].map(Some);
        assert_eq!(&found[..10], &want[..]);
        assert_eq!(found[10], None);
        assert_eq!(n.chunk_start(2), 8);
    }
}
