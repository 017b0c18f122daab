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

/// Starts `args` as `victim` with the test pause point `point` and waits until it stops there.
fn paused_at(repo: &Repo, victim: &Victim, point: &str, args: &[&str]) -> common::Paused {
    let mut cmd = victim.command(repo, repo.dir.path(), args);
    cmd.env("CAIRN_TEST_PAUSE_AT", point);
    common::Paused::of(cmd.spawn().unwrap(), args)
}

/// The restore ended with a warning that something it made was replaced under it.
fn warned_replaced(o: &std::process::Output) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(
        stderr(o).contains("replaced during the restore"),
        "{}",
        stderr(o)
    );
}

/// Bind-mounts `from` at `to`; false where this process may not (not root).
fn bind(from: &Path, to: &Path) -> bool {
    std::process::Command::new("mount")
        .arg("--bind")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success())
}

/// Found by an attack on the change above: the target was checked by its path and opened
/// again later, so a user who can write the target's parent swapped a symlink to the
/// repository in between, and `--delete` emptied the repository (on the 2nd try). Now the
/// directory the restore uses is the one checked.
fn a_target_swapped_after_its_check(repo: &Repo, victim: &Victim, (): ()) {
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"f").unwrap();
    give(&base.join("src"), victim.uid);
    let o = victim.run(repo, &["create", "a", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let parent = shared(repo).join("p");
    fs::create_dir_all(parent.join("restore")).unwrap();
    give(&parent, victim.other());
    let t = parent.join("restore");
    let paused = paused_at(
        repo,
        victim,
        "extract:target-open",
        &[
            "extract",
            "a",
            "--target",
            t.to_str().unwrap(),
            "--delete",
            "--strip-components",
            "1",
        ],
    );
    fs::rename(&t, parent.join("was")).unwrap();
    std::os::unix::fs::symlink(&repo.path, &t).unwrap();
    let o = paused.resume();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cairn's own directory"),
        "{}",
        stderr(&o)
    );
    let o = victim.run(repo, &["list"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the repository was emptied: {}",
        stderr(&o)
    );
}

against_root_and_a_normal_user!(
    a_target_swapped_after_its_check_is_refused,
    a_target_swapped_after_its_check_is_refused_as_a_normal_user,
    |_: &Repo| (),
    a_target_swapped_after_its_check
);

/// Found by the same attack: directory metadata was set at the end by name, so a directory
/// another user swapped in under a restored directory's name got root and mode 2755 (with
/// the user's file in it). Now it gets nothing, and a warning says why.
fn a_directory_swapped_before_its_metadata(repo: &Repo, victim: &Victim, (): ()) {
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src/d")).unwrap();
    fs::write(base.join("src/d/f"), b"inside").unwrap();
    // An item after the directory: the restore has moved on from it when it finishes.
    fs::write(base.join("src/e"), b"after").unwrap();
    give(&base.join("src"), victim.uid);
    mode(&base.join("src/d"), 0o2755);
    let o = victim.run(repo, &["create", "a", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = shared(repo).join("t");
    fs::create_dir_all(&t).unwrap();
    give(&t, victim.other());
    mode(&t, 0o777);
    let args = [
        "extract",
        "a",
        "--target",
        t.to_str().unwrap(),
        "--strip-components",
        "1",
    ];
    let paused = paused_at(repo, victim, "extract:dirs-finish", &args);
    fs::rename(t.join("d"), t.join("d.real")).unwrap();
    fs::create_dir(t.join("d")).unwrap();
    fs::write(t.join("d/planted"), b"mine").unwrap();
    give(&t.join("d"), victim.other());
    let o = paused.resume();
    warned_replaced(&o);
    let theirs = fs::symlink_metadata(t.join("d")).unwrap();
    assert_eq!(
        theirs.uid(),
        victim.other(),
        "the swapped-in directory was given away"
    );
    assert_eq!(theirs.mode() & 0o7777, 0o755);
}

against_root_and_a_normal_user!(
    a_directory_swapped_before_its_metadata_gets_none,
    a_directory_swapped_before_its_metadata_gets_none_as_a_normal_user,
    |_: &Repo| (),
    a_directory_swapped_before_its_metadata
);

/// Found by the same attack: a symlink's or FIFO's owner, mode and attributes were set by
/// name after it was made, so a user who swapped a link to a file of theirs in under the
/// name got that file made root's (and mode 0666 for a FIFO). Now they are set through a
/// descriptor of the node made, which must still be the restore's own.
#[test]
fn a_node_swapped_before_its_metadata_gets_none() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    nix::unistd::mkfifo(
        &base.join("src/p"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .unwrap();
    mode(&base.join("src/p"), 0o666);
    repo.ok(&["create", "a", base.join("src").to_str().unwrap()]);
    let attacker = 65534;
    let t = shared(&repo).join("t");
    fs::create_dir_all(&t).unwrap();
    give(&t, attacker);
    let mine = shared(&repo).join("mine");
    fs::write(&mine, b"the attacker's").unwrap();
    give(&mine, attacker);
    mode(&mine, 0o600);
    let strip = (base.join("src").components().count() - 1).to_string();
    let args = [
        "extract",
        "a",
        "--target",
        t.to_str().unwrap(),
        "--strip-components",
        &strip,
    ];
    let paused = paused_at(&repo, &Victim::root(), "extract:node-made", &args);
    fs::remove_file(t.join("p")).unwrap();
    fs::hard_link(&mine, t.join("p")).unwrap();
    let o = paused.resume();
    warned_replaced(&o);
    let m = fs::metadata(&mine).unwrap();
    assert_eq!(m.uid(), attacker, "the attacker's file was given to root");
    assert_eq!(m.mode() & 0o7777, 0o600);
}

/// Found by the same attack: a hardlinked file whose third name was skipped (a directory in
/// its way) was counted anyway, so two names planted as links to a file outside the target
/// made the link count match: that file got the archive's mode and times and lost its
/// attributes. Now only names that are the inode count, and the planted links are replaced.
#[test]
fn planted_links_with_a_name_skipped_are_not_kept() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    let data = random_bytes(3, 5_000);
    fs::write(src.join("a"), &data).unwrap();
    fs::hard_link(src.join("a"), src.join("b")).unwrap();
    fs::hard_link(src.join("a"), src.join("c")).unwrap();
    mode(&src.join("a"), 0o600);
    let o = repo.run_in(base, &["create", "h", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let outside = base.join("outside");
    fs::write(&outside, &data).unwrap();
    mode(&outside, 0o644);
    let t = base.join("t");
    fs::create_dir_all(t.join("src/c")).unwrap();
    fs::hard_link(&outside, t.join("src/a")).unwrap();
    fs::hard_link(&outside, t.join("src/b")).unwrap();
    let before = fs::metadata(&outside).unwrap();
    let o = repo.run(&[
        "extract",
        "h",
        "--target",
        t.to_str().unwrap(),
        "-n",
        "--list",
    ]);
    let planned = stdout(&o);
    assert!(
        planned.contains("write  src/a\n") && planned.contains("write  src/b\n"),
        "{planned}"
    );
    let o = repo.run(&["extract", "h", "--target", t.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let after = fs::metadata(&outside).unwrap();
    assert_eq!(
        after.mode(),
        before.mode(),
        "the outside file's mode changed"
    );
    assert_eq!(
        after.mtime(),
        before.mtime(),
        "the outside file's times changed"
    );
    assert_ne!(fs::metadata(t.join("src/a")).unwrap().ino(), after.ino());
}

/// Found by the same attack: a bind mount of the same file system has the device of its
/// parent, so `--delete` went into one inside the target (and removed what was outside it),
/// and accepted a target that is one without `--no-preserve-root`. Root only (it mounts).
#[test]
fn bind_mounts_are_mount_points() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"f").unwrap();
    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (outside, t, bm) = (base.join("outside"), base.join("t"), base.join("bm"));
    for d in [&outside, &t.join("bound"), &bm] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(outside.join("keepme"), b"outside the target").unwrap();
    if !bind(&outside, &t.join("bound")) {
        eprintln!("skipped: cannot bind-mount here (not root?)");
        return;
    }
    let mounted_too = bind(&outside, &bm);
    let inside = repo.run(&["extract", "a", "--target", t.to_str().unwrap(), "--delete"]);
    let kept = outside.join("keepme").exists();
    let target_is_one = repo.run(&["extract", "a", "--target", bm.to_str().unwrap(), "--delete"]);
    let kept_too = outside.join("keepme").exists();
    for m in [t.join("bound"), bm.clone()] {
        let _ = std::process::Command::new("umount").arg(&m).status();
    }
    assert!(kept, "--delete went into a bind mount: {}", stderr(&inside));
    assert!(
        stderr(&inside).contains("mount point"),
        "{}",
        stderr(&inside)
    );
    if mounted_too {
        assert_eq!(
            target_is_one.status.code(),
            Some(2),
            "{}",
            stderr(&target_is_one)
        );
        assert!(kept_too);
    }
}

/// Found by the same attack: the dry run did not say what the run does when `--delete` meets
/// a warning (the run deletes nothing, the dry run listed deletions), nor the directories the
/// run removes from the way of an item.
#[test]
fn the_dry_run_says_what_delete_does() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    fs::write(src.join("b"), b"b").unwrap();
    let o = repo.run_in(base, &["create", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = base.join("t");
    fs::create_dir_all(t.join("src/a/inner")).unwrap();
    fs::write(t.join("src/a/inner/zz"), b"z").unwrap();
    fs::write(t.join("src/extra"), b"x").unwrap();
    let ts = t.to_str().unwrap();
    let dry = repo.run(&["extract", "s", "--target", ts, "--delete", "-n", "--list"]);
    let out = stdout(&dry);
    assert!(out.contains("delete src/a/\nwrite  src/a\n"), "{out}");
    assert!(out.contains("2 items would be deleted"), "{out}");
    let o = repo.run(&["extract", "s", "--target", ts, "--delete"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("2 items the archive does not hold deleted"),
        "{}",
        stdout(&o)
    );
    // An item that cannot be restored (a file of the archive named as the repository, in a
    // target that holds the repository) makes the run delete nothing: the dry run says so too.
    fs::write(src.join("repo"), b"a file where the repository is").unwrap();
    let o = repo.run_in(base, &["create", "r", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    fs::write(base.join("junk"), b"j").unwrap();
    let bs = base.to_str().unwrap();
    let args = [
        "extract",
        "r",
        "--target",
        bs,
        "--strip-components",
        "1",
        "--delete",
    ];
    let dry = repo.run(&[&args[..], &["-n", "--list"]].concat());
    assert_eq!(dry.status.code(), Some(1), "{}", stderr(&dry));
    assert!(
        !stdout(&dry).lines().any(|l| l.starts_with("delete")),
        "{}",
        stdout(&dry)
    );
    assert!(
        stderr(&dry).contains("nothing would be deleted"),
        "{}",
        stderr(&dry)
    );
    let o = repo.run(&args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(base.join("junk").exists());
    assert!(repo.path.join("config").exists());
}

/// Found by a third attack: a directory in the way of a file (`--delete` removes it) that
/// held the repository being read lost everything else it held (the repository alone was
/// refused), and then the file was skipped anyway. Now such a directory is left whole, as the
/// dry run says.
#[test]
fn a_directory_in_the_way_that_holds_the_repository_is_left_whole() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"a file").unwrap();
    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = base.join("t");
    let way = t.join("src/f");
    fs::create_dir_all(&way).unwrap();
    fs::rename(&repo.path, way.join("repo")).unwrap();
    fs::write(way.join("notes.txt"), b"the user's notes").unwrap();
    let moved = way.join("repo");
    let env = [("CAIRN_REPO", moved.to_str().unwrap())];
    let args = ["extract", "a", "--target", t.to_str().unwrap(), "--delete"];
    let dry = repo.run_env(&[&args[..], &["-n", "--list"]].concat(), &env);
    assert_eq!(dry.status.code(), Some(1), "{}", stderr(&dry));
    assert!(
        !stdout(&dry).lines().any(|l| l.starts_with("delete")),
        "{}",
        stdout(&dry)
    );
    let o = repo.run_env(&args, &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(way.join("notes.txt").exists(), "{}", stderr(&o));
    let o = repo.run_env(&["check"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Found by the same attack: a bind mount at a directory the archive restores (not only at
/// one it lacks) was walked into by `--delete`, which removed what it found there: files
/// outside the target. Root only (it mounts).
#[test]
fn a_bind_mount_at_a_restored_directory_is_not_swept() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src/sub")).unwrap();
    fs::write(base.join("src/sub/g"), b"g").unwrap();
    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (outside, t) = (base.join("outside"), base.join("t"));
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(t.join("src/sub")).unwrap();
    fs::write(outside.join("keepme"), b"outside the target").unwrap();
    if !bind(&outside, &t.join("src/sub")) {
        eprintln!("skipped: cannot bind-mount here (not root?)");
        return;
    }
    let o = repo.run(&["extract", "a", "--target", t.to_str().unwrap(), "--delete"]);
    let kept = outside.join("keepme").exists();
    let _ = std::process::Command::new("umount")
        .arg(t.join("src/sub"))
        .status();
    assert!(kept, "--delete swept a bind mount: {}", stderr(&o));
    assert!(stderr(&o).contains("mount point"), "{}", stderr(&o));
}

/// Found by the same attack: in a directory another user can write, the name of a directory
/// the restore had just made was given to one it had made earlier (two renames, or one
/// `renameat2` exchange). Both names' metadata then went to the earlier one: the owner-only
/// directory holding a secret file got the mode 0777 meant for its neighbour. A directory is
/// now taken as made only once, and only if it was born when it was made.
#[test]
fn a_directory_exchanged_for_one_made_before_gets_no_second_metadata() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("secret")).unwrap();
    fs::create_dir_all(src.join("zpublic")).unwrap();
    fs::write(src.join("secret/key"), b"private").unwrap();
    mode(&src.join("secret/key"), 0o600);
    mode(&src.join("secret"), 0o700);
    mode(&src.join("zpublic"), 0o777);
    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let attacker = 65534;
    let t = shared(&repo).join("t");
    fs::create_dir_all(t.join("src")).unwrap();
    give(&t, attacker);
    mode(&t.join("src"), 0o777);
    // The points: src/secret, src/zpublic (src is another user's: kept as it is).
    let args = ["extract", "a", "--target", t.to_str().unwrap()];
    let paused = paused_at(&repo, &Victim::root(), "extract:dir-made@2", &args);
    let d = t.join("src");
    fs::rename(d.join("zpublic"), d.join("swap")).unwrap();
    fs::rename(d.join("secret"), d.join("zpublic")).unwrap();
    fs::rename(d.join("swap"), d.join("secret")).unwrap();
    let o = paused.resume();
    warned_replaced(&o);
    // The directory made for `secret` (its key inside) is now named `zpublic`.
    let holder = fs::symlink_metadata(d.join("zpublic")).unwrap();
    assert!(d.join("zpublic/key").exists());
    assert_eq!(
        holder.mode() & 0o777,
        0o700,
        "the secret's directory was opened to everyone"
    );
}

/// Found by the same attack: the dry run said `keep` for a symlink already there (the run
/// makes every symlink anew), and for the second name of a hardlinked file whose first name
/// the run writes over a directory in its way (the run links it to the new file).
#[test]
fn the_dry_run_plans_symlinks_and_links_as_the_run_makes_them() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("h1"), b"linked").unwrap();
    fs::hard_link(src.join("h1"), src.join("h2")).unwrap();
    std::os::unix::fs::symlink("h1", src.join("l")).unwrap();
    let o = repo.run_in(base, &["create", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = base.join("t");
    let ts = t.to_str().unwrap();
    repo.ok(&["extract", "s", "--target", ts]);
    fs::remove_file(t.join("src/h1")).unwrap();
    fs::create_dir_all(t.join("src/h1/in")).unwrap();
    let args = ["extract", "s", "--target", ts, "--delete"];
    let dry = repo.run(&[&args[..], &["-n", "--list"]].concat());
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    let out = stdout(&dry);
    for line in ["write  src/h1\n", "write  src/h2\n", "write  src/l\n"] {
        assert!(out.contains(line), "{line:?} not in {out}");
    }
    let o = repo.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (h1, h2) = (
        fs::metadata(t.join("src/h1")).unwrap(),
        fs::metadata(t.join("src/h2")).unwrap(),
    );
    assert_eq!(h1.ino(), h2.ino(), "the run linked h2 to the new h1");
}
