//! What this machine remembers about a repository's security settings.
//!
//! The `config` object is plaintext and unauthenticated, so whoever controls the storage could
//! change `"encryption"` to `"none"` and have the next backup upload plaintext. Two guards:
//! an unencrypted config beside key files is refused outright, and the settings seen the first
//! time a repository is used from this machine are kept in the local cache
//! (`…/cairn/<repository id>/repository.json`); a later mismatch is refused, as borg does with
//! its security directory.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::repo::config::{ChunkerConfig, Config};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    pub encryption: String,
    pub chunker: ChunkerConfig,
}

/// Checks `config` against what this machine saw before, and remembers it the first time.
pub fn check_and_remember(config: &Config) -> Result<()> {
    let Some(dir) = crate::cache_dir::for_repository(&config.id) else {
        return Ok(());
    };
    let path = dir.join("repository.json");
    let now = Known {
        encryption: config.encryption.clone(),
        chunker: config.chunker.clone(),
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let before: Known = serde_json::from_slice(&bytes)
                .map_err(|e| Error::corrupt(path.display().to_string(), e.to_string()))?;
            if before != now {
                return Err(Error::invalid(format!(
                    "the repository's config changed since this machine last used it \
                     (encryption {} → {}, chunker {:?} → {:?}); refusing to continue, since \
                     someone with access to the storage could have changed it. If you changed it \
                     yourself, delete {}.",
                    before.encryption,
                    now.encryption,
                    before.chunker.params,
                    now.chunker.params,
                    path.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Best effort: without a writable cache there is simply no memory to check against.
            if std::fs::create_dir_all(&dir).is_ok() {
                let _ = std::fs::write(&path, serde_json::to_vec_pretty(&now).unwrap_or_default());
            }
            Ok(())
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}
