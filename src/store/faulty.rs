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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use super::OpKind;
use super::{ByteRange, ObjectInfo, Store, StoreError, StoreResult};

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
    pub kind: Option<OpKind>,
    pub fault: Fault,
}

impl Rule {
    pub fn new(selector: Selector, fault: Fault) -> Self {
        Self {
            selector,
            kind: None,
            fault,
        }
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

    /// Parses `op=N|from=N|name=S|every[:KIND]:FAULT`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = || format!("bad fault rule {spec:?}: expected SELECTOR[:KIND]:FAULT");
        let parts: Vec<&str> = spec.split(':').collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad());
        }
        let selector = match parts[0].split_once('=') {
            Some(("op", n)) => Selector::Nth(n.parse().map_err(|_| bad())?),
            Some(("from", n)) => Selector::From(n.parse().map_err(|_| bad())?),
            Some(("name", s)) => Selector::Name(s.to_string()),
            None if parts[0] == "every" => Selector::Every,
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
            _ => return Err(bad()),
        };
        Ok(Rule {
            selector,
            kind,
            fault,
        })
    }
}

pub struct FaultyStore {
    inner: Arc<dyn Store>,
    rules: Vec<Rule>,
    seq: AtomicU64,
    injected: AtomicU64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, rules: Vec<Rule>) -> Self {
        Self {
            inner,
            rules,
            seq: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Operations seen so far.
    pub fn ops(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    fn begin(&self, kind: OpKind, name: &str) -> Option<Fault> {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = self
            .rules
            .iter()
            .find(|r| r.matches(seq, kind, name))
            .map(|r| r.fault);
        if fault.is_some() {
            self.injected.fetch_add(1, Ordering::SeqCst);
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

    fn write(
        &self,
        kind: OpKind,
        name: &str,
        data: &[u8],
        op: impl Fn(&[u8]) -> StoreResult<bool>,
    ) -> StoreResult<bool> {
        match self.begin(kind, name) {
            None => op(data),
            Some(Fault::Flip) => op(&Self::flipped(data)),
            Some(Fault::Torn) => {
                let _ = self.inner.put(name, &data[..data.len() / 2]);
                Err(Self::error(Fault::Torn, name))
            }
            Some(f) => Err(Self::error(f, name)),
        }
    }
}

impl Store for FaultyStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        self.write(OpKind::Put, name, data, |d| {
            self.inner.put(name, d).map(|_| true)
        })
        .map(|_| ())
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        match self.begin(OpKind::Get, name) {
            None => self.inner.get_bounded(name, max),
            Some(Fault::Flip) => self.inner.get_bounded(name, max).map(|d| Self::flipped(&d)),
            Some(f) => Err(Self::error(f, name)),
        }
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        match self.begin(OpKind::Get, name) {
            None => self.inner.get(name, range),
            Some(Fault::Flip) => self.inner.get(name, range).map(|d| Self::flipped(&d)),
            Some(f) => Err(Self::error(f, name)),
        }
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        match self.begin(OpKind::List, prefix) {
            None | Some(Fault::Flip) => self.inner.list(prefix),
            Some(f) => Err(Self::error(f, prefix)),
        }
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        match self.begin(OpKind::Delete, name) {
            None | Some(Fault::Flip) => self.inner.delete(name),
            Some(f) => Err(Self::error(f, name)),
        }
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        match self.begin(OpKind::Info, name) {
            None | Some(Fault::Flip) => self.inner.info(name),
            Some(f) => Err(Self::error(f, name)),
        }
    }

    fn is_remote(&self) -> bool {
        self.inner.is_remote()
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
    }
}
