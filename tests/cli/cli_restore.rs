//! extract into a target that holds something already: `--delete`, `--overwrite` and
//! `--dry-run --list`, on a bandwidth-limited store, the trees compared exactly.

use crate::common;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

/// A repository on a store limited to 20 MB/s, holding archive `a` of `src`: 24 files of
/// 300 kB in `src` and `src/sub`, a symlink and an empty directory.
fn setup() -> (Repo, PathBuf) {
    let repo = Repo::with_env(&[
        ("CAIRN_PACK_SIZE", "200000"),
        ("CAIRN_STORE_BANDWIDTH", "20000000"),
    ]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    for i in 0..24u64 {
        let dir = if i < 12 { src.clone() } else { src.join("sub") };
        fs::write(dir.join(format!("f{i:02}")), random_bytes(i, 300_000)).unwrap();
    }
    symlink("f00", src.join("link")).unwrap();
    let o = repo.run_in(&base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (repo, base)
}

/// Packs read by a command, from its store log.
fn pack_reads(log: &Path) -> usize {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains(" get packs/")).count()
}

/// Runs extract with a store log; returns (exit code, stdout, stderr, packs read).
fn extract(repo: &Repo, base: &Path, args: &[&str]) -> (Option<i32>, String, String, usize) {
    let log = base.join("extract.log");
    let _ = fs::remove_file(&log);
    let mut all = vec!["extract", "a"];
    all.extend_from_slice(args);
    let o = repo.run_env(&all, &[("CAIRN_STORE_LOG", log.to_str().unwrap())]);
    (o.status.code(), stdout(&o), stderr(&o), pack_reads(&log))
}

/// Every path under `root` with its type, mode, mtime, size and contents' hash: what a dry
/// run must leave exactly as it was.
fn snapshot(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out: Vec<String> = walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            let data = if m.is_file() {
                let bytes = fs::read(e.path()).unwrap();
                format!(
                    "{:x}",
                    bytes
                        .iter()
                        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(*b))
                )
            } else {
                String::new()
            };
            format!(
                "{} {:o} {}.{} {} {data}",
                e.path().display(),
                m.mode(),
                m.mtime(),
                m.mtime_nsec(),
                m.len()
            )
        })
        .collect();
    out.sort();
    out
}

/// Damages a restored copy of `src` in every way an extract must undo: a file with other
/// contents, one longer, one missing, one made a symlink, one with other mode and time, and
/// extras (a file, a directory with contents, a symlink to a directory elsewhere) in the
/// copy and in the target's top directory.
fn damage(target: &Path, elsewhere: &Path) {
    let out = target.join("src");
    fs::write(out.join("f03"), random_bytes(1000, 300_000)).unwrap();
    fs::write(out.join("sub/f14"), random_bytes(14, 300_001)).unwrap();
    fs::remove_file(out.join("f05")).unwrap();
    fs::remove_file(out.join("sub/f19")).unwrap();
    symlink("/etc/passwd", out.join("sub/f19")).unwrap();
    fs::set_permissions(out.join("f08"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(out.join("stray.txt"), b"not in the archive").unwrap();
    fs::create_dir_all(out.join("sub/old/deeper")).unwrap();
    fs::write(out.join("sub/old/deeper/x"), b"x").unwrap();
    symlink(elsewhere, out.join("sub/to-elsewhere")).unwrap();
    fs::write(target.join("top-extra"), b"beside src").unwrap();
}

/// `--delete` makes the target the archive exactly, fetching only what differs: extras go
/// (without following a symlink out of the target), names `--exclude` leaves out stay, and
/// with a PATH only what is below it is touched.
#[test]
fn extract_delete_leaves_exactly_the_archive() {
    let (repo, base) = setup();
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let (code, _, err, full) = extract(&repo, &base, &["--target", t]);
    assert_eq!(code, Some(0), "{err}");
    let elsewhere = base.join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(elsewhere.join("precious"), b"keep me").unwrap();
    damage(&target, &elsewhere);

    // Below one path: only src/sub is touched.
    let (code, out, err, _) = extract(&repo, &base, &["--target", t, "--delete", "src/sub"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("items the archive does not hold deleted"),
        "{out}"
    );
    assert!(!target.join("src/sub/old").exists() && !target.join("src/sub/to-elsewhere").exists());
    assert!(
        target.join("src/stray.txt").exists(),
        "outside the path given"
    );
    assert!(target.join("top-extra").exists());
    assert_eq!(fs::read(elsewhere.join("precious")).unwrap(), b"keep me");

    // The whole archive, with a name of it excluded: that name stays, the rest is exact.
    let (code, out, err, reads) = extract(
        &repo,
        &base,
        &["--target", t, "--delete", "--exclude", "f08"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("2 items the archive does not hold deleted"),
        "{out}"
    );
    assert!(!target.join("top-extra").exists() && !target.join("src/stray.txt").exists());
    assert!(
        target.join("src/f08").exists(),
        "excluded, held by the archive: kept"
    );
    fs::set_permissions(target.join("src/f08"), fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err, _) = extract(&repo, &base, &["--target", t, "src/f08"]);
    assert_eq!(code, Some(0), "{err}");
    assert_trees_equal(&base.join("src"), &target.join("src"));
    let top: Vec<_> = fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(top, vec![std::ffi::OsString::from("src")]);
    assert!(
        reads * 4 <= full,
        "{reads} pack reads after the first run's {full}"
    );

    // --delete needs a target named on the command line.
    let o = repo.run_in(&target, &["extract", "a", "--delete"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("name the target with --target"),
        "{}",
        stderr(&o)
    );
}

/// `--dry-run --list` names what would be written, fixed and deleted, changes nothing and
/// fetches nothing; the restore that follows does what it said.
#[test]
fn extract_dry_run_lists_and_changes_nothing() {
    let (repo, base) = setup();
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let (code, _, err, _) = extract(&repo, &base, &["--target", t]);
    assert_eq!(code, Some(0), "{err}");
    let elsewhere = base.join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    damage(&target, &elsewhere);
    let before = snapshot(&target);
    let (code, out, err, reads) = extract(
        &repo,
        &base,
        &["--target", t, "--dry-run", "--list", "--delete"],
    );
    assert_eq!(code, Some(0), "{err}");
    // It reads the archive's item list, as `list` does, and no file's contents.
    let log = base.join("list.log");
    let o = repo.run_env(
        &["list", "a"],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        reads,
        pack_reads(&log),
        "a dry run fetches no file's contents"
    );
    assert_eq!(snapshot(&target), before, "a dry run changes nothing");
    let listed: Vec<&str> = out.lines().filter(|l| !l.starts_with("Dry run")).collect();
    assert_eq!(
        listed,
        vec![
            // Directories whose contents changed have another mtime: fixed.
            "fix    src/",
            "write  src/f03",
            "write  src/f05",
            "fix    src/f08",
            // Symlinks are always made anew (never one the restore did not make kept).
            "write  src/link",
            "fix    src/sub/",
            "write  src/sub/f14",
            "write  src/sub/f19",
            "delete src/stray.txt",
            "delete src/sub/old/",
            "delete src/sub/to-elsewhere",
            "delete top-extra",
        ],
        "{out}"
    );
    assert!(
        out.contains(
            "5 items would be written (1.20 MB in 4 files), 3 items would have only metadata set"
        ) && out.contains("4 items would be deleted. Nothing was changed."),
        "{out}"
    );
    // Into a target that does not exist: everything would be written, nothing is made.
    let none = base.join("none");
    let (code, out, err, _) = extract(
        &repo,
        &base,
        &["--target", none.to_str().unwrap(), "-n", "--list"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("write ")).count(),
        28,
        "{out}"
    );
    assert!(!none.exists());
    // --list alone is refused: it belongs to the dry run.
    let (code, _, err, _) = extract(&repo, &base, &["--target", t, "--list"]);
    assert_eq!(code, Some(2), "{err}");
    // The restore does what the dry run said; its progress (0.4 s a store operation, so
    // that lines are printed) says what was fetched and what was there already.
    let o = repo.run_env(
        &["extract", "a", "--target", t, "--delete", "--progress"],
        &[("CAIRN_STORE_LATENCY", "400000")],
    );
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains(" fetched, ") && l.contains(" there already")),
        "{err}"
    );
    assert!(
        out.contains("20 files (6.00 MB) were there already")
            && out.contains("4 items the archive does not hold deleted"),
        "{out}"
    );
    assert_trees_equal(&base.join("src"), &target.join("src"));
}

/// `--overwrite never` restores only what is missing and leaves what is there as it is;
/// `--overwrite always` writes every file again.
#[test]
fn extract_overwrite_never_and_always() {
    let (repo, base) = setup();
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let (code, _, err, full) = extract(&repo, &base, &["--target", t]);
    assert_eq!(code, Some(0), "{err}");
    let out = target.join("src");
    fs::write(out.join("f03"), b"mine now").unwrap();
    fs::set_permissions(out.join("f04"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(out.join("f05")).unwrap();
    fs::remove_file(out.join("link")).unwrap();
    symlink("elsewhere", out.join("link")).unwrap();
    let (code, said, err, reads) = extract(&repo, &base, &["--target", t, "--overwrite", "never"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(said.contains("Restored 1 file (300.00 kB)"), "{said}");
    assert!(
        said.contains("24 items already there left as they were"),
        "{said}"
    );
    assert_eq!(fs::read(out.join("f03")).unwrap(), b"mine now");
    assert_eq!(
        fs::metadata(out.join("f04")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::read_link(out.join("link")).unwrap(),
        Path::new("elsewhere")
    );
    assert_eq!(fs::read(out.join("f05")).unwrap(), random_bytes(5, 300_000));
    assert!(reads <= 3, "{reads} pack reads for one missing file");
    // always: every file fetched again, and the tree is the archive's.
    let (code, said, err, reads) = extract(&repo, &base, &["--target", t, "--overwrite", "always"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!said.contains("there already"), "{said}");
    assert!(
        reads >= full,
        "{reads} pack reads, {full} for the first restore"
    );
    assert_trees_equal(&base.join("src"), &out);
    // A value that is not one of the three is refused by name.
    let (code, _, err, _) = extract(&repo, &base, &["--target", t, "--overwrite", "sometimes"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("if-changed"), "{err}");
}

/// Ctrl-C during an extract on a terminal: the live progress line is cleared before the
/// command says it was interrupted, so the message starts its own clean line.
#[test]
fn ctrl_c_clears_the_progress_line() {
    use std::io::Read;
    let (repo, base) = setup();
    let pty = nix::pty::openpty(
        Some(&nix::pty::Winsize {
            ws_row: 24,
            ws_col: 100,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }),
        None,
    )
    .unwrap();
    let target = base.join("t");
    // 0.5 s a store operation: the restore takes many seconds.
    let mut cmd = repo.command(
        &base,
        &["extract", "a", "--target", target.to_str().unwrap()],
        &[("CAIRN_STORE_LATENCY", "500000")],
    );
    cmd.stderr(std::process::Stdio::from(std::fs::File::from(pty.slave)));
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    // Read what the terminal shows until the live line names bytes fetched, then interrupt.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once the last holder of the terminal's other side is gone.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut shown = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !String::from_utf8_lossy(&shown).contains(" fetched") {
        assert!(std::time::Instant::now() < deadline, "no progress line");
        if let Ok(b) = rx.recv_timeout(std::time::Duration::from_millis(100)) {
            shown.extend(b);
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_ne!(status.code(), Some(0));
    while let Ok(b) = rx.recv_timeout(std::time::Duration::from_secs(2)) {
        shown.extend(b);
    }
    let text = String::from_utf8_lossy(&shown);
    let said = text.find("interrupted").expect("the interrupt is said");
    let before = &text[..said];
    let last_line = before.rfind(" fetched").expect("a progress line");
    assert!(
        before[last_line..].contains("\x1b[2K"),
        "the progress line is not cleared before the message: {:?}",
        &text[last_line.saturating_sub(200)..]
    );
}

/// An archive of an absolute path holds no items for the path's parents (`create x
/// /home/alice` stores `home/alice/…`): `--delete` must keep them, and all that was just
/// restored below them. Extras beside them go.
#[test]
fn extract_delete_keeps_the_parents_of_an_absolute_backup() {
    let (repo, base) = setup();
    let src = base.join("src");
    let o = repo.run_in(&base, &["create", "abs", src.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let target = base.join("t");
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("extra"), b"not in the archive").unwrap();
    let o = repo.run(&[
        "extract",
        "abs",
        "--target",
        target.to_str().unwrap(),
        "--delete",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let restored = target.join(src.strip_prefix("/").unwrap());
    assert_trees_equal(&src, &restored);
    assert!(!target.join("extra").exists());
    // The dry run agrees: nothing of the archive's would be deleted.
    fs::write(target.join("extra2"), b"x").unwrap();
    let o = repo.run(&[
        "extract",
        "abs",
        "--target",
        target.to_str().unwrap(),
        "--delete",
        "-n",
        "--list",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let deletes: Vec<String> = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("delete"))
        .map(String::from)
        .collect();
    assert_eq!(deletes, ["delete extra2"], "{}", stdout(&o));
}

/// `--overwrite never` keeps a file that stands where the archive has a directory, and what
/// the archive holds below that directory is not restored (nor said to be written).
#[test]
fn overwrite_never_keeps_a_file_where_a_directory_goes() {
    let (repo, base) = setup();
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let (code, _, err, _) = extract(&repo, &base, &["--target", t]);
    assert_eq!(code, Some(0), "{err}");
    let sub = target.join("src/sub");
    fs::remove_dir_all(&sub).unwrap();
    fs::write(&sub, b"mine").unwrap();
    let (code, out, err, _) = extract(
        &repo,
        &base,
        &["--target", t, "--overwrite", "never", "-n", "--list"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("keep   src/sub/") && !out.contains("write"),
        "{out}"
    );
    let (code, out, err, _) = extract(&repo, &base, &["--target", t, "--overwrite", "never"]);
    assert_eq!(code, Some(0), "{err}: {out}");
    assert_eq!(fs::read(&sub).unwrap(), b"mine");
}

/// A directory (even an empty one) where the archive has a file: with `--delete` it is
/// replaced and the tree ends as the archive's; without it the file is not restored, a
/// warning says why (exit 1), and the dry run predicts exactly that. Before issue 44,
/// `--delete --overwrite always` stopped with "a directory is in the way", exit 2, deleting
/// nothing, after the dry run had predicted a plain write.
#[test]
fn a_directory_where_a_file_goes() {
    let (repo, base) = setup();
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let (code, _, err, _) = extract(&repo, &base, &["--target", t]);
    assert_eq!(code, Some(0), "{err}");
    let in_the_way = |target: &Path| {
        fs::remove_file(target.join("src/f01")).unwrap();
        fs::create_dir_all(target.join("src/f01")).unwrap();
        fs::remove_file(target.join("src/sub/f13")).unwrap();
        fs::create_dir_all(target.join("src/sub/f13/deeper")).unwrap();
        fs::write(target.join("src/sub/f13/deeper/x"), b"x").unwrap();
        fs::remove_file(target.join("src/link")).unwrap();
        fs::create_dir_all(target.join("src/link")).unwrap();
    };
    in_the_way(&target);
    // Without --delete: a warning for each, nothing replaced; the dry run says "skip".
    let (code, out, err, _) = extract(&repo, &base, &["--target", t, "-n", "--list"]);
    assert_eq!(code, Some(1), "{err}");
    for p in ["src/f01", "src/link", "src/sub/f13"] {
        assert!(out.contains(&format!("skip   {p}\n")), "{out}");
        assert!(
            err.contains(&format!("{p}: a directory is in the way")),
            "{err}"
        );
    }
    let (code, _, err, _) = extract(&repo, &base, &["--target", t, "--overwrite", "always"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--delete replaces it"), "{err}");
    assert!(target.join("src/f01").is_dir());
    // With --delete (and --overwrite always, as the report had it): the dry run predicts a
    // write for each, and the restore makes the tree the archive's.
    let (code, out, err, _) = extract(
        &repo,
        &base,
        &[
            "--target",
            t,
            "--delete",
            "--overwrite",
            "always",
            "-n",
            "--list",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    for p in ["src/f01", "src/link", "src/sub/f13"] {
        assert!(out.contains(&format!("write  {p}\n")), "{out}");
    }
    let (code, out, err, _) = extract(
        &repo,
        &base,
        &["--target", t, "--delete", "--overwrite", "always"],
    );
    assert_eq!(code, Some(0), "{err}{out}");
    assert_trees_equal(&base.join("src"), &target.join("src"));
    // A file where a parent directory goes (no item of its own: `--strip-components` made
    // `sub` the top) is replaced with --delete too.
    let t2 = base.join("t2");
    fs::create_dir_all(&t2).unwrap();
    fs::write(t2.join("sub"), b"a file where a directory goes").unwrap();
    let t2s = t2.to_str().unwrap();
    let strip = ["--strip-components", "1", "src/sub/f12"];
    for (extra, want) in [(&[][..], 1), (&["-n"][..], 1), (&["--delete"][..], 0)] {
        let args: Vec<&str> = ["--target", t2s]
            .iter()
            .chain(&strip)
            .chain(extra)
            .copied()
            .collect();
        let (code, _, err, _) = extract(&repo, &base, &args);
        assert_eq!(code, Some(want), "{args:?}: {err}");
    }
    assert_eq!(
        fs::read(t2.join("sub/f12")).unwrap(),
        fs::read(base.join("src/sub/f12")).unwrap()
    );
}

/// Hardlinked files the target holds already, identical and linked the same way, are kept
/// as single-link files are (they were always fetched and written again). An inode with a
/// name besides the archive's is written anew, and its other name left as it was.
#[test]
fn hardlinked_files_in_place_are_kept() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("a"), random_bytes(7, 200_000)).unwrap();
    fs::hard_link(src.join("a"), src.join("d/b")).unwrap();
    fs::write(src.join("plain"), random_bytes(8, 1000)).unwrap();
    let o = repo.run_in(base, &["create", "h", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let target = base.join("t");
    let t = target.to_str().unwrap();
    repo.ok(&["extract", "h", "--target", t]);
    // Again: nothing fetched, both names there already.
    let log = base.join("again.log");
    let o = repo.run_env(
        &["extract", "h", "--target", t],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("3 files (201.00 kB) were there already"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        pack_reads(&log),
        1,
        "only the item stream is read: {}",
        stdout(&o)
    );
    let (a, b) = (
        fs::metadata(target.join("src/a")).unwrap(),
        fs::metadata(target.join("src/d/b")).unwrap(),
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(a.ino(), b.ino());
    // Metadata changed on the pair is set again; the dry run says "fix" for both names.
    fs::set_permissions(target.join("src/a"), fs::Permissions::from_mode(0o600)).unwrap();
    let o = repo.run(&["extract", "h", "--target", t, "-n", "--list"]);
    let listed = stdout(&o);
    let fixed: Vec<&str> = listed.lines().filter(|l| l.starts_with("fix ")).collect();
    assert_eq!(fixed, ["fix    src/a", "fix    src/d/b"], "{}", stdout(&o));
    repo.ok(&["extract", "h", "--target", t]);
    assert_trees_equal(&src, &target.join("src"));
    // A third name outside the archive's: the pair is written anew, the outsider untouched.
    fs::hard_link(target.join("src/a"), base.join("outsider")).unwrap();
    fs::set_permissions(base.join("outsider"), fs::Permissions::from_mode(0o600)).unwrap();
    let o = repo.run(&["extract", "h", "--target", t, "-n", "--list"]);
    let out = stdout(&o);
    assert!(
        out.contains("write  src/a\n") && out.contains("write  src/d/b\n"),
        "{out}"
    );
    repo.ok(&["extract", "h", "--target", t]);
    assert_trees_equal(&src, &target.join("src"));
    let outsider = fs::metadata(base.join("outsider")).unwrap();
    assert_eq!(
        outsider.mode() & 0o7777,
        0o600,
        "the outsider's mode was changed"
    );
    assert_eq!(outsider.nlink(), 1);
    assert_ne!(
        outsider.ino(),
        fs::metadata(target.join("src/a")).unwrap().ino()
    );
}

/// A restored file is as long as the backed-up one whatever it ends in: data, zeros shorter
/// than a block after data, whole zero blocks (a hole at the end, so the size is set), only
/// zeros, nothing. Restored over an empty target and again over a target that holds other
/// files of the same names (each replaced, never followed: one is a symlink to a file
/// outside).
#[test]
fn sizes_are_exact_whatever_a_file_ends_in() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    let mut ends_in_hole = random_bytes(1, 300_000);
    ends_in_hole.extend(std::iter::repeat_n(0u8, 200_000));
    let mut short_zeros = random_bytes(2, 4096);
    short_zeros.extend(std::iter::repeat_n(0u8, 1000));
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("data", random_bytes(3, 70_000)),
        ("ends_in_hole", ends_in_hole),
        ("short_zeros", short_zeros),
        ("zeros", vec![0u8; 3 << 20]),
        ("empty", Vec::new()),
    ];
    for (name, data) in &files {
        fs::write(src.join(name), data).unwrap();
    }
    let o = repo.run_in(&base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let o = repo.run(&["extract", "a", "--target", t]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (name, data) in &files {
        let got = fs::read(target.join("src").join(name)).unwrap();
        assert_eq!(got.len(), data.len(), "{name}");
        assert!(got == *data, "{name}");
    }
    // Over other files of the same names, longer and shorter, and a symlink out.
    let outside = base.join("outside");
    fs::write(&outside, b"not to be touched").unwrap();
    for (name, data) in &files {
        let p = target.join("src").join(name);
        fs::remove_file(&p).unwrap();
        if *name == "zeros" {
            symlink(&outside, &p).unwrap();
        } else {
            fs::write(&p, vec![9u8; data.len() + 5000]).unwrap();
        }
    }
    let o = repo.run(&["extract", "a", "--target", t, "--overwrite", "always"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (name, data) in &files {
        let p = target.join("src").join(name);
        assert!(!fs::symlink_metadata(&p).unwrap().is_symlink(), "{name}");
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), data.len(), "{name}");
        assert!(got == *data, "{name}");
    }
    assert_eq!(fs::read(&outside).unwrap(), b"not to be touched");
}

/// From a remote store (here one with 2 ms a request), readers read packs ahead while the
/// workers decode what they read: a read that fails, or one that returns a flipped bit, fails
/// only the file whose pack it was, which is not left behind; every other file is restored
/// exactly, and a restore with no fault restores them all.
#[test]
fn extract_from_a_far_store_fails_only_the_file_of_a_failed_read() {
    let repo = Repo::with_env(&[("CAIRN_STORE_LATENCY", "2000")]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    // Each file in its own pack, so one failed read fails one file.
    for i in 0..8u64 {
        fs::write(src.join(format!("f{i}")), random_bytes(200 + i, 100_000)).unwrap();
    }
    let o = repo.run_in(
        &base,
        &["create", "a", "src"],
        &[("CAIRN_PACK_SIZE", "50000")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (n, fault) in [(1, "name=packs/@3:get:eio"), (2, "name=packs/@6:get:flip")] {
        let target = base.join(format!("t{n}"));
        let t = target.to_str().unwrap();
        let o = repo.run_env(&["extract", "a", "--target", t], &[("CAIRN_FAULT", fault)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{fault}: {err}");
        let failed: Vec<u64> = (0..8)
            .filter(|i| err.contains(&format!("src/f{i}: not restored")))
            .collect();
        assert_eq!(failed.len(), 1, "{fault}: {err}");
        for i in 0..8u64 {
            let p = target.join(format!("src/f{i}"));
            if failed.contains(&i) {
                assert!(
                    !p.exists(),
                    "{fault}: a file not restored is not left behind"
                );
            } else {
                assert_eq!(
                    fs::read(&p).unwrap(),
                    random_bytes(200 + i, 100_000),
                    "{fault}"
                );
            }
        }
    }
    let target = base.join("t3");
    let o = repo.run(&["extract", "a", "--target", target.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_trees_equal(&src, &target.join("src"));
}
