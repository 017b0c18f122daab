//! Ctrl-C / SIGTERM / SIGKILL during create: nothing committed, the repository stays usable.

mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, Repo};

fn packs(repo: &Repo) -> usize {
    walkdir::WalkDir::new(repo.path.join("packs"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .count()
}

fn slow_create(repo: &Repo, src: &std::path::Path) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    cmd.env("CAIRN_STORE_LATENCY", "150000")
        .env("CAIRN_PACK_SIZE", "1000000")
        .args(["create", "slow", src.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

fn wait_for_packs(repo: &Repo, n: usize) {
    let start = Instant::now();
    while packs(repo) < n {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn source(repo: &Repo) -> std::path::PathBuf {
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..40 {
        fs::write(src.join(format!("f{i:02}")), random_bytes(i, 600_000)).unwrap();
    }
    src
}

fn afterwards_everything_works(repo: &Repo, src: &std::path::Path) {
    assert_eq!(
        repo.archive_count(),
        0,
        "an interrupted create committed an archive"
    );
    assert!(repo.ok(&["info"]).contains("Archives:        0"));
    repo.ok(&["create", "after", src.to_str().unwrap()]);
    let target = repo.dir.path().join("out");
    repo.ok(&["extract", "after", "--target", target.to_str().unwrap()]);
    assert_trees_equal(src, &target.join(src.strip_prefix("/").unwrap()));
}

#[test]
fn sigterm_stops_cleanly_and_commits_nothing() {
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let repo = Repo::new();
        let src = source(&repo);
        let child = slow_create(&repo, &src);
        wait_for_packs(&repo, 2);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + sig as i32),
            "{}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
        // What was stored before the signal is indexed, so the next run need not upload it again.
        assert!(fs::read_dir(repo.path.join("index")).unwrap().count() >= 1);
        afterwards_everything_works(&repo, &src);
    }
}

#[test]
fn sigkill_leaves_a_usable_repository() {
    let repo = Repo::new();
    let src = source(&repo);
    let mut child = slow_create(&repo, &src);
    wait_for_packs(&repo, 3);
    child.kill().unwrap();
    child.wait().unwrap();
    afterwards_everything_works(&repo, &src);
}
