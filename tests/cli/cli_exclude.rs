//! The excludes people bring from borg and restic: --exclude-if-present (with
//! --keep-exclude-tags), --exclude-larger-than, --iexclude and --iexclude-from, on the
//! command line and in a profile.

use crate::common;

use std::fs;
use std::path::Path;

use common::{random_bytes, stderr, Repo};

/// src/ with a small and a large file, photos in two cases, and two tagged directories.
fn tree(base: &Path) {
    let src = base.join("src");
    for d in ["proj", "vm", "docs"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::write(src.join("small.txt"), b"small").unwrap();
    fs::write(src.join("vm/disk.img"), random_bytes(1, 1_100_000)).unwrap();
    fs::write(src.join("vm/notes"), random_bytes(2, 1_000_000)).unwrap();
    fs::write(src.join("docs/Photo.JPG"), b"jpeg").unwrap();
    fs::write(src.join("docs/other.jpg"), b"jpeg").unwrap();
    fs::write(src.join("docs/KEEP.txt"), b"kept").unwrap();
    fs::write(src.join("proj/.nobackup"), b"").unwrap();
    fs::write(src.join("proj/build.o"), b"object").unwrap();
    fs::create_dir_all(src.join("proj/deep")).unwrap();
    fs::write(src.join("proj/deep/x"), b"x").unwrap();
}

#[test]
fn excludes_by_tag_size_and_case() {
    let repo = Repo::new();
    let base = repo.dir.path();
    tree(base);
    fs::write(base.join("ipatterns"), "# photos\n*.jpg\n").unwrap();
    let o = repo.run_in(
        base,
        &[
            "create",
            "a",
            "src",
            "--exclude-if-present",
            ".nobackup",
            "--exclude-larger-than",
            "1M",
            "--iexclude-from",
            "ipatterns",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let paths = repo.archive_paths("a");
    let want = [
        "src",
        "src/docs",
        "src/docs/KEEP.txt",
        "src/proj",
        "src/small.txt",
        "src/vm",
        "src/vm/notes",
    ];
    let mut got = paths.clone();
    got.sort();
    assert_eq!(
        got, want,
        "1 MiB is 1048576 bytes: notes (1000000) stays, disk.img goes"
    );

    // With the tags kept, and --iexclude given directly.
    let o = repo.run_in(
        base,
        &[
            "create",
            "b",
            "src",
            "--exclude-if-present",
            ".nobackup",
            "--keep-exclude-tags",
            "--iexclude",
            "keep.TXT",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let paths = repo.archive_paths("b");
    assert!(
        paths.contains(&"src/proj/.nobackup".to_string()),
        "{paths:?}"
    );
    assert!(!paths
        .iter()
        .any(|p| p.contains("build.o") || p.contains("deep")));
    assert!(
        !paths.contains(&"src/docs/KEEP.txt".to_string()),
        "{paths:?}"
    );
    assert!(paths.contains(&"src/vm/disk.img".to_string()));

    // Refused: a size that is not one, a tag that is a path.
    for (args, says) in [
        (
            &["--exclude-larger-than", "5X"][..],
            "the unit is k, M, G or T",
        ),
        (&["--exclude-larger-than", "lots"][..], "is not a size"),
        (&["--exclude-if-present", "a/b"][..], "takes a file name"),
    ] {
        let mut all = vec!["create", "c", "src"];
        all.extend_from_slice(args);
        let o = repo.run_in(base, &all, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_profile_carries_the_same_excludes() {
    let repo = Repo::new();
    let base = repo.dir.path();
    tree(base);
    let config = base.join("config");
    fs::create_dir_all(config.join("cairn")).unwrap();
    fs::write(
        config.join("cairn/home.toml"),
        format!(
            "repository = {:?}\npasscommand = \"echo test passphrase\"\n\
             [create]\npaths = [{:?}]\nexclude-if-present = [\".nobackup\"]\n\
             keep-exclude-tags = true\nexclude-larger-than = \"1M\"\niexclude = [\"*.JPG\"]\n",
            repo.path.to_str().unwrap(),
            base.join("src").to_str().unwrap()
        ),
    )
    .unwrap();
    let o = common::cairn(
        &["--profile", "home", "create", "home"],
        &[
            ("XDG_CONFIG_HOME", config.to_str().unwrap()),
            ("XDG_CACHE_HOME", base.join("cache").to_str().unwrap()),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let paths = repo.archive_paths("home");
    let ends = |s: &str| paths.iter().any(|p| p.ends_with(s));
    assert!(ends("proj/.nobackup") && !ends("build.o"), "{paths:?}");
    assert!(!ends("disk.img") && ends("vm/notes"), "{paths:?}");
    assert!(
        !ends("Photo.JPG") && !ends("other.jpg") && ends("KEEP.txt"),
        "{paths:?}"
    );
}

/// A directory that is a cache (a valid CACHEDIR.TAG) and tagged with --exclude-if-present
/// keeps each tag once, in name order: the tag named by both options was stored twice, and
/// the cache tag came before `.nobackup`, out of the order every other directory's entries
/// are stored in.
#[test]
fn kept_tags_are_stored_once_each_in_name_order() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let cache = base.join("src/c");
    fs::create_dir_all(&cache).unwrap();
    fs::write(
        cache.join("CACHEDIR.TAG"),
        b"Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    fs::write(cache.join(".nobackup"), b"").unwrap();
    fs::write(cache.join("data"), b"cached").unwrap();
    let o = repo.run_in(
        base,
        &[
            "create",
            "a",
            "src",
            "--exclude-caches",
            "--exclude-if-present",
            "CACHEDIR.TAG",
            "--exclude-if-present",
            ".nobackup",
            "--keep-exclude-tags",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        repo.archive_paths("a"),
        ["src", "src/c", "src/c/.nobackup", "src/c/CACHEDIR.TAG"]
    );
}
