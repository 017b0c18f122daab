//! One module per command; [`run`] dispatches and returns the exit status.

pub mod check;
pub mod compact;
pub mod create;
pub mod delete;
pub mod diff;
pub mod extract;
pub mod info;
pub mod init;
pub mod list;
pub mod output;
pub mod prune;

use std::time::Duration;

use crate::cli::{Cli, Command};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::lock::{Lock, LockKind};
use crate::passphrase;
use crate::repo::Repository;
use crate::signals::Interrupt;

/// An open repository, holding the lock the command needs.
pub struct Ctx {
    pub repo: Repository,
}

impl Ctx {
    /// Signal handling for long work, which also stops when the lock is lost.
    pub fn interrupt(&self) -> Result<Interrupt> {
        let interrupt = Interrupt::install()?;
        Ok(match self.repo.lock_health() {
            Some(health) => interrupt.watch_lock(health),
            None => interrupt,
        })
    }
}

/// How a command ended when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Finished, but something was skipped or looked wrong (exit 1).
    Warning,
}

impl Status {
    pub fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warning => 1,
        }
    }

    pub fn worst(self, other: Status) -> Status {
        if self == Status::Warning || other == Status::Warning {
            Status::Warning
        } else {
            Status::Ok
        }
    }
}

pub fn run(cli: Cli) -> Result<Status> {
    let location = || -> Result<Location> {
        let repo = cli
            .repo
            .as_deref()
            .ok_or_else(|| Error::invalid("no repository given: use -r REPO or set CAIRN_REPO"))?;
        Location::parse(repo)
    };
    if !cli.lock_wait.is_finite() || cli.lock_wait < 0.0 {
        return Err(Error::invalid(
            "--lock-wait needs a number of seconds, 0 or more",
        ));
    }
    let wait = Duration::from_secs_f64(cli.lock_wait);
    let ctx = |kind: LockKind, command: &str| -> Result<Ctx> {
        let mut repo = open(&location()?, cli.allow_unencrypted)?;
        repo.lock(kind, command, wait)?;
        Ok(Ctx { repo })
    };
    use LockKind::{Exclusive, Shared};
    match &cli.command {
        Command::Init(a) => init::run(&location()?, a),
        Command::Create(a) => create::run(&ctx(Shared, "create")?, a),
        Command::Extract(a) => extract::run(&ctx(Shared, "extract")?, a),
        Command::List(a) => list::run(&ctx(Shared, "list")?.repo, a),
        Command::Info(a) => info::run(&ctx(Shared, "info")?.repo, a),
        Command::Diff(a) => diff::run(&ctx(Shared, "diff")?.repo, a),
        Command::Check(a) if a.repository_only => {
            let store = location()?.open_store()?;
            let lock = Lock::acquire(store.clone(), Shared, "check", wait, None)?;
            check::run_repository_only(&*store, &lock, a)
        }
        Command::Check(a) => {
            check::run(&ctx(if a.repair { Exclusive } else { Shared }, "check")?, a)
        }
        Command::Delete(a) => delete::run(&ctx(Exclusive, "delete")?, a),
        Command::Prune(a) => prune::run(&ctx(Exclusive, "prune")?, a),
        Command::Compact(a) => compact::run(&ctx(Exclusive, "compact")?, a),
        Command::BreakLock => {
            // Only the store: a person breaking a lock may not have the passphrase at hand.
            let store = location()?.open_store()?;
            let removed = crate::lock::break_all(&*store)?;
            for (name, info) in &removed {
                let what = info.as_ref().map_or_else(
                    || "an unreadable lock object".to_string(),
                    crate::lock::LockInfo::describe,
                );
                output::line(&format!("Removed {name}: {what}"))?;
            }
            output::line(&format!("{} locks removed.", removed.len()))?;
            Ok(Status::Ok)
        }
        Command::Key(crate::cli::KeyCommand::ChangePassphrase) => {
            let c = ctx(Exclusive, "key change-passphrase")?;
            let name = c.repo.change_passphrase(
                || passphrase::obtain("Current passphrase", false),
                passphrase::obtain_new,
            )?;
            output::line(&format!("Passphrase changed; the key is now {name}"))?;
            Ok(Status::Ok)
        }
    }
}

/// Opens the repository at `location`, asking for the passphrase if needed, and checks it
/// against what this machine remembers of that location.
pub fn open(location: &Location, allow_unencrypted: bool) -> Result<Repository> {
    let store = location.open_store()?;
    let repo = Repository::open(store, || {
        passphrase::obtain(&format!("Enter passphrase for {location}"), false)
    })
    .map_err(|e| match e {
        Error::Invalid(msg) => Error::Invalid(format!("{location}: {msg}")),
        e => e,
    })?;
    crate::repo::known::check_and_remember(&location.memory_key(), &repo, allow_unencrypted)?;
    Ok(repo)
}
