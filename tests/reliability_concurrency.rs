//! Reliability item 11: concurrency. Two creates into one repository at the same time, and a
//! compact started while a create runs: no corruption, both archives as expected, and a
//! refused command refused clearly.

mod common;

use std::fs;
use std::process::{Child, Command, Stdio};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

fn spawn(repo: &Repo, cwd: &std::path::Path, args: &[&str], extra: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CAIRN_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &repo.env {
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.env("CAIRN_TEST_CHEAP_KDF", "1")
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn tree(root: &std::path::Path, seed: u64) {
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

#[test]
fn two_creates_at_once_and_compact_during_create() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "300000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("a"), 1);
    tree(&base.join("b"), 2);
    let slow = [("CAIRN_STORE_LATENCY", "20000")];
    let ca = spawn(&repo, &base, &["create", "a", "a"], &slow);
    let cb = spawn(&repo, &base, &["create", "b", "b"], &slow);
    // A compact while they run: refused at once…
    std::thread::sleep(std::time::Duration::from_millis(150));
    let refused = repo.run(&["--lock-wait", "0", "compact"]);
    // …or, if both creates were already done, it simply ran.
    let refused_clearly =
        refused.status.code() == Some(2) && stderr(&refused).contains("repository is locked");
    assert!(
        refused_clearly || refused.status.code() == Some(0),
        "{}",
        stderr(&refused)
    );
    // A compact that waits runs after them.
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
        let target = base.join(format!("out-{name}"));
        repo.ok(&["extract", name, "--target", target.to_str().unwrap()]);
        assert_trees_equal(&base.join(name), &target.join(name));
    }
    eprintln!(
        "concurrency: two creates at once and a waiting compact: both archives exact, check --verify-data clean; compact with --lock-wait 0 {}",
        if refused_clearly { "was refused naming the holder" } else { "ran after the creates" }
    );
}
