//! Reading ahead of a mount's readers: workers fetch, decrypt and cache the chunks that come
//! next in a file while the reader is still on the ones before, so that reading a file through
//! the mount uses every core, as extract does.
//!
//! Each open file keeps how far ahead has been asked for. When its reader gets within half a
//! window of that point, the next window's chunks (those neither cached nor already being
//! fetched) are grouped into runs that lie together in one pack, and the runs are handed to
//! the workers. A reader that needs a chunk being fetched waits for it; one that finds it
//! neither cached nor coming (evicted, or its fetch failed) reads it itself, and so gets the
//! error, if there is one, to report.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::cache::ChunkCache;
use super::tree::Node;
use crate::archive::content::{Contents, Run, RunPlanner};
use crate::error::Result;
use crate::index::ChunkIndex;
use crate::repo::Repository;
use crate::util::id::ChunkId;

/// How far ahead of a reader chunks are fetched.
pub const WINDOW: u64 = 32 << 20;
/// A run read at once is at most this long.
const MAX_RUN: u64 = 4 << 20;

/// What the file system and the workers share.
pub struct Source {
    pub repo: Repository,
    pub index: ChunkIndex,
    pub cache: ChunkCache,
    /// Chunks a worker is fetching.
    inflight: Mutex<HashSet<ChunkId>>,
    landed: Condvar,
}

impl Source {
    pub fn new(repo: Repository, index: ChunkIndex, cache: ChunkCache) -> Self {
        Self {
            repo,
            index,
            cache,
            inflight: Mutex::new(HashSet::new()),
            landed: Condvar::new(),
        }
    }

    fn inflight(&self) -> std::sync::MutexGuard<'_, HashSet<ChunkId>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits while a worker fetches `id`. Returns at once if none does.
    pub fn wait_for(&self, id: &ChunkId) {
        let mut g = self.inflight();
        while g.contains(id) {
            g = self
                .landed
                .wait_timeout(g, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Groups chunks `from..to` of `node` into runs read at once. With `claim`, only those
    /// neither cached nor being fetched, which are then marked as being fetched.
    pub fn runs(&self, node: &Node, from: usize, to: usize, claim: bool) -> Vec<Run> {
        let mut plan = RunPlanner::new(MAX_RUN);
        let mut inflight = claim.then(|| self.inflight());
        for c in &node.chunks[from..to] {
            // Left for the reader, who reports it missing.
            let Some((pack, loc)) = self.index.stored(&c.id) else {
                continue;
            };
            if let Some(set) = &mut inflight {
                if self.cache.contains(&c.id) || !set.insert(c.id) {
                    continue;
                }
            }
            plan.push(*c, pack, u64::from(loc.offset), u64::from(loc.len));
        }
        plan.runs
    }

    /// Reads a run, and caches each chunk of it; releases its chunks' claims either way.
    pub fn fetch(&self, run: &Run) -> Result<()> {
        let contents = Contents::new(&self.repo, &self.index);
        let result = contents.read_run(run, |c, plain| {
            self.cache.insert(c.id, Arc::new(plain));
            Ok(())
        });
        self.release(run);
        result
    }

    fn release(&self, run: &Run) {
        let mut g = self.inflight();
        for (c, _, _) in &run.chunks {
            g.remove(&c.id);
        }
        drop(g);
        self.landed.notify_all();
    }
}

/// The workers' queue.
pub struct Prefetcher {
    tx: Sender<Run>,
}

impl Prefetcher {
    /// Starts `threads` workers; they end when the prefetcher is dropped.
    pub fn start(source: &Arc<Source>, threads: usize) -> Self {
        let (tx, rx): (Sender<Run>, Receiver<Run>) = crossbeam_channel::unbounded();
        for _ in 0..threads.max(1) {
            let (source, rx) = (Arc::clone(source), rx.clone());
            // A worker that cannot start leaves readers to fetch for themselves.
            let _ = std::thread::Builder::new()
                .name("cairn-prefetch".into())
                .spawn(move || {
                    for run in rx {
                        // An error is the reader's to find and report.
                        let _ = source.fetch(&run);
                    }
                });
        }
        Self { tx }
    }

    /// Hands runs to the workers; a run that cannot be handed over is released.
    pub fn submit(&self, source: &Source, runs: Vec<Run>) {
        for run in runs {
            if let Err(e) = self.tx.send(run) {
                source.release(&e.into_inner());
            }
        }
    }
}
