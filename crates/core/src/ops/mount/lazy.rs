//! A tree read lazily: the directories' spans ([`Spans`]) are held, and a directory's
//! listing is read from its span of the item stream when it is asked for, and kept while
//! the listings read since hold fewer than [`BUDGET`] entries. Memory is then the
//! directories plus the budget, however many files the archive has.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::records::Records;
use super::spans::Spans;
use super::tree::{Defaults, Entry, Listing, Node};
use crate::error::{Error, Result};
use crate::format::item::ItemKind;
use crate::ops::extract::safe_components;

/// Entries kept in the listings read, beyond the last one (which stays however large).
const BUDGET: usize = 128 * 1024;

pub struct Lazy {
    spans: Spans,
    records: Records,
    d: Defaults,
    cache: Mutex<Cache>,
    budget: usize,
}

/// Listings read, by directory index, with the tick of their last use.
#[derive(Default)]
struct Cache {
    listings: HashMap<u32, (Arc<Listing>, u64)>,
    by_tick: BTreeMap<u64, u32>,
    entries: usize,
    tick: u64,
}

impl Cache {
    fn get(&mut self, dir: u32) -> Option<Arc<Listing>> {
        self.tick += 1;
        let (listing, tick) = self.listings.get_mut(&dir)?;
        self.by_tick.remove(tick);
        *tick = self.tick;
        self.by_tick.insert(self.tick, dir);
        Some(listing.clone())
    }

    fn put(&mut self, dir: u32, listing: Arc<Listing>, budget: usize) {
        self.tick += 1;
        self.entries += listing.entries.len();
        if let Some((old, tick)) = self.listings.insert(dir, (listing, self.tick)) {
            self.entries -= old.entries.len();
            self.by_tick.remove(&tick);
        }
        self.by_tick.insert(self.tick, dir);
        while self.entries > budget && self.listings.len() > 1 {
            let Some((_, oldest)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some((old, _)) = self.listings.remove(&oldest) {
                self.entries -= old.entries.len();
            }
        }
    }
}

impl Lazy {
    pub fn new(spans: Spans, records: Records, d: Defaults) -> Self {
        Self::with_budget(spans, records, d, BUDGET)
    }

    pub fn with_budget(spans: Spans, records: Records, d: Defaults, budget: usize) -> Self {
        Self {
            spans,
            records,
            d,
            cache: Mutex::new(Cache::default()),
            budget,
        }
    }

    pub fn ids(&self) -> u32 {
        self.spans.ids
    }

    pub fn node(&self, id: u32) -> Result<Option<Arc<Node>>> {
        if id == 0 {
            return Ok(Some(Arc::new(self.dir_node(0)?)));
        }
        if id >= self.spans.ids {
            return Ok(None);
        }
        let holder = match self.spans.dir(id) {
            Some(d) => self.spans.dirs[d as usize].parent,
            None => self.spans.parent_of(id - 1),
        };
        Ok(self.listing_of(holder)?.node(id).cloned())
    }

    pub fn listing(&self, id: u32) -> Result<Option<Arc<Listing>>> {
        match self.spans.dir(id) {
            Some(d) => self.listing_of(d).map(Some),
            None => Ok(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn listing_of(&self, dir: u32) -> Result<Arc<Listing>> {
        if let Some(l) = self.lock().get(dir) {
            return Ok(l);
        }
        let listing = Arc::new(self.read_listing(dir)?);
        self.lock().put(dir, listing.clone(), self.budget);
        Ok(listing)
    }

    /// A directory's node: its own record's attributes, or made up.
    fn dir_node(&self, dir: u32) -> Result<Node> {
        let s = &self.spans.dirs[dir as usize];
        let nlink = 2 + s.subdirs;
        Ok(match s.record {
            Some(at) => Node::from_item(self.records.read(at)?.0, nlink),
            None => Node::made_up(self.d, nlink),
        })
    }

    /// Reads directory `dir`'s span, stepping over its subdirectories'.
    fn read_listing(&self, dir: u32) -> Result<Listing> {
        let s = &self.spans.dirs[dir as usize];
        let mut entries = Vec::new();
        let mut subdirs = self.spans.subdirs(dir).peekable();
        let (mut ord, mut off) = (s.body_ord, s.body_off);
        while ord < s.to_ord {
            if let Some(c) = subdirs.next_if(|c| self.spans.dirs[*c as usize].from_ord == ord) {
                let sub = &self.spans.dirs[c as usize];
                entries.push(Entry {
                    name: sub.name.clone(),
                    id: sub.id,
                    kind: ItemKind::Dir,
                    node: Some(Arc::new(self.dir_node(c)?)),
                });
                (ord, off) = (sub.to_ord, sub.to_off);
                continue;
            }
            let (item, next) = self.records.read(off)?;
            let this = ord;
            (ord, off) = (ord + 1, next);
            let Some(comps) = safe_components(&item.path) else {
                continue;
            };
            if comps.len() != s.depth as usize + 1 || item.kind == ItemKind::Dir {
                return Err(Error::corrupt(
                    "item stream",
                    "an item lies outside the directory it was found in",
                ));
            }
            let name = comps[comps.len() - 1].into();
            let kind = item.kind;
            let link = item.hardlink_id.and_then(|h| self.spans.links.get(&h));
            let (id, nlink) = link.copied().unwrap_or((this + 1, 1));
            let node = (id == this + 1).then(|| Arc::new(Node::from_item(item, nlink)));
            entries.push(Entry {
                name,
                id,
                kind,
                node,
            });
        }
        Ok(Listing::new(self.spans.dirs[s.parent as usize].id, entries))
    }
}

#[cfg(test)]
mod tests {
    use super::super::records::tests::stream;
    use super::super::tree::{Tree, Whole};
    use super::*;
    use crate::format::item::{Item, Timestamp};
    use proptest::prelude::*;

    const D: Defaults = Defaults {
        time: Timestamp { secs: 7, nanos: 0 },
        uid: 3,
        gid: 4,
    };

    fn lazy(items: &[Item], budget: usize) -> Lazy {
        let records = stream(items, 23);
        let spans = Spans::scan(records.all()).unwrap().expect("in tree order");
        Lazy::with_budget(spans, records, D, budget)
    }

    /// Everything a tree shows, walked from the root: per path, the node's kind, size,
    /// mode, link count and chunk count, and which paths share a node.
    fn show(t: &Tree) -> Vec<String> {
        let mut out = Vec::new();
        let mut ids = HashMap::new();
        let mut todo = vec![(0u32, String::new())];
        while let Some((dir, path)) = todo.pop() {
            let listing = t.listing(dir).unwrap().expect("a directory");
            for e in &listing.entries {
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let n = t.node(e.id).unwrap().expect("a node");
                let same = ids.entry(e.id).or_insert_with(|| p.clone()).clone();
                out.push(format!(
                    "{p} {:?} {} {:o} {} {} {} {same}",
                    n.kind,
                    n.size,
                    n.perm,
                    n.nlink,
                    n.chunks.len(),
                    n.uid
                ));
                if e.kind == ItemKind::Dir {
                    assert_eq!(t.listing(e.id).unwrap().unwrap().parent, dir);
                    todo.push((e.id, p));
                }
            }
        }
        out.sort();
        out
    }

    fn item(kind: ItemKind, path: &str, size: u64) -> Item {
        let mut i = Item::new(kind, path.as_bytes().to_vec());
        i.mode = 0o600 + size as u32 % 64;
        i.size = size;
        i.uid = 1;
        i
    }

    /// Items for paths in tree order: dirs where a path ends in `/`, hardlinks where it
    /// ends in `=`.
    fn items(paths: &[&str]) -> Vec<Item> {
        paths
            .iter()
            .enumerate()
            .map(|(n, p)| {
                if let Some(d) = p.strip_suffix('/') {
                    item(ItemKind::Dir, d, 0)
                } else if let Some(f) = p.strip_suffix('=') {
                    let mut i = item(ItemKind::File, f, 5);
                    i.hardlink_id = Some([9; 16]);
                    i
                } else {
                    item(ItemKind::File, p, n as u64)
                }
            })
            .collect()
    }

    fn same_as_whole(items: &[Item], budget: usize) {
        let whole = Tree::Whole(Whole::build(items.iter().cloned().map(Ok), D).unwrap());
        let lazy = Tree::Lazy(Box::new(lazy(items, budget)));
        assert_eq!(show(&lazy), show(&whole));
    }

    #[test]
    fn a_lazy_tree_shows_what_a_whole_one_does() {
        let paths = [
            "a",
            "a/x",
            "b/",
            "b/c/d/e",
            "b/c/d/f",
            "b/c/g",
            "b/c/g/h",
            "b/h=",
            "b/i/",
            "b/j",
            "home/alice/a.txt",
            "home/alice/sub/",
            "home/alice/sub/b",
            "home/alice/sub/k=",
            "home/bob/",
            "z",
        ];
        let items = items(&paths);
        for budget in [0, 3, BUDGET] {
            same_as_whole(&items, budget);
        }
    }

    #[test]
    fn unsafe_paths_are_left_out_and_listings_come_back_after_eviction() {
        let mut v = items(&["a/", "a/b", "a/c/", "a/c/d", "e"]);
        v.insert(2, item(ItemKind::File, "a/../evil", 1));
        v.insert(0, item(ItemKind::File, "/abs", 1));
        same_as_whole(&v, 0);
        let t = lazy(&v, 0);
        let a = t.listing(t.listing(0).unwrap().unwrap().entries[0].id);
        let a = a.unwrap().unwrap();
        let b = a.lookup(b"b").unwrap().id;
        for id in 0..t.ids() {
            t.node(id).unwrap();
        }
        assert_eq!(t.node(b).unwrap().unwrap().size, 1);
        assert!(t.node(t.ids()).unwrap().is_none());
    }

    #[test]
    fn opening_holds_the_directories_and_listings_stay_within_the_budget() {
        let mut paths = Vec::new();
        for d in 0..40 {
            paths.push(format!("top/d{d:02}/"));
            for f in 0..30 {
                paths.push(format!("top/d{d:02}/f{f:02}"));
            }
        }
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let t = lazy(&items(&refs), 100);
        assert_eq!(
            t.spans.dirs.len(),
            42,
            "the root, the made-up top, 40 directories"
        );
        assert_eq!(
            t.lock().entries,
            0,
            "nothing is listed before it is asked for"
        );
        let top = t.listing(0).unwrap().unwrap().entries[0].id;
        for d in &t.listing(top).unwrap().unwrap().entries {
            assert_eq!(t.listing(d.id).unwrap().unwrap().entries.len(), 30);
            assert!(t.lock().entries <= 100 + 30, "{}", t.lock().entries);
        }
        assert_eq!(t.ids() as usize, paths.len() + 2);
    }

    #[test]
    fn a_stream_out_of_tree_order_is_read_whole() {
        let v = items(&["b", "a/x", "a/"]);
        let records = stream(&v, 5);
        assert!(Spans::scan(records.all()).unwrap().is_none());
        let t = Tree::open(records, D).unwrap();
        assert!(matches!(t, Tree::Whole(_)));
        assert_eq!(show(&t).len(), 3);
    }

    proptest! {
        #[test]
        fn random_trees_show_the_same_lazily(
            picks in proptest::collection::vec((0usize..4, 0usize..4, 0usize..4, 0u8..5), 1..40),
            budget in 0usize..8,
        ) {
            let names = ["a", "b", "c", "d"];
            let mut paths: Vec<String> = picks
                .iter()
                .map(|(x, y, z, kind)| {
                    let p = match kind % 3 {
                        0 => names[*x].to_string(),
                        1 => format!("{}/{}", names[*x], names[*y]),
                        _ => format!("{}/{}/{}", names[*x], names[*y], names[*z]),
                    };
                    match kind {
                        3 => format!("{p}/"),
                        4 => format!("{p}="),
                        _ => p,
                    }
                })
                .collect();
            let key = |p: &String| p.trim_end_matches(['/', '=']).to_string();
            paths.sort_by(|x, y| crate::format::item::tree_order(key(x).as_bytes(), key(y).as_bytes()));
            paths.dedup_by(|x, y| key(x) == key(y));
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            same_as_whole(&items(&refs), budget);
        }

        #[test]
        fn any_stream_opens_as_the_whole_tree_shows_it(
            picks in proptest::collection::vec(
                (proptest::collection::vec(0usize..6, 1..4), 0u8..5), 1..30),
            sorted in any::<bool>(),
        ) {
            let names = ["a", "b", "..", ".", "", "c"];
            let mut paths: Vec<String> = picks
                .iter()
                .map(|(comps, kind)| {
                    let p: Vec<&str> = comps.iter().map(|c| names[*c]).collect();
                    let p = p.join("/");
                    match kind {
                        3 => format!("{p}/"),
                        4 => format!("{p}="),
                        _ => p,
                    }
                })
                .filter(|p| !p.is_empty() && p != "/" && p != "=")
                .collect();
            if sorted {
                let key = |p: &String| p.trim_end_matches(['/', '=']).to_string();
                paths.sort_by(|x, y| crate::format::item::tree_order(key(x).as_bytes(), key(y).as_bytes()));
            }
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let v = items(&refs);
            let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
            let opened = Tree::open(stream(&v, 11), D).unwrap();
            prop_assert_eq!(show(&opened), show(&whole));
        }
    }
}
