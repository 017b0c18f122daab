//! Pauses: a process can stop for an hour between any two store operations (SIGSTOP, a
//! suspended laptop, a hung NFS write, a paused VM) while another client acts. Whatever the
//! others do meanwhile, a backup that says 0 must restore, and `check` must not call the
//! repository damaged.
//!
//! The pause is the test build's fault rule (`CAIRN_FAULT=name=archives/:put:pause` stops the
//! process right before its first `put archives/…`; `suspend` plays a suspended machine, whose
//! monotonic clock stands still). The other client has its own cache, so it remembers what it
//! saw of the locks as another machine would, and `CAIRN_TEST_BOOT_OFFSET` plays it an hour
//! later: it has then watched the frozen client's lock unchanged for an hour, and judges it
//! abandoned. No test sleeps.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Paused, Repo};

pub fn tree(root: &Path, seed: u64) {
    fs::create_dir_all(root).unwrap();
    for i in 0..6 {
        fs::write(
            root.join(format!("f{i}")),
            random_bytes(seed * 100 + i, 120_000),
        )
        .unwrap();
    }
}

/// A repository with small packs, and a first archive `base` of `old/`.
fn setup() -> (Repo, PathBuf) {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("old"), 1);
    tree(&base.join("src"), 2);
    let o = repo.run_in(&base, &["create", "base", "old"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (repo, base)
}

/// Another client (its own cache: another machine), `offset` seconds of its boot clock later.
pub fn other(repo: &Repo, client: &str, offset: u64, args: &[&str]) -> Output {
    let cache = repo.dir.path().join(format!("cache-{client}"));
    repo.run_in(
        repo.dir.path(),
        args,
        &[
            ("XDG_CACHE_HOME", cache.to_str().unwrap()),
            ("CAIRN_TEST_BOOT_OFFSET", &offset.to_string()),
        ],
    )
}

pub const HOUR: u64 = 3600;

/// Another client runs `args` while the frozen one holds its lock: refused at first (it sees
/// the lock for the first time), then, an hour later by its own clock, it takes the lock as
/// abandoned, removes it, and runs.
pub fn watch_out_and_run(repo: &Repo, client: &str, args: &[&str]) -> Output {
    let mut first: Vec<&str> = vec!["--lock-wait", "0"];
    first.extend_from_slice(args);
    let refused = other(repo, client, 0, &first);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{args:?} ran beside a held lock: {}{}",
        stdout(&refused),
        stderr(&refused)
    );
    assert!(stderr(&refused).contains("locked"), "{}", stderr(&refused));
    let later = other(repo, client, HOUR, &first);
    assert_eq!(
        later.status.code(),
        Some(0),
        "{args:?} an hour later: {}{}",
        stdout(&later),
        stderr(&later)
    );
    assert!(
        stderr(&later).contains("removed a stale lock"),
        "{}",
        stderr(&later)
    );
    later
}

/// A create of `src/` stopped by the fault rule `rule` (with `env` besides), while another
/// client watches its lock out and compacts the repository; the create's output once it is
/// let go.
fn stopped_while_compacted(repo: &Repo, base: &Path, rule: &str, env: &[(&str, &str)]) -> Output {
    stopped_while_compacted_after(repo, base, rule, env, || {})
}

/// [`stopped_while_compacted`], calling `stopped` once the create is stopped.
fn stopped_while_compacted_after(
    repo: &Repo,
    base: &Path,
    rule: &str,
    env: &[(&str, &str)],
    stopped: impl FnOnce(),
) -> Output {
    let mut with = vec![("CAIRN_FAULT", rule)];
    with.extend_from_slice(env);
    let paused = Paused::start(repo, base, &["create", "new", "src"], &with);
    stopped();
    watch_out_and_run(repo, "compactor", &["compact"]);
    paused.resume()
}

pub fn archives(repo: &Repo) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(repo.path.join("archives"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What the rule says: exit 0 means the archive restores exactly (and check is clean);
/// otherwise the archive is not there. Either way `check` finds no damage: at most packs
/// that the failed create stored after its lock was lost, which nothing names (a warning).
fn nothing_lost(repo: &Repo, created: &Output, src: &Path, before: &[String]) {
    let check = other(repo, "checker", 0, &["check"]);
    let out = stdout(&check);
    let leftovers_only = out
        .lines()
        .filter(|l| l.starts_with("warning:") || l.starts_with("error:"))
        .all(|l| l.starts_with("warning:") && l.contains("not in the index"));
    let clean = check.status.code() == Some(0)
        || (created.status.code() != Some(0) && check.status.code() == Some(1) && leftovers_only);
    assert!(
        clean,
        "check after the create said {:?}: {}{}",
        created.status.code(),
        out,
        stderr(&check)
    );
    let now = archives(repo);
    if created.status.code() == Some(0) {
        assert_eq!(now.len(), before.len() + 1, "the archive saved");
        let target = repo.dir.path().join("restored");
        let o = other(
            repo,
            "checker",
            0,
            &["extract", "new", "--target", target.to_str().unwrap()],
        );
        assert_eq!(
            o.status.code(),
            Some(0),
            "create said 0, extract: {}",
            stderr(&o)
        );
        assert_trees_equal(src, &target.join("src"));
        let v = other(repo, "checker", 0, &["check", "--verify-data"]);
        assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
    } else {
        assert_eq!(created.status.code(), Some(2), "{}", stderr(created));
        assert_eq!(now, before, "a failed create left an archive");
    }
}

/// 1. Suspended right after its index fragment landed: the create's last verification is
///    seconds old by the monotonic clock, which does not count the suspend. Meanwhile another
///    client watched its lock out and compacted. The create must not believe the old
///    verification.
#[test]
fn a_create_suspended_after_its_fragment() {
    let (repo, base) = setup();
    let before = archives(&repo);
    let created = stopped_while_compacted(&repo, &base, "name=index/:put:suspend-after", &[]);
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 2. Stalled inside the archive's write (a hung rename, a PUT stuck in a proxy): every check
///    of the lock passed before the stall. Another client watched the lock out and compacted;
///    then the write lands.
#[test]
fn a_create_stalled_inside_its_archive_write() {
    let (repo, base) = setup();
    let before = archives(&repo);
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "new", "src"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    let compacted = watch_out_and_run(&repo, "compactor", &["compact"]);
    assert!(
        stdout(&compacted).contains("wait"),
        "compact says what waits: {}",
        stdout(&compacted)
    );
    let created = paused.resume();
    // Within the grace interval the archive stands: every pack it needs was kept.
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    assert!(
        stderr(&created).contains("every pack it needs is there"),
        "{}",
        stderr(&created)
    );
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 2d. Stalled inside its archive write while a second create, sharing half its files,
///     deduplicated against its packs and committed; then its lock was watched out and the
///     repository compacted. The packs the second archive uses stay, but the new index leaves
///     out the chunks no archive used then: the first create's own. When its archive lands,
///     those chunks must be indexed again, or it "restores" nothing.
#[test]
fn a_create_stalled_while_another_shared_its_packs() {
    let (repo, base) = setup();
    let half = base.join("half");
    fs::create_dir_all(&half).unwrap();
    for i in [0, 2, 4] {
        fs::copy(base.join(format!("src/f{i}")), half.join(format!("f{i}"))).unwrap();
    }
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "new", "src"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    let shared = repo.run_in(&base, &["create", "half", "half"], &[]);
    assert_eq!(shared.status.code(), Some(0), "{}", stderr(&shared));
    let before = archives(&repo);
    watch_out_and_run(&repo, "compactor", &["compact"]);
    let created = paused.resume();
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 2b. The danger outlives the run that removed the lock: a `delete` watches the stalled
///     create's lock out, and a compact on another machine, later, finds no lock at all.
#[test]
fn a_delete_breaks_the_lock_and_a_later_compact_elsewhere_finds_none() {
    let (repo, base) = setup();
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "new", "src"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    watch_out_and_run(&repo, "deleter", &["delete", "base"]);
    let before = archives(&repo);
    let compacted = other(&repo, "compactor", 0, &["compact"]);
    assert_eq!(compacted.status.code(), Some(0), "{}", stderr(&compacted));
    let created = paused.resume();
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 2c. Paused for longer than any grace: another client has watched the record of the broken
///     lock for days, and frees the space at once. The create's archive then lands on packs
///     that are gone: it must notice, remove its archive and say so (exit 2), never exit 0.
#[test]
fn a_create_paused_beyond_every_grace_is_not_silently_lost() {
    let (repo, base) = setup();
    let before = archives(&repo);
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "new", "src"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    watch_out_and_run(&repo, "compactor", &["compact", "--dry-run"]);
    // Days later, by the same client's clock: whatever waited is freed now.
    let freed = other(&repo, "compactor", 3 * 24 * HOUR, &["compact"]);
    assert_eq!(freed.status.code(), Some(0), "{}", stderr(&freed));
    let created = paused.resume();
    assert_ne!(
        created.status.code(),
        Some(0),
        "the create's packs were deleted, yet it said 0: {}",
        stderr(&created)
    );
    assert!(
        stderr(&created).contains("removed"),
        "it says what happened to its archive: {}",
        stderr(&created)
    );
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 3. A refresh that reads the lock back, pauses, then rewrites it would recreate a lock that
///    another client removed meanwhile; every later verification would then pass.
#[test]
fn a_refresh_paused_between_its_read_and_its_write_does_not_resurrect_the_lock() {
    let (repo, base) = setup();
    let before = archives(&repo);
    let packs = repo.pack_count();
    // The lock's third write: the lock is taken, sealed once the key opens (unless the key
    // opened first), and refreshed every two seconds; so the first or second periodic refresh,
    // two or four seconds into a create slow enough to have stored packs by then and to last
    // beyond (0.5 s a pack, 2.2 MB).
    tree(&base.join("src/more"), 3);
    tree(&base.join("src/more2"), 4);
    let created = stopped_while_compacted_after(
        &repo,
        &base,
        "name=locks/@3:put:pause",
        &[
            ("CAIRN_LOCK_REFRESH_SECS", "2"),
            ("CAIRN_STORE_LATENCY", "100000"),
            ("CAIRN_STORE_BANDWIDTH", "3200000"),
        ],
        || {
            assert!(
                repo.pack_count() > packs,
                "the create had stored no pack when its refresh paused"
            )
        },
    );
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 5. Paused after its commit-time verification, before its index fragment lands: the
///    fragment then names packs the other client retired. Nothing may be lost (no archive is
///    committed), and `check` must not call the repository damaged for it.
#[test]
fn a_late_fragment_is_not_damage() {
    let (repo, base) = setup();
    let before = archives(&repo);
    let created = stopped_while_compacted(&repo, &base, "name=index/:put:pause", &[]);
    nothing_lost(&repo, &created, &base.join("src"), &before);
}

/// 6. `check` beside a running backup: the backup's packs that no fragment names yet are in
///    progress, not left by an interrupted command (no warning, exit 0).
#[test]
fn check_beside_a_running_backup_is_clean() {
    let (repo, base) = setup();
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "new", "src"],
        &[("CAIRN_FAULT", "name=packs/@2:put:pause")],
    );
    let check = other(&repo, "checker", 0, &["check"]);
    let created = paused.resume();
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    assert!(stdout(&check).contains("in progress"), "{}", stdout(&check));
}

/// 4. A live create on a slow link (2 Mbit/s, one connection, four packs in flight) must not
///    look dead to a client watching its lock: the refresh goes over a connection of its own
///    (the store's lane), never behind the pack uploads. Timing is the point here: a refresh
///    every second, stale after three, packs that take 2 s each to upload, so that a refresh
///    queued behind the packs in flight would wait 6 to 8 s.
#[test]
fn a_create_on_a_slow_link_keeps_its_lock() {
    let (repo, base) = setup();
    let src = base.join("slow");
    fs::create_dir_all(&src).unwrap();
    for i in 0..6 {
        fs::write(src.join(format!("f{i}")), random_bytes(900 + i, 500_000)).unwrap();
    }
    let timing = [
        ("CAIRN_LOCK_REFRESH_SECS", "1"),
        ("CAIRN_LOCK_STALE_SECS", "3"),
    ];
    let mut slow = timing.to_vec();
    slow.extend([
        ("CAIRN_STORE_BANDWIDTH", "2000000"),
        ("CAIRN_PACK_SIZE", "500000"),
        ("CAIRN_PACK_INFLIGHT", "4"),
    ]);
    let packs = repo.pack_count();
    let create = repo
        .command(&base, &["create", "new", "slow"], &slow)
        .spawn()
        .unwrap();
    // The create holds its lock and uploads.
    let start = Instant::now();
    while repo.pack_count() == packs {
        assert!(start.elapsed() < Duration::from_secs(60), "no pack stored");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The watcher waits for the lock to go away, and would take it as abandoned if it saw it
    // unchanged for three seconds.
    let cache = repo.dir.path().join("cache-watcher");
    let mut watcher_env = timing.to_vec();
    watcher_env.push(("XDG_CACHE_HOME", cache.to_str().unwrap()));
    let watcher = repo
        .command(&base, &["--lock-wait", "120", "compact"], &watcher_env)
        .spawn()
        .unwrap();
    let created = create.wait_with_output().unwrap();
    let compacted = watcher.wait_with_output().unwrap();
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    assert_eq!(compacted.status.code(), Some(0), "{}", stderr(&compacted));
    assert!(
        !stderr(&compacted).contains("removed a stale lock"),
        "a live create's lock was taken as abandoned: {}",
        stderr(&compacted)
    );
    let before = archives(&repo);
    let target = repo.dir.path().join("restored-slow");
    let o = other(
        &repo,
        "checker",
        0,
        &["extract", "new", "--target", target.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_trees_equal(&src, &target.join("slow"));
    assert_eq!(before.len(), 2);
}
