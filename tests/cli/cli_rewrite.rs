//! rewrite, rename and comment: archives written again, the old one removed in the same
//! commit; compact then frees what only the removed items used.

use crate::common;

use std::fs;
use std::path::Path;

use common::{assert_trees_equal, copy_tree, op_log, random_bytes, stderr, stdout, Repo};

/// Bytes the repository's files take.
fn repo_bytes(repo: &Path) -> u64 {
    walkdir::WalkDir::new(repo)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// The archives as `list --json-lines` gives them.
fn archives(repo: &Repo) -> Vec<serde_json::Value> {
    repo.ok(&["list", "--json-lines"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A 5 MB secret that went into three archives is gone from all of them after rewrite, and
/// compact frees its space; everything else restores as it was, under the same name, time
/// and host.
#[test]
fn rewrite_removes_a_secret_from_every_archive() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(src.join("docs")).unwrap();
    fs::write(src.join("secret.bin"), random_bytes(99, 5_000_000)).unwrap();
    for day in 0..3u64 {
        fs::write(src.join("docs/notes"), random_bytes(day, 50_000)).unwrap();
        let o = repo.run_in(&base, &["create", "home", "src"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let before = archives(&repo);
    let size_before = repo_bytes(&repo.path);

    // A dry run names what would go and changes nothing.
    let o = repo.run_in(
        &base,
        &[
            "rewrite",
            "home",
            "--exclude",
            "secret.bin",
            "--dry-run",
            "--list",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("remove src/secret.bin").count(), 3, "{out}");
    assert_eq!(
        out.matches("Would rewrite archive home").count(),
        3,
        "{out}"
    );
    assert_eq!(archives(&repo), before);

    let o = repo.run_in(&base, &["rewrite", "home", "--exclude", "secret.bin"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("Rewrote archive home").count(), 3, "{out}");
    assert!(out.contains("1 item (5.00 MB) removed"), "{out}");
    let after = archives(&repo);
    assert_eq!(after.len(), 3);
    for (b, a) in before.iter().zip(&after) {
        assert_ne!(a["id"], b["id"], "a new id");
        for same in ["name", "time", "hostname", "username"] {
            assert_eq!(a[same], b[same], "{same}");
        }
        let comment = a["comment"].as_str().unwrap();
        assert!(
            comment.contains("rewritten") && comment.contains("1 item removed"),
            "{comment}"
        );
    }
    let o = repo.run(&["find", "secret.bin"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let o = repo.run(&["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let o = repo.run(&["compact"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let size_after = repo_bytes(&repo.path);
    assert!(
        size_after + 5_000_000 <= size_before,
        "{size_before} bytes before, {size_after} after"
    );
    // The newest restores as the source without the secret.
    fs::remove_file(src.join("secret.bin")).unwrap();
    let target = base.join("t");
    repo.ok(&["extract", "home", "--target", target.to_str().unwrap()]);
    assert_trees_equal(&src, &target.join("src"));
    // Nothing left to remove: nothing is written.
    let o = repo.run_in(&base, &["rewrite", "home", "--exclude", "secret.bin"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).matches("nothing to change").count(),
        3,
        "{}",
        stdout(&o)
    );
    // Nothing asked for, and an archive that does not exist, are refused.
    let o = repo.run(&["rewrite", "home"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nothing to change"), "{}", stderr(&o));
    let o = repo.run(&["rewrite", "hom", "--exclude", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("\"home\""), "{}", stderr(&o));
}

/// rename and comment give the archive a new id, the rest unchanged.
#[test]
fn rename_and_comment() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"data").unwrap();
    repo.run_in(&base, &["create", "a", "src"], &[]);
    let before = archives(&repo);
    let o = repo.run(&["rename", "a", "b"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Renamed archive a "),
        "{}",
        stdout(&o)
    );
    let o = repo.run(&["comment", "b", "before the upgrade"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let after = archives(&repo);
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["name"], "b");
    assert_eq!(after[0]["comment"], "before the upgrade");
    assert_eq!(after[0]["time"], before[0]["time"]);
    assert_ne!(after[0]["id"], before[0]["id"]);
    let target = base.join("t");
    repo.ok(&["extract", "b", "--target", target.to_str().unwrap()]);
    assert_eq!(fs::read(target.join("src/f")).unwrap(), b"data");
    // Refused: a name that is a path, a comment with a newline, an archive that is not there.
    for (args, says) in [
        (&["rename", "b", "x/y"][..], "cannot contain '/'"),
        (&["comment", "b", "two\nlines"][..], "control characters"),
        (&["rename", "a", "c"][..], "no archive named \"a\""),
    ] {
        let o = repo.run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(archives(&repo)[0]["id"], after[0]["id"]);
}

/// ENOSPC at every store operation of a rewrite: each run leaves the old archive or the new
/// one shown (never both, never neither; the old one may stay, hidden, when its removal
/// failed, said with the way out), check finds the repository sound, and the archive shown
/// restores.
#[test]
fn enospc_at_every_store_operation_of_rewrite() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "100000")]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..4u64 {
        fs::write(src.join(format!("f{i}")), random_bytes(i, 60_000)).unwrap();
    }
    fs::write(src.join("secret"), random_bytes(9, 80_000)).unwrap();
    assert_eq!(
        repo.run_in(&base, &["create", "a", "src"], &[])
            .status
            .code(),
        Some(0)
    );
    let pristine = base.join("pristine");
    copy_tree(&repo.path, &pristine);
    let args = ["rewrite", "a", "--exclude", "secret"];
    let log = base.join("ops.log");
    let o = repo.run_in(&base, &args, &[("CAIRN_STORE_LOG", log.to_str().unwrap())]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let total = op_log(&log).len();
    // The source without the secret, times and all.
    let mut without = base.join("without");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&without)
        .status();
    assert!(cp.unwrap().success());
    fs::remove_file(without.join("secret")).unwrap();
    // Its directory's time is the source's, as the archive holds it.
    let t = fs::metadata(&src).unwrap().modified().unwrap();
    fs::File::open(&without).unwrap().set_modified(t).unwrap();
    let mut failed = 0;
    for i in 1..=total {
        fs::remove_dir_all(&repo.path).unwrap();
        copy_tree(&pristine, &repo.path);
        let rule = format!("op={i}:enospc");
        let (o, ops) = repo.run_with_fault(&base, &args, &rule, &base.join(format!("ops-{i}.log")));
        assert!(!stderr(&o).contains("panicked"), "op {i}: {}", stderr(&o));
        let found = repo.run(&["find", "secret"]).status.code();
        match o.status.code() {
            Some(2) => {
                failed += 1;
                assert!(
                    stderr(&o).contains("no space left"),
                    "op {i}: {}",
                    stderr(&o)
                );
            }
            Some(0) => assert!(
                ops.get(i - 1).is_none_or(|op| op.contains(" locks/")),
                "op {i} ({:?}): ENOSPC went unnoticed",
                ops.get(i - 1)
            ),
            // The lock could not be read back, before the old archive's removal (not removed)
            // or after it: said.
            Some(1) => assert!(
                stderr(&o).contains("stays hidden") || stderr(&o).contains("which is removed"),
                "op {i}: {}",
                stderr(&o)
            ),
            other => panic!("op {i}: exit {other:?}: {}", stderr(&o)),
        }
        if repo.archive_count() == 2 {
            // The new archive committed, the old one's removal failed or was not tried: said,
            // with what happens to it.
            assert!(
                stderr(&o).contains("could not be removed") || stderr(&o).contains("stays hidden"),
                "op {i}: {}",
                stderr(&o)
            );
            assert!(stderr(&o).contains("removes it"), "op {i}: {}", stderr(&o));
        }
        assert_eq!(archives(&repo).len(), 1, "op {i}: one archive, old or new");
        let c = repo.run(&["check"]);
        assert!(
            matches!(c.status.code(), Some(0) | Some(1)),
            "op {i}: {}",
            stdout(&c)
        );
        let target = base.join(format!("x{i}"));
        repo.ok(&["extract", "a", "--target", target.to_str().unwrap()]);
        // The old archive (the secret still found) or the new one, whole.
        without = if found == Some(0) {
            src.clone()
        } else {
            base.join("without")
        };
        assert_trees_equal(&without, &target.join("src"));
        fs::remove_dir_all(&target).unwrap();
    }
    assert!(failed > 0, "no operation of {total} failed the rewrite");
}

/// Ctrl-C while the rewrite stores its pack, its index fragment or the new archive, and a
/// damaged archive: each leaves the old archive or the new one, whole, never both or neither.
#[test]
fn interrupt_and_damage_leave_one_whole_archive() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("keep"), random_bytes(1, 100_000)).unwrap();
    fs::write(src.join("secret"), random_bytes(2, 100_000)).unwrap();
    assert_eq!(
        repo.run_in(&base, &["create", "a", "src"], &[])
            .status
            .code(),
        Some(0)
    );
    let pristine = base.join("pristine");
    copy_tree(&repo.path, &pristine);
    let args = ["rewrite", "a", "--exclude", "secret"];
    let reset = || {
        fs::remove_dir_all(&repo.path).unwrap();
        copy_tree(&pristine, &repo.path);
    };
    let one_whole_archive = |what: &str| {
        assert_eq!(archives(&repo).len(), 1, "{what}");
        let c = repo.run(&["check"]);
        assert!(
            matches!(c.status.code(), Some(0) | Some(1)),
            "{what}: {}",
            stdout(&c)
        );
        let found = repo.run(&["find", "secret"]).status.code();
        let target = base.join("x");
        let _ = fs::remove_dir_all(&target);
        repo.ok(&["extract", "a", "--target", target.to_str().unwrap()]);
        assert_eq!(
            fs::read(target.join("src/keep")).unwrap(),
            random_bytes(1, 100_000)
        );
        assert_eq!(
            target.join("src/secret").exists(),
            found == Some(0),
            "{what}"
        );
        found
    };
    for rule in [
        "name=packs/:put:pause",
        "name=index/:put:pause",
        "name=archives/:put:pause",
    ] {
        reset();
        let paused = common::Paused::start(&repo, &base, &args, &[("CAIRN_FAULT", rule)]);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(paused.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let o = paused.resume();
        assert!(
            matches!(o.status.code(), Some(0) | Some(130)),
            "{rule}: {}",
            stderr(&o)
        );
        let found = one_whole_archive(rule);
        // An interrupted rewrite left the old archive; a finished one, the new.
        assert_eq!(
            found == Some(0),
            o.status.code() == Some(130),
            "{rule}: {}",
            stderr(&o)
        );
    }
    // Every pack read comes back damaged: the archive's items cannot be read, nothing is
    // written, the old archive stays.
    reset();
    let before = archives(&repo);
    let o = repo.run_in(&base, &args, &[("CAIRN_FAULT", "name=packs/:get:flip")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(archives(&repo), before);
    assert_eq!(one_whole_archive("damaged"), Some(0));
}

/// Every blob of the repository, decrypted (the test's knowledge of the key).
fn every_blob(repo: &Repo) -> Vec<Vec<u8>> {
    let r = repo.open_with_key();
    let store = r.store().clone();
    let mut out = Vec::new();
    for (pack, size) in cairn::index::persist::list_packs(&*store).unwrap() {
        let toc = cairn::pack::format::read_toc(&*store, r.crypto(), &pack, size).unwrap();
        let bytes = store.get(&pack.object_name(), None).unwrap();
        for e in &toc.entries {
            let blob = &bytes[e.offset as usize..(e.offset + e.len) as usize];
            out.push(r.open_chunk(&e.id, blob, "pack").unwrap());
        }
    }
    out
}

/// Issue 44, item 5: after `rewrite --exclude`, compact kept the secret's pack (its unused
/// share was below the threshold) and dropped the secret's blobs from its new index, so no
/// later compact could find them: `--threshold 0` (documented as "at least 0 %", meaning
/// "never") and `--threshold 0.001` left the secret in place, and a backup of it again stored
/// nothing new. Now what is unused stays indexed until its pack is rewritten, check and
/// compact say how much there is, `--threshold 0` rewrites every pack holding any, and then
/// not one byte of the secret is in any pack. The comment names no pattern.
#[test]
fn unused_blobs_stay_accounted_until_compact_frees_them() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "4000000")]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    let secret = random_bytes(4711, 30_000);
    fs::write(src.join("tax-2025-secret.pdf"), &secret).unwrap();
    fs::write(src.join("big"), random_bytes(1, 1_000_000)).unwrap();
    let o = repo.run_in(&base, &["create", "home", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(every_blob(&repo).iter().any(|b| b == &secret));
    let o = repo.run_in(
        &base,
        &["rewrite", "home", "--exclude", "tax-2025-secret.pdf"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let comment = archives(&repo)[0]["comment"].as_str().unwrap().to_string();
    assert!(
        !comment.contains("tax-2025"),
        "the pattern is kept: {comment}"
    );
    // The default threshold keeps the pack (the secret is 3% of it), and says what stays.
    let o = repo.run(&["compact"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("unused chunks (30.")
            && stdout(&o).contains("stay in packs below the threshold"),
        "{}",
        stdout(&o)
    );
    // check shows the unused bytes, and finds nothing unaccounted.
    let o = repo.run(&["check", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        report["unused_bytes"].as_u64().unwrap() >= 30_000,
        "{report}"
    );
    // A second compact at the default threshold still knows of them.
    let o = repo.run(&["compact"]);
    assert!(stdout(&o).contains("unused chunks (30."), "{}", stdout(&o));
    // --threshold 0 rewrites every pack with anything unused: the secret is gone.
    let o = repo.run(&["compact", "--threshold", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("rewrote 1"), "{}", stdout(&o));
    let blobs = every_blob(&repo);
    assert!(
        !blobs
            .iter()
            .any(|b| b.windows(64).any(|w| w == &secret[..64])),
        "a byte of the secret is still in a pack"
    );
    let o = repo.run(&["check", "--verify-data", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["unused_bytes"], 0, "{report}");
    // Backed up again, the secret is stored again: nothing of it was left to reuse.
    let json = repo.create_json(&base, &["again", "src"]);
    assert!(
        json["archive"]["stats"]["deduplicated_size"]
            .as_u64()
            .unwrap()
            >= 30_000,
        "{json}"
    );
}

/// A repository a compact before issue 44 left with blobs no index entry names: check warns
/// and says how to fix it, and `check --repair` indexes them again, so that compact frees them.
#[test]
fn blobs_no_index_names_are_found_and_repair_accounts_for_them() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "4000000")]);
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("gone"), random_bytes(5, 30_000)).unwrap();
    fs::write(src.join("kept"), random_bytes(6, 500_000)).unwrap();
    let o = repo.run_in(&base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    fs::remove_file(src.join("gone")).unwrap();
    let o = repo.run_in(&base, &["create", "b", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    repo.ok(&["delete", "a"]);
    // What the old compact left: one fragment without the unused entry.
    let r = repo.open_with_key();
    let store = r.store().clone();
    let (mut index, load) = r.load_index().unwrap();
    let id = r.crypto().id_of(&random_bytes(5, 30_000));
    assert!(index.forget(&id), "the chunk is indexed");
    let frag = index.full_fragment().unwrap();
    let name = cairn::index::persist::save_fragment(&*store, r.crypto(), &frag).unwrap();
    for old in load.fragments.iter().filter(|f| **f != name) {
        store.delete(old).unwrap();
    }
    drop(r);
    let o = repo.run(&["check"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("that no index entry names") && stdout(&o).contains("check --repair"),
        "{}",
        stdout(&o)
    );
    let o = repo.run(&["check", "--repair"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = repo.run(&["compact", "--threshold", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("rewrote 1"), "{}", stdout(&o));
    let o = repo.run(&["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}
