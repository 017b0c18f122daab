//! Restoring into a directory another local user can write, or that holds what the restore
//! must never touch (issue 44): a kept file is never another user's inode given away, `--delete`
//! never deletes the repository being read or cairn's cache, and names cannot forge lines on
//! the terminal. Each runs with root as the victim, and again with a normal user.

use crate::common;
use crate::victim::{against_root_and_a_normal_user, Victim};

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{random_bytes, stderr, stdout, Repo};

/// Makes `path` (and what is below it) `uid`'s, as if that user had made it.
fn give(path: &Path, uid: u32) {
    for e in walkdir::WalkDir::new(path) {
        std::os::unix::fs::lchown(e.unwrap().path(), Some(uid), Some(uid)).unwrap();
    }
}

fn mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// The tree the victim backs up: a set-uid program and a plain configuration file.
fn system_tree(repo: &Repo) -> (Vec<u8>, Vec<u8>) {
    let base = repo.dir.path();
    let (tool, conf) = (random_bytes(44, 40_000), random_bytes(45, 3_000));
    fs::create_dir_all(base.join("sys/usr/bin")).unwrap();
    fs::create_dir_all(base.join("sys/etc")).unwrap();
    fs::write(base.join("sys/usr/bin/tool"), &tool).unwrap();
    mode(&base.join("sys/usr/bin/tool"), 0o4755);
    fs::write(base.join("sys/etc/conf"), &conf).unwrap();
    (tool, conf)
}

/// A directory everyone can write, as the shared temporary directory is.
fn shared(repo: &Repo) -> std::path::PathBuf {
    let shared = repo.dir.path().join("shared");
    fs::create_dir_all(&shared).unwrap();
    std::os::unix::fs::lchown(&shared, Some(0), Some(0)).unwrap();
    mode(&shared, 0o1777);
    shared
}

/// The attacker makes the restore target in the shared directory, puts copies of the victim's
/// files there (the same contents: a kept file would be "present"), holds them open for
/// writing, and waits for the victim's restore. Before issue 44 the victim kept the
/// attacker's inode and gave it the archive's owner and mode: root:root 4755 on a file whose
/// writable descriptor the attacker still held.
fn planted_copies_are_never_given_away(
    repo: &Repo,
    victim: &Victim,
    (tool, conf): (Vec<u8>, Vec<u8>),
) {
    // (Handing the tree to a normal user cleared the set-uid bit.)
    mode(&repo.dir.path().join("sys/usr/bin/tool"), 0o4755);
    let o = victim.run(repo, &["create", "sys", "sys"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let attacker = victim.other();
    let target = shared(repo).join("R");
    fs::create_dir_all(target.join("sys/usr/bin")).unwrap();
    fs::create_dir_all(target.join("sys/etc")).unwrap();
    fs::write(target.join("sys/usr/bin/tool"), &tool).unwrap();
    fs::write(target.join("sys/etc/conf"), &conf).unwrap();
    give(&target, attacker);
    for d in ["", "sys", "sys/usr", "sys/usr/bin", "sys/etc"] {
        mode(&target.join(d), 0o777);
    }
    let held: Vec<(fs::File, u64)> = ["sys/usr/bin/tool", "sys/etc/conf"]
        .iter()
        .map(|p| {
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(target.join(p))
                .unwrap();
            let ino = f.metadata().unwrap().ino();
            (f, ino)
        })
        .collect();
    let o = victim.run(
        repo,
        &["extract", "sys", "--target", target.to_str().unwrap()],
    );
    let err = stderr(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    for ((f, ino), (path, bytes)) in held
        .iter()
        .zip([("sys/usr/bin/tool", &tool), ("sys/etc/conf", &conf)])
    {
        let now = fs::symlink_metadata(target.join(path)).unwrap();
        assert_eq!(fs::read(target.join(path)).unwrap(), *bytes, "{path}");
        assert_ne!(now.ino(), *ino, "{path}: the attacker's inode was kept");
        assert_eq!(now.uid(), victim.uid, "{path}");
        let theirs = f.metadata().unwrap();
        assert_eq!(
            theirs.uid(),
            attacker,
            "{path}: the attacker's inode was given away"
        );
        assert_eq!(
            theirs.mode() & 0o6000,
            0,
            "{path}: set-id bits on the attacker's inode"
        );
    }
    assert_eq!(
        fs::symlink_metadata(target.join("sys/usr/bin/tool"))
            .unwrap()
            .mode()
            & 0o7777,
        0o4755
    );
    // The attacker's directories are not given to the victim either: they keep their owner
    // and mode, and a warning says so.
    let bin = fs::symlink_metadata(target.join("sys/usr/bin")).unwrap();
    assert_eq!(bin.uid(), attacker);
    assert!(err.contains("a directory of another user"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    // The dry run says the same: the files are written, the directories skipped.
    let o = victim.run(
        repo,
        &[
            "extract",
            "sys",
            "--target",
            target.to_str().unwrap(),
            "-n",
            "--list",
        ],
    );
    let out = stdout(&o);
    assert!(out.contains("skip   sys/usr/bin/"), "{out}{}", stderr(&o));
    // With --delete, the attacker's directories are replaced by the victim's own.
    let o = victim.run(
        repo,
        &[
            "extract",
            "sys",
            "--target",
            target.to_str().unwrap(),
            "--delete",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for d in ["sys", "sys/usr", "sys/usr/bin", "sys/etc"] {
        assert_eq!(
            fs::symlink_metadata(target.join(d)).unwrap().uid(),
            victim.uid,
            "{d}"
        );
    }
}

against_root_and_a_normal_user!(
    a_file_another_user_planted_in_the_target_is_never_given_away,
    a_file_another_user_planted_in_the_target_is_never_given_away_as_a_normal_user,
    system_tree,
    planted_copies_are_never_given_away
);

/// `cd ~ && cairn create home .` leaves out the repository and the cache; `cairn extract
/// home --target ~ --delete` deleted them (all 6 files of the repository, exit 0, and `list`
/// failed after). Now both stay, the dry run says so, and the repository still opens.
fn delete_spares_the_repository(repo: &Repo, victim: &Victim, (): ()) {
    let home = repo.dir.path();
    fs::write(home.join("notes.txt"), b"kept in the archive").unwrap();
    give(&home.join("notes.txt"), victim.uid);
    let o = victim.run(repo, &["create", "home", "."]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("left out ./repo"), "{err}");
    fs::write(home.join("later.txt"), b"not in the archive").unwrap();
    give(&home.join("later.txt"), victim.uid);
    let t = home.to_str().unwrap();
    let o = victim.run(
        repo,
        &[
            "extract",
            "home",
            "--target",
            t,
            "--delete",
            "--dry-run",
            "--list",
        ],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("delete later.txt"), "{out}");
    assert!(out.contains("keep   repo/"), "{out}");
    assert!(!out.contains("delete repo"), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("delete cache")), "{out}");
    let o = victim.run(repo, &["extract", "home", "--target", t, "--delete"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("note: kept repo: it is the repository being read"),
        "{err}"
    );
    assert!(!home.join("later.txt").exists());
    assert!(
        home.join("repo/config").exists(),
        "the repository was deleted"
    );
    let o = victim.run(repo, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("home"));
    // A target inside the repository is refused before anything is made.
    let inside = home.join("repo/restored");
    let o = victim.run(
        repo,
        &["extract", "home", "--target", inside.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("inside cairn's own directory"),
        "{}",
        stderr(&o)
    );
    assert!(!inside.exists());
    // `/` is refused with --delete, in a dry run too, without --no-preserve-root.
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut args = vec!["extract", "home", "--target", "/", "--delete"];
        args.extend_from_slice(extra);
        let o = victim.run(repo, &args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("it is the root of a file system (/)")
                && stderr(&o).contains("--no-preserve-root"),
            "{}",
            stderr(&o)
        );
    }
}

against_root_and_a_normal_user!(
    extract_delete_never_deletes_the_repository_it_reads,
    extract_delete_never_deletes_the_repository_it_reads_as_a_normal_user,
    |_: &Repo| (),
    delete_spares_the_repository
);

/// A mount point is the root of a file system too: refused with --delete unless
/// --no-preserve-root (root only: it mounts a tmpfs).
#[test]
fn extract_delete_refuses_a_mount_point_unless_told() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"f").unwrap();
    repo.ok(&["create", "a", "src"]);
    let mnt = base.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (not root?)");
        return;
    }
    fs::write(mnt.join("other"), b"on the mounted file system").unwrap();
    let t = mnt.to_str().unwrap();
    let refused = repo.run(&["extract", "a", "--target", t, "--delete"]);
    let allowed = repo.run(&[
        "extract",
        "a",
        "--target",
        t,
        "--delete",
        "--no-preserve-root",
    ]);
    let other_after = mnt.join("other").exists();
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("a mount point"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(allowed.status.code(), Some(0), "{}", stderr(&allowed));
    assert!(
        !other_after,
        "--no-preserve-root deletes what the archive lacks"
    );
}

/// A local user names files and a socket `x<newline>error: …`, with ESC and CR sequences,
/// where the victim backs up and restores. Every line the victim's text-mode create and
/// extract print stays one line, without a raw ESC or CR (3 of 21 lines carried a raw ESC and
/// 2 were whole forged `error:` lines before).
fn names_cannot_forge_lines(repo: &Repo, victim: &Victim, (): ()) {
    let base = repo.dir.path();
    let drop = base.join("src/drop");
    fs::create_dir_all(&drop).unwrap();
    let attacker = victim.other();
    let names = [
        "x\nerror: forged by another user",
        "\x1b[31mred\x1b[0m\rerror: overwritten",
        "y\x1b]0;title\x07",
    ];
    for n in names {
        fs::write(drop.join(n), b"planted").unwrap();
    }
    let sock = drop.join("s\nerror: forged socket\x1b[2K");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    give(&drop, attacker);
    if victim.uid != 0 {
        give(&base.join("src"), victim.uid);
        give(&drop, attacker);
        mode(&drop, 0o777);
        for n in names {
            mode(&drop.join(n), 0o644);
        }
    }
    let o = victim.run(repo, &["create", "s", "src"]);
    let mut said = stderr(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{said}");
    assert!(said.contains("skipping socket"), "{said}");
    // Restored where a directory stands in the way of each name: a warning names each.
    let target = base.join("t");
    for n in names {
        fs::create_dir_all(target.join("src/drop").join(n).join("d")).unwrap();
    }
    if victim.uid != 0 {
        give(&target, victim.uid);
    }
    let o = victim.run(
        repo,
        &["extract", "s", "--target", target.to_str().unwrap()],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a directory is in the way"), "{err}");
    said.push_str(&err);
    assert!(
        !said.contains('\x1b'),
        "a raw ESC reached the terminal: {said:?}"
    );
    assert!(
        !said.contains('\r'),
        "a raw CR reached the terminal: {said:?}"
    );
    assert!(
        !said.contains('\x07'),
        "a raw BEL reached the terminal: {said:?}"
    );
    for line in said.lines() {
        assert!(!line.starts_with("error: forged"), "forged line: {said}");
        assert!(
            !line.starts_with("error: overwritten"),
            "forged line: {said}"
        );
    }
    assert!(said.contains("x\\nerror: forged by another user"), "{said}");
}

against_root_and_a_normal_user!(
    names_cannot_forge_lines_on_the_terminal,
    names_cannot_forge_lines_on_the_terminal_as_a_normal_user,
    |_: &Repo| (),
    names_cannot_forge_lines
);
