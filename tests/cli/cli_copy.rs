//! `cairn copy --from-repo` and `init --copy-chunker-params-from`: archives moved between
//! repositories with their own keys. The real binary on real directories.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

const SOURCE_PASS: &str = "test passphrase";

/// A destination repository with its own passphrase (and so its own keys), reading the
/// source's passphrase from CAIRN_FROM_PASSPHRASE.
fn destination(init_args: &[&str]) -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repo");
    let env: Vec<(String, String)> = [
        ("CAIRN_REPO", path.to_str().unwrap()),
        ("CAIRN_PASSPHRASE", "another passphrase"),
        ("CAIRN_FROM_PASSPHRASE", SOURCE_PASS),
        ("XDG_CACHE_HOME", dir.path().join("cache").to_str().unwrap()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let repo = Repo { dir, path, env };
    let o = repo.run(&[&["init"], init_args].concat());
    assert_eq!(o.status.code(), Some(0), "init: {}", stderr(&o));
    repo
}

fn tree(root: &Path, seed: u64) -> PathBuf {
    let src = root.join("data");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("big.bin"), random_bytes(seed, 3 << 20)).unwrap();
    fs::write(src.join("sub/small.txt"), format!("small {seed}\n")).unwrap();
    fs::write(src.join("sub/same.txt"), b"the same in every state\n").unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("sub/small.txt", src.join("link")).unwrap();
    fs::hard_link(src.join("sub/same.txt"), src.join("hard")).unwrap();
    src
}

fn archives(repo: &Repo) -> Vec<serde_json::Value> {
    stdout(&repo.run(&["list", "--json-lines"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn extract(repo: &Repo, archive: &str, to: &Path) -> PathBuf {
    let o = repo.run_in(
        repo.dir.path(),
        &["extract", archive, "--target", to.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    to.to_path_buf()
}

#[test]
fn archives_copy_between_the_cipher_suites_both_ways() {
    let [aes, chacha] = cairn::crypto::Suite::ALL.map(|s| format!("repokey-{}", s.as_str()));
    for (from, to) in [(&aes, &chacha), (&chacha, &aes)] {
        let src = Repo::with_env(&[("CAIRN_ENCRYPTION", from)]);
        let base = src.dir.path();
        tree(base, 7);
        let o = src.run_in(base, &["create", "home", "data"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let dst = destination(&["--encryption", to]);
        let config = fs::read_to_string(dst.path.join("config")).unwrap();
        assert!(config.contains(&format!("\"{to}\"")), "{config}");
        let o = dst.run(&["copy", "--from-repo", src.path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{from} → {to}: {}", stderr(&o));
        let o = dst.run(&["check", "--verify-data"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).contains("0 errors, 0 warnings"),
            "{}",
            stdout(&o)
        );
        let restored = extract(&dst, "home", &dst.dir.path().join("restored"));
        assert_trees_equal(&base.join("data"), &restored.join("data"));
        // Run again, it finds the archive there already.
        let o = dst.run(&["copy", "--from-repo", src.path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stdout(&o).contains("0 archives copied, 1 already there"),
            "{}",
            stdout(&o)
        );
    }
}

#[test]
fn archives_copy_with_their_metadata_and_are_not_copied_twice() {
    let src = Repo::new();
    let base = src.dir.path();
    tree(base, 1);
    src.run_in(base, &["create", "--comment", "first", "home", "data"], &[]);
    fs::write(base.join("data/big.bin"), random_bytes(2, 3 << 20)).unwrap();
    let o = src.run_in(
        base,
        &["create", "--compression", "zstd", "home", "data"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = src.run_in(base, &["create", "etc", "data/sub"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let dst = destination(&[]);
    let from = src.path.to_str().unwrap();
    let o = dst.run(&["copy", "--from-repo", from]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("3 archives copied, 0 already there"),
        "{}",
        stdout(&o)
    );
    // The note about chunking differently is said (this destination was not made for copying).
    assert!(
        stderr(&o).contains("chunk files differently"),
        "{}",
        stderr(&o)
    );

    // Same names, times, hosts and comments; the copies say where they came from.
    let (a, b) = (archives(&src), archives(&dst));
    assert_eq!(a.len(), 3);
    assert_eq!(b.len(), 3);
    for (x, y) in a.iter().zip(&b) {
        for field in ["name", "time", "hostname", "username", "comment"] {
            assert_eq!(x[field], y[field], "{field}");
        }
        assert_ne!(x["id"], y["id"]);
        assert_eq!(y["copied_from"], x["id"]);
        assert!(x["copied_from"].is_null());
    }
    // Every archive restores the same from both.
    for (i, x) in a.iter().enumerate() {
        let aid = |v: &serde_json::Value| format!("aid:{}", v["id"].as_str().unwrap());
        let one = extract(&src, &aid(x), &base.join(format!("out-src-{i}")));
        let two = extract(&dst, &aid(&b[i]), &base.join(format!("out-dst-{i}")));
        let root = if x["name"] == "etc" {
            "data/sub"
        } else {
            "data"
        };
        assert_trees_equal(&one.join(root), &two.join(root));
    }
    dst.ok(&["check", "--verify-data"]);

    // Again: nothing to do, nothing written.
    let packs = dst.pack_count();
    let o = dst.run(&["copy", "--from-repo", from]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("0 archives copied, 3 already there"),
        "{}",
        stdout(&o)
    );
    assert_eq!(dst.pack_count(), packs);
    assert_eq!(dst.archive_count(), 3);

    // And back: the originals are there already.
    let o = src.run_env(
        &["copy", "--from-repo", dst.path.to_str().unwrap()],
        &[("CAIRN_FROM_PASSPHRASE", "another passphrase")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("0 archives copied, 3 already there"),
        "{}",
        stdout(&o)
    );
    assert_eq!(src.archive_count(), 3);
}

#[test]
fn a_selection_copies_only_what_it_names() {
    let src = Repo::new();
    let base = src.dir.path();
    tree(base, 3);
    src.run_in(base, &["create", "home", "data"], &[]);
    src.run_in(base, &["create", "home", "data"], &[]);
    src.run_in(base, &["create", "etc", "data/sub"], &[]);
    let etc = archives(&src)[2]["id"].as_str().unwrap().to_string();
    let dst = destination(&[]);
    let from = src.path.to_str().unwrap();
    let o = dst.run(&["copy", "--from-repo", from, "home"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        dst.archive_count(),
        2,
        "NAME copies every archive of that name"
    );
    let o = dst.run(&["copy", "--from-repo", from, &format!("aid:{}", &etc[..10])]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(dst.archive_count(), 3);

    // Bad input: clear errors, nothing written.
    let o = dst.run(&["copy", "--from-repo", from, "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no archive named \"nosuch\""),
        "{}",
        stderr(&o)
    );
    let o = dst.run_env(
        &["copy", "--from-repo", from],
        &[("CAIRN_FROM_PASSPHRASE", "wrong")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("passphrase"), "{}", stderr(&o));
    let o = dst.run(&["copy", "--from-repo", dst.path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = dst.run_env(
        &["copy", "--from-repo", from],
        &[("CAIRN_FROM_PASSPHRASE", "")],
    );
    assert_eq!(o.status.code(), Some(2));
    let o = common::cairn(
        &[
            "-r",
            dst.path.to_str().unwrap(),
            "copy",
            "--from-repo",
            from,
        ],
        &[("CAIRN_PASSPHRASE", "another passphrase")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("CAIRN_FROM_PASSPHRASE"),
        "{}",
        stderr(&o)
    );
    assert_eq!(dst.archive_count(), 3);
}

#[test]
fn a_destination_made_for_copying_deduplicates_with_its_source() {
    let src = Repo::new();
    let base = src.dir.path();
    tree(base, 4);
    src.run_in(base, &["create", "home", "data"], &[]);
    let from = src.path.to_str().unwrap();
    let added = |dst: &Repo| {
        let o = dst.run(&["copy", "--from-repo", from]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v = dst.create_json(base, &["home", "data"]);
        v["archive"]["stats"]["deduplicated_size"].as_u64().unwrap()
    };
    let alike = destination(&["--copy-chunker-params-from", from]);
    let other = destination(&[]);
    let (alike, other) = (added(&alike), added(&other));
    // The same files backed up into each: only metadata is new where the chunking is alike.
    assert!(alike < 100_000, "{alike} bytes added");
    assert!(other > 3 << 20, "{other} bytes added");

    // Without the source's passphrase, or with an unencrypted destination: refused.
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    let o = common::cairn(
        &[
            "-r",
            new.to_str().unwrap(),
            "init",
            "--copy-chunker-params-from",
            from,
        ],
        &[
            ("CAIRN_PASSPHRASE", "p"),
            ("CAIRN_FROM_PASSPHRASE", "wrong"),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!new.join("config").exists());
    let o = common::cairn(
        &[
            "-r",
            new.to_str().unwrap(),
            "init",
            "-e",
            "none",
            "--copy-chunker-params-from",
            from,
        ],
        &[("CAIRN_FROM_PASSPHRASE", SOURCE_PASS)],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("encrypted"), "{}", stderr(&o));
    assert!(!new.join("config").exists());
}

/// A source of several archives whose copy takes a while behind a slow store.
fn big_source() -> Repo {
    let src = Repo::new();
    let base = src.dir.path();
    let data = base.join("data");
    fs::create_dir_all(&data).unwrap();
    for a in 0..3u64 {
        for i in 0..8u64 {
            fs::write(
                data.join(format!("f{i}")),
                random_bytes(a * 100 + i, 500_000),
            )
            .unwrap();
        }
        let o = src.run_in(base, &["create", &format!("a{a}"), "data"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    src
}

#[test]
fn an_interrupted_copy_commits_nothing_half_and_the_next_one_finishes_it() {
    let src = big_source();
    let dst = destination(&[]);
    let from = src.path.to_str().unwrap();
    let child = dst
        .command(
            dst.dir.path(),
            &["copy", "--from-repo", from],
            &[
                ("CAIRN_STORE_LATENCY", "100000"),
                ("CAIRN_PACK_SIZE", "1000000"),
                // One pack at a time, so that the copy is still running when interrupted.
                ("CAIRN_PACK_INFLIGHT", "1"),
            ],
        )
        .spawn()
        .unwrap();
    let start = Instant::now();
    while dst.pack_count() < 3 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(dst.archive_count() < 3, "the copy was not interrupted");
    let packs = dst.pack_count();
    // What was stored is indexed; every committed archive is whole.
    dst.ok(&["check", "--verify-data"]);

    let o = dst.run(&["copy", "--from-repo", from]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(dst.archive_count(), 3);
    dst.ok(&["check", "--verify-data"]);
    // The second run did not store again what the first one had stored.
    let total: usize = 3 * 8 * 500_000 / 1_000_000;
    assert!(
        dst.pack_count() - packs < total,
        "{} packs before, {} after",
        packs,
        dst.pack_count()
    );
    for a in archives(&src) {
        let name = a["name"].as_str().unwrap();
        let one = extract(&src, name, &src.dir.path().join(format!("x-{name}")));
        let two = extract(&dst, name, &dst.dir.path().join(format!("x-{name}")));
        assert_trees_equal(&one.join("data"), &two.join("data"));
    }
}

#[test]
fn a_full_destination_stops_the_copy_and_commits_nothing() {
    let src = big_source();
    let dst = destination(&[]);
    let from = src.path.to_str().unwrap();
    let o = dst.run_env(
        &["copy", "--from-repo", from],
        &[("CAIRN_FAULT", "name=packs/:put:enospc")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).to_lowercase().contains("no space"),
        "{}",
        stderr(&o)
    );
    assert_eq!(dst.archive_count(), 0);
    dst.ok(&["check"]);
    let o = dst.run(&["copy", "--from-repo", from]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(dst.archive_count(), 3);
    dst.ok(&["check", "--verify-data"]);
}

#[test]
fn an_unreadable_source_archive_is_left_out_with_a_warning() {
    let src = Repo::new();
    let base = src.dir.path();
    tree(base, 5);
    src.run_in(base, &["create", "one", "data"], &[]);
    src.run_in(base, &["create", "two", "data/sub"], &[]);
    let two = archives(&src)[1]["id"].as_str().unwrap().to_string();
    let object = src.path.join("archives").join(&two);
    let mut bytes = fs::read(&object).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&object, bytes).unwrap();
    let dst = destination(&[]);
    let from = src.path.to_str().unwrap();
    let o = dst.run(&["copy", "--from-repo", from]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be read"), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 archive copied"), "{}", stdout(&o));
    assert_eq!(dst.archive_count(), 1);
    // Named, it is an error.
    let o = dst.run(&["copy", "--from-repo", from, "two"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
