//! Reliability: full disks.
//!
//! 4. ENOSPC injected at every store operation of `create`: the command exits 2 and commits
//!    nothing that references unstored chunks; afterwards `check` is clean and the next
//!    create succeeds. The same on a real file system that fills up (a tmpfs; needs root,
//!    skipped with a message otherwise). And extract into a full file system: exit ≠ 0,
//!    every incomplete file reported and removed, the others exact.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{assert_trees_equal, copy_tree, op_log, random_bytes, stderr, stdout, Repo};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn tree(root: &Path, files: u64, size: usize) {
    fs::create_dir_all(root).unwrap();
    for i in 0..files {
        fs::write(root.join(format!("f{i:02}")), random_bytes(700 + i, size)).unwrap();
    }
}

#[test]
fn enospc_at_every_store_operation_of_create() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "100000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"), 4, 60_000);
    assert_eq!(
        repo.run_in(&base, &["create", "a", "a"], &[]).status.code(),
        Some(0)
    );
    tree(&base.join("b"), 6, 70_000);
    let pristine = base.join("pristine");
    copy_tree(&repo.path, &pristine);
    let _ = fs::remove_dir_all(base.join("cache"));
    let log = base.join("ops.log");
    let o = repo.run_in(
        &base,
        &["create", "b", "b"],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let total = op_log(&log).len();
    let (mut failed, mut tolerated) = (0, 0);
    for i in 1..=total {
        // Every run starts as the reference run did: same repository, no files cache.
        let _ = fs::remove_dir_all(base.join("cache"));
        fs::remove_dir_all(&repo.path).unwrap();
        copy_tree(&pristine, &repo.path);
        let rule = format!("op={i}:enospc");
        let run_log = base.join(format!("ops-{i}.log"));
        let (o, ops) = repo.run_with_fault(&base, &["create", "b", "b"], &rule, &run_log);
        assert!(!stderr(&o).contains("panicked"), "op {i}: {}", stderr(&o));
        let archives = repo.ok(&["list"]).lines().count();
        match o.status.code() {
            Some(2) => {
                failed += 1;
                assert!(
                    stderr(&o).contains("no space left"),
                    "op {i} ({:?}): {}",
                    ops.get(i - 1),
                    stderr(&o)
                );
                assert_eq!(archives, 1, "op {i}: a failed create committed an archive");
            }
            Some(0) => {
                // Only a lock operation may fail without failing the command: its release, or
                // its sealing (retried at the next refresh; the lock is held meanwhile).
                // (A run that made fewer than i operations had no fault injected.)
                assert!(
                    ops.get(i - 1).is_none_or(|op| op.contains(" locks/")),
                    "op {i} ({:?}): ENOSPC went unnoticed",
                    ops.get(i - 1)
                );
                tolerated += 1;
            }
            other => panic!("op {i}: exit {other:?}: {}", stderr(&o)),
        }
        let c = repo.run(&["check"]);
        assert!(
            matches!(c.status.code(), Some(0) | Some(1)),
            "op {i}: {}",
            stdout(&c)
        );
        assert_eq!(
            repo.run_in(&base, &["create", "b", "b"], &[]).status.code(),
            Some(0),
            "op {i}"
        );
        let target = base.join(format!("x{i}"));
        repo.ok(&["extract", "b", "--target", target.to_str().unwrap()]);
        assert_trees_equal(&base.join("b"), &target.join("b"));
        fs::remove_dir_all(&target).unwrap();
    }
    eprintln!(
        "disk full (injected): {total} store operations; ENOSPC failed the create {failed} times (exit 2, nothing committed), {tolerated} times it hit a lock operation (harmless); check clean and the next create succeeded every time"
    );
}

/// cairn on the repository at `repo_url` with packs of `pack_size`, its cache in `dir`, run in
/// `cwd` (the environment's own CAIRN_* left out, but for the ssh command).
fn run_at(
    dir: &Path,
    repo_url: &str,
    pack_size: &str,
    cwd: &Path,
    args: &[&str],
) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") && k != "CAIRN_RSH" {
            c.env_remove(k);
        }
    }
    c.env("CAIRN_REPO", repo_url)
        .env("CAIRN_PASSPHRASE", "pw")
        .env("CAIRN_TEST_CHEAP_KDF", "1")
        .env("CAIRN_PACK_SIZE", pack_size)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .current_dir(cwd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Mounts a tmpfs of `size` at `dir`; false when that is not possible here.
fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    fs::create_dir_all(dir).unwrap();
    is_root()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success())
}

struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn a_real_file_system_filling_up_during_create() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    if !mount_tmpfs(&mnt, "6m") {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let _guard = Unmount(&mnt);
    let src = dir.path().join("src");
    tree(&src, 16, 1_000_000);
    let repo_path = mnt.join("repo");
    let repo_url = repo_path.to_str().unwrap();
    let run = |args: &[&str]| run_at(dir.path(), repo_url, "1000000", dir.path(), args);
    assert_eq!(run(&["init"]).status.code(), Some(0));
    let o = run(&["create", "s", src.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "16 MB of random data cannot fit in 6 MB: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("no space left"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    assert_eq!(
        stdout(&run(&["list"])).lines().count(),
        0,
        "nothing committed"
    );
    // Free space, then everything works.
    assert!(Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(&mnt)
        .status()
        .unwrap()
        .success());
    let c = run(&["check"]);
    assert!(
        matches!(c.status.code(), Some(0) | Some(1)),
        "{}",
        stdout(&c)
    );
    assert_eq!(
        run(&["create", "s", src.to_str().unwrap()]).status.code(),
        Some(0)
    );
    assert_eq!(run(&["check", "--verify-data"]).status.code(), Some(0));
    let target = dir.path().join("out");
    assert_eq!(
        run(&["extract", "s", "--target", target.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_trees_equal(&src, &target.join(src.strip_prefix("/").unwrap()));
    eprintln!("disk full (tmpfs 6 MB): create exit 2, nothing committed; after growing it to 64 MB check passed and the next create succeeded");
}

#[test]
fn extract_into_a_full_file_system() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    tree(&src, 8, 1_000_000);
    repo.ok(&["create", "e", src.to_str().unwrap()]);
    let mnt = repo.dir.path().join("full");
    if !mount_tmpfs(&mnt, "3m") {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let _guard = Unmount(&mnt);
    let o = repo.run(&["extract", "e", "--target", mnt.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"));
    let restored = mnt.join(src.strip_prefix("/").unwrap());
    let (mut ok, mut missing) = (0, 0);
    for i in 0..8 {
        let name = format!("f{i:02}");
        let p = restored.join(&name);
        if p.exists() {
            ok += 1;
            assert_eq!(
                fs::read(&p).unwrap(),
                random_bytes(700 + i, 1_000_000),
                "{name}: wrong bytes"
            );
        } else {
            missing += 1;
        }
    }
    assert!(missing > 0 && ok > 0, "{err}");
    // One line names the first file that did not fit and the cause; the summary counts them
    // all (no incomplete file is left behind: the others are restored exactly).
    assert_eq!(err.matches(": not restored:").count(), 1, "{err}");
    assert!(err.contains("the target is full ("), "{err}");
    let summary = if missing == 1 {
        "): 1 file not restored".to_string()
    } else {
        format!("): {missing} files not restored")
    };
    assert!(err.contains(&summary), "{summary}: {err}");
    let reported = missing;
    eprintln!("extract into a full 3 MB tmpfs: exit 2, {reported} incomplete files reported and removed, {ok} restored exactly");
}

/// Fills the file system holding `dir` to the last byte with a file in `dir`.
fn fill_up(dir: &Path) {
    use std::io::Write;
    let mut f = fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0x5au8; 64 << 10];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("{e}"),
        }
    }
    // The last partial block, a byte at a time.
    while f.write(&[0x5a]).is_ok_and(|n| n == 1) {}
    let _ = f.sync_all();
}

/// A backup filled the disk (and failed: exit 2, nothing committed); then the disk is made
/// 100% full. `delete` and `compact` must still free the space, with no extra flags and
/// losing nothing: the repository's reserve gives them room for their lock and records, and
/// compact deletes the packs it no longer needs before it writes anything big. `repo_url`
/// is the repository on the tmpfs at `mnt` (a local path, or the same path over SFTP).
fn full_disk_is_freed(dir: &Path, mnt: &Path, repo_url: &str) {
    let src = dir.join("src");
    tree(&src.join("keep"), 3, 300_000);
    tree(&src.join("old"), 4, 300_000);
    tree(&src.join("big"), 30, 1_000_000);
    let run = |args: &[&str]| run_at(dir, repo_url, "500000", &src, args);
    assert_eq!(run(&["init"]).status.code(), Some(0));
    for name in ["keep", "old"] {
        let o = run(&["create", name, name]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let o = run(&["create", "big", "big"]);
    assert_eq!(o.status.code(), Some(2), "30 MB cannot fit: {}", stderr(&o));
    assert!(stderr(&o).contains("no space left"), "{}", stderr(&o));
    fill_up(mnt);
    let listed = stdout(&run(&["list"]));
    assert_eq!(
        listed.lines().count(),
        2,
        "the failed create committed nothing"
    );
    let o = run(&["delete", "old"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "delete on a full disk: {}",
        stderr(&o)
    );
    let o = run(&["compact"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "compact on a full disk: {}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("freed"), "{}", stdout(&o));
    // The space is free now: the reserve is back, and everything that was kept is exact.
    let check = run(&["check", "--verify-data"]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    let target = dir.join("out");
    let o = run(&["extract", "keep", "--target", target.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_trees_equal(&src.join("keep"), &target.join("keep"));
}

#[test]
fn a_full_local_disk_can_be_freed() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    if !mount_tmpfs(&mnt, "12m") {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let _guard = Unmount(&mnt);
    let repo = mnt.join("repo");
    full_disk_is_freed(dir.path(), &mnt, repo.to_str().unwrap());
    assert_eq!(
        fs::metadata(repo.join("reserve")).unwrap().len(),
        cairn::store::reserve::SIZE as u64,
        "the reserve is made again once there is room"
    );
}

#[test]
fn a_full_disk_behind_sftp_can_be_freed() {
    if std::env::var("CAIRN_TEST_SFTP").is_err() {
        eprintln!("skipped: CAIRN_TEST_SFTP is not set (scripts/test.sh starts the server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    if !mount_tmpfs(&mnt, "12m") {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let _guard = Unmount(&mnt);
    // The test server runs as this user on this machine: the tmpfs is its disk too.
    let url = format!("sftp://sftptest{}/repo", mnt.display());
    full_disk_is_freed(dir.path(), &mnt, &url);
    assert!(mnt.join("repo/reserve").exists());
}
