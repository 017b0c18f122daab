//! The key file `keys/<id>`: the master key wrapped with a passphrase-derived key.
//!
//! JSON, so that it can be inspected and backed up by hand:
//! `{"version":3,"repository":HEX,"kdf":{…},"cipher":"aes-256-gcm","nonce":HEX,"data":HEX,
//! "label":HEX}`. `data` is AES-256-GCM(kek, nonce, master key bytes ‖ config, aad =
//! "cairn key v3" ‖ repository id) with the 16-byte tag appended, so a key file only opens for
//! the repository it was made for. `config` is the repository's `config` object as `init`
//! wrote it: the authenticated copy that the plaintext `config` is compared with on every
//! open. `label` (when and by whom the key file was made, for `key list`) is sealed too:
//! nonce (12) ‖ AES-256-GCM(label key, nonce, JSON {"created","made_by"}, aad =
//! "cairn key label v3" ‖ repository id ‖ the bytes of `data`), where the label key is derived
//! from the master key ([`crate::crypto::label_key`]): whoever holds the master key reads
//! every key file's label; the host reads none, and cannot move one to another key file.
//! Version 2 kept the label in clear (`made_by` is `user@host`) and is refused by name.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::kdf::KdfParams;
use super::{MasterKey, MASTER_KEY_LEN};
use crate::error::{Error, Result};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyFile {
    pub version: u32,
    pub repository: String,
    pub kdf: KdfParams,
    pub cipher: String,
    pub nonce: String,
    pub data: String,
    /// When and by whom the key file was made, sealed ([`Label`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// When a key file was made (RFC 3339), and by whom (`user@host`), for `key list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub created: String,
    pub made_by: String,
}

const AAD_PREFIX: &[u8] = b"cairn key v3";
const LABEL_AAD_PREFIX: &[u8] = b"cairn key label v3";
pub const VERSION: u32 = 3;
/// A key file is small; anything bigger is not one.
pub const MAX_KEY_FILE_LEN: usize = 64 * 1024;

/// `user@host` of this process, for a key file's label.
fn made_by() -> String {
    use crate::util::identity;
    format!("{}@{}", identity::user_name(), identity::hostname())
}

/// What the wrapping authenticates besides the key: the repository's id, so that a key file
/// opens only for its repository.
fn aad(repo_id: &[u8; 32]) -> Vec<u8> {
    let mut a = AAD_PREFIX.to_vec();
    a.extend_from_slice(repo_id);
    a
}

fn label_aad(repo_id: &[u8; 32], data: &[u8]) -> Vec<u8> {
    let mut a = LABEL_AAD_PREFIX.to_vec();
    a.extend_from_slice(repo_id);
    a.extend_from_slice(data);
    a
}

/// Seals `label` for the key file whose wrapped key is `data`.
fn seal_label(
    label_key: &[u8; 32],
    repo_id: &[u8; 32],
    data: &[u8],
    label: &Label,
) -> Result<String> {
    let nonce: [u8; 12] = rand::random();
    let json = serde_json::to_vec(label).map_err(|e| Error::invalid(e.to_string()))?;
    let cipher = Aes256Gcm::new_from_slice(label_key).expect("a 32-byte key");
    let sealed = cipher
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &json,
                aad: &label_aad(repo_id, data),
            },
        )
        .map_err(|_| Error::invalid("label encryption failed"))?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Ok(hex::encode(out))
}

impl KeyFile {
    pub fn wrap(
        key: &MasterKey,
        config: &[u8],
        repo_id: &[u8; 32],
        passphrase: &[u8],
        kdf: KdfParams,
    ) -> Result<Self> {
        let kek = kdf.derive(passphrase)?;
        let nonce: [u8; 12] = rand::random();
        let cipher = Aes256Gcm::new_from_slice(&kek[..]).expect("a 32-byte key");
        let mut msg = Zeroizing::new(key.to_bytes().to_vec());
        msg.extend_from_slice(config);
        let data = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &msg,
                    aad: &aad(repo_id),
                },
            )
            .map_err(|_| Error::invalid("key encryption failed"))?;
        let mut kf = Self::unlabelled(repo_id, kdf, hex::encode(nonce), hex::encode(data));
        kf.label_anew(key, repo_id)?;
        Ok(kf)
    }

    /// The key file's label, opened with the label key of its repository (`None` when it has
    /// none; an error when it does not open).
    pub fn label(&self, label_key: &[u8; 32], repo_id: &[u8; 32]) -> Option<Result<Label>> {
        let sealed = self.label.as_deref()?;
        let bad = || Error::corrupt("key file", "its label does not open (damaged or forged)");
        Some((|| {
            let bytes = hex::decode(sealed).map_err(|_| bad())?;
            let data = hex::decode(&self.data).map_err(|_| bad())?;
            if bytes.len() < 12 {
                return Err(bad());
            }
            let cipher = Aes256Gcm::new_from_slice(label_key).expect("a 32-byte key");
            let json = cipher
                .decrypt(
                    Nonce::from_slice(&bytes[..12]),
                    Payload {
                        msg: &bytes[12..],
                        aad: &label_aad(repo_id, &data),
                    },
                )
                .map_err(|_| bad())?;
            serde_json::from_slice(&json).map_err(|_| bad())
        })())
    }

    /// Parses a key file; every malformed input is an error, never a panic.
    pub fn parse(bytes: &[u8], name: &str) -> Result<Self> {
        if bytes.len() > MAX_KEY_FILE_LEN {
            return Err(Error::corrupt(name, "key file is too large"));
        }
        let kf: KeyFile = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(name, format!("not a key file: {e}")))?;
        if kf.version == 1 {
            return Err(Error::corrupt(
                name,
                "key file version 1 belongs to repository format 1, which this cairn no longer reads",
            ));
        }
        if kf.version == 2 {
            return Err(Error::corrupt(
                name,
                "key file version 2 (with its label in clear) belongs to development builds before 2026-12-05, which this cairn no longer reads",
            ));
        }
        if kf.version != VERSION || kf.cipher != "aes-256-gcm" {
            return Err(Error::corrupt(
                name,
                format!(
                    "unsupported key file version {} / cipher {:?}",
                    kf.version, kf.cipher
                ),
            ));
        }
        Ok(kf)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("key file serializes");
        v.push(b'\n');
        v
    }

    /// [`KeyFile::unwrap_key`] without the label's check: for a key file that has none yet
    /// (one typed back from paper).
    pub fn unwrap_unlabelled(
        &self,
        repo_id: &[u8; 32],
        passphrase: &[u8],
    ) -> Result<(MasterKey, Vec<u8>)> {
        if self.repository != hex::encode(repo_id) {
            return Err(Error::corrupt(
                "key file",
                "it belongs to another repository",
            ));
        }
        let nonce: [u8; 12] = hex::decode(&self.nonce)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| Error::corrupt("key file", "bad nonce"))?;
        let data =
            hex::decode(&self.data).map_err(|_| Error::corrupt("key file", "data is not hex"))?;
        let kek = self.kdf.derive(passphrase)?;
        let cipher = Aes256Gcm::new_from_slice(&kek[..]).expect("a 32-byte key");
        let plain = cipher
            .decrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &data,
                    aad: &aad(repo_id),
                },
            )
            .map_err(|_| Error::WrongPassphrase)?;
        let plain = Zeroizing::new(plain);
        if plain.len() < MASTER_KEY_LEN {
            return Err(Error::corrupt(
                "key file",
                "master key material is too short",
            ));
        }
        let key = MasterKey::from_bytes(&plain[..MASTER_KEY_LEN])?;
        Ok((key, plain[MASTER_KEY_LEN..].to_vec()))
    }

    /// Unwraps the master key and the authenticated copy of the config. A wrong passphrase
    /// is [`Error::WrongPassphrase`].
    pub fn unwrap_key(
        &self,
        repo_id: &[u8; 32],
        passphrase: &[u8],
    ) -> Result<(MasterKey, Vec<u8>)> {
        let (key, config) = self.unwrap_unlabelled(repo_id, passphrase)?;
        // The label is cosmetic, but it is part of the key file: a label that does not open
        // (or is missing: every version 3 key file has one) means the file was damaged or
        // edited, and a damaged key file is refused whole, as a damaged pack is.
        match self.label(&super::label_key(&key.enc_key), repo_id) {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => {
                return Err(Error::corrupt(
                    "key file",
                    "it has no label (damaged or edited)",
                ))
            }
        }
        Ok((key, config))
    }

    /// A key file without its label, from a paper key's key material: it opens with
    /// [`KeyFile::unwrap_unlabelled`], and gets its label from [`KeyFile::label_anew`].
    pub fn unlabelled(repo_id: &[u8; 32], kdf: KdfParams, nonce: String, data: String) -> Self {
        Self {
            version: VERSION,
            repository: hex::encode(repo_id),
            kdf,
            cipher: "aes-256-gcm".into(),
            nonce,
            data,
            label: None,
        }
    }

    /// Seals a new label (made now, by this user on this host) with the label key of `key`.
    pub fn label_anew(&mut self, key: &MasterKey, repo_id: &[u8; 32]) -> Result<()> {
        let data =
            hex::decode(&self.data).map_err(|_| Error::corrupt("key file", "data is not hex"))?;
        let label = Label {
            created: crate::util::clock::Timestamp::now().rfc3339(),
            made_by: made_by(),
        };
        self.label = Some(seal_label(
            &super::label_key(&key.enc_key),
            repo_id,
            &data,
            &label,
        )?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cheap() -> KdfParams {
        KdfParams {
            memory_kib: 64,
            iterations: 1,
            ..KdfParams::new_default()
        }
    }

    #[test]
    fn wrap_unwrap_and_wrong_passphrase() {
        let k = MasterKey::generate();
        let repo = [7u8; 32];
        let kf = KeyFile::wrap(&k, b"{config}", &repo, b"pw", cheap()).unwrap();
        let parsed = KeyFile::parse(&kf.to_bytes(), "k").unwrap();
        let (k2, config) = parsed.unwrap_key(&repo, b"pw").unwrap();
        assert_eq!(k2.id_key, k.id_key);
        assert_eq!(config, b"{config}");
        assert!(matches!(
            parsed.unwrap_key(&repo, b"nope"),
            Err(Error::WrongPassphrase)
        ));
        assert!(parsed.unwrap_key(&[8u8; 32], b"pw").is_err());
    }

    #[test]
    fn truncated_key_files_are_errors() {
        let kf = KeyFile::wrap(&MasterKey::generate(), b"", &[1; 32], b"pw", cheap()).unwrap();
        let bytes = kf.to_bytes();
        for cut in [0, 1, 10, bytes.len() / 2, bytes.len() - 3] {
            let r = KeyFile::parse(&bytes[..cut], "k").and_then(|k| k.unwrap_key(&[1; 32], b"pw"));
            assert!(r.is_err(), "cut {cut}");
        }
    }

    #[test]
    fn a_damaged_moved_or_missing_label_refuses_the_key_file() {
        let k = MasterKey::generate();
        let repo = [3u8; 32];
        let kf = KeyFile::wrap(&k, b"", &repo, b"pw", cheap()).unwrap();
        let sealed = kf.label.clone().unwrap();
        // Every byte of the label, changed to another hex digit.
        for i in 0..sealed.len() {
            let mut bad = kf.clone();
            let mut b = sealed.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            bad.label = Some(String::from_utf8(b).unwrap());
            assert!(bad.unwrap_key(&repo, b"pw").is_err(), "byte {i}");
        }
        // Another key file's label (same master key, same repository).
        let other = KeyFile::wrap(&k, b"", &repo, b"pw2", cheap()).unwrap();
        let mut moved = kf.clone();
        moved.label = other.label.clone();
        assert!(moved.unwrap_key(&repo, b"pw").is_err());
        let mut stripped = kf.clone();
        stripped.label = None;
        assert!(stripped.unwrap_key(&repo, b"pw").is_err());
        assert!(kf.unwrap_key(&repo, b"pw").is_ok());
    }
}
