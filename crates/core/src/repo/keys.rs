//! The repository's key files (`cairn key …`): imported, re-wrapped under another
//! passphrase, added, listed, removed, exported. Opening a repository with one is
//! [`Repository::begin_open`]; these manage the set.

use zeroize::Zeroizing;

use super::config::{self, Config};
use super::lock::{Lock, LockKind};
use super::{Repository, MAX_KEYS};
use crate::crypto::kdf::KdfParams;
use crate::crypto::keyfile::{KeyFile, MAX_KEY_FILE_LEN};
use crate::crypto::paper::{self, Paper};
use crate::crypto::EncryptionMode;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::util::id::sha256;

/// Stores a key exported earlier (`cairn key import`: a key file's JSON, or its paper form),
/// for a repository whose key file was lost or damaged: it must be this repository's (its
/// id), open with `passphrase`, and hold the config the repository has. Needs no working key
/// in the store, so it takes the store and an exclusive lock on it rather than an open
/// repository. Returns the key file's name, and whether it was there already.
pub fn import(
    store: &dyn Store,
    lock: &Lock,
    given: &[u8],
    passphrase: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<(String, bool)> {
    let config = match store.get_bounded(config::NAME, config::MAX_LEN as u64) {
        Ok(b) => Config::parse(&b)?,
        Err(e) if e.is_not_found() => {
            return Err(Error::invalid(
                "not a cairn repository (it has no config object)",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    let repo_id = config.repo_id()?;
    // The bytes to store when they are a whole key file, label included.
    let (mut kf, mut bytes) = if given.starts_with(b"{") {
        (
            KeyFile::parse(given, "the key given")?,
            Some(given.to_vec()),
        )
    } else {
        match paper::decode(&String::from_utf8_lossy(given), &repo_id)? {
            Paper::KeyFile(b) => (KeyFile::parse(&b, "the paper key")?, Some(b)),
            Paper::Unlabelled(kf) => (kf, None),
        }
    };
    if kf.repository != hex::encode(repo_id) {
        return Err(Error::invalid(format!(
            "this key is for repository {}, not for this one ({})",
            kf.repository,
            hex::encode(repo_id)
        )));
    }
    kf.kdf.validate()?;
    let pass = Zeroizing::new(passphrase()?);
    let (key, authentic) = match bytes {
        Some(_) => kf.unwrap_key(&repo_id, &pass)?,
        None => kf.unwrap_unlabelled(&repo_id, &pass)?,
    };
    let authentic = Config::parse(&authentic)?;
    let differences = config.differences(&authentic);
    if !differences.is_empty() {
        return Err(Error::invalid(format!(
            "the repository's config does not match the one this key holds ({})",
            differences.join("; ")
        )));
    }
    if let Some(name) = holding(store, &kf)? {
        return Ok((name, true));
    }
    let bytes = match bytes.take() {
        Some(b) => b,
        None => {
            kf.label_anew(&key, &repo_id)?;
            kf.to_bytes()
        }
    };
    let name = format!("keys/{}", hex::encode(sha256(&bytes)));
    lock.verify()?;
    store.put(&name, &bytes)?;
    Ok((name, false))
}

/// The key file in the store that wraps the same key under the same passphrase as `kf`
/// (the same wrapped bytes), whatever its label.
fn holding(store: &dyn Store, kf: &KeyFile) -> Result<Option<String>> {
    for k in store.list("keys")? {
        let held = store
            .get_bounded(&k.name, MAX_KEY_FILE_LEN as u64)
            .map_err(Error::from)
            .and_then(|b| KeyFile::parse(&b, &k.name));
        if held.is_ok_and(|h| h.data == kf.data && h.nonce == kf.nonce) {
            return Ok(Some(k.name));
        }
    }
    Ok(None)
}

/// Refuses a repository without encryption: it has no passphrase to change or add.
fn encrypted(repo: &Repository) -> Result<()> {
    if repo.crypto.mode() != EncryptionMode::Repokey {
        return Err(Error::invalid(
            "this repository is not encrypted; it has no passphrase",
        ));
    }
    Ok(())
}

/// Re-wraps the master key under a new passphrase: the new key file is durable before the
/// old one is removed, so a crash leaves at least one that opens.
pub fn change_passphrase(
    repo: &Repository,
    old: impl FnOnce() -> Result<Vec<u8>>,
    new: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<String> {
    encrypted(repo)?;
    if repo.store().append_only() {
        // The old key file could not be removed: both passphrases would open the repository.
        return Err(Error::invalid(
            "the repository's server is append-only: the passphrase is changed on the server, by its owner (cairn key change-passphrase there)",
        ));
    }
    let (name, old_name) = store_rewrapped(repo, old, new)?;
    repo.store.delete(&old_name)?;
    Ok(name)
}

/// Unlocks with the current passphrase and stores the same master key and config copy
/// wrapped under a new one (exclusive lock). Returns the new key file's name and that of
/// the one the current passphrase opened.
fn store_rewrapped(
    repo: &Repository,
    current: impl FnOnce() -> Result<Vec<u8>>,
    new: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<(String, String)> {
    let (key, old_name, authentic) = Repository::unlock(&*repo.store, &repo.repo_id, current)?;
    let kf = KeyFile::wrap(
        &key,
        &authentic.to_bytes(),
        &repo.repo_id,
        &super::new_passphrase(new()?)?,
        KdfParams::new_default(),
    )?;
    let bytes = kf.to_bytes();
    let name = format!("keys/{}", hex::encode(sha256(&bytes)));
    repo.verify_lock(LockKind::Exclusive)?;
    repo.store.put(&name, &bytes)?;
    Ok((name, old_name))
}

/// Wraps the master key under one more passphrase (`key add`): another key file that
/// opens the same repository. Returns its name.
pub fn add(
    repo: &Repository,
    current: impl FnOnce() -> Result<Vec<u8>>,
    new: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<String> {
    encrypted(repo)?;
    let held = repo.store.list("keys")?.len();
    if held >= MAX_KEYS {
        return Err(Error::invalid(format!(
            "the repository has {held} keys already, the most it takes (each one is tried when a passphrase is checked); remove one first"
        )));
    }
    Ok(store_rewrapped(repo, current, new)?.0)
}

/// The key files: name, the file (or why it cannot be read), and whether it is the one
/// this repository was opened with.
pub fn list(repo: &Repository) -> Result<Vec<(String, Result<KeyFile>, bool)>> {
    let mut out = Vec::new();
    for k in repo.store.list("keys")? {
        let file = repo
            .store
            .get_bounded(&k.name, MAX_KEY_FILE_LEN as u64)
            .map_err(Error::from)
            .and_then(|b| KeyFile::parse(&b, &k.name));
        let used = repo.key_name.as_deref() == Some(k.name.as_str());
        out.push((k.name, file, used));
    }
    Ok(out)
}

/// Removes the key file whose id (the hex after `keys/`) starts with `prefix`. The key
/// this repository was opened with is refused, and with it the last one.
pub fn remove(repo: &Repository, prefix: &str) -> Result<String> {
    let prefix = prefix.trim_start_matches("keys/").to_ascii_lowercase();
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::invalid(format!(
            "{prefix:?} is not a key id (see cairn key list)"
        )));
    }
    let keys = repo.store.list("keys")?;
    let matching: Vec<&str> = keys
        .iter()
        .map(|k| k.name.as_str())
        .filter(|n| n.trim_start_matches("keys/").starts_with(&prefix))
        .collect();
    let name = match matching.as_slice() {
        [] => return Err(Error::invalid(format!("no key with id {prefix}…"))),
        [one] => one.to_string(),
        _ => {
            return Err(Error::invalid(format!(
                "key id {prefix} is ambiguous: give more of it"
            )))
        }
    };
    if keys.len() == 1 {
        return Err(Error::invalid(
            "this is the repository's only key: without it, nothing could be read; add another first",
        ));
    }
    if repo.key_name.as_deref() == Some(name.as_str()) {
        return Err(Error::invalid(
            "this is the key your passphrase opened; to remove it, give the passphrase of another key",
        ));
    }
    repo.verify_lock(LockKind::Exclusive)?;
    repo.store.delete(&name)?;
    Ok(name)
}

/// The key file the passphrase opens, as stored (`cairn key export`): still protected by
/// the passphrase.
pub fn export(repo: &Repository) -> Result<Vec<u8>> {
    let Some(name) = &repo.key_name else {
        return Err(Error::invalid(
            "this repository is not encrypted; it has no key to export",
        ));
    };
    Ok(repo.store.get_bounded(name, MAX_KEY_FILE_LEN as u64)?)
}
