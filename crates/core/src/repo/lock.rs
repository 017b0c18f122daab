//! Repository locks: objects under `locks/`, and the rules that make them safe between
//! clients that share no clock, no PID namespace and perhaps not even a hostname.
//!
//! Protocol (correct on stores without create-only writes, such as some S3 servers):
//! 1. write our own lock object under a fresh random name (create-if-absent where the store
//!    has it);
//! 2. list `locks/` and read the others; stale ones in the way (see below) are removed, each
//!    after a record of the removal ([`broken`]), and the locks are listed again;
//! 3. if any live lock conflicts with ours (anything vs exclusive), delete ours, wait a random
//!    while and start again, until `--lock-wait` runs out.
//!
//! Two contenders can never both proceed: each writes before it lists, so whichever lists
//! second sees the other's lock and backs off (both may back off; the random wait breaks the
//! tie).
//!
//! A holder refreshes its lock every refresh interval by writing it under a new name and only
//! then checking that the old object is still exactly what it wrote ([`refresh`]): a lock that
//! vanished or changed stops the command ([`LockHealth`]) and is never written again. Right
//! before a commit the holder checks it synchronously ([`Lock::verify`]), and right after
//! it, again ([`Lock::confirm`]): a commit that may have raced a client that removed the lock
//! is then checked against what that client may have deleted (`repo/session.rs`).
//!
//! A lock is stale only when (a) its holder shares this process's machine, boot and PID
//! namespace ([`host::HostId`]) and its process is gone, or (b) this observer has watched its
//! contents stay the same for the whole stale interval by its own clock ([`watch::Watch`]).

pub mod broken;
mod conflict;
pub mod host;
mod refresh;
pub mod sealed;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::util::clock;
use conflict::find_conflict;
pub use conflict::{break_all, list_locks, live_locks};
use host::HostId;
use refresh::{Held, RefreshError, Wake};
pub use sealed::{LockSeal, SealSlot};
use watch::Watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    Shared,
    Exclusive,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub kind: LockKind,
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub command: String,
    /// Seconds since the epoch, by the holder's clock: shown to people, never compared.
    pub created: u64,
    pub refreshed: u64,
    /// Machine, boot and PID namespace of the holder.
    #[serde(default)]
    pub host_id: HostId,
    /// Incremented at every refresh.
    #[serde(default)]
    pub generation: u64,
    /// Set when what is known of this lock is at most its kind (its details are sealed from
    /// this reader, absent, or do not open): how it is described, instead of its details.
    #[serde(skip)]
    pub shown: Option<String>,
    /// Set when the lock says it was taken by a command without the key (`check
    /// --repository-only`, `key import`, `break-lock`): one that writes no backup.
    #[serde(skip)]
    pub keyless: bool,
}

/// A lock object is a few hundred bytes; anything much bigger is not one (and is not read).
pub const MAX_LOCK_LEN: u64 = 64 * 1024;

pub use crate::util::text::printable;

impl LockInfo {
    /// The details of a lock this process takes now, for `command`: of `kind`, by `user` on
    /// `host` (`here`).
    fn ours(kind: LockKind, command: &str, here: &HostId, (host, user): (&str, &str)) -> Self {
        let t = clock::now_secs();
        LockInfo {
            kind,
            host: host.to_string(),
            pid: std::process::id(),
            user: user.to_string(),
            command: command.to_string(),
            created: t,
            refreshed: t,
            host_id: here.clone(),
            generation: 0,
            shown: None,
            keyless: false,
        }
    }

    pub fn describe(&self) -> String {
        if let Some(shown) = &self.shown {
            return shown.clone();
        }
        format!(
            "{} lock held by {} (pid {} on {}, user {}) since {}",
            match self.kind {
                LockKind::Shared => "a shared",
                LockKind::Exclusive => "an exclusive",
            },
            printable(&self.command),
            self.pid,
            printable(&self.host),
            printable(&self.user),
            crate::util::clock::Timestamp {
                secs: self.created as i64,
                nanos: 0
            }
            .display_local()
        )
    }

    /// A lock of `kind` whose holder is not known (`what` describes it): judged stale only
    /// by watching it.
    fn without_details(kind: LockKind, what: String) -> Self {
        Self {
            kind,
            host: "?".into(),
            pid: 0,
            user: "?".into(),
            command: String::new(),
            created: 0,
            refreshed: 0,
            host_id: HostId::default(),
            generation: 0,
            shown: Some(what),
            keyless: false,
        }
    }

    /// What stands for a lock object that cannot be read as one: an exclusive lock (refusing
    /// is safe, guessing is not), judged stale only by watching it.
    fn unreadable(what: String) -> Self {
        Self::without_details(LockKind::Exclusive, what)
    }

    /// Whether the holder's details are known.
    pub fn opaque(&self) -> bool {
        self.shown.is_some()
    }
}

/// Timing of the lock protocol: a refresh every 5 minutes, stale after 30 minutes watched
/// unchanged, and a day's grace for what a removed lock's holder may still need (the command
/// line may change them: `CAIRN_LOCK_REFRESH_SECS`, `CAIRN_LOCK_STALE_SECS`,
/// `CAIRN_LOCK_GRACE_SECS`; the stale interval is always at least three refreshes, the grace
/// at least the stale interval).
#[derive(Clone, Copy, Debug)]
pub struct LockTiming {
    pub refresh: Duration,
    pub stale: Duration,
    /// After a lock was removed by someone other than its holder: how long every client that
    /// deletes packs first watches the record of that removal, by its own clock, before it
    /// deletes anything at once again; until then, packs are retired and deleted by a later
    /// run once they have waited that long and no archive needs them.
    pub grace: Duration,
}

impl Default for LockTiming {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(300),
            stale: Duration::from_secs(1800),
            grace: Duration::from_secs(24 * 3600),
        }
    }
}

impl LockTiming {
    /// How long a verification ([`Lock::verify`]) still vouches for the lock: a tenth of the
    /// refresh interval (30 seconds by default), far inside the stale interval that another
    /// client must watch the lock unchanged for before it may remove it. Measured with the
    /// time since boot, which counts a suspend.
    pub fn fresh_for(&self) -> Duration {
        self.refresh / 10
    }

    /// How long after its key opens a command's lock, taken without details while the key
    /// was derived, is sealed on a store whose requests do not queue (elsewhere: at its first
    /// refresh): a second by default. A command that ends sooner never rewrites it (a lock
    /// without details names nobody; three requests saved).
    pub fn seal_after(&self) -> Duration {
        self.refresh / 300
    }
}

/// The error of a lock that could not be taken because of `holder`.
fn locked_by(holder: &LockInfo, watched: Duration, wait: Duration, timing: &LockTiming) -> Error {
    let hint = if wait.is_zero() {
        " (use --lock-wait SECONDS to wait for it)"
    } else {
        ""
    };
    match running_here(holder) {
        Some((program, false)) => {
            return Error::Locked(format!(
                "{}: that process is running on this machine ({program}), so the lock is not abandoned; wait for it to end{}",
                holder.describe(),
                if wait.is_zero() {
                    " (--lock-wait SECONDS waits for it)"
                } else {
                    ", or wait longer with --lock-wait SECONDS"
                }
            ))
        }
        Some((program, true)) => {
            return Error::Locked(format!(
                "{}: that process is stopped on this machine ({program}: Ctrl-Z or SIGSTOP); let it go on (fg, or kill -CONT), or, unrefreshed, its lock is taken as abandoned after {}",
                holder.describe(),
                human(timing.stale)
            ))
        }
        None => {}
    }
    Error::Locked(format!(
        "{}{hint}; this client has watched it unchanged for {} and takes it as abandoned after {} (cairn break-lock removes it, if you know that no cairn uses the repository)",
        holder.describe(),
        human(watched),
        human(timing.stale)
    ))
}

/// The program of `holder`'s process, when it runs on this machine (same machine, boot and PID
/// namespace), is not this process, and started before the lock was taken (a PID used again
/// by a later process is not the holder), with whether it is stopped (Ctrl-Z, SIGSTOP).
fn running_here(holder: &LockInfo) -> Option<(String, bool)> {
    if holder.pid == 0
        || holder.pid == std::process::id()
        || !host::HostId::current().shares_pids_with(&holder.host_id)
    {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", holder.pid)).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let stopped = fields.first().is_some_and(|s| *s == "T" || *s == "t");
    let ticks: u64 = fields.get(19)?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|h| *h > 0)? as u64;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // Both times are this machine's clock; a second of slack for the rounding of each.
    (boot + ticks / hz <= holder.created + 2)
        .then(|| (format!("pid {}, {}", holder.pid, printable(comm)), stopped))
}

/// An exclusive lock just taken, read back before it is used: a command paused while it took
/// the lock (long enough for another client to judge the object abandoned and remove it)
/// would otherwise go on to delete.
fn read_back_taken(store: &dyn Store, held: &Held) -> Result<()> {
    if let Err(e) = refresh::read_back(store, held) {
        let why = match e {
            RefreshError::Taken(r) => r,
            // Ours, perhaps: removed as a lock that failed.
            RefreshError::Failed(r) => {
                let _ = store.delete(&held.name);
                r
            }
        };
        return Err(Error::Locked(format!(
            "{why} while the lock was being taken; nothing was changed"
        )));
    }
    Ok(())
}

/// Waits before the next try to take the lock: `backoff` and a random share of it again, never
/// past `deadline`, and no longer once `give_up` is set (then the error). Returns the next
/// try's backoff.
fn back_off(backoff: Duration, deadline: Instant, give_up: &AtomicBool) -> Result<Duration> {
    let jitter = Duration::from_millis(rand::random::<u64>() % (backoff.as_millis() as u64 + 1));
    let remaining = deadline.saturating_duration_since(Instant::now());
    let until = Instant::now() + (backoff + jitter).min(remaining);
    while !give_up.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20)),
        );
    }
    if give_up.load(Ordering::SeqCst) {
        return Err(Error::Locked(
            "stopped waiting for the repository lock".into(),
        ));
    }
    Ok((backoff * 2).min(Duration::from_secs(5)))
}

/// Whether the command may go on holding its lock. Set by the refresher (or a commit-time
/// verification) when the lock vanished, changed, or could not be refreshed.
#[derive(Default)]
pub struct LockHealth {
    lost: AtomicBool,
    /// Someone else removed or replaced our object: it is not ours to delete any more.
    taken: AtomicBool,
    reason: Mutex<String>,
}

impl LockHealth {
    fn fail(&self, reason: &str, taken: bool) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if !self.lost.load(Ordering::SeqCst) {
            *r = reason.to_string();
        }
        if taken {
            self.taken.store(true, Ordering::SeqCst);
        }
        self.lost.store(true, Ordering::SeqCst);
    }

    /// `Err(Locked)` once the lock is lost.
    pub fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            let r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            return Err(Error::Locked(format!(
                "{r}; stopping, nothing more is committed"
            )));
        }
        Ok(())
    }
}

/// What [`Lock::confirm`] found after a commit.
#[derive(Debug)]
pub enum Confirmed {
    /// The lock is exactly ours, and so was throughout: nobody who removed it can have acted
    /// on the repository since before the commit.
    Held,
    /// Lost (or could not be read back): the reason.
    Lost(String),
}

/// For [`Lock::acquire`]: never set, so the whole `wait` is waited out.
pub static KEEP_WAITING: AtomicBool = AtomicBool::new(false);

/// A held lock. Dropping it stops the refresher and removes the lock object.
pub struct Lock {
    store: Arc<dyn Store>,
    kind: LockKind,
    timing: LockTiming,
    held: Arc<Mutex<Held>>,
    health: Arc<LockHealth>,
    wake: Arc<(Mutex<Wake>, Condvar)>,
    refresher: Option<JoinHandle<()>>,
}

impl Lock {
    /// Takes a lock of `kind`, waiting up to `wait` for conflicting locks to go away.
    /// `memory` is where this observer keeps what it saw of others' locks (see
    /// [`watch::Watch`]); stale locks removed on the way are described on stderr.
    /// Stops waiting for a conflicting lock as soon as `give_up` is set (the command failed
    /// meanwhile, and will not need the lock); [`KEEP_WAITING`] is never set. The lock's
    /// details are sealed with `seal` once it is filled ([`sealed`]); a conflicting lock whose
    /// details are sealed from us while `seal` is still pending is judged once it is filled.
    #[allow(clippy::too_many_arguments)] // each is a different party's: store, command, client
    pub fn acquire(
        store: Arc<dyn Store>,
        kind: LockKind,
        command: &str,
        wait: Duration,
        memory: Option<PathBuf>,
        timing: LockTiming,
        give_up: &AtomicBool,
        seal: Arc<SealSlot>,
    ) -> Result<Lock> {
        let here = HostId::current();
        let host = crate::util::identity::hostname();
        let user = crate::util::identity::user_name();
        let mut watch = Watch::open(memory);
        let deadline = Instant::now() + wait;
        let mut backoff = Duration::from_millis(50);
        loop {
            let info = LockInfo::ours(kind, command, &here, (&host, &user));
            let name = refresh::new_name();
            let sealing = seal.get();
            let bytes = sealed::encode_from(&info, &name, &seal);
            refresh::write_new(&*store, &name, &bytes)?;
            let written = clock::since_boot();
            match find_conflict(&*store, &name, kind, &timing, &here, &mut watch, sealing) {
                Ok(None) => {
                    let held = Held {
                        name,
                        info,
                        bytes,
                        sealed: sealing.is_some(),
                        seal,
                        written,
                        leftover: None,
                    };
                    if kind == LockKind::Exclusive {
                        read_back_taken(&*store, &held)?;
                    }
                    return Ok(Lock::hold(store, kind, timing, held));
                }
                Ok(Some((holder, watched))) if holder.opaque() && sealing.is_none() => {
                    // Taken while the key was still being opened: the holder's details are
                    // sealed from us for now. Judged again once the key opens, which may show
                    // a holder whose process is gone.
                    let _ = store.delete(&name);
                    if seal.wait(give_up).is_some() {
                        continue;
                    }
                    if give_up.load(Ordering::SeqCst) {
                        return Err(Error::Locked(
                            "stopped waiting for the repository lock".into(),
                        ));
                    }
                    // A command without the key: judged like any other conflict.
                    if Instant::now() >= deadline {
                        return Err(locked_by(&holder, watched, wait, &timing));
                    }
                }
                Ok(Some((holder, watched))) => {
                    let _ = store.delete(&name);
                    if Instant::now() >= deadline {
                        return Err(locked_by(&holder, watched, wait, &timing));
                    }
                }
                Err(e) => {
                    let _ = store.delete(&name);
                    return Err(e);
                }
            }
            backoff = back_off(backoff, deadline, give_up)?;
        }
    }

    fn hold(store: Arc<dyn Store>, kind: LockKind, timing: LockTiming, held: Held) -> Lock {
        let health = Arc::new(LockHealth::default());
        let held = Arc::new(Mutex::new(held));
        let wake = Arc::new((Mutex::new(Wake::default()), Condvar::new()));
        let refresher = refresh::spawn_refresher(
            store.clone(),
            held.clone(),
            timing,
            health.clone(),
            wake.clone(),
        );
        Lock {
            store,
            kind,
            timing,
            held,
            health,
            wake,
            refresher: Some(refresher),
        }
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The flag that long work polls (through [`crate::repo::signals::Interrupt`]).
    pub fn health(&self) -> Arc<LockHealth> {
        self.health.clone()
    }

    /// `Err(Locked)` once the lock is lost.
    pub fn check(&self) -> Result<()> {
        self.health.check()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Right before a commit: the lock must still be exactly ours. It is read back; and if it
    /// was written a refresh interval ago or more, it is refreshed too, so that no other
    /// client can judge it abandoned for a whole stale interval from here.
    pub fn verify(&self) -> Result<()> {
        self.health.check()?;
        let mut held = self.held();
        let recent = clock::since_boot().saturating_sub(held.written) < self.timing.refresh;
        let result = if recent {
            refresh::read_back(&*self.store, &held)
        } else {
            refresh::rotate(&*self.store, &mut held)
        };
        match result {
            Ok(()) => Ok(()),
            Err(RefreshError::Taken(r)) => {
                self.health.fail(&r, true);
                self.health.check()
            }
            Err(RefreshError::Failed(r)) => {
                self.health.fail(&r, false);
                self.health.check()
            }
        }
    }

    /// Right after a commit: whether the lock is still exactly ours. A lock is never written
    /// again once lost, so if it is ours now it was ours when the commit landed, and no client
    /// that removed it can have been deleting since before. A store that cannot say counts as
    /// lost (the caller then checks what the commit relies on).
    pub fn confirm(&self) -> Confirmed {
        if let Err(e) = self.health.check() {
            return Confirmed::Lost(e.to_string());
        }
        let held = self.held();
        match refresh::read_back(&*self.store, &held) {
            Ok(()) => Confirmed::Held,
            Err(RefreshError::Taken(r)) => {
                self.health.fail(&r, true);
                Confirmed::Lost(r)
            }
            Err(RefreshError::Failed(r)) => Confirmed::Lost(r),
        }
    }

    /// Once the key has opened (the lock was taken while it was derived): has the refresher
    /// rewrite the lock with its details sealed, if it was written without them, unless the
    /// command ends first ([`LockTiming::seal_after`]).
    pub fn seal_soon(&self) {
        let held = self.held();
        if held.sealed || held.seal.get().is_none() {
            return;
        }
        drop(held);
        let (m, cv) = &*self.wake;
        m.lock().unwrap_or_else(|p| p.into_inner()).now = true;
        cv.notify_all();
    }

    /// The lock object's current name.
    pub fn name(&self) -> String {
        self.held().name.clone()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.wake;
            m.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            cv.notify_all();
        }
        if let Some(h) = self.refresher.take() {
            let _ = h.join();
        }
        let held = self.held();
        if let Some(left) = &held.leftover {
            let _ = self.store.delete(left);
        }
        if !self.health.taken.load(Ordering::SeqCst) {
            let _ = self.store.delete(&held.name);
        }
    }
}

/// A duration as people say it: "42 s", "30 min", "24 h".
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", s / 60)
    } else {
        format!("{} h", s / 3600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    /// The seal every client of these tests holds (one repository).
    fn seal() -> LockSeal {
        LockSeal::new(zeroize::Zeroizing::new([9; 32]))
    }

    fn take(store: &Arc<dyn Store>, kind: LockKind, cmd: &str) -> Result<Lock> {
        take_timed(store, kind, cmd, LockTiming::default())
    }

    /// Refreshes due at once (and not again by the refresher during a test).
    fn quick() -> LockTiming {
        LockTiming {
            refresh: Duration::from_millis(1),
            ..LockTiming::default()
        }
    }

    fn take_timed(
        store: &Arc<dyn Store>,
        kind: LockKind,
        cmd: &str,
        timing: LockTiming,
    ) -> Result<Lock> {
        Lock::acquire(
            store.clone(),
            kind,
            cmd,
            Duration::ZERO,
            None,
            timing,
            &KEEP_WAITING,
            SealSlot::with(seal()),
        )
    }

    fn other(host_id: HostId, pid: u32, refreshed: u64) -> LockInfo {
        LockInfo {
            kind: LockKind::Exclusive,
            host: crate::util::identity::hostname(),
            pid,
            user: "x".into(),
            command: "compact".into(),
            created: refreshed,
            refreshed,
            host_id,
            generation: 0,
            shown: None,
            keyless: false,
        }
    }

    fn plant(store: &Arc<dyn Store>, name: &str, info: &LockInfo) {
        store
            .put(name, &sealed::encode(info, name, Some(&seal())))
            .unwrap();
    }

    const DEAD_PID: u32 = 0x7fff_fff0;

    #[test]
    fn shared_locks_coexist_and_exclusive_is_refused() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let a = take(&store, LockKind::Shared, "create").unwrap();
        let b = take(&store, LockKind::Shared, "list").unwrap();
        let err = take(&store, LockKind::Exclusive, "compact").err().unwrap();
        assert!(err.to_string().contains("shared lock held by"), "{err}");
        assert!(err.to_string().contains("break-lock"), "{err}");
        drop(a);
        drop(b);
        assert!(store.list("locks").unwrap().is_empty());
        let x = take(&store, LockKind::Exclusive, "compact").unwrap();
        assert!(take(&store, LockKind::Shared, "create").is_err());
        drop(x);
    }

    #[test]
    fn a_dead_process_of_this_machine_boot_and_pid_namespace_is_taken_over() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let here = HostId::current();
        if here.machine.is_empty() {
            crate::say!("skipped: this machine has no machine id");
            return;
        }
        plant(
            &store,
            "locks/dead",
            &other(here, DEAD_PID, clock::now_secs()),
        );
        let l = take(&store, LockKind::Exclusive, "prune").unwrap();
        assert!(
            store.get("locks/dead", None).is_err(),
            "the stale lock was removed"
        );
        // Its holder is gone for certain: no record of a broken lock, no grace.
        assert!(store.list("broken").unwrap().is_empty());
        drop(l);
    }

    #[test]
    fn a_dead_pid_means_nothing_across_pid_namespaces_boots_or_machines() {
        // The same hostname (a container with --network host) and a PID that is dead here:
        // the holder lives in another PID namespace, and may be running.
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let here = HostId::current();
        for (i, elsewhere) in [
            HostId {
                pid_ns: "pid:[1]".into(),
                ..here.clone()
            },
            HostId {
                boot: "another-boot".into(),
                ..here.clone()
            },
            HostId {
                machine: "another-machine".into(),
                ..here.clone()
            },
            HostId::default(),
        ]
        .into_iter()
        .enumerate()
        {
            let name = format!("locks/c{i}");
            plant(
                &store,
                &name,
                &other(elsewhere, DEAD_PID, clock::now_secs()),
            );
            assert!(take(&store, LockKind::Shared, "list").is_err(), "case {i}");
            store.delete(&name).unwrap();
        }
    }

    #[test]
    fn timestamps_from_another_clock_decide_nothing() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let elsewhere = HostId {
            machine: "m2".into(),
            ..HostId::default()
        };
        let now = clock::now_secs();
        // Refreshed an hour "ago" by a clock that runs behind, and a year "ahead": both live.
        for refreshed in [now - 3600, now + 365 * 86400] {
            plant(
                &store,
                "locks/skewed",
                &other(elsewhere.clone(), 1, refreshed),
            );
            assert!(
                take(&store, LockKind::Shared, "list").is_err(),
                "{refreshed}"
            );
        }
    }

    #[test]
    fn a_lock_watched_unchanged_for_the_stale_interval_is_stale_and_a_refreshed_one_never() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let timing = LockTiming {
            refresh: Duration::from_millis(10),
            stale: Duration::from_millis(200),
            ..LockTiming::default()
        };
        let here = HostId::current();
        let elsewhere = HostId {
            machine: "m2".into(),
            ..HostId::default()
        };
        let mut abandoned = other(elsewhere.clone(), 1, 0);
        let mut live = other(elsewhere, 2, 0);
        live.kind = LockKind::Shared;
        plant(&store, "locks/abandoned", &abandoned);
        plant(&store, "locks/live", &live);
        let mut watch = Watch::open(None);
        // The live lock's holder refreshes it every 20 ms, on this thread's clock.
        let step = Duration::from_millis(20);
        let started = clock::since_boot();
        let mut removed_at = None;
        for _ in 0..30 {
            let conflict = find_conflict(
                &*store,
                "locks/own",
                LockKind::Exclusive,
                &timing,
                &here,
                &mut watch,
                Some(&seal()),
            )
            .unwrap();
            assert!(conflict.is_some(), "the live lock always conflicts");
            if removed_at.is_none() && store.get("locks/abandoned", None).is_err() {
                removed_at = Some(clock::since_boot() - started);
            }
            live.generation += 1;
            plant(&store, "locks/live", &live);
            clock::advance(step);
        }
        let at = removed_at.expect("the abandoned lock was removed");
        assert!(at >= Duration::from_millis(200), "removed after {at:?}");
        assert!(store.get("locks/live", None).is_ok());
        // An unreadable object is an exclusive lock until watched out, too.
        abandoned.generation = 9;
        store.put("locks/junk", b"not a lock").unwrap();
        let c = find_conflict(
            &*store,
            "locks/own",
            LockKind::Shared,
            &timing,
            &here,
            &mut watch,
            Some(&seal()),
        )
        .unwrap();
        assert!(c.unwrap().0.describe().contains("unreadable"));
    }

    #[test]
    fn a_removed_lock_fails_verification_and_is_not_recreated() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take(&store, LockKind::Shared, "create").unwrap();
        l.verify().unwrap();
        assert!(matches!(l.confirm(), Confirmed::Held));
        store.delete(&l.name()).unwrap();
        let err = l.verify().err().unwrap().to_string();
        assert!(err.contains("removed by another process"), "{err}");
        assert!(l.check().is_err(), "the command stops");
        assert!(matches!(l.confirm(), Confirmed::Lost(_)));
        // Someone else's lock under that name is not ours to delete.
        let name = l.name();
        store.put(&name, b"theirs").unwrap();
        drop(l);
        assert_eq!(store.get(&name, None).unwrap(), b"theirs");
    }

    #[test]
    fn a_replaced_lock_fails_verification() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take(&store, LockKind::Exclusive, "compact").unwrap();
        store.put(&l.name(), b"{}").unwrap();
        assert!(l.verify().err().unwrap().to_string().contains("replaced"));
    }

    #[test]
    fn a_refresh_that_keeps_failing_stops_the_command() {
        use crate::store::faulty::{Fault, FaultyStore, OpKind, Rule, Selector};
        // Taking the lock is a put and a list; every put after that fails. The lock is older
        // than the refresh interval at once, so that verifying it refreshes it.
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(
            Arc::new(MemStore::new()),
            vec![Rule::new(Selector::From(3), Fault::NoSpace).only(OpKind::Put)],
        ));
        let l = take_timed(&store, LockKind::Shared, "create", quick()).unwrap();
        clock::advance(Duration::from_millis(5));
        let err = l.verify().err().unwrap().to_string();
        assert!(
            err.contains("cannot refresh") && err.contains("no space"),
            "{err}"
        );
        assert!(l.check().is_err());
    }

    #[test]
    fn planted_locks_do_not_reach_the_terminal() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let planted = LockInfo {
            kind: LockKind::Exclusive,
            host: "elsewhere\x1b]0;pwned\x07".into(),
            pid: 1,
            user: "\x1b[2J\u{202e}x".into(),
            command: "compact\r\nerror: fake".into(),
            created: clock::now_secs(),
            refreshed: clock::now_secs(),
            host_id: HostId::default(),
            generation: 0,
            shown: None,
            keyless: false,
        };
        plant(&store, "locks/planted", &planted);
        let err = take(&store, LockKind::Shared, "list")
            .err()
            .unwrap()
            .to_string();
        assert!(
            !err.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{err:?}"
        );
        assert!(err.contains("\\u{1b}") && err.contains("\\r\\n"), "{err}");
    }

    #[test]
    fn waiting_for_a_lock() {
        use crate::store::faulty::FaultyStore;
        let counted = Arc::new(FaultyStore::new(Arc::new(MemStore::new()), vec![]));
        let store: Arc<dyn Store> = counted.clone();
        let held = take(&store, LockKind::Exclusive, "compact").unwrap();
        let before = counted.ops();
        let s2 = store.clone();
        let t = std::thread::spawn(move || {
            Lock::acquire(
                s2,
                LockKind::Shared,
                "create",
                Duration::from_secs(20),
                None,
                LockTiming::default(),
                &KEEP_WAITING,
                SealSlot::with(seal()),
            )
            .map(|_| ())
        });
        // Until the waiter has met the held lock (its own lock written, the locks listed,
        // and a step further).
        while counted.ops() < before + 3 {
            std::thread::yield_now();
        }
        drop(held);
        t.join().unwrap().unwrap();
    }

    /// A refresh writes the lock under a new name, then removes the old object; the lock
    /// keeps working under its new name.
    #[test]
    fn a_refresh_moves_the_lock_to_a_new_object() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take_timed(&store, LockKind::Shared, "create", quick()).unwrap();
        let first = l.name();
        clock::advance(Duration::from_millis(5));
        {
            let mut held = l.held();
            refresh::rotate(&*store, &mut held).ok().unwrap();
        }
        let second = l.name();
        assert_ne!(first, second);
        let names: Vec<String> = store
            .list("locks")
            .unwrap()
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(names, std::slice::from_ref(&second));
        l.verify().unwrap();
        assert!(matches!(l.confirm(), Confirmed::Held));
        drop(l);
        assert!(store.list("locks").unwrap().is_empty());
    }

    /// Paused before its refresh while another client removed the lock: the refresh writes
    /// its new object, finds the old one gone, and removes the new one again. Nothing of the
    /// lock is left, and the command stops (the old in-place rewrite recreated it).
    #[test]
    fn a_refresh_after_the_lock_was_removed_leaves_no_lock() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take_timed(&store, LockKind::Shared, "create", quick()).unwrap();
        store.delete(&l.name()).unwrap();
        clock::advance(Duration::from_millis(5));
        assert!(l.verify().is_err());
        assert!(store.list("locks").unwrap().is_empty(), "recreated");
        assert!(l.check().is_err());
    }

    /// Whoever removes a stale lock lists again: a holder that wrote its next object just
    /// before the removal is alive after all, and its new object is a conflict.
    #[test]
    fn a_remover_sees_the_lock_its_holder_wrote_meanwhile() {
        /// Plays the holder's refresh racing the removal: deleting `locks/old` writes
        /// `locks/new` first.
        struct Racing(Arc<dyn Store>);
        impl crate::store::wrapper::Wrapper for Racing {
            fn inner(&self) -> &Arc<dyn Store> {
                &self.0
            }

            fn get_into(
                &self,
                name: &str,
                range: Option<crate::store::ByteRange>,
                buf: &mut Vec<u8>,
            ) -> crate::store::StoreResult<()> {
                self.inner().get_into(name, range, buf)
            }
            fn put_releasing(
                &self,
                n: &str,
                d: Vec<u8>,
                r: crate::store::Release<'_>,
            ) -> crate::store::StoreResult<()> {
                self.0.put_releasing(n, d, r)
            }
            fn delete(&self, n: &str) -> crate::store::StoreResult<()> {
                if n == "locks/old" {
                    let bytes = self.0.get(n, None)?;
                    let sealed::Read::Open(mut info) =
                        sealed::decode(&bytes, n, Some(&seal()), &HostId::default())
                    else {
                        panic!("our own planted lock opens");
                    };
                    info.generation += 1;
                    self.0.put(
                        "locks/new",
                        &sealed::encode(&info, "locks/new", Some(&seal())),
                    )?;
                }
                self.0.delete(n)
            }
        }
        let store = Racing(Arc::new(MemStore::new()));
        let elsewhere = HostId {
            machine: "m2".into(),
            ..HostId::default()
        };
        store
            .put(
                "locks/old",
                &sealed::encode(&other(elsewhere, 1, 0), "locks/old", Some(&seal())),
            )
            .unwrap();
        let timing = LockTiming {
            refresh: Duration::from_millis(1),
            stale: Duration::from_millis(3),
            ..LockTiming::default()
        };
        let mut watch = Watch::open(None);
        let here = HostId::current();
        let mut look = || {
            find_conflict(
                &store,
                "locks/own",
                LockKind::Exclusive,
                &timing,
                &here,
                &mut watch,
                Some(&seal()),
            )
            .unwrap()
        };
        assert!(look().is_some(), "first sighting");
        clock::advance(Duration::from_millis(10));
        assert!(look().is_some(), "the holder's new lock is a conflict");
        assert!(store.get("locks/old", None).is_err(), "the stale one went");
        assert!(
            store.get("broken/old", None).is_ok(),
            "with a record of its removal"
        );
    }

    #[test]
    fn break_lock_removes_every_lock() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        plant(&store, "locks/a", &other(HostId::default(), 1, 0));
        store.put("locks/b", b"junk").unwrap();
        let removed = break_all(&*store).unwrap();
        assert_eq!(removed.len(), 2);
        // Without the key: the kind of a sealed lock, and what the junk stands for.
        assert!(
            removed[0]
                .1
                .describe()
                .starts_with("an exclusive lock a, its holder sealed"),
            "{}",
            removed[0].1.describe()
        );
        assert!(removed[1].1.describe().contains("unreadable"));
        assert!(store.list("locks").unwrap().is_empty());
        assert_eq!(
            store.list("broken").unwrap().len(),
            2,
            "each removal recorded"
        );
    }
}
