//! Hooks in profiles: before, after, failure and finally around a command, with what
//! happened in their environment, their output in cairn's log, and a timeout.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{stderr, Repo};

/// A profile `p` for `repo` backing up `src`, with `hooks` as its `[hooks]` section; each
/// hook named in `record` appends its CAIRN_HOOK* environment to `hooks.log`.
fn profile(repo: &Repo, hooks: &str) -> (PathBuf, PathBuf) {
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"one").unwrap();
    fs::write(src.join("b"), b"two").unwrap();
    let path = base.join("p.toml");
    fs::write(
        &path,
        format!(
            "repository = {:?}\npasscommand = \"echo test passphrase\"\n[create]\npaths = [{:?}]\n[hooks]\n{hooks}\n",
            repo.path.to_str().unwrap(),
            src.to_str().unwrap()
        ),
    )
    .unwrap();
    (path, base.join("hooks.log"))
}

/// A hook that appends its name and environment to `log`, then runs `then`.
fn record(log: &Path, then: &str) -> String {
    format!(
        "(echo \"== $CAIRN_HOOK\"; env | grep '^CAIRN_HOOK_' | sort) >> {}; {then}",
        log.display()
    )
}

/// The environment each hook saw, by hook.
fn seen(log: &Path) -> Vec<(String, Vec<String>)> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix("== ") {
            Some(kind) => out.push((kind.to_string(), Vec::new())),
            None => out.last_mut().unwrap().1.push(line.to_string()),
        }
    }
    out
}

#[test]
fn hooks_run_around_a_backup_with_its_figures() {
    let repo = Repo::new();
    let log = repo.dir.path().join("hooks.log");
    let hooks = format!(
        "before = {:?}\nafter = {:?}\nfailure = {:?}\nfinally = {:?}\n",
        record(&log, "echo dumping the database"),
        record(&log, "echo pinged >&2"),
        record(&log, "true"),
        record(&log, "true"),
    );
    let (p, log) = profile(&repo, &hooks);
    let o = repo.with_profile(&p, &["create", "home"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("hook before: dumping the database"), "{err}");
    assert!(err.contains("hook after: pinged"), "{err}");
    let seen = seen(&log);
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["before", "after", "finally"]);
    let before = &seen[0].1;
    assert!(
        before.contains(&"CAIRN_HOOK_COMMAND=create".to_string()),
        "{before:?}"
    );
    assert!(
        before.contains(&"CAIRN_HOOK_ARCHIVE=home".to_string()),
        "{before:?}"
    );
    assert!(
        !before.iter().any(|l| l.starts_with("CAIRN_HOOK_STATUS")),
        "{before:?}"
    );
    let after = &seen[1].1;
    for want in [
        "CAIRN_HOOK_STATUS=0",
        "CAIRN_HOOK_FILES=2",
        "CAIRN_HOOK_BYTES=6",
        "CAIRN_HOOK_WARNINGS=0",
    ] {
        assert!(after.contains(&want.to_string()), "{want}: {after:?}");
    }
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("CAIRN_HOOK_ARCHIVE_ID=")),
        "{after:?}"
    );
    assert!(seen[2].1.contains(&"CAIRN_HOOK_STATUS=0".to_string()));
    // Commands the hooks do not cover run without them.
    fs::remove_file(&log).unwrap();
    let o = repo.with_profile(&p, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!log.exists());
}

#[test]
fn a_failing_before_hook_stops_the_run() {
    let repo = Repo::new();
    let log = repo.dir.path().join("hooks.log");
    let hooks = format!(
        "before = {:?}\nafter = {:?}\nfailure = {:?}\nfinally = {:?}\n",
        record(&log, "echo no database >&2; exit 3"),
        record(&log, "true"),
        record(&log, "true"),
        record(&log, "true"),
    );
    let (p, log) = profile(&repo, &hooks);
    // The repository exists, so that the run's only failure is the hook's.
    let o = repo.with_profile(&p, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = repo.with_profile(&p, &["create", "home"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("hook before: no database")
            && err.contains("the before hook failed (exit status 3); create was not run"),
        "{err}"
    );
    assert_eq!(repo.archive_count(), 0, "nothing created");
    let seen = seen(&log);
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["before", "failure", "finally"]);
    let failure = &seen[1].1;
    assert!(
        failure.contains(&"CAIRN_HOOK_STATUS=2".to_string()),
        "{failure:?}"
    );
    assert!(
        failure
            .iter()
            .any(|l| l.starts_with("CAIRN_HOOK_ERROR=the before hook failed")),
        "{failure:?}"
    );
}

#[test]
fn a_failing_backup_runs_failure_and_a_failing_after_hook_is_a_warning() {
    let repo = Repo::new();
    let log = repo.dir.path().join("hooks.log");
    let hooks = format!(
        "after = {:?}\nfailure = {:?}\nfinally = {:?}\n",
        record(&log, "exit 4"),
        record(&log, "true"),
        record(&log, "true"),
    );
    let (p, log) = profile(&repo, &hooks);
    // The backup itself fails: its paths do not exist.
    let o = repo.with_profile(&p, &["create", "home", "/no/such/path"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let seen1 = seen(&log);
    let kinds: Vec<&str> = seen1.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["failure", "finally"]);
    assert!(
        seen1[0]
            .1
            .iter()
            .any(|l| l.starts_with("CAIRN_HOOK_ERROR=") && l.contains("none of the paths")),
        "{:?}",
        seen1[0].1
    );
    // The backup succeeds and the after hook fails: exit 1, the archive is there.
    fs::remove_file(&log).unwrap();
    let o = repo.with_profile(&p, &["create", "home"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the after hook failed (exit status 4)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(repo.archive_count(), 1);
    let kinds: Vec<String> = seen(&log).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["after", "finally"]);
}

#[test]
fn a_hook_past_its_timeout_is_stopped() {
    let repo = Repo::new();
    let pidfile = repo.dir.path().join("child.pid");
    // The shell starts a child and waits: the timeout must end both (the whole group).
    let hooks = format!(
        "before = \"echo started; sleep 600 & echo $! > {}; wait\"\ntimeout-secs = 1\ncommands = [\"create\", \"check\"]\n",
        pidfile.display()
    );
    let (p, _) = profile(&repo, &hooks);
    let o = repo.with_profile(&p, &["check"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("hook before: started")
            && err.contains("the before hook failed (timed out after 1 s); check was not run"),
        "{err}"
    );
    let pid = fs::read_to_string(&pidfile).unwrap().trim().to_string();
    common::wait_until(|| {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |st| st.split(' ').nth(2) == Some("Z"))
    });
}

/// Ctrl-C (SIGINT to cairn) while the before hook runs: the hook is stopped with it, the
/// failure and finally hooks run, nothing is created, and cairn exits 130.
#[test]
fn ctrl_c_during_a_hook_stops_it_and_the_run() {
    let repo = Repo::new();
    let log = repo.dir.path().join("hooks.log");
    let started = repo.dir.path().join("started");
    let hooks = format!(
        "before = {:?}\nfailure = {:?}\nfinally = {:?}\n",
        format!("touch {}; exec sleep 600", started.display()),
        record(&log, "true"),
        record(&log, "true"),
    );
    let (p, log) = profile(&repo, &hooks);
    let o = repo.with_profile(&p, &["list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let child = common::cairn_command(
        &["--profile", p.to_str().unwrap(), "create", "home"],
        &[(
            "XDG_CACHE_HOME",
            repo.dir.path().join("cache").to_str().unwrap(),
        )],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    common::wait_until(|| started.exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert_eq!(repo.archive_count(), 0);
    let seen = seen(&log);
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["failure", "finally"]);
    assert!(
        seen[0].1.contains(&"CAIRN_HOOK_STATUS=130".to_string()),
        "{:?}",
        seen[0].1
    );
}

/// A hook that ignores SIGTERM is killed half a second after its timeout, and cairn waits for
/// no more than a moment of its output: the run ends within about a second of the limit (it
/// took 2 + 5 + 2 s before, for a limit of 2 s).
#[test]
fn a_hook_that_ignores_sigterm_ends_within_a_second_of_its_timeout() {
    let repo = Repo::new();
    let hooks = "before = \"trap '' TERM; echo started; while :; do sleep 0.1; done\"\ntimeout-secs = 1\ncommands = [\"check\"]\n";
    let (p, _) = profile(&repo, hooks);
    let started = std::time::Instant::now();
    let o = repo.with_profile(&p, &["check"]);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out after 1 s"), "{}", stderr(&o));
    assert!(
        took < std::time::Duration::from_millis(4500),
        "the run took {took:?} for a hook limit of 1 s"
    );
}

/// No hook, passcommand or `--stdin-from-command` program sees a passphrase or an S3 secret
/// key: `before = "env"` printed `CAIRN_PASSPHRASE` and `CAIRN_FROM_PASSPHRASE`.
#[test]
fn no_program_cairn_starts_sees_a_secret() {
    let repo = Repo::new();
    let (p, _) = profile(
        &repo,
        "before = \"env\"\ncommands = [\"create\", \"check\"]\n",
    );
    let secrets = [
        ("CAIRN_PASSPHRASE", "test passphrase"),
        ("CAIRN_FROM_PASSPHRASE", "from-secret-4711"),
        ("CAIRN_NEW_PASSPHRASE", "new-secret-4712"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-4713"),
        ("AWS_SESSION_TOKEN", "aws-token-4714"),
    ];
    let mut env: Vec<(&str, &str)> = secrets.to_vec();
    let cache = repo.dir.path().join("cache");
    env.push(("XDG_CACHE_HOME", cache.to_str().unwrap()));
    env.push(("CAIRN_KEPT_FOR_THE_HOOK", "visible-4715"));
    let mut all = vec!["--profile", p.to_str().unwrap(), "check"];
    let o = common::cairn(&all, &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("visible-4715"), "the hook ran env: {err}");
    for (k, v) in secrets {
        assert!(!err.contains(v), "the hook saw {k}: {err}");
    }
    // The program whose output is backed up, and a passcommand, see none either.
    all = vec![
        "--profile",
        p.to_str().unwrap(),
        "create",
        "env",
        "--stdin-name",
        "env.txt",
        "--stdin-from-command",
        "--",
        "env",
    ];
    let o = common::cairn(&all, &env);
    assert!(o.status.code().is_some_and(|c| c < 2), "{}", stderr(&o));
    let dumped = common::cairn(
        &["--profile", p.to_str().unwrap(), "dump", "env", "env.txt"],
        &env,
    );
    let text = String::from_utf8_lossy(&dumped.stdout).into_owned();
    assert!(text.contains("visible-4715"), "{text}");
    for (k, v) in secrets {
        assert!(!text.contains(v), "the backed-up program saw {k}");
    }
    let shown = repo.dir.path().join("passcommand-env");
    let passcommand = format!("env > {}; echo test passphrase", shown.display());
    let o = repo
        .command(
            repo.dir.path(),
            &["list"],
            &[
                ("CAIRN_PASSCOMMAND", &passcommand),
                ("AWS_SECRET_ACCESS_KEY", "aws-secret-4713"),
            ],
        )
        .env_remove("CAIRN_PASSPHRASE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = fs::read_to_string(&shown).unwrap_or_default();
    assert!(text.contains("PATH="), "{}{text}", stderr(&o));
    assert!(!text.contains("aws-secret-4713"), "the passcommand saw it");
}
