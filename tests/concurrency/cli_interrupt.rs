//! Ctrl-C / SIGTERM / SIGKILL during create: nothing committed, the repository stays usable.

use crate::common;

use std::fs;
use std::io::Read;
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, Repo};

fn slow_create(repo: &Repo, src: &std::path::Path) -> std::process::Child {
    repo.command(
        repo.dir.path(),
        &["create", "slow", src.to_str().unwrap()],
        &[
            ("CAIRN_STORE_LATENCY", "150000"),
            ("CAIRN_PACK_SIZE", "1000000"),
            // One pack at a time (an emulated remote store would get more): still running
            // when the signal comes.
            ("CAIRN_PACK_INFLIGHT", "1"),
        ],
    )
    .spawn()
    .unwrap()
}

fn wait_for_packs(repo: &Repo, n: usize) {
    let start = Instant::now();
    while repo.pack_count() < n {
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

/// The disk fills up, then Ctrl-C arrives before the backup would have learned of it: the
/// user is told the disk is full (exit 2), not merely that the backup was interrupted.
#[test]
fn an_interrupt_does_not_hide_a_full_disk() {
    let repo = Repo::new();
    let src = repo.dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    // One pack's worth of new data: its store fails with ENOSPC at once…
    fs::write(src.join("a"), random_bytes(1, 1_300_000)).unwrap();
    // …then seconds of reading that store nothing new (zeros deduplicate), during which the
    // interrupt arrives.
    let f = fs::File::create(src.join("b")).unwrap();
    f.set_len(16 << 30).unwrap();
    let mut child = repo
        .command(
            repo.dir.path(),
            &["create", "full", src.to_str().unwrap()],
            &[
                ("CAIRN_PACK_SIZE", "1000000"),
                ("CAIRN_FAULT", "name=packs/:put:enospc"),
                // `>` on stderr: a pack's store returned (here, failed).
                ("CAIRN_PACK_TRACE", "yes"),
            ],
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The interrupt comes once the failed store has returned, not after a guessed delay.
    let mut err = child.stderr.take().unwrap();
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while !said.contains(&b'>') {
        assert_eq!(
            err.read(&mut byte).unwrap(),
            1,
            "ended before storing a pack"
        );
        said.push(byte[0]);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    err.read_to_end(&mut said).unwrap();
    let status = child.wait().unwrap();
    let said = String::from_utf8_lossy(&said);
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(said.contains("no space left on device"), "{said}");
    assert_eq!(repo.archive_count(), 0);
}
