//! Retired packs: no pack is deleted before a record naming it is durable.
//!
//! A process can stop for an hour between any two steps, and a client whose lock another
//! client removed meanwhile may still commit an archive against packs it stored or
//! deduplicated against. Deletion therefore leaves a trace every such client can see:
//!
//! - **deleting** records (`Mode::Deleting`) name the packs a maintenance command (compact,
//!   `check --repair`) is about to delete. It writes the record, lists the archives *again*
//!   (copying out anything an archive committed since its first listing needs), verifies its
//!   lock, and only then deletes; the record goes last. So a commit that lands after that
//!   second listing, and then looks, finds the record (or the packs gone), and a commit that
//!   landed before it was seen and kept. Packs named by a deleting record are never used
//!   again: a writer leaves them out of its index, and a later maintenance run copies out
//!   what an archive needs and finishes the deletion (its author may be stopped, not dead).
//! - **deferred** records (`Mode::Deferred`) name packs retired while a broken lock's record
//!   ([`crate::repo::lock::broken`]) was younger than the grace interval: the holder of that lock may
//!   still commit against them. They are deleted by a later maintenance run once it has
//!   watched the record for the grace interval by its own clock, and only if no archive then
//!   needs them; a pack an archive needs is live again (it stays, and is indexed).
//!
//! A record is `retired/<sha256 of the object>`: `"CAIRNRT" 0x02` and the record sealed as a
//! blob of kind 5 (encrypted and authenticated, so that a host can neither read nor forge
//! one):
//!
//! ```text
//! offset  size   field
//!      0     8   magic "CAIRNRET"
//!      8     4   version (u32 LE, 1)
//!     12     1   mode: 0 deleting, 1 deferred
//!     13    16   random bytes (two runs retiring the same packs write two records)
//!     29     4   N: number of packs (u32 LE)
//!     33  32·N   pack ids
//! ```

use std::collections::HashSet;

use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind, NO_ID};
use crate::index::persist::Damage;
use crate::store::{Store, StoreError};
use crate::util::id::{sha256, PackId};
use crate::util::wire::{Decoder, Encoder};

/// Where the records live.
pub const PREFIX: &str = "retired";
/// The clear prefix of a record object.
pub const OBJECT_MAGIC: [u8; 8] = *b"CAIRNRT\x03";
const MAGIC: [u8; 8] = *b"CAIRNRET";
const VERSION: u32 = 1;
/// The largest record a reader accepts (some two million packs).
pub const MAX_OBJECT_LEN: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Being deleted now.
    Deleting,
    /// Deleted by a later run, once the grace interval has passed and no archive needs them.
    Deferred,
}

#[derive(Clone, Debug)]
pub struct Record {
    pub name: String,
    pub mode: Mode,
    pub packs: Vec<PackId>,
}

/// Seals a record of `packs`; returns its object name and bytes.
pub fn seal(crypto: &Crypto, mode: Mode, packs: &[PackId]) -> Result<(String, Vec<u8>)> {
    let mut e = Encoder::with_capacity(33 + 32 * packs.len());
    e.raw(&MAGIC)
        .u32(VERSION)
        .u8(match mode {
            Mode::Deleting => 0,
            Mode::Deferred => 1,
        })
        .raw(&rand::random::<[u8; 16]>())
        .u32(u32::try_from(packs.len()).map_err(|_| Error::invalid("too many packs to retire"))?);
    for p in packs {
        e.raw(&p.0);
    }
    let mut object = OBJECT_MAGIC.to_vec();
    object.extend_from_slice(&blob::seal_object(
        crypto,
        BlobKind::Retirement,
        &e.finish(),
        OBJECT_MAGIC.len(),
    )?);
    Ok((object_name(&object), object))
}

/// The name of a record object: `retired/<sha256 of its bytes>`.
pub fn object_name(object: &[u8]) -> String {
    format!("{PREFIX}/{}", hex::encode(sha256(object)))
}

/// Checks a record against its name, authenticates and decodes it.
pub fn open(crypto: &Crypto, name: &str, object: &[u8]) -> Result<Record> {
    if object_name(object) != name {
        return Err(Error::corrupt(
            name,
            "contents do not match the name (sha256)",
        ));
    }
    let sealed = object
        .strip_prefix(&OBJECT_MAGIC)
        .ok_or_else(|| Error::corrupt(name, "not a retirement record (bad magic)"))?;
    let plain = blob::open(crypto, BlobKind::Retirement, &NO_ID, sealed, name)?;
    let mut d = Decoder::new(&plain, name);
    d.magic(&MAGIC, "a retirement record")?;
    d.version(VERSION, "retirement record")?;
    let mode = match d.u8()? {
        0 => Mode::Deleting,
        1 => Mode::Deferred,
        _ => return Err(d.invalid("unknown retirement mode")),
    };
    d.take(16)?;
    let n = d.count(32)?;
    let mut packs = Vec::with_capacity(n);
    for _ in 0..n {
        packs.push(PackId(d.id()?));
    }
    d.expect_end()?;
    Ok(Record {
        name: name.to_string(),
        mode,
        packs,
    })
}

/// Writes a record of `packs` (durable when this returns); returns its name.
pub fn write(store: &dyn Store, crypto: &Crypto, mode: Mode, packs: &[PackId]) -> Result<String> {
    let (name, object) = seal(crypto, mode, packs)?;
    store.put(&name, &object)?;
    Ok(name)
}

/// Removes a record (one that is gone already is fine).
pub fn remove(store: &dyn Store, name: &str) -> Result<()> {
    match store.delete(name) {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every record of a repository.
#[derive(Debug, Default)]
pub struct Retired {
    pub records: Vec<Record>,
    /// Objects under `retired/` that are not authentic records: reported, and never acted on
    /// (a host that plants one cannot make anyone delete anything).
    pub damaged: Vec<Damage>,
}

impl Retired {
    /// Reads every record.
    pub fn load(store: &dyn Store, crypto: &Crypto) -> Result<Retired> {
        let mut out = Retired::default();
        for obj in store.list(PREFIX)? {
            let bytes = match store.get_bounded(&obj.name, MAX_OBJECT_LEN) {
                Ok(b) => b,
                Err(e) if e.is_not_found() => continue,
                Err(e @ StoreError::TooLarge { .. }) => {
                    out.damaged.push(Damage {
                        name: obj.name,
                        reason: e.to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match open(crypto, &obj.name, &bytes) {
                Ok(r) => out.records.push(r),
                Err(e) => out.damaged.push(Damage {
                    name: obj.name,
                    reason: e.to_string(),
                }),
            }
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn packs_of(&self, mode: Mode) -> HashSet<PackId> {
        self.records
            .iter()
            .filter(|r| r.mode == mode)
            .flat_map(|r| r.packs.iter().copied())
            .collect()
    }

    /// Packs being deleted: never used again.
    pub fn doomed(&self) -> HashSet<PackId> {
        self.packs_of(Mode::Deleting)
    }

    /// Packs waiting for the grace interval (and not being deleted).
    pub fn deferred(&self) -> HashSet<PackId> {
        let doomed = self.doomed();
        self.packs_of(Mode::Deferred)
            .into_iter()
            .filter(|p| !doomed.contains(p))
            .collect()
    }

    /// Every retired pack.
    pub fn all(&self) -> HashSet<PackId> {
        self.records
            .iter()
            .flat_map(|r| r.packs.iter().copied())
            .collect()
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn records_round_trip_and_tell_deleting_from_deferred() {
        let crypto = Crypto::random_for_tests();
        let store = MemStore::new();
        let (a, b) = (PackId([1; 32]), PackId([2; 32]));
        let doomed = write(&store, &crypto, Mode::Deleting, &[a]).unwrap();
        write(&store, &crypto, Mode::Deferred, &[a, b]).unwrap();
        let r = Retired::load(&store, &crypto).unwrap();
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.doomed(), HashSet::from([a]));
        assert_eq!(r.deferred(), HashSet::from([b]), "doomed wins");
        assert_eq!(r.all().len(), 2);
        remove(&store, &doomed).unwrap();
        remove(&store, &doomed).unwrap();
        assert_eq!(Retired::load(&store, &crypto).unwrap().doomed().len(), 0);
    }

    #[test]
    fn a_forged_or_foreign_record_is_never_acted_on() {
        let crypto = Crypto::random_for_tests();
        let store = MemStore::new();
        // Another repository's record, renamed to its own sha256: does not authenticate.
        let (name, object) = seal(
            &Crypto::random_for_tests(),
            Mode::Deleting,
            &[PackId([7; 32])],
        )
        .unwrap();
        store.put(&name, &object).unwrap();
        store.put("retired/junk", b"CAIRNRT\x02 junk").unwrap();
        let r = Retired::load(&store, &crypto).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.damaged.len(), 2);
        assert!(r.doomed().is_empty());
    }

    #[test]
    fn a_record_too_short_for_its_count_is_refused() {
        let crypto = Crypto::random_for_tests();
        let mut e = Encoder::with_capacity(64);
        e.raw(&MAGIC).u32(VERSION).u8(0).raw(&[0; 16]).u32(1000);
        let mut object = OBJECT_MAGIC.to_vec();
        object.extend_from_slice(
            &blob::seal(&crypto, BlobKind::Retirement, &NO_ID, &e.finish()).unwrap(),
        );
        assert!(open(&crypto, &object_name(&object), &object).is_err());
    }
}
