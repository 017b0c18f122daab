//! The scan beside the backup: how many files and bytes the paths hold, for the progress
//! display's percentage and ETA. It walks the same paths with the same rules (excludes,
//! `--exclude-caches`, `--one-file-system`, no symlink followed) and reads only metadata. It
//! runs only while progress is shown, and its totals are an estimate: files may change while
//! the backup runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::tree::Walk;
use super::{stored_path, BackupOptions};
use crate::repo::signals::Interrupt;
use crate::source::exclude::is_cache_dir;

#[derive(Default)]
pub struct Totals {
    files: AtomicU64,
    bytes: AtomicU64,
    /// Every path was walked: the totals are final.
    complete: AtomicBool,
    /// The backup is over: the scan stops.
    stop: AtomicBool,
}

impl Totals {
    /// Files and bytes found so far, and whether the scan is complete.
    pub fn get(&self) -> (u64, u64, bool) {
        (
            self.files.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.complete.load(Ordering::Relaxed),
        )
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self, interrupt: &Interrupt) -> bool {
        self.stop.load(Ordering::Relaxed) || interrupt.raised()
    }
}

pub fn scan(opts: &BackupOptions, totals: &Totals, interrupt: &Interrupt) {
    for root in &opts.paths {
        let mut walk = Walk::new(root, opts.one_file_system);
        while let Some(entry) = walk.next() {
            if totals.stopped(interrupt) {
                return;
            }
            let Ok(entry) = entry else {
                continue;
            };
            let is_dir = entry.meta.is_dir();
            if opts.excludes.is_excluded(&stored_path(&entry.path)) {
                if is_dir {
                    walk.skip_current_dir();
                }
                continue;
            }
            if opts.excludes.exclude_caches && entry.dir.as_deref().is_some_and(is_cache_dir)
                || !entry.tags(&opts.excludes.tags).is_empty()
            {
                walk.skip_current_dir();
                continue;
            }
            if entry.meta.is_file() && !opts.excludes.is_too_large(entry.meta.size) {
                totals.files.fetch_add(1, Ordering::Relaxed);
                totals.bytes.fetch_add(entry.meta.size, Ordering::Relaxed);
            }
        }
    }
    totals.complete.store(true, Ordering::Relaxed);
}
