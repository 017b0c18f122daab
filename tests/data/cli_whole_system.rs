//! Whole-system backups: file capabilities, POSIX ACLs, every extended attribute namespace,
//! inode flags and numeric ids survive `create` and `extract` as root; a restore as another
//! user says once per kind what it could not set. The tools (setcap, setfacl, setfattr,
//! chattr, useradd) are installed by scripts/ci-setup.sh; a test that lacks them or root says
//! so and is skipped.

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{stderr, stdout, Repo};

/// The clock of a backup that runs a minute ahead of the files' (so that they are old enough
/// for the files cache without a wait).
const AHEAD: &[(&str, &str)] = &[("CAIRN_TEST_CLOCK_OFFSET", "60")];

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs a tool; its stdout, or `None` (said) when it is missing or fails.
fn tool(cmd: &str, args: &[&str]) -> Option<String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => {
            eprintln!("{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
            None
        }
        Err(e) => {
            eprintln!("{cmd}: {e}");
            None
        }
    }
}

fn ok(cmd: &str, args: &[&str]) {
    assert!(tool(cmd, args).is_some(), "{cmd} {args:?} failed");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Clears immutable and append-only flags below `dir` when dropped, so that the test's
/// directories can be removed.
struct Unflag(PathBuf);

impl Drop for Unflag {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .args(["-R", "-i", "-a"])
            .arg(&self.0)
            .output();
    }
}

/// Whether this machine can run the root tests: root, the tools, and a file system under
/// the temporary directory that keeps trusted attributes and inode flags.
fn whole_system_ready(dir: &Path) -> bool {
    if !is_root() {
        eprintln!("skipped: the whole-system tests need root");
        return false;
    }
    let probe = dir.join("probe");
    fs::write(&probe, b"p").unwrap();
    let ready = tool("setfattr", &["-n", "trusted.probe", "-v", "1", s(&probe)]).is_some()
        && tool("setfacl", &["-m", "u:nobody:r", s(&probe)]).is_some()
        && tool("setcap", &["cap_net_raw+ep", s(&probe)]).is_some()
        && tool("chattr", &["+A", s(&probe)]).is_some();
    fs::remove_file(&probe).unwrap();
    if !ready {
        eprintln!("skipped: setfattr, setfacl, setcap or chattr is missing or not supported here");
    }
    ready
}

/// The tree of the issue: a binary with a file capability, a file with an access ACL, a
/// directory with a default ACL, trusted and user attributes, and inode flags.
fn system_tree(src: &Path) {
    fs::create_dir_all(src.join("shared")).unwrap();
    fs::write(src.join("ping"), b"\x7fELF pretend").unwrap();
    fs::set_permissions(src.join("ping"), fs::Permissions::from_mode(0o755)).unwrap();
    ok("setcap", &["cap_net_raw+ep", s(&src.join("ping"))]);
    fs::write(src.join("acl-file"), b"shared data").unwrap();
    ok("setfacl", &["-m", "u:nobody:rw", s(&src.join("acl-file"))]);
    ok(
        "setfacl",
        &["-d", "-m", "u:nobody:rwx", s(&src.join("shared"))],
    );
    ok(
        "setfattr",
        &[
            "-n",
            "trusted.origin",
            "-v",
            "kept",
            s(&src.join("acl-file")),
        ],
    );
    ok(
        "setfattr",
        &["-n", "user.note", "-v", "hello", s(&src.join("acl-file"))],
    );
    fs::write(src.join("noatime"), b"n").unwrap();
    ok("chattr", &["+A", s(&src.join("noatime"))]);
    fs::write(src.join("log"), b"appended").unwrap();
    ok("chattr", &["+a", s(&src.join("log"))]);
    fs::write(src.join("frozen"), b"immutable").unwrap();
    ok("chattr", &["+i", s(&src.join("frozen"))]);
}

fn getfacl(p: &Path) -> String {
    tool("getfacl", &["--omit-header", "--numeric", s(p)]).unwrap()
}

fn lsattr(p: &Path) -> String {
    let out = tool("lsattr", &["-d", s(p)]).unwrap();
    out.split_whitespace().next().unwrap().to_string()
}

/// Every attribute of `src` is on `dst`.
fn assert_system_tree(src: &Path, dst: &Path) {
    assert_eq!(
        tool("getcap", &[s(&dst.join("ping"))])
            .unwrap()
            .split_whitespace()
            .nth(1),
        Some("cap_net_raw=ep"),
        "file capability"
    );
    for name in ["acl-file", "shared"] {
        assert_eq!(
            getfacl(&src.join(name)),
            getfacl(&dst.join(name)),
            "{name}: ACL"
        );
    }
    for attr in ["trusted.origin", "user.note"] {
        let get = |p: &Path| tool("getfattr", &["--only-values", "-n", attr, s(p)]);
        assert_eq!(
            get(&src.join("acl-file")),
            get(&dst.join("acl-file")),
            "{attr}"
        );
    }
    for name in ["noatime", "log", "frozen"] {
        assert_eq!(
            lsattr(&src.join(name)),
            lsattr(&dst.join(name)),
            "{name}: flags"
        );
    }
    assert_eq!(fs::read(dst.join("frozen")).unwrap(), b"immutable");
}

/// A repository and the system tree in `src` beside it (root only).
fn system_repo() -> Option<(Repo, Unflag, PathBuf)> {
    let repo = Repo::new();
    let unflag = Unflag(repo.dir.path().to_path_buf());
    if !whole_system_ready(repo.dir.path()) {
        return None;
    }
    let src = repo.dir.path().join("src");
    system_tree(&src);
    Some((repo, unflag, src))
}

/// The issue's tree, backed up and restored as root: every attribute round-trips, and the
/// second backup (whose files come from the files cache) keeps them too.
#[test]
fn capabilities_acls_every_xattr_namespace_and_flags_round_trip_as_root() {
    let Some((repo, _unflag, src)) = system_repo() else {
        return;
    };
    let base = repo.dir.path();
    // Old enough for the files cache (the backups run a minute ahead of the files' clock):
    // the second takes the files' contents from it (and must read their attributes and flags
    // all the same).
    for _ in 0..2 {
        let o = repo.run_env(&["create", "sys", s(&src)], AHEAD);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let listed = repo.ok(&["list", "--json-lines", "sys"]);
    let acl = listed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["path"].as_str().unwrap().ends_with("acl-file"))
        .unwrap();
    assert!(
        acl["acl_access"]
            .as_str()
            .unwrap()
            .contains("user:65534:rw-"),
        "{acl}"
    );
    // In text, the ACL's `+` follows the mode, apart from the owner column.
    let text = repo.ok(&["list", "sys"]);
    let line = text.lines().find(|l| l.ends_with("acl-file")).unwrap();
    assert!(line.starts_with("-rw-rw-r--+ root/root "), "{line}");
    let target = base.join("t");
    repo.ok(&["extract", "sys", "--target", s(&target)]);
    assert_system_tree(&src, &target.join(src.strip_prefix("/").unwrap()));

    // diff names a changed ACL and changed flags, old -> new.
    ok("setfacl", &["-m", "u:nobody:r", s(&src.join("acl-file"))]);
    ok("chattr", &["-A", s(&src.join("noatime"))]);
    repo.ok(&["create", "sys2", s(&src)]);
    let diff = repo.ok(&["diff", "sys", "sys2"]);
    assert!(
        diff.contains("acl user::rw-,user:65534:rw-,")
            && diff.contains("-> user::rw-,user:65534:r--,"),
        "{diff}"
    );
    assert!(diff.contains("flags noatime -> "), "{diff}");
}

/// `--noacls`, `--noxattrs` and `--noflags` leave those out, on create and on extract.
#[test]
fn the_switches_leave_acls_xattrs_and_flags_out() {
    let Some((repo, _unflag, src)) = system_repo() else {
        return;
    };
    let base = repo.dir.path();
    let rel = src.strip_prefix("/").unwrap().to_path_buf();
    repo.ok(&[
        "create",
        "none",
        "--noacls",
        "--noxattrs",
        "--noflags",
        s(&src),
    ]);
    repo.ok(&["create", "all", s(&src)]);
    let check = |archive: &str, extra: &[&str], acls: bool, xattrs: bool, flags: bool| {
        let target = base.join(format!("t-{archive}-{}", extra.len()));
        let mut args = vec!["extract", archive, "--target", s(&target)];
        args.extend_from_slice(extra);
        repo.ok(&args);
        let dst = target.join(&rel);
        assert_eq!(
            getfacl(&dst.join("acl-file")).contains("user:65534:rw-"),
            acls,
            "{archive} {extra:?}: ACL"
        );
        let trusted = tool(
            "getfattr",
            &["-n", "trusted.origin", s(&dst.join("acl-file"))],
        );
        assert_eq!(trusted.is_some(), xattrs, "{archive} {extra:?}: xattrs");
        assert_eq!(
            lsattr(&dst.join("frozen")).contains('i'),
            flags,
            "{archive} {extra:?}"
        );
    };
    check("none", &[], false, false, false);
    check("all", &["--noacls"], false, true, true);
    check("all", &["--noxattrs", "--noflags"], true, false, false);
}

/// `--numeric-ids`: the stored ids, not this system's ids for the stored names.
#[test]
fn numeric_ids_keep_the_stored_id_when_the_name_has_another_here() {
    let repo = Repo::new();
    let base = repo.dir.path();
    if !is_root() || tool("useradd", &["--help"]).is_none() {
        eprintln!("skipped: needs root and useradd");
        return;
    }
    let name = format!("cairn{}", rand::random::<u32>() % 1_000_000);
    let (first, second) = (41_000 + rand::random::<u32>() % 1000, 43_000u32);
    ok(
        "useradd",
        &["--no-create-home", "--uid", &first.to_string(), &name],
    );
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = Command::new("userdel").arg(&self.0).output();
        }
    }
    let _remove = Remove(name.clone());
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("owned"), b"o").unwrap();
    nix::unistd::chown(
        &src.join("owned"),
        Some(nix::unistd::Uid::from_raw(first)),
        None,
    )
    .unwrap();
    repo.ok(&["create", "ids", s(&src)]);
    // The same name has another id on the machine restored to.
    ok("usermod", &["--uid", &second.to_string(), &name]);
    let rel = src.strip_prefix("/").unwrap().join("owned");
    let by_name = base.join("by-name");
    repo.ok(&["extract", "ids", "--target", s(&by_name)]);
    assert_eq!(fs::metadata(by_name.join(&rel)).unwrap().uid(), second);
    let numeric = base.join("numeric");
    repo.ok(&["extract", "ids", "--numeric-ids", "--target", s(&numeric)]);
    assert_eq!(fs::metadata(numeric.join(&rel)).unwrap().uid(), first);
    // create --numeric-ids stores no names.
    repo.ok(&["create", "ids-numeric", "--numeric-ids", s(&src)]);
    let listed = repo.ok(&["list", "--json-lines", "ids-numeric"]);
    assert!(
        listed.lines().all(|l| l.contains("\"user\":\"\"")),
        "{listed}"
    );
}

/// The same archive restored by a user who is not root: the files are restored, and what
/// needs root (owners, capabilities, trusted attributes, the immutable flag) is one summary
/// warning per kind, exit 1.
#[test]
fn a_restore_without_root_says_once_per_kind_what_it_could_not_set() {
    let base = tempfile::tempdir().unwrap();
    let _unflag = Unflag(base.path().to_path_buf());
    if !whole_system_ready(base.path()) || tool("setpriv", &["--help"]).is_none() {
        return;
    }
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = base.path().join("src");
    system_tree(&src);
    for i in 0..3 {
        fs::write(src.join(format!("theirs{i}")), b"t").unwrap();
        nix::unistd::chown(
            &src.join(format!("theirs{i}")),
            Some(nix::unistd::Uid::from_raw(1234)),
            None,
        )
        .unwrap();
    }
    let repo = base.path().join("repo");
    let run = |nobody: bool, args: &[&str]| {
        let bin = env!("CARGO_BIN_EXE_cairn");
        let mut cmd = if nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            Command::new(bin)
        };
        let cache = base
            .path()
            .join(if nobody { "cache-nobody" } else { "cache" });
        cmd.args(args)
            .env("CAIRN_REPO", &repo)
            .env("CAIRN_PASSPHRASE", "pw")
            .env("CAIRN_TEST_CHEAP_KDF", "1")
            .env("XDG_CACHE_HOME", cache)
            .env("HOME", base.path())
            .current_dir(base.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    assert_eq!(run(false, &["init"]).status.code(), Some(0));
    let o = run(false, &["create", "sys", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The repository readable by nobody, as a colleague's would be.
    ok("chmod", &["-R", "a+rX", s(&repo)]);
    let target = base.path().join("t");
    let o = run(true, &["extract", "sys", "--target", s(&target)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("owners could not be set without root"),
        "{err}"
    );
    assert!(
        err.contains("warning: 1 file capability could not be set"),
        "{err}"
    );
    assert!(
        err.contains("warning: 1 trusted.* attribute could not be set"),
        "{err}"
    );
    assert!(
        err.contains("inode flags (immutable, append-only) could not be set"),
        "{err}"
    );
    assert!(!err.contains("cannot set"), "no line per file: {err}");
    // The summary counts the warnings printed, no more and no fewer.
    let warned = err.lines().filter(|l| l.starts_with("warning:")).count();
    assert!(
        err.contains(&format!("cairn: {warned} warnings (see above)")),
        "{err}"
    );
    let restored = target.join("src");
    assert_eq!(fs::read(restored.join("frozen")).unwrap(), b"immutable");
    assert_eq!(
        tool(
            "getfattr",
            &[
                "--only-values",
                "-n",
                "user.note",
                s(&restored.join("acl-file"))
            ]
        ),
        Some("hello".into())
    );
    assert!(getfacl(&restored.join("acl-file")).contains("user:65534:rw-"));
}

/// `--exclude-nodump` leaves out what `chattr +d` flagged: files, and directories with all
/// they hold.
#[test]
fn exclude_nodump_leaves_flagged_files_and_directories_out() {
    let repo = Repo::new();
    let base = repo.dir.path();
    if !whole_system_ready(base) {
        return;
    }
    let src = base.join("src");
    fs::create_dir_all(src.join("skipdir")).unwrap();
    fs::write(src.join("skipdir/inner"), b"x").unwrap();
    fs::write(src.join("skipped"), b"x").unwrap();
    fs::write(src.join("kept"), b"x").unwrap();
    ok("chattr", &["+d", s(&src.join("skipped"))]);
    ok("chattr", &["+d", s(&src.join("skipdir"))]);
    repo.ok(&["create", "all", s(&src)]);
    repo.ok(&["create", "dump", "--exclude-nodump", s(&src)]);
    let all = stdout(&repo.run(&["list", "all"]));
    let dump = stdout(&repo.run(&["list", "dump"]));
    assert!(
        all.contains("/skipped") && all.contains("skipdir/inner"),
        "{all}"
    );
    assert!(dump.contains("/kept"), "{dump}");
    assert!(
        !dump.contains("skipped") && !dump.contains("skipdir"),
        "{dump}"
    );
}

/// Extended attributes of files that did not change since the last backup are kept: the
/// files cache holds their chunks, not their attributes, and they were lost.
#[test]
fn unchanged_files_keep_their_extended_attributes() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"contents").unwrap();
    if tool(
        "setfattr",
        &["-n", "user.note", "-v", "kept", s(&src.join("f"))],
    )
    .is_none()
    {
        eprintln!("skipped: no user xattrs here");
        return;
    }
    // Old enough for the files cache: its time a minute back, and the backups a minute ahead
    // (its ctime is now).
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    fs::File::options()
        .write(true)
        .open(src.join("f"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    for _ in 0..2 {
        let o = repo.run_env(&["create", "a", s(&src)], AHEAD);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let target = repo.dir.path().join("t");
    repo.ok(&["extract", "a", "--target", s(&target)]);
    let restored = target.join(src.strip_prefix("/").unwrap()).join("f");
    assert_eq!(
        tool(
            "getfattr",
            &["--only-values", "-n", "user.note", s(&restored)]
        ),
        Some("kept".into())
    );
}

/// An unchanged file costs a stat: its attributes, ACLs and flags come from the files cache
/// and it is not opened. A change to only an xattr, only an ACL or only a flag changes the
/// ctime: that file is read again, and each change is in the next archive.
#[test]
fn unchanged_files_are_not_opened_and_each_attribute_change_is_seen() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let Some((repo, _unflag, src)) = system_repo() else {
        return;
    };
    let o = repo.run_env(&["create", "sys", s(&src)], AHEAD);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    ok(
        "setfattr",
        &["-n", "user.new", "-v", "added", s(&src.join("ping"))],
    );
    ok("setfacl", &["-m", "u:nobody:r", s(&src.join("acl-file"))]);
    ok("chattr", &["-A", s(&src.join("noatime"))]);
    let watch = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    watch.add_watch(&src, AddWatchFlags::IN_OPEN).unwrap();
    let o = repo.run_env(&["create", "sys", s(&src)], AHEAD);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut opened: Vec<String> = Vec::new();
    while let Ok(events) = watch.read_events() {
        if events.is_empty() {
            break;
        }
        // Directories are opened to be walked; files only to be read.
        for e in events
            .into_iter()
            .filter(|e| !e.mask.contains(AddWatchFlags::IN_ISDIR))
        {
            if let Some(name) = e.name {
                opened.push(name.to_string_lossy().into_owned());
            }
        }
    }
    opened.sort();
    opened.dedup();
    assert_eq!(
        opened,
        ["acl-file", "noatime", "ping"],
        "files opened by the second backup"
    );
    // Each change is in the new archive, and what did not change is kept.
    let listed = repo.ok(&["list", "--json-lines", "sys"]);
    let item = |name: &str| {
        listed
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["path"].as_str().unwrap().ends_with(&format!("/{name}")))
            .unwrap()
    };
    assert!(
        item("ping").to_string().contains("user.new"),
        "{}",
        item("ping")
    );
    assert!(
        item("acl-file")["acl_access"]
            .as_str()
            .unwrap()
            .contains("user:65534:r--"),
        "{}",
        item("acl-file")
    );
    let target = repo.dir.path().join("t");
    repo.ok(&["extract", "sys", "--target", s(&target)]);
    assert_system_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
}
