//! One way to wrap a store (restic's `Unwrapper` is the model). A decorator (the operation
//! log, the slow-store emulation, fault injection, the reserve's release, warmed listings)
//! implements [`Wrapper`], not [`Store`]: every method forwards to the wrapped store unless
//! the decorator says otherwise, and the one [`Store`] impl below passes every call through
//! the decorator. A method added to [`Store`] is added here once, with its forwarding
//! default, and so reaches every decorator by construction; none can forget it and silently
//! answer with a default of its own.
//!
//! [`Wrapper::put_releasing`] and [`Wrapper::get_into`] have no default. A decorator that
//! changes `put` must say what happens to a put whose bytes come back early (a forward would
//! bypass its `put`; a `put` followed by the release would never give the bytes back early).
//! One that changes `get` must answer `get_into` through it (a forward would bypass it),
//! and one that does not must forward it (an answer through `get` would never reach the
//! backend that reuses the buffer).

use std::sync::Arc;

use super::{ByteRange, ObjectInfo, Release, Store, StoreResult};

/// A store that wraps another (see the module doc).
pub trait Wrapper: Send + Sync {
    /// The store wrapped.
    fn inner(&self) -> &Arc<dyn Store>;

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.inner().put(name, data)
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()>;

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.inner().create_new(name, data)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.inner().get(name, range)
    }

    /// No default, as for `put_releasing`: a decorator that changes `get` answers through
    /// it (a forward would bypass it); one that does not forwards, so that the buffer given
    /// reaches the backend that reuses it.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()>;

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        self.inner().get_bounded(name, max)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        self.inner().list(prefix)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.inner().delete(name)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.inner().info(name)
    }

    fn is_remote(&self) -> bool {
        self.inner().is_remote()
    }

    fn has_lane(&self) -> bool {
        self.inner().has_lane()
    }

    fn append_only(&self) -> bool {
        self.inner().append_only()
    }

    /// The wrapped store's lane, wrapped by [`Wrapper::wrap_lane`].
    fn lane(&self) -> Option<Arc<dyn Store>> {
        self.inner().lane().map(|lane| self.wrap_lane(lane))
    }

    /// The same decorator around `lane` (sharing what it must: the log's numbering, the fault
    /// rules' count); by default the lane as it is, undecorated.
    fn wrap_lane(&self, lane: Arc<dyn Store>) -> Arc<dyn Store> {
        lane
    }
}

impl<W: Wrapper> Store for W {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        Wrapper::put(self, name, data)
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        Wrapper::put_releasing(self, name, data, release)
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        Wrapper::create_new(self, name, data)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        Wrapper::get(self, name, range)
    }

    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        Wrapper::get_into(self, name, range, buf)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        Wrapper::get_bounded(self, name, max)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        Wrapper::list(self, prefix)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        Wrapper::delete(self, name)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        Wrapper::info(self, name)
    }

    fn is_remote(&self) -> bool {
        Wrapper::is_remote(self)
    }

    fn lane(&self) -> Option<Arc<dyn Store>> {
        Wrapper::lane(self)
    }

    fn has_lane(&self) -> bool {
        Wrapper::has_lane(self)
    }

    fn append_only(&self) -> bool {
        Wrapper::append_only(self)
    }
}
