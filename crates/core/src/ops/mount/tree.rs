//! One archive's items as a directory tree, for `mount`: what each node is (attributes and
//! chunk list) and what each directory lists.
//!
//! - An archive in tree order, as create writes them, is read lazily ([`super::lazy`]): only
//!   its directories' places in the item stream are held, and a directory's listing is read
//!   when it is opened. Any other archive is read whole, in one pass ([`Whole`]).
//! - Parent directories an archive does not hold (`create /home/alice` stores no `home`) are
//!   made up, with mode 0755 and the archive's time.
//! - The names of one hardlinked inode share one node, so they share an inode number and
//!   `st_nlink` counts them.
//! - Items with unsafe paths (`..`, empty components) are left out, as extract leaves them.
//! - A name given twice keeps the later item, as extract does.

use std::collections::HashMap;
use std::sync::Arc;

use super::lazy::Lazy;
use super::records::Records;
use super::spans::Spans;
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
}

impl Node {
    /// A directory the archive does not hold.
    pub fn made_up(d: Defaults, nlink: u32) -> Self {
        Self {
            kind: ItemKind::Dir,
            perm: 0o755,
            uid: d.uid,
            gid: d.gid,
            size: 0,
            mtime: d.time,
            ctime: d.time,
            rdev: 0,
            nlink,
            link_target: Box::default(),
            xattrs: Box::default(),
            chunks: Box::default(),
            ends: Box::default(),
        }
    }

    /// An item's attributes (not its place in the tree).
    pub fn from_item(item: Item, nlink: u32) -> Self {
        let ends = ends(&item.chunks).collect();
        Self {
            kind: item.kind,
            perm: (item.mode & 0o7777) as u16,
            uid: item.uid,
            gid: item.gid,
            size: item.size,
            mtime: item.mtime,
            ctime: item.ctime,
            rdev: item.rdev,
            nlink,
            link_target: item.link_target.into_boxed_slice(),
            xattrs: item
                .xattrs
                .into_iter()
                .filter(|(k, _)| k.starts_with(b"user."))
                .map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice()))
                .collect(),
            chunks: item.chunks.into_boxed_slice(),
            ends,
        }
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

/// Where each of `chunks` ends, laid end to end.
pub fn ends(chunks: &[ChunkRef]) -> impl Iterator<Item = u64> + '_ {
    chunks.iter().scan(0u64, |end, c| {
        *end += u64::from(c.len);
        Some(*end)
    })
}

/// A name in a directory.
pub struct Entry {
    pub name: Box<[u8]>,
    pub id: u32,
    pub kind: ItemKind,
    /// The node, when this listing has it (a later name of a hardlinked inode in a lazy
    /// tree does not: the first name's listing has it).
    pub node: Option<Arc<Node>>,
}

/// A directory's entries, sorted by name.
pub struct Listing {
    /// The parent directory's node id (the root is its own).
    pub parent: u32,
    pub entries: Vec<Entry>,
    /// The nodes it has, by id: those of names a later item of the same name hides too, as
    /// a hardlinked inode's other names still show them.
    by_id: Vec<(u32, Arc<Node>)>,
}

impl Listing {
    /// From entries in stream order: of a name given twice, the later stays.
    pub fn new(parent: u32, mut entries: Vec<Entry>) -> Self {
        let mut by_id: Vec<(u32, Arc<Node>)> = entries
            .iter()
            .filter_map(|e| Some((e.id, e.node.clone()?)))
            .collect();
        by_id.sort_unstable_by_key(|(id, _)| *id);
        keep_later(&mut entries, |e| &e.name);
        Self {
            parent,
            entries,
            by_id,
        }
    }

    pub fn lookup(&self, name: &[u8]) -> Option<&Entry> {
        let i = self
            .entries
            .binary_search_by(|e| e.name.as_ref().cmp(name))
            .ok()?;
        Some(&self.entries[i])
    }

    /// The node `id`, if this listing has it.
    pub fn node(&self, id: u32) -> Option<&Arc<Node>> {
        let i = self.by_id.binary_search_by(|(k, _)| k.cmp(&id)).ok()?;
        Some(&self.by_id[i].1)
    }
}

/// Sorts by name, keeping of each name the entry that came last.
fn keep_later<T>(v: &mut Vec<T>, name: impl Fn(&T) -> &[u8]) {
    v.reverse();
    v.sort_by(|a, b| name(a).cmp(name(b)));
    v.dedup_by(|later, earlier| name(later) == name(earlier));
}

/// Who owns, and when, the directories a tree makes up.
#[derive(Clone, Copy)]
pub struct Defaults {
    pub time: Timestamp,
    pub uid: u32,
    pub gid: u32,
}

/// One archive's tree; node 0 is its root directory.
pub enum Tree {
    Lazy(Box<Lazy>),
    Whole(Whole),
}

impl Tree {
    /// Reads the stream once: lazily when it is in tree order, whole otherwise (a second
    /// pass).
    pub fn open(records: Records, d: Defaults) -> Result<Self> {
        match Spans::scan(records.all())? {
            Some(spans) => Ok(Tree::Lazy(Box::new(Lazy::new(spans, records, d)))),
            None => Ok(Tree::Whole(Whole::build(records.all(), d)?)),
        }
    }

    /// Node ids are below this.
    pub fn ids(&self) -> u32 {
        match self {
            Tree::Lazy(t) => t.ids(),
            Tree::Whole(t) => t.nodes.len() as u32,
        }
    }

    /// Node `id`; `None` if there is none.
    pub fn node(&self, id: u32) -> Result<Option<Arc<Node>>> {
        match self {
            Tree::Lazy(t) => t.node(id),
            Tree::Whole(t) => Ok(t.nodes.get(id as usize).cloned()),
        }
    }

    /// The listing of directory `id`; `None` if it is not a directory.
    pub fn listing(&self, id: u32) -> Result<Option<Arc<Listing>>> {
        match self {
            Tree::Lazy(t) => t.listing(id),
            Tree::Whole(t) => Ok(t.listings.get(&id).cloned()),
        }
    }
}

/// A tree read whole: every node and listing in memory.
pub struct Whole {
    nodes: Vec<Arc<Node>>,
    listings: HashMap<u32, Arc<Listing>>,
}

impl Whole {
    /// Builds the tree from an archive's items, in one pass.
    pub fn build(items: impl Iterator<Item = Result<Item>>, d: Defaults) -> Result<Self> {
        let mut b = Builder {
            nodes: vec![Node::made_up(d, 2)],
            parents: vec![0],
            children: HashMap::from([(0, Vec::new())]),
            dirs: HashMap::new(),
            links: HashMap::new(),
            d,
        };
        for item in items {
            b.add(item?);
        }
        let mut nodes = b.nodes;
        let mut children = b.children;
        for (dir, list) in children.iter_mut() {
            keep_later(list, |c| &c.0);
            let subdirs = list
                .iter()
                .filter(|(_, c)| nodes[*c as usize].kind == ItemKind::Dir)
                .count();
            nodes[*dir as usize].nlink = 2 + subdirs as u32;
        }
        let nodes: Vec<Arc<Node>> = nodes.into_iter().map(Arc::new).collect();
        let listings = children
            .into_iter()
            .map(|(dir, list)| {
                let entries = list
                    .into_iter()
                    .map(|(name, id)| Entry {
                        name,
                        id,
                        kind: nodes[id as usize].kind,
                        node: Some(nodes[id as usize].clone()),
                    })
                    .collect();
                let listing = Listing::new(b.parents[dir as usize], entries);
                (dir, Arc::new(listing))
            })
            .collect();
        Ok(Self { nodes, listings })
    }
}

/// A name in a directory and the node it names.
type Named = (Box<[u8]>, u32);

struct Builder {
    nodes: Vec<Node>,
    parents: Vec<u32>,
    /// Each directory's entries, in stream order.
    children: HashMap<u32, Vec<Named>>,
    /// Directories by parent and name.
    dirs: HashMap<(u32, Box<[u8]>), u32>,
    /// The node of each hardlinked inode.
    links: HashMap<[u8; 16], u32>,
    d: Defaults,
}

impl Builder {
    fn push(&mut self, parent: u32, name: &[u8], node: Node) -> u32 {
        let n = self.nodes.len() as u32;
        if node.kind == ItemKind::Dir {
            self.children.insert(n, Vec::new());
        }
        self.nodes.push(node);
        self.parents.push(parent);
        self.link(parent, name, n);
        n
    }

    fn link(&mut self, parent: u32, name: &[u8], n: u32) {
        if let Some(list) = self.children.get_mut(&parent) {
            list.push((name.into(), n));
        }
    }

    /// The directory at `comps` (made up, with its parents, if the archive has not given it):
    /// one step a component, without recursion, however deep the path.
    fn dir(&mut self, comps: &[&[u8]]) -> u32 {
        let mut at = 0;
        for name in comps {
            let key = (at, Box::<[u8]>::from(*name));
            at = match self.dirs.get(&key) {
                Some(&n) => n,
                None => {
                    let n = self.push(at, name, Node::made_up(self.d, 2));
                    self.dirs.insert(key, n);
                    n
                }
            };
        }
        at
    }

    fn add(&mut self, item: Item) {
        let Some(comps) = safe_components(&item.path) else {
            return;
        };
        let (name, parents) = comps.split_last().expect("safe paths have a component");
        let name = name.to_vec();
        if item.kind == ItemKind::Dir {
            let n = self.dir(&comps);
            let nlink = self.nodes[n as usize].nlink;
            self.nodes[n as usize] = Node::from_item(item, nlink);
            return;
        }
        let parent = self.dir(parents);
        if let Some(&n) = item.hardlink_id.as_ref().and_then(|h| self.links.get(h)) {
            self.nodes[n as usize].nlink += 1;
            self.link(parent, &name, n);
            return;
        }
        let hardlink = item.hardlink_id;
        let n = self.push(parent, &name, Node::from_item(item, 1));
        if let Some(h) = hardlink {
            self.links.insert(h, n);
        }
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
        Tree::Whole(Whole::build(items.into_iter().map(Ok), d).unwrap())
    }

    fn path(t: &Tree, p: &str) -> Option<u32> {
        p.split('/').try_fold(0u32, |dir, name| {
            Some(t.listing(dir).ok()??.lookup(name.as_bytes())?.id)
        })
    }

    fn node(t: &Tree, id: u32) -> Arc<Node> {
        t.node(id).unwrap().unwrap()
    }

    #[test]
    fn missing_parents_are_made_up_and_dirs_count_their_links() {
        let t = build(vec![
            item(ItemKind::File, "home/alice/a.txt"),
            item(ItemKind::Dir, "home/alice/sub"),
            item(ItemKind::File, "home/alice/sub/b"),
        ]);
        let alice = path(&t, "home/alice").unwrap();
        assert_eq!(node(&t, alice).perm, 0o755);
        assert_eq!(node(&t, alice).nlink, 3);
        let sub = path(&t, "home/alice/sub").unwrap();
        assert_eq!(node(&t, sub).perm, 0o640);
        assert_eq!(t.listing(sub).unwrap().unwrap().parent, alice);
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
        assert_eq!(node(&t, na).nlink, 2);
        assert_eq!(t.listing(0).unwrap().unwrap().entries.len(), 1);
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
        let n = node(&t, path(&t, "f").unwrap());
        let found: Vec<_> = (0..11).map(|o| n.chunk_at(o)).collect();
        let want = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2].map(Some);
        assert_eq!(&found[..10], &want[..]);
        assert_eq!(found[10], None);
        assert_eq!(n.chunk_start(2), 8);
    }
}
