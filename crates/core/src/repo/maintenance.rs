//! What a command that deletes packs (compact, `check --repair`) must know first: which packs
//! are retired, and whether what it would delete must wait.
//!
//! After a lock was removed by someone other than its holder (`lock/broken.rs`), that holder
//! may still commit an archive against packs it stored or deduplicated against. Every client
//! that deletes packs remembers, in its cache, when it first saw each record of a broken lock
//! and each record of deferred packs, and measures how long since with its own clock (the time
//! since boot; a sighting from an earlier boot starts again, as for locks). Until it has
//! watched every broken-lock record for the grace interval (a day by default), it deletes
//! nothing newly found unused: it *defers* it (`repo/retire.rs`). Deferred packs are deleted
//! by a run that has watched their record for the grace interval, if no archive then needs
//! them. Packs being deleted by another run (a deleting record) are finished off whatever the
//! mode. Without a cache directory nothing is remembered between runs, so deferred packs wait
//! until a single run has watched for the whole interval: this is said once.

use std::collections::HashSet;
use std::time::Duration;

use crate::error::Result;
use crate::repo::lock::broken;
use crate::repo::lock::watch::Watch;
use crate::repo::retire::{Mode, Retired};
use crate::repo::Repository;
use crate::util::id::PackId;

pub struct Maintenance {
    pub retired: Retired,
    /// Broken-lock records watched for less than the grace interval: while there is one,
    /// packs newly found unused are deferred. The longest wait left.
    pub deferring: Option<Duration>,
    /// Deferred records watched for the grace interval: their packs are deleted now, unless
    /// an archive needs them.
    pub mature: HashSet<String>,
    /// Deferred records still waiting, with the wait left.
    pub waiting: Vec<(String, Duration)>,
    /// Broken-lock records watched for the grace interval: removed once this run is done.
    pub expired: Vec<String>,
    watch: Watch,
    names: Vec<String>,
}

/// Where a client remembers when it first saw the records of broken locks and deferred packs.
fn memory(repo: &Repository) -> Option<std::path::PathBuf> {
    crate::repo::cache_dir::for_repository(&repo.id_hex()).map(|d| d.join("retired-seen"))
}

impl Maintenance {
    /// Reads the records and judges them by what this client has watched.
    pub fn load(repo: &Repository) -> Result<Maintenance> {
        let store = repo.store();
        let grace = repo.lock_timing().grace;
        let retired = Retired::load(&**store, repo.crypto())?;
        let broken = broken::list(&**store)?;
        let path = memory(repo);
        if path.is_none() {
            crate::say!(
                "note: no cache directory (neither XDG_CACHE_HOME nor HOME is set): what this run sees of broken locks and retired packs is not remembered, and space they hold is freed only by a run that watches them for {} itself",
                crate::repo::lock::human(grace)
            );
        }
        let mut watch = Watch::open(path);
        let mut names = Vec::new();
        let mut deferring: Option<Duration> = None;
        let mut expired = Vec::new();
        for b in &broken {
            let watched = watch.unchanged_for(&b.name, b"");
            names.push(b.name.clone());
            if watched >= grace {
                expired.push(b.name.clone());
            } else {
                let left = grace - watched;
                deferring = Some(deferring.map_or(left, |d| d.max(left)));
            }
        }
        let (mut mature, mut waiting) = (HashSet::new(), Vec::new());
        for r in retired.records.iter().filter(|r| r.mode == Mode::Deferred) {
            let watched = watch.unchanged_for(&r.name, b"");
            names.push(r.name.clone());
            if watched >= grace {
                mature.insert(r.name.clone());
            } else {
                waiting.push((r.name.clone(), grace - watched));
            }
        }
        watch.save(&names);
        Ok(Maintenance {
            retired,
            deferring,
            mature,
            waiting,
            expired,
            watch,
            names,
        })
    }

    /// Packs being deleted by some run (never used again; finished off by this one).
    pub fn doomed(&self) -> HashSet<PackId> {
        self.retired.doomed()
    }

    /// Deferred packs whose wait is over.
    pub fn matured(&self) -> HashSet<PackId> {
        let doomed = self.doomed();
        self.retired
            .records
            .iter()
            .filter(|r| self.mature.contains(&r.name))
            .flat_map(|r| r.packs.iter().copied())
            .filter(|p| !doomed.contains(p))
            .collect()
    }

    /// Deferred packs still waiting, with the longest wait left of any record naming each.
    pub fn still_waiting(&self) -> std::collections::HashMap<PackId, Duration> {
        let doomed = self.doomed();
        let matured = self.matured();
        let mut out = std::collections::HashMap::new();
        for (name, left) in &self.waiting {
            let Some(r) = self.retired.records.iter().find(|r| &r.name == name) else {
                continue;
            };
            for p in r
                .packs
                .iter()
                .filter(|p| !doomed.contains(p) && !matured.contains(p))
            {
                let e = out.entry(*p).or_insert(*left);
                *e = (*e).max(*left);
            }
        }
        out
    }

    /// The records this run finishes when it completes: every deleting record (its packs are
    /// deleted by this run too) and every mature deferred record.
    pub fn finished(&self) -> Vec<String> {
        self.retired
            .records
            .iter()
            .filter(|r| r.mode == Mode::Deleting || self.mature.contains(&r.name))
            .map(|r| r.name.clone())
            .collect()
    }

    /// Remembers a deferred record this run just wrote: its wait starts now.
    pub fn remember(&mut self, record: &str) {
        self.watch.unchanged_for(record, b"");
        self.names.push(record.to_string());
        self.watch.save(&self.names);
    }

    /// Removes the broken-lock records whose grace interval is over (after a successful run).
    pub fn expire(&self, repo: &Repository) -> Result<()> {
        for name in &self.expired {
            match repo.store().delete(name) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
