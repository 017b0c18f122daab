//! What a connection may do to the repository it opened: every request checked against the
//! server's rules (names beneath the root and through no symbolic link, append-only, the
//! quota) before the local store carries it out.

use std::path::{Path, PathBuf};

use crate::repo::removed::{self, APPENDED, REMOVED};
use crate::serve::quota::Quota;
use crate::store::local::LocalStore;
use crate::store::ssh::frame::{Answer, Op, MAX_FRAME};
use crate::store::{validate_name, validate_prefix, ObjectInfo, Store, StoreError, StoreResult};

/// The rules of one connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rules {
    pub append_only: bool,
    /// Bytes the repository may hold in all.
    pub quota: Option<u64>,
}

/// One connection's repository, behind its rules.
pub struct Guarded {
    root: PathBuf,
    store: LocalStore,
    rules: Rules,
    quota: Option<Quota>,
}

type Reply = StoreResult<Answer>;

fn refused(name: &str, why: impl Into<String>) -> StoreError {
    StoreError::Refused {
        name: name.to_string(),
        why: why.into(),
    }
}

impl Guarded {
    pub fn new(root: PathBuf, rules: Rules) -> Self {
        Self {
            store: LocalStore::new(root.clone()),
            quota: rules.quota.map(|limit| Quota::new(&root, limit)),
            root,
            rules,
        }
    }

    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// Carries out one request.
    pub fn handle(&self, op: Op) -> Reply {
        match op {
            Op::Hello { .. } => Err(refused("", "the connection said hello twice")),
            Op::Init => self.init(),
            Op::Put { name, data } => self.put(&name, &data, false),
            Op::CreateNew { name, data } => self.put(&name, &data, true),
            Op::Get { name, range } => {
                self.readable(&name)?;
                Ok(Answer::Data(self.store.get(&name, range)?))
            }
            Op::GetBounded { name, max } => {
                self.readable(&name)?;
                Ok(Answer::Data(self.store.get_bounded(&name, max)?))
            }
            Op::List { prefix } => self.list(&prefix),
            Op::Delete { name } => self.delete(&name),
            Op::Info { name } => {
                self.readable(&name)?;
                Ok(Answer::Info(self.store.info(&name)?))
            }
        }
    }

    /// The bytes `op`'s reply will carry, for the requests that read an object: what the
    /// server must have room for before it reads it. `None` for the others (small replies).
    pub fn reply_size(&self, op: &Op) -> Option<usize> {
        let size = |name: &str| {
            self.readable(name)
                .and_then(|()| self.store.info(name))
                .map_or(0, |o| o.size)
        };
        let n = match op {
            // Known from the request: the hot path of a restore asks nothing more of the disk.
            Op::Get { range: Some(r), .. } => r.len,
            Op::Get { name, range: None } => size(name),
            Op::GetBounded { name, max } => size(name).min(*max),
            _ => return None,
        };
        Some(usize::try_from(n.min(MAX_FRAME)).unwrap_or(usize::MAX))
    }

    fn init(&self) -> Reply {
        let name = self.root.display().to_string();
        if self.root.exists() {
            let mut entries =
                std::fs::read_dir(&self.root).map_err(|e| StoreError::from_io(&name, e))?;
            if entries.next().is_some() {
                return Err(refused(&name, "the directory is not empty"));
            }
            return Ok(Answer::Done);
        }
        crate::store::local::create_private_dir_all(&self.root)
            .map_err(|e| StoreError::from_io(&name, e))?;
        Ok(Answer::Done)
    }

    /// A name checked: valid, and no symbolic link on its way from the root (the repository
    /// directory is the server user's alone; a link found there was planted, and is never
    /// followed).
    fn checked(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        self.root_unmoved(name)?;
        no_link_beneath(&self.root, name)
    }

    /// The repository directory is still the one the hello resolved: not renamed and
    /// replaced by a link to elsewhere by someone who can write its parent.
    fn root_unmoved(&self, name: &str) -> StoreResult<()> {
        match std::fs::canonicalize(&self.root) {
            Ok(now) if now == self.root => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(refused(
                name,
                "the repository directory was moved or replaced since the connection began",
            )),
        }
    }

    /// What an append-only connection does not see: the server's own records, and the
    /// archives removed through such connections.
    fn hidden(&self, name: &str) -> bool {
        if !self.rules.append_only {
            return false;
        }
        let top = name.split('/').next().unwrap_or("");
        if top == REMOVED || top == APPENDED {
            return true;
        }
        match removed::archive_of(name) {
            Some(id) => self.root.join(removed::removal_name(&id)).exists(),
            None => false,
        }
    }

    fn readable(&self, name: &str) -> StoreResult<()> {
        self.checked(name)?;
        if self.hidden(name) {
            return Err(StoreError::NotFound {
                name: name.to_string(),
            });
        }
        Ok(())
    }

    fn list(&self, prefix: &str) -> Reply {
        validate_prefix(prefix)?;
        if !prefix.is_empty() {
            no_link_beneath(&self.root, prefix)?;
        }
        let mut all = self.store.list(prefix)?;
        all.retain(|o: &ObjectInfo| !self.hidden(&o.name));
        Ok(Answer::Listing(all))
    }

    fn put(&self, name: &str, data: &[u8], create_new: bool) -> Reply {
        self.checked(name)?;
        let top = name.split('/').next().unwrap_or("");
        if top == REMOVED || top == APPENDED {
            return Err(refused(
                name,
                "these records are written by the server alone",
            ));
        }
        if self.rules.append_only && !in_layout(name) {
            return Err(refused(
                name,
                "the repository is append-only: only objects of a cairn repository's layout are written",
            ));
        }
        let existing = match self.store.info(name) {
            Ok(o) => Some(o.size),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        if create_new && existing.is_some() {
            return Err(StoreError::Exists {
                name: name.to_string(),
            });
        }
        if existing.is_some() && self.rules.append_only && top != "locks" && !create_new {
            // Objects are named by their contents: a repeated put (a retry after a lost
            // connection) brings the same bytes, which are taken as done. Anything else would
            // replace what is there.
            if self.store.get(name, None)? == data {
                return Ok(Answer::Done);
            }
            return Err(refused(
                name,
                "the repository is append-only: an object that exists is not replaced",
            ));
        }
        let size = data.len() as u64;
        let may_replace = existing.is_some() || top == "locks";
        if let (Some(q), true) = (&self.quota, may_replace) {
            // A replacement (a lock's, or any on a full-access connection) is counted and
            // carried out under the count's lock, the old size read there: two replacements
            // of one object at once would otherwise each give its old size back.
            let mut count = q.lock()?;
            let existing = match self.store.info(name) {
                Ok(o) => Some(o.size),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            count.reserve(name, size, existing)?;
            let result = self.write(name, data, create_new);
            count.release(if result.is_ok() { existing } else { Some(size) });
            count.save()?;
            return result;
        }
        if let Some(q) = &self.quota {
            q.reserve(name, size, existing)?;
        }
        let result = self.write(name, data, create_new);
        if let Some(q) = &self.quota {
            q.written(size, if result.is_ok() { existing } else { Some(size) });
        }
        result
    }

    /// Writes an object, the marker of an archive first on an append-only connection.
    fn write(&self, name: &str, data: &[u8], create_new: bool) -> Reply {
        if self.rules.append_only {
            if let Some(id) = removed::archive_of(name) {
                // The marker first: an archive written here never hides or removes an older
                // one for the owner, even if the server stops right after writing it.
                self.store.put(&removed::appended_name(&id), b"")?;
            }
        }
        if create_new {
            self.store.create_new(name, data)?;
        } else {
            self.store.put(name, data)?;
        }
        Ok(Answer::Done)
    }

    fn delete(&self, name: &str) -> Reply {
        self.checked(name)?;
        let top = name.split('/').next().unwrap_or("");
        if top == REMOVED || top == APPENDED {
            return Err(refused(name, "these records are kept by the server alone"));
        }
        if self.rules.append_only && top != "locks" {
            let Some(id) = removed::archive_of(name) else {
                return Err(refused(
                    name,
                    "the repository is append-only: nothing but locks is deleted",
                ));
            };
            // An archive is not deleted: the server records its removal (the owner can take
            // it back) and hides it from append-only connections.
            if self.hidden(name) || !self.root.join(name).exists() {
                return Err(StoreError::NotFound {
                    name: name.to_string(),
                });
            }
            self.store
                .create_new(&removed::removal_name(&id), &removed::record_now())
                .or_else(|e| match e {
                    StoreError::Exists { .. } => Ok(()),
                    e => Err(e),
                })?;
            return Ok(Answer::Done);
        }
        let size = self.store.info(name)?.size;
        self.store.delete(name)?;
        self.release(Some(size));
        Ok(Answer::Done)
    }

    fn release(&self, size: Option<u64>) {
        if let Some(q) = &self.quota {
            q.release(size);
        }
    }
}

/// Whether `name` is one a cairn repository holds (`docs/design.md`, "Repository layout")
/// and an append-only client has reason to write: what an append-only connection may write. Anything else (a junk name under `archives/`
/// would stop every command that lists archives) is refused.
pub fn in_layout(name: &str) -> bool {
    let hex = |s: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&s.len()) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["config"] | ["reserve"] => true,
        // Not `retired/`: records of packs to delete are written by compact and check
        // --repair alone, which an append-only client does not run; a forged one would name
        // the real packs for the owner's next repair to delete.
        ["keys" | "index" | "archives", id] => hex(id, 64..=64),
        ["packs", dir, id] => hex(id, 64..=64) && id.starts_with(dir) && dir.len() == 2,
        ["locks" | "broken", id] => hex(id, 1..=64),
        _ => false,
    }
}

/// Refuses a name with a symbolic link anywhere on its way below `root` (or at its end).
fn no_link_beneath(root: &Path, name: &str) -> StoreResult<()> {
    let mut path = root.to_path_buf();
    for part in name.split('/') {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refused(
                    name,
                    "a symbolic link in the repository is never followed",
                ))
            }
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guarded(rules: Rules) -> (tempfile::TempDir, Guarded) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        let g = Guarded::new(root, rules);
        (d, g)
    }

    fn put(g: &Guarded, name: &str, data: &[u8]) -> Reply {
        g.handle(Op::Put {
            name: name.into(),
            data: data.to_vec(),
        })
    }

    const ARCHIVE: &str =
        "archives/00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const PACK: &str = "packs/aa/aa112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn append_only_keeps_everything_but_locks() {
        let (_d, g) = guarded(Rules {
            append_only: true,
            quota: None,
        });
        put(&g, PACK, b"pack").unwrap();
        put(&g, PACK, b"pack").unwrap(); // the same bytes again: a retry
        let e = put(&g, PACK, b"junk").unwrap_err();
        assert!(matches!(e, StoreError::Refused { .. }), "{e}");
        // Names outside a repository's layout would stop the owner's commands.
        for junk in [
            "archives/README",
            "archives/AB",
            "packs/ab/cd00",
            "Removed/x",
            "x",
        ] {
            assert!(
                matches!(put(&g, junk, b"j"), Err(StoreError::Refused { .. })),
                "{junk}"
            );
        }
        let e = g.handle(Op::Delete { name: PACK.into() });
        assert!(matches!(e, Err(StoreError::Refused { .. })));
        put(&g, "locks/0011", b"l").unwrap();
        g.handle(Op::Delete {
            name: "locks/0011".into(),
        })
        .unwrap();
        for name in ["removed/x", "appended/x"] {
            assert!(matches!(
                put(&g, name, b""),
                Err(StoreError::Refused { .. })
            ));
        }
        // An archive's deletion is recorded, and hides it from this kind of connection.
        put(&g, ARCHIVE, b"archive").unwrap();
        g.handle(Op::Delete {
            name: ARCHIVE.into(),
        })
        .unwrap();
        assert!(g.root.join(ARCHIVE).exists());
        assert!(matches!(
            g.handle(Op::Get {
                name: ARCHIVE.into(),
                range: None
            }),
            Err(StoreError::NotFound { .. })
        ));
        let Ok(Answer::Listing(all)) = g.handle(Op::List { prefix: "".into() }) else {
            panic!()
        };
        let names: Vec<_> = all.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, [PACK]);
        let store = LocalStore::new(g.root.clone());
        assert_eq!(removed::removals(&store).unwrap().len(), 1);
        assert_eq!(removed::appended(&store).unwrap().len(), 1);
    }

    #[test]
    fn symlinks_in_the_repository_are_not_followed() {
        let (d, g) = guarded(Rules::default());
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(&outside, g.root.join("packs")).unwrap();
        for op in [
            Op::Get {
                name: "packs/secret".into(),
                range: None,
            },
            Op::List {
                prefix: "packs".into(),
            },
            Op::Put {
                name: "packs/new".into(),
                data: vec![1],
            },
        ] {
            assert!(matches!(g.handle(op), Err(StoreError::Refused { .. })));
        }
        for bad in ["../x", "/etc/passwd", "a/../../x", ""] {
            assert!(g
                .handle(Op::Get {
                    name: bad.into(),
                    range: None
                })
                .is_err());
        }
        assert!(!outside.join("new").exists());
    }

    /// Replacements of one lock at once once each gave the old size back, and the count
    /// drifted below what the disk held: without bound, one race at a time.
    #[test]
    fn replacements_at_once_keep_the_count_true() {
        let (_d, g) = guarded(Rules {
            append_only: true,
            quota: Some(64 << 20),
        });
        let g = std::sync::Arc::new(g);
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let g = &g;
                s.spawn(move || {
                    for _ in 0..20 {
                        let _ = put(g, "locks/00aa", &vec![t; 256 << 10]);
                    }
                });
            }
        });
        let counted: u64 = std::fs::read_to_string(g.root.join(".cairn-serve-usage"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let held = crate::serve::quota::cost(256 << 10);
        assert_eq!(counted, held, "the count drifted from what the disk holds");
    }

    #[test]
    fn the_quota_holds_and_deletions_give_room_back() {
        let (_d, g) = guarded(Rules {
            append_only: false,
            quota: Some(10_000),
        });
        put(&g, "a", &[0; 6000]).unwrap();
        let e = put(&g, "b", &[0; 6000]).unwrap_err().to_string();
        assert!(e.contains("quota"), "{e}");
        assert!(!g.root.join("b").exists());
        g.handle(Op::Delete { name: "a".into() }).unwrap();
        put(&g, "b", &[0; 6000]).unwrap();
    }
}
