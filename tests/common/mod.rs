//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Output};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cairn::crypto::{Crypto, EncryptionMode, MasterKey, Padding};
use cairn::format::blob::seal_chunk;
use cairn::store::{Release, Store, StoreResult};
use cairn::util::id::ChunkId;

/// The passphrase of every repository the [`Repo`] helper makes.
pub const PASSPHRASE: &[u8] = b"test passphrase";

pub fn crypto() -> Arc<Crypto> {
    Arc::new(Crypto::new(
        EncryptionMode::Repokey,
        &MasterKey::generate(),
        Padding::None,
    ))
}

/// Incompressible pseudo-random bytes.
pub fn random_bytes(seed: u64, size: usize) -> Vec<u8> {
    let mut data = vec![0u8; size];
    let mut x = (seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    data
}

/// `n` distinct sealed chunks of about `size` bytes.
pub fn chunks(c: &Crypto, n: usize, size: usize) -> Vec<(ChunkId, Vec<u8>)> {
    (0..n)
        .map(|i| seal_chunk(c, &random_bytes(i as u64, size)).unwrap())
        .collect()
}

/// A store whose puts block until the test opens the gate: makes "the store of pack N is
/// still running" a state the test controls, so overlap is shown by event order, not timing.
pub struct GatedStore {
    pub inner: Arc<dyn Store>,
    open: Mutex<bool>,
    cv: Condvar,
    /// Gives a put's bytes back before waiting at the gate, as a local disk gives them back
    /// before its flush ([`Store::put_releasing`]); otherwise only when the put ends.
    releases_early: bool,
}

impl GatedStore {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            open: Mutex::new(false),
            cv: Condvar::new(),
            releases_early: false,
        })
    }

    /// A gated store that gives each put's bytes back at once, then waits at the gate: a
    /// disk whose flushes the test holds.
    pub fn releasing_early(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            open: Mutex::new(false),
            cv: Condvar::new(),
            releases_early: true,
        })
    }

    pub fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
}

impl cairn::store::wrapper::Wrapper for GatedStore {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn get_into(
        &self,
        name: &str,
        range: Option<cairn::store::ByteRange>,
        buf: &mut Vec<u8>,
    ) -> StoreResult<()> {
        self.inner().get_into(name, range, buf)
    }
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.wait();
        self.inner.put(name, data)
    }
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        if !self.releases_early {
            let done = cairn::store::wrapper::Wrapper::put(self, name, &data);
            release(data);
            return done;
        }
        let copy = data.clone();
        release(data);
        self.wait();
        self.inner.put(name, &copy)
    }
    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.wait();
        self.inner.create_new(name, data)
    }
}

/// A small deterministic random number generator (xorshift) for tests that must be
/// reproducible from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Waits until `f` holds (polling), failing the test after 10 s.
pub fn wait_until(mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed().as_secs() < 10,
            "condition not reached in 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Runs the real binary with a scrubbed environment (no CAIRN_* from the caller), cheap KDF
/// parameters, and the given extra variables.
pub fn cairn(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    cairn_command(args, env).output().expect("run cairn")
}

/// The command [`cairn`] runs, for a caller that sets more (a working directory).
/// The `encryption` a repository made by a plain `init` records in its config: the suite this
/// CPU is fastest with, or the one a pass of the suite asks for.
pub fn default_encryption() -> String {
    std::env::var("CAIRN_TEST_ENCRYPTION")
        .unwrap_or_else(|_| format!("repokey-{}", cairn::crypto::Suite::fastest_here().as_str()))
}

/// The name an attacker gives bytes planted as a pack of the repository at `repo`, to keep
/// names honest: their hash under the repository's suite, which its plaintext config says.
pub fn planted_pack_id(repo: &Path, bytes: &[u8]) -> cairn::util::id::PackId {
    let config =
        cairn::repo::config::Config::parse(&std::fs::read(repo.join("config")).unwrap()).unwrap();
    cairn::util::id::PackId(cairn::crypto::suite::PackHasher::digest(
        config.suite().unwrap(),
        bytes,
    ))
}

/// What every cairn the tests run gets: cheap key derivation, and the cipher suite `init`
/// picks by default when a pass of the suite asks for one (scripts/test.sh runs the
/// hostile-host tests again in the suite this CPU does not pick).
fn test_env(cmd: &mut std::process::Command) {
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1");
    if let Ok(e) = std::env::var("CAIRN_TEST_ENCRYPTION") {
        cmd.env("CAIRN_ENCRYPTION", e);
    }
}

pub fn cairn_command(args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    test_env(&mut cmd);
    cmd.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("cairn-test-cache"),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args);
    cmd.stdin(std::process::Stdio::null());
    cmd
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compares two trees entry by entry: type, mode, size, contents, symlink targets, mtime
/// (ns), owner, device numbers, user xattrs, and hardlink structure. Panics on a difference.
pub fn assert_trees_equal(a: &std::path::Path, b: &std::path::Path) {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let list = |root: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = walkdir::WalkDir::new(root)
            .follow_links(false)
            .min_depth(1)
            .into_iter()
            .map(|e| e.unwrap().path().strip_prefix(root).unwrap().to_path_buf())
            .collect();
        v.sort();
        v
    };
    let la = list(a);
    let lb = list(b);
    assert_eq!(la, lb, "the trees hold different paths");
    let mut links_a: HashMap<u64, std::path::PathBuf> = HashMap::new();
    for rel in &la {
        let pa = a.join(rel);
        let pb = b.join(rel);
        let ma = std::fs::symlink_metadata(&pa).unwrap();
        let mb = std::fs::symlink_metadata(&pb).unwrap();
        let what = rel.display();
        assert_eq!(ma.file_type(), mb.file_type(), "{what}: type");
        assert_eq!(ma.uid(), mb.uid(), "{what}: uid");
        assert_eq!(ma.gid(), mb.gid(), "{what}: gid");
        assert_eq!(
            (ma.mtime(), ma.mtime_nsec()),
            (mb.mtime(), mb.mtime_nsec()),
            "{what}: mtime"
        );
        if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap(),
                "{what}: target"
            );
            continue;
        }
        assert_eq!(ma.mode(), mb.mode(), "{what}: mode");
        assert_eq!(ma.rdev(), mb.rdev(), "{what}: rdev");
        let xa: Vec<_> = xattr::list(&pa).unwrap().collect();
        let xb: Vec<_> = xattr::list(&pb).unwrap().collect();
        assert_eq!(xa.len(), xb.len(), "{what}: xattrs");
        for name in xa {
            assert_eq!(
                xattr::get(&pa, &name).unwrap(),
                xattr::get(&pb, &name).unwrap(),
                "{what}: xattr"
            );
        }
        if ma.file_type().is_file() {
            assert_eq!(ma.len(), mb.len(), "{what}: size");
            assert!(
                std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(),
                "{what}: contents"
            );
            if ma.nlink() > 1 {
                // Files linked together in the source are linked together in the copy.
                match links_a.get(&ma.ino()) {
                    Some(first) => {
                        let fb = std::fs::metadata(b.join(first)).unwrap();
                        assert_eq!(
                            fb.ino(),
                            mb.ino(),
                            "{what}: hardlink to {}",
                            first.display()
                        );
                    }
                    None => {
                        links_a.insert(ma.ino(), rel.clone());
                    }
                }
            }
        }
    }
}

/// Runs `cairn` with `CAIRN_REPO`/passphrase set for a repository.
pub struct Repo {
    pub dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub env: Vec<(String, String)>,
}

impl Repo {
    pub fn new() -> Self {
        Self::with_env(&[])
    }

    pub fn with_env(extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo");
        let mut env = vec![
            ("CAIRN_REPO".to_string(), path.to_str().unwrap().to_string()),
            (
                "CAIRN_PASSPHRASE".to_string(),
                "test passphrase".to_string(),
            ),
            (
                "XDG_CACHE_HOME".to_string(),
                dir.path().join("cache").to_str().unwrap().to_string(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let r = Self { dir, path, env };
        let o = r.run(&["init"]);
        assert_eq!(o.status.code(), Some(0), "init: {}", stderr(&o));
        r
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.run_env(args, &[])
    }

    pub fn run_env(&self, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        cairn(args, &env)
    }

    /// The details of every lock object left in the repository whose details open with its
    /// key (the test's knowledge: the host reads none).
    #[allow(dead_code)] // not every test binary reads locks
    pub fn sealed_locks(&self) -> Vec<cairn::repo::lock::LockInfo> {
        use cairn::repo::lock::sealed::{decode, Read};
        let seal = cairn::repo::lock::LockSeal::of(self.open_with_key().crypto());
        let here = cairn::repo::lock::host::HostId::current();
        let mut found = Vec::new();
        for f in files_under(&self.path.join("locks")) {
            let name = format!("locks/{}", f.file_name().unwrap().to_string_lossy());
            if let Read::Open(info) = decode(&std::fs::read(&f).unwrap(), &name, Some(&seal), &here)
            {
                found.push(info);
            }
        }
        found
    }

    /// The repository opened with its key (the test's knowledge; the host has none).
    #[allow(dead_code)] // not every test binary opens it
    pub fn open_with_key(&self) -> cairn::repo::Repository {
        let passphrase = self
            .env
            .iter()
            .find(|(k, _)| k == "CAIRN_PASSPHRASE")
            .map(|(_, v)| v.clone().into_bytes())
            .expect("a passphrase");
        let store: Arc<dyn cairn::store::Store> =
            Arc::new(cairn::store::local::LocalStore::new(&self.path));
        cairn::repo::Repository::open(store, || Ok(passphrase.clone())).unwrap()
    }

    /// Plants lock object `locks/NAME` holding `details` (a lock's details as JSON), sealed
    /// with this repository's key, as another client of it would have written it.
    #[allow(dead_code)] // not every test binary plants locks
    pub fn plant_lock(&self, name: &str, details: serde_json::Value) {
        let repo = self.open_with_key();
        let info: cairn::repo::lock::LockInfo = serde_json::from_value(details).unwrap();
        let full = format!("locks/{name}");
        let bytes = cairn::repo::lock::sealed::encode(
            &info,
            &full,
            Some(&cairn::repo::lock::LockSeal::of(repo.crypto())),
        );
        std::fs::create_dir_all(self.path.join("locks")).unwrap();
        std::fs::write(self.path.join(&full), bytes).unwrap();
    }

    /// The paths archive `name` holds, in order.
    pub fn archive_paths(&self, name: &str) -> Vec<String> {
        self.ok(&["list", "--json-lines", name])
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["path"].as_str().unwrap().to_string()
            })
            .collect()
    }

    /// Runs cairn with `--profile PROFILE` and nothing of this repository's environment but
    /// its cache: the profile says the rest.
    pub fn with_profile(&self, profile: &Path, args: &[&str]) -> std::process::Output {
        let mut all = vec!["--profile", profile.to_str().unwrap()];
        all.extend_from_slice(args);
        cairn(
            &all,
            &[(
                "XDG_CACHE_HOME",
                self.dir.path().join("cache").to_str().unwrap(),
            )],
        )
    }

    /// Runs and asserts exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "cairn {args:?} failed:\n{}",
            stderr(&o)
        );
        stdout(&o)
    }

    /// `create --json` in `cwd`; returns the parsed JSON.
    pub fn create_json(&self, cwd: &std::path::Path, args: &[&str]) -> serde_json::Value {
        let o = self.run_in(cwd, &[&["create", "--json"], args].concat(), &[]);
        assert_eq!(o.status.code(), Some(0), "create failed:\n{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// A cairn command on this repository, run in `cwd`, with `extra` environment; stdin
    /// empty, stdout and stderr captured.
    pub fn command(
        &self,
        cwd: &std::path::Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> std::process::Command {
        self.command_via(&[], cwd, args, extra)
    }

    /// [`Repo::command`] run through `wrapper` (say, `unshare --pid --fork`).
    pub fn command_via(
        &self,
        wrapper: &[&str],
        cwd: &std::path::Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> std::process::Command {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cairn"));
        self.command_of(bin, wrapper, cwd, args, extra)
    }

    /// [`Repo::command_via`] with the binary `bin` (a copy that another user can run).
    pub fn command_of(
        &self,
        bin: &std::path::Path,
        wrapper: &[&str],
        cwd: &std::path::Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> std::process::Command {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = std::process::Command::new(program);
                c.args(rest).arg(bin);
                c
            }
            None => std::process::Command::new(bin),
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("CAIRN_") {
                cmd.env_remove(k);
            }
        }
        test_env(&mut cmd);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.current_dir(cwd)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    }

    /// Runs `args` in `cwd` with fault rule `rule`, logging its store operations to `log`;
    /// returns its output and the operations it made, in order (each run's own: the lock's
    /// refresher works beside the command, so the i-th operation is not always the same).
    #[allow(dead_code)] // not every test binary injects faults
    pub fn run_with_fault(
        &self,
        cwd: &std::path::Path,
        args: &[&str],
        rule: &str,
        log: &std::path::Path,
    ) -> (std::process::Output, Vec<String>) {
        let log_str = log.to_str().unwrap();
        let o = self.run_in(
            cwd,
            args,
            &[("CAIRN_FAULT", rule), ("CAIRN_STORE_LOG", log_str)],
        );
        (o, op_log(log))
    }

    pub fn run_in(
        &self,
        cwd: &std::path::Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> std::process::Output {
        self.command(cwd, args, extra).output().unwrap()
    }

    /// How many packs the repository holds.
    pub fn pack_count(&self) -> usize {
        walkdir::WalkDir::new(self.path.join("packs"))
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .count()
    }

    pub fn archive_count(&self) -> usize {
        std::fs::read_dir(self.path.join("archives"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// Copies a directory tree (files and directories only).
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dst = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// All files under a directory, sorted.
/// Waits (up to a minute) until the repository at `repo` holds exactly `n` lock objects and
/// their details are sealed (a command takes its lock while its key is still being derived,
/// without details, and seals it a moment after the key opens); returns their paths.
#[allow(dead_code)] // not every test binary waits for locks
pub fn wait_for_sealed_locks(repo: &std::path::Path, n: usize) -> Vec<std::path::PathBuf> {
    let start = std::time::Instant::now();
    loop {
        let locks = files_under(&repo.join("locks"));
        if locks.len() == n
            && locks
                .iter()
                .all(|l| std::fs::read_to_string(l).is_ok_and(|s| s.contains("\"sealed\"")))
        {
            return locks;
        }
        assert!(
            start.elapsed().as_secs() < 60,
            "not {n} sealed locks: {locks:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The store operations logged to `log` (`CAIRN_STORE_LOG`), one per line.
#[allow(dead_code)] // not every test binary logs operations
pub fn op_log(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().to_path_buf())
        .collect();
    v.sort();
    v
}

/// Whether process `pid` is stopped (SIGSTOP): `T` in `/proc/PID/stat`.
pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// A command stopped by its pause rule.
pub struct Paused {
    pub child: Child,
}

impl Paused {
    /// Starts `args` with `fault` and waits until the rule has stopped it.
    pub fn start(repo: &Repo, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Paused {
        Paused::of(repo.command(cwd, args, env).spawn().unwrap(), args)
    }

    /// Waits until `child` (started with a pause rule, running `args`) has stopped itself.
    pub fn of(mut child: Child, args: &[&str]) -> Paused {
        let start = Instant::now();
        while !stopped(child.id()) {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{args:?} ended ({status}) without pausing: {}",
                    stderr(&out)
                );
            }
            assert!(start.elapsed() < Duration::from_secs(120), "never paused");
            std::thread::sleep(Duration::from_millis(5));
        }
        Paused { child }
    }

    /// SIGCONT, and the command's output once it ends.
    pub fn resume(self) -> Output {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        )
        .unwrap();
        self.child.wait_with_output().unwrap()
    }
}
