//! Keeping a lock: every refresh writes the lock under a new name and only then looks at the
//! old one, so that a lock someone removed is never written again.
//!
//! A refresh that read the old object back and then rewrote it in place could, paused between
//! the two, recreate a lock that another client had judged abandoned and removed meanwhile
//! (and then compacted the repository as if this command were gone): every later verification
//! would pass. Writing a *new* object first (create-if-absent, under a fresh random name) and
//! then reading the old one closes that: if the old one is gone or changed, the lock was lost
//! before the new one existed, the new one is removed again, and the command stops. A client
//! that removes a stale lock lists the locks again afterwards ([`super::conflict`]), so it
//! sees a new object written before it removed the old one.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::sealed::{self, SealSlot};
use super::{LockHealth, LockInfo, LockTiming, MAX_LOCK_LEN};
use crate::store::{Store, StoreError};
use crate::util::clock;

/// Our lock object as last written.
pub(super) struct Held {
    pub name: String,
    pub info: LockInfo,
    pub bytes: Vec<u8>,
    /// Whether `bytes` hold the details sealed (else they were written before the key opened,
    /// or by a command without it).
    pub sealed: bool,
    /// Where the seal is found once the key has opened.
    pub seal: Arc<SealSlot>,
    /// When it was written (time since boot): a lock written this recently cannot have been
    /// judged abandoned by anyone.
    pub written: Duration,
    /// An earlier object of ours that could not be removed (a failing store): removed with the
    /// lock.
    pub leftover: Option<String>,
}

pub(super) enum RefreshError {
    /// The object is gone or not ours any more.
    Taken(String),
    /// The store failed; it may work again.
    Failed(String),
}

/// A new random lock object name.
pub(super) fn new_name() -> String {
    format!("locks/{}", hex::encode(rand::random::<[u8; 16]>()))
}

/// Writes a lock object that must not exist yet. A backend that retried a write which had
/// in fact succeeded reports the name as taken: an object holding exactly our bytes (which
/// nobody else can produce under a name we drew at random) is ours.
pub(super) fn write_new(store: &dyn Store, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    match store.create_new(name, bytes) {
        Err(StoreError::Exists { .. })
            if store
                .get_bounded(name, MAX_LOCK_LEN)
                .is_ok_and(|b| b == bytes) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn taken(what: &str) -> RefreshError {
    RefreshError::Taken(format!(
        "our repository lock was {what} by another process (it judged it abandoned, or someone ran cairn break-lock)"
    ))
}

/// Reads our current lock object back: it must be exactly what we wrote.
pub(super) fn read_back(store: &dyn Store, held: &Held) -> Result<(), RefreshError> {
    match store.get_bounded(&held.name, MAX_LOCK_LEN) {
        Ok(b) if b == held.bytes => Ok(()),
        Ok(_) | Err(StoreError::TooLarge { .. }) => Err(taken("replaced")),
        Err(StoreError::NotFound { .. }) => Err(taken("removed")),
        Err(e) => Err(RefreshError::Failed(format!(
            "cannot read our repository lock back: {e}"
        ))),
    }
}

/// Writes the lock one generation on under a new name, then checks that the old object is
/// still exactly ours, then removes the old one. If the old one was lost, so is the lock:
/// the new object is removed again and nothing of the lock is left.
pub(super) fn rotate(store: &dyn Store, held: &mut Held) -> Result<(), RefreshError> {
    let mut info = held.info.clone();
    info.generation += 1;
    info.refreshed = clock::now_secs();
    let name = new_name();
    let seal = held.seal.get();
    let bytes = sealed::encode_from(&info, &name, &held.seal);
    write_new(store, &name, &bytes)
        .map_err(|e| RefreshError::Failed(format!("cannot refresh our repository lock: {e}")))?;
    let written = clock::since_boot();
    if let Err(e) = read_back(store, held) {
        let _ = store.delete(&name);
        return Err(e);
    }
    let old = std::mem::replace(&mut held.name, name);
    held.info = info;
    held.bytes = bytes;
    held.sealed = seal.is_some();
    held.written = written;
    match store.delete(&old) {
        // Removed meanwhile by someone who judged it abandoned: they list again after a
        // removal, and so see the new object, which we wrote before we read the old one back.
        Ok(()) | Err(StoreError::NotFound { .. }) => {}
        Err(_) => held.leftover = Some(old),
    }
    if let Some(left) = held.leftover.take() {
        if matches!(store.delete(&left), Err(e) if !e.is_not_found()) {
            held.leftover = Some(left);
        }
    }
    Ok(())
}

/// What wakes the refresher before its interval is up.
#[derive(Default)]
pub(super) struct Wake {
    /// The lock is being dropped.
    pub stop: bool,
    /// Refresh now (the key has opened: the lock is to be sealed).
    pub now: bool,
}

/// Attempts per refresh before a failing store stops the command.
const REFRESH_ATTEMPTS: u32 = 3;

/// The refresher: rotates the lock every refresh interval through the store's lane (its own
/// connection where the store has one, opened at the first refresh, so that a refresh never
/// waits behind pack uploads on a slow link), until `stop` is set. A lock found lost, or a
/// store that fails three attempts in a row, fails `health`: long work polls it and stops.
pub(super) fn spawn_refresher(
    store: Arc<dyn Store>,
    held: Arc<Mutex<Held>>,
    timing: LockTiming,
    health: Arc<LockHealth>,
    wake: Arc<(Mutex<Wake>, Condvar)>,
) -> JoinHandle<()> {
    // After `wait` or an earlier wake-up: `None` when the lock is being dropped, else whether
    // the wake-up was a call to refresh now.
    let woken = move |wait: Duration| -> Option<bool> {
        let (m, cv) = &*wake;
        let guard = m.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) = cv
            .wait_timeout_while(guard, wait, |w| !w.stop && !w.now)
            .unwrap_or_else(|p| p.into_inner());
        let now = std::mem::take(&mut guard.now);
        (!guard.stop).then_some(now)
    };
    std::thread::spawn(move || {
        let mut lane: Option<Arc<dyn Store>> = None;
        loop {
            let Some(now) = woken(timing.refresh) else {
                return;
            };
            if now {
                // Asked to seal the lock. Where requests queue (SFTP), a rotation through the
                // store would wait behind pack uploads, and one through the lane would open a
                // second connection (a second ssh login, perhaps a second prompt) for it: the
                // lock is sealed at its first refresh instead. Elsewhere a moment later, if
                // the command still runs.
                if store.has_lane() {
                    continue;
                }
                if woken(timing.seal_after()).is_none() {
                    return;
                }
            }
            let via = match &lane {
                Some(lane) => lane.clone(),
                None if now => store.clone(),
                None => lane
                    .get_or_insert_with(|| crate::store::lane_of(&store))
                    .clone(),
            };
            let mut attempt = 1;
            loop {
                let result = {
                    let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
                    rotate(&*via, &mut h)
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
                        if woken(timing.refresh / 10).is_none() {
                            return;
                        }
                    }
                }
            }
        }
    })
}
