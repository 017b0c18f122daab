//! The PackWriter: assembles blobs into packs and stores each full pack in a background thread
//! while the next one is built. Its contract (from the seed change to borg 2):
//!
//! - **One pack in flight.** A full pack is handed to a store thread after the previous store
//!   is joined. The thread seals the pack's table of contents, hashes the pack (sha256 → pack
//!   id) and stores it; it never touches the [`ChunkIndex`], which belongs to the calling
//!   thread.
//! - **Pending.** A chunk that is buffered or in flight is [`Location::Pending`]. A stored
//!   pack's results are applied when its thread is joined: at the next pack boundary, at
//!   [`PackWriter::flush`], on a read barrier, or at [`PackWriter::close`].
//! - **Barrier.** `flush()` joins the in-flight store and stores the buffer synchronously;
//!   afterwards nothing is pending.
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
//! started), `H` (hashing), `S` (storing), `>` (finished) per pack to stderr.
//!
//! **Deeper pipeline (opt-in).** `CAIRN_PACK_INFLIGHT=N` (1 to 16, default 1) lets up to N
//! packs be stored at once, each in its own thread, for high-latency stores that serve
//! concurrent requests (S3, SFTP). Handing off a pack then joins the *oldest* store only when
//! N are in flight; barriers, read barriers and close join them all, oldest first, so the
//! contract above holds with "one" read as "up to N" (and a deferred error surfaces up to N
//! packs later). It costs up to N + 1 pack buffers of memory.

use std::collections::VecDeque;
use std::io::Write;
use std::mem;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::blob::{self, BlobKind};
use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::id::{ChunkId, PackId};
use crate::index::{ChunkIndex, Location};
use crate::pack::format::{self, PackEntry, MAGIC};
use crate::store::{ByteRange, Store, StoreError};

/// Default pack size target: 50 MB.
pub const DEFAULT_PACK_SIZE: usize = 50 * 1000 * 1000;
/// Largest accepted target; offsets in the index are 32-bit.
pub const MAX_PACK_SIZE: usize = 1 << 30;
/// Most packs `CAIRN_PACK_INFLIGHT` may put in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// The largest chunk a pack is sized for (the data chunker's maximum).
const LARGEST_CHUNK: usize = 8 * 1024 * 1024;
/// TOC entries a fresh pack buffer has room for before it must grow.
const TOC_ROOM_ENTRIES: usize = 2048;

/// Where trace events go.
#[derive(Clone, Default)]
pub enum Trace {
    #[default]
    Off,
    Stderr,
    /// Each event followed by the seconds since the writer started (`CAIRN_PACK_TRACE=time`,
    /// for benchmarks: `<0.480 H0.480 S0.541 >0.762 `).
    StderrTimed(std::time::Instant),
    /// Appended to a shared string (tests).
    Capture(Arc<Mutex<String>>),
}

impl Trace {
    pub fn event(&self, c: char) {
        match self {
            Trace::Off => {}
            Trace::Stderr => {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "{c}");
                let _ = e.flush();
            }
            Trace::StderrTimed(t0) => {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "{c}{:.3} ", t0.elapsed().as_secs_f64());
                let _ = e.flush();
            }
            Trace::Capture(s) => s.lock().unwrap_or_else(|p| p.into_inner()).push(c),
        }
    }
}

#[derive(Clone)]
pub struct PackOptions {
    /// A pack is handed off once it reaches this many bytes.
    pub target_size: usize,
    /// Store in a background thread (the default) or synchronously.
    pub async_store: bool,
    /// Packs that may be in flight at once when asynchronous (1: the seed's contract).
    pub max_in_flight: usize,
    pub trace: Trace,
}

impl PackOptions {
    pub fn new(target_size: usize) -> Self {
        Self {
            target_size,
            async_store: true,
            max_in_flight: 1,
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
    pub max_in_flight: usize,
    pub trace: Trace,
}

impl Default for PackTuning {
    fn default() -> Self {
        let o = PackOptions::new(0);
        Self {
            size: None,
            async_store: o.async_store,
            max_in_flight: o.max_in_flight,
            trace: o.trace,
        }
    }
}

impl PackTuning {
    /// The options for a repository whose packs are `default_size` bytes.
    pub fn options(&self, default_size: usize) -> PackOptions {
        PackOptions {
            target_size: self.size.unwrap_or(default_size),
            async_store: self.async_store,
            max_in_flight: self.max_in_flight,
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
type StoreOutcome = (Stored, Vec<u8>);

struct InFlight {
    handle: JoinHandle<StoreOutcome>,
    entries: Vec<PackEntry>,
}

pub struct PackWriter {
    store: Arc<dyn Store>,
    crypto: Arc<Crypto>,
    index: ChunkIndex,
    opts: PackOptions,
    buf: Vec<u8>,
    entries: Vec<PackEntry>,
    /// CRC-32 of each buffered blob, from when it was sealed.
    crcs: Vec<u32>,
    /// Stores running, oldest first: at most `opts.max_in_flight`.
    in_flight: VecDeque<InFlight>,
    /// Buffer returned by the last store, reused for the next pack.
    spare: Vec<u8>,
    broken: Option<String>,
    stats: WriterStats,
}

/// Verify, seal the table of contents, hash and store one pack: the store thread's whole job
/// (also run inline when synchronous).
fn store_pack(
    store: &dyn Store,
    crypto: &Crypto,
    bytes: &mut Vec<u8>,
    entries: &[PackEntry],
    crcs: &[u32],
    trace: &Trace,
) -> Stored {
    trace.event('<');
    for (e, crc) in entries.iter().zip(crcs) {
        let blob = &bytes[e.offset as usize..(e.offset + e.len) as usize];
        if crc32fast::hash(blob) != *crc {
            trace.event('>');
            return Err(Error::corrupt(
                format!("chunk {}", e.id),
                "it changed in memory between encryption and store (faulty RAM?); nothing was written",
            ));
        }
    }
    trace.event('H');
    let id = match format::finish(crypto, bytes, entries) {
        Ok(id) => id,
        Err(e) => {
            trace.event('>');
            return Err(e);
        }
    };
    trace.event('S');
    let result = store.put(&id.object_name(), bytes);
    trace.event('>');
    result.map(|()| id).map_err(Error::Store)
}

impl PackWriter {
    pub fn new(
        store: Arc<dyn Store>,
        crypto: Arc<Crypto>,
        index: ChunkIndex,
        opts: PackOptions,
    ) -> Self {
        Self {
            store,
            crypto,
            index,
            opts,
            buf: Vec::new(),
            entries: Vec::new(),
            crcs: Vec::new(),
            in_flight: VecDeque::new(),
            spare: Vec::new(),
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

    /// Bytes buffered in the pack being built.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether adding a blob of `len` bytes will hand the pack to storage.
    pub fn fills_pack(&self, len: usize) -> bool {
        self.pack_len(
            self.buf.len().max(MAGIC.len()) + len,
            self.entries.len() + 1,
        ) >= self.opts.target_size
    }

    /// The size of a pack whose blobs end at `end`, with a TOC of `n` entries: what the target
    /// is compared with, so that many small blobs cannot make a pack outgrow it by its TOC.
    fn pack_len(&self, end: usize, n: usize) -> usize {
        format::pack_len(&self.crypto, end - MAGIC.len(), n)
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

    /// Bytes a pack buffer needs for `blobs` bytes of blobs and a TOC of `n` entries.
    fn room(&self, blobs: usize, n: usize) -> usize {
        format::pack_len(&self.crypto, blobs, n)
    }

    /// Appends a sealed chunk blob of `plain_len` plaintext bytes, with the CRC-32 computed
    /// right after it was encrypted. Returns `false` (and does nothing) when the index already
    /// knows `id`. When the pack is full it is handed to the store thread, which first joins
    /// the previous store: that is where a previous pack's error surfaces.
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
        if self.buf.is_empty() {
            self.buf = mem::take(&mut self.spare);
            self.buf.clear();
            // Room for a full pack, the one blob that crosses the target and the TOC: exactly,
            // so the buffer never doubles on the last blob (a third pack-sized allocation).
            let largest = blob::sealed_len(
                &self.crypto,
                crate::compress::max_compressed_len(LARGEST_CHUNK),
            );
            let room = self.room(
                self.opts.target_size.min(MAX_PACK_SIZE) + largest,
                TOC_ROOM_ENTRIES,
            );
            self.buf.reserve_exact(room);
            self.buf.extend_from_slice(&MAGIC);
        }
        let need = self.room(
            self.buf.len() - MAGIC.len() + blob.len(),
            self.entries.len() + 1,
        );
        if need > u32::MAX as usize {
            return Err(Error::invalid("pack would exceed 4 GiB"));
        }
        if need > self.buf.capacity() {
            // Many small blobs (a TOC larger than planned for) or a blob larger than any
            // chunk: grow by what that needs, with room for as many entries again.
            let more = self.room(
                self.buf.len() - MAGIC.len() + blob.len(),
                2 * self.entries.len() + 2,
            );
            self.buf.reserve_exact(more - self.buf.len());
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
        if self.pack_len(self.buf.len(), self.entries.len()) >= self.opts.target_size {
            self.hand_off()?;
        }
        Ok(true)
    }

    /// Sends the full buffer to storage: joins the previous store first (the oldest, when the
    /// pipeline is full), then spawns the store thread, or stores inline when synchronous.
    fn hand_off(&mut self) -> Result<()> {
        let bytes = mem::take(&mut self.buf);
        let entries = mem::take(&mut self.entries);
        let crcs = mem::take(&mut self.crcs);
        self.stats.handoffs += 1;
        let room = if self.opts.async_store {
            self.opts.max_in_flight.max(1)
        } else {
            1
        };
        while self.in_flight.len() >= room {
            if let Err(e) = self.join_oldest() {
                self.index.rollback(entries.iter().map(|e| &e.id));
                return Err(e);
            }
        }
        if !self.opts.async_store {
            return self.store_inline(bytes, entries, crcs);
        }
        let store = Arc::clone(&self.store);
        let crypto = Arc::clone(&self.crypto);
        let trace = self.opts.trace.clone();
        let thread_entries = entries.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-pack-store".into())
            .spawn(move || {
                let mut bytes = bytes;
                let result =
                    store_pack(&*store, &crypto, &mut bytes, &thread_entries, &crcs, &trace);
                (result, bytes)
            });
        match spawned {
            Ok(handle) => {
                self.in_flight.push_back(InFlight { handle, entries });
                Ok(())
            }
            Err(e) => {
                self.index.rollback(entries.iter().map(|e| &e.id));
                self.fail(format!("cannot start the pack store thread: {e}"));
                Err(Error::WriterBroken(format!(
                    "cannot start the pack store thread: {e}"
                )))
            }
        }
    }

    /// Stores a pack in the calling thread and applies the outcome.
    fn store_inline(
        &mut self,
        mut bytes: Vec<u8>,
        entries: Vec<PackEntry>,
        crcs: Vec<u32>,
    ) -> Result<()> {
        let result = store_pack(
            &*self.store,
            &self.crypto,
            &mut bytes,
            &entries,
            &crcs,
            &self.opts.trace,
        );
        self.complete(result, entries, bytes)
    }

    /// Waits for the oldest in-flight store, if any, and returns its outcome with its entries.
    fn collect(&mut self) -> Option<(Stored, Vec<PackEntry>, Vec<u8>)> {
        let f = self.in_flight.pop_front()?;
        let (result, bytes) = f.handle.join().unwrap_or_else(|_| {
            let e = StoreError::Io {
                name: "pack".into(),
                source: std::io::Error::other("the pack store thread panicked"),
            };
            (Err(Error::Store(e)), Vec::new())
        });
        Some((result, f.entries, bytes))
    }

    /// Applies a store outcome to the index: settle on success, roll back on failure.
    fn settle(&mut self, result: Stored, entries: &[PackEntry], bytes: Vec<u8>) -> Result<()> {
        let len = bytes.len() as u64;
        self.spare = bytes;
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
        // The first failure is the one worth reporting.
        self.broken.get_or_insert(msg);
    }

    /// Like `settle`, and a failure breaks the writer.
    fn complete(&mut self, result: Stored, entries: Vec<PackEntry>, bytes: Vec<u8>) -> Result<()> {
        self.settle(result, &entries, bytes)
            .inspect_err(|e| self.fail(e.to_string()))
    }

    /// Joins the oldest in-flight store and applies its result.
    fn join_oldest(&mut self) -> Result<()> {
        match self.collect() {
            None => Ok(()),
            Some((result, entries, bytes)) => self.complete(result, entries, bytes),
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
        self.join()?;
        if !self.entries.is_empty() {
            let bytes = mem::take(&mut self.buf);
            let entries = mem::take(&mut self.entries);
            let crcs = mem::take(&mut self.crcs);
            self.store_inline(bytes, entries, crcs)?;
        }
        debug_assert_eq!(self.index.pending_count(), 0);
        Ok(())
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
        while let Some((result, entries, bytes)) = self.collect() {
            if let Err(e) = self.settle(result, &entries, bytes) {
                report.store_error.get_or_insert(e);
            }
        }
        let buffered = mem::take(&mut self.entries);
        self.crcs.clear();
        report.discarded = self.index.rollback(buffered.iter().map(|e| &e.id));
        self.buf = Vec::new();
        if self.stats.packs > 0 && matches!(self.opts.trace, Trace::Stderr | Trace::StderrTimed(_))
        {
            eprintln!();
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
