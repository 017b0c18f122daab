//! create / extract / list / info / diff through the real binary on real directories.

use crate::common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn set_mtime(p: &Path, secs: i64, nanos: i64) {
    let t = nix::sys::time::TimeSpec::new(secs, nanos);
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        p,
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

/// A tree with every kind of entry cairn keeps.
fn build_full_tree(root: &Path) {
    fs::create_dir_all(root.join("dir/sub")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::create_dir_all(root.join("private")).unwrap();
    fs::write(root.join("dir/small.txt"), b"hello world\n").unwrap();
    fs::write(root.join("dir/empty-file"), b"").unwrap();
    // Several chunks: 12 MB of incompressible data plus compressible text.
    fs::write(root.join("dir/sub/big.bin"), random_bytes(7, 12_000_000)).unwrap();
    fs::write(
        root.join("dir/sub/text.txt"),
        "line of text\n".repeat(100_000),
    )
    .unwrap();
    // Non-UTF-8 and odd names.
    fs::write(
        root.join(OsStr::from_bytes(b"dir/caf\xe9-latin1")),
        b"latin1",
    )
    .unwrap();
    fs::write(root.join("dir/with space & 'quote'"), b"q").unwrap();
    fs::write(root.join("dir/ünïcödé ✓"), b"u").unwrap();
    // Symlinks: relative, absolute, dangling — kept verbatim, never followed.
    symlink("small.txt", root.join("dir/link-rel")).unwrap();
    symlink("/etc/hostname", root.join("dir/link-abs")).unwrap();
    symlink("does/not/exist", root.join("dir/link-dangling")).unwrap();
    // Hardlinks.
    fs::write(root.join("dir/linked-a"), b"shared inode").unwrap();
    fs::hard_link(root.join("dir/linked-a"), root.join("dir/sub/linked-b")).unwrap();
    // A fifo.
    nix::unistd::mkfifo(
        &root.join("dir/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    // Sparse: 40 MB hole, a little data.
    let f = fs::File::create(root.join("sparse.img")).unwrap();
    f.set_len(40_000_000).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"data in the middle", 20_000_000).unwrap();
    drop(f);
    // Modes, xattrs.
    fs::set_permissions(
        root.join("dir/small.txt"),
        fs::Permissions::from_mode(0o4751),
    )
    .unwrap();
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    xattr::set(
        root.join("dir/small.txt"),
        "user.comment",
        b"an xattr value",
    )
    .unwrap();
    xattr::set(root.join("dir/sub"), "user.dir-attr", b"on a directory").unwrap();
    if is_root() {
        // Owners and devices need root.
        std::os::unix::fs::lchown(root.join("dir/sub/text.txt"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(root.join("dir/link-rel"), Some(4321), Some(8765)).unwrap();
        nix::sys::stat::mknod(
            &root.join("dir/null-dev"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
    }
    // Timestamps with nanoseconds, set last (directories after their contents).
    for (p, s, n) in [
        ("dir/small.txt", 1_500_000_000, 123_456_789),
        ("dir/link-rel", 1_400_000_000, 987_654_321),
        ("dir/sub/big.bin", 1_600_000_000, 1),
        ("dir/sub", 1_300_000_000, 555),
        ("dir", 1_200_000_000, 999_999_999),
        ("empty", 1_100_000_000, 42),
    ] {
        set_mtime(&root.join(p), s, n);
    }
}

#[test]
fn every_kind_of_entry_round_trips_exactly() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    build_full_tree(&src.join("tree"));
    let out = repo.run_in(&src, &["create", "full", "tree"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let target = repo.dir.path().join("restore");
    repo.ok(&["extract", "full", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&src.join("tree"), &target.join("tree"));
    // The hole is restored as a hole.
    let md = fs::metadata(target.join("tree/sparse.img")).unwrap();
    assert_eq!(md.len(), 40_000_000);
    assert!(
        md.blocks() * 512 < 1_000_000,
        "sparse file takes {} bytes",
        md.blocks() * 512
    );
    // As `ls -l`: a device's major and minor where a file's size goes.
    if is_root() {
        let listed = repo.ok(&["list", "full"]);
        let dev = listed.lines().find(|l| l.ends_with("null-dev")).unwrap();
        assert!(dev.starts_with("c") && dev.contains(" 1,   3 "), "{dev}");
    }
}

#[test]
fn non_utf8_names_are_listed_and_restored() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let name = OsStr::from_bytes(b"\xff\xfe weird \x01 name");
    fs::write(src.join(name), b"x").unwrap();
    repo.ok(&["create", "n", src.to_str().unwrap()]);
    let lines = repo.ok(&["list", "n", "--json-lines"]);
    assert!(lines.contains("path_hex"), "{lines}");
    let target = repo.dir.path().join("out");
    repo.ok(&["extract", "n", "--target", target.to_str().unwrap()]);
    let restored = target.join(src.strip_prefix("/").unwrap()).join(name);
    assert_eq!(fs::read(restored).unwrap(), b"x");
}

/// Names that are not UTF-8 given as arguments: `extract` and `export-tar` take them as exact
/// paths, as patterns and as excludes, `find` as a pattern, byte for byte (a Latin-1 `café`
/// is not the UTF-8 one); `list` shows the stray byte by value.
#[test]
fn names_that_are_not_utf8_are_arguments_like_any_other() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let latin1 = OsStr::from_bytes(b"caf\xe9");
    for dir in [latin1, OsStr::new("café")] {
        fs::create_dir_all(base.join("src").join(dir)).unwrap();
        fs::write(base.join("src").join(dir).join("menu"), dir.as_bytes()).unwrap();
    }
    let o = repo.run_in(base, &["create", "n", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = |args: &[&str], raw: &[u8]| {
        let o = repo
            .command(base, args, &[])
            .arg(OsStr::from_bytes(raw))
            .output()
            .unwrap();
        (o.status.code(), stdout(&o), stderr(&o))
    };
    let restored = |target: &Path| -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = fs::read_dir(target.join("src"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().as_bytes().to_vec())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    // An exact path, a pattern, an exclude.
    for (i, (args, raw, want)) in [
        (
            vec!["extract", "n"],
            &b"src/caf\xe9"[..],
            vec![b"caf\xe9".to_vec()],
        ),
        (
            vec!["extract", "n"],
            &b"src/*\xe9"[..],
            vec![b"caf\xe9".to_vec()],
        ),
        (
            vec!["extract", "n", "--exclude"],
            &b"caf\xe9"[..],
            vec!["café".as_bytes().to_vec()],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let target = base.join(format!("out{i}"));
        let mut args = args.clone();
        let t = target.to_str().unwrap().to_string();
        args.splice(1..1, ["--target", t.as_str()]);
        let (code, _, err) = run(&args, raw);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert_eq!(restored(&target), want, "{args:?}");
        assert_eq!(
            fs::read(
                target
                    .join("src")
                    .join(OsStr::from_bytes(&want[0]))
                    .join("menu")
            )
            .unwrap(),
            want[0]
        );
    }
    // export-tar holds only what the exact path names.
    let tar = base.join("n.tar");
    let (code, _, err) = run(&["export-tar", "n", tar.to_str().unwrap()], b"src/caf\xe9");
    assert_eq!(code, Some(0), "{err}");
    let listing = std::process::Command::new("tar")
        .args(["--quoting-style=literal", "-tf"])
        .arg(&tar)
        .output()
        .unwrap();
    let names: Vec<&[u8]> = listing
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with(b"src/caf\xe9")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.ends_with(b"menu")), "{names:?}");
    // find: the Latin-1 name only; a name that matches nothing is shown by value (exit 1).
    let (code, out, err) = run(&["find"], b"caf\xe9");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("src/caf\\xe9") && !out.contains("café"),
        "{out}"
    );
    let (code, _, err) = run(&["find"], b"none\xff");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("none\\xff"), "{err}");
    // list shows the stray byte by value, not as a replacement character.
    let listed = repo.ok(&["list", "n"]);
    assert!(
        listed.contains("src/caf\\xe9") && !listed.contains('\u{fffd}'),
        "{listed}"
    );
}

/// An extract into a target that holds an earlier restore fetches only the files whose
/// contents differ, puts back what is missing, replaces what is in the way, and sets the
/// metadata of the files it keeps: the tree ends up exactly the archive's.
#[test]
fn extract_over_a_restore_fetches_only_what_differs() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..24u64 {
        fs::write(src.join(format!("f{i:02}")), random_bytes(i, 300_000)).unwrap();
    }
    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let pack_reads = |log: &Path| {
        let text = fs::read_to_string(log).unwrap();
        text.lines().filter(|l| l.contains(" get packs/")).count()
    };
    let log1 = base.join("first.log");
    let o = repo.run_env(
        &["extract", "a", "--target", t],
        &[("CAIRN_STORE_LOG", log1.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = target.join("src");
    // Three files differ (same size, longer, missing), one is a symlink now, one has only
    // other metadata; the other 19 are as restored.
    fs::write(out.join("f03"), random_bytes(1000, 300_000)).unwrap();
    fs::write(out.join("f07"), random_bytes(7, 300_001)).unwrap();
    fs::remove_file(out.join("f11")).unwrap();
    fs::remove_file(out.join("f19")).unwrap();
    symlink("/etc/passwd", out.join("f19")).unwrap();
    fs::set_permissions(out.join("f15"), fs::Permissions::from_mode(0o600)).unwrap();
    set_mtime(&out.join("f15"), 1_000_000_000, 0);
    // An attribute the archive does not hold is taken off a file that is kept.
    xattr::set(out.join("f20"), "user.extra", b"not in the archive").unwrap();
    // A file with the right contents but another name elsewhere (a planted link) is replaced,
    // never given the item's mode: the other name keeps its own.
    let elsewhere = base.join("elsewhere");
    fs::hard_link(out.join("f21"), &elsewhere).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o640)).unwrap();
    let log2 = base.join("second.log");
    let o = repo.run_env(
        &["extract", "a", "--target", t],
        &[("CAIRN_STORE_LOG", log2.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let said = stdout(&o);
    assert!(
        said.contains("Restored 24 files")
            && said.contains("19 files (5.70 MB) were there already"),
        "{said}"
    );
    assert_trees_equal(&src, &out);
    assert_eq!(xattr::get(out.join("f20"), "user.extra").unwrap(), None);
    let other = fs::metadata(&elsewhere).unwrap();
    assert_eq!((other.nlink(), other.mode() & 0o777), (1, 0o640));
    let (first, second) = (pack_reads(&log1), pack_reads(&log2));
    assert!(first >= 24, "{first} pack reads for 24 files");
    assert!(
        second * 4 <= first,
        "{second} pack reads over the restore, {first} for the first"
    );
}

#[test]
fn second_create_of_unchanged_data_adds_almost_nothing() {
    let repo = Repo::new();
    let src = repo.dir.path().join("data");
    fs::create_dir_all(&src).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("f{i}")), random_bytes(i, 300_000)).unwrap();
    }
    // A duplicate of one file inside the tree deduplicates too.
    fs::write(src.join("copy-of-f3"), random_bytes(3, 300_000)).unwrap();
    let first = repo.create_json(repo.dir.path(), &["d", "data"]);
    let s1 = &first["archive"]["stats"];
    let original = s1["original_size"].as_u64().unwrap();
    // 20 of 21 files' worth (95%), plus at most 3% of padding: a stored copy would be 100%+.
    assert!(
        s1["deduplicated_size"].as_u64().unwrap() < original * 99 / 100,
        "copy not deduplicated: {s1}"
    );
    // Touch every file so the files cache cannot help: dedup alone must keep it small.
    for i in 0..20 {
        let p = src.join(format!("f{i}"));
        fs::write(&p, fs::read(&p).unwrap()).unwrap();
    }
    let second = repo.create_json(repo.dir.path(), &["d", "data"]);
    let s2 = &second["archive"]["stats"];
    assert_eq!(s2["original_size"], s1["original_size"]);
    let added = s2["deduplicated_size"].as_u64().unwrap();
    assert!(
        added * 100 < original,
        "second create added {added} of {original} bytes"
    );
    assert_eq!(s2["files_read"], 21);
}

#[test]
fn files_cache_skips_reading_unchanged_files() {
    // The cache only trusts files whose ctime is a few seconds old: every command runs a
    // minute ahead of the files' clock rather than wait.
    let repo = Repo::with_env(&[("CAIRN_TEST_CLOCK_OFFSET", "60")]);
    let src = repo.dir.path().join("data");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..30 {
        fs::write(src.join(format!("sub/f{i}")), random_bytes(i, 10_000)).unwrap();
    }
    let first = repo.create_json(repo.dir.path(), &["c", "data"]);
    assert_eq!(first["archive"]["stats"]["files_read"], 30);
    let second = repo.create_json(repo.dir.path(), &["c", "data"]);
    let s = &second["archive"]["stats"];
    assert_eq!(s["files_read"], 0, "{s}");
    assert_eq!(s["files_unchanged"], 30);
    // A changed file is read again; the others are not. Its time, an hour ahead, keeps it
    // recent (not to be trusted) for the cache rebuilt below.
    fs::write(src.join("sub/f5"), b"changed").unwrap();
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 3600;
    set_mtime(&src.join("sub/f5"), ahead, 0);
    let third = repo.create_json(repo.dir.path(), &["c", "data"]);
    assert_eq!(third["archive"]["stats"]["files_read"], 1);
    // A lost cache is rebuilt from the last archive of the series.
    fs::remove_dir_all(repo.dir.path().join("cache")).unwrap();
    let fourth = repo.create_json(repo.dir.path(), &["c", "data"]);
    assert_eq!(
        fourth["archive"]["stats"]["files_read"], 1,
        "only the recently changed file"
    );
    // And the data is right.
    let target = repo.dir.path().join("out");
    repo.ok(&["extract", "c", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&src, &target.join("data"));
}

/// The files cache is read forward as the walk goes, and held whole when its entries are out
/// of tree order: either way every unchanged file is found, with names that sort differently
/// as bytes and as paths (`a-b` before `a/z` as bytes, after it in the walk), and with the
/// sources given out of order and one of them twice (stored once).
#[test]
fn files_cache_finds_every_unchanged_file_in_any_source_order() {
    let repo = Repo::with_env(&[("CAIRN_TEST_CLOCK_OFFSET", "60")]);
    let root = repo.dir.path();
    for d in ["b/a/z", "b/a-b", "a/x"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["b/a/z/1", "b/a-b/2", "b/a.txt", "b/ab", "a/x/3", "a/y"] {
        fs::write(root.join(f), f.as_bytes()).unwrap();
    }
    for sources in [&["a", "b"][..], &["b", "a"], &["b", "a", "b"]] {
        let args: Vec<&str> = ["s"].iter().chain(sources).copied().collect();
        let first = repo.create_json(root, &args);
        assert!(first["archive"]["stats"]["files_read"].as_u64().unwrap() <= 6);
        let again = repo.create_json(root, &args);
        let s = &again["archive"]["stats"];
        assert_eq!(s["files_read"], 0, "sources {sources:?}: {s}");
        assert_eq!(s["files_unchanged"], 6);
    }
}

#[test]
fn exclusions() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    for d in [
        "keep",
        "skipdir",
        "keep/node_modules/pkg",
        "cache",
        "deep/a/b",
    ] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::write(src.join("keep/a.txt"), b"a").unwrap();
    fs::write(src.join("keep/a.tmp"), b"tmp").unwrap();
    fs::write(src.join("skipdir/x"), b"x").unwrap();
    fs::write(src.join("keep/node_modules/pkg/i.js"), b"js").unwrap();
    fs::write(
        src.join("cache/CACHEDIR.TAG"),
        b"Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    fs::write(src.join("cache/blob"), b"cached").unwrap();
    fs::write(src.join("deep/a/b/c.log"), b"log").unwrap();
    fs::write(src.join("deep/a/b/c.txt"), b"txt").unwrap();
    let patterns = repo.dir.path().join("patterns");
    fs::write(&patterns, "# comment\n\nnode_modules\nsrc/deep/**/*.log\n").unwrap();
    let o = repo.run_in(
        repo.dir.path(),
        &[
            "create",
            "--exclude",
            "*.tmp",
            "--exclude",
            "/src/skipdir",
            "--exclude-from",
            patterns.to_str().unwrap(),
            "--exclude-caches",
            "x",
            "src",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listing = repo.ok(&["list", "x"]);
    let paths: Vec<&str> = listing
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    for want in [
        "src/keep/a.txt",
        "src/cache",
        "src/cache/CACHEDIR.TAG",
        "src/deep/a/b/c.txt",
    ] {
        assert!(paths.contains(&want), "{want} missing from\n{listing}");
    }
    for unwanted in [
        "src/keep/a.tmp",
        "src/skipdir",
        "src/skipdir/x",
        "src/keep/node_modules",
        "src/cache/blob",
        "src/deep/a/b/c.log",
    ] {
        assert!(
            !paths.contains(&unwanted),
            "{unwanted} should be excluded:\n{listing}"
        );
    }
}

/// An unreadable file is reported and skipped; the rest is backed up; exit 1. CI runs as root,
/// who can read anything, so the backup then runs as `nobody` through setpriv.
#[test]
fn unreadable_file_is_a_warning_and_the_rest_is_saved() {
    let base = tempfile::tempdir().unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = base.path().join("src");
    fs::create_dir_all(src.join("locked-dir")).unwrap();
    fs::write(src.join("readable"), b"fine").unwrap();
    fs::write(src.join("secret"), b"no access").unwrap();
    fs::write(src.join("locked-dir/inside"), b"hidden").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(src.join("locked-dir"), fs::Permissions::from_mode(0o000)).unwrap();
    let repo = base.path().join("repo");
    let cache = base.path().join("cache");
    let run = |args: &[&str]| {
        let bin = env!("CARGO_BIN_EXE_cairn");
        let mut cmd = if is_root() {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            std::process::Command::new(bin)
        };
        cmd.args(args)
            .env("CAIRN_REPO", &repo)
            .env("CAIRN_PASSPHRASE", "pw")
            .env("CAIRN_TEST_CHEAP_KDF", "1")
            .env("XDG_CACHE_HOME", &cache)
            .env("HOME", base.path())
            .current_dir(base.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    assert_eq!(run(&["init"]).status.code(), Some(0));
    let o = run(&["create", "u", "src"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("src/secret"), "{err}");
    assert!(err.contains("src/locked-dir"), "{err}");
    let listing = stdout(&run(&["list", "u"]));
    assert!(listing.contains("src/readable"));
    assert!(!listing.contains("src/secret"));
    // The directory itself is kept (its metadata was readable), its contents are not.
    assert!(listing.contains("src/locked-dir"));
    assert!(!listing.contains("inside"));
    fs::set_permissions(src.join("locked-dir"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn repository_error_aborts_with_exit_2_and_commits_nothing() {
    for rule in [
        "name=packs/:enospc",
        "name=index/:eio",
        "name=archives/:enospc",
        "name=packs/:torn",
        "from=12:eio",
    ] {
        let repo = Repo::new();
        let src = repo.dir.path().join("src");
        fs::create_dir_all(&src).unwrap();
        for i in 0..10 {
            fs::write(src.join(format!("f{i}")), random_bytes(i, 200_000)).unwrap();
        }
        let o = repo.run_env(
            &["create", "a", src.to_str().unwrap()],
            &[("CAIRN_FAULT", rule), ("CAIRN_PACK_SIZE", "300000")],
        );
        assert_eq!(o.status.code(), Some(2), "{rule}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
        assert_eq!(repo.archive_count(), 0, "{rule}: an archive was committed");
        // The next create works and restores.
        repo.ok(&["create", "a", src.to_str().unwrap()]);
        let target = repo.dir.path().join("out");
        repo.ok(&["extract", "a", "--target", target.to_str().unwrap()]);
        assert_trees_equal(&src, &target.join(src.strip_prefix("/").unwrap()));
    }
}

#[test]
fn extract_reports_a_damaged_file_and_restores_the_others() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    // Each file in its own pack, so damaging one pack damages one file.
    for i in 0..4 {
        fs::write(src.join(format!("f{i}")), random_bytes(100 + i, 100_000)).unwrap();
    }
    let o = repo.run_in(
        repo.dir.path(),
        &["create", "a", "src"],
        &[("CAIRN_PACK_SIZE", "50000")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Flip a byte in the middle of one file's pack (contents are encrypted: find it by size).
    let mut packs: Vec<_> = walkdir::WalkDir::new(repo.path.join("packs"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().to_path_buf())
        .collect();
    packs.sort();
    let big: Vec<_> = packs
        .iter()
        .filter(|p| fs::metadata(p).unwrap().len() > 90_000)
        .collect();
    assert_eq!(big.len(), 4, "one pack per file");
    let victim = big[0];
    let mut bytes = fs::read(victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(victim, bytes).unwrap();
    let target = repo.dir.path().join("out");
    let o = repo.run(&["extract", "a", "--target", target.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    let damaged: Vec<_> = (0..4)
        .filter(|i| err.contains(&format!("src/f{i}: not restored")))
        .collect();
    assert_eq!(damaged.len(), 1, "{err}");
    for i in 0..4 {
        let p = target.join(format!("src/f{i}"));
        if damaged.contains(&i) {
            assert!(
                !p.exists(),
                "a damaged file must not be left with wrong bytes"
            );
        } else {
            assert_eq!(fs::read(&p).unwrap(), random_bytes(100 + i, 100_000));
        }
    }
}

#[test]
fn list_info_and_diff() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("same"), b"same").unwrap();
    fs::write(src.join("edited"), b"v1").unwrap();
    fs::write(src.join("removed"), b"bye").unwrap();
    fs::write(src.join("chmodded"), b"c").unwrap();
    repo.ok(&[
        "create",
        "--comment",
        "first one",
        "s",
        src.to_str().unwrap(),
    ]);
    fs::write(src.join("edited"), b"v2 longer").unwrap();
    fs::remove_file(src.join("removed")).unwrap();
    fs::write(src.join("new"), b"hi").unwrap();
    fs::set_permissions(src.join("chmodded"), fs::Permissions::from_mode(0o600)).unwrap();
    repo.ok(&["create", "s", src.to_str().unwrap()]);
    repo.ok(&["create", "other", src.to_str().unwrap()]);

    let archives = repo.ok(&["list"]);
    assert_eq!(archives.lines().count(), 3, "{archives}");
    let json: Vec<serde_json::Value> = repo
        .ok(&["list", "--json-lines"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = json[0]["id"].as_str().unwrap().to_string();
    assert_eq!(json[0]["name"], "s");
    assert_eq!(json[0]["comment"], "first one");

    let info = repo.ok(&["info", &format!("aid:{}", &first[..10])]);
    assert!(info.contains("Comment:           first one"), "{info}");
    let v: serde_json::Value = serde_json::from_str(&repo.ok(&["info", "s", "--json"])).unwrap();
    assert_ne!(
        v["id"].as_str().unwrap(),
        first,
        "NAME selects the newest archive of the series"
    );
    assert!(repo.ok(&["info"]).contains("Archives:        3"));

    let diff = repo.ok(&["diff", &format!("aid:{}", &first[..10]), "s"]);
    let rel = |n: &str| {
        src.join(n)
            .strip_prefix("/")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    };
    assert!(
        diff.contains(&format!("M {} [content", rel("edited"))),
        "{diff}"
    );
    assert!(diff.contains(&format!("- {}", rel("removed"))), "{diff}");
    assert!(diff.contains(&format!("+ {}", rel("new"))), "{diff}");
    assert!(
        diff.contains(&format!("U {} [mode", rel("chmodded"))),
        "{diff}"
    );
    assert!(!diff.contains(&rel("same")), "{diff}");

    // Selection errors are clear.
    let o = repo.run(&["extract", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no archive named \"nope\""));
    // A name that is close to one the repository has is suggested.
    let o = repo.run(&["list", "S"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no archive named \"S\" (did you mean \"s\"?)"),
        "{}",
        stderr(&o)
    );
    let o = repo.run(&["info", "aid:"]);
    assert_eq!(o.status.code(), Some(2));
    let o = repo.run(&["create", "aid:x", src.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn partial_extract_of_given_paths() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::create_dir_all(src.join("c")).unwrap();
    fs::write(src.join("a/b/x"), b"x").unwrap();
    fs::write(src.join("c/y"), b"y").unwrap();
    repo.run_in(repo.dir.path(), &["create", "p", "src"], &[]);
    let target = repo.dir.path().join("out");
    repo.ok(&[
        "extract",
        "p",
        "src/a",
        "--target",
        target.to_str().unwrap(),
    ]);
    assert_eq!(fs::read(target.join("src/a/b/x")).unwrap(), b"x");
    assert!(!target.join("src/c").exists());
    let o = repo.run(&[
        "extract",
        "p",
        "src/zzz",
        "--target",
        target.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no item"));
}

#[test]
fn sockets_are_skipped_with_a_note() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("file"), b"f").unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let o = repo.run(&["create", "s", src.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipping socket"));
    assert!(!repo.ok(&["list", "s"]).contains("sock"));
}

/// More files than extract keeps open at once, with one and with several workers, and a
/// single-worker create: the results are identical.
#[test]
fn many_files_round_trip_with_any_thread_count() {
    let repo = Repo::new();
    let src = repo.dir.path().join("many");
    for d in 0..6 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..120 {
            fs::write(
                src.join(format!("d{d}/f{f}")),
                random_bytes(d * 1000 + f, (f as usize % 7) * 1500),
            )
            .unwrap();
        }
    }
    for threads in ["1", "3"] {
        let name = format!("m{threads}");
        let o = repo.run_in(
            repo.dir.path(),
            &["create", "--threads", threads, &name, "many"],
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let target = repo.dir.path().join(format!("out{threads}"));
        repo.ok(&[
            "extract",
            &name,
            "--threads",
            threads,
            "--target",
            target.to_str().unwrap(),
        ]);
        assert_trees_equal(&src, &target.join("many"));
    }
    // The two archives' metadata are the same bytes: the item stream does not depend on timing.
    let a: serde_json::Value = serde_json::from_str(&repo.ok(&["info", "m1", "--json"])).unwrap();
    let b: serde_json::Value = serde_json::from_str(&repo.ok(&["info", "m3", "--json"])).unwrap();
    assert_eq!(
        b["stats"]["deduplicated_size"], 0,
        "second archive added nothing: {b}"
    );
    assert_eq!(a["stats"]["files"], 720);
}

/// A symlink given as a root beside the directory that holds it is stored once: the
/// directory's walk stores it (so the paths given are merged), and the walk skips nothing
/// else.
#[test]
fn a_symlink_given_beside_its_directory_is_stored_once() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"x").unwrap();
    std::os::unix::fs::symlink("d", src.join("ln")).unwrap();
    repo.create_json(repo.dir.path(), &["a", "src", "src/ln"]);
    assert_eq!(
        repo.archive_paths("a"),
        ["src", "src/d", "src/d/f", "src/ln"]
    );
}

/// `--one-file-system` keeps the mount point but not what is mounted there (needs root to
/// mount a tmpfs; skipped with a message otherwise).
#[test]
fn one_file_system_stops_at_mount_points() {
    if !is_root() {
        eprintln!("skipped: mounting a file system needs root");
        return;
    }
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(src.join("mnt")).unwrap();
    fs::write(src.join("here"), b"on the source file system").unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(src.join("mnt"))
        .status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    fs::write(src.join("mnt/elsewhere"), b"on another file system").unwrap();
    let both = repo.run_in(repo.dir.path(), &["create", "all", "src"], &[]);
    let one = repo.run_in(repo.dir.path(), &["create", "-x", "one", "src"], &[]);
    // The mount point given as a root of its own as well: stored once, with its contents.
    let two = repo.run_in(
        repo.dir.path(),
        &["create", "-x", "two", "src", "src/mnt"],
        &[],
    );
    let _ = std::process::Command::new("umount")
        .arg(src.join("mnt"))
        .status();
    assert_eq!(both.status.code(), Some(0), "{}", stderr(&both));
    assert_eq!(one.status.code(), Some(0), "{}", stderr(&one));
    assert!(repo.ok(&["list", "all"]).contains("src/mnt/elsewhere"));
    let listing = repo.ok(&["list", "one"]);
    assert!(listing.contains("src/here"), "{listing}");
    assert!(!listing.contains("src/mnt/elsewhere"), "{listing}");
    assert_eq!(two.status.code(), Some(0), "{}", stderr(&two));
    let paths = repo.archive_paths("two");
    for p in ["src", "src/here", "src/mnt", "src/mnt/elsewhere"] {
        assert_eq!(
            paths.iter().filter(|x| *x == p).count(),
            1,
            "{p} in {paths:?}"
        );
    }
}

/// The opt-in deeper pipeline (`CAIRN_PACK_INFLIGHT`) writes the same repository a user can
/// verify and restore, aborts cleanly on a store error, and a bad value is refused clearly.
#[test]
fn deeper_pipeline_round_trips_and_fails_cleanly() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..12 {
        fs::write(src.join(format!("f{i}")), random_bytes(i + 40, 150_000)).unwrap();
    }
    let env = [("CAIRN_PACK_INFLIGHT", "4"), ("CAIRN_PACK_SIZE", "200000")];
    let o = repo.run_env(
        &["create", "a", src.to_str().unwrap()],
        &[env[0], env[1], ("CAIRN_FAULT", "name=packs/:enospc")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    assert_eq!(repo.archive_count(), 0);
    let o = repo.run_env(&["create", "a", src.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(repo.archive_count(), 1);
    repo.ok(&["check", "--verify-data"]);
    let target = repo.dir.path().join("out");
    repo.ok(&["extract", "a", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&src, &target.join(src.strip_prefix("/").unwrap()));
    for bad in ["0", "17", "many"] {
        let o = repo.run_env(
            &["create", "b", src.to_str().unwrap()],
            &[("CAIRN_PACK_INFLIGHT", bad)],
        );
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("CAIRN_PACK_INFLIGHT"), "{}", stderr(&o));
    }
}

/// The seed's contract, back as the default (issue 45): a local repository keeps one pack in
/// flight, so that the trace of a backup reads exactly `<HS><HS>…`, one clean marker per pack
/// (the two stores in flight of the day before read `<HS<HS>><HS<HS><HS><HS>>…`: 8 clean
/// markers for 13 packs). `CAIRN_PACK_INFLIGHT=2:2` (two stores within two buffers) still
/// overlaps, and round-trips; a bad number of buffers is refused.
#[test]
fn a_local_backup_keeps_one_pack_in_flight() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..10 {
        fs::write(src.join(format!("f{i}")), random_bytes(i + 70, 400_000)).unwrap();
    }
    let trace = |env: &[(&str, &str)], name: &str| {
        let mut all = vec![("CAIRN_PACK_TRACE", "yes"), ("CAIRN_PACK_SIZE", "300000")];
        all.extend_from_slice(env);
        let o = repo.run_env(
            &["create", "--no-progress", name, src.to_str().unwrap()],
            &all,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stderr(&o)
            .chars()
            .filter(|c| "<HS>".contains(*c))
            .collect::<String>()
    };
    let t = trace(&[], "a");
    let packs = t.matches('<').count();
    assert!(packs >= 10, "{t}");
    assert_eq!(t, "<HS>".repeat(packs), "the trace of the default");
    // The overlap behind the knob: two in flight, and a repository that verifies.
    for i in 0..10 {
        fs::write(src.join(format!("f{i}")), random_bytes(i + 90, 400_000)).unwrap();
    }
    let t = trace(&[("CAIRN_PACK_INFLIGHT", "2:2")], "b");
    assert!(t.matches('<').count() >= 10, "{t}");
    repo.ok(&["check", "--verify-data"]);
    for bad in ["2:1", "2:4", "1:x", ":2"] {
        let o = repo.run_env(
            &["create", "c", src.to_str().unwrap()],
            &[("CAIRN_PACK_INFLIGHT", bad)],
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("CAIRN_PACK_INFLIGHT"), "{}", stderr(&o));
    }
}

/// `CAIRN_PACK_TRACE=time`: every pack's store events, and the caller's side (writer made,
/// waits for the store in flight, barriers), each with a time that never goes back.
#[test]
fn the_timed_pack_trace_shows_the_caller_waiting_and_the_barriers() {
    let repo = Repo::new();
    let src = repo.dir.path().join("data");
    fs::create_dir_all(&src).unwrap();
    for i in 0..8 {
        fs::write(src.join(format!("f{i}")), random_bytes(40 + i, 1_500_000)).unwrap();
    }
    // Packs of about one chunk, each store 30 ms: filling is faster, so the caller waits.
    let o = repo.run_env(
        &["create", "--no-progress", "t", src.to_str().unwrap()],
        &[
            ("CAIRN_PACK_TRACE", "time"),
            ("CAIRN_PACK_SIZE", "500000"),
            ("CAIRN_PACK_INFLIGHT", "1"),
            ("CAIRN_STORE_LATENCY", "30000"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let events: Vec<(char, f64)> = err
        .split_whitespace()
        .filter_map(|t| {
            let c = t.chars().next()?;
            let secs = t[c.len_utf8()..].parse::<f64>().ok()?;
            "BWwFf<HS>".contains(c).then_some((c, secs))
        })
        .collect();
    let kinds: String = events.iter().map(|e| e.0).collect();
    assert!(kinds.starts_with('B'), "{kinds}");
    assert!(
        events.windows(2).all(|w| w[0].1 <= w[1].1),
        "times go back: {err}"
    );
    let count = |c| kinds.chars().filter(|&k| k == c).count();
    assert!(count('<') >= 5, "{kinds}");
    assert_eq!(count('<'), count('>'), "{kinds}");
    assert!(count('W') >= 1, "the caller never waited: {kinds}");
    // Waits and barriers open and close in turn, and the last barrier ends after the last store.
    for (open, close) in [('W', 'w'), ('F', 'f')] {
        let seq: String = kinds.chars().filter(|&k| k == open || k == close).collect();
        assert_eq!(seq, format!("{open}{close}").repeat(count(open)), "{kinds}");
    }
    assert!(kinds.rfind('f') > kinds.rfind('>'), "{kinds}");
}

/// Issue 48: --limit-upload and --limit-download hold the bytes sent to and read from the
/// repository to their rate (here 256 KiB/s for about 1 MiB: four seconds at least).
#[test]
fn uploads_and_downloads_are_held_to_their_limits() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("noise"), random_bytes(48, 1 << 20)).unwrap();
    let t = std::time::Instant::now();
    let o = repo.run(&[
        "--limit-upload",
        "256",
        "create",
        "a",
        src.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let up = t.elapsed();
    assert!(up >= std::time::Duration::from_millis(3500), "{up:?}");
    let target = repo.dir.path().join("t");
    let t = std::time::Instant::now();
    let o = repo.run(&[
        "--limit-download",
        "256",
        "extract",
        "a",
        "--target",
        target.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let down = t.elapsed();
    assert!(down >= std::time::Duration::from_millis(3500), "{down:?}");
    let o = repo.run(&["--limit-upload", "0", "list"]);
    assert_eq!(o.status.code(), Some(2));
}
