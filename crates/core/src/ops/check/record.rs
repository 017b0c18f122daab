//! The verification record: when this client last read each pack whole and found it sound
//! (`check --verify-data`, whole or in slices), kept in the cache beside the files cache
//! (`<cache>/<repository id>/verified`), so that slices pick the packs verified longest ago and
//! `check` and `info` can say how much of the repository was verified, and when.
//!
//! It is kept per location (`verified-<first 16 hex of sha256(location)>`), and the location
//! is in every entry's MAC: a copy of the repository elsewhere (a mirror, a restored backup of
//! the repository) shares its id but was never read here, and starts unverified.
//!
//! It lives in the client's cache, not in the repository: a check stays a reader (it works on
//! read-only media, through an append-only server and beside a running backup, and adds no
//! object to the format), and a lost record costs only time (every pack is then never
//! verified, so the next slices start over). What it does not give: two clients that check
//! the same repository do not share it; each covers the repository on its own.
//!
//! The file is a header and then 56-byte entries, appended as each pack is verified (so that
//! an interrupted or killed check loses at most the packs in progress): the pack's id, the
//! time (seconds since the epoch, little endian) and the first 16 bytes of
//! HMAC-SHA256(key, repository id ‖ pack id ‖ time), under a key derived from the
//! repository's key. An entry that does not authenticate (forged, or torn by a crash) is
//! ignored, as is a time more than a day ahead of the clock: neither can make a pack look
//! verified when it was not. A verifying check first rewrites the file with one entry per
//! pack that still exists (temporary file and rename).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::repo::Repository;
use crate::util::id::PackId;

const MAGIC: &[u8; 16] = b"cairn verified1\n";
const ENTRY: usize = 32 + 8 + 16;
/// A time further ahead of the clock than this is not believed.
const AHEAD: u64 = 86_400;

/// When each pack was last verified, by this client.
pub struct Record {
    path: Option<PathBuf>,
    key: Zeroizing<[u8; 32]>,
    repo_id: [u8; 32],
    /// The location it was read at, as the cache names locations.
    location: String,
    times: HashMap<PackId, u64>,
    /// The file appended to, once [`Record::begin`] opened it.
    appending: Option<std::fs::File>,
    /// Entries that did not authenticate when it was read.
    pub rejected: u64,
    /// Why the file there could not be read as a record (not a regular file, too large).
    pub unusable: Option<String>,
}

/// The most a record is read of: 4.7 million packs' entries.
const MAX_LEN: u64 = 256 << 20;

impl Record {
    /// Reads the record of `repo` (empty when there is none, or no cache directory).
    pub fn load(repo: &Repository) -> Record {
        let location = repo.location().unwrap_or_default().to_string();
        let name = format!(
            "verified-{}",
            &hex::encode(crate::util::id::sha256(location.as_bytes()))[..16]
        );
        let path = crate::repo::cache_dir::for_repository(&repo.id_hex()).map(|d| d.join(name));
        let mut record = Record {
            path,
            key: repo.crypto().record_key(),
            repo_id: repo.id(),
            location,
            times: HashMap::new(),
            appending: None,
            rejected: 0,
            unusable: None,
        };
        match record.path.as_ref().map(|p| read_private(p)) {
            Some(Ok(Some(bytes))) => record.read(&bytes, crate::util::clock::now_secs()),
            Some(Err(why)) => record.unusable = Some(why),
            _ => {}
        }
        record
    }

    /// Takes the authentic entries of `bytes`, the newest per pack.
    fn read(&mut self, bytes: &[u8], now: u64) {
        let Some(body) = bytes.strip_prefix(MAGIC.as_slice()) else {
            self.rejected += u64::from(!bytes.is_empty());
            return;
        };
        for e in body.chunks(ENTRY) {
            let Some((pack, time)) = self.open(e).filter(|(_, t)| *t <= now + AHEAD) else {
                self.rejected += 1;
                continue;
            };
            let t = self.times.entry(pack).or_insert(time);
            *t = (*t).max(time);
        }
    }

    /// The time this client last verified `pack`, if it did.
    pub fn last(&self, pack: &PackId) -> Option<u64> {
        self.times.get(pack).copied()
    }

    /// Keeps only the packs of `listed`, writes the record anew that way, and opens it for
    /// [`Record::note`].
    pub fn begin(&mut self, listed: &BTreeMap<PackId, u64>) -> std::io::Result<()> {
        self.times.retain(|p, _| listed.contains_key(p));
        let Some(path) = self.path.clone() else {
            return Err(std::io::Error::other(
                "no cache directory: no HOME or XDG_CACHE_HOME",
            ));
        };
        let mut bytes = MAGIC.to_vec();
        let mut kept: Vec<(&PackId, &u64)> = self.times.iter().collect();
        kept.sort();
        for (pack, time) in kept {
            bytes.extend_from_slice(&self.seal(pack, *time));
        }
        crate::repo::cache_dir::write_private(&path, &bytes)?;
        self.appending = Some(open_append(&path)?);
        Ok(())
    }

    /// Records that `pack` was read whole and found sound at `time`.
    pub fn note(&mut self, pack: &PackId, time: u64) -> std::io::Result<()> {
        self.times.insert(*pack, time);
        crate::util::pause::point("check:verified");
        let entry = self.seal(pack, time);
        match &mut self.appending {
            Some(f) => f.write_all(&entry),
            None => Ok(()),
        }
    }

    fn mac(&self, pack: &PackId, time: u64) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key[..])
            .expect("HMAC takes a key of any length");
        m.update(&self.repo_id);
        m.update(&(self.location.len() as u64).to_le_bytes());
        m.update(self.location.as_bytes());
        m.update(&pack.0);
        m.update(&time.to_le_bytes());
        m
    }

    fn seal(&self, pack: &PackId, time: u64) -> [u8; ENTRY] {
        let mut e = [0u8; ENTRY];
        e[..32].copy_from_slice(&pack.0);
        e[32..40].copy_from_slice(&time.to_le_bytes());
        e[40..].copy_from_slice(&self.mac(pack, time).finalize().into_bytes()[..16]);
        e
    }

    /// An entry's pack and time, when it is whole and authentic.
    fn open(&self, e: &[u8]) -> Option<(PackId, u64)> {
        if e.len() != ENTRY {
            return None;
        }
        let pack = PackId(e[..32].try_into().ok()?);
        let time = u64::from_le_bytes(e[32..40].try_into().ok()?);
        // Compared in constant time.
        self.mac(&pack, time)
            .verify_truncated_left(&e[40..])
            .ok()
            .map(|()| (pack, time))
    }

    /// How much of `listed` this client verified, and how long ago, at `now`.
    pub fn coverage<'a>(
        &self,
        listed: impl IntoIterator<Item = (&'a PackId, &'a u64)>,
        now: u64,
    ) -> Coverage {
        let mut c = Coverage {
            within: WITHIN_DAYS
                .iter()
                .map(|d| Within {
                    days: *d,
                    packs: 0,
                    bytes: 0,
                })
                .collect(),
            ..Coverage::default()
        };
        let mut oldest: Option<u64> = None;
        for (pack, size) in listed {
            c.packs += 1;
            c.bytes += size;
            let Some(t) = self.last(pack) else {
                c.never_packs += 1;
                c.never_bytes += size;
                continue;
            };
            let age = now.saturating_sub(t);
            oldest = Some(oldest.map_or(age, |o| o.max(age)));
            for w in &mut c.within {
                if age <= w.days * 86_400 {
                    w.packs += 1;
                    w.bytes += size;
                }
            }
        }
        c.oldest_age_secs = oldest.filter(|_| c.never_packs == 0);
        c.newest_run_secs = self.times.values().max().map(|t| now.saturating_sub(*t));
        c
    }
}

/// The periods coverage is told for, in days.
pub const WITHIN_DAYS: [u64; 3] = [1, 7, 30];

/// How much of the repository this client verified, and when.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Coverage {
    pub packs: u64,
    pub bytes: u64,
    /// Packs (and their bytes) this client never verified.
    pub never_packs: u64,
    pub never_bytes: u64,
    /// The age of the least recently verified pack; `None` while some pack was never
    /// verified (or there are none).
    pub oldest_age_secs: Option<u64>,
    /// How long ago the last pack was verified; `None` when none ever was.
    pub newest_run_secs: Option<u64>,
    /// Packs and bytes verified in the last 1, 7 and 30 days.
    pub within: Vec<Within>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Within {
    pub days: u64,
    pub packs: u64,
    pub bytes: u64,
}

/// Reads the record at `path`: `None` when there is none; an error says why what is there is
/// not one. Nothing is followed or waited for: no symlink, and a FIFO or device is not opened
/// for reading (`O_NONBLOCK`, then only a regular file is read).
fn read_private(path: &std::path::Path) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    let f = match open_nofollow(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_LEN {
        return Err(format!("{} bytes, more than a record can be", meta.len()));
    }
    let mut bytes = Vec::new();
    f.take(MAX_LEN)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(Some(bytes))
}

/// Opens the record just written for appending, without following a symlink or waiting on a
/// FIFO put in its place.
fn open_append(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let f = open_nofollow(path, true)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

fn open_nofollow(path: &std::path::Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    std::fs::OpenOptions::new()
        .read(!append)
        .append(append)
        .custom_flags(flags.bits() as i32)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            path: None,
            key: Zeroizing::new([7; 32]),
            repo_id: [1; 32],
            location: "/here".into(),
            times: HashMap::new(),
            appending: None,
            rejected: 0,
            unusable: None,
        }
    }

    fn bytes_of(r: &Record, entries: &[(PackId, u64)]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for (p, t) in entries {
            b.extend_from_slice(&r.seal(p, *t));
        }
        b
    }

    #[test]
    fn authentic_entries_are_read_and_the_newest_wins() {
        let r = record();
        let (a, b) = (PackId([2; 32]), PackId([3; 32]));
        let bytes = bytes_of(&r, &[(a, 100), (b, 50), (a, 200), (a, 150)]);
        let mut back = record();
        back.read(&bytes, 1000);
        assert_eq!(
            (back.last(&a), back.last(&b), back.rejected),
            (Some(200), Some(50), 0)
        );
    }

    #[test]
    fn forged_torn_future_and_foreign_entries_are_ignored() {
        let r = record();
        let a = PackId([2; 32]);
        let mut bytes = bytes_of(&r, &[(a, 100)]);
        // A forged time: the MAC no longer matches.
        let mut forged = r.seal(&a, 500);
        forged[32] ^= 1;
        bytes.extend_from_slice(&forged);
        // Far in the future.
        bytes.extend_from_slice(&r.seal(&a, 1000 + AHEAD + 1));
        // Another repository's entry (same key), and another location's.
        let mut other = record();
        other.repo_id = [9; 32];
        bytes.extend_from_slice(&other.seal(&a, 900));
        let mut elsewhere = record();
        elsewhere.location = "/there".into();
        bytes.extend_from_slice(&elsewhere.seal(&a, 900));
        // Torn by a crash.
        bytes.extend_from_slice(&r.seal(&a, 800)[..20]);
        let mut back = record();
        back.read(&bytes, 1000);
        assert_eq!((back.last(&a), back.rejected), (Some(100), 5));
        let mut none = record();
        none.read(b"something else", 1000);
        assert_eq!((none.times.len(), none.rejected), (0, 1));
    }

    #[test]
    fn coverage_counts_ages_and_packs_never_verified() {
        let mut r = record();
        let (a, b, c) = (PackId([2; 32]), PackId([3; 32]), PackId([4; 32]));
        let now = 100 * 86_400;
        r.times.insert(a, now - 3600);
        r.times.insert(b, now - 10 * 86_400);
        let listed: BTreeMap<PackId, u64> = [(a, 10), (b, 20), (c, 40)].into();
        let cov = r.coverage(&listed, now);
        assert_eq!(
            (cov.packs, cov.bytes, cov.never_packs, cov.never_bytes),
            (3, 70, 1, 40)
        );
        assert_eq!(cov.oldest_age_secs, None);
        assert_eq!(cov.newest_run_secs, Some(3600));
        let by: Vec<(u64, u64)> = cov.within.iter().map(|w| (w.days, w.bytes)).collect();
        assert_eq!(by, vec![(1, 10), (7, 10), (30, 30)]);
        let listed: BTreeMap<PackId, u64> = [(a, 10), (b, 20)].into();
        assert_eq!(r.coverage(&listed, now).oldest_age_secs, Some(10 * 86_400));
    }
}
