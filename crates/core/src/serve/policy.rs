//! What a connection may do to the repository it opened: every request checked against the
//! server's rules (names beneath the root and through no symbolic link, append-only, the
//! quota) before the local store carries it out.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::repo::removed::{self, APPENDED, REMOVED};
use crate::serve::frame::{Answer, Op};
use crate::store::local::LocalStore;
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
    /// Bytes the repository holds (counted at the start when there is a quota, then kept up
    /// to date by this connection's writes and deletions).
    used: Mutex<u64>,
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
        let used = match rules.quota {
            Some(_) => disk_usage(&root),
            None => 0,
        };
        Self {
            store: LocalStore::new(root.clone()),
            root,
            rules,
            used: Mutex::new(used),
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
        no_link_beneath(&self.root, name)
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
        let existing = match self.store.info(name) {
            Ok(o) => Some(o.size),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
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
        self.reserve(name, size, existing.unwrap_or(0))?;
        if self.rules.append_only {
            if let Some(id) = removed::archive_of(name) {
                // The marker first: an archive written here never hides or removes an older
                // one for the owner, even if the server stops right after writing it.
                let marker = removed::appended_name(&id);
                if let Err(e) = self.store.put(&marker, b"") {
                    self.release(size);
                    return Err(e);
                }
            }
        }
        let result = if create_new {
            self.store.create_new(name, data)
        } else {
            self.store.put(name, data)
        };
        match result {
            Ok(()) => {
                self.release(existing.unwrap_or(0));
                Ok(Answer::Done)
            }
            Err(e) => {
                self.release(size);
                Err(e)
            }
        }
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
        self.release(size);
        Ok(Answer::Done)
    }

    /// Counts `size` more bytes (less `replacing`) against the quota, or refuses them.
    fn reserve(&self, name: &str, size: u64, replacing: u64) -> StoreResult<()> {
        let Some(quota) = self.rules.quota else {
            return Ok(());
        };
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let after = used.saturating_sub(replacing).saturating_add(size);
        if after > quota && size > replacing {
            return Err(refused(
                name,
                format!(
                    "the repository's storage quota of {} would be exceeded ({} used, {} more asked)",
                    crate::util::progress::size(quota),
                    crate::util::progress::size(*used),
                    crate::util::progress::size(size),
                ),
            ));
        }
        *used = used.saturating_add(size);
        Ok(())
    }

    /// Gives back bytes counted by [`Guarded::reserve`] that the repository no longer holds.
    fn release(&self, size: u64) {
        if self.rules.quota.is_some() {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            *used = used.saturating_sub(size);
        }
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

/// Bytes held by the files below `dir` (links not followed).
fn disk_usage(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
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

    #[test]
    fn append_only_keeps_everything_but_locks() {
        let (_d, g) = guarded(Rules {
            append_only: true,
            quota: None,
        });
        put(&g, "packs/aa/aa11", b"pack").unwrap();
        put(&g, "packs/aa/aa11", b"pack").unwrap(); // the same bytes again: a retry
        let e = put(&g, "packs/aa/aa11", b"junk").unwrap_err();
        assert!(matches!(e, StoreError::Refused { .. }), "{e}");
        let e = g.handle(Op::Delete {
            name: "packs/aa/aa11".into(),
        });
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
        assert_eq!(names, ["packs/aa/aa11"]);
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

    #[test]
    fn the_quota_holds_and_deletions_give_room_back() {
        let (_d, g) = guarded(Rules {
            append_only: false,
            quota: Some(10),
        });
        put(&g, "a", &[0; 6]).unwrap();
        let e = put(&g, "b", &[0; 6]).unwrap_err().to_string();
        assert!(e.contains("quota"), "{e}");
        assert!(!g.root.join("b").exists());
        g.handle(Op::Delete { name: "a".into() }).unwrap();
        put(&g, "b", &[0; 6]).unwrap();
    }
}
