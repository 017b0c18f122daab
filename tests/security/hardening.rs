//! Hardening: bad input, hostile local users and hostile hosts, each tried and refused.

use crate::common;

use std::fs;

use crate::victim::Victim;
use common::{random_bytes, stderr, stdout, Repo};

fn code(o: &std::process::Output) -> Option<i32> {
    o.status.code()
}

/// A repository with three archives of one series, a day apart by the archives' clocks.
fn three_archives() -> Repo {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), random_bytes(1, 10_000)).unwrap();
    for days in [2, 1, 0] {
        let offset = (-(days * 86400)).to_string();
        let o = repo.run_in(
            repo.dir.path(),
            &["create", "s", "src"],
            &[("CAIRN_TEST_CLOCK_OFFSET", offset.as_str())],
        );
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    }
    repo
}

fn archive_count(repo: &Repo) -> usize {
    stdout(&repo.run(&["list"])).lines().count()
}

/// Never a panic (exit 101), never a crash by signal: a usage error is exit 2 and names what
/// was wrong.
fn refused_cleanly(o: &std::process::Output, args: &[&str], names: &str) {
    let err = stderr(o);
    assert!(
        !err.contains("panicked") && code(o) != Some(101) && code(o).is_some(),
        "{args:?} crashed: {err}"
    );
    assert_eq!(
        code(o),
        Some(2),
        "{args:?} was accepted: {err}{}",
        stdout(o)
    );
    assert!(
        err.contains(names),
        "{args:?}: the message names {names}: {err}"
    );
}

/// `--lock-wait 1e20` panicked (an unchecked Duration conversion).
#[test]
fn a_huge_lock_wait_is_a_usage_error() {
    let repo = Repo::new();
    for v in ["1e20", "inf", "NaN", "-1", "99999999999"] {
        let args = ["--lock-wait", v, "list"];
        refused_cleanly(&repo.run(&args), &args, "--lock-wait");
    }
}

/// `prune --keep-within 1000000000000y` pruned every archive: the interval saturated, and a
/// cast to i64 made it negative, so that nothing was "within". Bad input must never delete.
#[test]
fn an_overflowing_keep_within_deletes_nothing() {
    let repo = three_archives();
    for v in [
        "1000000000000y",
        "18446744073709551615S",
        "99999999999999999999d",
        "1001y",
    ] {
        let args = ["prune", "--keep-within", v];
        refused_cleanly(&repo.run(&args), &args, "--keep-within");
        assert_eq!(archive_count(&repo), 3, "{v}: archives were deleted");
    }
    // In range: everything is within a century.
    repo.ok(&["prune", "--keep-within", "100y"]);
    assert_eq!(archive_count(&repo), 3);
}

/// Every numeric option of every command, with values at and past its limits: no panic,
/// nothing deleted, and an out-of-range value is a usage error naming the option.
#[test]
fn extreme_values_of_every_numeric_option() {
    let repo = three_archives();
    let target = repo.dir.path().join("out");
    let t = target.to_str().unwrap();
    let mnt = repo.dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let huge = [
        "-1",
        "1e20",
        "NaN",
        "18446744073709551616",
        "99999999999999999999",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["check", "--threads"], "--threads"),
        (vec!["create", "x", "src", "--threads"], "--threads"),
        (
            vec!["extract", "s", "--target", t, "--threads"],
            "--threads",
        ),
        (vec!["compact", "--dry-run", "--threshold"], "--threshold"),
        (vec!["prune", "--dry-run", "--keep-last"], "--keep-last"),
        (vec!["prune", "--dry-run", "--keep-daily"], "--keep-daily"),
        (
            vec!["extract", "s", "--target", t, "--strip-components"],
            "--strip-components",
        ),
        (vec!["mount", "s", m, "--cache-mib"], "--cache-mib"),
    ];
    for (prefix, name) in &cases {
        for v in huge.iter().chain(&["0"]) {
            let mut args = prefix.clone();
            args.push(v);
            let o = repo.run_in(repo.dir.path(), &args, &[]);
            let err = stderr(&o);
            assert!(
                !err.contains("panicked") && code(&o) != Some(101) && code(&o).is_some(),
                "{args:?} crashed: {err}"
            );
            // 0 is in range for some options (a threshold, a count of components, keep 0).
            if *v != "0" {
                assert_eq!(code(&o), Some(2), "{args:?} accepted: {err}");
                assert!(err.contains(name), "{args:?}: {err}");
            }
        }
    }
    for v in ["-5", "0", "23", "1e20", "x"] {
        let args = ["create", "-C", &format!("zstd,{v}"), "y", "src"];
        let o = repo.run_in(repo.dir.path(), &args, &[]);
        assert!(
            code(&o) != Some(101) && !stderr(&o).contains("panicked"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    for (var, v) in [
        ("CAIRN_THREADS", "99999999999"),
        ("CAIRN_PACK_SIZE", "1e20"),
        ("CAIRN_LOCK_REFRESH_SECS", "18446744073709551615"),
        ("CAIRN_LOCK_STALE_SECS", "-1"),
        ("CAIRN_LOCK_GRACE_SECS", "1e20"),
        ("CAIRN_CHECKPOINT_SECS", "99999999999999999999"),
        ("CAIRN_STORE_LATENCY", "18446744073709551615"),
        ("CAIRN_STORE_BANDWIDTH", "0"),
        ("CAIRN_STORE_CONNECTIONS", "99999999999"),
        ("CAIRN_PACK_INFLIGHT", "1000"),
    ] {
        let o = repo.run_env(&["list"], &[(var, v)]);
        refused_cleanly(&o, &[var, v], var);
    }
    assert_eq!(archive_count(&repo), 3, "nothing deleted");
}

/// prune's rules with extreme parameters never prune more than a smaller, finite rule of the
/// same kind would: a larger count or a longer interval only ever keeps more.
#[test]
fn prune_rules_keep_more_as_they_grow() {
    use cairn::ops::prune::{decide, KeepRules};
    use cairn::util::clock::Timestamp;
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(
                proptest::collection::vec(0i64..400 * 86400, 1..40),
                0u32..50,
                prop_oneof![Just(u32::MAX), 50u32..1000],
                0u64..(3 * 365 * 86400),
                0usize..8,
            ),
            |(ages, small, large, within, which)| {
                let now = Timestamp {
                    secs: 1_800_000_000,
                    nanos: 0,
                };
                let archives: Vec<(usize, Timestamp)> = ages
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        (
                            i,
                            Timestamp {
                                secs: now.secs - a,
                                nanos: 0,
                            },
                        )
                    })
                    .collect();
                let rule = |n: u32, w: Option<u64>| {
                    let mut r = KeepRules::default();
                    match which {
                        0 => r.last = n,
                        1 => r.minutely = n,
                        2 => r.hourly = n,
                        3 => r.daily = n,
                        4 => r.weekly = n,
                        5 => r.monthly = n,
                        6 => r.yearly = n,
                        _ => r.within = w,
                    }
                    r
                };
                let kept = |r: &KeepRules| -> Vec<usize> {
                    decide(&archives, r, now, &chrono::Utc)
                        .into_iter()
                        .filter(|(_, why)| why.is_some())
                        .map(|(k, _)| k)
                        .collect()
                };
                let few = kept(&rule(small, Some(within)));
                let many = kept(&rule(large, Some(u64::MAX)));
                for k in &few {
                    prop_assert!(many.contains(k), "{k} kept by the smaller rule only");
                }
                Ok(())
            },
        )
        .unwrap();
}

/// A trace (or any message) into a stderr whose reader is gone: `close()` of the pack writer
/// printed the trace's last newline with `eprintln!`, which panics on EPIPE, after the
/// archive was committed (exit 101). Messages never panic now.
#[test]
fn a_closed_stderr_is_no_crash() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), random_bytes(2, 300_000)).unwrap();
    let mut child = repo
        .command(
            repo.dir.path(),
            &["create", "traced", "src"],
            &[("CAIRN_PACK_TRACE", "yes"), ("CAIRN_PACK_SIZE", "100000")],
        )
        .spawn()
        .unwrap();
    // Nobody reads stderr any more.
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), Some(0), "{}", stdout(&out));
    assert_eq!(archive_count(&repo), 1);
}

/// Root exports a tar to `/tmp/home.tar`, where another local user had made a FIFO (or a
/// symlink to one, or to a file of theirs): the tar, with whatever root backed up, went to that
/// user. Now only a FIFO of the caller's own is written into, and nothing through a link.
#[test]
fn export_tar_refuses_a_planted_fifo_or_link() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: planting another user's FIFO needs root");
        return;
    }
    let repo = three_archives();
    export_tar_into_planted_targets(&repo, &Victim::root());
}

/// The same, run by a normal user against another.
#[test]
fn export_tar_refuses_a_planted_fifo_or_link_as_a_normal_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: playing two users needs root");
        return;
    }
    let repo = three_archives();
    if let Some(victim) = Victim::nobody(&repo) {
        export_tar_into_planted_targets(&repo, &victim);
    }
}

fn export_tar_into_planted_targets(repo: &Repo, victim: &Victim) {
    use std::os::unix::fs::{chown, OpenOptionsExt, PermissionsExt};
    let shared = repo.dir.path().join("tmp");
    fs::create_dir_all(&shared).unwrap();
    // A directory every user writes into, as /tmp.
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let other = victim.other();
    let fifo = shared.join("home.tar");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    chown(&fifo, Some(other), Some(other)).unwrap();
    // Writable by everyone, whatever the umask: the bait.
    fs::set_permissions(&fifo, fs::Permissions::from_mode(0o666)).unwrap();
    // The other user's reader, open before the export (so that an export that opens the FIFO
    // does not block), draining it while the export runs.
    let reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&fifo)
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drained = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let (mut reader, mut got, mut buf) = (reader, 0usize, vec![0u8; 65536]);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match reader.read(&mut buf) {
                    Ok(n) if n > 0 => got += n,
                    _ => std::thread::sleep(std::time::Duration::from_millis(2)),
                }
            }
            got
        })
    };
    let link = shared.join("via-link.tar");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let theirs = shared.join("theirs");
    fs::write(&theirs, b"their file").unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o666)).unwrap();
    let link2 = shared.join("to-a-file.tar");
    std::os::unix::fs::symlink(&theirs, &link2).unwrap();
    for made in [&theirs, &link, &link2] {
        std::os::unix::fs::lchown(made, Some(other), Some(other)).unwrap();
    }
    let mut outcomes = Vec::new();
    for target in [&fifo, &link, &link2] {
        let o = victim.run(repo, &["export-tar", "s", target.to_str().unwrap()]);
        outcomes.push((target.clone(), code(&o), stderr(&o)));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = drained.join().unwrap();
    assert_eq!(
        got, 0,
        "another user's FIFO received {got} bytes of the tar"
    );
    assert_eq!(fs::read(&theirs).unwrap(), b"their file");
    for (target, code, err) in outcomes {
        assert_eq!(code, Some(2), "{}: {err}", target.display());
        assert!(err.contains("refusing to write there"), "{err}");
    }
    // The caller's own FIFO, and /dev/null, are written into.
    let mine = shared.join("mine.tar");
    nix::unistd::mkfifo(&mine, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    chown(&mine, Some(victim.uid), Some(victim.uid)).unwrap();
    let reader = std::thread::spawn({
        let mine = mine.clone();
        move || fs::read(mine).unwrap().len()
    });
    let o = victim.run(repo, &["export-tar", "s", mine.to_str().unwrap()]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    assert!(reader.join().unwrap() > 10_000);
    let o = victim.run(repo, &["export-tar", "s", "/dev/null"]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
}

/// A system service without `User=` runs with no HOME and no XDG_CACHE_HOME. The storage host
/// replaces the repository with an unencrypted one: the memory of the location was skipped
/// without a cache directory, and the "unencrypted and never seen" refusal with it, so the
/// next backup went out in clear with exit 0. Now a home comes from the user database (root:
/// /var/cache/cairn), and without any memory an unknown unencrypted repository is refused.
#[test]
fn without_home_a_replaced_unencrypted_repository_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("secret"), b"payroll").unwrap();
    // The host's replacement, made elsewhere (its own cache).
    let made = common::cairn(
        &[
            "-r",
            repo.to_str().unwrap(),
            "--allow-unencrypted",
            "init",
            "--encryption",
            "none",
        ],
        &[("XDG_CACHE_HOME", dir.path().join("host").to_str().unwrap())],
    );
    assert_eq!(code(&made), Some(0), "{}", stderr(&made));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-r", repo.to_str().unwrap(), "create", "nightly"])
        .arg(&src)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CAIRN_TEST_CHEAP_KDF", "1")
        .env("CAIRN_PASSPHRASE", "the victim's passphrase")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        code(&out),
        Some(2),
        "a backup went to an unencrypted repository never seen: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains("unencrypted"), "{}", stderr(&out));
    assert!(
        !fs::read_dir(repo.join("archives"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false),
        "nothing stored"
    );
}

/// `create` of a tree that holds the repository stored the repository into itself (packs
/// being written included), and cairn's cache with it. Both are left out now, with a line
/// each, whichever way they are reached (here: through a symlink inside the tree).
#[test]
fn the_repository_and_the_cache_are_never_stored() {
    let base = tempfile::tempdir().unwrap();
    let tree = base.path().join("tree");
    fs::create_dir_all(tree.join("data")).unwrap();
    fs::write(tree.join("data/f"), random_bytes(3, 200_000)).unwrap();
    let repo_path = tree.join("backups/repo");
    let cache = tree.join("home/.cache");
    fs::create_dir_all(&cache).unwrap();
    fs::create_dir_all(repo_path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&repo_path, tree.join("a-link-to-the-repo")).unwrap();
    let env = [
        ("CAIRN_REPO", repo_path.to_str().unwrap()),
        ("CAIRN_PASSPHRASE", "pw"),
        ("XDG_CACHE_HOME", cache.to_str().unwrap()),
    ];
    let run = |args: &[&str]| common::cairn(args, &env);
    assert_eq!(code(&run(&["init"])), Some(0));
    let o = run(&["create", "all", tree.to_str().unwrap()]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("it is the repository being written")
            && stderr(&o).contains("it is cairn's cache directory"),
        "{}",
        stderr(&o)
    );
    let listed = stdout(&run(&["list", "all"]));
    assert!(listed.contains("data/f"), "{listed}");
    for never in ["backups/repo/", "home/.cache/cairn", "config"] {
        assert!(
            !listed.lines().any(|l| l.contains(never)),
            "{never} was stored: {listed}"
        );
    }
}

/// Objects under valid pack names that the host can make for free (sparse 1 GiB files): every
/// create read each whole, at up to 1 GiB of memory, and said nothing, forever. Now their
/// tables of contents are read first (a bounded tail read) and they are reported once by
/// name, then remembered and not read again.
#[test]
fn planted_junk_packs_are_read_once_and_bounded() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), random_bytes(5, 100_000)).unwrap();
    repo.ok(&["create", "first", &src.to_string_lossy()]);
    let mut junk = Vec::new();
    for i in 0..3u8 {
        let hex = format!("{:02x}{}", 0xa0 + i, "5".repeat(62));
        let dir = repo.path.join("packs").join(&hex[..2]);
        fs::create_dir_all(&dir).unwrap();
        let f = fs::File::create(dir.join(&hex)).unwrap();
        f.set_len(1 << 30).unwrap();
        junk.push(hex);
    }
    let log = repo.dir.path().join("ops.log");
    let run = |name: &str| {
        let _ = fs::remove_file(&log);
        let mut cmd = repo.command(
            repo.dir.path(),
            &["create", name, src.to_str().unwrap()],
            &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
        );
        let time = std::path::Path::new("/usr/bin/time");
        if time.exists() {
            let args: Vec<std::ffi::OsString> = std::iter::once("-f".into())
                .chain(std::iter::once("maxrss %M".into()))
                .chain(std::iter::once(cmd.get_program().to_os_string()))
                .chain(cmd.get_args().map(|a| a.to_os_string()))
                .collect();
            let mut t = std::process::Command::new(time);
            t.args(args);
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => t.env(k, v),
                    None => t.env_remove(k),
                };
            }
            cmd = t;
            cmd.current_dir(repo.dir.path())
                .stdin(std::process::Stdio::null());
        }
        let o = cmd.output().unwrap();
        let junk_reads = fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" get packs/") && junk.iter().any(|j| l.contains(j.as_str())))
            .count();
        let rss_kib: Option<u64> = stderr(&o).lines().find_map(|l| {
            l.strip_prefix("maxrss ")
                .and_then(|n| n.trim().parse().ok())
        });
        (o, junk_reads, rss_kib)
    };
    let (first, _, rss) = run("second");
    assert_eq!(code(&first), Some(0), "{}", stderr(&first));
    for j in &junk {
        assert!(
            stderr(&first).contains(j.as_str()),
            "{j} not reported: {}",
            stderr(&first)
        );
    }
    if let Some(kib) = rss {
        assert!(
            kib < 300 * 1024,
            "peak memory {kib} KiB with 3 GiB of junk packs"
        );
    }
    let (again, reads, _) = run("third");
    assert_eq!(code(&again), Some(0), "{}", stderr(&again));
    assert_eq!(reads, 0, "the junk was read again");
    assert!(!stderr(&again).contains(&junk[0]), "{}", stderr(&again));
}

/// A key file the host planted with the largest allowed key derivation cost, named to sort
/// first: it spent the whole budget (1.6–3.3 s, 531 MB) and the real key was never tried
/// ("wrong passphrase"). Key files are tried cheapest first now; when the budget ends before
/// every one was tried, the message says so.
#[test]
fn a_planted_costly_key_file_does_not_hide_the_real_one() {
    use cairn::crypto::kdf::MAX_MEMORY_KIB;
    use cairn::crypto::keyfile::VERSION;
    let repo = Repo::new();
    let config: serde_json::Value =
        serde_json::from_slice(&fs::read(repo.path.join("config")).unwrap()).unwrap();
    // A key file of the version this cairn writes, asking for 8 × the default's work.
    let plant = |name: &str| {
        let kf = serde_json::json!({
            "version": VERSION,
            "repository": config["id"],
            "kdf": {"algorithm": "argon2id", "memory_kib": MAX_MEMORY_KIB, "iterations": 3,
                    "parallelism": 1, "salt": "00".repeat(16)},
            "cipher": "aes-256-gcm",
            "nonce": "00".repeat(12),
            "data": "00".repeat(150),
        });
        fs::write(
            repo.path.join("keys").join(name),
            serde_json::to_vec(&kf).unwrap(),
        )
        .unwrap();
    };
    plant(&"0".repeat(64));
    let start = std::time::Instant::now();
    let o = repo.run(&["list"]);
    assert_eq!(
        code(&o),
        Some(0),
        "the real key was not tried: {}",
        stderr(&o)
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "sanity: {:?}",
        start.elapsed()
    );
    // A wrong passphrase, with more costly key files than the budget covers: said as such.
    for i in 1..3 {
        plant(&format!("{i}").repeat(64));
    }
    let o = repo.run_env(&["list"], &[("CAIRN_PASSPHRASE", "not it")]);
    assert_eq!(code(&o), Some(2));
    assert!(
        stderr(&o).contains("not tried"),
        "the message says some key files were not tried: {}",
        stderr(&o)
    );
    let listed = repo.ok(&["key", "list"]);
    assert!(
        listed.contains("512 MiB × 3"),
        "key list shows each key's cost: {listed}"
    );
}

/// A key file's label (`made_by` = user@host, `created`) was readable by the host. It is
/// sealed now, under a key derived from the master key: `key list` shows it, the host cannot
/// read it.
#[test]
fn key_file_labels_are_sealed() {
    let repo = Repo::new();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let year = chrono::Utc::now().format("%Y-").to_string();
    for k in fs::read_dir(repo.path.join("keys")).unwrap() {
        let text = fs::read_to_string(k.unwrap().path()).unwrap();
        assert!(!text.contains(&host), "the hostname in clear: {text}");
        assert!(!text.contains(&year), "the creation time in clear: {text}");
        assert!(!text.contains("made_by"), "{text}");
    }
    let listed = repo.ok(&["key", "list"]);
    assert!(listed.contains(&host), "key list shows the label: {listed}");
}

/// Whether process `pid` has a file open whose path ends with `tail`.
fn has_open(pid: u32, tail: &str) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy().ends_with(tail))
    })
}

/// A local user who owns part of the tree swaps his directory for a symlink to a directory
/// only root reads, while the backup reads an earlier file. A walk by path listed the
/// swapped-in directory through the symlink, and stored root's file under the user's path;
/// by descriptors, the walk finds a symlink where the directory was, and stores the symlink.
#[test]
fn a_directory_swapped_for_a_symlink_during_create_is_not_followed() {
    swapped_during_create(&Repo::new(), &Victim::root());
}

/// The same, backed up by a normal user: the directory swapped in is one only that user reads.
#[test]
fn a_directory_swapped_for_a_symlink_during_create_is_not_followed_as_a_normal_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: playing two users needs root");
        return;
    }
    let repo = Repo::new();
    if let Some(victim) = Victim::nobody(&repo) {
        swapped_during_create(&repo, &victim);
    }
}

fn swapped_during_create(repo: &Repo, victim: &Victim) {
    use nix::sys::signal::{kill, Signal};
    use std::os::unix::fs::PermissionsExt;
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/mine"), b"the user's own file").unwrap();
    // Read first (names are walked in order), and long enough to pause the walk in it.
    let big = fs::File::create(src.join("a-big")).unwrap();
    big.set_len(128 << 20).unwrap();
    let private = base.join("private");
    fs::create_dir(&private).unwrap();
    let secret = b"the victim's secret, 0600";
    fs::write(private.join("shadow"), secret).unwrap();
    fs::set_permissions(private.join("shadow"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    for made in [&src, &private] {
        Victim::give(made, victim.uid);
    }
    // The other user owns the directory they will swap, and may write where it is.
    Victim::give(&src.join("d"), victim.other());
    fs::set_permissions(&src, fs::Permissions::from_mode(0o1777)).unwrap();

    let mut child = victim
        .command(repo, base, &["create", "s", "src"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    while !has_open(pid, "/src/a-big") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "create ended before it read src/a-big"
        );
        assert!(
            start.elapsed().as_secs() < 60,
            "create never read src/a-big"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    fs::rename(src.join("d"), base.join("d-moved")).unwrap();
    std::os::unix::fs::symlink(&private, src.join("d")).unwrap();
    std::os::unix::fs::lchown(src.join("d"), Some(victim.other()), Some(victim.other())).unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(matches!(code(&o), Some(0 | 1)), "{}", stderr(&o));

    let listed = stdout(&victim.run(repo, &["list", "s"]));
    assert!(
        !listed.contains("shadow"),
        "the victim's private file was stored under the other user's path:\n{listed}"
    );
    let out = base.join("out");
    fs::create_dir(&out).unwrap();
    Victim::give(&out, victim.uid);
    let x = victim
        .command(repo, &out, &["extract", "s"])
        .output()
        .unwrap();
    // A normal user cannot give the other user's symlink its owner: that warning only.
    let owners_only = stderr(&x)
        .lines()
        .all(|l| !l.starts_with("warning") || l.contains("owner"));
    assert!(
        code(&x) == Some(0) || (victim.uid != 0 && code(&x) == Some(1) && owners_only),
        "{}",
        stderr(&x)
    );
    for f in common::files_under(&out) {
        if f.is_file() && !f.is_symlink() {
            assert_ne!(
                fs::read(&f).unwrap(),
                secret,
                "{} holds the victim's private file",
                f.display()
            );
        }
    }
    let d = fs::symlink_metadata(out.join("src/d")).unwrap();
    assert!(
        d.is_symlink(),
        "src/d was stored as what it was when walked: a symlink"
    );
}

/// The cache's base directory is made 0700 by name only: a symlink there (planted, or a cache
/// moved to another disk) is not followed, and the directory it points to keeps its mode.
/// The backup still works, with its cache written through the link.
#[test]
fn a_symlink_at_the_cache_base_is_not_made_private() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let other = t.path().join("other");
    fs::create_dir_all(&cache).unwrap();
    fs::create_dir_all(&other).unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&other, cache.join("cairn")).unwrap();
    let repo = Repo::with_env(&[("XDG_CACHE_HOME", cache.to_str().unwrap())]);
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let o = repo.run(&["create", "a", src.to_str().unwrap()]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let mode = fs::metadata(&other).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "the symlink's target was made {mode:o}");
    assert!(
        fs::read_dir(&other).unwrap().count() > 0,
        "the cache is there"
    );
}

/// A files cache someone else could have written is not trusted (it says which files need not
/// be read): made writable by others, and with no archive to rebuild it from, every file is
/// read again.
#[test]
fn a_files_cache_others_can_write_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let repo = Repo::with_env(&[("CAIRN_TEST_CLOCK_OFFSET", "60")]);
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..5 {
        fs::write(src.join(format!("f{i}")), random_bytes(i, 1000)).unwrap();
    }
    let read = |repo: &Repo| {
        let o = repo.run(&["create", "--json", "a", src.to_str().unwrap()]);
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["archive"]["stats"]["files_read"].as_u64().unwrap()
    };
    assert_eq!(read(&repo), 5);
    assert_eq!(read(&repo), 0, "the cache is used");
    let caches: Vec<_> = walkdir::WalkDir::new(repo.dir.path().join("cache"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("files-")
        })
        .collect();
    assert_eq!(caches.len(), 1, "{caches:?}");
    fs::set_permissions(&caches[0], fs::Permissions::from_mode(0o666)).unwrap();
    // No archive to rebuild the cache from: what the cache says is all there is.
    let o = repo.run(&["delete", "--all", "--yes"]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    assert_eq!(read(&repo), 5, "a cache others can write is not read");
    // The cache written by that backup is private again, and used.
    assert_eq!(read(&repo), 0);
}
