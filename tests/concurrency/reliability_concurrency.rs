//! Concurrency: several clients on one repository. Maintenance (compact) never runs while a
//! create may still commit, whatever the other client's PID namespace or clock; a create whose
//! lock was broken commits nothing; two creates of the same data at once leave a repository
//! that checks clean and costs later creates no extra reads.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, wait_for_sealed_locks, Repo};

fn spawn(repo: &Repo, cwd: &Path, args: &[&str], extra: &[(&str, &str)]) -> Child {
    repo.command(cwd, args, extra).spawn().unwrap()
}

fn tree(root: &Path, seed: u64) {
    fs::create_dir_all(root).unwrap();
    for i in 0..8 {
        fs::write(
            root.join(format!("f{i}")),
            random_bytes(seed * 10 + i, 150_000),
        )
        .unwrap();
    }
    // Shared by both trees: both creates store these chunks at the same time.
    fs::write(root.join("common"), random_bytes(4242, 400_000)).unwrap();
}

/// Waits until the repository has more than `n` packs: a running create has stored data that
/// no index fragment names yet.
fn wait_for_packs_beyond(repo: &Repo, n: usize) {
    let start = Instant::now();
    while repo.pack_count() <= n {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn extract_matches(repo: &Repo, base: &Path, archive: &str, source: &Path) {
    let target = base.join(format!("out-{archive}"));
    repo.ok(&["extract", archive, "--target", target.to_str().unwrap()]);
    assert_trees_equal(source, &target.join(source.file_name().unwrap()));
}

/// While two creates are storing data, a compact must be refused; one that waits runs after
/// them; both archives are exact. Against a lock that does nothing, the compact runs at once
/// and deletes the packs the creates have stored but not yet indexed.
#[test]
fn two_creates_at_once_and_compact_during_create() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "300000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"), 1);
    tree(&base.join("b"), 2);
    let slow = [
        ("CAIRN_STORE_LATENCY", "200000"),
        ("CAIRN_PACK_INFLIGHT", "1"),
        // Their locks sealed at their first refresh, a second in (so that the refusal can
        // name them).
        ("CAIRN_LOCK_REFRESH_SECS", "1"),
    ];
    let ca = spawn(&repo, &base, &["create", "a", "a"], &slow);
    let cb = spawn(&repo, &base, &["create", "b", "b"], &slow);
    // Both have stored packs and neither has committed.
    wait_for_packs_beyond(&repo, 2);
    wait_for_sealed_locks(&repo.path, 2);
    assert_eq!(repo.archive_count(), 0, "the creates are slower than this");
    let refused = repo.run(&["--lock-wait", "0", "compact"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "compact ran while creates were storing data: {}{}",
        stdout(&refused),
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains("repository is locked")
            && stderr(&refused).contains("shared lock held by create"),
        "{}",
        stderr(&refused)
    );
    let waiting = spawn(&repo, &base, &["--lock-wait", "120", "compact"], &[]);
    let (oa, ob, oc) = (
        ca.wait_with_output().unwrap(),
        cb.wait_with_output().unwrap(),
        waiting.wait_with_output().unwrap(),
    );
    assert_eq!(oa.status.code(), Some(0), "{}", stderr(&oa));
    assert_eq!(ob.status.code(), Some(0), "{}", stderr(&ob));
    assert_eq!(oc.status.code(), Some(0), "{}", stderr(&oc));
    let check = repo.run(&["check", "--verify-data"]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    for name in ["a", "b"] {
        extract_matches(&repo, &base, name, &base.join(name));
    }
}

fn can_unshare() -> bool {
    nix::unistd::geteuid().is_root()
        && Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "true"])
            .status()
            .is_ok_and(|s| s.success())
}

/// The case of two containers that share a hostname but not a PID namespace: the create's
/// PID is dead as seen from the compact's namespace, and its lock still protects it.
#[test]
fn compact_in_another_pid_namespace_leaves_a_running_create_alone() {
    if !can_unshare() {
        eprintln!("skipped: needs root and unshare --pid (a separate PID namespace)");
        return;
    }
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"), 1);
    tree(&base.join("src"), 2);
    repo.run_in(&base, &["create", "a1", "a"], &[]);
    let before = repo.pack_count();
    let slow = [
        ("CAIRN_PACK_SIZE", "300000"),
        ("CAIRN_STORE_LATENCY", "100000"),
        ("CAIRN_PACK_INFLIGHT", "1"),
    ];
    let create = spawn(&repo, &base, &["create", "a2", "src"], &slow);
    wait_for_packs_beyond(&repo, before);
    let compact = repo
        .command_via(
            &["unshare", "--pid", "--fork", "--kill-child"],
            &base,
            &["--lock-wait", "0", "compact"],
            &[],
        )
        .output()
        .unwrap();
    let created = create.wait_with_output().unwrap();
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    assert_eq!(
        compact.status.code(),
        Some(2),
        "compact in another PID namespace ran: {}",
        stdout(&compact)
    );
    assert!(
        stderr(&compact).contains("repository is locked"),
        "{}",
        stderr(&compact)
    );
    let check = repo.run(&["check"]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    extract_matches(&repo, &base, "a2", &base.join("src"));
}

/// A create whose lock disappears while it runs (another client judged it abandoned, or a
/// person broke it) commits nothing: it verifies its lock right before it commits.
#[test]
fn a_create_whose_lock_was_removed_commits_nothing() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("src"), 3);
    let slow = [
        ("CAIRN_PACK_SIZE", "300000"),
        ("CAIRN_STORE_LATENCY", "250000"),
        // Its lock sealed at its first refresh, a second in (the emulated link queues
        // requests: the lock is not rotated before that just to seal it), long before it
        // commits.
        ("CAIRN_LOCK_REFRESH_SECS", "1"),
    ];
    let create = spawn(&repo, &base, &["create", "c", "src"], &slow);
    wait_for_packs_beyond(&repo, 0);
    let lock = wait_for_sealed_locks(&repo.path, 1);
    fs::remove_file(&lock[0]).unwrap();
    let o = create.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("removed by another process"),
        "{}",
        stderr(&o)
    );
    assert_eq!(repo.archive_count(), 0, "nothing committed");
    assert!(
        fs::read_dir(repo.path.join("locks")).unwrap().count() == 0,
        "and it did not recreate its lock"
    );
}

fn plant_lock(repo: &Repo, name: &str, host_id_machine: &str) {
    let lock = serde_json::json!({
        "kind": "exclusive", "host": "elsewhere", "pid": 4242, "user": "u",
        "command": "compact", "created": 0, "refreshed": 0,
        "host_id": {"machine": host_id_machine, "boot": "b", "pid_ns": "p"},
        "generation": 0
    });
    repo.plant_lock(name, lock);
}

/// A lock of another host is judged by what this client watched: taken as abandoned only once
/// it was seen unchanged for the stale interval, across runs; `break-lock` removes it at once.
#[test]
fn another_hosts_lock_goes_stale_only_when_watched_and_break_lock_removes_it() {
    let repo = Repo::with_env(&[
        ("CAIRN_LOCK_REFRESH_SECS", "1"),
        ("CAIRN_LOCK_STALE_SECS", "3"),
    ]);
    let lock_name = "0123456789abcdef0123456789abcdef";
    plant_lock(&repo, lock_name, "another-machine");
    let first = repo.run(&["--lock-wait", "0", "list"]);
    assert_eq!(first.status.code(), Some(2), "{}", stderr(&first));
    let msg = stderr(&first);
    assert!(
        msg.contains("an exclusive lock held by compact (pid 4242 on elsewhere")
            && msg.contains("break-lock"),
        "{msg}"
    );
    // Watched unchanged for longer than the stale interval, by this client's boot clock, which
    // the test moves 10 s on rather than wait.
    let later = repo.run_env(
        &["--lock-wait", "0", "list"],
        &[("CAIRN_TEST_BOOT_OFFSET", "10")],
    );
    assert_eq!(later.status.code(), Some(0), "{}", stderr(&later));
    assert!(
        stderr(&later).contains("removed a stale lock"),
        "{}",
        stderr(&later)
    );

    plant_lock(&repo, lock_name, "another-machine");
    assert_eq!(
        repo.run(&["--lock-wait", "0", "list"]).status.code(),
        Some(2)
    );
    let broken = repo.ok(&["break-lock"]);
    assert!(broken.contains("1 lock removed"), "{broken}");
    repo.ok(&["--lock-wait", "0", "list"]);
}

/// Two creates of identical data at once store the same chunks twice; every pack is still
/// named by a fragment: check finds nothing to warn about, and the next create reads no pack.
#[test]
fn two_creates_of_the_same_data_leave_no_unindexed_pack() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "1000000")]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..3 {
        fs::write(src.join(format!("f{i}")), random_bytes(700 + i, 1_500_000)).unwrap();
    }
    let slow = [("CAIRN_STORE_LATENCY", "50000")];
    let one = spawn(&repo, &base, &["create", "x1", "src"], &slow);
    let two = spawn(&repo, &base, &["create", "x2", "src"], &slow);
    for o in [
        one.wait_with_output().unwrap(),
        two.wait_with_output().unwrap(),
    ] {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let check = repo.run(&["check"]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    let log = base.join("ops.log");
    let log_s = log.to_str().unwrap();
    let third = repo.run_in(
        &base,
        &["create", "x3", "src"],
        &[("CAIRN_STORE_LOG", log_s)],
    );
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    let reads = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" get packs/"))
        .count();
    assert_eq!(reads, 0, "the next create read packs");
}

/// The store operations of one command, from `CAIRN_STORE_LOG` (`N kind name` lines), as
/// `kind name`.
fn logged_ops(repo: &Repo, cwd: &Path, args: &[&str]) -> Vec<String> {
    let log = repo.dir.path().join(format!("ops-{}.log", rand_suffix()));
    let o = repo.run_in(cwd, args, &[("CAIRN_STORE_LOG", log.to_str().unwrap())]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.to_string())
        .collect()
}

/// Where `op` is in `ops`, which must hold it exactly once.
fn only_once(ops: &[String], op: &str) -> usize {
    let found: Vec<usize> = (0..ops.len()).filter(|&i| ops[i] == op).collect();
    assert_eq!(found.len(), 1, "{op} once: {ops:#?}");
    found[0]
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// A backup lists the index, the packs and the archives while its key is derived, but only
/// once its lock is taken (a compact cannot be changing what it lists), and each once. It
/// verifies its lock once to commit: the index fragment and the archive object follow that
/// verification (a read of the lock: it was written moments ago) directly, and one more read
/// right after the archive confirms the lock was held throughout. Before, a second read-back
/// and rewrite of the lock came between them: two round trips of every backup to a far-away
/// store.
#[test]
fn a_backup_lists_once_it_holds_its_lock_and_verifies_the_lock_once_to_commit() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("src"), 5);
    for round in ["first", "second"] {
        let ops = logged_ops(&repo, &base, &["create", round, "src"]);
        let at = |op: &str| only_once(&ops, op);
        let locked = at("list locks");
        assert!(
            ops[..locked].iter().any(|o| o.starts_with("put locks/")),
            "{ops:#?}"
        );
        for listing in ["list index", "list packs"] {
            assert!(at(listing) > locked, "{listing} before the lock: {ops:#?}");
        }
        // The second backup adds no chunk, and so no index fragment.
        let archive = ops
            .iter()
            .position(|o| o.starts_with("put archives/"))
            .expect("an archive");
        let fragment = usize::from(round == "first");
        assert!(
            ops[archive - fragment..archive]
                .iter()
                .all(|o| o.starts_with("put index/")),
            "{ops:#?}"
        );
        // The lock is written when taken; if the key was still being derived then, it was
        // written without details and is written once more, sealed, a second after the key
        // opens if the create still runs: that rotation reads the first object back once and
        // removes it.
        let writes: Vec<&str> = ops
            .iter()
            .filter_map(|o| o.strip_prefix("put locks/"))
            .collect();
        let count = |op: String| ops.iter().filter(|o| **o == op).count();
        let sealed = match writes[..] {
            [only] => only,
            [bare, sealed] => {
                assert_eq!(count(format!("get locks/{bare}")), 1, "{ops:#?}");
                assert_eq!(count(format!("delete locks/{bare}")), 1, "{ops:#?}");
                sealed
            }
            _ => panic!("the lock is written when taken, and when sealed: {ops:#?}"),
        };
        let verified = archive - fragment;
        assert_eq!(
            ops[verified - 1],
            format!("get locks/{sealed}"),
            "the lock verified right before the fragment and the archive: {ops:#?}"
        );
        assert_eq!(
            ops[archive + 1],
            format!("get locks/{sealed}"),
            "and confirmed right after the archive: {ops:#?}"
        );
        assert_eq!(count(format!("get locks/{sealed}")), 2, "{ops:#?}");
    }
    // A command that reads lists the same way: after its (shared) lock, each listing once.
    let target = base.join("restored");
    let ops = logged_ops(
        &repo,
        &base,
        &["extract", "first", "--target", target.to_str().unwrap()],
    );
    let at = |op: &str| only_once(&ops, op);
    let locked = at("list locks");
    assert!(
        at("list index") > locked && at("list archives") > locked,
        "{ops:#?}"
    );
    assert_trees_equal(&base.join("src"), &target.join("src"));
}

/// The lock is taken while the key is derived; a wrong passphrase is still what the user
/// hears of, at once, even while a conflicting lock would be waited for, and no lock of the
/// failed command is left behind.
#[test]
fn a_wrong_passphrase_is_said_at_once_while_a_conflicting_lock_is_waited_for() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("src"), 6);
    let lock_name = "00112233445566778899aabbccddeeff";
    plant_lock(&repo, lock_name, "another-machine");
    let started = Instant::now();
    let o = repo.run_in(
        &base,
        &["--lock-wait", "120", "create", "c", "src"],
        &[("CAIRN_PASSPHRASE", "not the passphrase")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("passphrase"), "{}", stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "waited {:?} for the lock of a command that had already failed",
        started.elapsed()
    );
    let left: Vec<String> = fs::read_dir(repo.path.join("locks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, [lock_name]);
    assert_eq!(repo.archive_count(), 0);
}
