//! The one I/O boundary of a repository: a flat namespace of immutable objects.
//!
//! Names are relative and `/`-separated (`packs/ab/ab12…`, `index/…`, `config`). Every backend
//! keeps this contract:
//! - `put` is atomic and durable: on `Ok` the whole object is stored and survives a crash; on
//!   `Err` the old state (no object, or the previous object) is what a reader sees.
//! - `get` with a range returns exactly the bytes asked for; a short object is an error
//!   ([`StoreError::Short`]), never a short `Ok`.
//! - `create_new` writes an object only where none of that name exists, atomically on every
//!   backend that can ([`Store::create_new`]); lock objects are written with it.
//! - `list` is sorted by name and never shows temporary objects.
//! - A missing object is [`StoreError::NotFound`]; a full device is [`StoreError::NoSpace`].

#[cfg(feature = "testing")]
pub mod faulty;
pub mod limit;
pub mod local;
pub mod location;
pub mod logged;
#[cfg(feature = "testing")]
pub mod mem;
#[cfg(feature = "testing")]
pub mod powercut;
pub mod reserve;
pub mod retry;
#[cfg(feature = "remote")]
pub mod s3;
#[cfg(feature = "remote")]
pub mod sftp;
pub mod slow;
pub mod ssh;
pub mod target;
pub mod warm;
pub mod wrapper;

/// The largest object a store reads whole where it asked for a range (an S3 server that
/// ignores ranges answers with the whole object). Only packs are read by ranges, and the pack
/// layer asserts that its largest pack (`pack::format::MAX_PACK_LEN`) fits under this bound.
pub const MAX_RANGED_OBJECT: u64 = 2 << 30;

use std::path::PathBuf;
use std::sync::Arc;

/// A byte range of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

impl ByteRange {
    pub fn new(offset: u64, len: u64) -> Self {
        Self { offset, len }
    }
}

/// What a listing reports of one object.
pub use crate::error::StoreError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub name: String,
    pub size: u64,
}

/// Threads for fetching many objects from `store`: [`crate::util::parallel::REMOTE_READS`] for a remote one, two for
/// a local disk (what they spend is decrypting and decoding, on two cores).
pub fn readers_for(store: &dyn Store) -> usize {
    if store.is_remote() {
        crate::util::parallel::REMOTE_READS
    } else {
        2
    }
}

/// The kinds of store operation, as logs and fault rules name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Put,
    Get,
    List,
    Delete,
    Info,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Put => "put",
            OpKind::Get => "get",
            OpKind::List => "list",
            OpKind::Delete => "delete",
            OpKind::Info => "info",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "put" => OpKind::Put,
            "get" => OpKind::Get,
            "list" => OpKind::List,
            "delete" => OpKind::Delete,
            "info" => OpKind::Info,
            _ => return None,
        })
    }
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

/// Where [`Store::put_releasing`] gives the bytes back.
pub type Release<'a> = &'a mut dyn FnMut(Vec<u8>);

/// Object store for one repository. Implementations are shared between the calling thread and
/// the pack store thread, so every method takes `&self`.
pub trait Store: Send + Sync {
    /// Atomically create or replace `name`; on `Ok` the object is durable.
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()>;
    /// [`Store::put`], taking the bytes and handing them back to `release` as soon as the
    /// store no longer needs them, which may be before the object is durable: a local disk
    /// gives them back once they are written, then syncs the file and renames it while the
    /// caller fills the buffer again. `release` is called exactly once, whatever the outcome;
    /// on `Ok` the object is durable, as with `put`. No default: every backend says when it
    /// is done with the bytes (a default that released them only at the end hid, in every
    /// test store, the early release the pack writer relies on).
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()>;
    /// Creates `name`, durable, only if no object of that name exists
    /// ([`StoreError::Exists`] otherwise): create-if-absent, decided by the backend in one
    /// step (a local `link`, SFTP's `hardlink@openssh.com` or an exclusive open, S3's
    /// `If-None-Match: *`). Lock objects are written this way, so that no lock is ever
    /// written over one that exists. Some S3 servers ignore the condition and overwrite
    /// (`docs/design.md` names them); lock names are random, so that changes nothing there.
    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()>;
    /// The whole object, or exactly `range` of it.
    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>>;
    /// [`get`](Self::get) into `buf`, whose contents it replaces: a backend that reads into
    /// memory it is given (a local disk) reuses `buf`'s, so that a caller reading many
    /// ranges one after another does not have fresh pages mapped for each (the kernel's
    /// faulting in of 16 MiB buffers was a fifth of `export-tar`'s time). On an error `buf`
    /// holds nothing of use.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        *buf = self.get(name, range)?;
        Ok(())
    }
    /// The whole object, refused before it is read ([`StoreError::TooLarge`]) when it is
    /// larger than `max` bytes: a hostile store cannot make cairn allocate gigabytes for an
    /// object that must be small (SFTP reads its first 128 KiB beside the size request, and
    /// keeps none of it when refusing). The default asks for the size first (one more
    /// request); backends that learn the size when they open the object override it.
    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        check_size(name, self.info(name)?.size, max)?;
        let data = self.get(name, None)?;
        check_size(name, data.len() as u64, max)?;
        Ok(data)
    }
    /// All objects below the directory `prefix` ("" for all), sorted by name.
    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>>;
    /// Remove `name`; a missing object is `NotFound`.
    fn delete(&self, name: &str) -> StoreResult<()>;
    /// Size of one object.
    fn info(&self, name: &str) -> StoreResult<ObjectInfo>;
    /// Whether operations cross a network (SFTP, S3), or emulate doing so: the pack writer
    /// then chooses how many packs to store at once from what the first stores take.
    fn is_remote(&self) -> bool {
        false
    }
    /// A second way to the same objects for small operations that must not wait behind bulk
    /// transfers (a lock's refresh while packs upload over a slow link): its own connection,
    /// where the backend has connections to share (SFTP: a second ssh; the slow-store
    /// emulation: a connection of its own). `None`: operations never queue behind each other
    /// here (a local disk, an S3 client that opens a connection per concurrent request).
    fn lane(&self) -> Option<Arc<dyn Store>> {
        None
    }
    /// Whether [`Store::lane`] gives a lane (without opening it): whether operations here
    /// can queue behind each other.
    fn has_lane(&self) -> bool {
        false
    }
    /// Whether the store keeps history whatever this client asks (a `cairn serve
    /// --append-only` server): deletions other than locks are refused or turned into removal
    /// records, nothing is freed. Commands that only free space say so and do nothing.
    fn append_only(&self) -> bool {
        false
    }
}

/// The store itself, or its lane for urgent small operations ([`Store::lane`]).
pub fn lane_of(store: &Arc<dyn Store>) -> Arc<dyn Store> {
    store.lane().unwrap_or_else(|| Arc::clone(store))
}

/// `range` of an object held in memory (all of it for `None`), by the contract's rules: a
/// range past the end is [`StoreError::Short`], never a short read.
pub fn read_range(name: &str, data: &[u8], range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
    let Some(r) = range else {
        return Ok(data.to_vec());
    };
    let end = r.offset.saturating_add(r.len);
    if end > data.len() as u64 {
        return Err(StoreError::Short {
            name: name.to_string(),
            wanted: end,
            got: data.len() as u64,
        });
    }
    Ok(data[r.offset as usize..end as usize].to_vec())
}

/// [`StoreError::TooLarge`] when `size` exceeds `max`.
pub fn check_size(name: &str, size: u64, max: u64) -> StoreResult<()> {
    if size > max {
        return Err(StoreError::TooLarge {
            name: name.to_string(),
            size,
            max,
        });
    }
    Ok(())
}

/// Checks an object name: relative, `/`-separated components of `[A-Za-z0-9._-]`, none empty
/// and none starting with `.` (temporary objects do, and must never be addressable).
pub fn validate_name(name: &str) -> StoreResult<()> {
    let ok = !name.is_empty()
        && name.split('/').all(|c| {
            !c.is_empty()
                && !c.starts_with('.')
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidName {
            name: name.to_string(),
        })
    }
}

/// Validates a listing prefix: "" or a valid name.
pub fn validate_prefix(prefix: &str) -> StoreResult<()> {
    if prefix.is_empty() {
        Ok(())
    } else {
        validate_name(prefix)
    }
}

/// What the command line sets up around a backend (see `crate::cli::settings`).
#[derive(Clone, Debug, Default)]
pub struct StoreSettings {
    /// Slow-store emulation (benchmarks).
    pub slow: Option<SlowSettings>,
    /// A slow disk's flush (benchmarks): each write takes this much longer, after it has given
    /// its bytes back ([`slow::SlowFlush`]).
    pub flush_delay: Option<std::time::Duration>,
    /// A file that gets one line per operation.
    pub log: Option<PathBuf>,
    /// `--limit-upload`, `--limit-download` ([`limit::LimitedStore`]).
    pub limits: limit::Limits,
    /// Faults to inject (tests).
    #[cfg(feature = "testing")]
    pub faults: Vec<faulty::Rule>,
    pub remote: RemoteSettings,
}

#[derive(Clone, Copy, Debug)]
pub struct SlowSettings {
    pub latency: std::time::Duration,
    /// Bits per second per connection; `None` is unlimited.
    pub bandwidth_bits: Option<u64>,
    pub connections: usize,
}

/// How remote backends are reached.
#[derive(Clone, Debug)]
pub struct RemoteSettings {
    /// The ssh command for SFTP and `ssh://`, as argv.
    pub rsh: Vec<String>,
    /// The program an `ssh://` location runs on the server (`CAIRN_REMOTE_PATH`, `cairn`).
    pub remote_path: String,
    pub s3_retries: usize,
    /// Plain HTTP to a non-loopback S3 endpoint.
    pub s3_allow_http: bool,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        Self {
            rsh: vec!["ssh".to_string()],
            remote_path: "cairn".to_string(),
            s3_retries: 6,
            s3_allow_http: false,
        }
    }
}

/// Wraps a backend as `settings` ask: slow-store emulation innermost, then injected faults,
/// then the operation log (which so sees every operation, failed or not, in arrival order).
pub fn wrap(inner: Arc<dyn Store>, settings: &StoreSettings) -> std::io::Result<Arc<dyn Store>> {
    let mut store = inner;
    if let Some(d) = settings.flush_delay {
        store = Arc::new(slow::SlowFlush::new(store, d));
    }
    if let Some(s) = settings.slow {
        store = Arc::new(slow::SlowStore::with_connections(
            store,
            s.latency,
            s.bandwidth_bits,
            s.connections,
        ));
    }
    if settings.limits.any() {
        store = Arc::new(limit::LimitedStore::new(store, settings.limits));
    }
    #[cfg(feature = "testing")]
    if !settings.faults.is_empty() {
        store = Arc::new(faulty::FaultyStore::new(store, settings.faults.clone()));
    }
    if let Some(path) = &settings.log {
        store = Arc::new(logged::LoggedStore::new(store, path)?);
    }
    Ok(store)
}
