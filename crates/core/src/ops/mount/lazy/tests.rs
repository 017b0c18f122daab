//! The lazy tree against the whole one: the same names, kinds, sizes, modes, link counts and
//! shared inodes, whatever the stream, the chunks it is cut into and the budget.

use super::super::records::tests::{counted_stream, stream};
use super::super::tree::{Tree, Whole};
use super::*;
use crate::format::item::{tree_order, Item, Timestamp};
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

/// Everything a tree shows, walked from the root: per path, the kind its directory lists
/// (readdir's d_type), the node's kind (stat's), size, mode, link count and chunk count,
/// and which paths share a node.
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
                "{p} {:?} {:?} {} {:o} {} {} {} {same}",
                e.kind,
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

#[test]
fn a_later_hardlinked_name_is_listed_as_what_the_first_is() {
    // Two names of one hardlinked inode whose items disagree on the kind (a hostile or
    // damaged archive): the whole tree lists both with the node's kind, the lazy one
    // lists the follower with its own item's kind, so readdir's d_type says symlink
    // where stat says regular file.
    let mut a = item(ItemKind::File, "a", 5);
    a.hardlink_id = Some([7; 16]);
    let mut b = item(ItemKind::Symlink, "b", 0);
    b.hardlink_id = Some([7; 16]);
    let v = vec![a, b];
    let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
    let lazy = Tree::Lazy(Box::new(lazy(&v, BUDGET)));
    assert_eq!(show(&lazy), show(&whole));
}

/// `cp -al` snapshots: `p/` holds n files, `q/` n hardlinks to them. `ls -l q` looks
/// up each name of q: q's listing, then the first name's node, in p's listing.
fn snapshots(n: usize) -> Vec<Item> {
    let mut v = vec![item(ItemKind::Dir, "p", 0)];
    for f in 0..n {
        let mut i = item(ItemKind::File, &format!("p/f{f:06}"), 10);
        i.hardlink_id = Some((f as u128).to_le_bytes());
        v.push(i);
    }
    v.push(item(ItemKind::Dir, "q", 0));
    for f in 0..n {
        let mut i = item(ItemKind::File, &format!("q/f{f:06}"), 10);
        i.hardlink_id = Some((f as u128).to_le_bytes());
        v.push(i);
    }
    v
}

/// Emulates fs.rs lookup_in for every name of `dir`: the dir's listing, then the
/// node when the entry does not hold it.
fn ls_l(t: &Lazy, dir: u32) {
    let names: Vec<Box<[u8]>> = t
        .listing(dir)
        .unwrap()
        .unwrap()
        .entries
        .iter()
        .map(|e| e.name.clone())
        .collect();
    for name in names {
        let listing = t.listing(dir).unwrap().unwrap();
        let e = listing.lookup(&name).unwrap();
        if e.node.is_none() {
            t.node(e.id).unwrap().unwrap();
        }
    }
}

#[test]
fn names_hardlinked_from_another_directory_do_not_read_both_again_per_name() {
    // With the directories together over the budget, each name read again both
    // directories: fetches grow as n^2.
    let n = 200;
    let (records, count) = counted_stream(&snapshots(n), 4096);
    let spans = Spans::scan(records.all()).unwrap().unwrap();
    let t = Lazy::with_budget(spans, records, D, 300);
    let root = t.listing(0).unwrap().unwrap();
    let q = root.lookup(b"q").unwrap().id;
    let before = count.load(std::sync::atomic::Ordering::Relaxed);
    ls_l(&t, q);
    let fetched = count.load(std::sync::atomic::Ordering::Relaxed) - before;
    let chunks_in_stream = {
        let mut b = Vec::new();
        for i in snapshots(n) {
            i.encode_into(&mut b);
        }
        b.len().div_ceil(4096)
    };
    assert!(
        fetched <= 4 * chunks_in_stream,
        "ls -l of {n} hardlinks fetched {fetched} chunks; the stream has {chunks_in_stream}"
    );
}

#[test]
fn a_very_deep_path_is_listed_without_recursion() {
    // 100 k components: Whole's builder would recurse once per component.
    let depth = 100_000;
    let mut p = "d/".repeat(depth);
    p.push('f');
    let v = vec![item(ItemKind::File, &p, 3)];
    let t = lazy(&v, 0);
    let mut id = 0;
    let mut seen = 0;
    loop {
        let l = t.listing(id).unwrap().unwrap();
        assert_eq!(l.entries.len(), 1);
        let e = &l.entries[0];
        if e.kind != ItemKind::Dir {
            assert_eq!(t.node(e.id).unwrap().unwrap().size, 3);
            break;
        }
        id = e.id;
        seen += 1;
    }
    assert_eq!(seen, depth);
}

#[test]
fn a_very_deep_path_in_tree_order_opens_on_a_small_stack() {
    let depth = 20_000;
    let mut p = "d/".repeat(depth);
    p.push('f');
    let v = vec![item(ItemKind::File, &p, 3), item(ItemKind::File, "z", 1)];
    let h = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let t = Tree::open(stream(&v, 4096), D).unwrap();
            assert!(matches!(t, Tree::Lazy(_)));
            t.ids()
        })
        .unwrap();
    assert_eq!(h.join().unwrap(), 2 + 1 + depth as u32);
}

#[test]
fn a_very_deep_path_out_of_tree_order_opens_on_a_small_stack() {
    // Out of order ("z" then the deep path): read whole. Run in a thread with a
    // FUSE-worker-like 2 MiB stack. Whole::build's dir() recurses per component.
    let depth = 20_000;
    let mut p = "d/".repeat(depth);
    p.push('f');
    let v = vec![item(ItemKind::File, "z", 1), item(ItemKind::File, &p, 3)];
    let h = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || Tree::open(stream(&v, 4096), D).map(|t| t.ids()).unwrap())
        .unwrap();
    assert!(h.join().is_ok());
}

#[test]
fn threads_asking_at_once_see_what_the_whole_tree_shows() {
    let mut paths = Vec::new();
    for d in 0..20 {
        paths.push(format!("top/d{d:02}/"));
        for f in 0..15 {
            paths.push(format!("top/d{d:02}/f{f:02}"));
        }
        paths.push(format!("top/d{d:02}/h{d}="));
    }
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let v = items(&refs);
    let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
    let want = show(&whole);
    let t = Arc::new(Tree::Lazy(Box::new(lazy(&v, 7))));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut r = Vec::new();
                for _ in 0..20 {
                    r.push(show(&t));
                    for id in 0..t.ids() {
                        let _ = t.node(id).unwrap();
                        let _ = t.listing(id).unwrap();
                    }
                }
                r
            })
        })
        .collect();
    for h in hs {
        for got in h.join().unwrap() {
            assert_eq!(got, want);
        }
    }
}

#[test]
fn odd_streams_show_what_the_whole_tree_shows() {
    // Empty, only unsafe, empty path, names below '/' in byte order.
    let cases: Vec<Vec<Item>> = vec![
        vec![],
        vec![
            item(ItemKind::File, "/abs", 1),
            item(ItemKind::Dir, "../x", 1),
        ],
        vec![item(ItemKind::File, "", 1), item(ItemKind::File, "a", 1)],
        items(&["a", "a/x", "a-b/", "a-b/c", "a.b", "a0/"]),
        items(&["a!/", "a!/b", "a/", "a/b/c/", "a/b/c/d", "a/b-c", "a/b.c"]),
    ];
    for v in cases {
        let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
        let opened = Tree::open(stream(&v, 3), D).unwrap();
        assert_eq!(show(&opened), show(&whole));
    }
}

#[test]
fn a_huge_or_truncated_last_record_is_an_error() {
    let v = items(&["a/", "a/b", "c"]);
    let mut bytes = Vec::new();
    for i in &v {
        i.encode_into(&mut bytes);
    }
    for tail in [
        vec![0xff, 0xff, 0xff, 0xff],
        vec![0x10, 0, 0, 0, 1, 2],
        vec![1, 0],
        (64u32 * 1024 * 1024).to_le_bytes().to_vec(),
    ] {
        let mut b = bytes.clone();
        b.extend_from_slice(&tail);
        use crate::format::item::ChunkRef;
        use crate::util::id::ChunkId;
        let c = ChunkRef {
            id: ChunkId([1; 32]),
            len: b.len() as u32,
        };
        let r = Records::new(vec![c], Box::new(move |_: &ChunkRef| Ok(b.clone())));
        assert!(Tree::open(r, D).is_err());
    }
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
        paths.sort_by(|x, y| tree_order(key(x).as_bytes(), key(y).as_bytes()));
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
            paths.sort_by(|x, y| tree_order(key(x).as_bytes(), key(y).as_bytes()));
        }
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let v = items(&refs);
        let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
        let opened = Tree::open(stream(&v, 11), D).unwrap();
        prop_assert_eq!(show(&opened), show(&whole));
    }

    #[test]
    fn wider_random_streams_show_the_same_lazily(
        picks in proptest::collection::vec(
            (proptest::collection::vec(0usize..7, 1..5), 0u8..6, 0u8..4, any::<bool>()), 1..40),
        cut in 1usize..60,
        budget in 0usize..6,
        unsafe_at in proptest::collection::vec(0usize..40, 0..4),
    ) {
        let names = ["a", "a-", "a.", "b", "A", "a!", "\u{e9}"];
        let kinds = [ItemKind::File, ItemKind::Dir, ItemKind::Symlink, ItemKind::Fifo, ItemKind::CharDev, ItemKind::File];
        let mut v: Vec<Item> = picks
            .iter()
            .map(|(comps, kind, hl, big)| {
                let p: Vec<&str> = comps.iter().map(|c| names[*c]).collect();
                let mut i = item(kinds[*kind as usize], &p.join("/"), if *big { 1000 } else { 1 });
                // Hardlinked names are Files, as create writes them (other kinds: above).
                if *hl > 0 && i.kind != ItemKind::Dir {
                    i.kind = ItemKind::File;
                    i.hardlink_id = Some([*hl; 16]);
                }
                if *hl == 3 && i.kind == ItemKind::Dir {
                    i.hardlink_id = Some([1; 16]);
                }
                i
            })
            .collect();
        v.sort_by(|x, y| crate::format::item::tree_order(&x.path, &y.path));
        v.dedup_by(|x, y| x.path == y.path);
        for (k, at) in unsafe_at.iter().enumerate() {
            let at = (*at).min(v.len());
            let p = ["../x", "a/../b", "./a", "a//b"][k % 4];
            let mut u = item(ItemKind::File, p, 9);
            u.hardlink_id = Some([1; 16]);
            v.insert(at, u);
        }
        let whole = Tree::Whole(Whole::build(v.iter().cloned().map(Ok), D).unwrap());
        let records = stream(&v, cut);
        let spans = Spans::scan(records.all()).unwrap().expect("in tree order");
        let lazy = Tree::Lazy(Box::new(Lazy::with_budget(spans, records, D, budget)));
        prop_assert_eq!(show(&lazy), show(&whole));
    }
}
