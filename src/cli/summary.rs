//! The figures a command's summary leaves: for the hooks that follow it
//! (`CAIRN_HOOK_<NAME>`) and for the `summary` record `--log-json` ends with (`docs/json.md`).

use std::sync::Mutex;

use serde_json::{Map, Value};

struct Run {
    command: String,
    figures: Vec<(String, Value)>,
}

static RUN: Mutex<Run> = Mutex::new(Run {
    command: String::new(),
    figures: Vec::new(),
});

fn run() -> std::sync::MutexGuard<'static, Run> {
    RUN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The command this process runs.
pub fn set_command(name: &str) {
    run().command = name.to_string();
}

/// Starts the summary of another command run in this process (`cairn ui`): its name, no
/// figures, no warnings counted.
pub fn start(name: &str) {
    let mut run = run();
    run.command = name.to_string();
    run.figures.clear();
    crate::util::progress::reset_warnings();
}

/// Leaves a figure of the command's summary (`name` in lower case, as in JSON).
pub fn figure(name: impl Into<String>, value: impl Into<Value>) {
    run().figures.push((name.into(), value.into()));
}

/// The figures as hook environment variables: `CAIRN_HOOK_FILES=2`.
pub fn hook_env() -> Vec<(String, String)> {
    run()
        .figures
        .iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (format!("CAIRN_HOOK_{}", name.to_ascii_uppercase()), text)
        })
        .collect()
}

/// With `--log-json`, the last record: the command, its exit status, the error if it
/// failed, and its figures.
pub fn emit(exit_status: u8, error: Option<String>) {
    if !crate::util::log::is_json() {
        return;
    }
    let run = run();
    let mut m = Map::new();
    m.insert("type".into(), "summary".into());
    m.insert("command".into(), run.command.clone().into());
    m.insert("exit_status".into(), exit_status.into());
    if let Some(e) = error {
        m.insert("error".into(), e.into());
    }
    m.insert(
        "warnings_said".into(),
        crate::util::progress::warnings_said().into(),
    );
    for (name, value) in &run.figures {
        m.insert(name.clone(), value.clone());
    }
    drop(run);
    crate::util::log::emit(m);
}
