//! The key file `keys/<id>`: the master key wrapped with a passphrase-derived key.
//!
//! JSON, so that it can be inspected and backed up by hand:
//! `{"version":1,"repository":HEX,"kdf":{…},"cipher":"aes-256-gcm","nonce":HEX,"data":HEX}`.
//! `data` is AES-256-GCM(kek, nonce, master key bytes, aad = "cairn key v1" ‖ repository id)
//! with the 16-byte tag appended, so a key file only opens for the repository it was made for.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Serialize};

use super::kdf::KdfParams;
use super::MasterKey;
use crate::error::{Error, Result};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyFile {
    pub version: u32,
    pub repository: String,
    pub kdf: KdfParams,
    pub cipher: String,
    pub nonce: String,
    pub data: String,
}

const AAD_PREFIX: &[u8] = b"cairn key v1";
/// A key file is small; anything bigger is not one.
pub const MAX_KEY_FILE_LEN: usize = 64 * 1024;

fn aad(repo_id: &[u8; 32]) -> Vec<u8> {
    let mut a = AAD_PREFIX.to_vec();
    a.extend_from_slice(repo_id);
    a
}

impl KeyFile {
    pub fn wrap(
        key: &MasterKey,
        repo_id: &[u8; 32],
        passphrase: &[u8],
        kdf: KdfParams,
    ) -> Result<Self> {
        let kek = kdf.derive(passphrase)?;
        let nonce: [u8; 12] = rand::random();
        let cipher = Aes256Gcm::new(&kek.into());
        let data = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &key.to_bytes(),
                    aad: &aad(repo_id),
                },
            )
            .map_err(|_| Error::invalid("key encryption failed"))?;
        Ok(Self {
            version: 1,
            repository: hex::encode(repo_id),
            kdf,
            cipher: "aes-256-gcm".into(),
            nonce: hex::encode(nonce),
            data: hex::encode(data),
        })
    }

    /// Parses a key file; every malformed input is an error, never a panic.
    pub fn parse(bytes: &[u8], name: &str) -> Result<Self> {
        if bytes.len() > MAX_KEY_FILE_LEN {
            return Err(Error::corrupt(name, "key file is too large"));
        }
        let kf: KeyFile = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(name, format!("not a key file: {e}")))?;
        if kf.version != 1 || kf.cipher != "aes-256-gcm" {
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

    /// Unwraps the master key. A wrong passphrase is [`Error::WrongPassphrase`].
    pub fn unwrap_key(&self, repo_id: &[u8; 32], passphrase: &[u8]) -> Result<MasterKey> {
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
        let cipher = Aes256Gcm::new(&kek.into());
        let plain = cipher
            .decrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &data,
                    aad: &aad(repo_id),
                },
            )
            .map_err(|_| Error::WrongPassphrase)?;
        MasterKey::from_bytes(&plain)
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
        let kf = KeyFile::wrap(&k, &repo, b"pw", cheap()).unwrap();
        let parsed = KeyFile::parse(&kf.to_bytes(), "k").unwrap();
        let k2 = parsed.unwrap_key(&repo, b"pw").unwrap();
        assert_eq!(k2.id_key, k.id_key);
        assert!(matches!(
            parsed.unwrap_key(&repo, b"nope"),
            Err(Error::WrongPassphrase)
        ));
        assert!(parsed.unwrap_key(&[8u8; 32], b"pw").is_err());
    }

    #[test]
    fn truncated_key_files_are_errors() {
        let kf = KeyFile::wrap(&MasterKey::generate(), &[1; 32], b"pw", cheap()).unwrap();
        let bytes = kf.to_bytes();
        for cut in [0, 1, 10, bytes.len() / 2, bytes.len() - 3] {
            let r = KeyFile::parse(&bytes[..cut], "k").and_then(|k| k.unwrap_key(&[1; 32], b"pw"));
            assert!(r.is_err(), "cut {cut}");
        }
    }
}
