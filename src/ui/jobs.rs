//! What the ui runs that takes long or writes: restore (`extract`), back up now (`create`)
//! and `check`. Each is the command itself, parsed from a command line the ui makes and run
//! in this process (its profile, hooks, checks and locks as on the command line), with the
//! repository's passphrase the ui was given. One runs at a time; its `--log-json` records
//! (progress, warnings, the summary) are kept for the page, which asks for the ones it has
//! not seen.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};

use crate::cli::args::Cli;
use crate::ui::repos::UiRepo;

/// Jobs remembered after they end, for the page's list.
const KEPT: usize = 20;

/// One job and what it said.
pub struct Job {
    pub id: u64,
    /// `restore`, `backup`, `check`.
    pub kind: &'static str,
    /// The repository's number.
    pub repo: usize,
    /// What the page shows for it.
    pub title: String,
    pub started: u64,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    records: Vec<Value>,
    /// The exit status, once it ended.
    exit: Option<u8>,
}

impl Job {
    fn push(&self, line: &str) {
        let v =
            serde_json::from_str(line).unwrap_or_else(|_| json!({"type": "log", "message": line}));
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.records.push(v);
        drop(st);
        self.changed.notify_all();
    }

    fn end(&self, exit: u8) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.exit = Some(exit);
        drop(st);
        self.changed.notify_all();
    }

    /// What it is, and the records from `from` on; waits up to `wait` for one if there is none
    /// yet and it has not ended.
    pub fn since(&self, from: usize, wait: Duration) -> Value {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (st, _) = self
            .changed
            .wait_timeout_while(st, wait, |st| st.records.len() <= from && st.exit.is_none())
            .unwrap_or_else(|p| p.into_inner());
        let records: Vec<Value> = st.records.iter().skip(from).cloned().collect();
        let mut v = self.about_in(&st);
        v["records"] = json!(records);
        v["next"] = json!(st.records.len());
        v
    }

    pub fn about(&self) -> Value {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.about_in(&st)
    }

    fn about_in(&self, st: &State) -> Value {
        let summary = st
            .records
            .iter()
            .rev()
            .find(|r| r["type"] == "summary")
            .cloned();
        json!({
            "id": self.id,
            "kind": self.kind,
            "repo": self.repo,
            "title": self.title,
            "started": self.started,
            "running": st.exit.is_none(),
            "exit_status": st.exit,
            "summary": summary,
        })
    }
}

/// The jobs: the one running and those that ended lately.
#[derive(Default)]
pub struct Jobs {
    running: Mutex<Option<Arc<Job>>>,
    all: Mutex<Vec<Arc<Job>>>,
    next: AtomicU64,
}

impl Jobs {
    /// Sends every record cairn says to the running job (the ui's own terminal gets the
    /// others, as lines).
    pub fn take_records(self: &Arc<Self>) {
        let jobs = Arc::downgrade(self);
        crate::util::log::set_json(true);
        crate::util::log::set_sink(Some(Arc::new(move |line: &str| {
            let running = jobs.upgrade().and_then(|j| j.running());
            match running {
                Some(job) => job.push(line),
                None => {
                    let v: Value = serde_json::from_str(line).unwrap_or_default();
                    let text = v["message"].as_str().unwrap_or(line);
                    eprintln!(
                        "{}: {}",
                        v["type"].as_str().unwrap_or("log"),
                        crate::util::text::safe_line(text)
                    );
                }
            }
        })));
    }

    /// What the running job is, if one runs.
    pub fn running_title(&self) -> Option<String> {
        self.running().map(|j| j.title.clone())
    }

    fn running(&self) -> Option<Arc<Job>> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn get(&self, id: u64) -> Option<Arc<Job>> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().find(|j| j.id == id).cloned()
    }

    pub fn list(&self) -> Vec<Value> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().rev().map(|j| j.about()).collect()
    }

    /// The last job of `kind` on repository `repo` that ended.
    pub fn last_ended(&self, repo: usize, kind: &str) -> Option<Value> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.iter()
            .rev()
            .map(|j| j.about())
            .find(|a| a["repo"] == repo && a["kind"] == kind && a["running"] == false)
    }

    /// Starts `argv` (a whole cairn command line) as job `kind` on repository `number`;
    /// refused while another job runs.
    pub fn start(
        self: &Arc<Self>,
        number: usize,
        repo: &Arc<UiRepo>,
        kind: &'static str,
        title: String,
        argv: Vec<OsString>,
    ) -> Result<Arc<Job>, String> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(j) = running.as_ref() {
            return Err(format!(
                "{} is running; one job runs at a time: wait for it to end",
                j.title
            ));
        }
        let job = Arc::new(Job {
            id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            kind,
            repo: number,
            title,
            started: crate::util::clock::now_secs(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        *running = Some(job.clone());
        drop(running);
        {
            let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
            all.push(job.clone());
            if all.len() > KEPT {
                all.remove(0);
            }
        }
        let pass = repo.pass.clone();
        let from_profile = repo.profile.is_some();
        let ran = job.clone();
        let jobs = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ui-{kind}"))
            .spawn(move || {
                let code = run(argv, from_profile, pass);
                *jobs.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
                ran.end(code);
            });
        if let Err(e) = spawned {
            *self.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
            job.end(2);
            return Err(format!("cannot start it: {e}"));
        }
        Ok(job)
    }
}

/// Runs the command line `argv` as `cairn` would, with `pass` as the passphrase; its exit
/// status. The summary record ends what it said.
fn run(argv: Vec<OsString>, from_profile: bool, pass: Option<zeroize::Zeroizing<Vec<u8>>>) -> u8 {
    // A signal another job saw is not this one's.
    crate::repo::signals::Interrupt::forget_signals();
    let code = run_command(argv, from_profile, pass);
    crate::repo::signals::Interrupt::forget_signals();
    code
}

fn run_command(
    argv: Vec<OsString>,
    from_profile: bool,
    pass: Option<zeroize::Zeroizing<Vec<u8>>>,
) -> u8 {
    let mut cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            crate::say!("cairn: error: {}", e.to_string().trim_end());
            crate::cli::summary::emit(2, Some(e.to_string()));
            return 2;
        }
    };
    // Only the profile the ui named (CAIRN_PROFILE in the ui's environment is not the
    // repository the page chose).
    if !from_profile {
        cli.profile = None;
    }
    let command = cli.command.name();
    crate::cli::summary::start(command);
    let result =
        crate::cli::passphrase::with_given(pass, || crate::cli::commands::run_parsed(cli, argv));
    let code = crate::cli::commands::exit_code(&result);
    let error = result
        .err()
        .and_then(|e| crate::cli::commands::said_failure(&e));
    crate::cli::summary::emit(code, error);
    code
}
