//! Repository locks: objects under `locks/`, and the rules that make them safe between
//! clients that share no clock, no PID namespace and perhaps not even a hostname.
//!
//! Protocol (correct on stores without create-only writes, such as some S3 servers):
//! 1. write our own lock object under a fresh random name;
//! 2. list `locks/` and read the others; stale ones (see below) are removed and ignored;
//! 3. if any live lock conflicts with ours (anything vs exclusive), delete ours, wait a random
//!    while and start again, until `--lock-wait` runs out.
//!
//! Two contenders can never both proceed: each writes before it lists, so whichever lists
//! second sees the other's lock and backs off (both may back off; the random wait breaks the
//! tie).
//!
//! A holder rewrites its lock every refresh interval with a new generation number, after
//! reading it back to make sure it is still exactly what it wrote; a lock that vanished or
//! changed, or a refresh that keeps failing, stops the command ([`LockHealth`]). Right before
//! a commit the holder does the same synchronously ([`Lock::verify`]).
//!
//! A lock is stale only when (a) its holder shares this process's machine, boot and PID
//! namespace ([`host::HostId`]) and its process is gone, or (b) this observer has watched its
//! contents stay the same for the whole stale interval by its own clock ([`watch::Watch`]).
//! Since a holder rewrites its lock far more often, and verifies it right before it commits,
//! no one can remove the lock of a command that may still commit.

pub mod host;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock;
use crate::error::{Error, Result};
use crate::store::{Store, StoreError};
use host::{process_alive, HostId};
use watch::Watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    Shared,
    Exclusive,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// Incremented at every refresh, so that a refresh always changes the object.
    #[serde(default)]
    pub generation: u64,
}

/// A lock object is a few hundred bytes; anything much bigger is not one (and is not read).
pub const MAX_LOCK_LEN: u64 = 64 * 1024;

pub use crate::text::printable;

impl LockInfo {
    pub fn describe(&self) -> String {
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
            crate::clock::Timestamp {
                secs: self.created as i64,
                nanos: 0
            }
            .display_local()
        )
    }

    /// What stands for a lock object that cannot be read as one: an exclusive lock (refusing
    /// is safe, guessing is not), judged stale only by watching it.
    fn unreadable(what: String) -> Self {
        Self {
            kind: LockKind::Exclusive,
            host: "?".into(),
            pid: 0,
            user: "?".into(),
            command: what,
            created: 0,
            refreshed: 0,
            host_id: HostId::default(),
            generation: 0,
        }
    }
}

/// Timing of the lock protocol: a refresh every 5 minutes, stale after 30 minutes watched
/// unchanged (the command line may shorten both, for tests: `CAIRN_LOCK_REFRESH_SECS`,
/// `CAIRN_LOCK_STALE_SECS`; the stale interval is always at least three refreshes).
#[derive(Clone, Copy, Debug)]
pub struct LockTiming {
    pub refresh: Duration,
    pub stale: Duration,
}

impl Default for LockTiming {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(300),
            stale: Duration::from_secs(1800),
        }
    }
}

impl LockTiming {
    /// How long a verification ([`Lock::verify`]) still vouches for the lock: a tenth of the
    /// refresh interval (30 seconds by default), far inside the stale interval that another
    /// client must watch the lock unchanged for before it may remove it.
    pub fn fresh_for(&self) -> Duration {
        self.refresh / 10
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
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

/// Our lock object as last written.
struct Held {
    info: LockInfo,
    bytes: Vec<u8>,
}

enum RefreshError {
    /// The object is gone or not ours any more.
    Taken(String),
    /// The store failed; it may work again.
    Failed(String),
}

/// Reads our lock back (it must be exactly what we wrote), then rewrites it one generation on.
fn refresh(
    store: &dyn Store,
    name: &str,
    held: &mut Held,
) -> std::result::Result<(), RefreshError> {
    match store.get_bounded(name, MAX_LOCK_LEN) {
        Ok(b) if b == held.bytes => {}
        Ok(_) => {
            return Err(RefreshError::Taken(
                "our repository lock was replaced by another process".into(),
            ))
        }
        Err(StoreError::NotFound { .. }) => {
            return Err(RefreshError::Taken(
                "our repository lock was removed by another process (it judged it abandoned, or someone ran cairn break-lock)".into(),
            ))
        }
        Err(StoreError::TooLarge { .. }) => {
            return Err(RefreshError::Taken(
                "our repository lock was replaced by another process".into(),
            ))
        }
        Err(e) => return Err(RefreshError::Failed(format!("cannot read our repository lock back: {e}"))),
    }
    let mut info = held.info.clone();
    info.generation += 1;
    info.refreshed = clock::now_secs();
    let bytes = serde_json::to_vec(&info)
        .map_err(|e| RefreshError::Failed(format!("cannot encode our lock: {e}")))?;
    store
        .put(name, &bytes)
        .map_err(|e| RefreshError::Failed(format!("cannot refresh our repository lock: {e}")))?;
    *held = Held { info, bytes };
    Ok(())
}

/// For [`Lock::acquire`]: never set, so the whole `wait` is waited out.
pub static KEEP_WAITING: AtomicBool = AtomicBool::new(false);

/// A held lock. Dropping it stops the refresher and removes the lock object.
pub struct Lock {
    store: Arc<dyn Store>,
    name: String,
    kind: LockKind,
    held: Arc<Mutex<Held>>,
    health: Arc<LockHealth>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    refresher: Option<JoinHandle<()>>,
}

impl Lock {
    /// Takes a lock of `kind`, waiting up to `wait` for conflicting locks to go away.
    /// `memory` is where this observer keeps what it saw of others' locks (see
    /// [`watch::Watch`]); stale locks removed on the way are described in `notes`.
    /// Stops waiting for a conflicting lock as soon as `give_up` is set (the command failed
    /// meanwhile, and will not need the lock); [`KEEP_WAITING`] is never set.
    pub fn acquire(
        store: Arc<dyn Store>,
        kind: LockKind,
        command: &str,
        wait: Duration,
        memory: Option<PathBuf>,
        timing: LockTiming,
        give_up: &AtomicBool,
    ) -> Result<Lock> {
        let here = HostId::current();
        let host = hostname();
        let user = host::user_name();
        let mut watch = Watch::open(memory);
        let deadline = Instant::now() + wait;
        let mut backoff = Duration::from_millis(50);
        loop {
            let t = clock::now_secs();
            let info = LockInfo {
                kind,
                host: host.clone(),
                pid: std::process::id(),
                user: user.clone(),
                command: command.to_string(),
                created: t,
                refreshed: t,
                host_id: here.clone(),
                generation: 0,
            };
            let name = format!("locks/{}", hex::encode(rand::random::<[u8; 16]>()));
            let bytes = serde_json::to_vec(&info)
                .map_err(|e| Error::invalid(format!("cannot encode a lock: {e}")))?;
            store.put(&name, &bytes)?;
            match find_conflict(&*store, &name, kind, &timing, &here, &mut watch) {
                Ok(None) => {
                    let health = Arc::new(LockHealth::default());
                    let held = Arc::new(Mutex::new(Held { info, bytes }));
                    let stop = Arc::new((Mutex::new(false), Condvar::new()));
                    let refresher = spawn_refresher(
                        store.clone(),
                        name.clone(),
                        held.clone(),
                        timing,
                        health.clone(),
                        stop.clone(),
                    );
                    return Ok(Lock {
                        store,
                        name,
                        kind,
                        held,
                        health,
                        stop,
                        refresher: Some(refresher),
                    });
                }
                Ok(Some((holder, watched))) => {
                    let _ = store.delete(&name);
                    if Instant::now() >= deadline {
                        let hint = if wait.is_zero() {
                            " (use --lock-wait SECONDS to wait for it)"
                        } else {
                            ""
                        };
                        return Err(Error::Locked(format!(
                            "{}{hint}; this client has watched it unchanged for {} and takes it as abandoned after {} (cairn break-lock removes it, if you know that no cairn uses the repository)",
                            holder.describe(),
                            human(watched),
                            human(timing.stale)
                        )));
                    }
                }
                Err(e) => {
                    let _ = store.delete(&name);
                    return Err(e);
                }
            }
            let jitter =
                Duration::from_millis(rand::random::<u64>() % (backoff.as_millis() as u64 + 1));
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
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The flag that long work polls (through [`crate::signals::Interrupt`]).
    pub fn health(&self) -> Arc<LockHealth> {
        self.health.clone()
    }

    /// `Err(Locked)` once the lock is lost.
    pub fn check(&self) -> Result<()> {
        self.health.check()
    }

    /// Right before a commit: the lock must still be exactly ours, and is refreshed now, so
    /// that no other client can judge it abandoned for a whole stale interval from here.
    pub fn verify(&self) -> Result<()> {
        self.health.check()?;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match refresh(&*self.store, &self.name, &mut held) {
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

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(h) = self.refresher.take() {
            let _ = h.join();
        }
        if !self.health.taken.load(Ordering::SeqCst) {
            let _ = self.store.delete(&self.name);
        }
    }
}

/// Attempts per refresh before a failing store stops the command.
const REFRESH_ATTEMPTS: u32 = 3;

fn spawn_refresher(
    store: Arc<dyn Store>,
    name: String,
    held: Arc<Mutex<Held>>,
    timing: LockTiming,
    health: Arc<LockHealth>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) -> JoinHandle<()> {
    let stopped = move |wait: Duration| -> bool {
        let (m, cv) = &*stop;
        let guard = m.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = cv
            .wait_timeout_while(guard, wait, |stopped| !*stopped)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    };
    std::thread::spawn(move || loop {
        if stopped(timing.refresh) {
            return;
        }
        let mut attempt = 1;
        loop {
            let result = {
                let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
                refresh(&*store, &name, &mut h)
            };
            match result {
                Ok(()) => break,
                Err(RefreshError::Taken(r)) => {
                    health.fail(&r, true);
                    return;
                }
                Err(RefreshError::Failed(r)) if attempt >= REFRESH_ATTEMPTS => {
                    health.fail(&r, false);
                    return;
                }
                Err(RefreshError::Failed(_)) => {
                    attempt += 1;
                    if stopped(timing.refresh / 10) {
                        return;
                    }
                }
            }
        }
    })
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", s / 60)
    } else {
        format!("{} h", s / 3600)
    }
}

/// The first live lock (other than `own`) that conflicts with a lock of `kind`, with how long
/// this observer has watched it unchanged. Stale locks found on the way are removed (and said
/// so on stderr).
fn find_conflict(
    store: &dyn Store,
    own: &str,
    kind: LockKind,
    timing: &LockTiming,
    here: &HostId,
    watch: &mut Watch,
) -> Result<Option<(LockInfo, Duration)>> {
    let listing = store.list("locks")?;
    let mut conflict = None;
    let mut removed = Vec::new();
    for obj in &listing {
        if obj.name == own {
            continue;
        }
        let (info, contents) = match store.get_bounded(&obj.name, MAX_LOCK_LEN) {
            Ok(bytes) => match serde_json::from_slice::<LockInfo>(&bytes) {
                Ok(i) => (i, bytes),
                Err(_) => (
                    LockInfo::unreadable(format!(
                        "an unreadable lock object {} (remove it with cairn break-lock if no cairn runs)",
                        obj.name
                    )),
                    bytes,
                ),
            },
            Err(e) if e.is_not_found() => continue,
            Err(StoreError::TooLarge { size, .. }) => (
                LockInfo::unreadable(format!(
                    "a lock object {} of {size} bytes, too large to be one (remove it with cairn break-lock if no cairn runs)",
                    obj.name
                )),
                format!("{size} bytes").into_bytes(),
            ),
            Err(e) => return Err(e.into()),
        };
        let watched = watch.unchanged_for(&obj.name, &contents);
        let why = if info.host_id.shares_pids_with(here) && !process_alive(info.pid) {
            Some(format!("its process {} is gone", info.pid))
        } else if watched >= timing.stale {
            Some(format!("unchanged for {} while watched", human(watched)))
        } else {
            None
        };
        if let Some(why) = why {
            match store.delete(&obj.name) {
                Ok(()) => eprintln!("note: removed a stale lock ({why}): {}", info.describe()),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            // Forgotten: a new lock under the same name is watched from the start.
            removed.push(obj.name.clone());
            continue;
        }
        let conflicts = kind == LockKind::Exclusive || info.kind == LockKind::Exclusive;
        if conflicts && conflict.is_none() {
            conflict = Some((info, watched));
        }
    }
    let present: Vec<String> = listing
        .into_iter()
        .map(|o| o.name)
        .filter(|n| !removed.contains(n))
        .collect();
    watch.save(&present);
    Ok(conflict)
}

/// Every lock object with its contents (when readable).
pub fn list_locks(store: &dyn Store) -> Result<Vec<(String, Option<LockInfo>)>> {
    let mut out = Vec::new();
    for obj in store.list("locks")? {
        let info = store
            .get_bounded(&obj.name, MAX_LOCK_LEN)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        out.push((obj.name, info));
    }
    Ok(out)
}

/// `cairn break-lock`: removes every lock object, whoever holds it. Returns what was removed.
pub fn break_all(store: &dyn Store) -> Result<Vec<(String, Option<LockInfo>)>> {
    let locks = list_locks(store)?;
    for (name, _) in &locks {
        match store.delete(name) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(locks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    fn take(store: &Arc<dyn Store>, kind: LockKind, cmd: &str) -> Result<Lock> {
        Lock::acquire(
            store.clone(),
            kind,
            cmd,
            Duration::ZERO,
            None,
            LockTiming::default(),
            &KEEP_WAITING,
        )
    }

    fn other(host_id: HostId, pid: u32, refreshed: u64) -> LockInfo {
        LockInfo {
            kind: LockKind::Exclusive,
            host: hostname(),
            pid,
            user: "x".into(),
            command: "compact".into(),
            created: refreshed,
            refreshed,
            host_id,
            generation: 0,
        }
    }

    fn plant(store: &Arc<dyn Store>, name: &str, info: &LockInfo) {
        store.put(name, &serde_json::to_vec(info).unwrap()).unwrap();
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
            eprintln!("skipped: this machine has no machine id");
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
        let started = Instant::now();
        let mut removed_at = None;
        while started.elapsed() < Duration::from_millis(600) {
            let conflict = find_conflict(
                &*store,
                "locks/own",
                LockKind::Exclusive,
                &timing,
                &here,
                &mut watch,
            )
            .unwrap();
            assert!(conflict.is_some(), "the live lock always conflicts");
            if removed_at.is_none() && store.get("locks/abandoned", None).is_err() {
                removed_at = Some(started.elapsed());
            }
            live.generation += 1;
            plant(&store, "locks/live", &live);
            std::thread::sleep(Duration::from_millis(20));
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
        )
        .unwrap();
        assert!(c.unwrap().0.command.contains("unreadable"));
    }

    #[test]
    fn a_removed_lock_fails_verification_and_is_not_recreated() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take(&store, LockKind::Shared, "create").unwrap();
        l.verify().unwrap();
        store.delete(l.name()).unwrap();
        let err = l.verify().err().unwrap().to_string();
        assert!(err.contains("removed by another process"), "{err}");
        assert!(l.check().is_err(), "the command stops");
        // Someone else's lock under that name is not ours to delete.
        let name = l.name().to_string();
        store.put(&name, b"theirs").unwrap();
        drop(l);
        assert_eq!(store.get(&name, None).unwrap(), b"theirs");
    }

    #[test]
    fn a_replaced_lock_fails_verification() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let l = take(&store, LockKind::Exclusive, "compact").unwrap();
        store.put(l.name(), b"{}").unwrap();
        assert!(l.verify().err().unwrap().to_string().contains("replaced"));
    }

    #[test]
    fn a_refresh_that_keeps_failing_stops_the_command() {
        use crate::store::faulty::{Fault, FaultyStore, OpKind, Rule, Selector};
        // Taking the lock is a put and a list; every put after that fails.
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(
            Arc::new(MemStore::new()),
            vec![Rule::new(Selector::From(3), Fault::NoSpace).only(OpKind::Put)],
        ));
        let l = take(&store, LockKind::Shared, "create").unwrap();
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
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let held = take(&store, LockKind::Exclusive, "compact").unwrap();
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
            )
            .map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn break_lock_removes_every_lock() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        plant(&store, "locks/a", &other(HostId::default(), 1, 0));
        store.put("locks/b", b"junk").unwrap();
        let removed = break_all(&*store).unwrap();
        assert_eq!(removed.len(), 2);
        assert!(removed[0].1.is_some() && removed[1].1.is_none());
        assert!(store.list("locks").unwrap().is_empty());
    }
}
