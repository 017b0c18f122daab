//! The key file `keys/<id>`: the master key wrapped with a passphrase-derived key.
//!
//! JSON, so that it can be inspected and backed up by hand:
//! `{"version":2,"repository":HEX,"kdf":{…},"cipher":"aes-256-gcm","nonce":HEX,"data":HEX}`.
//! `data` is AES-256-GCM(kek, nonce, master key bytes ‖ config, aad = "cairn key v2" ‖
//! repository id) with the 16-byte tag appended, so a key file only opens for the repository
//! it was made for. `config` is the repository's `config` object as `init` wrote it: the
//! authenticated copy that the plaintext `config` is compared with on every open.

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
    /// When the key file was made (RFC 3339), and by whom (`user@host`), for `key list`.
    /// Authenticated with the key (an edited label makes the key fail to open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
}

const AAD_PREFIX: &[u8] = b"cairn key v2";
pub const VERSION: u32 = 2;
/// A key file is small; anything bigger is not one.
pub const MAX_KEY_FILE_LEN: usize = 64 * 1024;

/// `user@host` of this process, for a key file's label.
fn made_by() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| rustix::process::getuid().as_raw().to_string());
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{user}@{host}")
}

/// What the wrapping authenticates besides the key: the repository's id, and the label
/// (when there is one), so that a key file opens only for its repository and its label
/// cannot be changed without the key failing to open.
fn aad(repo_id: &[u8; 32], created: Option<&str>, made_by: Option<&str>) -> Vec<u8> {
    let mut a = AAD_PREFIX.to_vec();
    a.extend_from_slice(repo_id);
    if created.is_some() || made_by.is_some() {
        for field in [created, made_by] {
            let f = field.unwrap_or("").as_bytes();
            a.extend_from_slice(&(f.len() as u32).to_le_bytes());
            a.extend_from_slice(f);
        }
    }
    a
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
        let created = crate::clock::Timestamp::now().rfc3339();
        let made_by = made_by();
        let cipher = Aes256Gcm::new_from_slice(&kek[..]).expect("a 32-byte key");
        let mut msg = Zeroizing::new(key.to_bytes().to_vec());
        msg.extend_from_slice(config);
        let data = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &msg,
                    aad: &aad(repo_id, Some(&created), Some(&made_by)),
                },
            )
            .map_err(|_| Error::invalid("key encryption failed"))?;
        Ok(Self {
            version: VERSION,
            repository: hex::encode(repo_id),
            kdf,
            cipher: "aes-256-gcm".into(),
            nonce: hex::encode(nonce),
            data: hex::encode(data),
            created: Some(created),
            made_by: Some(made_by),
        })
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

    /// Unwraps the master key and the authenticated copy of the config. A wrong passphrase
    /// is [`Error::WrongPassphrase`].
    pub fn unwrap_key(
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
                    aad: &aad(repo_id, self.created.as_deref(), self.made_by.as_deref()),
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
}
