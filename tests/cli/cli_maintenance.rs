//! check, delete, prune, compact and locking through the real binary.

use crate::common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{
    assert_trees_equal, copy_tree, files_under, op_log, random_bytes, stderr, stdout,
    wait_for_sealed_locks, Repo,
};

fn tree(root: &Path, seed: u64, files: usize) {
    fs::create_dir_all(root).unwrap();
    for i in 0..files {
        fs::write(
            root.join(format!("f{i}")),
            random_bytes(seed * 1000 + i as u64, 150_000),
        )
        .unwrap();
    }
}

fn small_packs() -> [(&'static str, &'static str); 1] {
    [("CAIRN_PACK_SIZE", "200000")]
}

fn extract_matches(repo: &Repo, archive: &str, src: &Path, rel: &str) {
    let target = repo.dir.path().join(format!("x-{}", rand_suffix()));
    let o = repo.run(&["extract", archive, "--target", target.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "extract {archive}: {}",
        stderr(&o)
    );
    assert_trees_equal(src, &target.join(rel));
    fs::remove_dir_all(&target).unwrap();
}

fn rand_suffix() -> String {
    format!("{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    n ^ std::process::id().rotate_left(7)
}

fn setup_two_archives() -> (Repo, PathBuf) {
    let repo = Repo::with_env(&small_packs());
    let src = repo.dir.path().join("src");
    tree(&src.join("one"), 1, 6);
    tree(&src.join("two"), 2, 6);
    assert_eq!(
        repo.run_in(&src, &["create", "one", "one"], &[])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        repo.run_in(&src, &["create", "two", "two"], &[])
            .status
            .code(),
        Some(0)
    );
    (repo, src)
}

fn packs(repo: &Repo) -> Vec<PathBuf> {
    files_under(&repo.path.join("packs"))
}

#[test]
fn a_healthy_repository_checks_clean() {
    let (repo, _) = setup_two_archives();
    let out = repo.ok(&["check", "--verify-data"]);
    assert!(out.contains("0 errors, 0 warnings"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&repo.ok(&["check", "--json"])).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 0);
}

#[test]
fn damage_is_detected_and_named() {
    type Damage = fn(&Repo);
    let cases: Vec<(&str, Damage)> = vec![
        ("delete a pack", |r| fs::remove_file(&packs(r)[0]).unwrap()),
        ("truncate a pack", |r| {
            let p = &packs(r)[1];
            let len = fs::metadata(p).unwrap().len();
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(len - 100)
                .unwrap();
        }),
        ("flip a bit in a pack's table of contents", |r| {
            flip(&packs(r)[2], 0.9999)
        }),
        // Inside a blob (found with the key: filler may take much of a session's last pack):
        // only a check that reads the blobs can see it.
        ("flip a bit in a pack's blobs (check --verify-data)", |r| {
            let p = &packs(r)[2];
            let bytes = fs::read(p).unwrap();
            let toc =
                cairn::pack::format::parse(r.open_with_key().crypto(), &bytes, "pack").unwrap();
            flip(p, 0.6 * toc.blobs_end as f64 / bytes.len() as f64)
        }),
        ("flip a bit in an index fragment", |r| {
            flip(&files_under(&r.path.join("index"))[0], 0.5)
        }),
        ("flip a bit in an archive", |r| {
            flip(&files_under(&r.path.join("archives"))[0], 0.5)
        }),
    ];
    for (what, damage) in cases {
        let (repo, _) = setup_two_archives();
        damage(&repo);
        let o = if what.contains("--verify-data") {
            repo.run(&["check", "--verify-data"])
        } else {
            repo.run(&["check"])
        };
        let out = stdout(&o) + &stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: check must fail:\n{out}");
        assert!(!out.contains("panicked"), "{what}: {out}");
        assert!(out.contains("error: "), "{what}: {out}");
        if what.contains("pack") {
            // The damaged data is traced to what uses it: files, or a whole archive when the
            // damage hit its metadata.
            let named = out.contains("Files using missing or damaged data")
                || out.contains("error: archive ");
            assert!(named, "{what}: nothing affected is named:\n{out}");
        }
    }
}

fn flip(p: &Path, at: f64) {
    let mut b = fs::read(p).unwrap();
    let i = ((b.len() as f64) * at) as usize;
    b[i] ^= 0x08;
    fs::write(p, b).unwrap();
}

/// Bit rot inside a data blob: the plain check reads only tables of contents and cannot see
/// it; --verify-data (and the key-less --repository-only) can.
#[test]
fn verify_data_catches_what_the_plain_check_cannot() {
    let (repo, _) = setup_two_archives();
    let victim = packs(&repo)
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&victim).unwrap();
    // 40 bytes into the first blob (which starts after the 8-byte magic): its ciphertext.
    bytes[8 + 40] ^= 0x01;
    fs::write(&victim, &bytes).unwrap();

    let plain = repo.run(&["check"]);
    assert_eq!(
        plain.status.code(),
        Some(0),
        "plain check cannot see it: {}",
        stdout(&plain)
    );
    let deep = repo.run(&["check", "--verify-data"]);
    let out = stdout(&deep);
    assert_eq!(deep.status.code(), Some(2), "{out}");
    assert!(out.contains("authentication failed"), "{out}");
    assert!(out.contains("Files using missing or damaged data"), "{out}");
    let keyless = repo.run_env(&["check", "--repository-only"], &[("CAIRN_PASSPHRASE", "")]);
    assert_eq!(keyless.status.code(), Some(2), "{}", stdout(&keyless));
    assert!(stdout(&keyless).contains("do not match the pack's name"));
    // Repair drops the bad chunk from the index and marks the file; a new backup heals it.
    let rep = repo.run(&["check", "--verify-data", "--repair"]);
    assert!(
        stdout(&rep).contains("marked 1 files as damaged"),
        "{}",
        stdout(&rep)
    );
}

/// A reader of a healthy repository lists the index, not the packs: the fallback for chunks
/// placed twice (below) costs a listing of packs only when some chunk is placed twice.
#[test]
fn readers_of_a_healthy_repository_do_not_list_the_packs() {
    let (repo, _) = setup_two_archives();
    let log = repo.dir.path().join("ops.log");
    let target = repo.dir.path().join("x");
    let o = repo.run_env(
        &["extract", "one", "--target", target.to_str().unwrap()],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ops = fs::read_to_string(&log).unwrap();
    assert!(ops.lines().any(|l| l.ends_with(" list index")), "{ops}");
    assert!(!ops.lines().any(|l| l.ends_with(" list packs")), "{ops}");
}

/// Regression: a pack is lost, and the next backup of the same data stores its chunks again
/// (a new fragment places them in a new pack). Readers merged the fragments with the first one
/// winning, so the chunks still pointed at the lost pack and neither archive could be
/// restored. Now a chunk whose pack is gone falls back on the other fragment's location.
#[test]
fn chunks_stored_again_after_a_pack_was_lost_restore() {
    let (repo, src) = setup_two_archives();
    for p in packs(&repo) {
        fs::remove_file(p).unwrap();
    }
    // Both archives again, under new names: every chunk is stored anew.
    for name in ["one", "two"] {
        let o = repo.run_in(&src, &["create", &format!("{name}-again"), name], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("will be stored again"),
            "{}",
            stderr(&o)
        );
    }
    for name in ["one", "two"] {
        extract_matches(&repo, name, &src.join(name), name);
        extract_matches(&repo, &format!("{name}-again"), &src.join(name), name);
    }
    // check still reports what the old fragments name, but no file has lost its data.
    let o = repo.run(&["check"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("does not exist"), "{out}");
    assert!(
        !out.contains("Files using missing or damaged data"),
        "{out}"
    );
    // compact writes one index without the dangling entries; then all is clean.
    repo.ok(&["compact"]);
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn repair_rebuilds_a_lost_index_and_everything_extracts() {
    let (repo, src) = setup_two_archives();
    for f in files_under(&repo.path.join("index")) {
        fs::remove_file(f).unwrap();
    }
    let o = repo.run(&["check"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a missing index is damage: {}",
        stdout(&o)
    );
    let o = repo.run(&["check", "--repair"]);
    assert!(
        stdout(&o).contains("wrote a rebuilt index"),
        "{}",
        stdout(&o)
    );
    // The archives are judged against the rebuilt index, and nothing is damaged after the
    // repair: no error (such as chunks "not in the index"), and success.
    assert!(!stdout(&o).contains("error:"), "{}", stdout(&o));
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    extract_matches(&repo, "one", &src.join("one"), "one");
    extract_matches(&repo, "two", &src.join("two"), "two");
}

#[test]
fn repair_salvages_intact_chunks_of_a_damaged_pack_and_marks_lost_files() {
    let (repo, src) = setup_two_archives();
    // Truncate the biggest pack 10 bytes into its last blob (found with the key, which the
    // test has): the blobs before the cut survive, the last is lost, and so are the filler,
    // the table of contents and its locator.
    let victim = packs(&repo)
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let bytes = fs::read(&victim).unwrap();
    let toc = cairn::pack::format::parse(repo.open_with_key().crypto(), &bytes, "pack").unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_len(toc.blobs_end - 10)
        .unwrap();
    let o = repo.run(&["check", "--repair"]);
    let out = stdout(&o);
    assert!(out.contains("salvaged"), "{out}");
    assert!(out.contains("marked"), "{out}");
    // What is left after the repair (files marked damaged) is a warning, not damage.
    assert_eq!(o.status.code(), Some(1), "{out}");
    // Now the repository is consistent again: only the lost file data is missing, and that is
    // a known, marked loss (a warning).
    let o = repo.run(&["check"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("marked damaged by an earlier repair"),
        "{}",
        stdout(&o)
    );
    let listing = repo.ok(&["list", "--json-lines"]);
    assert_eq!(listing.lines().count(), 2);
    // The archive without damage still extracts exactly.
    let intact = if out.contains("archive one") {
        ("two", "two")
    } else {
        ("one", "one")
    };
    extract_matches(&repo, intact.0, &src.join(intact.1), intact.1);
}

/// Many archives of random trees sharing data, some chunks stored twice (by two concurrent
/// creates), a random subset deleted, compact: survivors extract identically and the
/// repository shrinks.
#[test]
fn compact_model() {
    let repo = Repo::with_env(&small_packs());
    let base = repo.dir.path().join("sources");
    let mut archives: Vec<(String, PathBuf)> = Vec::new();
    let shared = random_bytes(999, 400_000);
    for round in 0..6u64 {
        let src = base.join(format!("r{round}"));
        let t = src.join("t");
        fs::create_dir_all(&t).unwrap();
        for i in 0..4u64 {
            // Unique data, data shared by every round, and a file duplicated within the round.
            let mut data = random_bytes(round * 100 + i, 80_000 + (i as usize) * 30_000);
            if i % 2 == 0 {
                data.extend_from_slice(&shared);
            }
            fs::write(t.join(format!("f{i}")), &data).unwrap();
        }
        fs::write(t.join("dup"), random_bytes(round * 100, 80_000)).unwrap();
        let name = format!("a{round}");
        if round == 3 {
            // Two creates at once store the same chunks in different packs.
            let c1 = spawn(&repo, &src, &name);
            let c2 = spawn(&repo, &src, &format!("{name}b"));
            assert!(c1.wait_with_output().unwrap().status.success());
            assert!(c2.wait_with_output().unwrap().status.success());
            archives.push((format!("{name}b"), t.clone()));
        } else {
            let o = repo.run_in(&src, &["create", &name, "t"], &[]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
        archives.push((name, t));
    }
    let before: u64 = packs(&repo)
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    // Delete every other archive.
    let (gone, kept): (Vec<_>, Vec<_>) = archives.iter().enumerate().partition(|(i, _)| i % 2 == 1);
    for (_, (name, _)) in &gone {
        repo.ok(&["delete", name]);
    }
    let out = repo.ok(&["compact"]);
    assert!(out.contains("freed"), "{out}");
    let after: u64 = packs(&repo)
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        after < before,
        "repository did not shrink: {before} -> {after}"
    );
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    for (_, (name, t)) in &kept {
        extract_matches(&repo, name, t, "t");
    }
}

fn spawn(repo: &Repo, cwd: &Path, name: &str) -> std::process::Child {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    cmd.env("CAIRN_STORE_LATENCY", "20000")
        .env("CAIRN_PACK_INFLIGHT", "1")
        .current_dir(cwd)
        .args(["create", name, "t"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A crash at every store operation of compact loses nothing: check passes (warnings about
/// leftovers at most), the archives still extract, and compact completes when run again.
#[test]
fn compact_crash_at_every_operation_loses_nothing() {
    let (repo, src) = setup_two_archives();
    // Give compact something to delete and rewrite.
    tree(&src.join("three"), 3, 4);
    assert_eq!(
        repo.run_in(&src, &["create", "three", "three"], &[])
            .status
            .code(),
        Some(0)
    );
    repo.ok(&["delete", "two"]);
    let pristine = repo.dir.path().join("pristine");
    copy_tree(&repo.path, &pristine);
    let log = repo.dir.path().join("ops.log");
    let o = repo.run_env(&["compact"], &[("CAIRN_STORE_LOG", log.to_str().unwrap())]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let total = op_log(&log).len();
    assert!(total > 10, "compact made only {total} store operations");
    for i in 1..=total {
        fs::remove_dir_all(&repo.path).unwrap();
        copy_tree(&pristine, &repo.path);
        let rule = format!("from={i}:eio");
        let run_log = repo.dir.path().join(format!("ops-{i}.log"));
        let (o, ops) = repo.run_with_fault(repo.dir.path(), &["compact"], &rule, &run_log);
        // Only lock operations may fail without failing the command: the final release (the
        // lock is then stale and taken over later), or the sealing (retried at the next
        // refresh; the lock is held meanwhile).
        // (A run that made fewer than i operations had no fault injected.)
        let releasing_lock = ops
            .get(i - 1..)
            .unwrap_or_default()
            .iter()
            .all(|op| op.contains(" locks/"));
        if !releasing_lock {
            assert_ne!(
                o.status.code(),
                Some(0),
                "op {i} ({:?}): an injected failure must not pass silently",
                ops.get(i - 1)
            );
        }
        assert!(!stderr(&o).contains("panicked"), "op {i}: {}", stderr(&o));
        // A crash leaves its lock behind; it belongs to a dead process on this host.
        let o = repo.run(&["check"]);
        assert!(
            o.status.code() == Some(0) || o.status.code() == Some(1),
            "op {i}: check after crash:\n{}{}",
            stdout(&o),
            stderr(&o)
        );
        extract_matches(&repo, "one", &src.join("one"), "one");
        extract_matches(&repo, "three", &src.join("three"), "three");
    }
    // And a compact after the last crash state finishes the job.
    repo.ok(&["compact"]);
    assert_eq!(repo.run(&["check"]).status.code(), Some(0));
    eprintln!("compact crash matrix: {total} crash points, 0 lost archives, 0 check errors");
}

#[test]
fn prune_keeps_what_the_rules_say() {
    use cairn::format::item::Timestamp;
    let repo = Repo::new();
    let store: Arc<dyn cairn::store::Store> =
        Arc::new(cairn::store::local::LocalStore::new(&repo.path));
    let mut r = cairn::repo::Repository::open(store, || Ok(b"test passphrase".to_vec())).unwrap();
    r.lock(
        cairn::repo::lock::LockKind::Shared,
        "test",
        std::time::Duration::ZERO,
    )
    .unwrap();
    // Archives of series "s" at 23:00 UTC on Jan 1..10 2026, and one of series "other".
    let at = |day: u32, hour: u32| {
        let t = chrono::NaiveDate::from_ymd_opt(2026, 1, day)
            .unwrap()
            .and_hms_opt(hour, 0, 0)
            .unwrap()
            .and_utc();
        Timestamp {
            secs: t.timestamp(),
            nanos: 0,
        }
    };
    let commit = |name: &str, ts: Timestamp| {
        let meta = cairn::archive::ArchiveMeta {
            name: name.into(),
            comment: String::new(),
            hostname: "h".into(),
            username: "u".into(),
            start: ts,
            end: ts,
            command_line: vec![],
            items: vec![],
            stats: Default::default(),
            copied_from: None,
            replaces: None,
            tags: Vec::new(),
        };
        let sealed = cairn::archive::seal(&r, &meta).unwrap();
        r.write(Default::default(), |_| {
            Ok(cairn::repo::session::Commit::archive(sealed))
        })
        .unwrap();
    };
    for d in 1..=10 {
        commit("s", at(d, 23));
    }
    commit("s", at(10, 9));
    commit("other", at(2, 12));
    drop(r);
    let env = [("TZ", "UTC")];
    let o = repo.run_env(
        &[
            "prune",
            "--keep-daily",
            "3",
            "--keep-weekly",
            "2",
            "--dry-run",
            "--list",
        ],
        &env,
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Daily: Jan 10 23:00, 9, 8. Weekly (ISO weeks: Jan 5-11 = w2, Dec 29-Jan 4 = w1):
    // w2 is used by Jan 10 already, w1 → Jan 4; the rule then runs out of weeks with one of
    // two kept, so it keeps the oldest archive too (Jan 1). "other" has a single archive:
    // kept (daily #1).
    let keeping: Vec<&str> = out.lines().filter(|l| l.starts_with("Keeping")).collect();
    assert_eq!(keeping.len(), 6, "{out}");
    for (day, why) in [
        ("2026-01-10 23:00:00", "(daily #1)"),
        ("2026-01-09 23:00:00", "(daily #2)"),
        ("2026-01-08 23:00:00", "(daily #3)"),
        ("2026-01-04 23:00:00", "(weekly #1)"),
        ("2026-01-01 23:00:00", "(weekly[oldest] #2)"),
        ("2026-01-02 12:00:00", "(daily #1)"),
    ] {
        assert!(
            keeping.iter().any(|l| l.contains(day) && l.ends_with(why)),
            "{day} not kept by {why}:\n{out}"
        );
    }
    assert_eq!(
        out.lines().filter(|l| l.starts_with("Would prune")).count(),
        6,
        "{out}"
    );
    assert_eq!(
        files_under(&repo.path.join("archives")).len(),
        12,
        "dry run deleted something"
    );
    let o = repo.run_env(&["prune", "--keep-daily", "3", "--keep-weekly", "2"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        files_under(&repo.path.join("archives")).len(),
        6,
        "{}",
        stdout(&o)
    );
    // No rule at all is refused.
    assert_eq!(repo.run(&["prune"]).status.code(), Some(2));
}

#[test]
fn compact_during_a_create_is_refused_or_waits() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    tree(&src.join("t"), 5, 8);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    let child = cmd
        .env("CAIRN_STORE_LATENCY", "300000")
        .env("CAIRN_PACK_SIZE", "200000")
        .env("CAIRN_PACK_INFLIGHT", "1")
        // Its lock sealed at its first refresh (the emulated link queues requests, so the
        // lock is not rotated earlier just to seal it).
        .env("CAIRN_LOCK_REFRESH_SECS", "1")
        .current_dir(&src)
        .args(["create", "c", "t"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the create holds its lock, sealed once its key opened (a lock taken while
    // the key is still being derived carries no details until then).
    wait_for_sealed_locks(&repo.path, 1);
    let o = repo.run(&["--lock-wait", "0", "compact"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("locked") && err.contains("shared lock held by create"),
        "{err}"
    );
    // Waiting works: compact runs once the create is done.
    let o = repo.run(&["--lock-wait", "120", "compact"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(child.wait_with_output().unwrap().status.success());
    assert!(
        files_under(&repo.path.join("locks")).is_empty(),
        "locks are released"
    );
    extract_matches(&repo, "c", &src.join("t"), "t");
}

#[test]
fn the_lock_of_a_dead_process_is_taken_over_only_in_our_pid_namespace() {
    let repo = Repo::new();
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let line = |p: &str| {
        fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let here = serde_json::json!({
        "machine": line("/etc/machine-id"),
        "boot": line("/proc/sys/kernel/random/boot_id"),
        "pid_ns": fs::read_link("/proc/self/ns/pid").unwrap().to_string_lossy(),
    });
    if here["machine"] == "" {
        eprintln!("skipped: this machine has no machine id");
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let lock = |host_id: &serde_json::Value, refreshed: u64| {
        serde_json::json!({
            "kind": "exclusive", "host": host, "pid": pid, "user": "x", "command": "compact",
            "created": refreshed, "refreshed": refreshed, "host_id": host_id, "generation": 0,
        })
    };
    repo.plant_lock("deadbeef", lock(&here, now));
    let o = repo.run(&["--lock-wait", "0", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!repo.path.join("locks/deadbeef").exists());
    // The same hostname and a PID dead here, but another PID namespace (a container), with a
    // refresh time two hours old by its clock: respected.
    let mut container = here.clone();
    container["pid_ns"] = "pid:[4026531999]".into();
    repo.plant_lock("cafebabe", lock(&container, now - 7200));
    let o = repo.run(&["--lock-wait", "0", "list"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("exclusive lock held by compact"),
        "{}",
        stderr(&o)
    );
    assert!(repo.path.join("locks/cafebabe").exists());
}

#[test]
fn change_passphrase() {
    let repo = Repo::new();
    let o = repo.run_env(
        &["key", "change-passphrase"],
        &[("CAIRN_NEW_PASSPHRASE", "brand new")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(files_under(&repo.path.join("keys")).len(), 1);
    assert_eq!(
        repo.run(&["info"]).status.code(),
        Some(2),
        "the old passphrase no longer opens it"
    );
    assert_eq!(
        repo.run_env(&["info"], &[("CAIRN_PASSPHRASE", "brand new")])
            .status
            .code(),
        Some(0)
    );
}

/// A command whose own lock disappears (someone judged it stale) stops instead of going on
/// unprotected, and commits nothing.
#[test]
fn a_create_whose_lock_vanished_aborts() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    tree(&src.join("t"), 9, 10);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    let child = cmd
        .env("CAIRN_STORE_LATENCY", "200000")
        .env("CAIRN_PACK_SIZE", "200000")
        .env("CAIRN_PACK_INFLIGHT", "1")
        .env("CAIRN_LOCK_REFRESH_SECS", "1")
        .current_dir(&src)
        .args(["create", "c", "t"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let lock = loop {
        // The lock object itself, not the temporary file it is written to before its rename
        // (removing that one would fail the put, not the held lock).
        let committed = files_under(&repo.path.join("locks")).into_iter().find(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        });
        if let Some(l) = committed {
            break l;
        }
        assert!(start.elapsed().as_secs() < 30);
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    fs::remove_file(&lock).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lock was removed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(repo.archive_count(), 0);
}

/// Garbage appended to a pack hides its table of contents; repair salvages every blob from
/// the index's offsets into a new pack, and nothing is lost. (In format 1 the salvaged pack
/// could come out byte for byte identical, under the damaged pack's own name, and repair then
/// deleted it: the regression this test was written for. A format 2 pack's table of contents
/// is sealed with a fresh nonce, so a rewrite never has the old name; the guard stays.)
#[test]
fn repair_keeps_every_chunk_of_a_pack_with_garbage_appended() {
    let (repo, src) = setup_two_archives();
    let victim = packs(&repo)
        .into_iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&victim).unwrap();
    bytes.extend_from_slice(b"garbage appended by a faulty disk");
    fs::write(&victim, bytes).unwrap();
    let o = repo.run(&["check", "--repair"]);
    assert!(
        stdout(&o).contains("removed damaged pack") && !stdout(&o).contains("marked"),
        "{}",
        stdout(&o)
    );
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    extract_matches(&repo, "one", &src.join("one"), "one");
    extract_matches(&repo, "two", &src.join("two"), "two");
}

/// Archives named web-1 (twice), web-2 and db, each of one small file.
fn named_archives(repo: &Repo) {
    let src = repo.dir.path().join("s");
    fs::create_dir_all(&src).unwrap();
    for (i, name) in ["web-1", "web-1", "web-2", "db"].iter().enumerate() {
        fs::write(src.join("f"), format!("version {i}")).unwrap();
        let o = repo.run(&["create", name, src.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
}

fn names(repo: &Repo) -> Vec<String> {
    let mut v: Vec<String> = stdout(&repo.run(&["list", "--json-lines"]))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["name"].as_str().unwrap().to_string()
        })
        .collect();
    v.sort();
    v
}

/// Issue 48: delete takes --glob (every archive of every matching name) and --all, and asks
/// before removing what they chose; without a terminal, --yes is the answer.
#[test]
fn delete_by_glob_or_all_asks_first() {
    let repo = Repo::new();
    named_archives(&repo);
    let o = repo.run(&["delete", "--glob", "web-*"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("delete 3 archives chosen by --glob \"web-*\": confirm with --yes"),
        "{}",
        stderr(&o)
    );
    assert_eq!(names(&repo).len(), 4);
    let o = repo.run(&["delete", "--glob", "wbe-*", "--yes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("matches no archive"), "{}", stderr(&o));
    let o = repo.run(&["delete", "--glob", "web-*", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).matches("Would delete archive web-").count(), 3);
    let o = repo.run(&["delete", "--glob", "web-*", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(names(&repo), ["db"]);
    let o = repo.run(&["delete"]);
    assert_eq!(o.status.code(), Some(2));
    let o = repo.run(&["delete", "--all", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(names(&repo).is_empty());
}

/// Found in a first week's trial: prune --glob that matched nothing said "0 archives pruned"
/// and exited 0; a typing error in a cron job went unseen.
#[test]
fn prune_glob_that_matches_nothing_says_so() {
    let repo = Repo::new();
    named_archives(&repo);
    let o = repo.run(&["prune", "--glob", "wbe-*", "--keep-last", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("--glob \"wbe-*\" matches no archive"),
        "{}",
        stderr(&o)
    );
    assert_eq!(names(&repo).len(), 4);
}

/// Issue 48: check and rewrite take --glob too.
#[test]
fn check_and_rewrite_take_a_glob() {
    let repo = Repo::new();
    named_archives(&repo);
    let o = repo.run(&["check", "--glob", "web-*", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["archives"], 3);
    let o = repo.run(&["rewrite", "--glob", "db", "--comment", "kept", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = repo.run(&["rewrite", "--glob", "nothing*", "--comment", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("matches no archive"), "{}", stderr(&o));
}

fn listed(repo: &Repo, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["list", "--json-lines"];
    all.extend_from_slice(args);
    let o = repo.run(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Issue 48: create --timestamp imports dated backups, --tag labels them, list filters on
/// tags, host and user, `cairn tag` changes them, and prune --group-by keeps series by them.
#[test]
fn timestamps_tags_and_filters() {
    let repo = Repo::new();
    let src = repo.dir.path().join("s");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let s = src.to_str().unwrap();
    for (name, tags, time) in [
        ("home", "daily,laptop", "2024-05-01T10:00:00Z"),
        ("home", "daily", "2024-05-02T10:00:00Z"),
        ("home", "weekly", "2024-05-03 10:00"),
        ("etc", "daily , laptop", "2024-05-04"),
    ] {
        let o = repo.run(&["create", name, s, "--tag", tags, "--timestamp", time]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let all = listed(&repo, &[]);
    assert_eq!(
        all[0]["time"], "2024-05-01T10:00:00.000000000+00:00",
        "{all:?}"
    );
    assert_eq!(all[0]["tags"], serde_json::json!(["daily", "laptop"]));
    assert_eq!(all[3]["tags"], serde_json::json!(["daily", "laptop"]));
    assert_eq!(listed(&repo, &["--tag", "daily"]).len(), 3);
    assert_eq!(listed(&repo, &["--tag", "daily,laptop"]).len(), 2);
    assert_eq!(
        listed(&repo, &["--tag", "weekly", "--tag", "laptop"]).len(),
        3
    );
    let host = all[0]["hostname"].as_str().unwrap().to_string();
    assert_eq!(listed(&repo, &["--host", &host]).len(), 4);
    assert_eq!(listed(&repo, &["--host", "elsewhere"]).len(), 0);
    let user = all[0]["username"].as_str().unwrap().to_string();
    assert_eq!(
        listed(&repo, &["--user", &user, "--tag", "weekly"]).len(),
        1
    );
    // Text shows the tags too.
    assert!(repo.ok(&["list"]).contains("[daily,laptop]"));
    // A tag is added and one removed: a new id, the same time.
    let o = repo.run(&["tag", "home", "--add", "keep", "--remove", "weekly"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let home = listed(&repo, &["--tag", "keep"]);
    assert_eq!(home.len(), 1);
    assert_eq!(home[0]["tags"], serde_json::json!(["keep"]));
    assert!(
        home[0]["time"].as_str().unwrap().starts_with("2024-05-0"),
        "{home:?}"
    );
    assert_ne!(home[0]["id"], all[2]["id"]);
    // Grouped by tags, each tag set is a series: keep-last 1 keeps one per set.
    let o = repo.run(&[
        "prune",
        "--keep-last",
        "1",
        "--group-by",
        "tags",
        "--dry-run",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 archives would be pruned, 3 kept"),
        "{}",
        stdout(&o)
    );
    // Only the archives with a tag are considered.
    let o = repo.run(&["prune", "--keep-last", "1", "--tag", "daily", "--dry-run"]);
    assert!(
        stdout(&o).contains("1 archives would be pruned, 2 kept"),
        "{}",
        stdout(&o)
    );
    // Mistakes are said.
    for (args, says) in [
        (
            vec!["create", "x", s, "--timestamp", "yesterday"],
            "is not a time",
        ),
        (vec!["create", "x", s, "--tag", "a,,b"], "an empty tag"),
        (
            vec!["prune", "--keep-last", "1", "--group-by", "hosts"],
            "--group-by takes",
        ),
        (vec!["tag", "home"], "required"),
    ] {
        let o = repo.run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// Found by the attack on delete --glob: waiting at its "Type yes" prompt it held the
/// repository's exclusive lock (refreshed), so a prompt left open made every backup and even
/// `list` fail. Now the lock is let go while it asks, and only what was confirmed is deleted.
#[test]
fn delete_glob_waiting_for_an_answer_does_not_lock_everyone_out() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1)");
        return;
    }
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    repo.ok(&["create", "web-1", src.to_str().unwrap()]);
    let mut cmd = Command::new("script");
    cmd.args([
        "-qec",
        &format!("{} delete --glob 'web-*'", env!("CARGO_BIN_EXE_cairn")),
        "/dev/null",
    ]);
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    let mut prompt = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Until it asks (script gives its terminal's output on its standard output).
    let mut out = prompt.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut said = Vec::new();
    while !String::from_utf8_lossy(&said).contains("Type yes") {
        let more = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("never asked: {}", String::from_utf8_lossy(&said)));
        said.extend(more);
    }
    let o = repo.run(&["--lock-wait", "0", "list"]);
    // Another client adds an archive the glob matches while the question is open.
    repo.ok(&["create", "web-2", src.to_str().unwrap()]);
    prompt.stdin.take().unwrap().write_all(b"yes\n").unwrap();
    let status = prompt.wait().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(status.success());
    // Only what was listed and confirmed went.
    assert_eq!(names(&repo), ["web-2"]);
}
