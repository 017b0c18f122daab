//! One module per command; [`run`] dispatches and returns the exit status.

pub mod create;
pub mod diff;
pub mod extract;
pub mod info;
pub mod init;
pub mod list;
pub mod output;

use crate::cli::{Cli, Command};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::passphrase;
use crate::repo::Repository;

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
    match &cli.command {
        Command::Init(a) => init::run(&location()?, a),
        Command::Create(a) => create::run(&open(&location()?)?, a),
        Command::Extract(a) => extract::run(&open(&location()?)?, a),
        Command::List(a) => list::run(&open(&location()?)?, a),
        Command::Info(a) => info::run(&open(&location()?)?, a),
        Command::Diff(a) => diff::run(&open(&location()?)?, a),
    }
}

/// Opens the repository at `location`, asking for the passphrase if needed.
pub fn open(location: &Location) -> Result<Repository> {
    let store = location.open_store()?;
    Repository::open(store, || {
        passphrase::obtain(&format!("Enter passphrase for {location}"), false)
    })
    .map_err(|e| match e {
        Error::Invalid(msg) => Error::Invalid(format!("{location}: {msg}")),
        e => e,
    })
}
