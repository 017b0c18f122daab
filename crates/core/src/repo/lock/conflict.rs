//! What stands in the way of a lock: the other lock objects, read and judged; the stale ones
//! that conflict are removed (with a record that outlives the removal, [`super::broken`]).

use std::time::Duration;

use super::host::{process_alive, HostId};
use super::sealed::{self, LockSeal};
use super::watch::Watch;
use super::{broken, human, LockInfo, LockKind, LockTiming, MAX_LOCK_LEN};
use crate::error::Result;
use crate::store::{Store, StoreError};

/// A lock object and what it says, as read (an unreadable one stands for an exclusive lock),
/// with the bytes the observer watches.
fn read(
    store: &dyn Store,
    name: &str,
    seal: Option<&LockSeal>,
    here: &HostId,
) -> Result<Option<(LockInfo, Vec<u8>)>> {
    Ok(Some(match store.get_bounded(name, MAX_LOCK_LEN) {
        Ok(bytes) => (
            sealed::decode(&bytes, name, seal, here).info(name, here),
            bytes,
        ),
        Err(e) if e.is_not_found() => return Ok(None),
        Err(StoreError::TooLarge { size, .. }) => (
            LockInfo::unreadable(format!(
                "a lock object {name} of {size} bytes, too large to be one (remove it with cairn break-lock if no cairn runs)"
            )),
            format!("{size} bytes").into_bytes(),
        ),
        Err(e) => return Err(e.into()),
    }))
}

/// The first live lock (other than `own`) that conflicts with a lock of `kind`, with how long
/// this observer has watched it unchanged. Stale locks in the way are removed (said on
/// stderr), each after a record of its removal is written; after any removal the locks are
/// listed again, since the holder of a removed lock may have written its next one (a refresh
/// writes the new object before it looks at the old) and is then alive after all.
pub(super) fn find_conflict(
    store: &dyn Store,
    own: &str,
    kind: LockKind,
    timing: &LockTiming,
    here: &HostId,
    watch: &mut Watch,
    seal: Option<&LockSeal>,
) -> Result<Option<(LockInfo, Duration)>> {
    loop {
        let listing = store.list("locks")?;
        let mut conflict = None;
        let mut removed = Vec::new();
        for obj in &listing {
            if obj.name == own {
                continue;
            }
            let Some((info, contents)) = read(store, &obj.name, seal, here)? else {
                continue;
            };
            let watched = watch.unchanged_for(&obj.name, &contents);
            if kind != LockKind::Exclusive && info.kind != LockKind::Exclusive {
                // Not in the way: shared locks never conflict, stale or not.
                continue;
            }
            // A holder whose process is gone (in our PID namespace) can do nothing more; one
            // that was only watched unchanged may be stopped, not gone: its removal leaves a
            // record that outlives it (`broken.rs`).
            let (why, record) = if info.host_id.shares_pids_with(here) && !process_alive(info.pid) {
                (format!("its process {} is gone", info.pid), false)
            } else if watched >= timing.stale {
                (
                    format!("unchanged for {} while watched", human(watched)),
                    true,
                )
            } else {
                conflict.get_or_insert((info, watched));
                continue;
            };
            if record {
                broken::record(store, &obj.name)?;
            }
            match store.delete(&obj.name) {
                Ok(()) => crate::say!("note: removed a stale lock ({why}): {}", info.describe()),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            // Forgotten: a new lock under the same name is watched from the start.
            removed.push(obj.name.clone());
        }
        let present: Vec<String> = listing
            .into_iter()
            .map(|o| o.name)
            .filter(|n| !removed.contains(n))
            .collect();
        watch.save(&present);
        if removed.is_empty() || conflict.is_some() {
            return Ok(conflict);
        }
    }
}

/// The locks other than `own` that this observer has not watched unchanged for the stale
/// interval (it watches them from now on, if it had not seen them before), with what they
/// say ([`LockInfo::opaque`] when their details cannot be read). A lock whose process is gone
/// (in this observer's PID namespace) is not live: `check` called a dead backup's packs "in
/// progress" (issue 44).
pub fn live_locks(
    store: &dyn Store,
    own: Option<&str>,
    memory: Option<std::path::PathBuf>,
    timing: &LockTiming,
    seal: Option<&LockSeal>,
) -> Result<Vec<LockInfo>> {
    let mut watch = Watch::open(memory);
    let here = HostId::current();
    let listing = store.list("locks")?;
    let mut live = Vec::new();
    for obj in &listing {
        if Some(obj.name.as_str()) == own {
            continue;
        }
        let Some((info, contents)) = read(store, &obj.name, seal, &here)? else {
            continue;
        };
        let dead = info.host_id.shares_pids_with(&here) && !process_alive(info.pid);
        if watch.unchanged_for(&obj.name, &contents) < timing.stale && !dead {
            live.push(info);
        }
    }
    let present: Vec<String> = listing.into_iter().map(|o| o.name).collect();
    watch.save(&present);
    Ok(live)
}

/// Every lock object with what a reader without the key can tell of it (its kind, when it
/// reads as a lock at all).
pub fn list_locks(store: &dyn Store) -> Result<Vec<(String, LockInfo)>> {
    let mut out = Vec::new();
    let here = HostId::current();
    for obj in store.list("locks")? {
        let info = match store.get_bounded(&obj.name, MAX_LOCK_LEN) {
            Ok(b) => sealed::decode(&b, &obj.name, None, &here),
            Err(_) => sealed::Read::Unreadable,
        }
        .info(&obj.name, &here);
        out.push((obj.name, info));
    }
    Ok(out)
}

/// `cairn break-lock`: removes every lock object, whoever holds it, each after a record of its
/// removal. Returns what was removed.
pub fn break_all(store: &dyn Store) -> Result<Vec<(String, LockInfo)>> {
    let locks = list_locks(store)?;
    for (name, _) in &locks {
        broken::record(store, name)?;
        match store.delete(name) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(locks)
}
