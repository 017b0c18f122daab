//! One module per command; [`run`] dispatches and returns the exit status.

pub mod check;
pub mod compact;
pub mod copy;
pub mod create;
pub mod delete;
pub mod diff;
pub mod dump;
pub mod export_tar;
pub mod extract;
pub mod find;
pub mod info;
pub mod init;
pub mod key;
pub mod list;
pub mod mount;
pub mod prune;
pub mod relabel;
pub mod rewrite;
pub mod serve;
pub mod shell;
pub mod ui;
pub mod undelete;

use std::sync::Arc;
use std::time::Duration;

use crate::cli::args::{Cli, Command, KeyCommand};
use crate::cli::settings::Settings;
use crate::cli::{output, passphrase};
use crate::error::{Error, Result};
use crate::repo::lock::{Lock, LockKind, SealSlot, KEEP_WAITING};
use crate::repo::open::{lock_to_read, open_locked, Ask, LockRequest};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::store::location::Location;
use crate::store::Store;

/// An open repository, holding the lock the command needs, and the settings read at the
/// start.
pub struct Ctx {
    pub repo: Repository,
    pub settings: Settings,
    /// Where the repository is.
    pub location: Location,
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

/// cairn's own directories ([`crate::ops::own_dirs`]) for a command that reads (`"read"`) or
/// writes (`"written"`) the repository: the repository, when it is a local directory, and
/// cairn's cache directory.
pub fn own_dirs(ctx: &Ctx, verb: &str) -> Vec<crate::ops::own_dirs::OwnDir> {
    use crate::ops::own_dirs::OwnDir;
    let mut own = Vec::new();
    if let Location::Local(root) = &ctx.location {
        let what = if verb == "written" {
            "it is the repository being written"
        } else {
            "it is the repository being read"
        };
        own.extend(OwnDir::dir(root, what));
    }
    if let Some(cache) = crate::repo::cache_dir::base() {
        own.extend(OwnDir::dir(&cache, "it is cairn's cache directory"));
    }
    own
}

/// `Warning` after saying `warning`, if there is one; else `Ok`.
pub fn warned(warning: Option<String>) -> Status {
    match warning {
        Some(w) => {
            crate::say!("warning: {w}");
            Status::Warning
        }
        None => Status::Ok,
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

/// `--lock-wait` as a duration.
fn lock_wait(seconds: f64) -> Result<Duration> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(Error::invalid(
            "--lock-wait needs a number of seconds, 0 or more",
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Runs the command. Errors below are typed ([`Error`]); here each gets what cairn was doing
/// when it happened (`creating archive "home": packs/3f/…: no space left on device`).
pub fn run(cli: Cli) -> anyhow::Result<Status> {
    run_parsed(cli, std::env::args_os().collect())
}

/// [`run`] for `cli`, parsed from `argv` (`cairn ui` runs commands it makes up in the same
/// process: their profile is spliced into `argv`, not into this process's arguments).
pub fn run_parsed(mut cli: Cli, argv: Vec<std::ffi::OsString>) -> anyhow::Result<Status> {
    crate::util::log::set_json(cli.log_json);
    let command = cli.command.name();
    crate::cli::summary::set_command(command);
    let hooks = crate::cli::profile::apply(&mut cli, argv)?;
    // A profile may turn it on.
    crate::util::log::set_json(cli.log_json);
    match hooks {
        Some(h) if h.any() && h.covers(command) => {
            let ctx = crate::cli::hooks::Context {
                command,
                profile: cli.profile.clone().unwrap_or_default(),
                repository: cli.repo.clone(),
                archive: match &cli.command {
                    Command::Create(a) => Some(a.name.clone()),
                    _ => None,
                },
            };
            crate::cli::hooks::around(&h, &ctx, exit_code, || run_command(cli))
        }
        _ => run_command(cli),
    }
}

/// The exit status an outcome gives: the status's code; 2 for an error, 128 + the signal
/// for an interrupt, 0 for a closed pipe (`cairn list | head`).
pub fn exit_code(result: &anyhow::Result<Status>) -> u8 {
    match result {
        Ok(status) => status.code(),
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => 0,
            Some(Error::Interrupted(sig))
            | Some(Error::InterruptedIncomplete { signal: sig, .. }) => {
                128u8.saturating_add(*sig as u8)
            }
            _ => 2,
        },
    }
}

/// Says how a command that failed ended (what it was doing, then the error; an interrupt as
/// such) and returns it for the summary; nothing for a closed pipe.
pub fn said_failure(e: &anyhow::Error) -> Option<String> {
    match e.downcast_ref::<Error>() {
        Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => None,
        Some(Error::Interrupted(_)) => {
            let what = "interrupted; nothing was committed".to_string();
            crate::say!("cairn: {what}");
            Some(what)
        }
        Some(Error::InterruptedIncomplete { what, .. }) => {
            let what = format!("interrupted: {what}");
            crate::say!("cairn: {what}");
            Some(what)
        }
        _ => {
            // What cairn was doing, then the error. cairn's own errors already carry their
            // causes in their messages: the chain stops there, so nothing is said twice.
            let mut said = Vec::new();
            for layer in e.chain() {
                said.push(layer.to_string());
                if layer.downcast_ref::<Error>().is_some() {
                    break;
                }
            }
            let said = said.join(": ");
            crate::say!("cairn: error: {said}");
            Some(said)
        }
    }
}

/// Runs the command itself (after the profile, between the hooks).
fn run_command(cli: Cli) -> anyhow::Result<Status> {
    let wait = lock_wait(cli.lock_wait)?;
    output::show_times_in_utc(cli.utc);
    let mut settings = Settings::from_env()?;
    settings.store.limits = crate::store::limit::Limits {
        upload: cli.limit_upload.map(|k| k * 1024),
        download: cli.limit_download.map(|k| k * 1024),
    };
    let open = Opener {
        cli: &cli,
        settings: &settings,
        wait,
    };
    let doing = doing(&cli.command);
    dispatch(&open).map_err(|e| match e {
        // Not a failure of a step: said as it is.
        e @ Error::Interrupted(_) => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(doing),
    })
}

/// How a command opens its repository: the command line, the settings read at the start, and
/// how long to wait for a lock.
struct Opener<'a> {
    cli: &'a Cli,
    settings: &'a Settings,
    wait: Duration,
}

impl Opener<'_> {
    /// Where the repository is (`-r`, `CAIRN_REPO`).
    fn location(&self) -> Result<Location> {
        let repo =
            self.cli.repo.as_deref().ok_or_else(|| {
                Error::invalid("no repository given: use -r REPO or set CAIRN_REPO")
            })?;
        Location::parse(repo)
    }

    /// Opens the repository at `location` for `command`, with the lock its `access` needs.
    fn open_at(&self, location: Location, ask: Ask, access: Access, command: &str) -> Result<Ctx> {
        let cli = self.cli;
        let lock = lock_request(access, cli.bypass_lock, command, self.wait)?;
        let first = |id_hex: &str| first_listings(&cli.command, id_hex);
        let repo = open_locked(
            &location,
            &self.settings.store,
            &self.settings.tuning,
            cli.allow_unencrypted,
            ask,
            lock,
            &first,
        )?;
        Ok(Ctx {
            repo,
            settings: self.settings.clone(),
            location,
        })
    }

    /// Opens the repository the command works on (`-r`).
    fn ctx(&self, access: Access, command: &str) -> Result<Ctx> {
        self.open_at(self.location()?, ask_repository, access, command)
    }
}

/// Runs the command the command line names, each with the access to the repository it needs.
fn dispatch(open: &Opener) -> Result<Status> {
    let (cli, settings, wait) = (open.cli, open.settings, open.wait);
    let location = || open.location();
    let ctx = |access: Access, command: &str| open.ctx(access, command);
    use Access::{Free, Read, Write};
    use LockKind::{Exclusive, Shared};
    match &cli.command {
        Command::Init(a) => init::run(&location()?, settings, a, cli.allow_unencrypted),
        // A dry run only reads.
        Command::Create(a) if a.dry_run => ctx(Read, "create").and_then(|c| create::run(&c, a)),
        Command::Create(a) => ctx(Write(Shared), "create").and_then(|c| create::run(&c, a)),
        Command::Extract(a) => ctx(Read, "extract").and_then(|c| extract::run(&c, a)),
        Command::List(a) if a.removed => {
            ctx(Read, "list").and_then(|c| undelete::list(&c.repo, a.json_lines))
        }
        Command::List(a) => ctx(Read, "list").and_then(|c| list::run(&c.repo, a)),
        Command::Info(a) => ctx(Read, "info").and_then(|c| info::run(&c.repo, a)),
        Command::Diff(a) => ctx(Read, "diff").and_then(|c| diff::run(&c.repo, a)),
        Command::Find(a) => ctx(Read, "find").and_then(|c| find::run(&c.repo, a)),
        Command::Dump(a) => ctx(Read, "dump").and_then(|c| dump::run(&c, a)),
        Command::ExportTar(a) => ctx(Read, "export-tar").and_then(|c| export_tar::run(&c, a)),
        Command::Mount(a) if mount::in_background(a) => mount::background(a),
        Command::Mount(a) => ctx(Read, "mount").and_then(|c| mount::run(c, a)),
        Command::Umount(a) => mount::umount(a),
        Command::Check(a) if a.repository_only => {
            location().and_then(|l| check_repository_only(&l, settings, cli.bypass_lock, wait, a))
        }
        Command::Check(a) if a.repair => {
            ctx(Free, "check").and_then(|c| freeing(c, |c| check::run(c, a)))
        }
        Command::Check(a) => ctx(Read, "check").and_then(|c| check::run(&c, a)),
        Command::Copy(a) => ctx(Write(Shared), "copy").and_then(|dst| {
            let from = Location::parse(&a.from_repo)?;
            let src = open.open_at(from, passphrase::obtain_source, Read, "copy")?;
            copy::run(&dst, &src, a)
        }),
        Command::Delete(a) => ctx(Free, "delete").and_then(|c| delete_archives(c, a, wait)),
        Command::Rewrite(a) if a.dry_run => ctx(Read, "rewrite").and_then(|c| rewrite::run(&c, a)),
        Command::Rewrite(a) => ctx(Write(Exclusive), "rewrite").and_then(|c| rewrite::run(&c, a)),
        Command::Rename(a) => ctx(Write(Exclusive), "rename").and_then(|c| relabel::rename(&c, a)),
        Command::Comment(a) => {
            ctx(Write(Exclusive), "comment").and_then(|c| relabel::comment(&c, a))
        }
        Command::Tag(a) => ctx(Write(Exclusive), "tag").and_then(|c| relabel::tag(&c, a)),
        Command::Prune(a) => ctx(Free, "prune").and_then(|c| freeing(c, |c| prune::run(c, a))),
        Command::Compact(a) => {
            ctx(Free, "compact").and_then(|c| freeing(c, |c| compact::run(c, a)))
        }
        Command::BreakLock => location().and_then(|l| break_locks(&l, settings)),
        Command::Serve(a) => serve::run(a),
        Command::Ui(a) => ui::run(cli, settings, wait, a),
        Command::Undelete(a) => {
            ctx(Write(Exclusive), "undelete").and_then(|c| undelete::run(&c, a))
        }
        Command::Completions(a) => shell::completions(a),
        Command::Man(a) => shell::man(a),
        Command::Key(KeyCommand::ChangePassphrase) => {
            ctx(Write(Exclusive), "key change-passphrase")
                .and_then(|c| key::change_passphrase(&c.repo))
        }
        Command::Key(KeyCommand::Add) => {
            ctx(Write(Exclusive), "key add").and_then(|c| key::add(&c.repo))
        }
        Command::Key(KeyCommand::List) => ctx(Read, "key list").and_then(|c| key::list(&c.repo)),
        Command::Key(KeyCommand::Remove(a)) => {
            ctx(Write(Exclusive), "key remove").and_then(|c| key::remove(&c.repo, a))
        }
        Command::Key(KeyCommand::Export(a)) => {
            ctx(Read, "key export").and_then(|c| key::export(&c.repo, a))
        }
        // No working key is needed: the store and an exclusive lock on it.
        Command::Key(KeyCommand::Import(_)) if cli.bypass_lock => Err(bypass_refused("key import")),
        Command::Key(KeyCommand::Import(a)) => (|| {
            let store = location()?.open_store(&settings.store)?;
            let lock = keyless_lock(&store, settings, Exclusive, "key import", wait)?;
            key::import(&*store, &lock, a)
        })(),
    }
}

/// The lock a command takes for its access (none for a read with `--bypass-lock`, which a
/// writing command refuses).
fn lock_request(
    access: Access,
    bypass: bool,
    command: &str,
    wait: Duration,
) -> Result<Option<LockRequest<'_>>> {
    let request = |kind, to_read, frees_space| LockRequest {
        kind,
        command,
        wait,
        to_read,
        frees_space,
    };
    Ok(match access {
        Access::Write(_) | Access::Free if bypass => return Err(bypass_refused(command)),
        Access::Write(kind) => Some(request(kind, false, false)),
        Access::Free => Some(request(LockKind::Exclusive, false, true)),
        Access::Read if bypass => None,
        Access::Read => Some(request(LockKind::Shared, true, false)),
    })
}

/// What a command will list first, fetched beside the key's derivation.
fn first_listings(command: &Command, id_hex: &str) -> Vec<&'static str> {
    match command {
        Command::Create(a) if !a.dry_run => create::first_listings(id_hex, &a.name),
        // Commands that read: they write nothing but their lock, so a listing made beside
        // the key's derivation is what they would list after it.
        Command::List(a) if a.archive.is_none() => vec!["archives"],
        Command::List(_)
        | Command::Extract(_)
        | Command::Diff(_)
        | Command::Dump(_)
        | Command::ExportTar(_)
        | Command::Find(_)
        | Command::Info(_)
        | Command::Mount(_) => vec!["archives", "index", "retired"],
        _ => Vec::new(),
    }
}

/// `check --repository-only`: no key, and a keyless shared lock (none with
/// `--bypass-lock`).
fn check_repository_only(
    location: &Location,
    settings: &Settings,
    bypass: bool,
    wait: Duration,
    args: &crate::cli::args::CheckArgs,
) -> Result<Status> {
    let store = location.open_store(&settings.store)?;
    let lock = if bypass {
        None
    } else {
        let taken = keyless_lock(&store, settings, LockKind::Shared, "check", wait);
        lock_to_read(location, taken.map(Some))?
    };
    check::run_repository_only(&*store, lock.as_ref(), settings, args)
}

/// The lock of a command that runs without the key (`check --repository-only`, `key
/// import`): it carries no sealed details.
fn keyless_lock(
    store: &Arc<dyn Store>,
    settings: &Settings,
    kind: LockKind,
    command: &str,
    wait: Duration,
) -> Result<Lock> {
    Lock::acquire(
        store.clone(),
        kind,
        command,
        wait,
        None,
        settings.tuning.lock,
        &KEEP_WAITING,
        SealSlot::keyless(),
    )
}

/// What a command is doing, for the context of its errors.
fn doing(command: &Command) -> String {
    match command {
        Command::Init(_) => "creating a repository".into(),
        Command::Create(a) => format!("creating archive {:?}", a.name),
        Command::Extract(a) => format!("extracting {:?}", a.archive),
        Command::List(a) => match &a.archive {
            Some(archive) => format!("listing {archive:?}"),
            None => "listing the archives".into(),
        },
        Command::Info(_) => "reading the repository's statistics".into(),
        Command::Diff(a) => format!("comparing {:?} with {:?}", a.archive1, a.archive2),
        Command::Find(a) => format!("searching for {:?}", a.pattern),
        Command::Dump(a) => format!("dumping {} of {:?}", a.path.display(), a.archive),
        Command::ExportTar(a) => format!("exporting {:?} to {}", a.archive, a.file.display()),
        Command::Mount(a) => format!(
            "mounting at {}",
            a.targets.last().map_or("", String::as_str)
        ),
        Command::Umount(a) => format!("unmounting {}", a.mountpoint.display()),
        Command::Check(a) if a.repair => "repairing the repository".into(),
        Command::Check(_) => "checking the repository".into(),
        Command::Copy(a) => format!("copying archives from {}", a.from_repo),
        Command::Delete(_) => "deleting archives".into(),
        Command::Rewrite(_) => "rewriting archives".into(),
        Command::Rename(a) => format!("renaming {:?}", a.archive),
        Command::Comment(a) => format!("commenting {:?}", a.archive),
        Command::Tag(a) => format!("tagging {:?}", a.archives.join(" ")),
        Command::Prune(_) => "pruning archives".into(),
        Command::Compact(_) => "compacting the repository".into(),
        Command::BreakLock => "removing the repository's locks".into(),
        Command::Serve(_) => "serving a repository".into(),
        Command::Ui(a) => format!("serving the web interface on {}", a.listen),
        Command::Undelete(_) => "bringing back removed archives".into(),
        Command::Completions(_) => "writing the completion script".into(),
        Command::Man(a) => format!("writing man pages to {}", a.dir.display()),
        Command::Key(KeyCommand::ChangePassphrase) => "changing the passphrase".into(),
        Command::Key(KeyCommand::Export(_)) => "exporting the key".into(),
        Command::Key(KeyCommand::Add) => "adding a key".into(),
        Command::Key(KeyCommand::List) => "listing the keys".into(),
        Command::Key(KeyCommand::Remove(a)) => format!("removing key {}", a.id),
        Command::Key(KeyCommand::Import(_)) => "importing a key".into(),
    }
}

/// What a command does to the repository.
#[derive(Clone, Copy)]
enum Access {
    /// Reads only: a shared lock when the repository can be written, none when it cannot (or
    /// with `--bypass-lock`).
    Read,
    Write(LockKind),
    /// Frees space (delete, prune, compact, check --repair): an exclusive lock, and on a full
    /// disk the repository's reserve (`store/reserve.rs`).
    Free,
}

/// `delete`: what --glob or --all chose is asked about first, with the lock let go meanwhile.
fn delete_archives(mut c: Ctx, a: &crate::cli::args::DeleteArgs, wait: Duration) -> Result<Status> {
    let confirmed = match delete::asks(a) {
        true => Some(delete::ask_unlocked(&mut c, a, wait)?),
        false => None,
    };
    freeing(c, |c| delete::run(c, a, confirmed.as_deref()))
}

/// Runs a command that frees space, then makes the repository's reserve again if it was
/// used (and there is room now).
fn freeing(c: Ctx, run: impl FnOnce(&Ctx) -> Result<Status>) -> Result<Status> {
    let status = run(&c)?;
    if let Some(note) = crate::store::reserve::restore(&**c.repo.store())? {
        crate::say!("warning: {note}");
        return Ok(Status::Warning);
    }
    Ok(status)
}

fn bypass_refused(command: &str) -> Error {
    Error::invalid(format!(
        "--bypass-lock is only for commands that read the repository (list, info, diff, find, dump, export-tar, mount, extract, check, create --dry-run); {command} writes to it"
    ))
}

/// `cairn break-lock`: only the store (a person breaking a lock may not have the passphrase
/// at hand).
fn break_locks(location: &Location, settings: &Settings) -> Result<Status> {
    // A full disk must not keep anyone from removing a lock (its record needs a few bytes).
    let store = crate::store::reserve::Releasing::new(location.open_store(&settings.store)?);
    let removed = crate::repo::lock::break_all(&store)?;
    for (name, info) in &removed {
        output::line(&format!("Removed {name}: {}", info.describe()))?;
    }
    output::line(&format!(
        "{} removed.",
        output::count(removed.len() as u64, "lock")
    ))?;
    Ok(Status::Ok)
}

/// The passphrase of the repository the command works on (`-r`).
fn ask_repository(prompt: &str) -> Result<Vec<u8>> {
    passphrase::obtain(prompt, false)
}
