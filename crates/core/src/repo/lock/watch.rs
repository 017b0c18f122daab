//! Staleness judged by the observer's own clock over an interval it watched.
//!
//! A lock is abandoned when its holder stopped refreshing it. Comparing the holder's
//! "refreshed at" timestamp with our clock would trust two clocks to agree; instead, an
//! observer remembers when it first saw each lock object with its exact contents (a sha256 of
//! the bytes), and calls the lock stale once it has seen the same contents for the whole stale
//! interval by its own clock. A live holder rewrites its lock (a new generation number) every
//! refresh interval, far shorter, so it is never judged stale. The memory is kept per
//! repository in the local cache, so a cron job that runs `compact` every hour watches across
//! runs; within one run `--lock-wait` watches too.
//!
//! Intervals use the time since boot (`CLOCK_BOOTTIME`: it counts a suspend and never jumps
//! when someone sets the wall clock). A sighting from an earlier boot of this machine is
//! forgotten and the watch starts again from zero: the time between two boots could only be
//! measured with the wall clock, which may have been stepped meanwhile (by NTP at boot, by a
//! person, by a VM restored from a snapshot), so a lock is never judged on it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::repo::lock::host::HostId;
use crate::util::clock;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Sighting {
    /// sha256 of the lock object's bytes.
    contents: String,
    /// When first seen with these contents: the boot id and milliseconds since that boot.
    boot: String,
    boot_ms: u64,
}

/// What this observer has seen of the lock objects of one repository.
pub struct Watch {
    path: Option<PathBuf>,
    seen: HashMap<String, Sighting>,
    boot: String,
    /// Whether `seen` differs from what was read: an unchanged memory is not rewritten.
    changed: bool,
}

impl Watch {
    /// The memory at `path` (none: this process only). An unreadable memory starts afresh,
    /// which only makes locks live longer.
    pub fn open(path: Option<PathBuf>) -> Self {
        let seen = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Self {
            path,
            seen,
            boot: HostId::current().boot,
            changed: false,
        }
    }

    /// How long the lock object `name` has had exactly `contents` while this observer watched.
    pub fn unchanged_for(&mut self, name: &str, contents: &[u8]) -> Duration {
        let digest = hex::encode(crate::util::id::sha256(contents));
        let now_ms = clock::since_boot().as_millis() as u64;
        match self.seen.get(name) {
            Some(s) if s.contents == digest && !s.boot.is_empty() && s.boot == self.boot => {
                Duration::from_millis(now_ms.saturating_sub(s.boot_ms))
            }
            _ => {
                self.changed = true;
                self.seen.insert(
                    name.to_string(),
                    Sighting {
                        contents: digest,
                        boot: self.boot.clone(),
                        boot_ms: now_ms,
                    },
                );
                Duration::ZERO
            }
        }
    }

    /// Forgets locks that no longer exist and saves the memory if it changed (best effort:
    /// losing it only restarts the watch). With no other client about, nothing is written.
    pub fn save(&mut self, present: &[String]) {
        let before = self.seen.len();
        self.seen.retain(|name, _| present.contains(name));
        self.changed |= self.seen.len() != before;
        if !std::mem::take(&mut self.changed) {
            return;
        }
        if let (Some(path), Ok(bytes)) = (&self.path, serde_json::to_vec(&self.seen)) {
            let _ = crate::repo::cache_dir::write_private(path, &bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_restarts_the_watch_and_memory_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.json");
        let mut w = Watch::open(Some(path.clone()));
        assert_eq!(w.unchanged_for("locks/a", b"one"), Duration::ZERO);
        clock::advance(Duration::from_millis(30));
        assert!(w.unchanged_for("locks/a", b"one") >= Duration::from_millis(30));
        w.save(&["locks/a".to_string()]);
        let mut again = Watch::open(Some(path.clone()));
        assert!(again.unchanged_for("locks/a", b"one") >= Duration::from_millis(25));
        // Refreshed (new contents): watched from zero again.
        assert_eq!(again.unchanged_for("locks/a", b"two"), Duration::ZERO);
        // Gone from the repository: forgotten.
        again.save(&[]);
        let mut third = Watch::open(Some(path));
        assert_eq!(third.unchanged_for("locks/a", b"two"), Duration::ZERO);
    }

    /// A sighting from before a reboot says nothing about how long the lock has been there
    /// (only the wall clock could, and it may have been stepped): the watch starts again.
    #[test]
    fn after_a_reboot_a_lock_is_watched_again_from_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.json");
        let mut w = Watch::open(Some(path.clone()));
        w.unchanged_for("locks/a", b"one");
        w.save(&["locks/a".to_string()]);
        // The memory as a previous boot, a day before, left it.
        let mut seen: HashMap<String, Sighting> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for s in seen.values_mut() {
            s.boot = "an earlier boot".into();
            s.boot_ms = 0;
        }
        std::fs::write(&path, serde_json::to_vec(&seen).unwrap()).unwrap();
        let mut after = Watch::open(Some(path));
        assert_eq!(after.unchanged_for("locks/a", b"one"), Duration::ZERO);
        clock::advance(Duration::from_millis(20));
        assert!(after.unchanged_for("locks/a", b"one") >= Duration::from_millis(20));
    }
}
