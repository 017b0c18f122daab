//! `--storage-quota`: what the repository holds, counted in one place that every connection
//! to it shares (a counter file in the repository, under `flock`), so that many connections at
//! once cannot each fill the quota. Each object costs its size rounded up to 4 KiB blocks (an
//! empty object still takes one), as the disk counts it. A connection counts the repository
//! afresh when it begins (the owner may have freed space meanwhile).

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
        let _ = q.with_counter(|used| {
            *used = usage(&q.root);
            Ok(())
        });
        q
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Runs `f` on the shared count, locked against every other connection. Before the
    /// repository's directory exists nothing is counted.
    fn with_counter<T>(&self, f: impl FnOnce(&mut u64) -> StoreResult<T>) -> StoreResult<T> {
        if !self.root.is_dir() {
            return f(&mut 0);
        }
        let path = self.root.join(COUNTER);
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
                .open(&path)
                .map_err(io)?
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io(e.into()))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        let mut used = match text.trim().parse::<u64>() {
            Ok(n) => n,
            Err(_) => usage(&self.root),
        };
        let out = f(&mut used)?;
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(used.to_string().as_bytes()).map_err(io)?;
        Ok(out)
    }

    /// Counts an object of `size` bytes (in place of one of `replacing` bytes, 0 for none),
    /// or refuses it.
    pub fn reserve(&self, name: &str, size: u64, replacing: Option<u64>) -> StoreResult<()> {
        let add = cost(size);
        let back = replacing.map_or(0, cost);
        self.with_counter(|used| {
            let after = used.saturating_sub(back).saturating_add(add);
            if after > self.limit && add > back {
                return Err(StoreError::Refused {
                    name: name.to_string(),
                    why: format!(
                        "the repository's storage quota of {} would be exceeded ({} used, {} more asked)",
                        crate::util::progress::size(self.limit),
                        crate::util::progress::size(*used),
                        crate::util::progress::size(size),
                    ),
                });
            }
            *used = used.saturating_add(add);
            Ok(())
        })
    }

    /// Gives back what an object of `size` bytes was counted for.
    pub fn release(&self, size: u64) {
        let back = cost(size);
        let _ = self.with_counter(|used| {
            *used = used.saturating_sub(back);
            Ok(())
        });
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

    #[test]
    fn connections_share_one_count() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (Quota::new(d.path(), 40_000), Quota::new(d.path(), 40_000));
        a.reserve("x", 16_000, None).unwrap();
        b.reserve("y", 16_000, None).unwrap();
        assert!(a.reserve("z", 16_000, None).is_err());
        assert!(b.reserve("z", 16_000, None).is_err());
        b.release(16_000);
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
