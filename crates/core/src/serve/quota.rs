//! `--storage-quota`: what the repository holds, counted in one place that every connection
//! to it shares (a counter file in the repository, under `flock`), so that many connections at
//! once cannot each fill the quota. Each object costs its size rounded up to 4 KiB blocks (an
//! empty object still takes one), as the disk counts it. A connection counts the repository
//! afresh when it begins (the owner may have freed space meanwhile), unless some write is
//! under way, whose reservation the disk does not show yet: the count then only grows. (A
//! server killed in a write leaves its reservation counted; removing the counter file makes
//! the next connection count again.)

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::store::{StoreError, StoreResult};

/// The counter, beside the objects (a name beginning with `.` is never an object).
const COUNTER: &str = ".cairn-serve-usage";
const BLOCK: u64 = 4096;

/// What an object of `len` bytes costs.
pub fn cost(len: u64) -> u64 {
    len.div_ceil(BLOCK).max(1) * BLOCK
}

pub struct Quota {
    limit: u64,
    root: PathBuf,
}

impl Quota {
    /// The quota of the repository at `root`, its use counted now.
    pub fn new(root: &Path, limit: u64) -> Self {
        let q = Self {
            limit,
            root: root.to_path_buf(),
        };
        if let Ok(mut count) = q.lock() {
            // Recounted only when no write is on its way: its reservation is not on the
            // disk yet, and a recount would forget it.
            let found = usage(&q.root);
            count.used = if count.in_flight == 0 {
                found
            } else {
                count.used.max(found)
            };
            let _ = count.save();
        }
        q
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The shared count, locked against every other connection until it is saved or
    /// dropped. Before the repository's directory exists nothing is counted.
    pub fn lock(&self) -> StoreResult<Count<'_>> {
        if !self.root.is_dir() {
            return Ok(Count {
                quota: self,
                file: None,
                used: 0,
                in_flight: 0,
            });
        }
        let io = |e| StoreError::from_io(COUNTER, e);
        let mut file: File = {
            use std::os::unix::fs::OpenOptionsExt;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(self.root.join(COUNTER))
                .map_err(io)?
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io(e.into()))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        let mut numbers = text.split_whitespace().map(str::parse::<u64>);
        let (used, in_flight) = match (numbers.next(), numbers.next()) {
            (Some(Ok(used)), Some(Ok(in_flight))) => (used, in_flight),
            _ => (usage(&self.root), 0),
        };
        Ok(Count {
            quota: self,
            file: Some(file),
            used,
            in_flight,
        })
    }

    /// Counts an object of `size` bytes (in place of one of `replacing` bytes) about to be
    /// written, or refuses it; [`Quota::written`] says when the write is over.
    pub fn reserve(&self, name: &str, size: u64, replacing: Option<u64>) -> StoreResult<()> {
        let mut count = self.lock()?;
        count.reserve(name, size, replacing)?;
        count.in_flight = count.in_flight.saturating_add(cost(size));
        count.save()
    }

    /// The write of an object of `size` bytes reserved is over: what it replaced, or what it
    /// was counted for if it failed (`freed`), is given back.
    pub fn written(&self, size: u64, freed: Option<u64>) {
        if let Ok(mut count) = self.lock() {
            count.in_flight = count.in_flight.saturating_sub(cost(size));
            count.release(freed);
            let _ = count.save();
        }
    }

    /// Gives back what an object of `size` bytes was counted for (a deletion).
    pub fn release(&self, size: Option<u64>) {
        if let Ok(mut count) = self.lock() {
            count.release(size);
            let _ = count.save();
        }
    }
}

/// The count, held.
pub struct Count<'a> {
    quota: &'a Quota,
    file: Option<File>,
    used: u64,
    /// Bytes reserved by writes still under way (in any connection).
    in_flight: u64,
}

impl Count<'_> {
    /// Counts an object of `size` bytes (in place of one of `replacing` bytes), or refuses it.
    pub fn reserve(&mut self, name: &str, size: u64, replacing: Option<u64>) -> StoreResult<()> {
        let (add, back) = (cost(size), replacing.map_or(0, cost));
        let limit = self.quota.limit;
        if self.used.saturating_sub(back).saturating_add(add) > limit && add > back {
            return Err(StoreError::Refused {
                name: name.to_string(),
                why: format!(
                    "the repository's storage quota of {} would be exceeded ({} used, {} more asked)",
                    crate::util::progress::size(limit),
                    crate::util::progress::size(self.used),
                    crate::util::progress::size(size),
                ),
            });
        }
        self.used = self.used.saturating_add(add);
        Ok(())
    }

    /// Gives back what an object of `size` bytes was counted for.
    pub fn release(&mut self, size: Option<u64>) {
        self.used = self.used.saturating_sub(size.map_or(0, cost));
    }

    /// Writes the count back (the lock goes with the file).
    pub fn save(self) -> StoreResult<()> {
        let Some(mut file) = self.file else {
            return Ok(());
        };
        let io = |e| StoreError::from_io(COUNTER, e);
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        let text = format!("{} {}", self.used, self.in_flight);
        file.write_all(text.as_bytes()).map_err(io)
    }
}

/// What the files below `dir` cost (links not followed, the counter left out).
fn usage(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name() != COUNTER)
        .filter_map(|e| e.metadata().ok())
        .map(|m| cost(m.len()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that began while another's write was under way recounted the disk and
    /// forgot that write: the quota could be passed by a pack per new connection.
    #[test]
    fn a_new_connection_does_not_forget_writes_under_way() {
        let d = tempfile::tempdir().unwrap();
        let a = Quota::new(d.path(), 100_000);
        a.reserve("packs/1", 80_000, None).unwrap();
        let b = Quota::new(d.path(), 100_000);
        assert!(b.reserve("packs/2", 80_000, None).is_err());
        a.written(80_000, Some(80_000)); // it failed: the room comes back
        b.reserve("packs/2", 80_000, None).unwrap();
    }

    #[test]
    fn connections_share_one_count() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (Quota::new(d.path(), 40_000), Quota::new(d.path(), 40_000));
        a.reserve("x", 16_000, None).unwrap();
        b.reserve("y", 16_000, None).unwrap();
        assert!(a.reserve("z", 16_000, None).is_err());
        assert!(b.reserve("z", 16_000, None).is_err());
        b.written(16_000, Some(16_000));
        a.reserve("z", 16_000, None).unwrap();
        // Empty objects are not free.
        let c = Quota::new(d.path(), 1 << 20);
        let mut n = 0;
        while c.reserve("e", 0, None).is_ok() {
            n += 1;
        }
        assert!(n <= 256, "{n} empty objects");
    }
}
