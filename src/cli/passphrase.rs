//! Where a passphrase comes from: `CAIRN_PASSPHRASE`, the output of `CAIRN_PASSCOMMAND` (or of
//! a profile's `passcommand`), or a prompt on the terminal (asked twice when a new passphrase is being set).
//! The repository `copy` and `init --copy-chunker-params-from` read from has its own:
//! `CAIRN_FROM_PASSPHRASE`, `CAIRN_FROM_PASSCOMMAND`, or a prompt.

use std::io::IsTerminal;
use std::process::Command;

use crate::error::{Error, Result};

/// A profile's `passcommand`: used when the environment gives no passphrase.
static PROFILE_COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the profile's passphrase command (once, when the command line is read).
pub fn set_profile_command(cmd: String) {
    let _ = PROFILE_COMMAND.set(cmd);
}

thread_local! {
    /// On a thread `cairn ui` runs a command on: the passphrase it obtained when it started
    /// (each repository's own; the profile's command above is set once per process), or
    /// none, and then no prompt either (the ui's terminal is not the page).
    static GIVEN: std::cell::RefCell<Option<Option<zeroize::Zeroizing<Vec<u8>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `pass` as the passphrase [`obtain`] gives on this thread; without one,
/// [`obtain`] takes it from the environment or fails, and never asks.
pub fn with_given<T>(pass: Option<zeroize::Zeroizing<Vec<u8>>>, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            GIVEN.with(|g| *g.borrow_mut() = None);
        }
    }
    GIVEN.with(|g| *g.borrow_mut() = Some(pass));
    let _reset = Reset;
    f()
}

/// Gets the repository passphrase: `CAIRN_PASSPHRASE`, `CAIRN_PASSCOMMAND`, the profile's
/// `passcommand`, or a prompt. `confirm` asks twice (a new passphrase at `init`).
pub fn obtain(prompt_text: &str, confirm: bool) -> Result<Vec<u8>> {
    if let Some(p) = GIVEN.with(|g| {
        g.borrow()
            .as_ref()
            .and_then(|p| p.as_ref().map(|p| p.to_vec()))
    }) {
        return Ok(p);
    }
    if let Ok(p) = std::env::var("CAIRN_PASSPHRASE") {
        return Ok(p.into_bytes());
    }
    if let Ok(cmd) = std::env::var("CAIRN_PASSCOMMAND") {
        return from_command("CAIRN_PASSCOMMAND", &cmd);
    }
    if let Some(cmd) = PROFILE_COMMAND.get() {
        return from_command("the profile's passcommand", cmd);
    }
    prompt(
        prompt_text,
        confirm,
        "no passphrase: set CAIRN_PASSPHRASE or CAIRN_PASSCOMMAND, or run cairn in a terminal",
    )
}

/// The passphrase of a repository `cairn ui` shows: `CAIRN_PASSPHRASE`, `CAIRN_PASSCOMMAND`,
/// its profile's `passcommand`, or a prompt (the order [`obtain`] follows).
pub fn obtain_for(prompt_text: &str, passcommand: Option<&str>) -> Result<Vec<u8>> {
    if std::env::var_os("CAIRN_PASSPHRASE").is_none()
        && std::env::var_os("CAIRN_PASSCOMMAND").is_none()
    {
        if let Some(cmd) = passcommand {
            return from_command("the profile's passcommand", cmd);
        }
    }
    obtain(prompt_text, false)
}

/// The passphrase of the repository copied from: `CAIRN_FROM_PASSPHRASE`,
/// `CAIRN_FROM_PASSCOMMAND`, or a prompt.
pub fn obtain_source(prompt_text: &str) -> Result<Vec<u8>> {
    if let Ok(p) = std::env::var("CAIRN_FROM_PASSPHRASE") {
        return Ok(p.into_bytes());
    }
    if let Ok(cmd) = std::env::var("CAIRN_FROM_PASSCOMMAND") {
        return from_command("CAIRN_FROM_PASSCOMMAND", &cmd);
    }
    prompt(
        prompt_text,
        false,
        "no passphrase for the source repository: set CAIRN_FROM_PASSPHRASE or \
         CAIRN_FROM_PASSCOMMAND, or run cairn in a terminal",
    )
}

/// A new passphrase for `key change-passphrase`: `CAIRN_NEW_PASSPHRASE`, else a prompt.
pub fn obtain_new() -> Result<Vec<u8>> {
    if let Ok(p) = std::env::var("CAIRN_NEW_PASSPHRASE") {
        return Ok(p.into_bytes());
    }
    prompt(
        "New passphrase",
        true,
        "no new passphrase: set CAIRN_NEW_PASSPHRASE or run cairn in a terminal",
    )
}

fn prompt(text: &str, confirm: bool, no_terminal: &str) -> Result<Vec<u8>> {
    if GIVEN.with(|g| g.borrow().is_some()) {
        return Err(Error::Passphrase(
            "cairn ui has no passphrase for this repository (it did not open when the ui started): restart cairn ui".into(),
        ));
    }
    if !std::io::stdin().is_terminal() && !std::io::stderr().is_terminal() {
        return Err(Error::Passphrase(no_terminal.into()));
    }
    let read = |t: &str| {
        rpassword::prompt_password(format!("{t}: "))
            .map_err(|e| Error::Passphrase(format!("cannot read the passphrase: {e}")))
    };
    loop {
        let p = read(text)?;
        if !confirm {
            return Ok(p.into_bytes());
        }
        if p.is_empty() {
            crate::say!("An empty passphrase protects nothing; please type one.");
            continue;
        }
        if read("Repeat the passphrase")? == p {
            return Ok(p.into_bytes());
        }
        crate::say!("The passphrases differ; please try again.");
    }
}

/// The output of `cmd`, run by the shell; `what` names where it came from in errors.
fn from_command(what: &str, cmd: &str) -> Result<Vec<u8>> {
    let out = crate::util::secrets::scrub(&mut Command::new("sh"))
        .arg("-c")
        .arg(cmd)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::Passphrase(format!("{what}: cannot run {cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(Error::Passphrase(format!(
            "{what} {cmd:?} failed ({})",
            out.status
        )));
    }
    let mut p = out.stdout;
    if p.last() == Some(&b'\n') {
        p.pop();
        if p.last() == Some(&b'\r') {
            p.pop();
        }
    }
    Ok(p)
}
