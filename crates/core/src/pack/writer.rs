//! The PackWriter: assembles blobs into packs and stores each full pack in a background thread
//! while the next one is built. Its contract (from the seed change to borg 2):
//!
//! - **One pack in flight** (up to N for a remote store: below). A full pack (one that
//!   reached the target) is handed to a store thread by the next `add`, after the previous
//!   store is joined, so that a run's trace reads `<HS><HS><HS>`. The thread checks the
//!   blobs' CRCs, seals the pack's table of contents, finishes the pack's hash (the pack id;
//!   the caller hashed each blob as it appended it) and stores it; it never touches the
//!   [`ChunkIndex`], which belongs to the calling thread.
//! - **Pending.** A chunk that is buffered or in flight is [`Location::Pending`]. A stored
//!   pack's results are applied when its thread is joined: at the next pack boundary, at
//!   [`PackWriter::flush`], on a read barrier, or at [`PackWriter::close`].
//! - **Barrier.** `flush()` joins the in-flight store and stores the buffer synchronously, as
//!   the session's last pack, padded to the session's bucket; afterwards nothing is pending.
//! - **Deferred errors.** A store error surfaces one pack later, from whichever call joins.
//!   The failed pack's entries are dropped from the index, the buffered ones too, and the
//!   writer stays broken: every later call fails, so nothing can be committed after it.
//! - **Read barrier.** Reading a chunk whose pack is in flight joins first; a chunk still in
//!   the buffer is served from memory.
//! - **close()** joins: a stored pack is recorded, a failed one rolled back, buffered chunks
//!   discarded — never failing and never panicking, so it cannot mask an error being
//!   returned. Dropping the writer does the same.
//! - **Verify before write.** Every blob comes with the CRC-32 computed right after it was
//!   encrypted; the store thread re-checks it over the pack buffer just before hashing and
//!   storing, so a blob corrupted in memory in between fails the store like an I/O error and
//!   never becomes durable.
//!
//! `CAIRN_PACK_ASYNC=no` stores synchronously; `CAIRN_PACK_TRACE=yes` prints `<` (store
//! started), `H` (finishing the hash), `S` (storing), `>` (finished) per pack to stderr.
//! `CAIRN_PACK_TRACE=time` follows each event with the seconds since the command started and
//! adds the caller's side: `B` (writer made), `W`/`w` (waiting for a store / done), `F`/`f`
//! (barrier / done).
//!
//! **Deeper pipeline.** Up to N packs may be stored at once, each in its own thread, for
//! high-latency stores that serve concurrent requests (S3, SFTP). Handing off a pack then
//! joins the *oldest* store only when N are in flight; barriers, read barriers and close join
//! them all, oldest first, so the contract above holds with "one" read as "up to N" (and a
//! deferred error surfaces up to N packs later). It costs up to N + 1 pack buffers of memory.
//! For a remote store N is chosen as the backup goes ([`pacer`]): the time a store takes,
//! over the time the caller takes to fill a pack, within 256 MiB of pack buffers.
//! `CAIRN_PACK_INFLIGHT=N` (1 to 16) fixes it.
//!
//! **Buffers come back before the pack is durable.** A store gives the pack's bytes back as
//! soon as it no longer needs them ([`Store::put_releasing`]): a local disk once they are
//! written, before the file's fsync, its rename and the directory's fsync. With
//! `CAIRN_PACK_INFLIGHT=2:2` the writer keeps two stores in flight within two pack buffers
//! ([`PackOptions::max_buffers`]): one pack is written while the one before it is made
//! durable, and the next is filled in the buffer the older store gave back. It is a knob,
//! not the default: on this project's machines it bought nothing where the flush is fast, and
//! what it buys where the flush is slow is in `docs/benchmarks.md`; it surfaces an error two
//! packs late, and its trace interleaves (`<HS<HS>>`).

mod pacer;
mod pool;
mod trace;

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::crypto::suite::PackHasher;
use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind};
use crate::index::{ChunkIndex, Location};
use crate::pack::format::{self, PackEntry, MAGIC};
use crate::store::{ByteRange, Store, StoreError};
use crate::util::id::{ChunkId, PackId};
use pacer::Pacer;
use pool::{BufferPool, Lender};
pub use trace::Trace;

/// Default pack size target: 16 MiB (restic's too). One pack is built while one is stored, so
/// this is most of what `create` holds: at 50 MB, 1 GiB peaked at 190 MB instead of 126, at
/// the same speed.
pub const DEFAULT_PACK_SIZE: usize = 16 << 20;
/// Largest accepted target; offsets in the index are 32-bit.
pub const MAX_PACK_SIZE: usize = 1 << 30;
/// Most packs `CAIRN_PACK_INFLIGHT` may put in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// The largest chunk a pack is sized for (the data chunker's maximum).
const LARGEST_CHUNK: usize = 8 * 1024 * 1024;
/// TOC entries a fresh pack buffer has room for before it must grow.
const TOC_ROOM_ENTRIES: usize = 2048;

#[derive(Clone)]
pub struct PackOptions {
    /// A pack is handed off once it reaches this many bytes.
    pub target_size: usize,
    /// Store in a background thread (the default) or synchronously.
    pub async_store: bool,
    /// Packs that may be in flight at once when asynchronous (1: the seed's contract).
    pub max_in_flight: usize,
    /// Pack buffers the writer may hold at once (filling, out with stores, given back);
    /// `None`: as many as the packs in flight need (one each, and the one being filled). With
    /// two in flight and two buffers, a pack is filled only in a buffer its store gave back.
    pub max_buffers: Option<usize>,
    /// Choose the number in flight from measurements instead ([`Pacer`]).
    pub paced: bool,
    pub trace: Trace,
}

impl PackOptions {
    pub fn new(target_size: usize) -> Self {
        Self {
            target_size,
            async_store: true,
            max_in_flight: 1,
            max_buffers: None,
            paced: false,
            trace: Trace::Off,
        }
    }
}

/// What the command line may tune of pack writing (`CAIRN_PACK_*`); the pack size defaults to
/// the repository's.
#[derive(Clone)]
pub struct PackTuning {
    pub size: Option<usize>,
    pub async_store: bool,
    /// Fixed by `CAIRN_PACK_INFLIGHT=N`; otherwise one for a local store (the seed's
    /// contract), paced for a remote one.
    pub max_in_flight: Option<usize>,
    /// Fixed by `CAIRN_PACK_INFLIGHT=N:B`: N stores in flight within B pack buffers (B = N:
    /// a pack is filled only in a buffer a store gave back early, as a local disk does
    /// before its flush); otherwise N + 1.
    pub max_buffers: Option<usize>,
    pub trace: Trace,
}

impl Default for PackTuning {
    fn default() -> Self {
        let o = PackOptions::new(0);
        Self {
            size: None,
            async_store: o.async_store,
            max_in_flight: None,
            max_buffers: None,
            trace: o.trace,
        }
    }
}

impl PackTuning {
    /// The options for a repository whose packs are `default_size` bytes, on a store that is
    /// `remote` or not.
    pub fn options(&self, default_size: usize, remote: bool) -> PackOptions {
        PackOptions {
            target_size: self.size.unwrap_or(default_size),
            async_store: self.async_store,
            max_in_flight: self.max_in_flight.unwrap_or(1),
            max_buffers: self.max_in_flight.and(self.max_buffers),
            paced: self.max_in_flight.is_none() && remote,
            trace: self.trace.clone(),
        }
    }
}

/// Counters of what the writer stored.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriterStats {
    /// Packs handed to storage (stored or not yet joined).
    pub handoffs: u64,
    pub packs: u64,
    pub pack_bytes: u64,
    pub blobs: u64,
}

/// What [`PackWriter::close`] found.
#[derive(Debug, Default)]
pub struct CloseReport {
    /// The in-flight store failed (its entries were rolled back).
    pub store_error: Option<Error>,
    /// Buffered chunks that were discarded.
    pub discarded: usize,
}

/// What storing one pack gave: its id, or the store error (or the corruption found).
type Stored = Result<PackId>;
/// What a store thread gives back: the outcome, the pack's length, and the seconds it took
/// (its buffer went back through the [`BufferPool`]).
type StoreOutcome = (Stored, u64, f64);

struct InFlight {
    handle: JoinHandle<StoreOutcome>,
    entries: Vec<PackEntry>,
    /// A barrier's closing pack: often far smaller than a full one, so its store's time says
    /// nothing of what a pack's costs, and the pacer does not learn from it.
    closing: bool,
}

pub struct PackWriter {
    store: Arc<dyn Store>,
    crypto: Arc<Crypto>,
    index: ChunkIndex,
    opts: PackOptions,
    buf: Vec<u8>,
    /// The pack hash of `buf` so far: each blob is hashed as it is appended, by the caller,
    /// which the store waits for less than the store thread (the disk waits for it).
    hasher: Option<PackHasher>,
    entries: Vec<PackEntry>,
    /// CRC-32 of each buffered blob, from when it was sealed.
    crcs: Vec<u32>,
    /// Stores running, oldest first: at most `opts.max_in_flight`.
    in_flight: VecDeque<InFlight>,
    /// Buffers given back by stores, reused for the next packs.
    pool: Arc<BufferPool>,
    /// Pack buffers this writer holds: the one being filled, those out with stores, those in
    /// the pool. At most `opts.max_buffers` when that is set.
    buffers: usize,
    /// Chooses the number in flight, when it is not fixed.
    pacer: Option<Pacer>,
    /// Bytes of the packs handed off since the last barrier: the session whose total the
    /// next barrier's pack pads to a bucket.
    segment: u64,
    broken: Option<String>,
    stats: WriterStats,
}

/// Verify, seal the table of contents, hash and store one pack: the store thread's whole job
/// (also run inline when synchronous). `release` gets the buffer back exactly once, as soon
/// as the store is done with it. Returns the outcome and the pack's length.
fn store_pack(
    store: &dyn Store,
    crypto: &Crypto,
    mut bytes: Vec<u8>,
    (entries, crcs, total, hasher): (&[PackEntry], &[u32], u64, PackHasher),
    trace: &Trace,
    release: &mut dyn FnMut(Vec<u8>),
) -> (Stored, u64) {
    trace.event('<');
    let sealed = verify_and_finish(crypto, &mut bytes, (entries, crcs, total, hasher), trace);
    let len = bytes.len() as u64;
    let id = match sealed {
        Ok(id) => id,
        Err(e) => {
            release(bytes);
            trace.event('>');
            return (Err(e), len);
        }
    };
    trace.event('S');
    let result = store.put_releasing(&id.object_name(), bytes, release);
    trace.event('>');
    (result.map(|()| id).map_err(Error::Store), len)
}

/// Checks every blob's CRC over the pack buffer, then seals the TOC and finishes the pack's
/// hash: the pack's id.
fn verify_and_finish(
    crypto: &Crypto,
    bytes: &mut Vec<u8>,
    (entries, crcs, total, hasher): (&[PackEntry], &[u32], u64, PackHasher),
    trace: &Trace,
) -> Stored {
    for (e, crc) in entries.iter().zip(crcs) {
        let blob = &bytes[e.offset as usize..(e.offset + e.len) as usize];
        if crc32fast::hash(blob) != *crc {
            return Err(Error::corrupt(
                format!("chunk {}", e.id),
                "it changed in memory between encryption and store (faulty RAM?); nothing was written",
            ));
        }
    }
    // The blobs were hashed as they were appended; the CRCs just checked say the bytes are
    // still the ones that were sealed (and hashed), so what is named is what is written.
    trace.event('H');
    format::finish_hashed(crypto, bytes, entries, total, hasher)
}

impl PackWriter {
    pub fn new(
        store: Arc<dyn Store>,
        crypto: Arc<Crypto>,
        index: ChunkIndex,
        opts: PackOptions,
    ) -> Self {
        let pacer = (opts.paced && opts.async_store).then(|| Pacer::new(opts.target_size));
        opts.trace.timed('B');
        Self {
            store,
            crypto,
            index,
            opts,
            buf: Vec::new(),
            hasher: None,
            entries: Vec::new(),
            crcs: Vec::new(),
            in_flight: VecDeque::new(),
            pool: Arc::default(),
            buffers: 0,
            pacer,
            segment: 0,
            broken: None,
            stats: WriterStats::default(),
        }
    }

    pub fn index(&self) -> &ChunkIndex {
        &self.index
    }

    /// Mutable access for the owner of the write session (index persistence). Pending entries
    /// stay this writer's business: callers only settle what they persist.
    pub fn index_mut(&mut self) -> &mut ChunkIndex {
        &mut self.index
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// Pack buffers held: the one being filled, those out with stores, those given back.
    pub fn buffers(&self) -> usize {
        self.buffers
    }

    /// Bytes buffered in the pack being built.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether adding a blob will hand the pack being built to storage first (it reached the
    /// target).
    pub fn fills_pack(&self) -> bool {
        !format::has_room(self.opts.target_size, self.blobs_len(), self.entries.len())
    }

    /// Bytes of blobs in the pack being built.
    fn blobs_len(&self) -> usize {
        self.buf.len().saturating_sub(MAGIC.len())
    }

    pub fn is_async(&self) -> bool {
        self.opts.async_store
    }

    pub fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    fn usable(&self) -> Result<()> {
        match &self.broken {
            Some(msg) => Err(Error::WriterBroken(msg.clone())),
            None => Ok(()),
        }
    }

    /// Appends a sealed chunk blob whose CRC-32 is taken now (blobs copied from other packs,
    /// whose authenticity was checked). See [`add_checked`](Self::add_checked).
    pub fn add(&mut self, id: ChunkId, plain_len: u32, blob: &[u8]) -> Result<bool> {
        self.add_checked(id, plain_len, blob, crc32fast::hash(blob))
    }

    /// Appends a sealed chunk blob of `plain_len` plaintext bytes, with the CRC-32 computed
    /// right after it was encrypted. Returns `false` (and does nothing) when the index already
    /// knows `id`. When the pack being built has reached the target, it is handed to the
    /// store thread ([`format::full_len`]: filler and TOC make its size one of a few) before
    /// the blob starts the next one. Handing off first joins the previous store: that is where
    /// a previous pack's error surfaces.
    pub fn add_checked(
        &mut self,
        id: ChunkId,
        plain_len: u32,
        blob: &[u8],
        crc: u32,
    ) -> Result<bool> {
        self.usable()?;
        if self.index.contains(&id) {
            return Ok(false);
        }
        if blob.len() < blob::OVERHEAD || plain_len as usize > blob::MAX_PLAIN_LEN {
            return Err(Error::invalid("blob does not match its length"));
        }
        if self.fills_pack() {
            self.hand_off()?;
        }
        let need = format::pack_len(self.blobs_len() + blob.len(), self.entries.len() + 1);
        if need as u64 > format::MAX_PACK_LEN {
            return Err(Error::invalid("pack would exceed the largest pack size"));
        }
        if self.buf.is_empty() {
            if let Some(p) = &mut self.pacer {
                p.pack_started();
            }
            self.buf = self.next_buffer()?;
            self.buf.clear();
            // Room for a full pack, the one blob that crosses the target, its filler and the
            // TOC: exactly, so the buffer never doubles on the last blob (a third pack-sized
            // allocation). A session's last pack may grow once more when it is padded.
            let target = self.opts.target_size.min(MAX_PACK_SIZE);
            let largest =
                blob::sealed_len(crate::format::compress::max_compressed_len(LARGEST_CHUNK));
            let room = format::pack_len(target + largest, TOC_ROOM_ENTRIES)
                + format::full_step(target) as usize;
            self.buf.reserve_exact(room.max(need));
            self.buf.extend_from_slice(&MAGIC);
            let mut h = self.crypto.pack_hasher();
            h.update(&MAGIC);
            self.hasher = Some(h);
        } else if need > self.buf.capacity() {
            self.buf.reserve_exact(need - self.buf.len());
        }
        self.index.insert_pending(id, blob.len() as u32, plain_len);
        self.entries.push(PackEntry {
            id,
            kind: BlobKind::Chunk,
            offset: self.buf.len() as u32,
            len: blob.len() as u32,
            plain_len,
        });
        self.crcs.push(crc);
        self.buf.extend_from_slice(blob);
        if let Some(h) = &mut self.hasher {
            h.update(blob);
        }
        Ok(true)
    }

    /// Sends the full buffer to storage: joins the previous store first (the oldest, when the
    /// pipeline is full), then spawns the store thread, or stores inline when synchronous.
    fn hand_off(&mut self) -> Result<()> {
        let natural = format::pack_len(self.blobs_len(), self.entries.len());
        let total = format::full_len(self.opts.target_size, natural);
        self.segment += total;
        let (bytes, entries, crcs, hasher) = self.take_pack();
        self.stats.handoffs += 1;
        let room = match &mut self.pacer {
            _ if !self.opts.async_store => 1,
            Some(p) => p.handed_off(&self.opts.trace),
            None => self.opts.max_in_flight.max(1),
        };
        while self.in_flight.len() >= room {
            let waiting = std::time::Instant::now();
            let joined = self.join_oldest();
            if let Some(p) = &mut self.pacer {
                p.waited_for_store(waiting.elapsed());
            }
            if let Err(e) = joined {
                self.index.rollback(entries.iter().map(|e| &e.id));
                return Err(e);
            }
        }
        if !self.opts.async_store {
            return self.store_inline(bytes, entries, (crcs, total, hasher));
        }
        self.spawn_store(bytes, entries, (crcs, total, hasher), false)
    }

    /// Starts a thread that stores a pack (a barrier's `closing` one, or a full one), and
    /// puts it in flight.
    fn spawn_store(
        &mut self,
        bytes: Vec<u8>,
        entries: Vec<PackEntry>,
        (crcs, total, hasher): (Vec<u32>, u64, PackHasher),
        closing: bool,
    ) -> Result<()> {
        let store = Arc::clone(&self.store);
        let crypto = Arc::clone(&self.crypto);
        let trace = self.opts.trace.clone();
        let thread_entries = entries.clone();
        let pool = Arc::clone(&self.pool);
        let spawned = std::thread::Builder::new()
            .name("cairn-pack-store".into())
            .spawn(move || {
                let mut lender = Lender::new(pool);
                let started = std::time::Instant::now();
                let (result, len) = store_pack(
                    &*store,
                    &crypto,
                    bytes,
                    (&thread_entries, &crcs, total, hasher),
                    &trace,
                    &mut |b| lender.give(b),
                );
                (result, len, started.elapsed().as_secs_f64())
            });
        match spawned {
            Ok(handle) => {
                self.in_flight.push_back(InFlight {
                    handle,
                    entries,
                    closing,
                });
                Ok(())
            }
            Err(e) => {
                // The closure, and the buffer with it, is gone.
                self.buffers = self.buffers.saturating_sub(1);
                self.index.rollback(entries.iter().map(|e| &e.id));
                self.fail(format!("cannot start the pack store thread: {e}"));
                Err(Error::WriterBroken(format!(
                    "cannot start the pack store thread: {e}"
                )))
            }
        }
    }

    /// The pack being built, taken out of the writer: its bytes, entries, CRCs, and hasher
    /// (which has taken every byte).
    fn take_pack(&mut self) -> (Vec<u8>, Vec<PackEntry>, Vec<u32>, PackHasher) {
        let bytes = mem::take(&mut self.buf);
        let hasher = self.hasher.take().unwrap_or_else(|| {
            let mut h = self.crypto.pack_hasher();
            h.update(&bytes);
            h
        });
        (
            bytes,
            mem::take(&mut self.entries),
            mem::take(&mut self.crcs),
            hasher,
        )
    }

    /// Stores a pack in the calling thread and applies the outcome.
    fn store_inline(
        &mut self,
        bytes: Vec<u8>,
        entries: Vec<PackEntry>,
        (crcs, total, hasher): (Vec<u32>, u64, PackHasher),
    ) -> Result<()> {
        let pool = Arc::clone(&self.pool);
        let (result, len) = store_pack(
            &*self.store,
            &self.crypto,
            bytes,
            (&entries, &crcs, total, hasher),
            &self.opts.trace,
            &mut |b| pool.give(b),
        );
        self.complete(result, entries, len)
    }

    /// A buffer for the next pack: one a store gave back, or a new one while the writer holds
    /// fewer than `max_buffers`; otherwise it waits for the oldest store to give its buffer
    /// back (or to end).
    fn next_buffer(&mut self) -> Result<Vec<u8>> {
        let mut waited = false;
        loop {
            let mut pool = self.pool.lock();
            self.buffers = self.buffers.saturating_sub(mem::take(&mut pool.lost));
            if let Some(buf) = pool.free.pop() {
                drop(pool);
                if waited {
                    self.opts.trace.timed('w');
                }
                return Ok(buf);
            }
            let room = self.opts.max_buffers.is_none_or(|max| self.buffers < max);
            if room || self.in_flight.is_empty() {
                drop(pool);
                if waited {
                    self.opts.trace.timed('w');
                }
                self.buffers += 1;
                return Ok(Vec::new());
            }
            if !waited {
                self.opts.trace.timed('W');
                waited = true;
            }
            if self
                .in_flight
                .front()
                .is_some_and(|f| f.handle.is_finished())
            {
                drop(pool);
                let joined = self
                    .collect()
                    .map(|(r, entries, len)| self.complete(r, entries, len));
                if let Some(Err(e)) = joined {
                    self.opts.trace.timed('w');
                    return Err(e);
                }
                continue;
            }
            // A thread's end is noticed by the timeout (it wakes the pool just before it ends).
            self.pool.wait(pool, Duration::from_millis(5));
        }
    }

    /// Waits for the oldest in-flight store, if any, and returns its outcome with its entries
    /// and the pack's length.
    fn collect(&mut self) -> Option<(Stored, Vec<PackEntry>, u64)> {
        let f = self.in_flight.pop_front()?;
        let (result, len, secs) = f.handle.join().unwrap_or_else(|_| {
            let e = StoreError::Io {
                name: "pack".into(),
                source: std::io::Error::other("the pack store thread panicked"),
            };
            (Err(Error::Store(e)), 0, 0.0)
        });
        if let (Some(p), true, false) = (&mut self.pacer, result.is_ok(), f.closing) {
            p.stored(secs);
        }
        Some((result, f.entries, len))
    }

    /// Applies a store outcome to the index: settle on success, roll back on failure.
    fn settle(&mut self, result: Stored, entries: &[PackEntry], len: u64) -> Result<()> {
        match result {
            Ok(pack) => {
                self.index.settle(pack, entries);
                self.stats.packs += 1;
                self.stats.pack_bytes += len;
                self.stats.blobs += entries.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.index.rollback(entries.iter().map(|e| &e.id));
                Err(e)
            }
        }
    }

    /// Marks the writer broken and discards the buffer's pending chunks.
    fn fail(&mut self, msg: String) {
        self.crcs.clear();
        let buffered = mem::take(&mut self.entries);
        self.index.rollback(buffered.iter().map(|e| &e.id));
        self.buf.clear();
        self.hasher = None;
        // The first failure is the one worth reporting.
        self.broken.get_or_insert(msg);
    }

    /// Like `settle`, and a failure breaks the writer.
    fn complete(&mut self, result: Stored, entries: Vec<PackEntry>, len: u64) -> Result<()> {
        self.settle(result, &entries, len)
            .inspect_err(|e| self.fail(e.to_string()))
    }

    /// Joins the oldest in-flight store and applies its result.
    fn join_oldest(&mut self) -> Result<()> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        self.opts.trace.timed('W');
        let collected = self.collect();
        self.opts.trace.timed('w');
        match collected {
            None => Ok(()),
            Some((result, entries, len)) => self.complete(result, entries, len),
        }
    }

    /// Joins every in-flight store, oldest first, and applies their results: stored packs are
    /// recorded even after an earlier one failed. Returns the first error.
    fn join(&mut self) -> Result<()> {
        let mut first = Ok(());
        while !self.in_flight.is_empty() {
            let r = self.join_oldest();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Barrier: joins the in-flight store and stores the buffer synchronously. Afterwards no
    /// entry is pending and every stored chunk is in a durable pack.
    pub fn flush(&mut self) -> Result<()> {
        self.usable()?;
        self.opts.trace.timed('F');
        let flushed = self.barrier();
        self.opts.trace.timed('f');
        // The barrier (its waits, the partial pack's store) and whatever the caller does after
        // it (a checkpoint writes an index fragment) is not time spent filling packs: the
        // next pack's filling time starts with its first blob.
        if let Some(p) = &mut self.pacer {
            p.went_idle();
        }
        flushed
    }

    /// Joins every store, then stores the pack being built as the session's last: its filler
    /// brings the packs stored since the previous barrier to their bucket.
    ///
    /// For a paced remote store the closing pack is stored beside the packs still in flight,
    /// not after them: they share the link and end together, and the closing pack stored
    /// after them left the link idle while it was opened. Its buffer is held either way.
    fn barrier(&mut self) -> Result<()> {
        if self.pacer.is_some() && !self.entries.is_empty() {
            let (bytes, entries, crcs, hasher, total) = self.closing_pack();
            if let Err(e) = self.spawn_store(bytes, entries, (crcs, total, hasher), true) {
                // Nothing is left pending: the stores in flight are joined (and recorded)
                // before the error is returned.
                let _ = self.join();
                return Err(e);
            }
        }
        self.join()?;
        if !self.entries.is_empty() {
            let (bytes, entries, crcs, hasher, total) = self.closing_pack();
            self.store_inline(bytes, entries, (crcs, total, hasher))?;
        }
        self.segment = 0;
        self.keep_one_spare();
        debug_assert_eq!(self.index.pending_count(), 0);
        Ok(())
    }

    /// The pack being built, taken out as the segment's last, with its length: its filler
    /// brings the packs stored since the previous barrier to their bucket.
    fn closing_pack(&mut self) -> (Vec<u8>, Vec<PackEntry>, Vec<u32>, PackHasher, u64) {
        let natural = format::pack_len(self.blobs_len(), self.entries.len());
        let total = format::closing_len(&self.crypto, self.opts.target_size, self.segment, natural);
        let (bytes, entries, crcs, hasher) = self.take_pack();
        (bytes, entries, crcs, hasher, total)
    }

    /// After a barrier every store has ended and given its buffer back: one is kept for the
    /// next pack, the rest freed (a paced remote store may have had 16 out), so that memory
    /// between checkpoints is one pack's, not the session's peak.
    fn keep_one_spare(&mut self) {
        let mut pool = self.pool.lock();
        let extra = pool.free.len().saturating_sub(1);
        pool.free.truncate(1);
        self.buffers = self.buffers.saturating_sub(extra);
    }

    /// The stored blob of `id`. Buffered chunks come from memory; a chunk in flight waits for
    /// its store to finish first (read barrier).
    pub fn read_blob(&mut self, id: &ChunkId) -> Result<Vec<u8>> {
        self.usable()?;
        match self.index.get(id) {
            None => return Err(Error::invalid(format!("chunk {id} is not in the index"))),
            Some(Location::Pending(_)) => {
                if let Some(e) = self.entries.iter().find(|e| e.id == *id) {
                    let start = e.offset as usize;
                    return Ok(self.buf[start..start + e.len as usize].to_vec());
                }
                self.join()?;
            }
            Some(Location::Stored(_)) => {}
        }
        let (pack, loc) = self
            .index
            .stored(id)
            .ok_or_else(|| Error::invalid(format!("chunk {id} is not in the index")))?;
        Ok(self.store.get(
            &pack.object_name(),
            Some(ByteRange::new(u64::from(loc.offset), u64::from(loc.len))),
        )?)
    }

    /// Ends the writer without failing: joins the in-flight store (recorded if stored, rolled
    /// back if not) and discards buffered chunks. Returns the index, in which nothing is
    /// pending, and what happened. Call [`flush`](Self::flush) first on the success path.
    pub fn close(mut self) -> (ChunkIndex, CloseReport) {
        let mut report = CloseReport::default();
        while let Some((result, entries, len)) = self.collect() {
            if let Err(e) = self.settle(result, &entries, len) {
                report.store_error.get_or_insert(e);
            }
        }
        let buffered = mem::take(&mut self.entries);
        self.crcs.clear();
        report.discarded = self.index.rollback(buffered.iter().map(|e| &e.id));
        self.buf = Vec::new();
        self.hasher = None;
        if self.stats.packs > 0 && matches!(self.opts.trace, Trace::Stderr | Trace::StderrTimed(_))
        {
            crate::say!();
        }
        (mem::take(&mut self.index), report)
    }
}

impl Drop for PackWriter {
    /// An abandoned writer still waits for its store thread, so no pack is written after the
    /// command has given up; it never panics.
    fn drop(&mut self) {
        for f in self.in_flight.drain(..) {
            let _ = f.handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A barrier's closing pack is stored beside the packs in flight but, often far smaller
    /// than a full pack (a checkpoint's may hold one chunk), its store's time would drive the
    /// pacer's shortest store, and so the packs in flight, down for the rest of the session:
    /// the pacer does not learn from it.
    #[test]
    fn a_closing_pack_does_not_teach_the_pacer() {
        let store = Arc::new(crate::store::mem::MemStore::new());
        let opts = PackOptions {
            paced: true,
            ..PackOptions::new(3000)
        };
        assert!(opts.async_store);
        let crypto = Arc::new(Crypto::random_for_tests());
        let mut w = PackWriter::new(store.clone(), crypto, ChunkIndex::new(), opts);
        w.add(ChunkId([7; 32]), 100, &[1; 100]).unwrap();
        w.flush().unwrap();
        assert!(matches!(
            w.index().get(&ChunkId([7; 32])),
            Some(Location::Stored(_))
        ));
        assert_eq!(store.list("packs").unwrap().len(), 1);
        let pacer = w.pacer.as_ref().unwrap();
        assert_eq!(pacer.shortest_store(), None);
    }

    #[test]
    fn only_remote_stores_are_paced_and_the_environment_fixes_it() {
        let t = PackTuning::default();
        // A local disk: the seed's one pack in flight, with its own buffer.
        assert!(!t.options(1000, false).paced);
        assert_eq!(t.options(1000, false).max_in_flight, 1);
        assert_eq!(t.options(1000, false).max_buffers, None);
        assert!(t.options(1000, true).paced);
        assert_eq!(t.options(1000, true).max_buffers, None);
        let fixed = PackTuning {
            max_in_flight: Some(3),
            ..PackTuning::default()
        };
        let o = fixed.options(1000, true);
        assert!(!o.paced);
        assert_eq!(o.max_in_flight, 3);
        let o = fixed.options(1000, false);
        assert_eq!((o.max_in_flight, o.max_buffers), (3, None));
        // `CAIRN_PACK_INFLIGHT=2:2`: two within two buffers.
        let overlap = PackTuning {
            max_in_flight: Some(2),
            max_buffers: Some(2),
            ..PackTuning::default()
        };
        let o = overlap.options(1000, false);
        assert_eq!((o.max_in_flight, o.max_buffers), (2, Some(2)));
    }
}
