//! Fault injection for tests (the `testing` feature): fail chosen store operations with
//! ENOSPC, EIO or a torn write, or flip a bit in what is written or read.
//!
//! Operations are numbered from 1 in the order they reach this wrapper (all kinds counted),
//! as [`super::logged::LoggedStore`] numbers them in its log. A rule selects operations by
//! number (`op=N`), from a number on (`from=N`, a crash: the process lost its storage), by a
//! substring of the object name (`name=S`), and optionally by kind (`put`, `get`, …). From
//! the environment (read by the command line): `CAIRN_FAULT="op=7:enospc,name=index/:eio"`.
//! A test counts the operations of a clean run with `CAIRN_STORE_LOG`, then fails each one in
//! turn.
//!
//! A rule can also stop the whole process (SIGSTOP) right before or right after the operation
//! it selects (`pause`, `pause-after`): the test then acts as another client would while this
//! one is frozen, and lets it go on with SIGCONT. `suspend` and `suspend-after` play a
//! suspended machine rather than a stopped process: the time stopped is taken out of the
//! monotonic clock's view ([`crate::util::clock::Mono`]), as a real suspend does. `@N` after a
//! selector picks the N-th operation it matches (`name=archives/@1:put:pause`); a pause with
//! no `@N` fires at the first match only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use super::OpKind;

use super::{ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// ENOSPC: nothing written.
    NoSpace,
    /// EIO: nothing written.
    Eio,
    /// A put leaves the first half of the data under the final name, then fails: what a
    /// non-atomic backend leaves after a crash mid-write.
    Torn,
    /// The operation succeeds but one bit of the data written or read is flipped.
    Flip,
    /// The process stops (SIGSTOP) before the operation (`after`: once it is done) until a
    /// SIGCONT; `suspend` takes the time stopped out of the monotonic clock's view.
    Pause { after: bool, suspend: bool },
}

impl Fault {
    fn pause(self) -> Option<(bool, bool)> {
        match self {
            Fault::Pause { after, suspend } => Some((after, suspend)),
            _ => None,
        }
    }
}

/// Stops this process until someone sends it SIGCONT. With `suspend`, the time it was stopped
/// is counted as a suspend of the machine.
fn stop_here(suspend: bool) {
    let before = crate::util::clock::since_boot();
    // To this thread: it takes the stop itself before it runs another line. Sent to the
    // process, another thread could take it and stop the rest while this one went on into
    // its next store operation (seen: a lock read back after the pause that was to precede
    // it).
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    if suspend {
        crate::util::clock::suspended(crate::util::clock::since_boot().saturating_sub(before));
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Nth(u64),
    From(u64),
    Name(String),
    Every,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub selector: Selector,
    /// Fire only at the N-th operation the selector and kind match (from 1).
    pub occurrence: Option<u64>,
    pub kind: Option<OpKind>,
    pub fault: Fault,
}

impl Rule {
    pub fn new(selector: Selector, fault: Fault) -> Self {
        Self {
            selector,
            occurrence: None,
            kind: None,
            fault,
        }
    }

    /// Fires only at the `n`-th operation it matches.
    pub fn nth_match(mut self, n: u64) -> Self {
        self.occurrence = Some(n);
        self
    }

    pub fn only(mut self, kind: OpKind) -> Self {
        self.kind = Some(kind);
        self
    }

    fn matches(&self, seq: u64, kind: OpKind, name: &str) -> bool {
        if self.kind.is_some_and(|k| k != kind) {
            return false;
        }
        match &self.selector {
            Selector::Nth(n) => seq == *n,
            Selector::From(n) => seq >= *n,
            Selector::Name(s) => name.contains(s.as_str()),
            Selector::Every => true,
        }
    }

    /// Parses `op=N|from=N|name=S|every[@N][:KIND]:FAULT`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = || format!("bad fault rule {spec:?}: expected SELECTOR[@N][:KIND]:FAULT");
        let parts: Vec<&str> = spec.split(':').collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad());
        }
        let (select, occurrence) = match parts[0].rsplit_once('@') {
            Some((s, n)) => (
                s,
                Some(n.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(bad)?),
            ),
            None => (parts[0], None),
        };
        let selector = match select.split_once('=') {
            Some(("op", n)) => Selector::Nth(n.parse().map_err(|_| bad())?),
            Some(("from", n)) => Selector::From(n.parse().map_err(|_| bad())?),
            Some(("name", s)) => Selector::Name(s.to_string()),
            None if select == "every" => Selector::Every,
            _ => return Err(bad()),
        };
        let kind = if parts.len() == 3 {
            Some(OpKind::parse(parts[1]).ok_or_else(bad)?)
        } else {
            None
        };
        let fault = match parts[parts.len() - 1] {
            "enospc" => Fault::NoSpace,
            "eio" => Fault::Eio,
            "torn" => Fault::Torn,
            "flip" => Fault::Flip,
            "pause" | "pause-after" | "suspend" | "suspend-after" => {
                let f = parts[parts.len() - 1];
                Fault::Pause {
                    after: f.ends_with("-after"),
                    suspend: f.starts_with("suspend"),
                }
            }
            _ => return Err(bad()),
        };
        Ok(Rule {
            selector,
            occurrence,
            kind,
            fault,
        })
    }
}

pub struct FaultyStore {
    inner: Arc<dyn Store>,
    /// Shared with the lane ([`Store::lane`]): one numbering of every operation.
    state: Arc<Faults>,
}

struct Faults {
    rules: Vec<Rule>,
    /// Per rule, the operations it matched so far.
    matched: Vec<AtomicU64>,
    seq: AtomicU64,
    injected: AtomicU64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, rules: Vec<Rule>) -> Self {
        Self {
            inner,
            state: Arc::new(Faults {
                matched: rules.iter().map(|_| AtomicU64::new(0)).collect(),
                rules,
                seq: AtomicU64::new(0),
                injected: AtomicU64::new(0),
            }),
        }
    }

    /// Operations seen so far.
    pub fn ops(&self) -> u64 {
        self.state.seq.load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.state.injected.load(Ordering::SeqCst)
    }

    fn begin(&self, kind: OpKind, name: &str) -> Option<Fault> {
        let st = &self.state;
        let seq = st.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = st
            .rules
            .iter()
            .zip(&st.matched)
            .find(|(r, matched)| {
                if !r.matches(seq, kind, name) {
                    return false;
                }
                let n = matched.fetch_add(1, Ordering::SeqCst) + 1;
                // A pause stops the process once: at the first match unless told otherwise.
                let wanted = r.occurrence.or(r.fault.pause().map(|_| 1));
                wanted.is_none_or(|w| w == n)
            })
            .map(|(r, _)| r.fault);
        if fault.is_some() {
            st.injected.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    fn error(fault: Fault, name: &str) -> StoreError {
        match fault {
            Fault::NoSpace => StoreError::NoSpace {
                name: name.to_string(),
            },
            _ => StoreError::Io {
                name: name.to_string(),
                source: std::io::Error::other("injected I/O error"),
            },
        }
    }

    fn flipped(data: &[u8]) -> Vec<u8> {
        let mut v = data.to_vec();
        if !v.is_empty() {
            let i = v.len() / 2;
            v[i] ^= 0x10;
        }
        v
    }

    /// Runs `op` under the rule that selects it, if any: paused before or after, failed, or
    /// with what it read flipped (`flip` applies to reads only; writes flip in [`Self::write`]).
    fn apply<T>(
        &self,
        kind: OpKind,
        name: &str,
        op: impl FnOnce() -> StoreResult<T>,
        flip: impl FnOnce(T) -> T,
    ) -> StoreResult<T> {
        match self.begin(kind, name) {
            None => op(),
            Some(Fault::Pause { after, suspend }) => paused(after, suspend, op),
            Some(Fault::Flip) => op().map(flip),
            Some(f) => Err(Self::error(f, name)),
        }
    }

    fn write(
        &self,
        kind: OpKind,
        name: &str,
        data: &[u8],
        op: impl Fn(&[u8]) -> StoreResult<bool>,
    ) -> StoreResult<bool> {
        match self.begin(kind, name) {
            None => op(data),
            Some(Fault::Pause { after, suspend }) => paused(after, suspend, || op(data)),
            Some(Fault::Flip) => op(&Self::flipped(data)),
            Some(Fault::Torn) => {
                let _ = self.inner.put(name, &data[..data.len() / 2]);
                Err(Self::error(Fault::Torn, name))
            }
            Some(f) => Err(Self::error(f, name)),
        }
    }
}

/// `op`, with the process stopped before it or after it.
fn paused<T>(after: bool, suspend: bool, op: impl FnOnce() -> T) -> T {
    if !after {
        stop_here(suspend);
    }
    let result = op();
    if after {
        stop_here(suspend);
    }
    result
}

impl super::wrapper::Wrapper for FaultyStore {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Through this decorator's own `get`.
    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        *buf = super::wrapper::Wrapper::get(self, name, range)?;
        Ok(())
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.write(OpKind::Put, name, data, |d| {
            self.inner.put(name, d).map(|_| true)
        })
        .map(|_| ())
    }

    /// The same rules as `put`; the bytes come back when the store wrapped gives them back
    /// (early, from a local disk), or at once when a rule fails the put.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        match self.begin(OpKind::Put, name) {
            None => self.inner.put_releasing(name, data, release),
            Some(Fault::Pause { after, suspend }) => paused(after, suspend, || {
                self.inner.put_releasing(name, data, release)
            }),
            Some(Fault::Flip) => {
                let flipped = Self::flipped(&data);
                release(data);
                self.inner.put_releasing(name, flipped, &mut |_| {})
            }
            Some(Fault::Torn) => {
                let _ = self.inner.put(name, &data[..data.len() / 2]);
                release(data);
                Err(Self::error(Fault::Torn, name))
            }
            Some(f) => {
                release(data);
                Err(Self::error(f, name))
            }
        }
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.write(OpKind::Put, name, data, |d| {
            self.inner.create_new(name, d).map(|_| true)
        })
        .map(|_| ())
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        self.apply(
            OpKind::Get,
            name,
            || self.inner.get_bounded(name, max),
            |d| Self::flipped(&d),
        )
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.apply(
            OpKind::Get,
            name,
            || self.inner.get(name, range),
            |d| Self::flipped(&d),
        )
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        self.apply(OpKind::List, prefix, || self.inner.list(prefix), |l| l)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        self.apply(OpKind::Delete, name, || self.inner.delete(name), |d| d)
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        self.apply(OpKind::Info, name, || self.inner.info(name), |i| i)
    }

    /// The inner lane under the same rules, counted with every other operation.
    fn wrap_lane(&self, lane: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(FaultyStore {
            inner: lane,
            state: Arc::clone(&self.state),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn nth_operation_fails_with_the_chosen_error() {
        let mem = Arc::new(MemStore::new());
        let s = FaultyStore::new(
            mem.clone(),
            vec![Rule::new(Selector::Nth(2), Fault::NoSpace)],
        );
        s.put("a", b"1").unwrap();
        assert!(matches!(s.put("b", b"2"), Err(StoreError::NoSpace { .. })));
        s.put("c", b"3").unwrap();
        assert!(mem.get("b", None).unwrap_err().is_not_found());
        assert_eq!(s.ops(), 3);
        assert_eq!(s.injected(), 1);
    }

    /// A read into a buffer given goes through the faults as `get` does (it is not forwarded
    /// past them), and is logged as `get` is.
    #[test]
    fn a_read_into_a_buffer_meets_the_faults_and_the_log() {
        let mem = Arc::new(MemStore::new());
        mem.put("packs/x", b"0123456789").unwrap();
        let rules = vec![
            Rule::new(Selector::Nth(1), Fault::Eio),
            Rule::new(Selector::Nth(2), Fault::Flip),
        ];
        let s = FaultyStore::new(mem.clone(), rules);
        let mut buf = b"stale".to_vec();
        let range = Some(ByteRange::new(2, 4));
        assert!(Store::get_into(&s, "packs/x", range, &mut buf).is_err());
        Store::get_into(&s, "packs/x", range, &mut buf).unwrap();
        assert_eq!(buf.len(), 4);
        assert_ne!(buf, b"2345", "the flip reached the buffer");
        Store::get_into(&s, "packs/x", range, &mut buf).unwrap();
        assert_eq!(buf, b"2345");
        assert_eq!(s.injected(), 2);
        let dir = tempfile::tempdir().unwrap();
        let logged = super::super::logged::LoggedStore::new(mem, &dir.path().join("log")).unwrap();
        Store::get_into(&logged, "packs/x", range, &mut buf).unwrap();
        let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
        assert_eq!(
            log.lines().filter(|l| l.contains(" get packs/x")).count(),
            1
        );
    }

    #[test]
    fn torn_write_leaves_a_prefix_and_fails() {
        let mem = Arc::new(MemStore::new());
        let s = FaultyStore::new(
            mem.clone(),
            vec![Rule::new(Selector::Name("packs/".into()), Fault::Torn)],
        );
        assert!(s.put("packs/x", b"abcdef").is_err());
        assert_eq!(mem.get("packs/x", None).unwrap(), b"abc");
        s.put("index/y", b"ok").unwrap();
    }

    #[test]
    fn rules_parse() {
        let r = Rule::parse("op=7:enospc").unwrap();
        assert_eq!(r.selector, Selector::Nth(7));
        let r = Rule::parse("name=index/:put:eio").unwrap();
        assert_eq!(r.kind, Some(OpKind::Put));
        assert_eq!(r.fault, Fault::Eio);
        assert!(Rule::parse("op=x:eio").is_err());
        assert!(Rule::parse("op=1:boom").is_err());
        assert!(Rule::parse("from=3:get:torn").is_ok());
        let r = Rule::parse("name=archives/@2:put:suspend-after").unwrap();
        assert_eq!(r.selector, Selector::Name("archives/".into()));
        assert_eq!(r.occurrence, Some(2));
        assert_eq!(
            r.fault,
            Fault::Pause {
                after: true,
                suspend: true
            }
        );
        assert!(Rule::parse("name=x@0:pause").is_err());
        assert!(Rule::parse("name=x@y:pause").is_err());
    }

    #[test]
    fn an_occurrence_picks_the_nth_match() {
        let mem = Arc::new(MemStore::new());
        let s = FaultyStore::new(
            mem,
            vec![Rule::new(Selector::Name("index/".into()), Fault::Eio).nth_match(2)],
        );
        s.put("index/a", b"1").unwrap();
        s.put("packs/b", b"2").unwrap();
        assert!(s.put("index/c", b"3").is_err());
        s.put("index/d", b"4").unwrap();
        assert_eq!(s.injected(), 1);
    }
}
