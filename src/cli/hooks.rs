//! Hooks around a command, from a profile's `[hooks]` section: what borgmatic and
//! resticprofile are used for (dump a database before a backup, ping a health check after,
//! mail on failure), without a wrapper.
//!
//! ```toml
//! [hooks]
//! before = "pg_dump -Fc mydb > /var/backups/mydb.dump"
//! after = "curl -fsS -m 10 https://hc-ping.com/UUID"
//! failure = "curl -fsS -m 10 https://hc-ping.com/UUID/fail"
//! finally = "rm -f /var/backups/mydb.dump"
//! commands = ["create"]     # the commands they run around (default: create)
//! timeout-secs = 3600       # each hook's limit (default: an hour)
//! ```
//!
//! Each hook runs with `/bin/sh -c`, its standard input empty, and its output said on
//! cairn's standard error line by line (`hook before: …`). It gets the environment:
//! `CAIRN_HOOK` (`before`, `after`, `failure`, `finally`), `CAIRN_HOOK_COMMAND`,
//! `CAIRN_HOOK_PROFILE`, `CAIRN_HOOK_REPOSITORY`, `CAIRN_HOOK_ARCHIVE` (create's name),
//! `CAIRN_HOOK_STATUS` (the exit status, after the command), `CAIRN_HOOK_ERROR` (what failed)
//! and the summary's figures a command left (create: `CAIRN_HOOK_ARCHIVE_ID`,
//! `CAIRN_HOOK_FILES`, `CAIRN_HOOK_BYTES`, `CAIRN_HOOK_ADDED_BYTES`,
//! `CAIRN_HOOK_DURATION_SECS`, `CAIRN_HOOK_WARNINGS`), on top of cairn's own environment
//! without its secrets (passphrases, S3 secret keys: [`crate::util::secrets`]).
//!
//! - `before` fails (a status other than 0, a signal, the timeout, or it cannot start): the
//!   command is not run, `failure` and `finally` are, and cairn exits 2.
//! - The command succeeds (0, or 1 with warnings): `after` runs; if it fails, that is a
//!   warning (exit 1: the backup was made).
//! - The command fails: `failure` runs.
//! - `finally` runs last, whatever happened, with the final status.
//! - A failing `failure` or `finally` is a warning.
//!
//! A hook runs in a process group of its own. At its timeout, or when cairn gets SIGINT,
//! SIGTERM or SIGHUP while it runs (Ctrl-C on the terminal), the whole group is sent
//! SIGTERM, and SIGKILL half a second later: what the hook started goes with it, and the hook
//! ends within about a second of its limit. An
//! interrupted `before` stops the run (exit 128 + the signal) after `failure` and `finally`.
//! What a process the hook left in the background writes after the hook ended is not said.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use serde::Deserialize;

use crate::cli::commands::Status;
use crate::error::{Error, Result};

/// The `[hooks]` section of a profile.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HooksSection {
    pub before: Option<String>,
    pub after: Option<String>,
    pub failure: Option<String>,
    pub finally: Option<String>,
    /// The commands the hooks run around (default: `create`).
    pub commands: Option<Vec<String>>,
    /// Seconds each hook may take (default: an hour).
    pub timeout_secs: Option<u64>,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// Between SIGTERM and SIGKILL for a hook past its timeout (or interrupted): a hook ends
/// within about a second of its limit, whatever it does with SIGTERM.
const GRACE: Duration = Duration::from_millis(500);
/// How long the output of a hook that has exited is read on (a background process it
/// started may hold it open).
const DRAIN: Duration = Duration::from_secs(2);
/// The same, for a hook that was killed: what it printed before is in the pipe already.
const DRAIN_KILLED: Duration = Duration::from_millis(200);

/// Commands hooks can run around: those that do work on a repository.
pub const HOOKABLE: [&str; 12] = [
    "create",
    "extract",
    "check",
    "copy",
    "delete",
    "rewrite",
    "rename",
    "comment",
    "tag",
    "prune",
    "compact",
    "export-tar",
];

impl HooksSection {
    /// Whether any hook is set.
    pub fn any(&self) -> bool {
        self.before.is_some()
            || self.after.is_some()
            || self.failure.is_some()
            || self.finally.is_some()
    }

    /// Checks the section as read (unknown command names are errors, as unknown keys are).
    pub fn check(&self) -> std::result::Result<(), String> {
        if let Some(bad) = self
            .commands
            .iter()
            .flatten()
            .find(|c| !HOOKABLE.contains(&c.as_str()))
        {
            return Err(format!(
                "hooks: commands: {bad:?} is not one of {}",
                HOOKABLE.join(", ")
            ));
        }
        if self.timeout_secs == Some(0) {
            return Err("hooks: timeout-secs must be at least 1".into());
        }
        Ok(())
    }

    /// Whether the hooks run around `command`.
    pub fn covers(&self, command: &str) -> bool {
        match &self.commands {
            None => command == "create",
            Some(list) => list.iter().any(|c| c == command),
        }
    }

    fn timeout(&self) -> Duration {
        self.timeout_secs
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs)
    }
}

/// What the hooks are told of the run besides its outcome.
pub struct Context {
    pub command: &'static str,
    pub profile: String,
    pub repository: Option<String>,
    pub archive: Option<String>,
}

/// Runs `run` between the hooks; `code` maps its outcome to the exit status it gives.
pub fn around(
    hooks: &HooksSection,
    ctx: &Context,
    code: impl Fn(&anyhow::Result<Status>) -> u8,
    run: impl FnOnce() -> anyhow::Result<Status>,
) -> anyhow::Result<Status> {
    let mut env = context_env(ctx);
    let timeout = hooks.timeout();
    if let Some(before) = &hooks.before {
        if let Err(why) = run_hook("before", before, &env, timeout) {
            return before_failed(hooks, ctx, &env, why, &code);
        }
    }
    let mut result = run();
    env.extend(crate::cli::summary::hook_env());
    let status =
        |r: &anyhow::Result<Status>| ("CAIRN_HOOK_STATUS".to_string(), code(r).to_string());
    let mut warned = false;
    match &result {
        Ok(_) => {
            if let Some(after) = &hooks.after {
                let mut e = env.clone();
                e.push(status(&result));
                if let Err(why) = run_hook("after", after, &e, timeout) {
                    crate::say!("warning: the after hook failed ({why})");
                    warned = true;
                }
            }
        }
        Err(err) => {
            env.push(("CAIRN_HOOK_ERROR".into(), format!("{err:#}")));
            if let Some(failure) = &hooks.failure {
                let mut e = env.clone();
                e.push(status(&result));
                if let Err(why) = run_hook("failure", failure, &e, timeout) {
                    crate::say!("warning: the failure hook failed ({why})");
                }
            }
        }
    }
    if warned {
        if let Ok(s) = &mut result {
            *s = Status::Warning;
        }
    }
    if let Some(finally) = &hooks.finally {
        let mut e = env.clone();
        e.push(status(&result));
        if let Err(why) = run_hook("finally", finally, &e, timeout) {
            crate::say!("warning: the finally hook failed ({why})");
            if let Ok(s) = &mut result {
                *s = Status::Warning;
            }
        }
    }
    result
}

/// What every hook is told of the run: the command, the profile, the repository and the
/// archive.
fn context_env(ctx: &Context) -> Vec<(String, String)> {
    let mut env = vec![
        ("CAIRN_HOOK_COMMAND".to_string(), ctx.command.to_string()),
        ("CAIRN_HOOK_PROFILE".to_string(), ctx.profile.clone()),
    ];
    if let Some(r) = &ctx.repository {
        env.push(("CAIRN_HOOK_REPOSITORY".into(), r.clone()));
    }
    if let Some(a) = &ctx.archive {
        env.push(("CAIRN_HOOK_ARCHIVE".into(), a.clone()));
    }
    env
}

/// After a failed `before` hook: the command is not run; `failure` and `finally` are, told
/// why, and the outcome is the hook's failure (an interruption, or an error).
fn before_failed(
    hooks: &HooksSection,
    ctx: &Context,
    env: &[(String, String)],
    why: Failed,
    code: impl Fn(&anyhow::Result<Status>) -> u8,
) -> anyhow::Result<Status> {
    let error = format!(
        "the before hook failed ({why}); {} was not run",
        ctx.command
    );
    let outcome: anyhow::Result<Status> = Err(match why {
        Failed::Interrupted(sig) => Error::Interrupted(sig).into(),
        Failed::Hook(_) => Error::invalid(error.clone()).into(),
    });
    let mut end = env.to_vec();
    end.push(("CAIRN_HOOK_STATUS".into(), code(&outcome).to_string()));
    end.push(("CAIRN_HOOK_ERROR".into(), error));
    for (kind, cmd) in [("failure", &hooks.failure), ("finally", &hooks.finally)] {
        if let Some(cmd) = cmd {
            if let Err(why) = run_hook(kind, cmd, &end, hooks.timeout()) {
                crate::say!("warning: the {kind} hook failed ({why})");
            }
        }
    }
    outcome
}

/// How a hook failed.
enum Failed {
    /// Its status, a signal, its timeout, or it could not start.
    Hook(String),
    /// cairn was asked to stop (SIGINT, SIGTERM, SIGHUP) while it ran: it was stopped too.
    Interrupted(i32),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Hook(why) => f.write_str(why),
            Failed::Interrupted(sig) => write!(f, "interrupted by signal {sig}"),
        }
    }
}

/// Signals that arrived while hooks run: a hook runs in its own process group (so that its
/// timeout ends everything it started), so the terminal's Ctrl-C reaches only cairn, which
/// passes it on.
fn signals() -> &'static Arc<AtomicUsize> {
    static SIGNAL: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    SIGNAL.get_or_init(|| {
        let flag = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            // Without the handler a signal ends cairn and leaves the hook running: the hook
            // is then only not passed the signal.
            let _ = signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize);
        }
        flag
    })
}

/// How often a running hook is looked at for a signal to pass on.
const POLL: Duration = Duration::from_millis(50);

/// Runs one hook.
fn run_hook(
    kind: &str,
    command: &str,
    env: &[(String, String)],
    timeout: Duration,
) -> std::result::Result<(), Failed> {
    let signal = signals();
    // A signal from before this hook was for what ran before it.
    signal.store(0, Ordering::Relaxed);
    let mut child = spawn(kind, command, env)?;
    let group = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    // Set once the hook is done: what a process it left behind writes later is not said
    // (it would come after the command's own lines, or after the JSON summary).
    let muted = Arc::new(AtomicBool::new(false));
    let (readers, drained) = say_output(kind, &mut child, &muted);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let kill = |sig| {
        if let Some(g) = group {
            let _ = rustix::process::kill_process_group(g, sig);
        }
    };
    let (ended, stopped) = watch(&rx, signal, timeout);
    if stopped.is_some() {
        // The whole group: what the hook's shell started goes with it.
        kill(rustix::process::Signal::TERM);
        if rx.recv_timeout(GRACE).is_err() {
            kill(rustix::process::Signal::KILL);
            let _ = rx.recv();
        }
    }
    let _ = waiter.join();
    // Its output is said before what came of it; a process it left in the background that
    // still holds the output is not waited for beyond a moment.
    let drain = if stopped.is_some() {
        DRAIN_KILLED
    } else {
        DRAIN
    };
    let until = std::time::Instant::now() + drain;
    for _ in 0..readers {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if drained.recv_timeout(left).is_err() {
            break;
        }
    }
    muted.store(true, Ordering::Relaxed);
    if let Some(failed) = stopped {
        return Err(failed);
    }
    match ended {
        None => Err(Failed::Hook("it could not be waited for".into())),
        Some(Err(e)) => Err(Failed::Hook(format!("cannot wait for it: {e}"))),
        Some(Ok(s)) if s.success() => Ok(()),
        Some(Ok(s)) => Err(Failed::Hook(describe(s))),
    }
}

/// Starts a hook: `/bin/sh -c COMMAND` in a process group of its own, its standard input
/// empty, its output piped, with `env` and `CAIRN_HOOK` but none of cairn's secrets.
fn spawn(
    kind: &str,
    command: &str,
    env: &[(String, String)],
) -> std::result::Result<Child, Failed> {
    // No secret reaches a hook (`before = "env"` would print it): see [`crate::util::secrets`].
    crate::util::secrets::scrub(&mut Command::new("/bin/sh"))
        .arg("-c")
        .arg(command)
        .env("CAIRN_HOOK", kind)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| Failed::Hook(format!("cannot start /bin/sh: {e}")))
}

/// Says the hook's standard output and error line by line (`hook before: …`), each from a
/// thread of its own, until `muted` is set. Returns how many readers there are, and where
/// each says it has read to the end.
fn say_output(
    kind: &str,
    child: &mut Child,
    muted: &Arc<AtomicBool>,
) -> (usize, crossbeam_channel::Receiver<()>) {
    let (drained_tx, drained) = crossbeam_channel::unbounded::<()>();
    let readers = [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|out| {
        let kind = kind.to_string();
        let (drained, muted) = (drained_tx.clone(), Arc::clone(muted));
        std::thread::spawn(move || {
            for line in BufReader::new(out).split(b'\n').map_while(|l| l.ok()) {
                if muted.load(Ordering::Relaxed) {
                    break;
                }
                crate::say!("hook {kind}: {}", String::from_utf8_lossy(&line).trim_end());
            }
            let _ = drained.send(());
        })
    })
    .count();
    (readers, drained)
}

/// Waits for the hook to end (its status comes on `ended`) until cairn gets a signal or the
/// timeout passes. Returns how it ended, or why it must be stopped.
fn watch(
    ended: &crossbeam_channel::Receiver<std::io::Result<ExitStatus>>,
    signal: &AtomicUsize,
    timeout: Duration,
) -> (Option<std::io::Result<ExitStatus>>, Option<Failed>) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match ended.recv_timeout(POLL) {
            Ok(status) => return (Some(status), None),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return (None, None),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        let sig = signal.load(Ordering::Relaxed);
        if sig != 0 {
            return (None, Some(Failed::Interrupted(sig as i32)));
        }
        if std::time::Instant::now() >= deadline {
            return (
                None,
                Some(Failed::Hook(format!(
                    "timed out after {} s",
                    timeout.as_secs()
                ))),
            );
        }
    }
}

fn describe(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}

/// A profile's hooks section, checked, as an [`Error`] naming the file when it is wrong.
pub fn checked(section: HooksSection, path: &std::path::Path) -> Result<HooksSection> {
    section
        .check()
        .map_err(|e| Error::invalid(format!("profile {}: {e}", path.display())))?;
    Ok(section)
}
