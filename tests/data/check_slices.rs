//! Verification in slices: `check --subset`, `--max-duration`, `--archive`, the client's
//! record of verified packs (coverage in `check` and `info`), and `extract --verify`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, stderr, stdout, Paused, Repo};

/// Small packs, so that a few MB make many of them.
const SMALL_PACKS: (&str, &str) = ("CAIRN_PACK_SIZE", "300000");

fn write_files(dir: &Path, seed: u64, n: usize) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let bytes = common::random_bytes(seed * 1000 + i as u64, 120_000);
        fs::write(dir.join(format!("f{i}")), bytes).unwrap();
    }
}

/// A repository with archive `a` of 30 files in many small packs.
fn repo_with_packs() -> Repo {
    let repo = Repo::with_env(&[SMALL_PACKS]);
    let src = repo.dir.path().join("a");
    write_files(&src, 1, 30);
    ok(&repo, &["create", "a", src.to_str().unwrap()]);
    repo
}

fn ok(repo: &Repo, args: &[&str]) -> String {
    let o = repo.run(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

fn json(repo: &Repo, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let o = repo.run_env(&all, env);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {} {}", stdout(&o), stderr(&o)));
    (o.status.code(), v)
}

fn packs(repo: &Repo) -> Vec<PathBuf> {
    common::files_under(&repo.path.join("packs"))
}

/// Which of `m` fixed parts (from 1) holds the pack at `path`: restic's meaning, by its id.
fn part_of(path: &Path, m: u32) -> u32 {
    let name = path.file_name().unwrap().to_str().unwrap();
    let head = u64::from_str_radix(&name[..16], 16).unwrap();
    ((u128::from(head) * u128::from(m)) >> 64) as u32 + 1
}

fn figure(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        cur = match p.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[*p],
        };
    }
    cur.as_u64().unwrap_or_else(|| panic!("{path:?} in {v:#}"))
}

#[test]
fn the_fixed_parts_together_verify_every_pack_once() {
    let repo = repo_with_packs();
    let n = packs(&repo).len() as u64;
    assert!(n >= 10, "{n} packs");
    let (code, v) = json(&repo, &["check"], &[]);
    assert_eq!(code, Some(0));
    assert_eq!(figure(&v, &["coverage", "never_packs"]), n, "{v:#}");
    let mut verified = 0;
    for part in 1..=3 {
        let (code, v) = json(&repo, &["check", "--subset", &format!("{part}/3")], &[]);
        assert_eq!(code, Some(0), "{v:#}");
        let want = packs(&repo)
            .iter()
            .filter(|p| part_of(p, 3) == part)
            .count() as u64;
        assert_eq!(figure(&v, &["slice", "verified_packs"]), want, "{v:#}");
        verified += want;
    }
    assert_eq!(verified, n);
    let (_, v) = json(&repo, &["check"], &[]);
    assert_eq!(figure(&v, &["coverage", "never_packs"]), 0, "{v:#}");
    assert_eq!(figure(&v, &["coverage", "within", "0", "packs"]), n);
    // Eight days later nothing was verified in the last week, and the oldest is that old.
    let later = [("CAIRN_TEST_CLOCK_OFFSET", "691200")];
    let (_, v) = json(&repo, &["check"], &later);
    assert_eq!(
        figure(&v, &["coverage", "within", "1", "packs"]),
        0,
        "{v:#}"
    );
    assert!(
        figure(&v, &["coverage", "oldest_age_secs"]) >= 691_200,
        "{v:#}"
    );
    let info = repo.run_env(&["info"], &later);
    assert!(
        stdout(&info)
            .contains("0% in 7 days, 100% in 30 days; the oldest verification is 8 days old"),
        "{}",
        stdout(&info)
    );
}

#[test]
fn shares_take_the_packs_verified_longest_ago_and_cover_everything() {
    let repo = repo_with_packs();
    let n = packs(&repo).len() as u64;
    let mut runs = 0;
    loop {
        let (code, v) = json(&repo, &["check", "--subset", "25%"], &[]);
        assert_eq!(code, Some(0), "{v:#}");
        runs += 1;
        if figure(&v, &["coverage", "never_packs"]) == 0 {
            break;
        }
        assert!(
            runs < 4,
            "four runs of 25% leave packs never verified: {v:#}"
        );
    }
    // The next share starts again with the ones verified first: a day later, a quarter of
    // the data is new again.
    let later = [("CAIRN_TEST_CLOCK_OFFSET", "90000")];
    let (_, v) = json(&repo, &["check", "--subset", "25%"], &later);
    let fresh = figure(&v, &["coverage", "within", "0", "packs"]);
    assert_eq!(fresh, figure(&v, &["slice", "verified_packs"]), "{v:#}");
    assert!(fresh < n);
}

#[test]
fn a_damaged_pack_is_found_by_the_slice_that_holds_it_with_the_archive_using_it() {
    let repo = repo_with_packs();
    let src = repo.dir.path().join("b");
    write_files(&src, 2, 3);
    let before = packs(&repo);
    ok(&repo, &["create", "b", src.to_str().unwrap()]);
    let new: Vec<PathBuf> = packs(&repo)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    // A bit flipped at the start of a pack of b's (its blobs, not its table of contents): a
    // plain check does not see it.
    let victim = new
        .iter()
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(victim).unwrap();
    bytes[100] ^= 1;
    fs::write(victim, bytes).unwrap();
    assert_eq!(repo.run(&["check"]).status.code(), Some(0));
    let holding = part_of(victim, 4);
    for part in (1..=4).filter(|p| *p != holding) {
        let o = repo.run(&["check", "--subset", &format!("{part}/4")]);
        assert_eq!(o.status.code(), Some(0), "part {part}: {}", stdout(&o));
    }
    let o = repo.run(&["check", "--subset", &format!("{holding}/4")]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("Files using missing or damaged data:"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("  b (aid:")), "{out}");
    // Found damaged, it is not noted as verified: it still counts as never verified.
    let (_, v) = json(&repo, &["check"], &[]);
    assert_eq!(figure(&v, &["coverage", "never_packs"]), 1, "{v:#}");
}

#[test]
fn max_duration_reads_at_least_a_pack_and_the_next_run_goes_on() {
    let repo = repo_with_packs();
    let n = packs(&repo).len() as u64;
    let args = ["check", "--max-duration", "0.000001", "--threads", "1"];
    let (code, v) = json(&repo, &args, &[]);
    assert_eq!(code, Some(0), "{v:#}");
    let first = figure(&v, &["slice", "verified_packs"]);
    assert!(first >= 1 && first < n, "{v:#}");
    assert_eq!(figure(&v, &["slice", "left_packs"]), n - first);
    let mut never = figure(&v, &["coverage", "never_packs"]);
    let mut runs = 1;
    while never > 0 {
        let (code, again) = json(&repo, &args, &[]);
        assert_eq!(code, Some(0), "{again:#}");
        let now = figure(&again, &["coverage", "never_packs"]);
        assert!(now < never, "no progress: {again:#}");
        never = now;
        runs += 1;
        assert!(runs <= n);
    }
}

#[test]
fn a_killed_check_loses_only_the_packs_in_progress() {
    let repo = repo_with_packs();
    let n = packs(&repo).len() as u64;
    let mut cmd = repo.command(
        repo.dir.path(),
        &["check", "--verify-data", "--threads", "1"],
        &[("CAIRN_TEST_PAUSE_AT", "check:verified@4")],
    );
    cmd.stdout(std::process::Stdio::null());
    let paused = Paused::of(cmd.spawn().unwrap(), &["check"]);
    let mut child = paused.child;
    child.kill().unwrap();
    child.wait().unwrap();
    let (_, v) = json(&repo, &["check"], &[]);
    assert_eq!(figure(&v, &["coverage", "never_packs"]), n - 3, "{v:#}");
    // A share of exactly what is left verifies exactly the others.
    let left = figure(&v, &["coverage", "never_bytes"]);
    let (_, v) = json(&repo, &["check", "--subset", &format!("{left}B")], &[]);
    assert_eq!(figure(&v, &["slice", "verified_packs"]), n - 3, "{v:#}");
    assert_eq!(figure(&v, &["coverage", "never_packs"]), 0, "{v:#}");
}

#[test]
fn an_archive_is_verified_from_exactly_the_packs_it_needs() {
    let repo = repo_with_packs();
    let a_packs = packs(&repo);
    let src = repo.dir.path().join("b");
    write_files(&src, 2, 10);
    ok(&repo, &["create", "b", src.to_str().unwrap()]);
    let b_packs: Vec<PathBuf> = packs(&repo)
        .into_iter()
        .filter(|p| !a_packs.contains(p))
        .collect();
    assert!(!b_packs.is_empty());
    let (code, v) = json(&repo, &["check", "-a", "a", "--verify-data"], &[]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(
        figure(&v, &["slice", "verified_packs"]),
        a_packs.len() as u64,
        "{v:#}"
    );
    assert_eq!(figure(&v, &["archives"]), 1);
    // Damage in a pack only b uses: a's check does not read it, b's finds it.
    let mut bytes = fs::read(&b_packs[0]).unwrap();
    bytes[100] ^= 1;
    fs::write(&b_packs[0], bytes).unwrap();
    assert_eq!(
        repo.run(&["check", "-a", "a", "--verify-data"])
            .status
            .code(),
        Some(0)
    );
    let o = repo.run(&["check", "-a", "b", "--verify-data"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    // Mistyped: said, with a suggestion.
    let o = repo.run(&["check", "-a", "bb", "--verify-data"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no archive named \"bb\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn slices_refuse_what_they_cannot_do_and_say_why() {
    let repo = repo_with_packs();
    for (args, says) in [
        (vec!["check", "--subset", "0/7"], "1 ≤ N ≤ M"),
        (vec!["check", "--subset", "8/7"], "1 ≤ N ≤ M"),
        (vec!["check", "--subset", "150%"], "from 0.001 to 100"),
        (vec!["check", "--subset", "1"], "a bare number is ambiguous"),
        (vec!["check", "--subset", "lots"], "expected N/M"),
        (vec!["check", "--max-duration", "soon"], "--max-duration"),
        (
            vec!["check", "--subset", "1/7", "--repair"],
            "cannot be used with",
        ),
        (
            vec!["check", "--max-duration", "1h", "--repository-only"],
            "cannot be used with",
        ),
    ] {
        let o = repo.run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_forged_or_planted_record_verifies_nothing() {
    let repo = repo_with_packs();
    ok(&repo, &["check", "--verify-data"]);
    let record = record_of(&repo);
    let mut bytes = fs::read(&record).unwrap();
    // Every entry's time moved a year on: none authenticates any more.
    for e in bytes[16..].chunks_mut(56) {
        e[36] ^= 1;
    }
    fs::write(&record, &bytes).unwrap();
    let o = repo.run(&["check", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        figure(&v, &["coverage", "never_packs"]),
        packs(&repo).len() as u64
    );
    assert!(stdout(&o).contains("do not authenticate"), "{}", stdout(&o));
    // A symlink planted where the record goes is neither read nor written through.
    let elsewhere = repo.dir.path().join("elsewhere");
    fs::write(&elsewhere, b"keep").unwrap();
    fs::remove_file(&record).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
    let o = repo.run(&["check", "--subset", "1/2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("cannot be read"), "{}", stdout(&o));
    assert_eq!(fs::read(&elsewhere).unwrap(), b"keep");
    assert!(!fs::symlink_metadata(&record)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn extract_verify_reads_back_what_it_wrote_and_catches_a_lost_write() {
    let repo = repo_with_packs();
    let target = repo.dir.path().join("restore");
    let t = target.to_str().unwrap();
    let out = ok(&repo, &["extract", "a", "--target", t, "--verify"]);
    assert!(
        out.contains("Read back 30 files") && out.contains("every one as the archive holds it"),
        "{out}"
    );
    // The disk loses a write between the restore and the read back.
    fs::remove_dir_all(&target).unwrap();
    let paused = Paused::of(
        repo.command(
            repo.dir.path(),
            &["extract", "a", "--target", t, "--verify"],
            &[("CAIRN_TEST_PAUSE_AT", "extract:read-back")],
        )
        .spawn()
        .unwrap(),
        &["extract"],
    );
    let victim = target
        .join(repo.dir.path().join("a").strip_prefix("/").unwrap())
        .join("f7");
    let mut bytes = fs::read(&victim).unwrap();
    bytes[70_000] ^= 0x40;
    fs::write(&victim, bytes).unwrap();
    fs::remove_file(victim.with_file_name("f8")).unwrap();
    let o = paused.resume();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("f7: differs from the archive"), "{err}");
    assert!(err.contains("f8: missing from the target"), "{err}");
    assert!(err.contains("2 files restored did not read back"), "{err}");
}

#[test]
fn a_slice_reads_only_its_packs() {
    let repo = repo_with_packs();
    let log = repo.dir.path().join("ops.log");
    let o = repo.run_env(
        &["check", "--subset", "2/3"],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let read: Vec<String> = common::op_log(&log)
        .into_iter()
        .filter_map(|l| l.split(' ').nth(2).map(String::from))
        .filter(|n| n.starts_with("packs/"))
        .collect();
    let want: Vec<String> = packs(&repo)
        .iter()
        .filter(|p| part_of(p, 3) == 2)
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            format!("packs/{}/{name}", &name[..2])
        })
        .collect();
    let mut got = read.clone();
    got.sort();
    got.dedup();
    // Its packs, whole, and beside them only the archive's item stream (one ranged read of a
    // pack, for 30 files): no other pack's table of contents.
    assert!(want.iter().all(|w| got.contains(w)), "{read:?}");
    assert!(got.len() <= want.len() + 1, "{read:?} for {want:?}");
    assert!(packs(&repo).len() > want.len() + 1);
}

/// Flips a byte in the middle of `pack` (its blob area: a TOC read does not see it).
fn damage(pack: &Path) {
    let mut b = fs::read(pack).unwrap();
    let mid = b.len() / 3;
    b[mid] ^= 0xff;
    fs::write(pack, b).unwrap();
}

/// `<cache>/cairn/<repository id>/`, the one directory named by a 64-hex id.
fn repo_cache(repo: &Repo) -> PathBuf {
    let base = repo.dir.path().join("cache").join("cairn");
    fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().len() == 64)
        .expect("repository cache directory")
}

fn json_at(repo: &Repo, repo_path: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = vec!["-r", repo_path.to_str().unwrap()];
    all.extend_from_slice(args);
    all.push("--json");
    let o = repo.run(&all);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {} {}", stdout(&o), stderr(&o)));
    (o.status.code(), v)
}

/// Runs `args` on `repo`, killing it (SIGKILL) after `limit`: `None` when it had to be killed.
fn run_with_limit(repo: &Repo, args: &[&str], limit: Duration) -> Option<i32> {
    let mut child = repo
        .command(repo.dir.path(), args, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Found by the attack on this change: a FIFO planted at the record's path, which
/// `Record::load` opened O_RDONLY without O_NONBLOCK, blocking for a writer. `info` and every `check` (even without
/// --verify-data) hang for ever; check catches SIGTERM and stays blocked (only SIGKILL ends it).
#[test]
fn a_fifo_at_the_record_path_does_not_hang_check_or_info() {
    let repo = repo_with_packs();
    let o = repo.run(&["check", "--verify-data", "--subset", "1/2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let record = record_of(&repo);
    fs::remove_file(&record).unwrap();
    nix::unistd::mkfifo(&record, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for args in [
        &["info"][..],
        &["check"][..],
        &["check", "--verify-data", "--subset", "10%"][..],
    ] {
        let code = run_with_limit(&repo, args, Duration::from_secs(60));
        assert!(
            code.is_some(),
            "{args:?} hung on a FIFO at {}",
            record.display()
        );
    }
}

/// Runs cairn as a uid that has no passwd entry, without HOME and XDG_CACHE_HOME: the
/// record has no path at all.
fn as_homeless(base: &Path, args: &[&str]) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_cairn");
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=4242", "--regid=4242", "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") || k == "HOME" || k == "XDG_CACHE_HOME" {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .args(args)
        .env("CAIRN_REPO", base.join("repo"))
        .env("CAIRN_PASSPHRASE", "pw")
        .env("CAIRN_TEST_CHEAP_KDF", "1")
        .env(SMALL_PACKS.0, SMALL_PACKS.1)
        .current_dir(base)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Found by the attack on this change: with no cache directory at all (a service without
/// HOME, as a user with no home) the record was silently not kept, and every `--subset P%`
/// run read the same lowest-id packs: a damaged pack outside them was never read, and every
/// run exited 0 with no warning. Now that is a warning, and the packs are drawn at random.
#[test]
fn without_a_record_percent_slices_do_not_skip_a_damaged_pack_silently() {
    if !nix::unistd::geteuid().is_root() {
        return; // needs a uid without a passwd entry
    }
    let base = tempfile::tempdir().unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = base.path().join("src");
    write_files(&src, 2, 30);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(as_homeless(base.path(), &["init"]).status.code(), Some(0));
    let o = as_homeless(base.path(), &["create", "a", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut all = common::files_under(&base.path().join("repo").join("packs"));
    all.sort();
    assert!(all.len() >= 10);
    damage(all.last().unwrap());
    // Ten runs of 10% would cover the repository if the slices went on where they stopped.
    let mut noticed = false;
    for _ in 0..10 {
        let o = as_homeless(base.path(), &["check", "--subset", "10%"]);
        noticed |= o.status.code() != Some(0);
        assert!(
            stdout(&o).contains("cannot keep this client's record"),
            "{}",
            stdout(&o)
        );
    }
    assert!(
        noticed,
        "10 runs of --subset 10% all exited 0: the damaged pack was never read and nothing said the slices cannot go on"
    );
}

/// Found by the attack on this change: the record was keyed by repository id only, so a copy
/// of the repository (an rsync mirror) inherited the original's verification. The copy was never
/// read, yet `check`/`info` say 100% verified in the last day, and slices skip its packs.
#[test]
fn a_copy_of_the_repository_is_not_reported_verified() {
    let repo = repo_with_packs();
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let copy = repo.dir.path().join("copy");
    common::copy_tree(&repo.path, &copy);
    damage(&common::files_under(&copy.join("packs"))[0]);
    let (_, v) = json_at(&repo, &copy, &["check"]);
    let within_day = v["coverage"]["within"][0]["packs"].as_u64().unwrap();
    assert_eq!(
        within_day, 0,
        "the copy, never read by this client, is reported verified: {:#}",
        v["coverage"]
    );
}

/// Found by the attack on this change: extract --verify as a non-root user of an archive that
/// holds a file its owner cannot read (mode 000 or 200): the restore is right, the read back
/// failed with EACCES and the command exited 2 blaming the disk. Now: a warning, exit 1.
#[test]
fn extract_verify_reads_back_files_the_owner_cannot_read() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = base.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("none"), b"mode 000").unwrap();
    fs::write(src.join("wo"), b"mode 200").unwrap();
    fs::set_permissions(src.join("none"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(src.join("wo"), fs::Permissions::from_mode(0o200)).unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o777)).unwrap();
    let run = |args: &[&str]| {
        let bin = env!("CARGO_BIN_EXE_cairn");
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
        c.args(args)
            .env("CAIRN_REPO", base.path().join("repo"))
            .env("CAIRN_PASSPHRASE", "pw")
            .env("CAIRN_TEST_CHEAP_KDF", "1")
            .env("XDG_CACHE_HOME", base.path().join("cache"))
            .env("HOME", base.path())
            .current_dir(base.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Backed up as root (who reads anything), then handed to the user, who restores it.
    let env = [
        (
            "CAIRN_REPO",
            base.path().join("repo").to_str().unwrap().to_string(),
        ),
        ("CAIRN_PASSPHRASE", "pw".to_string()),
        (
            "XDG_CACHE_HOME",
            base.path().join("rootcache").to_str().unwrap().to_string(),
        ),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(common::cairn(&["init"], &env).status.code(), Some(0));
    let o = common::cairn(&["create", "a", src.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let st = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(base.path().join("repo"))
        .status()
        .unwrap();
    assert!(st.success());
    let o = run(&["extract", "a", "--target", "t", "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("none: its mode lets this user not read it"),
        "{err}"
    );
    assert!(!err.contains("lost or changed"), "{err}");
}

/// The record of `repo` (one location): `<cache>/cairn/<id>/verified-<location>`.
fn record_of(repo: &Repo) -> PathBuf {
    fs::read_dir(repo_cache(repo))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("verified-")
        })
        .expect("a verification record")
}
