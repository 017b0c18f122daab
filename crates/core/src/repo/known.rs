//! What this machine remembers about the repository at each location, as borg's security
//! directory does: `…/cairn/locations/<hash of the location>.json` in the cache directory,
//! holding the location, the repository's id, its encryption mode, its chunker parameters and
//! a fingerprint of its key.
//!
//! Whoever holds the storage can empty it and make a new repository in the same place — an
//! unencrypted one, say, so that the victim's next backup lands in clear. A new id is simply a
//! new repository to a client that only remembers ids; so the client remembers locations, and
//! refuses, saying what changed and how to accept a legitimate change:
//! - a location whose repository id, key or chunker parameters changed;
//! - a location whose repository was encrypted and is not any more;
//! - an unencrypted repository this machine has never used, unless `--allow-unencrypted` or
//!   `CAIRN_UNENCRYPTED_OK=yes` says that is intended.
//!
//! `init` records the repository it made. Without a usable cache directory (no home at all,
//! or one that cannot be written) there is no memory to check against: that is said, and an
//! unencrypted repository is refused as one never seen (a repository replaced by an
//! unencrypted one would otherwise be written to in clear without a word).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::crypto::EncryptionMode;
use crate::error::{Error, Result};
use crate::repo::config::ChunkerConfig;
use crate::repo::Repository;
use crate::util::id::sha256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    pub location: String,
    pub id: String,
    pub encryption: String,
    pub chunker: ChunkerConfig,
    /// Identifies the master key without revealing anything about it (a keyed hash made with
    /// the id key); absent for unencrypted repositories.
    pub key: Option<String>,
}

impl Remembered {
    fn of(location: &str, repo: &Repository) -> Self {
        let encrypted = repo.crypto().mode() == EncryptionMode::Repokey;
        Self {
            location: location.to_string(),
            id: repo.id_hex(),
            encryption: repo.config().encryption.clone(),
            chunker: repo.config().chunker.clone(),
            key: encrypted
                .then(|| repo.crypto().id_of(b"cairn key fingerprint").to_hex()[..32].to_string()),
        }
    }
}

/// Where the memory of `location` is kept.
fn record_path(location: &str) -> Option<PathBuf> {
    let h = hex::encode(sha256(location.as_bytes()));
    Some(
        crate::repo::cache_dir::base()?
            .join("locations")
            .join(format!("{}.json", &h[..32])),
    )
}

fn read(path: &std::path::Path) -> Result<Option<Remembered>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::corrupt(path.display().to_string(), e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Remembers `r` at `path`; says so when it cannot, and returns whether it could.
fn write(path: &std::path::Path, r: &Remembered) -> bool {
    let bytes = serde_json::to_vec_pretty(r).unwrap_or_default();
    match crate::repo::cache_dir::write_private(path, &bytes) {
        Ok(()) => true,
        Err(e) => {
            crate::say!(
                "warning: cannot remember this repository in {} ({e}); a replaced repository at \
                 this location would not be noticed",
                path.display()
            );
            false
        }
    }
}

fn never_seen_unencrypted(location: &str, why: &str) -> Error {
    Error::invalid(format!(
        "refusing the unencrypted repository at {location}, which this machine has never \
         used{why}: what it stores there would be readable by whoever holds the storage. If \
         that is intended, pass --allow-unencrypted or set CAIRN_UNENCRYPTED_OK=yes."
    ))
}

/// Remembers the repository `init` just made at `location`.
pub fn remember(location: &str, repo: &Repository) {
    if let Some(path) = record_path(location) {
        write(&path, &Remembered::of(location, repo));
    }
}

const NO_MEMORY: &str = " (and, with no home or cache directory, can remember none)";

/// Checks the repository opened at `location` against what this machine remembers of that
/// location, and remembers it the first time (see the module doc).
pub fn check_and_remember(
    location: &str,
    repo: &Repository,
    allow_unencrypted: bool,
) -> Result<()> {
    let now = Remembered::of(location, repo);
    let unencrypted = repo.crypto().mode() == EncryptionMode::None;
    let Some(path) = record_path(location) else {
        if unencrypted && !allow_unencrypted {
            return Err(never_seen_unencrypted(location, NO_MEMORY));
        }
        crate::say!(
            "warning: no home or cache directory (HOME and XDG_CACHE_HOME are unset): this \
             machine cannot remember the repository at {location}, and would not notice if it \
             were replaced"
        );
        return Ok(());
    };
    let accept = format!(
        "If you replaced or changed it yourself, delete {} and run the command again.",
        path.display()
    );
    match read(&path)? {
        Some(before) => {
            let what = if before.id != now.id {
                format!(
                    "it is not the repository this machine used there before (repository id {}, \
                     {}; now {}, {})",
                    &before.id[..16.min(before.id.len())],
                    before.encryption,
                    &now.id[..16],
                    now.encryption
                )
            } else if before.encryption != now.encryption {
                format!(
                    "its encryption changed from {} to {} since this machine last used it",
                    before.encryption, now.encryption
                )
            } else if before.key != now.key {
                "its key is not the one this machine saw there before".to_string()
            } else if before.chunker != now.chunker {
                format!(
                    "its chunker parameters changed since this machine last used it ({:?} → {:?})",
                    before.chunker.params, now.chunker.params
                )
            } else {
                return Ok(());
            };
            Err(Error::invalid(format!(
                "refusing the repository at {location}: {what}; someone with access to the \
                 storage may have replaced or changed it. {accept}"
            )))
        }
        None => {
            if unencrypted && !allow_unencrypted {
                return Err(never_seen_unencrypted(location, ""));
            }
            write(&path, &now);
            Ok(())
        }
    }
}
