//! Repository locks: objects under `locks/`.
//!
//! Protocol (correct on stores without create-only writes, such as some S3 servers):
//! 1. write our own lock object under a fresh random name;
//! 2. list `locks/` and read the others; stale ones (see below) are removed and ignored;
//! 3. if any live lock conflicts with ours (anything vs exclusive), delete ours, wait a random
//!    while and start again, until `--lock-wait` runs out.
//!
//! Two contenders can never both proceed: each writes before it lists, so whichever lists
//! second sees the other's lock and backs off (both may back off; the random wait breaks the
//! tie). A lock is refreshed every few minutes by a background thread; it is stale when it was
//! not refreshed for 30 minutes, or when it belongs to this host and its process is gone. If
//! our own lock disappears (someone judged it stale), the command is told to abort.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{Store, StoreError};

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
    /// Seconds since the epoch.
    pub created: u64,
    pub refreshed: u64,
}

/// A lock object is a few hundred bytes; anything much bigger is not one (and is not read).
pub const MAX_LOCK_LEN: u64 = 64 * 1024;

/// `s` with control characters (and the invisible ones that reorder text) escaped, so that a
/// planted lock cannot send escape sequences to the terminal or disguise what it says.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let hidden = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || hidden {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

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
            crate::archive::item::Timestamp {
                secs: self.created as i64,
                nanos: 0
            }
            .display_local()
        )
    }
}

/// Timing of the lock protocol; the defaults can be shortened for tests through
/// `CAIRN_LOCK_REFRESH_SECS` and `CAIRN_LOCK_STALE_SECS`.
#[derive(Clone, Copy, Debug)]
pub struct LockTiming {
    pub refresh: Duration,
    pub stale: Duration,
}

impl LockTiming {
    pub fn from_env() -> Self {
        let secs = |var: &str, default: u64| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(default))
        };
        Self {
            refresh: secs("CAIRN_LOCK_REFRESH_SECS", 300),
            stale: secs("CAIRN_LOCK_STALE_SECS", 1800),
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

fn process_alive(pid: u32) -> bool {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        // EPERM: it exists but belongs to someone else.
        Err(_) => true,
    }
}

/// Whether a lock is stale: not refreshed for `stale`, or of a dead process on this host, or
/// claiming a refresh further in the future than a lock lives (no clock is that far ahead;
/// such a lock would otherwise never go stale: a planted one would lock the repository for
/// good).
pub fn is_stale(info: &LockInfo, timing: &LockTiming, host: &str) -> bool {
    let now = now_secs();
    let age = now.saturating_sub(info.refreshed);
    let ahead = info.refreshed.saturating_sub(now);
    age > timing.stale.as_secs()
        || ahead > timing.stale.as_secs()
        || (info.host == host && !process_alive(info.pid))
}

/// A held lock. Dropping it stops the refresher and removes the lock object.
pub struct Lock {
    store: Arc<dyn Store>,
    name: String,
    lost: Arc<AtomicBool>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    refresher: Option<JoinHandle<()>>,
}

impl Lock {
    /// Takes a lock of `kind`, waiting up to `wait` for conflicting locks to go away.
    pub fn acquire(
        store: Arc<dyn Store>,
        kind: LockKind,
        command: &str,
        wait: Duration,
    ) -> Result<Lock> {
        let timing = LockTiming::from_env();
        let host = hostname();
        let user = std::env::var("USER").unwrap_or_default();
        let deadline = Instant::now() + wait;
        let mut backoff = Duration::from_millis(50);
        loop {
            let t = now_secs();
            let info = LockInfo {
                kind,
                host: host.clone(),
                pid: std::process::id(),
                user: user.clone(),
                command: command.to_string(),
                created: t,
                refreshed: t,
            };
            let name = format!("locks/{}", hex::encode(rand::random::<[u8; 16]>()));
            store.put(&name, &serde_json::to_vec(&info).unwrap_or_default())?;
            match find_conflict(&*store, &name, kind, &timing, &host) {
                Ok(None) => {
                    let lost = Arc::new(AtomicBool::new(false));
                    let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
                    let refresher = spawn_refresher(
                        store.clone(),
                        name.clone(),
                        info,
                        timing,
                        lost.clone(),
                        stop.clone(),
                    );
                    return Ok(Lock {
                        store,
                        name,
                        lost,
                        stop,
                        refresher: Some(refresher),
                    });
                }
                Ok(Some(holder)) => {
                    let _ = store.delete(&name);
                    if Instant::now() >= deadline {
                        let hint = if wait.is_zero() {
                            " (use --lock-wait SECONDS to wait for it)"
                        } else {
                            ""
                        };
                        return Err(Error::Locked(format!("{}{hint}", holder.describe())));
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
            std::thread::sleep((backoff + jitter).min(remaining));
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Set when our lock object vanished: the command must stop.
    pub fn lost_flag(&self) -> Arc<AtomicBool> {
        self.lost.clone()
    }

    pub fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::Locked(
                "our repository lock was removed by another process; aborting".into(),
            ));
        }
        Ok(())
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
        if !self.lost.load(Ordering::SeqCst) {
            let _ = self.store.delete(&self.name);
        }
    }
}

fn spawn_refresher(
    store: Arc<dyn Store>,
    name: String,
    mut info: LockInfo,
    timing: LockTiming,
    lost: Arc<AtomicBool>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
) -> JoinHandle<()> {
    std::thread::spawn(move || loop {
        let (m, cv) = &*stop;
        let guard = m.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = cv
            .wait_timeout_while(guard, timing.refresh, |stopped| !*stopped)
            .unwrap_or_else(|p| p.into_inner());
        if *guard {
            return;
        }
        drop(guard);
        // Never recreate a lock someone removed: that would hide that we lost it.
        match store.info(&name) {
            Err(e) if e.is_not_found() => {
                lost.store(true, Ordering::SeqCst);
                return;
            }
            _ => {}
        }
        info.refreshed = now_secs();
        let _ = store.put(&name, &serde_json::to_vec(&info).unwrap_or_default());
    })
}

/// The first live lock (other than `own`) that conflicts with a lock of `kind`. Stale locks
/// found on the way are removed.
fn find_conflict(
    store: &dyn Store,
    own: &str,
    kind: LockKind,
    timing: &LockTiming,
    host: &str,
) -> Result<Option<LockInfo>> {
    for obj in store.list("locks")? {
        if obj.name == own {
            continue;
        }
        let info: LockInfo = match store.get_bounded(&obj.name, MAX_LOCK_LEN) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(i) => i,
                // An unreadable lock object (damaged, or from a newer cairn) is respected as an
                // exclusive lock: refusing is safe, guessing is not.
                Err(_) => LockInfo {
                    kind: LockKind::Exclusive,
                    host: "?".into(),
                    pid: 0,
                    user: "?".into(),
                    command: format!(
                        "an unreadable lock object {} (remove it if no cairn runs)",
                        obj.name
                    ),
                    created: 0,
                    refreshed: now_secs(),
                },
            },
            Err(e) if e.is_not_found() => continue,
            Err(StoreError::TooLarge { size, .. }) => LockInfo {
                kind: LockKind::Exclusive,
                host: "?".into(),
                pid: 0,
                user: "?".into(),
                command: format!(
                    "a lock object {} of {size} bytes, too large to be one (remove it if no cairn runs)",
                    obj.name
                ),
                created: 0,
                refreshed: now_secs(),
            },
            Err(e) => return Err(e.into()),
        };
        if is_stale(&info, timing, host) {
            let _ = store.delete(&obj.name);
            continue;
        }
        if kind == LockKind::Exclusive || info.kind == LockKind::Exclusive {
            return Ok(Some(info));
        }
    }
    Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn shared_locks_coexist_and_exclusive_is_refused() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let a = Lock::acquire(store.clone(), LockKind::Shared, "create", Duration::ZERO).unwrap();
        let b = Lock::acquire(store.clone(), LockKind::Shared, "list", Duration::ZERO).unwrap();
        let err = Lock::acquire(
            store.clone(),
            LockKind::Exclusive,
            "compact",
            Duration::ZERO,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("shared lock held by"), "{err}");
        drop(a);
        drop(b);
        assert!(store.list("locks").unwrap().is_empty());
        let x = Lock::acquire(
            store.clone(),
            LockKind::Exclusive,
            "compact",
            Duration::ZERO,
        )
        .unwrap();
        assert!(Lock::acquire(store.clone(), LockKind::Shared, "create", Duration::ZERO).is_err());
        drop(x);
    }

    #[test]
    fn a_lock_of_a_dead_process_is_taken_over() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let dead = LockInfo {
            kind: LockKind::Exclusive,
            host: hostname(),
            pid: 0x7fff_fff0,
            user: "x".into(),
            command: "compact".into(),
            created: now_secs(),
            refreshed: now_secs(),
        };
        store
            .put("locks/dead", &serde_json::to_vec(&dead).unwrap())
            .unwrap();
        let l = Lock::acquire(store.clone(), LockKind::Exclusive, "prune", Duration::ZERO).unwrap();
        assert!(
            store.get("locks/dead", None).is_err(),
            "the stale lock was removed"
        );
        drop(l);
    }

    #[test]
    fn planted_locks_neither_lock_forever_nor_reach_the_terminal() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let planted = LockInfo {
            kind: LockKind::Exclusive,
            host: "elsewhere\x1b]0;pwned\x07".into(),
            pid: 1,
            user: "\x1b[2J\u{202e}x".into(),
            command: "compact\r\nerror: fake".into(),
            created: now_secs(),
            refreshed: now_secs(),
        };
        let put = |info: &LockInfo| {
            store
                .put("locks/planted", &serde_json::to_vec(info).unwrap())
                .unwrap()
        };
        put(&planted);
        let err = Lock::acquire(store.clone(), LockKind::Shared, "list", Duration::ZERO)
            .err()
            .unwrap()
            .to_string();
        assert!(
            !err.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{err:?}"
        );
        assert!(err.contains("\\u{1b}") && err.contains("\\r\\n"), "{err}");
        // A refresh time a year ahead: never stale before, taken over now.
        put(&LockInfo {
            refreshed: now_secs() + 365 * 86400,
            ..planted.clone()
        });
        let l = Lock::acquire(store.clone(), LockKind::Shared, "list", Duration::ZERO).unwrap();
        drop(l);
        // Slightly ahead (a skewed clock) is respected.
        put(&LockInfo {
            refreshed: now_secs() + 60,
            ..planted
        });
        assert!(Lock::acquire(store.clone(), LockKind::Shared, "list", Duration::ZERO).is_err());
    }

    #[test]
    fn waiting_for_a_lock() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let held = Lock::acquire(
            store.clone(),
            LockKind::Exclusive,
            "compact",
            Duration::ZERO,
        )
        .unwrap();
        let s2 = store.clone();
        let t = std::thread::spawn(move || {
            Lock::acquire(s2, LockKind::Shared, "create", Duration::from_secs(20)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
        t.join().unwrap().unwrap();
    }
}
