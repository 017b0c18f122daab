//! Client-side trust: a client that cannot be talked into weakening itself by what it finds at
//! the repository's location or in its environment. One test per point of the issue; each
//! failed against the code before the change (see docs/reliability.md).

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{cairn, files_under, random_bytes, stderr, stdout, Repo};

/// Runs cairn under a shell with `umask` set first (and `ulimit -v KiB` if given).
fn cairn_sh(
    umask: &str,
    vmem_kib: Option<u64>,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let limit = vmem_kib
        .map(|k| format!("ulimit -v {k}; "))
        .unwrap_or_default();
    let script = format!("umask {umask}; {limit}exec \"$0\" \"$@\"");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn env_of(r: &Repo) -> Vec<(&str, &str)> {
    r.env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn source(r: &Repo) -> PathBuf {
    let src = r.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..4u64 {
        fs::write(src.join(format!("f{i}")), random_bytes(i, 300_000)).unwrap();
    }
    src
}

// ---------------------------------------------------------------------------------------------
// 1. A per-location memory

/// A repository with one backup, then emptied by an attacker with write access, who makes an
/// unencrypted one in its place (with their own machine: their own cache).
fn backed_up_then_replaced_by_an_unencrypted_one() -> (Repo, PathBuf) {
    let r = Repo::new();
    let src = source(&r);
    r.ok(&["create", "a", src.to_str().unwrap()]);
    fs::remove_dir_all(&r.path).unwrap();
    let attacker_cache = r.dir.path().join("attacker-cache");
    let o = cairn(
        &[
            "-r",
            r.path.to_str().unwrap(),
            "init",
            "--encryption",
            "none",
        ],
        &[("XDG_CACHE_HOME", attacker_cache.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (r, src)
}

/// The victim's next backup into a repository replaced by an unencrypted one must not go into
/// it in clear.
#[test]
fn a_repository_replaced_by_an_unencrypted_one_is_refused() {
    let (r, src) = backed_up_then_replaced_by_an_unencrypted_one();
    let o = r.run(&["create", "b", src.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("not the repository this machine used there before"),
        "{err}"
    );
    assert!(
        err.contains("delete "),
        "says how to accept a legitimate change: {err}"
    );
    assert!(
        files_under(&r.path.join("packs")).is_empty(),
        "nothing was stored"
    );
    // The same replacement keeping the id (config edited, keys deleted): weaker encryption.
    let r2 = Repo::new();
    let src2 = source(&r2);
    r2.ok(&["create", "a", src2.to_str().unwrap()]);
    let config = fs::read_to_string(r2.path.join("config")).unwrap();
    for f in files_under(&r2.path.join("keys")) {
        fs::remove_file(f).unwrap();
    }
    fs::write(
        r2.path.join("config"),
        config
            .replace(&common::default_encryption(), "none")
            .replace("\"buckets\"", "\"none\""),
    )
    .unwrap();
    let o = r2.run(&["create", "b", src2.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("encryption changed"), "{}", stderr(&o));
}

/// The lock is taken beside the key's derivation, but a replaced repository is still refused
/// as replaced before this client writes anything there: not even a lock object, and a lock
/// the attacker planted does not turn the refusal into "the repository is locked".
#[test]
fn a_replaced_repository_is_refused_before_a_lock_is_written() {
    let (r, src) = backed_up_then_replaced_by_an_unencrypted_one();
    let planted = r
        .path
        .join("locks")
        .join("00112233445566778899aabbccddeeff");
    fs::create_dir_all(planted.parent().unwrap()).unwrap();
    fs::write(
        &planted,
        br#"{"kind":"exclusive","host":"elsewhere","pid":4242,"user":"u","command":"compact",
            "created":0,"refreshed":0,"host_id":{"machine":"m","boot":"b","pid_ns":"p"},
            "generation":0}"#,
    )
    .unwrap();
    for args in [&["list"][..], &["create", "b", src.to_str().unwrap()][..]] {
        let o = r.run(&[&["--lock-wait", "0"], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("not the repository this machine used there before"),
            "{args:?}: {}",
            stderr(&o)
        );
        let locks = files_under(&r.path.join("locks"));
        assert_eq!(
            locks,
            std::slice::from_ref(&planted),
            "{args:?}: only the planted lock"
        );
    }
}

#[test]
fn an_unencrypted_repository_never_seen_needs_consent() {
    let r = Repo::new();
    let src = source(&r);
    let made_elsewhere = r.dir.path().join("plain");
    let other_cache = r.dir.path().join("other-cache");
    let loc = made_elsewhere.to_str().unwrap();
    let o = cairn(
        &["-r", loc, "init", "--encryption", "none"],
        &[("XDG_CACHE_HOME", other_cache.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0));
    let cache = r.dir.path().join("cache");
    let mine = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let o = cairn(&["-r", loc, "create", "a", src.to_str().unwrap()], &mine);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--allow-unencrypted"), "{}", stderr(&o));
    assert!(files_under(&made_elsewhere.join("packs")).is_empty());
    let mut ok = mine.to_vec();
    ok.push(("CAIRN_UNENCRYPTED_OK", "yes"));
    assert_eq!(cairn(&["-r", loc, "list"], &ok).status.code(), Some(0));
    // Once accepted, it is remembered.
    let o = cairn(&["-r", loc, "create", "a", src.to_str().unwrap()], &mine);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The flag works too, for another machine.
    let third = r.dir.path().join("third-cache");
    let o = cairn(
        &["-r", loc, "--allow-unencrypted", "list"],
        &[("XDG_CACHE_HOME", third.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A passphrase change is not a replacement.
    let enc = Repo::new();
    let o = enc.run_env(
        &["key", "change-passphrase"],
        &[("CAIRN_NEW_PASSPHRASE", "new one")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = enc.run_env(&["list"], &[("CAIRN_PASSPHRASE", "new one")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------------
// 2./3. Private files; the umask left alone

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn repository_and_cache_are_private_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let cache = dir.path().join("cache");
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), random_bytes(1, 100_000)).unwrap();
    let env = [
        ("CAIRN_PASSPHRASE", "pw"),
        ("XDG_CACHE_HOME", cache.to_str().unwrap()),
    ];
    let r = repo.to_str().unwrap();
    for args in [
        &["-r", r, "init"][..],
        &["-r", r, "create", "a", src.to_str().unwrap()],
    ] {
        let o = cairn_sh("000", None, args, &env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let mut seen = 0;
    for e in walkdir::WalkDir::new(&repo)
        .min_depth(1)
        .into_iter()
        .chain(walkdir::WalkDir::new(&cache))
    {
        let e = e.unwrap();
        let want = if e.file_type().is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(e.path()), want, "{}", e.path().display());
        seen += 1;
    }
    assert!(seen > 8, "{seen}");
    assert_eq!(mode(&repo), 0o700, "a root cairn made");
}

/// While an extract runs, the process's umask stays what it was (the old code set it to 0 for
/// the whole restore, so the lock refresher rewrote the lock 0666), and the lock stays 0600.
#[test]
fn extract_never_changes_the_umask() {
    let r = Repo::new();
    let src = source(&r);
    r.ok(&["create", "a", src.to_str().unwrap()]);
    let target = r.dir.path().join("out");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 022; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["extract", "a", "--target", target.to_str().unwrap()]);
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1");
    for (k, v) in &r.env {
        cmd.env(k, v);
    }
    // Slow reads and a refresh every second, so that the refresher runs during the restore.
    cmd.env("CAIRN_STORE_LATENCY", "400000")
        .env("CAIRN_LOCK_REFRESH_SECS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut umasks = std::collections::BTreeSet::new();
    let mut lock_modes = std::collections::BTreeSet::new();
    while child.try_wait().unwrap().is_none() {
        if let Ok(s) = fs::read_to_string(&status) {
            if let Some(l) = s.lines().find(|l| l.starts_with("Umask:")) {
                umasks.insert(l.split_whitespace().nth(1).unwrap_or("").to_string());
            }
        }
        for l in files_under(&r.path.join("locks")) {
            if let Ok(m) = fs::metadata(&l) {
                lock_modes.insert(m.mode() & 0o777);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!umasks.is_empty() && !lock_modes.is_empty());
    assert_eq!(
        umasks.into_iter().collect::<Vec<_>>(),
        vec!["0022".to_string()]
    );
    assert_eq!(lock_modes.into_iter().collect::<Vec<_>>(), vec![0o600]);
    common::assert_trees_equal(&src, &target.join(src.strip_prefix("/").unwrap()));
}

// ---------------------------------------------------------------------------------------------
// 4. Bounded reads

/// Sizes are checked before an object is read whole: a 2 GiB sparse file planted as a key
/// file, a lock, an index fragment or an archive makes no command read it (each runs within
/// 2 GiB of address space) and the error names the object and its size.
#[test]
fn oversized_objects_are_refused_before_they_are_read() {
    let r = Repo::new();
    let src = source(&r);
    r.ok(&["create", "a", src.to_str().unwrap()]);
    let env = env_of(&r);
    let plant = |rel: &str| {
        let p = r.path.join(rel);
        let f = fs::File::create(&p).unwrap();
        f.set_len(2 << 30).unwrap();
        p
    };
    // A planted key file: the real one still opens the repository.
    let key = plant("keys/0000000000000000000000000000000000000000000000000000000000000000");
    let o = cairn_sh("022", Some(2 << 20), &["list"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // As the only key file: refused, naming it and its size.
    let real: Vec<PathBuf> = files_under(&r.path.join("keys"))
        .into_iter()
        .filter(|p| *p != key)
        .collect();
    let aside = r.dir.path().join("key-aside");
    fs::rename(&real[0], &aside).unwrap();
    let o = cairn_sh("022", Some(2 << 20), &["list"], &env);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("2147483648 bytes") && err.contains("keys/0000"),
        "{err}"
    );
    fs::remove_file(&key).unwrap();
    fs::rename(&aside, &real[0]).unwrap();
    // A planted lock is respected (as exclusive) without being read, and says so.
    let lock = plant("locks/00000000000000000000000000000000");
    let o = cairn_sh("022", Some(2 << 20), &["list"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("too large to be one"), "{}", stderr(&o));
    fs::remove_file(&lock).unwrap();
    // An index fragment and an archive: check reports them, and does not fall over.
    let frag = plant(&format!("index/{}", "1".repeat(64)));
    let arch = plant(&format!("archives/{}", "2".repeat(64)));
    let o = cairn_sh("022", Some(2 << 20), &["check"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("index/1111") && out.contains("2147483648"),
        "{out}"
    );
    assert!(out.contains("archives/2222"), "{out}");
    fs::remove_file(frag).unwrap();
    fs::remove_file(arch).unwrap();
    r.ok(&["check"]);
    // A pack the index names, grown to 2 GiB: plain check reports it and what it holds,
    // rather than stopping at it.
    let pack = files_under(&r.path.join("packs")).remove(0);
    let len = fs::metadata(&pack).unwrap().len();
    let resize = |n: u64| {
        let f = fs::OpenOptions::new().write(true).open(&pack).unwrap();
        f.set_len(n).unwrap()
    };
    resize(2 << 30);
    let o = cairn_sh("022", Some(2 << 20), &["check"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("unusable") && out.contains("2147483648"),
        "{out}"
    );
    assert!(out.contains("Files using missing or damaged data"), "{out}");
    resize(len);
    r.ok(&["check"]);
}

// ---------------------------------------------------------------------------------------------
// 5. No weak secrets

#[test]
fn an_empty_passphrase_is_refused_for_encrypted_repositories() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let cache = dir.path().join("cache");
    let c = ("XDG_CACHE_HOME", cache.to_str().unwrap());
    let r = repo.to_str().unwrap();
    let o = cairn(&["-r", r, "init"], &[("CAIRN_PASSPHRASE", ""), c]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("passphrase is empty"), "{}", stderr(&o));
    assert!(!repo.join("config").exists());
    let o = cairn(&["-r", r, "init"], &[("CAIRN_PASSCOMMAND", "printf ''"), c]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        cairn(&["-r", r, "init"], &[("CAIRN_PASSPHRASE", "pw"), c])
            .status
            .code(),
        Some(0)
    );
    let o = cairn(
        &["-r", r, "key", "change-passphrase"],
        &[("CAIRN_PASSPHRASE", "pw"), ("CAIRN_NEW_PASSPHRASE", ""), c],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("passphrase is empty"), "{}", stderr(&o));
    assert_eq!(
        cairn(&["-r", r, "list"], &[("CAIRN_PASSPHRASE", "pw"), c])
            .status
            .code(),
        Some(0)
    );
}

// ---------------------------------------------------------------------------------------------
// 6. SFTP: no option injection, no passphrase for ssh

/// A stand-in for ssh (`CAIRN_RSH`) that records its arguments and environment and fails.
fn fake_ssh(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("ssh.log");
    let script = dir.join("fake-ssh");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > {0}.args\nenv > {0}.env\nexit 255\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    (script, log)
}

#[test]
fn ssh_gets_no_options_from_the_url_and_no_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let (ssh, log) = fake_ssh(dir.path());
    let env = [
        ("CAIRN_RSH", ssh.to_str().unwrap()),
        ("CAIRN_PASSPHRASE", "s3cret-passphrase"),
        ("XDG_CACHE_HOME", dir.path().to_str().unwrap()),
    ];
    // A host that is an ssh option is refused before anything runs.
    let pwned = dir.path().join("pwned");
    let url = format!("sftp://-oProxyCommand=touch {}/r", pwned.display());
    let o = cairn(&["-r", &url, "list"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("may not begin with '-'"),
        "{}",
        stderr(&o)
    );
    assert!(!pwned.exists() && !log.with_extension("log.args").exists());
    // A normal host: "--" ends ssh's options before it, and the passphrase is not passed on.
    let o = cairn(
        &["-r", "sftp://alice@backup.example:2222/srv/r", "list"],
        &env,
    );
    assert_eq!(o.status.code(), Some(2));
    let args = fs::read_to_string(format!("{}.args", log.display())).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        [
            "-p",
            "2222",
            "-l",
            "alice",
            "-s",
            "--",
            "backup.example",
            "sftp"
        ],
        "{args:?}"
    );
    let env = fs::read_to_string(format!("{}.env", log.display())).unwrap();
    assert!(!env.contains("s3cret-passphrase"), "{env}");
}

// ---------------------------------------------------------------------------------------------
// 7. Planted locks

#[test]
fn a_planted_lock_reaches_no_terminal_and_does_not_lock_forever() {
    let r = Repo::with_env(&[
        ("CAIRN_LOCK_REFRESH_SECS", "1"),
        ("CAIRN_LOCK_STALE_SECS", "3"),
    ]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let planted = |refreshed: u64| {
        serde_json::json!({
            "kind": "exclusive", "host": "nas\u{1b}]0;owned\u{7}", "pid": 1,
            "user": "\u{1b}[2J\u{202e}root", "command": "compact\r\ncairn: all good",
            "created": now, "refreshed": refreshed,
        })
    };
    fs::create_dir_all(r.path.join("locks")).unwrap();
    let path = r.path.join("locks/0123456789abcdef0123456789abcdef");
    fs::write(&path, planted(now).to_string()).unwrap();
    let o = r.run(&["list"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("repository is locked"), "{err}");
    assert!(
        !err.trim_end()
            .chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
        "control characters reached the terminal: {err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    // Its timestamps decide nothing ("refreshed in a year" included); it is watched unchanged
    // for the stale interval by this client's own clock, and then taken as abandoned.
    fs::write(&path, planted(now + 365 * 86_400).to_string()).unwrap();
    assert_eq!(r.run(&["list"]).status.code(), Some(2));
    // 10 s later by this client's boot clock (moved, not waited for).
    let o = r.run_env(&["list"], &[("CAIRN_TEST_BOOT_OFFSET", "10")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------------
// 8. KDF bounds

#[test]
fn key_files_asking_for_more_than_eight_times_the_default_work_are_refused() {
    let r = Repo::new();
    let key = files_under(&r.path.join("keys")).remove(0);
    let original: serde_json::Value = serde_json::from_slice(&fs::read(&key).unwrap()).unwrap();
    for (memory, passes) in [(1024 * 1024, 16), (512 * 1024, 4), (65536, 25)] {
        let mut kf = original.clone();
        kf["kdf"]["memory_kib"] = memory.into();
        kf["kdf"]["iterations"] = passes.into();
        fs::write(&key, serde_json::to_vec(&kf).unwrap()).unwrap();
        let o = r.run(&["list"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("out of range"),
            "{memory} KiB × {passes}: {}",
            stderr(&o)
        );
    }
    fs::write(&key, serde_json::to_vec_pretty(&original).unwrap()).unwrap();
    r.ok(&["list"]);
}
