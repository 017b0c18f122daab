//! Extract never writes, links or changes anything outside the target, whatever the archive
//! holds. Archives are crafted with the library's item writer, which does no sanitising.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use cairn::archive::stream::ItemStreamWriter;
use cairn::archive::{ArchiveMeta, ArchiveStats};
use cairn::format::item::{ChunkRef, Item, ItemKind, Timestamp};
use cairn::repo::Repository;
use cairn::store::local::LocalStore;
use common::{stderr, Repo};

struct Crafted {
    items: Vec<(Item, Option<Vec<u8>>)>,
}

impl Crafted {
    fn file(&mut self, path: &[u8], content: &[u8], hardlink: Option<u8>) -> &mut Self {
        let mut it = Item::new(ItemKind::File, path.to_vec());
        it.mode = 0o644;
        it.size = content.len() as u64;
        it.hardlink_id = hardlink.map(|h| [h; 16]);
        self.items.push((it, Some(content.to_vec())));
        self
    }

    fn dir(&mut self, path: &[u8]) -> &mut Self {
        let mut it = Item::new(ItemKind::Dir, path.to_vec());
        it.mode = 0o755;
        self.items.push((it, None));
        self
    }

    fn symlink(&mut self, path: &[u8], target: &[u8]) -> &mut Self {
        let mut it = Item::new(ItemKind::Symlink, path.to_vec());
        it.link_target = target.to_vec();
        self.items.push((it, None));
        self
    }

    fn commit(&self, repo_path: &Path, name: &str) {
        let mut repo = Repository::open(Arc::new(LocalStore::new(repo_path)), || {
            Ok(b"test passphrase".to_vec())
        })
        .unwrap();
        repo.lock(
            cairn::repo::lock::LockKind::Shared,
            "test",
            std::time::Duration::ZERO,
        )
        .unwrap();
        let (index, _, _) = repo.load_index_for_writing().unwrap();
        repo.write(index, |up| {
            let mut w = ItemStreamWriter::new(repo.metadata_chunker().unwrap());
            for (item, content) in &self.items {
                let mut item = item.clone();
                if let Some(c) = content {
                    if !c.is_empty() {
                        let id = up.store_chunk(c).unwrap();
                        item.chunks = vec![ChunkRef {
                            id,
                            len: c.len() as u32,
                        }];
                    }
                }
                w.push(&item, up).unwrap();
            }
            let items = w.finish(up).unwrap();
            let meta = ArchiveMeta {
                name: name.into(),
                comment: String::new(),
                hostname: "h".into(),
                username: "u".into(),
                start: Timestamp::now(),
                end: Timestamp::now(),
                command_line: vec![],
                items,
                stats: ArchiveStats::default(),
                copied_from: None,
                replaces: None,
                tags: Vec::new(),
            };
            let sealed = cairn::archive::seal(&repo, &meta).unwrap();
            Ok(cairn::repo::session::Commit::archive(sealed))
        })
        .unwrap();
    }
}

/// Every path under `root` with its type and contents (or link target).
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .map(|e| e.unwrap())
        .map(|e| {
            let p = e.path();
            let md = fs::symlink_metadata(p).unwrap();
            let v = if md.file_type().is_symlink() {
                format!("link:{}", fs::read_link(p).unwrap().display())
            } else if md.is_file() {
                format!(
                    "file:{}:{:?}",
                    String::from_utf8_lossy(&fs::read(p).unwrap()),
                    md.modified().unwrap()
                )
            } else {
                format!("dir:{:?}", md.permissions())
            };
            (p.display().to_string(), v)
        })
        .collect()
}

#[test]
fn hostile_archive_cannot_touch_anything_outside_the_target() {
    let repo = Repo::new();
    let base = repo.dir.path().join("area");
    let canary = base.join("canary");
    let target = base.join("target");
    fs::create_dir_all(&canary).unwrap();
    fs::create_dir_all(&target).unwrap();
    fs::write(canary.join("keep"), b"canary").unwrap();
    let canary_abs = canary.to_str().unwrap().as_bytes().to_vec();
    let mut abs_path = canary_abs.clone();
    abs_path.extend_from_slice(b"/keep");
    let mut c = Crafted { items: vec![] };
    c.file(b"../canary/keep", b"pwned", None)
        .file(&abs_path, b"pwned", None)
        .file(b"x/../../canary/keep", b"pwned", None)
        .file(b"./../canary/keep", b"pwned", None)
        .file(b"", b"pwned", None)
        .file(b"a\0b", b"pwned", None)
        // A symlink pointing out, then a path through it.
        .symlink(b"link", &canary_abs)
        .file(b"link/keep", b"pwned", None)
        .file(b"link/new", b"pwned", None)
        // A relative symlink out, then a directory of the same name, then a file in it.
        .symlink(b"link2", b"../canary")
        .dir(b"link2")
        .file(b"link2/keep", b"inside", None)
        // A directory, then a symlink of the same name pointing out, then a file below.
        .dir(b"d")
        .symlink(b"d", &canary_abs)
        .file(b"d/keep", b"inside", None)
        // Hardlinks: a legitimate pair, and a link whose path escapes.
        .file(b"h1", b"hard", Some(7))
        .file(b"h2", b"hard", Some(7))
        .file(b"../canary/hl", b"hard", Some(7))
        // A symlink to the canary, then a file of the same name (must replace the link, not
        // write through it), and a hardlink to that symlink's name.
        .symlink(b"s", &abs_path)
        .file(b"s", b"replaced", Some(9))
        .file(b"s2", b"replaced", Some(9));
    c.commit(&repo.path, "evil");

    let before = snapshot(&canary);
    let o = repo.run(&["extract", "evil", "--target", target.to_str().unwrap()]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "unsafe items must not pass silently"
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_eq!(
        snapshot(&canary),
        before,
        "the canary changed:\n{}",
        stderr(&o)
    );
    // Nothing appeared beside the target either.
    let mut names: Vec<_> = fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec!["canary", "target"]);
    // What is safe was restored inside the target.
    assert_eq!(fs::read(target.join("link2/keep")).unwrap(), b"inside");
    assert!(fs::symlink_metadata(target.join("link2")).unwrap().is_dir());
    assert_eq!(fs::read(target.join("d/keep")).unwrap(), b"inside");
    assert!(fs::symlink_metadata(target.join("d")).unwrap().is_dir());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(target.join("h1")).unwrap().ino(),
        fs::metadata(target.join("h2")).unwrap().ino()
    );
    assert!(fs::symlink_metadata(target.join("s")).unwrap().is_file());
    assert_eq!(fs::read(target.join("s")).unwrap(), b"replaced");
    assert_eq!(fs::read(target.join("s2")).unwrap(), b"replaced");
    // Each refused item is named.
    let err = stderr(&o);
    for named in [
        "../canary/keep",
        "link/keep",
        "x/../../canary/keep",
        "../canary/hl",
    ] {
        assert!(err.contains(named), "{named} not reported:\n{err}");
    }
}

#[test]
fn extracting_over_an_existing_tree_replaces_symlinks_instead_of_following_them() {
    let repo = Repo::new();
    let base = repo.dir.path().join("area");
    let canary = base.join("canary");
    let target = base.join("target");
    fs::create_dir_all(&canary).unwrap();
    fs::create_dir_all(target.join("dir")).unwrap();
    fs::write(canary.join("keep"), b"canary").unwrap();
    // The target already holds a symlink where the archive has a file.
    std::os::unix::fs::symlink(canary.join("keep"), target.join("dir/file")).unwrap();
    std::os::unix::fs::symlink(&canary, target.join("linkdir")).unwrap();
    let mut c = Crafted { items: vec![] };
    c.dir(b"dir")
        .file(b"dir/file", b"from archive", None)
        .file(b"linkdir/x", b"no", None);
    c.commit(&repo.path, "over");
    let before = snapshot(&canary);
    let o = repo.run(&["extract", "over", "--target", target.to_str().unwrap()]);
    assert_eq!(snapshot(&canary), before, "{}", stderr(&o));
    assert_eq!(fs::read(target.join("dir/file")).unwrap(), b"from archive");
    assert!(fs::symlink_metadata(target.join("dir/file"))
        .unwrap()
        .is_file());
    assert!(stderr(&o).contains("linkdir/x"));
}

/// Every namespace an archive holds is restored as root (archives are authenticated by the
/// repository's key: what they carry is applied like their owners and modes); without root,
/// what needs it is counted, not set, and said once.
#[test]
fn every_stored_xattr_namespace_is_restored_as_root() {
    let repo = Repo::new();
    let target = repo.dir.path().join("target");
    let mut c = Crafted { items: vec![] };
    c.file(b"f", b"data", None);
    c.items[0].0.xattrs = vec![
        (b"security.cairn".to_vec(), b"x".to_vec()),
        (b"trusted.cairn".to_vec(), b"x".to_vec()),
        (b"user.fine".to_vec(), b"y".to_vec()),
    ];
    c.commit(&repo.path, "x");
    let o = repo.run(&["extract", "x", "--target", target.to_str().unwrap()]);
    let mut names: Vec<_> = xattr::list(target.join("f")).unwrap().collect();
    names.sort();
    if nix::unistd::geteuid().is_root() {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(names, ["security.cairn", "trusted.cairn", "user.fine"]);
    } else {
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(names.contains(&std::ffi::OsString::from("user.fine")));
    }
}
