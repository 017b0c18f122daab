//! Keys and the per-process cipher state.
//!
//! - [`MasterKey`]: the secret material of a repository (encryption key, id key, chunker seed),
//!   stored wrapped in `keys/<id>` ([`keyfile`]).
//! - [`Crypto`]: what a running process derives from it: the keyed chunk-id MAC and a session
//!   cipher. Every process draws a random 16-byte session id and derives its own AES-256-GCM
//!   key from the encryption key with HKDF-SHA256; nonces are a counter within the session. So
//!   no (key, nonce) pair repeats across processes, hosts or crashes, and no nonce state is
//!   kept on disk. Blobs carry their session id, and readers derive (and cache) the key of
//!   each session they meet.

pub mod kdf;
pub mod keyfile;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::id::ChunkId;

pub const TAG_LEN: usize = 16;
pub const SESSION_ID_LEN: usize = 16;

/// How a repository protects its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncryptionMode {
    /// AES-256-GCM with a key wrapped by a passphrase, stored in the repository.
    Repokey,
    /// No encryption, no authentication beyond recomputing chunk ids. For tests and
    /// benchmarks only.
    None,
}

impl EncryptionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptionMode::Repokey => "repokey-aes256gcm",
            EncryptionMode::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "repokey" | "repokey-aes256gcm" => Some(EncryptionMode::Repokey),
            "none" => Some(EncryptionMode::None),
            _ => None,
        }
    }
}

/// The secret material of a repository.
#[derive(Clone)]
pub struct MasterKey {
    pub enc_key: [u8; 32],
    pub id_key: [u8; 32],
    pub chunker_seed: u64,
}

/// Version byte of the serialized master key.
const MASTER_KEY_VERSION: u8 = 1;
pub const MASTER_KEY_LEN: usize = 1 + 32 + 32 + 8;

impl MasterKey {
    pub fn generate() -> Self {
        let mut rng = rand::rngs::OsRng;
        let mut enc_key = [0u8; 32];
        let mut id_key = [0u8; 32];
        rng.fill_bytes(&mut enc_key);
        rng.fill_bytes(&mut id_key);
        Self {
            enc_key,
            id_key,
            chunker_seed: rng.next_u64(),
        }
    }

    /// Unencrypted repositories still key their chunk ids, with a key anyone can derive from
    /// the repository id: ids stay stable per repository, and nothing is secret.
    pub fn for_unencrypted(repo_id: &[u8; 32]) -> Self {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"cairn unencrypted id key")
            .expect("hmac takes any key length");
        mac.update(repo_id);
        Self {
            enc_key: [0u8; 32],
            id_key: mac.finalize().into_bytes().into(),
            chunker_seed: 0,
        }
    }

    pub fn to_bytes(&self) -> [u8; MASTER_KEY_LEN] {
        let mut out = [0u8; MASTER_KEY_LEN];
        out[0] = MASTER_KEY_VERSION;
        out[1..33].copy_from_slice(&self.enc_key);
        out[33..65].copy_from_slice(&self.id_key);
        out[65..73].copy_from_slice(&self.chunker_seed.to_le_bytes());
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != MASTER_KEY_LEN || b[0] != MASTER_KEY_VERSION {
            return Err(Error::corrupt(
                "key",
                "master key material has the wrong size or version",
            ));
        }
        let mut enc_key = [0u8; 32];
        let mut id_key = [0u8; 32];
        let mut seed = [0u8; 8];
        enc_key.copy_from_slice(&b[1..33]);
        id_key.copy_from_slice(&b[33..65]);
        seed.copy_from_slice(&b[65..73]);
        Ok(Self {
            enc_key,
            id_key,
            chunker_seed: u64::from_le_bytes(seed),
        })
    }
}

/// Per-process crypto state: id MAC, this process's session cipher, and a cache of the
/// ciphers of sessions read back.
pub struct Crypto {
    mode: EncryptionMode,
    id_mac: Hmac<Sha256>,
    enc_key: [u8; 32],
    chunker_seed: u64,
    session_id: [u8; SESSION_ID_LEN],
    session: Aes256Gcm,
    next_nonce: AtomicU64,
    readers: Mutex<HashMap<[u8; SESSION_ID_LEN], Aes256Gcm>>,
}

fn session_cipher(enc_key: &[u8; 32], session_id: &[u8; SESSION_ID_LEN]) -> Aes256Gcm {
    let hk = hkdf::Hkdf::<Sha256>::new(None, enc_key);
    let mut info = Vec::with_capacity(32);
    info.extend_from_slice(b"cairn session key v1");
    info.extend_from_slice(session_id);
    let mut key = [0u8; 32];
    hk.expand(&info, &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    Aes256Gcm::new(&key.into())
}

fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&counter.to_le_bytes());
    n
}

impl Crypto {
    pub fn new(mode: EncryptionMode, key: &MasterKey) -> Self {
        let mut session_id = [0u8; SESSION_ID_LEN];
        rand::rngs::OsRng.fill_bytes(&mut session_id);
        Self::with_session(mode, key, session_id)
    }

    /// As `new`, with a chosen session id (tests).
    pub fn with_session(
        mode: EncryptionMode,
        key: &MasterKey,
        session_id: [u8; SESSION_ID_LEN],
    ) -> Self {
        Self {
            mode,
            id_mac: <Hmac<Sha256> as Mac>::new_from_slice(&key.id_key)
                .expect("hmac takes any key length"),
            enc_key: key.enc_key,
            chunker_seed: key.chunker_seed,
            session_id,
            session: session_cipher(&key.enc_key, &session_id),
            next_nonce: AtomicU64::new(0),
            readers: Mutex::new(HashMap::new()),
        }
    }

    pub fn mode(&self) -> EncryptionMode {
        self.mode
    }

    pub fn chunker_seed(&self) -> u64 {
        self.chunker_seed
    }

    pub fn session_id(&self) -> [u8; SESSION_ID_LEN] {
        self.session_id
    }

    /// Keyed id of a plaintext: HMAC-SHA256(id key, data).
    pub fn id_of(&self, data: &[u8]) -> ChunkId {
        let mut mac = self.id_mac.clone();
        mac.update(data);
        ChunkId(mac.finalize().into_bytes().into())
    }

    /// Reserves the next nonce counter of this session.
    pub fn next_nonce(&self) -> Result<u64> {
        let n = self.next_nonce.fetch_add(1, Ordering::Relaxed);
        if n == u64::MAX {
            return Err(Error::invalid(
                "nonce counter exhausted; restart the command",
            ));
        }
        Ok(n)
    }

    /// Encrypts `buf` in place under this session's key; returns the tag.
    pub fn seal_in_place(&self, nonce: u64, aad: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self
            .session
            .encrypt_in_place_detached(Nonce::from_slice(&nonce_bytes(nonce)), aad, buf)
            .expect("AES-GCM encryption fails only for inputs over 64 GiB");
        tag.into()
    }

    /// Decrypts `buf` in place, written by session `session_id`. `false` when the tag does not
    /// verify (wrong key, or any byte of header, id or ciphertext changed).
    pub fn open_in_place(
        &self,
        session_id: &[u8; SESSION_ID_LEN],
        nonce: u64,
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> bool {
        let nonce = nonce_bytes(nonce);
        let tag = Tag::from_slice(tag);
        if *session_id == self.session_id {
            return self
                .session
                .decrypt_in_place_detached(Nonce::from_slice(&nonce), aad, buf, tag)
                .is_ok();
        }
        let cipher = {
            let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            if readers.len() > 4096 {
                readers.clear();
            }
            readers
                .entry(*session_id)
                .or_insert_with(|| session_cipher(&self.enc_key, session_id))
                .clone()
        };
        cipher
            .decrypt_in_place_detached(Nonce::from_slice(&nonce), aad, buf, tag)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_key_round_trip() {
        let k = MasterKey::generate();
        let k2 = MasterKey::from_bytes(&k.to_bytes()).unwrap();
        assert_eq!(k.enc_key, k2.enc_key);
        assert_eq!(k.id_key, k2.id_key);
        assert_eq!(k.chunker_seed, k2.chunker_seed);
        assert!(MasterKey::from_bytes(&k.to_bytes()[..10]).is_err());
    }

    #[test]
    fn sessions_differ_and_read_each_other() {
        let k = MasterKey::generate();
        let a = Crypto::new(EncryptionMode::Repokey, &k);
        let b = Crypto::new(EncryptionMode::Repokey, &k);
        assert_ne!(a.session_id(), b.session_id());
        let mut buf = b"secret".to_vec();
        let n = a.next_nonce().unwrap();
        let tag = a.seal_in_place(n, b"aad", &mut buf);
        assert_ne!(&buf, b"secret");
        let mut wrong = buf.clone();
        assert!(!b.open_in_place(&a.session_id(), n, b"other", &mut wrong, &tag));
        assert!(b.open_in_place(&a.session_id(), n, b"aad", &mut buf, &tag));
        assert_eq!(&buf, b"secret");
    }

    #[test]
    fn ids_are_keyed() {
        let a = Crypto::new(EncryptionMode::Repokey, &MasterKey::generate());
        let b = Crypto::new(EncryptionMode::Repokey, &MasterKey::generate());
        assert_ne!(a.id_of(b"same data"), b.id_of(b"same data"));
        assert_eq!(a.id_of(b"same data"), a.id_of(b"same data"));
    }
}
