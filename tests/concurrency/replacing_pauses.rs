//! Commands that replace or remove archives (rename, comment, rewrite, delete, prune), paused
//! or killed at their worst moments while another client acts (issue 44, items 6 and 8). The
//! rule is issue 28's: no removal after the lock is lost, confirmed in the store; a relabel
//! ends with exactly one archive of the new content whatever the other client did, or exits 2
//! saying what the repository holds; and an interrupted one is finished by the next command
//! that may delete, which says so.

use crate::common;
use crate::reliability_pauses::{archives, other, tree, watch_out_and_run, HOUR};

use std::fs;
use std::path::PathBuf;

use common::{random_bytes, stderr, stdout, Paused, Repo};

/// A repository with one archive `A` of `src/` (with a secret), and its id.
fn one_archive() -> (Repo, PathBuf, String) {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("src"), 1);
    fs::write(base.join("src/secret.bin"), random_bytes(77, 20_000)).unwrap();
    let o = repo.run_in(&base, &["create", "A", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ids = archives(&repo);
    assert_eq!(ids.len(), 1);
    (repo, base, ids[0].clone())
}

/// The archives `list` shows: (name, id prefix, comment).
fn listed(repo: &Repo, client: &str) -> Vec<(String, String, String)> {
    let o = other(repo, client, 0, &["list", "--json-lines"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["name"].as_str().unwrap().to_string(),
                v["id"].as_str().unwrap()[..8].to_string(),
                v["comment"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Item 8: `comment A …` commits its new archive and is stopped just before it removes the
/// old one; a cron `prune --keep-last 1` watches its lock go stale, removes it and prunes.
/// Before, the prune saw two archives of A with the same time, kept the one whose id sorts
/// first and pruned the other, and the relabel then removed the old one: when the old id
/// sorted first, series A was empty and both exited 0. Now the new archive hides the old one:
/// the prune keeps the new one (and removes the old one, saying so); the relabel removes
/// nothing once it finds its lock lost, and warns. Run until both orders of ids were met.
#[test]
fn a_paused_relabel_and_a_cron_prune_keep_the_series() {
    let mut orders = [false, false];
    for trial in 0..24 {
        if orders[0] && orders[1] {
            break;
        }
        let (repo, base, old) = one_archive();
        let paused = Paused::start(
            &repo,
            &base,
            &["comment", "A", "relabelled"],
            &[("CAIRN_FAULT", "name=archives/:delete:pause")],
        );
        let now = archives(&repo);
        assert_eq!(now.len(), 2, "committed, old one not yet removed");
        let new = now.iter().find(|i| **i != old).unwrap().clone();
        orders[usize::from(old < new)] = true;
        let pruned = watch_out_and_run(&repo, "cron", &["prune", "--keep-last", "1"]);
        assert!(
            stderr(&pruned).contains("note: removed archive A"),
            "the prune finishes the relabel: {}",
            stderr(&pruned)
        );
        let relabelled = paused.resume();
        assert_eq!(
            relabelled.status.code(),
            Some(1),
            "trial {trial}: {}",
            stderr(&relabelled)
        );
        assert!(
            stderr(&relabelled).contains("lock was lost"),
            "{}",
            stderr(&relabelled)
        );
        let shown = listed(&repo, "cron");
        assert_eq!(shown.len(), 1, "trial {trial}: {shown:?}");
        assert_eq!(shown[0].2, "relabelled", "trial {trial}: {shown:?}");
        assert_eq!(archives(&repo), vec![new], "trial {trial}");
        let check = other(&repo, "cron", 0, &["check"]);
        assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    }
    assert!(orders[0] && orders[1], "both orders of ids met: {orders:?}");
}

/// Item 8: a relabel paused just before it removes the archive it replaces, while a second
/// client makes the same change: two archives were left and both clients exited 0. Now the
/// second finds the name replaced (and finishes the first's replacement), and the first
/// finds its lock lost: one archive B, of the new content, is left.
#[test]
fn two_clients_renaming_the_same_archive_leave_one() {
    let (repo, base, old) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["rename", "A", "B"],
        &[("CAIRN_FAULT", "name=archives/:delete:pause")],
    );
    let new: Vec<String> = archives(&repo).into_iter().filter(|i| *i != old).collect();
    let o = other(
        &repo,
        "second",
        0,
        &["--lock-wait", "0", "rename", "A", "B"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let second = other(
        &repo,
        "second",
        HOUR,
        &["--lock-wait", "0", "rename", "A", "B"],
    );
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("no archive named \"A\""),
        "{}",
        stderr(&second)
    );
    let first = paused.resume();
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    let shown = listed(&repo, "second");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0, "B");
    assert_eq!(archives(&repo), new);

    // Paused before it writes its archive instead: the second client renames first, and the
    // first writes its own after. It exits 2 naming both.
    let (repo, base, _) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["rename", "A", "B"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    let second = watch_out_and_run(&repo, "second", &["rename", "A", "B"]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let first = paused.resume();
    assert_eq!(first.status.code(), Some(2), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("another client also wrote"),
        "{}",
        stderr(&first)
    );
    let shown = listed(&repo, "second");
    assert_eq!(shown.len(), 2, "{shown:?}");
    for (_, id, _) in &shown {
        assert!(
            stderr(&first).contains(&format!("aid:{id}")),
            "{}",
            stderr(&first)
        );
    }
}

/// Item 8: `delete A` while a relabel of A is paused before it removes the old archive: the
/// archive came back (7 of 16 trials) with the relabel exiting 0. Now the deletion takes the
/// relabelled archive with the old one, and the relabel exits 2 saying both are gone. Paused
/// before it writes its archive instead, the relabel writes it after the deletion: it cannot
/// tell that from another client finishing its change, keeps the only copy there may be, and
/// warns (exit 1), saying how to make a deletion stand.
#[test]
fn an_archive_deleted_while_a_relabel_is_paused_does_not_come_back() {
    let (repo, base, _) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["comment", "A", "late"],
        &[("CAIRN_FAULT", "name=archives/:delete:pause")],
    );
    watch_out_and_run(&repo, "deleter", &["delete", "A"]);
    let relabelled = paused.resume();
    assert_eq!(relabelled.status.code(), Some(2), "{}", stderr(&relabelled));
    assert!(
        stderr(&relabelled).contains("was removed by another client meanwhile"),
        "{}",
        stderr(&relabelled)
    );
    assert!(listed(&repo, "deleter").is_empty());
    assert!(archives(&repo).is_empty());

    let (repo, base, _) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["comment", "A", "late"],
        &[("CAIRN_FAULT", "name=archives/:put:pause")],
    );
    watch_out_and_run(&repo, "deleter", &["delete", "A"]);
    let relabelled = paused.resume();
    assert_eq!(relabelled.status.code(), Some(1), "{}", stderr(&relabelled));
    let err = stderr(&relabelled);
    assert!(
        err.contains("deleting the archive before") && err.contains("delete aid:"),
        "{err}"
    );
    assert_eq!(listed(&repo, "deleter").len(), 1);
}

/// Item 8: a `delete` whose lock was removed while it was paused taking it (after it listed
/// the locks) went on deleting. Now it reads its lock back first and deletes nothing.
#[test]
fn a_delete_whose_lock_was_removed_while_it_took_it_deletes_nothing() {
    let (repo, base, old) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["delete", "A"],
        &[
            ("CAIRN_FAULT", "name=locks@1:list:pause-after"),
            ("CAIRN_STORE_LOG", base.join("delete.log").to_str().unwrap()),
        ],
    );
    // Another client (an hour later by its clock) takes the paused delete's lock as
    // abandoned.
    let o = other(&repo, "other", 0, &["--lock-wait", "0", "list"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = other(&repo, "other", HOUR, &["--lock-wait", "0", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let deleted = paused.resume();
    assert_eq!(deleted.status.code(), Some(2), "{}", stderr(&deleted));
    assert!(
        stderr(&deleted).contains("while the lock was being taken"),
        "{}{:?}",
        stderr(&deleted),
        common::op_log(&base.join("delete.log"))
    );
    assert_eq!(archives(&repo), vec![old]);
}

/// Item 6: `rewrite --exclude` killed (SIGKILL) at each of its store operations in turn. It
/// left both the old archive (with the excluded file) and the new one in 7 of 36 random
/// trials, with no message at the next command. Now the new archive hides the old one at
/// once, so exactly one archive of A is ever shown, `list` says what is hidden, and the next
/// compact removes it (saying so) and frees the excluded file's data.
#[test]
fn a_rewrite_killed_at_any_moment_leaves_one_archive_and_the_next_compact_finishes_it() {
    let (repo, base, old) = one_archive();
    let log = base.join("rewrite.log");
    let pristine = base.join("pristine");
    common::copy_tree(&repo.path, &pristine);
    let args = ["rewrite", "A", "--exclude", "secret.bin"];
    let (o, ops) = repo.run_with_fault(&base, &args, "name=none-such:eio", &log);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(ops.len() > 5, "{ops:?}");
    let mut hidden_seen = 0;
    for n in 1..=ops.len() {
        fs::remove_dir_all(&repo.path).unwrap();
        common::copy_tree(&pristine, &repo.path);
        let rule = format!("op={n}:pause");
        let paused = match repo
            .command(&base, &args, &[("CAIRN_FAULT", &rule)])
            .spawn()
        {
            Ok(child) => Paused::of(child, &args),
            Err(e) => panic!("{e}"),
        };
        let mut child = paused.child;
        child.kill().unwrap();
        let _ = child.wait();
        let shown = listed(&repo, "after");
        assert_eq!(
            shown.len(),
            1,
            "killed at op {n} ({}): {shown:?}",
            ops[n - 1]
        );
        let stored = archives(&repo);
        if stored.len() == 2 {
            hidden_seen += 1;
            let o = other(&repo, "after", HOUR, &["list"]);
            assert!(stderr(&o).contains("is hidden"), "{}", stderr(&o));
            let o = other(&repo, "after", HOUR, &["compact"]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("note: removed archive A"),
                "{}",
                stderr(&o)
            );
            assert_eq!(archives(&repo).len(), 1);
            assert_ne!(archives(&repo), vec![old.clone()]);
            let found = other(&repo, "after", HOUR, &["find", "secret.bin"]);
            assert_eq!(found.status.code(), Some(1), "{}", stdout(&found));
        }
    }
    assert!(hidden_seen > 0, "some kill left both archives: {ops:?}");
}

/// Item 8: `check` called the packs of a backup whose process was dead (killed, on this
/// machine, in this PID namespace) "in progress", as it does for a running one. They are
/// leftovers of an interrupted command, and a warning says so.
#[test]
fn check_does_not_call_a_dead_backups_packs_in_progress() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("src"), 4);
    let paused = Paused::start(
        &repo,
        &base,
        &["create", "dead", "src"],
        &[("CAIRN_FAULT", "name=packs/@2:put:pause-after")],
    );
    let mut child = paused.child;
    child.kill().unwrap();
    let _ = child.wait();
    let o = repo.run(&["check"]);
    let out = stdout(&o);
    assert!(!out.contains("in progress"), "{out}");
    assert!(out.contains("not in the index"), "{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
}

/// Found by an attack on the change above: a relabel stopped right after it wrote its new
/// archive, while another client finished an interrupted compact (copying the new archive's
/// data out of the packs it deleted) and removed the old archive as hidden. On waking, the
/// relabel judged its archive by its own out-of-date index, found "its" packs gone, and
/// removed the new archive too: series A lost its newest archive. Now the repository's
/// current index is asked as well, and a replacement whose predecessor is gone is never
/// removed again.
#[test]
fn a_relabel_stopped_after_its_write_keeps_its_archive_when_a_compact_moved_its_data() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    for (i, day, name) in [(0u64, 2, "X"), (1, 1, "A"), (2, 0, "A")] {
        tree(&base.join(format!("s{i}")), i);
        let offset = (-(day * 86_400)).to_string();
        let o = repo.run_in(
            &base,
            &["create", name, &format!("s{i}")],
            &[("CAIRN_TEST_CLOCK_OFFSET", offset.as_str())],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    repo.ok(&["delete", "X"]);
    // A compact killed right after it recorded the packs it deletes.
    let killed = Paused::start(
        &repo,
        &base,
        &["compact", "--threshold", "0"],
        &[
            ("CAIRN_FAULT", "name=retired/:put:pause-after"),
            ("XDG_CACHE_HOME", base.join("cache-k").to_str().unwrap()),
        ],
    );
    let mut child = killed.child;
    child.kill().unwrap();
    let _ = child.wait();
    let paused = Paused::start(
        &repo,
        &base,
        &["comment", "A", "hello"],
        &[("CAIRN_FAULT", "name=archives/:put:pause-after")],
    );
    let compacted = watch_out_and_run(&repo, "cron", &["compact"]);
    assert!(
        stderr(&compacted).contains("note: removed archive A"),
        "{}",
        stderr(&compacted)
    );
    let commented = paused.resume();
    assert!(
        matches!(commented.status.code(), Some(0 | 1)),
        "{}",
        stderr(&commented)
    );
    let shown = listed(&repo, "cron");
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(shown.iter().any(|(_, _, c)| c == "hello"), "{shown:?}");
    let v = other(&repo, "cron", 0, &["check", "--verify-data"]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
}

/// The same, stalled for longer than every grace: a rewrite of the only archive stopped
/// after its write while another client compacted twice, three days apart. It emptied the
/// series (0 archives). The archive it wrote stays.
#[test]
fn a_rewrite_stalled_past_every_grace_keeps_the_series() {
    let (repo, base, _) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["rewrite", "A", "--exclude", "secret.bin"],
        &[("CAIRN_FAULT", "name=archives/:put:pause-after")],
    );
    watch_out_and_run(&repo, "cron", &["compact"]);
    let later = other(&repo, "cron", 3 * 24 * HOUR, &["compact"]);
    assert_eq!(later.status.code(), Some(0), "{}", stderr(&later));
    let rewritten = paused.resume();
    assert!(
        matches!(rewritten.status.code(), Some(0 | 1)),
        "{}",
        stderr(&rewritten)
    );
    assert_eq!(listed(&repo, "cron").len(), 1);
    let found = other(&repo, "cron", 0, &["find", "secret.bin"]);
    assert_eq!(found.status.code(), Some(1), "{}", stdout(&found));
    let v = other(&repo, "cron", 0, &["check", "--verify-data"]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
}

/// Found by the same attack: a relabel stopped right after its write, whose change another
/// client finished (a prune that removed the old archive as hidden), ended with exit 2 and
/// the advice to delete the new archive, the only copy. Exactly the new archive is left: a
/// warning, which says what to do only if the old one was deleted on purpose.
#[test]
fn a_relabel_another_client_finished_is_a_warning() {
    let (repo, base, _) = one_archive();
    let paused = Paused::start(
        &repo,
        &base,
        &["comment", "A", "hello"],
        &[("CAIRN_FAULT", "name=archives/:put:pause-after")],
    );
    watch_out_and_run(&repo, "cron", &["prune", "--keep-last", "1"]);
    let commented = paused.resume();
    assert_eq!(commented.status.code(), Some(1), "{}", stderr(&commented));
    let shown = listed(&repo, "cron");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].2, "hello");
}

/// Found by the same attack: an archive hidden by its replacement, named by its id, was
/// removed as hidden and then "not found" (exit 2) by `delete`, and removed by `rename`
/// instead of renamed. `delete aid:HIDDEN` now says it deleted it; a change to it is refused
/// before anything is removed.
#[test]
fn a_hidden_archive_named_by_its_id() {
    let (repo, base, old) = one_archive();
    let killed = Paused::start(
        &repo,
        &base,
        &["comment", "A", "new"],
        &[("CAIRN_FAULT", "name=archives/:delete:pause")],
    );
    let mut child = killed.child;
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(archives(&repo).len(), 2);
    let hidden = format!("aid:{}", &old[..8]);
    let o = repo.run(&["rename", &hidden, "Q"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is hidden"), "{}", stderr(&o));
    assert_eq!(archives(&repo).len(), 2, "a refused change removed nothing");
    let o = repo.run(&["compact", "--dry-run"]);
    assert!(
        stdout(&o)
            .contains("1 archive hidden by archives written in place of it would be removed first"),
        "{}",
        stdout(&o)
    );
    let o = repo.run(&["delete", &hidden]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Deleted archive A"), "{}", stdout(&o));
    assert_eq!(archives(&repo).len(), 1);
    assert_eq!(listed(&repo, "x")[0].2, "new");
}

/// Found by the same attack: a rewrite run by a client that took the lock of a compact
/// stopped after it recorded the packs it deletes failed with "corrupt chunk …: not in the
/// index (missing)": it read the archive through a writer's index, which leaves out packs a
/// compact retired. It reads through a reader's index now. Then a compact inside the grace
/// that the broken lock started says that what stays unused waits for the grace, not that
/// it is below the threshold.
#[test]
fn a_rewrite_beside_a_stopped_compact_reads_its_archive() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("gone"), 5);
    tree(&base.join("src"), 6);
    for (name, dir) in [("X", "gone"), ("A", "src")] {
        let o = repo.run_in(&base, &["create", name, dir], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    repo.ok(&["delete", "X"]);
    let paused = Paused::start(
        &repo,
        &base,
        &["compact", "--threshold", "0"],
        &[("CAIRN_FAULT", "name=retired/:put:pause-after")],
    );
    let rewritten = watch_out_and_run(&repo, "other", &["rewrite", "A", "--exclude", "f0"]);
    assert!(
        stdout(&rewritten).contains("Rewrote archive A"),
        "{}",
        stdout(&rewritten)
    );
    let compacted = paused.resume();
    assert_eq!(compacted.status.code(), Some(2), "{}", stderr(&compacted));
    let o = other(&repo, "other", HOUR, &["compact", "--threshold", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !stdout(&o).contains("below the threshold"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("while a broken lock's grace runs"),
        "{}",
        stdout(&o)
    );
    let v = other(&repo, "other", HOUR, &["check"]);
    assert!(matches!(v.status.code(), Some(0 | 1)), "{}", stdout(&v));
}

/// Found by a third attack: a rewrite stopped after it stored its index, before its archive,
/// for three days while another client compacted twice (the second compact deleted the
/// rewrite's packs: no archive referenced them). Resumed, it wrote its archive, which named
/// data that was gone, and stopped again before it removed the old one. The next prune then
/// finished the "replacement": it removed the old archive, the only one that restored, and
/// kept the broken one. Now a replacement that is not whole is the one removed, and the old
/// archive stays.
#[test]
fn a_rewrite_whose_data_was_deleted_meanwhile_does_not_replace_its_archive() {
    let (repo, base, old) = one_archive();
    let args = ["rewrite", "A", "--exclude", "secret.bin"];
    let paused = Paused::start(
        &repo,
        &base,
        &args,
        &[(
            "CAIRN_FAULT",
            "name=index/:put:pause-after,name=archives/:put:pause-after",
        )],
    );
    watch_out_and_run(&repo, "cron", &["compact"]);
    let later = other(&repo, "cron", 3 * 24 * HOUR, &["compact"]);
    assert_eq!(later.status.code(), Some(0), "{}", stderr(&later));
    // On to its next stop: its archive is stored, the old one not yet removed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(paused.child.id() as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let paused = Paused::of(paused.child, &args);
    assert_eq!(archives(&repo).len(), 2, "its archive was written");
    let pruned = other(&repo, "cron", 3 * 24 * HOUR, &["prune", "--keep-last", "1"]);
    assert!(
        matches!(pruned.status.code(), Some(0 | 1)),
        "{}",
        stderr(&pruned)
    );
    assert!(
        stderr(&pruned).contains("did not restore"),
        "{}",
        stderr(&pruned)
    );
    assert_eq!(archives(&repo), vec![old.clone()], "the old archive stays");
    let rewritten = paused.resume();
    assert_eq!(rewritten.status.code(), Some(2), "{}", stderr(&rewritten));
    assert_eq!(archives(&repo), vec![old], "the old archive stays");
    let found = other(&repo, "cron", 3 * 24 * HOUR, &["find", "secret.bin"]);
    assert_eq!(found.status.code(), Some(0), "{}", stdout(&found));
    let v = other(&repo, "cron", 3 * 24 * HOUR, &["check", "--verify-data"]);
    assert_eq!(v.status.code(), Some(0), "{}{}", stdout(&v), stderr(&v));
}
