//! Verification in slices: `check --subset`, `--max-duration`, `--archive`, the client's
//! record of verified packs (coverage in `check` and `info`), and `extract --verify`.

use std::fs;
use std::path::{Path, PathBuf};

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
    let (_, v) = json(&repo, &["check", "--subset", &left.to_string()], &[]);
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
        (vec!["check", "--subset", "150%"], "at most 100"),
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
    let cache = repo.dir.path().join("cache/cairn");
    let record = common::files_under(&cache)
        .into_iter()
        .find(|p| p.file_name().unwrap() == "verified")
        .unwrap();
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
    ok(&repo, &["check", "--subset", "1/2"]);
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
