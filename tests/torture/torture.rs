//! kill -9 torture (reliability item 3): create, compact, check and delete run in a loop on a
//! changing tree and are killed with SIGKILL after a random delay. Every archive that was
//! committed must extract byte- and metadata-identically to the tree it was made from, and
//! `check` must never find damage.
//!
//! Ignored by default: `scripts/torture.sh [--duration SECONDS]` runs it (CI: 120 s).
//! CAIRN_TORTURE_SECS sets the duration, CAIRN_TORTURE_SEED the random seed (printed).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo, Rng};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().to_path_buf())
        .collect();
    v.sort();
    v
}

/// A few random changes: rewrite, append, delete, add.
fn mutate(src: &Path, rng: &mut Rng, round: u64) {
    for _ in 0..1 + rng.below(4) {
        let existing = files(src);
        match rng.below(4) {
            0 if !existing.is_empty() => {
                let f = &existing[rng.below(existing.len() as u64) as usize];
                fs::write(f, random_bytes(rng.next(), rng.below(400_000) as usize)).unwrap();
            }
            1 if !existing.is_empty() => {
                let f = &existing[rng.below(existing.len() as u64) as usize];
                let mut data = fs::read(f).unwrap();
                data.extend_from_slice(&random_bytes(rng.next(), rng.below(50_000) as usize));
                fs::write(f, data).unwrap();
            }
            2 if existing.len() > 3 => {
                fs::remove_file(&existing[rng.below(existing.len() as u64) as usize]).unwrap();
            }
            _ => {
                let dir = src.join(format!("d{}", rng.below(4)));
                fs::create_dir_all(&dir).unwrap();
                fs::write(
                    dir.join(format!("r{round}-{}", rng.below(1000))),
                    random_bytes(rng.next(), rng.below(300_000) as usize),
                )
                .unwrap();
            }
        }
    }
}

fn archive_names(repo: &Repo) -> Vec<String> {
    repo.ok(&["list", "--json-lines"])
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn verify(repo: &Repo, committed: &[(String, PathBuf)], scratch: &Path) -> usize {
    let c = repo.run(&["--lock-wait", "30", "check"]);
    assert!(
        matches!(c.status.code(), Some(0) | Some(1)),
        "check found damage:\n{}{}",
        stdout(&c),
        stderr(&c)
    );
    for (name, snap) in committed {
        let target = scratch.join(format!("verify-{name}"));
        let o = repo.run(&[
            "--lock-wait",
            "30",
            "extract",
            name,
            "--target",
            target.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "extract {name}: {}", stderr(&o));
        assert_trees_equal(snap, &target.join("src"));
        fs::remove_dir_all(&target).unwrap();
    }
    committed.len()
}

#[test]
#[ignore = "long: run through scripts/torture.sh"]
fn kill_9_torture() {
    let secs: u64 = std::env::var("CAIRN_TORTURE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("CAIRN_TORTURE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("torture: {secs} s, CAIRN_TORTURE_SEED={seed}");
    let mut rng = Rng(seed);
    let repo = Repo::with_env(&[
        ("CAIRN_PACK_SIZE", "300000"),
        ("CAIRN_STORE_LATENCY", "2000"),
    ]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..12 {
        fs::write(
            src.join(format!("f{i}")),
            random_bytes(seed + i, rng.below(300_000) as usize),
        )
        .unwrap();
    }
    let snaps = base.join("snaps");
    fs::create_dir_all(&snaps).unwrap();
    let mut committed: Vec<(String, PathBuf)> = Vec::new();
    let (mut rounds, mut killed, mut verified) = (0u64, 0u64, 0usize);
    let mut ops = [0u64; 4];
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        rounds += 1;
        mutate(&src, &mut rng, rounds);
        let name = format!("r{rounds}");
        let snap = snaps.join(&name);
        assert!(Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&snap)
            .status()
            .unwrap()
            .success());
        let pick = rng.below(100);
        let (kind, args, max_delay): (usize, Vec<String>, u64) = if pick < 65 {
            (0, vec!["create".into(), name.clone(), "src".into()], 900)
        } else if pick < 80 {
            (1, vec!["compact".into()], 700)
        } else if pick < 92 {
            (2, vec!["check".into()], 500)
        } else {
            let victim = committed
                .first()
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| "none".into());
            (3, vec!["delete".into(), victim], 300)
        };
        ops[kind] += 1;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        for (k, v) in &repo.env {
            cmd.env(k, v);
        }
        cmd.env("CAIRN_TEST_CHEAP_KDF", "1")
            .args(["--lock-wait", "30"])
            .args(&args)
            .current_dir(&base);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Real time: a kill at a random moment is the torture's point.
        std::thread::sleep(Duration::from_millis(rng.below(max_delay)));
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
            killed += 1;
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        let names = archive_names(&repo);
        if kind == 0 && names.contains(&name) {
            committed.push((name, snap));
        } else {
            fs::remove_dir_all(&snap).unwrap();
        }
        committed.retain(|(n, _)| names.contains(n));
        if rounds % 12 == 0 {
            verified += verify(&repo, &committed, &base);
        }
    }
    verified += verify(&repo, &committed, &base);
    eprintln!(
        "torture: {rounds} rounds in {secs} s ({} create, {} compact, {} check, {} delete), {killed} killed with SIGKILL, {} archives committed and alive at the end, {verified} archive extractions verified, 0 damage",
        ops[0], ops[1], ops[2], ops[3], committed.len()
    );
}
