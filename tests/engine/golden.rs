//! The golden repositories, one per cipher suite: `tests/golden/repo` (AES-256-GCM, HMAC-SHA256)
//! and `tests/golden/repo-chacha20poly1305-blake3`, made by `scripts/make-golden.sh` with the
//! format this cairn writes (format 3), checked in. Every build must list, check
//! (`--verify-data`) and restore it exactly; a format change either keeps reading it or
//! refuses it by name, with a test that says so (`docs/design.md`, "Compatibility").
//!
//! What each holds: archives `first` (lz4), `second` (zstd) and `third` (lz4, the default then),
//! made from the trees [`golden_source`] builds for states 1, 2 and 3, with padding on (the
//! default); a hardlinked pair and a file with a user xattr; and an archive `doomed`, deleted
//! and compacted away before the repository was frozen.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{assert_trees_equal, cairn_command, stderr, stdout};

const PASSPHRASE: &str = "golden passphrase";
/// The archives and the source state each was made from.
const ARCHIVES: [(&str, u32); 3] = [("first", 1), ("second", 2), ("third", 3)];
/// 2026-01-02 03:04:05 UTC, and a nanosecond part, for every file and directory.
const MTIME: u64 = 1_767_322_245;

/// Each golden repository: its `--encryption` and where it is.
fn golden_repos() -> [(&'static str, PathBuf); 2] {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    [
        ("repokey-aes256gcm", dir.join("repo")),
        (
            "repokey-chacha20poly1305-blake3",
            dir.join("repo-chacha20poly1305-blake3"),
        ),
    ]
}

fn set_mtime(path: &Path, offset: u64) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(MTIME + offset, 123_456_789);
    fs::File::open(path).unwrap().set_modified(t).unwrap();
}

/// Text of `len` bytes that compresses, from `seed`.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let words = [
        "stone", "cairn", "path", "ridge", "mist", "moss", "peak", "trail",
    ];
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(words[rng.below(words.len() as u64) as usize].as_bytes());
        out.push(if rng.below(9) == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// The source tree of `state` (1, 2 or 3; 9 is the doomed archive's) under `root`, every byte,
/// mode and time fixed.
fn golden_source(root: &Path, state: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = fs::remove_dir_all(root);
    fs::create_dir_all(root.join("docs/notes")).unwrap();
    let mut files: Vec<(&str, Vec<u8>, u32)> = vec![
        ("docs/guide.txt", text(1, 600_000), 0o644),
        ("docs/notes/a.txt", text(2, 3_000), 0o600),
        ("docs/notes/empty", Vec::new(), 0o644),
        ("run.sh", b"#!/bin/sh\necho golden\n".to_vec(), 0o755),
        ("tagged.txt", text(3, 700), 0o644),
    ];
    if state >= 2 {
        files[1].1 = text(20, 3_500);
        files.push(("docs/notes/b.txt", text(21, 90_000), 0o644));
    }
    if state == 3 {
        files.retain(|f| f.0 != "run.sh");
    }
    if state == 9 {
        files.push(("doomed.bin", common::random_bytes(9, 300_000), 0o644));
    }
    for (i, (name, data, mode)) in files.iter().enumerate() {
        let p = root.join(name);
        fs::write(&p, data).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
        set_mtime(&p, i as u64);
    }
    fs::hard_link(root.join("tagged.txt"), root.join("docs/tagged-link.txt")).unwrap();
    xattr::set(root.join("tagged.txt"), "user.golden", b"kept").unwrap();
    for (i, dir) in ["docs/notes", "docs", ""].iter().enumerate() {
        set_mtime(&root.join(dir), 100 + i as u64);
    }
}

/// Runs cairn on `repo` in the directory that holds it (sources are named relative to it, so
/// that the archives hold `golden-src/…` wherever they were made).
fn ok(repo: &Path, cache: &Path, args: &[&str]) -> String {
    let o = cairn_command(
        args,
        &[
            ("CAIRN_REPO", repo.to_str().unwrap()),
            ("CAIRN_PASSPHRASE", PASSPHRASE),
            ("XDG_CACHE_HOME", cache.to_str().unwrap()),
        ],
    )
    .current_dir(repo.parent().unwrap())
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "cairn {args:?}: {}", stderr(&o));
    stdout(&o)
}

fn copy_tree(from: &Path, to: &Path) {
    for f in common::files_under(from) {
        let dest = to.join(f.strip_prefix(from).unwrap());
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::copy(&f, &dest).unwrap();
    }
}

#[test]
fn the_golden_repositories_list_check_and_restore_exactly() {
    for (encryption, golden) in golden_repos() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, cache) = (tmp.path().join("repo"), tmp.path().join("cache"));
        // What a clean clone holds: the checked-in files, no empty directories.
        copy_tree(&golden, &repo);
        let listed = ok(&repo, &cache, &["list", "--json-lines"]);
        let mut names: Vec<String> = listed
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["name"].as_str().unwrap().to_string()
            })
            .collect();
        names.sort();
        assert_eq!(names, ["first", "second", "third"], "{listed}");
        let out = ok(&repo, &cache, &["check", "--verify-data"]);
        assert!(out.contains("0 errors, 0 warnings"), "{out}");
        let info = ok(&repo, &cache, &["info"]);
        assert!(info.contains("Format version:  3"), "{info}");
        assert!(
            info.contains(&format!("Encryption:      {encryption}")),
            "{info}"
        );
        for (archive, state) in ARCHIVES {
            let expected = tmp.path().join(format!("expected-{state}"));
            golden_source(&expected, state);
            let target = tmp.path().join(format!("restored-{archive}"));
            fs::create_dir_all(&target).unwrap();
            ok(
                &repo,
                &cache,
                &["extract", archive, "--target", target.to_str().unwrap()],
            );
            assert_trees_equal(&expected, &target.join("golden-src"));
        }
    }
}

/// Makes the golden repositories that are missing (run by `scripts/make-golden.sh`; not part
/// of the suite).
#[test]
#[ignore]
fn make_golden_repository() {
    for (encryption, out) in golden_repos() {
        if out.exists() {
            eprintln!("kept {}", out.display());
        } else {
            make_golden(encryption, &out);
        }
    }
}

fn make_golden(encryption: &str, out: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, cache) = (tmp.path().join("repo"), tmp.path().join("cache"));
    let src = tmp.path().join("golden-src");
    let s = "golden-src";
    ok(&repo, &cache, &["init", "--encryption", encryption]);
    golden_source(&src, 1);
    ok(
        &repo,
        &cache,
        &["create", "--compression", "lz4", "first", s],
    );
    golden_source(&src, 2);
    ok(
        &repo,
        &cache,
        &["create", "--compression", "zstd", "second", s],
    );
    golden_source(&src, 9);
    ok(&repo, &cache, &["create", "doomed", s]);
    golden_source(&src, 3);
    // The default compression when the first golden repository was made.
    ok(
        &repo,
        &cache,
        &["create", "--compression", "lz4", "third", s],
    );
    ok(&repo, &cache, &["delete", "doomed"]);
    ok(&repo, &cache, &["compact"]);
    // Not `reserve`: 1 MiB of random bytes that only a full disk needs (and which any command
    // that frees space writes again).
    fs::remove_file(repo.join("reserve")).unwrap();
    copy_tree(&repo, out);
    eprintln!("made {}", out.display());
}
