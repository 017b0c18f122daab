//! `cairn check --repository-only`: what the host of a repository can verify without the key.
//!
//! Every object but `config` and the locks is named by the sha256 of its bytes, so bit rot is
//! found by reading each object and hashing it: packs, index fragments, archives and key files.
//! On top of that, the framing that is in clear: the magic of packs, fragments and archives, a
//! pack's table-of-contents length fitting the pack, the key files and the config parsing.
//! Nothing is decrypted, so a forgery by someone who can write the repository is not found
//! here (an object forged under its own sha256 is well formed); plain `check`, with the key,
//! finds those.

use std::collections::BTreeMap;

use super::{for_each_pack, CheckReport, Severity};
use crate::archive;
use crate::crypto::keyfile::{KeyFile, MAX_KEY_FILE_LEN};
use crate::crypto::suite::PackHasher;
use crate::crypto::Suite;
use crate::error::{Error, Result};
use crate::index::fragment::{self, IndexFragment};
use crate::index::persist;
use crate::pack::format;
use crate::repo::config::{self, Config};
use crate::repo::retire;
use crate::repo::signals::Interrupt;
use crate::store::{Store, StoreError};
use crate::util::id::{sha256, ArchiveId, PackId};
use crate::util::progress::Progress;

/// Top-level names a repository holds.
const KNOWN_DIRS: [&str; 9] = [
    "keys", "packs", "index", "archives", "locks", "retired", "broken", "removed", "appended",
];

pub fn run(
    store: &dyn Store,
    threads: usize,
    progress: &Progress,
    interrupt: &Interrupt,
) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let (listed, others) = list(store, &mut report)?;
    // The config says which hash names the packs; without one, SHA-256 (every pack then
    // reads as misnamed if they are BLAKE3's, beside the config's own error).
    let mut suite = Suite::Aes256Gcm;
    match store.get_bounded(config::NAME, config::MAX_LEN as u64) {
        Ok(bytes) => match Config::parse(&bytes).and_then(|c| c.suite()) {
            Ok(s) => suite = s,
            Err(e) => report.add(Severity::Error, config::NAME, e.to_string()),
        },
        Err(e) => report.add(Severity::Error, config::NAME, e.to_string()),
    }
    for name in &others {
        interrupt.check()?;
        progress.set(|| format!("checking {name}"));
        if let Some(problem) = check_object(store, name, &mut report)? {
            report.add(Severity::Error, name, problem);
        }
    }
    for_each_pack(
        &listed,
        threads,
        (progress, "hashing"),
        interrupt,
        |pack, _| check_pack(store, suite, pack),
        |pack, result| {
            if let Some(problem) = result? {
                report.add(Severity::Error, pack.object_name(), problem);
            }
            Ok(())
        },
    )?;
    Ok(report)
}

/// Lists the repository: its packs with their sizes, and the other objects to check (the
/// config and unexpected objects are reported, not returned).
fn list(
    store: &dyn Store,
    report: &mut CheckReport,
) -> Result<(BTreeMap<PackId, u64>, Vec<String>)> {
    let mut listed: BTreeMap<PackId, u64> = BTreeMap::new();
    let mut others = Vec::new();
    for o in store.list("")? {
        let dir = o.name.split('/').next().unwrap_or_default();
        if o.name == config::NAME || o.name == crate::store::reserve::NAME {
            continue;
        }
        if dir == "packs" {
            match persist::pack_id_of(&o.name) {
                Some(id) => {
                    listed.insert(id, o.size);
                }
                None => report.add(Severity::Warning, &o.name, "unexpected object in packs/"),
            }
        } else if KNOWN_DIRS.contains(&dir) && o.name.contains('/') {
            others.push(o.name);
        } else {
            report.add(Severity::Warning, &o.name, "not part of a cairn repository");
        }
    }
    report.packs = listed.len() as u64;
    report.pack_bytes = listed.values().sum();
    Ok((listed, others))
}

/// One archive, index fragment or key file: its name against its sha256 and its clear
/// framing. Returns what is wrong with it.
fn check_object(store: &dyn Store, name: &str, report: &mut CheckReport) -> Result<Option<String>> {
    let (dir, base) = name.split_once('/').unwrap_or_default();
    // Lock objects, records of broken locks and an append-only server's records are names,
    // not contents.
    if matches!(dir, "locks" | "broken" | "removed" | "appended") {
        return Ok(None);
    }
    let max = match dir {
        "archives" => archive::MAX_OBJECT_LEN,
        "index" => fragment::MAX_OBJECT_LEN,
        "retired" => retire::MAX_OBJECT_LEN,
        _ => MAX_KEY_FILE_LEN as u64,
    };
    let bytes = match store.get_bounded(name, max) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e @ StoreError::TooLarge { .. }) => return Ok(Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    let problem = match dir {
        "archives" => {
            report.archives += 1;
            match ArchiveId::from_hex(base) {
                Ok(id) => archive::check_object(&id, &bytes).err(),
                Err(e) => Some(e),
            }
        }
        "index" => {
            if IndexFragment::object_name(&bytes) != name {
                Some(mismatch(name))
            } else {
                fragment::check_object_magic(&bytes, name).err()
            }
        }
        "retired" => {
            if retire::object_name(&bytes) != name {
                Some(mismatch(name))
            } else if !bytes.starts_with(&retire::OBJECT_MAGIC) {
                Some(crate::error::Error::corrupt(
                    name,
                    "not a retirement record (bad magic)",
                ))
            } else {
                None
            }
        }
        "keys" => {
            if hex::encode(sha256(&bytes)) != base {
                Some(mismatch(name))
            } else {
                KeyFile::parse(&bytes, name).err()
            }
        }
        _ => None,
    };
    Ok(problem.map(|e| e.to_string()))
}

/// One pack: read whole, its hash against its name, and its clear framing.
fn check_pack(store: &dyn Store, suite: Suite, pack: &PackId) -> Result<Option<String>> {
    let name = pack.object_name();
    let bytes = match format::read_whole(store, pack) {
        Ok(b) => b,
        Err(Error::Store(e)) if e.is_not_found() => {
            return Ok(Some("disappeared while checking".into()))
        }
        Err(Error::Store(e @ StoreError::TooLarge { .. })) => return Ok(Some(e.to_string())),
        Err(e) => return Err(e),
    };
    if PackHasher::digest(suite, &bytes) != pack.0 {
        return Ok(Some(format!(
            "contents do not match the pack's name ({}): the pack is damaged",
            suite.pack_hash_name()
        )));
    }
    Ok(format::check_framing(&bytes, &name)
        .err()
        .map(|e| e.to_string()))
}

fn mismatch(name: &str) -> crate::error::Error {
    crate::error::Error::corrupt(name, "contents do not match the name (sha256)")
}
