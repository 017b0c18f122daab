//! Reliability suite, item 9: source adversity. Hostile source trees — files that grow or
//! shrink while they are read, unreadable files and directories, fifos without a writer,
//! sockets, symlink loops, paths at PATH_MAX, names made of every byte, sparse files and
//! hardlinks — are backed up through the real binary. Every run has a deadline (no hang), its
//! exit status is checked (0 clean, 1 warnings), stderr must not show a panic, and everything
//! readable is extracted and compared with the source.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

/// No cairn run in this file may take longer: a run still going then is killed and reported
/// as a hang.
const DEADLINE: Duration = Duration::from_secs(60);

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

// ---------------------------------------------------------------------------------------------
// Running cairn with a deadline.

/// `cairn ARGS` for `repo`, in `cwd`, with the environment `Repo::run_in` gives.
fn cairn_cmd<S: AsRef<OsStr>>(repo: &Repo, cwd: &Path, args: &[S]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars_os() {
        if k.as_bytes().starts_with(b"CAIRN_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1");
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    cmd.current_dir(cwd).args(args);
    cmd
}

/// A cairn process whose output is drained by two threads (so it never blocks on a full pipe).
struct Running {
    child: Child,
    what: String,
    started: Instant,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn spawn(mut cmd: Command) -> Running {
    let mut what: String = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if what.len() > 200 {
        let mut cut = 200;
        while !what.is_char_boundary(cut) {
            cut -= 1;
        }
        what.truncate(cut);
        what.push('…');
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn cairn");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    Running {
        child,
        what: format!("cairn {what}"),
        started: Instant::now(),
        out,
        err,
    }
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the exit; past the deadline the process is killed and the test fails.
    fn finish(mut self) -> Output {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for cairn") {
                break s;
            }
            if self.started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = self.err.join().unwrap();
                panic!(
                    "{} still running after {DEADLINE:?} (a hang); killed. stderr:\n{}",
                    self.what,
                    String::from_utf8_lossy(&err)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Output {
            status,
            stdout: self.out.join().unwrap(),
            stderr: self.err.join().unwrap(),
        }
    }
}

fn run(cmd: Command) -> Output {
    spawn(cmd).finish()
}

/// Asserts the exit status and that cairn did not panic.
fn expect_code(o: &Output, code: i32, what: &str) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{what}: cairn panicked:\n{err}");
    assert_eq!(
        o.status.code(),
        Some(code),
        "{what}: exit status; stderr:\n{err}"
    );
}

/// `create NAME PATHS…` in `cwd`.
fn create(repo: &Repo, cwd: &Path, name: &str, paths: &[&str]) -> Output {
    let mut args = vec!["create", name];
    args.extend_from_slice(paths);
    run(cairn_cmd(repo, cwd, &args))
}

/// `extract NAME [PATHS…] --target TARGET`, which must succeed (exit 0).
fn extract(repo: &Repo, name: &str, paths: &[&str], target: &Path) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("extract"), OsStr::new(name)];
    args.extend(paths.iter().map(OsStr::new));
    args.extend([OsStr::new("--target"), target.as_os_str()]);
    let o = run(cairn_cmd(repo, repo.dir.path(), &args));
    expect_code(&o, 0, &format!("extract {name}"));
}

/// The paths an archive holds, as raw bytes (from `list --json-lines`).
fn listed_paths(repo: &Repo, name: &str) -> BTreeSet<Vec<u8>> {
    let o = run(cairn_cmd(
        repo,
        repo.dir.path(),
        &["list", name, "--json-lines"],
    ));
    expect_code(&o, 0, &format!("list {name}"));
    stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            match v["path_hex"].as_str() {
                Some(h) => hex::decode(h).unwrap(),
                None => v["path"].as_str().unwrap().as_bytes().to_vec(),
            }
        })
        .collect()
}

/// The paths under `cwd/root` (itself included) as cairn stores them (relative to `cwd`).
fn tree_paths(cwd: &Path, root: &str) -> BTreeSet<Vec<u8>> {
    walkdir::WalkDir::new(cwd.join(root))
        .into_iter()
        .map(|e| {
            e.unwrap()
                .path()
                .strip_prefix(cwd)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec()
        })
        .collect()
}

/// The warning lines of a run's stderr.
fn warnings(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .map(str::to_string)
        .collect()
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

/// One entry of each tree: type, mode, owner, mtime (ns), size, contents, link target.
fn assert_entry_equal(a: &Path, b: &Path) {
    let ma = fs::symlink_metadata(a).unwrap();
    let mb =
        fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{}: not restored: {e}", b.display()));
    let what = a.display();
    assert_eq!(ma.mode(), mb.mode(), "{what}: type and mode");
    assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{what}: owner");
    assert_eq!(
        (ma.mtime(), ma.mtime_nsec()),
        (mb.mtime(), mb.mtime_nsec()),
        "{what}: mtime"
    );
    if ma.is_file() {
        assert_eq!(ma.len(), mb.len(), "{what}: size");
        assert!(
            fs::read(a).unwrap() == fs::read(b).unwrap(),
            "{what}: contents"
        );
    }
    if ma.file_type().is_symlink() {
        assert_eq!(fs::read_link(a).unwrap(), fs::read_link(b).unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// Trees reached through descriptors (paths longer than PATH_MAX from `/`).

fn open_dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> OwnedFd {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("open directory {}: {e}", String::from_utf8_lossy(name)))
}

fn names_at(dir: BorrowedFd<'_>) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = rustix::fs::Dir::read_from(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect();
    v.sort();
    v
}

fn read_at(dir: BorrowedFd<'_>, name: &[u8]) -> Vec<u8> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let mut v = Vec::new();
    fs::File::from(fd).read_to_end(&mut v).unwrap();
    v
}

/// `assert_trees_equal` through descriptors, one component at a time, so that no path handed
/// to the kernel is longer than a name. Returns every path (relative to the roots) and the
/// longest one's length.
fn assert_trees_equal_at(a: &Path, b: &Path) -> (usize, usize) {
    fn walk(
        a: BorrowedFd<'_>,
        b: BorrowedFd<'_>,
        rel: &mut Vec<u8>,
        count: &mut usize,
        longest: &mut usize,
    ) {
        let na = names_at(a);
        let nb = names_at(b);
        let shown = String::from_utf8_lossy(rel).into_owned();
        assert_eq!(na, nb, "{shown}: the directories hold different names");
        for name in na {
            let len = rel.len();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(&name);
            *count += 1;
            *longest = (*longest).max(rel.len());
            let what = String::from_utf8_lossy(rel).into_owned();
            let sa = rustix::fs::statat(a, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW).unwrap();
            let sb = rustix::fs::statat(b, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW).unwrap();
            assert_eq!(sa.st_mode, sb.st_mode, "{what}: type and mode");
            assert_eq!(
                (sa.st_uid, sa.st_gid),
                (sb.st_uid, sb.st_gid),
                "{what}: owner"
            );
            assert_eq!(
                (sa.st_mtime, sa.st_mtime_nsec),
                (sb.st_mtime, sb.st_mtime_nsec),
                "{what}: mtime"
            );
            assert_eq!(sa.st_rdev, sb.st_rdev, "{what}: rdev");
            match rustix::fs::FileType::from_raw_mode(sa.st_mode) {
                rustix::fs::FileType::Directory => {
                    let da = open_dir_at(a, &name);
                    let db = open_dir_at(b, &name);
                    walk(da.as_fd(), db.as_fd(), rel, count, longest);
                }
                rustix::fs::FileType::RegularFile => {
                    assert_eq!(sa.st_size, sb.st_size, "{what}: size");
                    assert!(read_at(a, &name) == read_at(b, &name), "{what}: contents");
                }
                rustix::fs::FileType::Symlink => {
                    assert_eq!(
                        rustix::fs::readlinkat(a, name.as_slice(), Vec::new()).unwrap(),
                        rustix::fs::readlinkat(b, name.as_slice(), Vec::new()).unwrap(),
                        "{what}: target"
                    );
                }
                _ => {}
            }
            rel.truncate(len);
        }
    }
    let da = fs::File::open(a).unwrap();
    let db = fs::File::open(b).unwrap();
    let (mut count, mut longest) = (0, 0);
    walk(
        da.as_fd(),
        db.as_fd(),
        &mut Vec::new(),
        &mut count,
        &mut longest,
    );
    (count, longest)
}

fn write_at(dir: BorrowedFd<'_>, name: &[u8], data: &[u8]) {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    fs::File::from(fd).write_all(data).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Files that change while they are read.

/// The read offset of `cairn` (pid) in `path`, if it has the file open.
fn read_position(pid: u32, path: &Path) -> Option<u64> {
    for fd in fs::read_dir(format!("/proc/{pid}/fd")).ok()? {
        let Ok(fd) = fd else { continue };
        if fs::read_link(fd.path()).ok().as_deref() != Some(path) {
            continue;
        }
        let info =
            fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_str()?)).ok()?;
        return info
            .lines()
            .find_map(|l| l.strip_prefix("pos:"))
            .and_then(|p| p.trim().parse().ok());
    }
    None
}

/// What the meddling thread did while cairn was running.
#[derive(Debug, Default)]
struct Meddled {
    /// Bytes appended to the growing file while cairn had it open.
    appended: usize,
    /// The read position at which the shrinking file was truncated.
    truncated_at: Option<u64>,
}

const CHANGING_SIZE: usize = 40 << 20;
const APPEND_STEP: usize = 1 << 20;
const APPEND_MAX: usize = 8 << 20;
const SHRUNK_SIZE: u64 = 8 << 20;

/// Watches cairn's descriptors: while it reads `grow` (read position past 0), appends 1 MiB
/// steps (at most 8 MiB, so a reader chasing the end always catches up); once it reads
/// `shrink`, truncates it to 8 MiB.
fn meddle(pid: u32, grow: &Path, shrink: &Path, appendix: &[u8], stop: &AtomicBool) -> Meddled {
    let mut m = Meddled::default();
    let start = Instant::now();
    while !stop.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
        let mut busy = false;
        if m.appended < APPEND_MAX && read_position(pid, grow).is_some_and(|p| p > 0) {
            let mut f = fs::OpenOptions::new().append(true).open(grow).unwrap();
            f.write_all(&appendix[m.appended..m.appended + APPEND_STEP])
                .unwrap();
            m.appended += APPEND_STEP;
            busy = true;
            std::thread::sleep(Duration::from_millis(3));
        }
        if m.truncated_at.is_none() {
            if let Some(pos) = read_position(pid, shrink).filter(|&p| p > 0) {
                fs::OpenOptions::new()
                    .write(true)
                    .open(shrink)
                    .unwrap()
                    .set_len(SHRUNK_SIZE)
                    .unwrap();
                m.truncated_at = Some(pos);
                busy = true;
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    m
}

/// A file that grows and one that shrinks while `create` reads them. The race is steered by
/// watching cairn's read position in /proc, but a change may still land just outside the read
/// window; so: no hang, exit 0 or 1, a file whose stored contents are not exactly its contents
/// at open time is named by a "changed while it was read" warning, what was stored is a prefix
/// of what the file held, and the other files round-trip. A second backup, once the files are
/// still, round-trips everything.
#[test]
fn files_growing_or_shrinking_while_read() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path().canonicalize().unwrap();
    let src = base.join("src");
    fs::create_dir_all(src.join("stable/sub")).unwrap();
    fs::write(src.join("stable/a.txt"), b"alpha\n").unwrap();
    fs::write(src.join("stable/sub/b.bin"), random_bytes(90, 1_500_000)).unwrap();
    fs::write(src.join("stable/z.txt"), "zeta\n".repeat(10_000)).unwrap();
    let grow = src.join("grow.bin");
    let shrink = src.join("shrink.bin");
    let grow_orig = random_bytes(91, CHANGING_SIZE);
    let shrink_orig = random_bytes(92, CHANGING_SIZE);
    fs::write(&grow, &grow_orig).unwrap();
    fs::write(&shrink, &shrink_orig).unwrap();
    let appendix = random_bytes(93, APPEND_MAX);

    let running = spawn(cairn_cmd(&repo, &base, &["create", "changing", "src"]));
    let pid = running.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (grow, shrink, stop) = (grow.clone(), shrink.clone(), stop.clone());
        std::thread::spawn(move || meddle(pid, &grow, &shrink, &appendix, &stop))
    };
    let o = running.finish();
    stop.store(true, Ordering::SeqCst);
    let m = watcher.join().unwrap();

    let err = stderr(&o);
    assert!(!err.contains("panicked"), "cairn panicked:\n{err}");
    let code = o.status.code();
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}:\n{err}");
    let warned = warnings(&o);
    let changed_warning = |p: &str| format!("warning: src/{p}: file changed while it was read");
    for w in &warned {
        assert!(
            *w == changed_warning("grow.bin") || *w == changed_warning("shrink.bin"),
            "unexpected warning: {w}"
        );
    }
    assert_eq!(
        code == Some(1),
        !warned.is_empty(),
        "exit status vs warnings:\n{err}"
    );

    let target = base.join("restore");
    extract(&repo, "changing", &[], &target);
    assert_trees_equal(&src.join("stable"), &target.join("src/stable"));
    let grow_now = fs::read(&grow).unwrap();
    let shrink_now = fs::read(&shrink).unwrap();
    let grow_back = fs::read(target.join("src/grow.bin")).unwrap();
    let shrink_back = fs::read(target.join("src/shrink.bin")).unwrap();
    // Appends only add at the end: what was read is the original and part of what followed.
    assert!(grow_back.len() >= CHANGING_SIZE, "grow.bin lost data");
    assert!(
        grow_now.starts_with(&grow_back),
        "grow.bin: stored bytes not from the file"
    );
    // Truncation only removes at the end: what was read is a prefix of the original, at least
    // as long as what remains.
    assert!(
        shrink_back.len() >= shrink_now.len(),
        "shrink.bin lost data"
    );
    assert!(
        shrink_orig.starts_with(&shrink_back),
        "shrink.bin: stored bytes not from the file"
    );
    for (name, back) in [("grow.bin", &grow_back), ("shrink.bin", &shrink_back)] {
        if back.len() != CHANGING_SIZE {
            assert!(
                warned.contains(&changed_warning(name)),
                "{name}: stored {} bytes of {} without a warning:\n{err}",
                back.len(),
                CHANGING_SIZE
            );
        }
    }

    // Once still, the same files back up cleanly (a flagged file was not cached as good).
    let o = create(&repo, &base, "changing", &["src"]);
    expect_code(&o, 0, "second create");
    let target2 = base.join("restore2");
    extract(&repo, "changing", &[], &target2);
    assert_trees_equal(&src, &target2.join("src"));

    eprintln!(
        "source adversity / changing files: exit {code:?}; grow.bin +{} MiB appended while open, \
         stored {} of {} bytes; shrink.bin truncated at read position {:?}, stored {} bytes; \
         warnings {:?}; {:.1} s",
        m.appended >> 20,
        grow_back.len(),
        grow_now.len(),
        m.truncated_at,
        shrink_back.len(),
        warned,
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Unreadable entries.

/// Files and directories the backup user may not read (mode 000, a directory it may enter but
/// not list, one it may list but not enter) are each reported; the rest is saved, exit 1. The
/// backup runs as `nobody` when the test runs as root.
#[test]
fn unreadable_files_and_directories_are_reported_and_the_rest_saved() {
    let t0 = Instant::now();
    let base = tempfile::tempdir().unwrap();
    let base = base.path();
    fs::set_permissions(base, fs::Permissions::from_mode(0o777)).unwrap();
    let src = base.join("src");
    for d in [
        "src/ok/sub",
        "src/locked/sub",
        "src/open/nolist",
        "src/open/noenter/subdir",
    ] {
        fs::create_dir_all(base.join(d)).unwrap();
    }
    for (f, data) in [
        ("ok/a.txt", b"a".to_vec()),
        ("ok/sub/b.bin", random_bytes(1, 200_000)),
        ("secret.bin", b"no access".to_vec()),
        ("locked/inside.txt", b"hidden".to_vec()),
        ("locked/sub/deeper.txt", b"deeper".to_vec()),
        ("open/fine.txt", b"fine".to_vec()),
        ("open/hidden.txt", b"hidden too".to_vec()),
        ("open/nolist/x.txt", b"x".to_vec()),
        ("open/noenter/y.txt", b"y".to_vec()),
        ("zz-tail.txt", b"after all of them".to_vec()),
    ] {
        fs::write(src.join(f), data).unwrap();
    }
    for (p, mode) in [
        ("secret.bin", 0o000),
        ("locked", 0o000),
        ("open/hidden.txt", 0o000),
        ("open/nolist", 0o311),
        ("open/noenter", 0o644),
    ] {
        fs::set_permissions(src.join(p), fs::Permissions::from_mode(mode)).unwrap();
    }
    let repo = base.join("repo");
    let cache = base.join("cache");
    let cmd = |args: &[&str], unprivileged: bool| {
        let bin = env!("CARGO_BIN_EXE_cairn");
        let mut cmd = if unprivileged && is_root() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            Command::new(bin)
        };
        for (k, _) in std::env::vars_os() {
            if k.as_bytes().starts_with(b"CAIRN_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .env("CAIRN_REPO", &repo)
            .env("CAIRN_PASSPHRASE", "pw")
            .env("CAIRN_TEST_CHEAP_KDF", "1")
            .env("XDG_CACHE_HOME", &cache)
            .env("HOME", base)
            .current_dir(base);
        cmd
    };
    expect_code(&run(cmd(&["init"], true)), 0, "init");
    let o = run(cmd(&["create", "u", "src"], true));
    expect_code(&o, 1, "create as an unprivileged user");
    let warned = warnings(&o);
    // Each refused entry is named by a warning; nothing else is warned about. (A directory
    // that can be listed but not entered currently yields two warnings per subdirectory: the
    // failed stat and the failed descent.)
    let refused = [
        "src/secret.bin",
        "src/locked",
        "src/open/hidden.txt",
        "src/open/nolist",
        "src/open/noenter/subdir",
        "src/open/noenter/y.txt",
    ];
    for p in refused {
        assert!(
            warned
                .iter()
                .any(|w| w.starts_with(&format!("warning: {p}: "))),
            "{p} not reported:\n{}",
            stderr(&o)
        );
    }
    for w in &warned {
        assert!(
            refused
                .iter()
                .any(|p| w.starts_with(&format!("warning: {p}: "))),
            "unexpected warning: {w}"
        );
    }

    // Extract as the test user (root in CI: owners are restored and compared).
    let target = base.join("restore");
    let t = target.to_str().unwrap();
    expect_code(
        &run(cmd(&["extract", "u", "--target", t], false)),
        0,
        "extract",
    );
    let restored: BTreeSet<_> = walkdir::WalkDir::new(&target)
        .min_depth(1)
        .into_iter()
        .filter_map(|e| match e {
            Ok(e) => Some(e.path().strip_prefix(&target).unwrap().to_path_buf()),
            // Not root: the restored directories without read permission cannot be listed.
            Err(e)
                if !is_root()
                    && e.io_error().map(|e| e.kind())
                        == Some(std::io::ErrorKind::PermissionDenied) =>
            {
                None
            }
            Err(e) => panic!("{e}"),
        })
        .collect();
    // Directories whose metadata could be read are kept (mode included), without what could
    // not be read inside them.
    let expected: BTreeSet<PathBuf> = [
        "src",
        "src/ok",
        "src/ok/a.txt",
        "src/ok/sub",
        "src/ok/sub/b.bin",
        "src/locked",
        "src/open",
        "src/open/fine.txt",
        "src/open/nolist",
        "src/open/noenter",
        "src/zz-tail.txt",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    assert_eq!(restored, expected);
    for p in &expected {
        assert_entry_equal(&base.join(p), &target.join(p));
    }
    assert_trees_equal(&src.join("ok"), &target.join("src/ok"));
    // Let the temporary directory be removed by a non-root test user too.
    for p in ["locked", "open/nolist", "open/noenter"] {
        fs::set_permissions(src.join(p), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(
            target.join("src").join(p),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    eprintln!(
        "source adversity / unreadable entries: exit 1, {} warnings, {} entries restored; {:.1} s",
        warned.len(),
        restored.len(),
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Special files.

/// Fifos nobody writes to — inside the tree and given as a path of their own — are stored as
/// fifos without being opened (no hang) and restored as fifos.
#[test]
fn fifos_without_a_writer_do_not_hang_and_are_restored_as_fifos() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("dir")).unwrap();
    fs::write(src.join("before.txt"), b"before").unwrap();
    fs::write(src.join("zafter.txt"), random_bytes(3, 100_000)).unwrap();
    let mode = |m| nix::sys::stat::Mode::from_bits_truncate(m);
    nix::unistd::mkfifo(&src.join("fifo"), mode(0o640)).unwrap();
    nix::unistd::mkfifo(&src.join("dir/fifo-600"), mode(0o600)).unwrap();
    nix::unistd::mkfifo(&base.join("lone-fifo"), mode(0o644)).unwrap();
    fs::set_permissions(src.join("fifo"), fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&src.join("fifo"), 1_500_000_000, 123_456_789);
    let o = create(&repo, base, "fifos", &["src", "lone-fifo"]);
    expect_code(&o, 0, "create");
    let target = base.join("restore");
    extract(&repo, "fifos", &[], &target);
    assert_trees_equal(&src, &target.join("src"));
    assert_entry_equal(&base.join("lone-fifo"), &target.join("lone-fifo"));
    for p in ["src/fifo", "src/dir/fifo-600", "lone-fifo"] {
        let ft = fs::symlink_metadata(target.join(p)).unwrap().file_type();
        assert!(ft.is_fifo(), "{p} restored as {ft:?}");
    }
    eprintln!(
        "source adversity / fifos: exit 0, 3 fifos stored and restored, no hang; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// A unix socket is skipped with a note (exit 0); everything else round-trips.
#[test]
fn sockets_are_skipped_and_the_rest_round_trips() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("sockdir")).unwrap();
    fs::write(src.join("a.txt"), b"a").unwrap();
    fs::write(src.join("sockdir/b.txt"), b"b").unwrap();
    let listener = std::os::unix::net::UnixListener::bind(src.join("sockdir/sock")).unwrap();
    let top = std::os::unix::net::UnixListener::bind(src.join("top.sock")).unwrap();
    let o = create(&repo, base, "sock", &["src"]);
    expect_code(&o, 0, "create");
    assert!(
        stderr(&o).contains("skipping socket src/sockdir/sock"),
        "{}",
        stderr(&o)
    );
    let listed = listed_paths(&repo, "sock");
    // The archive holds exactly the tree without its sockets.
    drop((listener, top));
    let keep = |d: &Path, f: &str| {
        let md = fs::symlink_metadata(d).unwrap();
        fs::remove_file(d.join(f)).unwrap();
        set_mtime(d, md.mtime(), md.mtime_nsec());
    };
    keep(&src.join("sockdir"), "sock");
    keep(&src, "top.sock");
    assert_eq!(listed, tree_paths(base, "src"));
    let target = base.join("restore");
    extract(&repo, "sock", &[], &target);
    assert_trees_equal(&src, &target.join("src"));
    eprintln!(
        "source adversity / sockets: exit 0, 2 sockets skipped, {} entries round-trip; {:.1} s",
        listed.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// Symlink loops (a → b → a, a link to itself, links to `.` and `..`, an absolute link to
/// itself, a 41-link cycle), a target of 4095 bytes (the longest the kernel takes) and one of
/// non-UTF-8 bytes are stored and restored verbatim, never followed — also when a loop is
/// given as a path on the command line.
#[test]
fn symlink_loops_are_stored_and_restored_verbatim() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path().canonicalize().unwrap();
    let src = base.join("src");
    let l = src.join("loops");
    fs::create_dir_all(&l).unwrap();
    fs::write(src.join("plain.txt"), b"plain").unwrap();
    symlink("b", l.join("a")).unwrap();
    symlink("a", l.join("b")).unwrap();
    symlink("self", l.join("self")).unwrap();
    symlink(l.join("abs-self"), l.join("abs-self")).unwrap();
    symlink(".", l.join("dot")).unwrap();
    symlink("..", l.join("up")).unwrap();
    symlink("../loops/up/loops", l.join("around")).unwrap();
    for i in 0..41 {
        symlink(format!("ring{}", (i + 1) % 41), l.join(format!("ring{i}"))).unwrap();
    }
    let long_target = format!("{}xyz", "../".repeat(1364));
    assert_eq!(long_target.len(), 4095);
    symlink(&long_target, l.join("long-target")).unwrap();
    symlink(
        OsStr::from_bytes(b"\xff\xfe/\x01\n odd \\ target"),
        l.join("odd-target"),
    )
    .unwrap();
    set_mtime(&l.join("a"), 1_400_000_000, 987_654_321);
    let o = create(&repo, &base, "loops", &["src"]);
    expect_code(&o, 0, "create");
    let target = base.join("restore");
    extract(&repo, "loops", &[], &target);
    assert_trees_equal(&src, &target.join("src"));
    assert_eq!(
        fs::read_link(target.join("src/loops/long-target"))
            .unwrap()
            .as_os_str()
            .len(),
        4095
    );

    // Loops as the paths to back up: stored as the links themselves.
    let o = create(
        &repo,
        &base,
        "args",
        &["src/loops/a", "src/loops/self", "src/loops/dot"],
    );
    expect_code(&o, 0, "create with loops as arguments");
    let listed = listed_paths(&repo, "args");
    let want: BTreeSet<Vec<u8>> = ["src/loops/a", "src/loops/self", "src/loops/dot"]
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    assert_eq!(listed, want);
    let target2 = base.join("restore2");
    extract(&repo, "args", &[], &target2);
    for p in ["src/loops/a", "src/loops/self", "src/loops/dot"] {
        assert_entry_equal(&base.join(p), &target2.join(p));
    }
    eprintln!(
        "source adversity / symlink loops: exit 0, {} links restored verbatim; {:.1} s",
        fs::read_dir(&l).unwrap().count(),
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Long paths and odd names.

/// Paths at the kernel's limit. PATH_MAX (4096) bounds the string handed to one system call,
/// terminating NUL included, so the longest path a tool can open whole is 4095 bytes. create
/// walks by descriptors, one component at a time (each directory opened relative to its
/// parent), so it never hands the kernel more than one name below a root: a tree deeper than
/// PATH_MAX is stored whole (a walk by paths reported the 4096-byte file as unreadable, exit
/// 1). extract reaches everything one component at a time too, so it restores those paths
/// under a target of any depth; the comparison here does the same through descriptors. Names
/// of 255 bytes (NAME_MAX) are covered alongside.
#[test]
fn paths_at_path_max_and_names_at_name_max() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("deep")).unwrap();
    // deep + 15 × "/<255 bytes>" = 3844 bytes; a 250-byte name below makes 4095.
    let deep = fs::File::open(src.join("deep")).unwrap();
    let mut dir: OwnedFd = deep.into();
    let mut rel = b"deep".to_vec();
    for i in 0..15u8 {
        let mut name = vec![b'a' + i; 255];
        name[0] = b'0' + i % 10;
        rustix::fs::mkdirat(&dir, name.as_slice(), Mode::from_raw_mode(0o755)).unwrap();
        dir = open_dir_at(dir.as_fd(), &name);
        rel.push(b'/');
        rel.extend_from_slice(&name);
    }
    assert_eq!(rel.len(), 3844);
    let bottom = |c: u8, len: usize| {
        let mut n = vec![b'x'; len];
        n[0] = c;
        n
    };
    write_at(
        dir.as_fd(),
        &bottom(b'f', 250),
        b"at the bottom of 4095 bytes",
    );
    rustix::fs::mkdirat(
        &dir,
        bottom(b'd', 250).as_slice(),
        Mode::from_raw_mode(0o700),
    )
    .unwrap();
    rustix::fs::symlinkat("../target", &dir, bottom(b'l', 250).as_slice()).unwrap();
    write_at(dir.as_fd(), &bottom(b'F', 249), b"one byte shorter");
    // NAME_MAX: 255-byte names for a file, a directory, a file in it, a symlink and its target,
    // and one of two-byte characters.
    let n = src.join("names255");
    fs::create_dir_all(n.join("d".repeat(255))).unwrap();
    fs::write(n.join("f".repeat(255)), b"255").unwrap();
    fs::write(n.join("d".repeat(255)).join("g".repeat(255)), b"255/255").unwrap();
    symlink("t".repeat(255), n.join("l".repeat(255))).unwrap();
    fs::write(n.join(format!("{}x", "é".repeat(127))), b"utf-8").unwrap();

    let o = create(&repo, &src, "long", &["deep", "names255"]);
    expect_code(&o, 0, "create");
    let listed = listed_paths(&repo, "long");
    let longest = listed.iter().map(Vec::len).max().unwrap();
    assert_eq!(longest, 4095);
    let at_max = listed.iter().filter(|p| p.len() == 4095).count();
    assert_eq!(
        at_max, 3,
        "the file, directory and symlink at 4095 bytes are stored"
    );
    let target = base.join("restore");
    extract(&repo, "long", &[], &target);
    let (count, deepest) = assert_trees_equal_at(&src, &target);
    assert_eq!(deepest, 4095);
    assert_eq!(count, listed.len());

    // Past PATH_MAX: a walk by descriptors never hands the kernel a whole path, so a tree
    // deeper than any path can name is stored, and restored the same way.
    let too_long = bottom(b'g', 251);
    write_at(dir.as_fd(), &too_long, b"out of reach of any path");
    let o = create(&repo, &src, "long", &["deep", "names255"]);
    expect_code(&o, 0, "create with a 4096-byte path");
    let listed2 = listed_paths(&repo, "long");
    assert_eq!(listed2.iter().map(Vec::len).max(), Some(4096));
    assert_eq!(listed2.len(), listed.len() + 1);
    let target2 = base.join("restore2");
    extract(&repo, "long", &[], &target2);
    let (count2, deepest2) = assert_trees_equal_at(&src, &target2);
    assert_eq!((count2, deepest2), (count + 1, 4096));
    eprintln!(
        "source adversity / PATH_MAX: {count} entries down to 4095 bytes round-trip (exit 0), \
         and a 4096-byte path too; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Names made of every byte but `/` and NUL: one file per byte (`...` for the byte `.`, which
/// alone would be the directory itself), one per byte tripled, and a 254-byte name holding
/// them all — as a file, and as a directory holding a file named by its reverse.
#[test]
fn names_of_every_byte_round_trip() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("names");
    fs::create_dir_all(src.join("single")).unwrap();
    fs::create_dir_all(src.join("triple")).unwrap();
    let bytes: Vec<u8> = (1..=255u8).filter(|&b| b != b'/').collect();
    assert_eq!(bytes.len(), 254);
    for &b in &bytes {
        let single = if b == b'.' { vec![b'.'; 3] } else { vec![b] };
        fs::write(src.join("single").join(OsStr::from_bytes(&single)), [b]).unwrap();
        fs::write(
            src.join("triple").join(OsStr::from_bytes(&[b; 3])),
            [b, b, b],
        )
        .unwrap();
    }
    let all = OsStr::from_bytes(&bytes);
    let reversed: Vec<u8> = bytes.iter().rev().copied().collect();
    fs::write(src.join(all), &bytes).unwrap();
    fs::create_dir(src.join("in-dir")).unwrap();
    fs::create_dir(src.join("in-dir").join(all)).unwrap();
    fs::write(
        src.join("in-dir")
            .join(all)
            .join(OsStr::from_bytes(&reversed)),
        &reversed,
    )
    .unwrap();
    symlink(all, src.join("link-to-all")).unwrap();

    let o = create(&repo, base, "bytes", &["names"]);
    expect_code(&o, 0, "create");
    let listed = listed_paths(&repo, "bytes");
    assert_eq!(listed, tree_paths(base, "names"));
    let target = base.join("restore");
    extract(&repo, "bytes", &[], &target);
    assert_trees_equal(&src, &target.join("names"));
    eprintln!(
        "source adversity / every byte in names: exit 0, {} entries listed and restored exactly; \
         {:.1} s",
        listed.len(),
        t0.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Sparse files and hardlinks.

/// Large holes (in the middle, at the end, a file that is all hole, one that starts with a
/// hole) round-trip exactly and come back as holes.
#[test]
fn sparse_files_round_trip_as_holes() {
    use std::os::unix::fs::FileExt;
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    let mid = fs::File::create(src.join("mid.img")).unwrap();
    mid.write_all_at(&random_bytes(5, 4096), 0).unwrap();
    mid.write_all_at(
        b"data in the middle, across a block boundary",
        (32 << 20) - 7,
    )
    .unwrap();
    mid.set_len(64 << 20).unwrap();
    let hole = fs::File::create(src.join("all-hole.img")).unwrap();
    hole.set_len(16 << 20).unwrap();
    let tail = fs::File::create(src.join("tail.img")).unwrap();
    tail.write_all_at(&random_bytes(6, 1 << 20), 16 << 20)
        .unwrap();
    drop((mid, hole, tail));
    for f in ["mid.img", "all-hole.img", "tail.img"] {
        let used = fs::metadata(src.join(f)).unwrap().blocks() * 512;
        assert!(
            used < 2 << 20,
            "{f}: the source is not sparse ({used} bytes)"
        );
    }
    let o = create(&repo, base, "sparse", &["src"]);
    expect_code(&o, 0, "create");
    let target = base.join("restore");
    extract(&repo, "sparse", &[], &target);
    assert_trees_equal(&src, &target.join("src"));
    let mut report = Vec::new();
    for (f, data) in [
        ("mid.img", 8192u64),
        ("all-hole.img", 0),
        ("tail.img", 1 << 20),
    ] {
        let used = fs::metadata(target.join("src").join(f)).unwrap().blocks() * 512;
        assert!(
            used <= data + (256 << 10),
            "{f}: restored with {used} bytes allocated for {data} bytes of data"
        );
        report.push(format!("{f} {} KiB allocated", used >> 10));
    }
    eprintln!(
        "source adversity / sparse: exit 0, contents exact, {}; {:.1} s",
        report.join(", "),
        t0.elapsed().as_secs_f64()
    );
}

/// Hardlinked files (four names in different directories; two empty names; a file and a
/// partner in the same directory) are restored linked as they were; extracting only later
/// names restores the contents, linked together.
#[test]
fn hardlinks_across_directories_round_trip() {
    let t0 = Instant::now();
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    for d in ["a", "b/c", "d", "e"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::write(src.join("a/x"), random_bytes(8, 3_000_000)).unwrap();
    for p in ["b/c/y", "d/z", "top"] {
        fs::hard_link(src.join("a/x"), src.join(p)).unwrap();
    }
    fs::write(src.join("e/empty"), b"").unwrap();
    fs::hard_link(src.join("e/empty"), src.join("a/empty-too")).unwrap();
    fs::write(src.join("d/pair-1"), b"pair").unwrap();
    fs::hard_link(src.join("d/pair-1"), src.join("d/pair-2")).unwrap();
    fs::write(src.join("d/single"), b"alone").unwrap();
    assert_eq!(fs::metadata(src.join("top")).unwrap().nlink(), 4);

    let o = create(&repo, base, "links", &["src"]);
    expect_code(&o, 0, "create");
    let target = base.join("restore");
    extract(&repo, "links", &[], &target);
    assert_trees_equal(&src, &target.join("src"));
    let ino = |p: &str| fs::metadata(target.join(p)).unwrap().ino();
    let first = ino("src/a/x");
    for p in ["src/b/c/y", "src/d/z", "src/top"] {
        assert_eq!(ino(p), first, "{p} not linked to src/a/x");
    }
    assert_eq!(fs::metadata(target.join("src/a/x")).unwrap().nlink(), 4);
    assert_eq!(ino("src/a/empty-too"), ino("src/e/empty"));
    assert_eq!(ino("src/d/pair-1"), ino("src/d/pair-2"));

    // Only later names of the group: each carries the contents; they are linked together.
    let part = base.join("partial");
    extract(&repo, "links", &["src/d/z", "src/b/c/y"], &part);
    for p in ["src/d/z", "src/b/c/y"] {
        assert_entry_equal(&src.join(&p[4..]), &part.join(p));
    }
    assert_eq!(
        fs::metadata(part.join("src/d/z")).unwrap().ino(),
        fs::metadata(part.join("src/b/c/y")).unwrap().ino()
    );
    assert!(!part.join("src/a/x").exists());
    eprintln!(
        "source adversity / hardlinks: exit 0, 3 groups (4, 2, 2 names) restored linked; partial \
         extract of later names ok; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
