//! Many-clients torture (issue: maintenance must never delete a live backup's data). Several
//! clients back up their own changing trees into one repository, each in its own PID namespace
//! (`unshare --pid --fork`) with its own cache and a skewed clock, while a maintenance client
//! runs compact, prune, delete and `check --repair` in between; creates, compacts and repairs
//! are killed with SIGKILL at random, and stopped at random store operations (SIGSTOP, or a
//! played suspend that the monotonic clock does not see) for up to 40 s, beyond the stale
//! interval (9 s) and the grace interval (20 s) of this run: the other clients take their
//! locks as abandoned meanwhile. Afterwards `check` finds no error, and every archive any
//! create reported as saved (and no prune or delete removed) extracts exactly: a backup that
//! said 0 restores, whatever happened while it was stopped.
//!
//! Ignored by default: `scripts/torture.sh --clients [--duration SECONDS]` runs it (CI: a short
//! setting). Needs root for the PID namespaces; elsewhere it says so and does nothing.
//! CAIRN_TORTURE_SECS sets the duration, CAIRN_TORTURE_SEED the seed, CAIRN_TORTURE_CLIENTS
//! the number of backup clients (3).

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo, Rng};

/// What happened, for the figures.
#[derive(Default)]
struct Tally {
    creates_saved: u64,
    creates_failed: u64,
    kills: u64,
    /// Commands stopped (SIGSTOP, or a played suspend) at a store operation and held.
    pauses: u64,
    /// Creates whose lock was removed while they were stopped: saved anyway (every pack they
    /// needed was kept), or their archive removed again and exit 2.
    creates_confirmed_after_lost_lock: u64,
    creates_undone_after_lost_lock: u64,
    compacts: u64,
    prunes: u64,
    deletes: u64,
    repairs: u64,
    refused: u64,
    /// Archives extracted and compared, during the run and at the end.
    verified: u64,
    lost: Vec<String>,
}

/// Archives reported saved and not reported removed (aid prefix → snapshot of its tree), and
/// the archives prune and delete reported removing (a create's report can come after the
/// prune that already removed its archive).
#[derive(Default)]
struct Archives {
    saved: BTreeMap<String, PathBuf>,
    removed: std::collections::HashSet<String>,
}

type Expected = Arc<Mutex<Archives>>;

struct World {
    repo: Repo,
    base: PathBuf,
    tally: Mutex<Tally>,
    expected: Expected,
    deadline: Instant,
}

/// One actor: its own cache (what it remembers of locks) and clock offset.
struct Actor {
    cache: PathBuf,
    clock_offset: i64,
    pid_pad: u32,
}

impl World {
    fn command(&self, actor: &Actor, args: &[&str]) -> Command {
        // In a new PID namespace, after `pid_pad` short-lived processes: each actor's cairn
        // has a PID that means nothing, or something else, in the other actors' namespaces.
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--pid",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            r#"i=0; while [ "$i" -lt "$TORTURE_PID_PAD" ]; do (true) & i=$((i+1)); done; wait; "$0" "$@""#,
            env!("CARGO_BIN_EXE_cairn"),
        ]);
        cmd.args(args);
        cmd.env("TORTURE_PID_PAD", actor.pid_pad.to_string());
        for (k, _) in std::env::vars() {
            if k.starts_with("CAIRN_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in &self.repo.env {
            cmd.env(k, v);
        }
        cmd.env("CAIRN_TEST_CHEAP_KDF", "1")
            .env("XDG_CACHE_HOME", &actor.cache)
            .env("CAIRN_TEST_CLOCK_OFFSET", actor.clock_offset.to_string())
            .current_dir(&self.base)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs a command, killing it with SIGKILL after `kill_after` if given and still running.
    /// Returns its output, or `None` if it was killed.
    fn run(
        &self,
        actor: &Actor,
        args: &[&str],
        kill_after: Option<Duration>,
    ) -> Option<std::process::Output> {
        self.run_with(actor, args, kill_after, None)
    }

    /// [`World::run`], with a pause: `pause` stops the command at a store operation (a fault
    /// rule), and once it is stopped it is held for a while, then let go with SIGCONT.
    fn run_with(
        &self,
        actor: &Actor,
        args: &[&str],
        kill_after: Option<Duration>,
        pause: Option<&Pause>,
    ) -> Option<std::process::Output> {
        let mut cmd = self.command(actor, args);
        if let Some(p) = pause {
            cmd.env("CAIRN_FAULT", &p.rule);
        }
        let mut child: Child = cmd.spawn().unwrap();
        let start = Instant::now();
        let mut paused = false;
        loop {
            if child.try_wait().unwrap().is_some() {
                return Some(child.wait_with_output().unwrap());
            }
            if let (Some(p), false) = (pause, paused) {
                if let Some(pid) = stopped_descendant(child.id()) {
                    paused = true;
                    self.tally.lock().unwrap().pauses += 1;
                    // Real time: the pause is the torture's point (others act meanwhile).
                    std::thread::sleep(p.hold);
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGCONT,
                    );
                }
            }
            if kill_after.is_some_and(|after| start.elapsed() >= after) {
                child.kill().unwrap();
                child.wait().unwrap();
                self.tally.lock().unwrap().kills += 1;
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Where to stop a command and for how long: a SIGSTOP at a random store operation (or a
/// played suspend, which the monotonic clock does not see), held up to well beyond the stale
/// interval and the grace interval.
struct Pause {
    rule: String,
    hold: Duration,
}

impl Pause {
    fn random(rng: &mut Rng, max_hold_ms: u64) -> Pause {
        let kind = if rng.below(2) == 0 {
            "pause"
        } else {
            "suspend"
        };
        // Anywhere, or where a commit is most exposed: right before an index fragment or an
        // archive is written (for a create), or a pack deleted (for maintenance).
        let at = match rng.below(4) {
            0 => "name=archives/:put".to_string(),
            1 => "name=index/:put".to_string(),
            2 => "name=packs/:delete".to_string(),
            _ => format!("every@{}", 3 + rng.below(50)),
        };
        Pause {
            rule: format!("{at}:{kind}"),
            hold: Duration::from_millis(300 + rng.below(max_hold_ms)),
        }
    }
}

/// A stopped process among the descendants of `pid` (the cairn under `unshare` and `sh`).
fn stopped_descendant(pid: u32) -> Option<u32> {
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let stat = fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        {
            return Some(p);
        }
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let children = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            todo.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    None
}

fn aids(text: &str) -> Vec<String> {
    text.match_indices("aid:")
        .filter_map(|(i, _)| text.get(i + 4..i + 12))
        .filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// A few random changes to a client's tree.
fn mutate(src: &Path, rng: &mut Rng, round: u64) {
    for _ in 0..1 + rng.below(3) {
        let n = fs::read_dir(src).unwrap().count() as u64;
        let f = src.join(format!("f{}", rng.below(n + 1)));
        match rng.below(3) {
            0 => fs::write(&f, random_bytes(rng.next(), rng.below(300_000) as usize)).unwrap(),
            1 => {
                let mut data = fs::read(&f).unwrap_or_default();
                data.extend_from_slice(&random_bytes(rng.next(), 40_000));
                fs::write(&f, data).unwrap();
            }
            _ => fs::write(
                src.join(format!("new-{round}-{}", rng.below(1000))),
                random_bytes(rng.next(), rng.below(200_000) as usize),
            )
            .unwrap(),
        }
    }
}

fn client(world: &World, i: usize, seed: u64) {
    let actor = Actor {
        cache: world.base.join(format!("cache-{i}")),
        // One client on time, one 45 minutes ahead, one an hour behind, …
        clock_offset: [0, 2700, -3600, 1800, -900][i % 5],
        pid_pad: 3 + 4 * i as u32,
    };
    let mut rng = Rng(seed);
    let src = world.base.join(format!("client{i}"));
    fs::create_dir_all(&src).unwrap();
    // Shared by every client: they store and deduplicate the same chunks.
    fs::write(src.join("common"), random_bytes(77, 500_000)).unwrap();
    let mut round = 0;
    while Instant::now() < world.deadline {
        round += 1;
        mutate(&src, &mut rng, round);
        let name = format!("client{i}");
        let roll = rng.below(8);
        let kill = (roll < 2).then(|| Duration::from_millis(rng.below(1500)));
        // Held up to 40 s: beyond the stale interval (9 s) and the grace interval (20 s).
        let pause = (roll >= 6).then(|| Pause::random(&mut rng, 40_000));
        let out = world.run_with(
            &actor,
            &["--lock-wait", "20", "create", &name, &format!("client{i}")],
            kill,
            pause.as_ref(),
        );
        if let Some(o) = &out {
            let err = stderr(o);
            if err.contains("every pack it needs is there") {
                world
                    .tally
                    .lock()
                    .unwrap()
                    .creates_confirmed_after_lost_lock += 1;
            } else if err.contains("removed again") {
                world.tally.lock().unwrap().creates_undone_after_lost_lock += 1;
            }
        }
        match out {
            Some(o) if o.status.code() == Some(0) => {
                let aid = aids(&stdout(&o))
                    .pop()
                    .unwrap_or_else(|| panic!("no aid in {}", stdout(&o)));
                let snap = world.base.join("snapshots").join(&aid);
                fs::create_dir_all(&snap).unwrap();
                // A copy with the same times and modes (what the archive holds).
                let copied = Command::new("cp")
                    .arg("-a")
                    .arg(&src)
                    .arg(snap.join(format!("client{i}")))
                    .status()
                    .unwrap();
                assert!(copied.success());
                let mut e = world.expected.lock().unwrap();
                if !e.removed.contains(&aid) {
                    e.saved.insert(aid, snap);
                }
                world.tally.lock().unwrap().creates_saved += 1;
            }
            Some(o) => {
                let err = stderr(&o);
                // Refused or stopped for its lock is fine; anything else is a failure.
                assert!(
                    err.contains("repository is locked"),
                    "client {i}: create failed: {err}"
                );
                world.tally.lock().unwrap().creates_failed += 1;
            }
            None => {}
        }
        // A pause, so that exclusive maintenance finds moments when no create runs (a random
        // real-time schedule is the torture's point).
        std::thread::sleep(Duration::from_millis(300 + rng.below(2500)));
    }
}

/// Extracts an archive and compares it with the tree it was made from; `Err` if it is lost.
fn verify(world: &World, actor: &Actor, aid: &str, snap: &Path) -> Result<(), String> {
    let target = world.base.join("restore").join(aid);
    let o = world
        .run(
            actor,
            &[
                "--lock-wait",
                "30",
                "extract",
                &format!("aid:{aid}"),
                "--target",
                target.to_str().unwrap(),
            ],
            None,
        )
        .unwrap();
    if o.status.code() != Some(0) {
        return Err(format!("{aid}: {}", stderr(&o)));
    }
    for entry in fs::read_dir(snap).unwrap() {
        let name = entry.unwrap().file_name();
        assert_trees_equal(&snap.join(&name), &target.join(&name));
    }
    fs::remove_dir_all(&target).unwrap();
    world.tally.lock().unwrap().verified += 1;
    Ok(())
}

/// While everything runs: one archive reported saved, extracted and compared.
fn verify_one(world: &World, actor: &Actor, rng: &mut Rng) {
    let pick = {
        let e = world.expected.lock().unwrap();
        let v: Vec<(&String, &PathBuf)> = e.saved.iter().collect();
        (!v.is_empty()).then(|| {
            let (a, p) = v[rng.below(v.len() as u64) as usize];
            (a.clone(), p.clone())
        })
    };
    if let Some((aid, snap)) = pick {
        if let Err(e) = verify(world, actor, &aid, &snap) {
            world.tally.lock().unwrap().lost.push(e);
        }
    }
}

/// Whether a check's report has no error and warns only of packs not in the index.
fn only_unindexed_packs(report: &str) -> bool {
    let mut warned = false;
    for line in report.lines().map(str::trim_start) {
        if line.starts_with("error:") {
            return false;
        }
        if line.starts_with("warning:") {
            if !line.contains(": not in the index (") {
                return false;
            }
            warned = true;
        }
    }
    warned && report.contains(": 0 errors, ")
}

fn maintenance(world: &World, seed: u64) {
    let actor = Actor {
        cache: world.base.join("cache-maintenance"),
        clock_offset: 600,
        pid_pad: 40,
    };
    let mut rng = Rng(seed);
    while Instant::now() < world.deadline {
        // A random real-time schedule is the torture's point.
        std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
        let kill = (rng.below(3) == 0).then(|| Duration::from_millis(rng.below(2000)));
        let op = rng.below(12);
        if op >= 7 {
            verify_one(world, &actor, &mut rng);
            continue;
        }
        let (args, killable): (Vec<String>, bool) = match op {
            0..=3 => (
                vec!["compact".into(), "--threshold".into(), "0".into()],
                true,
            ),
            4 => {
                // Per archive name (one series per client), keep the last 2 to 5.
                let keep = (2 + rng.below(4)).to_string();
                (
                    vec!["prune".into(), "--list".into(), "--keep-last".into(), keep],
                    false,
                )
            }
            5 => {
                let pick = {
                    let e = world.expected.lock().unwrap();
                    let v: Vec<&String> = e.saved.keys().collect();
                    (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
                };
                match pick {
                    Some(aid) => (vec!["delete".into(), format!("aid:{aid}")], false),
                    None => continue,
                }
            }
            _ => (vec!["check".into(), "--repair".into()], true),
        };
        let mut full = vec!["--lock-wait".to_string(), "5".to_string()];
        full.extend(args.iter().cloned());
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        // Maintenance is stopped too: a create may then take its lock as abandoned.
        let pause = (killable && kill.is_none() && rng.below(4) == 0)
            .then(|| Pause::random(&mut rng, 20_000));
        let out = world.run_with(
            &actor,
            &refs,
            if killable { kill } else { None },
            pause.as_ref(),
        );
        let Some(o) = out else { continue };
        let (out_s, err_s) = (stdout(&o), stderr(&o));
        if let Ok(p) = std::env::var("CAIRN_TORTURE_LOG") {
            use std::io::Write;
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap();
            writeln!(f, "== {args:?}\n{out_s}{err_s}").unwrap();
        }
        if o.status.code() == Some(1) && op >= 6 && only_unindexed_packs(&out_s) {
            // A repair whose lock was watched out while it was stopped, or that watched out a
            // stopped create's, can see that create's packs land after its rebuild: sound
            // packs no fragment names yet, a warning (the next backup or repair indexes them).
            world.tally.lock().unwrap().repairs += 1;
            continue;
        }
        if o.status.code() != Some(0) {
            assert!(
                err_s.contains("repository is locked"),
                "{args:?} failed: {out_s}{err_s}"
            );
            world.tally.lock().unwrap().refused += 1;
            continue;
        }
        // Nothing is ever damaged here: a repair that has to mark files lost data.
        assert!(
            !out_s.contains("as damaged"),
            "{args:?} found damage: {out_s}"
        );
        let mut t = world.tally.lock().unwrap();
        match op {
            0..=3 => t.compacts += 1,
            4 => t.prunes += 1,
            5 => t.deletes += 1,
            _ => t.repairs += 1,
        }
        drop(t);
        if matches!(op, 4 | 5) {
            let mut e = world.expected.lock().unwrap();
            // Only what was removed ("Keeping …" lines name archives too).
            let removed = out_s
                .lines()
                .filter(|l| l.starts_with("Pruned") || l.starts_with("Deleted archive"));
            for aid in removed.flat_map(aids) {
                e.saved.remove(&aid);
                e.removed.insert(aid);
            }
        }
    }
}

#[test]
#[ignore]
fn many_clients_torture() {
    let root = nix::unistd::geteuid().is_root();
    let unshare = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !root || !unshare {
        eprintln!(
            "torture-clients: skipped: needs root and unshare --pid (separate PID namespaces)"
        );
        return;
    }
    let secs: u64 = std::env::var("CAIRN_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let clients: usize = std::env::var("CAIRN_TORTURE_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("CAIRN_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u64>() | 1);
    eprintln!("torture-clients: seed {seed}");
    let repo = Repo::with_env(&[
        ("CAIRN_PACK_SIZE", "200000"),
        ("CAIRN_STORE_LATENCY", "8000"),
        ("CAIRN_LOCK_REFRESH_SECS", "3"),
        ("CAIRN_LOCK_STALE_SECS", "9"),
        ("CAIRN_LOCK_GRACE_SECS", "20"),
    ]);
    let base = repo.dir.path().to_path_buf();
    let world = World {
        repo,
        base,
        tally: Mutex::new(Tally::default()),
        expected: Arc::new(Mutex::new(Archives::default())),
        deadline: Instant::now() + Duration::from_secs(secs),
    };
    std::thread::scope(|s| {
        for i in 0..clients {
            let w = &world;
            s.spawn(move || client(w, i, seed.wrapping_add(i as u64 * 7919) | 1));
        }
        let w = &world;
        s.spawn(move || maintenance(w, seed.rotate_left(17) | 1));
    });

    // Afterwards: no error, and every archive reported saved (and not removed) is exact.
    let maint = Actor {
        cache: world.base.join("cache-maintenance"),
        clock_offset: 0,
        pid_pad: 40,
    };
    let check = world
        .run(&maint, &["--lock-wait", "30", "check"], None)
        .unwrap();
    assert!(
        matches!(check.status.code(), Some(0) | Some(1)) && !stdout(&check).contains("error:"),
        "check found damage:\n{}{}",
        stdout(&check),
        stderr(&check)
    );
    let expected = world.expected.lock().unwrap().saved.clone();
    for (aid, snap) in &expected {
        if let Err(e) = verify(&world, &maint, aid, snap) {
            world.tally.lock().unwrap().lost.push(e);
        }
    }
    let t = world.tally.lock().unwrap();
    eprintln!(
        "torture-clients: {secs} s, {clients} clients in separate PID namespaces with clocks skewed by up to an hour; {} creates saved, {} refused for a lock, {} maintenance runs refused, {} compacts, {} prunes, {} deletes, {} repairs completed; {} processes killed with SIGKILL, {} stopped (SIGSTOP or a played suspend) for up to 40 s; after losing their lock while stopped, {} creates confirmed their archive and {} removed it again (exit 2); {} extractions verified exact ({} archives at the end), {} lost, 0 exit-0-then-unrestorable",
        t.creates_saved,
        t.creates_failed,
        t.refused,
        t.compacts,
        t.prunes,
        t.deletes,
        t.repairs,
        t.kills,
        t.pauses,
        t.creates_confirmed_after_lost_lock,
        t.creates_undone_after_lost_lock,
        t.verified,
        expected.len(),
        t.lost.len()
    );
    assert!(t.lost.is_empty(), "archives lost:\n{}", t.lost.join("\n"));
    assert!(
        t.creates_saved > 0 && t.compacts > 0,
        "the torture did nothing"
    );
}
