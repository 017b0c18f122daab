//! Opening a repository: its store (warmed with the listings the command will make first),
//! the passphrase, the key derived while the lock is taken beside it, what this machine
//! remembers of the location, and the lock held by the repository that opens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::lock::{Lock, LockKind, LockSeal, SealSlot};
use super::{Repository, Tuning};
use crate::error::{Error, Result};
use crate::store::location::Location;
use crate::store::reserve::Releasing;
use crate::store::warm::WarmStore;
use crate::store::{StoreError, StoreSettings};

/// Where a repository's passphrase comes from, given the prompt to show.
pub type Ask = fn(&str) -> Result<Vec<u8>>;

/// Opens the repository at `location`, asking for the passphrase (`ask`) if needed, and
/// checks it against what this machine remembers of that location.
pub fn open(
    location: &Location,
    store_settings: &StoreSettings,
    tuning: &Tuning,
    allow_unencrypted: bool,
    ask: Ask,
) -> Result<Repository> {
    open_locked(
        location,
        store_settings,
        tuning,
        allow_unencrypted,
        ask,
        None,
        &|_| Vec::new(),
    )
}

/// Sets the flag when dropped, unless disarmed first.
struct GiveUp<'a>(Option<&'a AtomicBool>);

impl GiveUp<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        if let Some(flag) = self.0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// The lock a command takes on the repository it opens.
pub struct LockRequest<'a> {
    pub kind: LockKind,
    pub command: &'a str,
    pub wait: Duration,
    /// Only to read: a repository that cannot be written is read without one.
    pub to_read: bool,
    /// The command frees space: on a full disk it may use the repository's reserve.
    pub frees_space: bool,
}

/// What a command lists first, given the repository's id: listed while the key is derived.
pub type Listings<'a> = &'a dyn Fn(&str) -> Vec<&'static str>;

/// A local repository whose directory does not exist is said to be missing, rather than
/// found to have no config object.
fn refuse_missing(location: &Location) -> Result<()> {
    if let Location::Local(dir) = location {
        if let Err(e) = std::fs::symlink_metadata(dir) {
            if e.kind() == std::io::ErrorKind::NotFound {
                return Err(Error::invalid(format!(
                    "{location}: the repository does not exist (no such directory; cairn init makes one)"
                )));
            }
        }
    }
    Ok(())
}

/// [`open`], taking `lock` too. Once the passphrase is known, the key's derivation (a fifth of
/// a second of one core) runs beside taking the lock and listing what `listings` names:
/// round trips to a far-away store that would otherwise come one after the other.
pub fn open_locked(
    location: &Location,
    store_settings: &StoreSettings,
    tuning: &Tuning,
    allow_unencrypted: bool,
    ask: Ask,
    lock: Option<LockRequest>,
    listings: Listings,
) -> Result<Repository> {
    let name_it = |e: Error| explain(location, e);
    refuse_missing(location)?;
    let mut store = location.open_store(store_settings)?;
    if lock.as_ref().is_some_and(|l| l.frees_space) {
        store = Arc::new(Releasing::new(store));
    }
    let warm = Arc::new(WarmStore::new(store.clone()));
    let opening = Repository::begin_open(warm.clone()).map_err(|e| explain(location, e))?;
    let pass = opening
        .passphrase(|| ask(&format!("Enter passphrase for {location}")))
        .map_err(name_it)?;
    let id_hex = opening.id_hex();
    let first = listings(&id_hex);
    let encrypted = pass.is_some();
    // The key, then what this machine remembers of the location: a replaced repository is
    // refused before anything more is written to it.
    let unlock = move || -> Result<Repository> {
        let mut repo = opening.unlock(pass).map_err(name_it)?;
        super::known::check_and_remember(&location.memory_key(), &repo, allow_unencrypted)?;
        repo.set_location(location.memory_key());
        Ok(repo)
    };
    let give_up = AtomicBool::new(false);
    // Filled once the key opens: the lock is taken meanwhile, and sealed then.
    let seal = SealSlot::pending();
    let take_lock = || -> Result<Option<Lock>> {
        let lock = match &lock {
            None => None,
            Some(r) => {
                let taken = Lock::acquire(
                    store.clone(),
                    r.kind,
                    r.command,
                    r.wait,
                    super::lock_memory(&id_hex),
                    tuning.lock,
                    &give_up,
                    seal.clone(),
                );
                if r.to_read {
                    lock_to_read(location, taken.map(Some))?
                } else {
                    Some(taken?)
                }
            }
        };
        if !give_up.load(Ordering::SeqCst) {
            warm.warm(&first);
        }
        Ok(lock)
    };
    let (repo, lock) = if encrypted {
        unlock_beside(unlock, take_lock, &give_up, &seal)
    } else {
        // Nothing to derive: checked first, locked after.
        let repo = unlock()?;
        seal.fill(LockSeal::of(repo.crypto()));
        (Ok(repo), take_lock())
    };
    // The key's error first (a wrong passphrase is what the user must hear of), then a
    // repository that is not the one remembered, then the lock.
    let mut repo = repo?;
    let lock = lock?;
    repo.set_tuning(tuning.clone());
    if let Some(lock) = lock {
        lock.seal_soon();
        repo.hold_lock(lock);
    }
    Ok(repo)
}

/// An error opening the repository at `location`, saying which (a wrong passphrase too).
impl Repository {
    /// Notes where the repository was opened from (its location's memory key).
    pub fn set_location(&mut self, key: String) {
        self.location = Some(key);
    }

    /// Where the repository was opened from, when known.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }

    /// Lets the held lock go (while a person is asked something: a prompt left open must not
    /// lock everyone out); [`Repository::lock`] takes one again.
    pub fn release_lock(&mut self) {
        self.lock = None;
    }
}

/// A repository that does not open: said as what the directory is, when it is another tool's
/// repository or one this user may not read.
fn explain(location: &Location, e: Error) -> Error {
    if let Location::Local(dir) = location {
        if let Some(why) = super::foreign::unreadable_config(dir) {
            return Error::invalid(why);
        }
        // An object of the repository this user may not read (keys/, say): whose it is.
        let denied = match &e {
            Error::Store(crate::error::StoreError::Io { name, source }) => Some((name, source)),
            _ => None,
        };
        let within = denied
            .filter(|(_, source)| source.kind() == std::io::ErrorKind::PermissionDenied)
            .and_then(|(name, _)| {
                super::foreign::unreadable_within(dir, std::path::Path::new(name))
            });
        if let Some(why) = within {
            return Error::invalid(why);
        }
        match super::foreign::kind_of(dir) {
            Some(super::foreign::Kind::Cairn) | None => {}
            Some(other) => {
                return Error::invalid(format!(
                    "{location} is {}, not a cairn repository: cairn cannot read it (cairn init makes a cairn repository in an empty or new directory)",
                    other.name()
                ))
            }
        }
    }
    in_location(location, e)
}

fn in_location(location: &Location, e: Error) -> Error {
    match e {
        Error::Invalid(msg) => Error::Invalid(format!("{location}: {msg}")),
        Error::Passphrase(msg) => Error::Passphrase(format!("{location}: {msg}")),
        Error::WrongPassphrase => {
            Error::Passphrase(format!("{location}: {}", Error::WrongPassphrase))
        }
        e => e,
    }
}

/// Opens the key (`unlock`) while `take_lock` runs in another thread, and fills `seal` once the
/// key opens. Unless the key opens and the repository is the one remembered (or if unlocking
/// panics), `give_up` is set: the lock thread then stops waiting for a conflicting lock.
fn unlock_beside<T: Send>(
    unlock: impl FnOnce() -> Result<Repository>,
    take_lock: impl FnOnce() -> Result<T> + Send,
    give_up: &AtomicBool,
    seal: &SealSlot,
) -> (Result<Repository>, Result<T>) {
    std::thread::scope(|s| {
        let beside = s.spawn(take_lock);
        // Sets `give_up` when dropped armed: on an error, or a panic, in `unlock`.
        let failed = GiveUp(Some(give_up));
        let repo = unlock();
        if let Ok(repo) = &repo {
            seal.fill(LockSeal::of(repo.crypto()));
            failed.disarm();
        } else {
            drop(failed);
        }
        let lock = beside
            .join()
            .unwrap_or_else(|_| Err(Error::internal("taking the lock panicked")));
        (repo, lock)
    })
}

/// The outcome of taking a lock to read: a repository that cannot be written (read-only media,
/// someone else's files) is read without one, said once.
pub fn lock_to_read<T: Default>(location: &Location, taken: Result<T>) -> Result<T> {
    match taken {
        // A full disk too: reading it is how one finds out what to delete.
        Err(Error::Store(e)) if e.is_not_writable() || matches!(e, StoreError::NoSpace { .. }) => {
            crate::say!("warning: {location} cannot be written ({e}); reading it without a lock");
            Ok(T::default())
        }
        other => other,
    }
}
