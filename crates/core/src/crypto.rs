//! Keys and the per-process cipher state.
//!
//! - [`MasterKey`]: the secret material of a repository (encryption key, id key, chunker key,
//!   256 bits each), stored wrapped in `keys/<id>` ([`keyfile`]).
//! - [`Crypto`]: what a running process derives from it: the keyed chunk-id MAC, a session
//!   cipher, and the header key that masks each blob's session and nonce. Every process draws
//!   a random 16-byte session id and derives its own AES-256-GCM key from the encryption key
//!   with HKDF-SHA256; nonces are a counter within the session. So no (key, nonce) pair repeats
//!   across processes, hosts or crashes, and no nonce state is kept on disk. Blobs carry their
//!   session id and counter masked (see [`Crypto::mask_header`]), and readers derive (and
//!   cache) the key of each session they meet.

pub mod buckets;
pub mod kdf;
pub mod keyfile;
pub mod paper;
pub mod suite;

pub use suite::Suite;
use suite::{Aead, IdMac, PackHasher};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aes::cipher::{BlockDecrypt, BlockEncrypt};
use aes::Aes256;
use aes_gcm::aead::KeyInit;
use hmac::{Hmac, Mac};
use rand::{RngCore, TryRngCore};
use sha2::Sha256;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::error::{Error, Result};
use crate::util::id::ChunkId;

pub const TAG_LEN: usize = 16;
pub const SESSION_ID_LEN: usize = 16;
/// Length of a blob's masked header: two AES blocks.
pub const MASKED_HEADER_LEN: usize = 32;

/// How a repository protects its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncryptionMode {
    /// AES-256-GCM with a key wrapped by a passphrase, stored in the repository.
    Repokey,
    /// The same format under keys anyone can derive from the repository id: nothing is
    /// secret and nothing is authenticated against the host. For tests and benchmarks only.
    None,
}

impl EncryptionMode {
    /// The config's `encryption` field: `repokey-<suite>`, or `none`.
    pub fn name(self, suite: Suite) -> String {
        match self {
            EncryptionMode::Repokey => format!("repokey-{}", suite.as_str()),
            EncryptionMode::None => "none".into(),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::parse_with_suite(s).map(|(m, _)| m)
    }

    /// The mode and the suite of a config's `encryption` field (`repokey` alone is the first
    /// suite, as it was before there were two; `none` has the first suite's ids).
    pub fn parse_with_suite(s: &str) -> Option<(Self, Suite)> {
        match s {
            "none" => Some((EncryptionMode::None, Suite::Aes256Gcm)),
            "repokey" => Some((EncryptionMode::Repokey, Suite::Aes256Gcm)),
            _ => Suite::parse(s.strip_prefix("repokey-")?).map(|x| (EncryptionMode::Repokey, x)),
        }
    }
}

/// Size padding of whole objects (`init --padding`; `buckets` by default). See
/// [`buckets`]: a session's packs add up to a point of a grid of ratio 1.03, and index
/// fragments, archives and retirement records are each padded to a grid of ratio 2, both with
/// a secret offset. Full packs are exactly the pack size either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// Objects are as long as their contents (full packs still exactly the pack size).
    None,
    /// Whole objects padded to secret-offset buckets.
    Buckets,
}

impl Padding {
    pub fn as_str(self) -> &'static str {
        match self {
            Padding::None => "none",
            Padding::Buckets => "buckets",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Padding::None),
            "buckets" => Some(Padding::Buckets),
            _ => None,
        }
    }
}

/// The secret material of a repository. It is wiped from memory when dropped, and cannot be
/// cloned (a copy would be one more place to wipe):
///
/// ```compile_fail
/// fn copy(k: &cairn::crypto::MasterKey) -> cairn::crypto::MasterKey {
///     k.clone()
/// }
/// ```
pub struct MasterKey {
    pub enc_key: [u8; 32],
    pub id_key: [u8; 32],
    /// Keys the chunker's gear table ([`crate::chunker`]).
    pub chunker_key: [u8; 32],
}

/// Version byte of the serialized master key.
const MASTER_KEY_VERSION: u8 = 2;
pub const MASTER_KEY_LEN: usize = 1 + 3 * 32;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

impl MasterKey {
    pub fn generate() -> Self {
        let mut rng = rand::rngs::OsRng.unwrap_err();
        let mut k = Self {
            enc_key: [0u8; 32],
            id_key: [0u8; 32],
            chunker_key: [0u8; 32],
        };
        rng.fill_bytes(&mut k.enc_key);
        rng.fill_bytes(&mut k.id_key);
        rng.fill_bytes(&mut k.chunker_key);
        k
    }

    /// Unencrypted repositories use the same format with keys anyone can derive from the
    /// repository id: ids and cut points stay stable per repository, and nothing is secret.
    pub fn for_unencrypted(repo_id: &[u8; 32]) -> Self {
        let derive = |label: &[u8]| hmac(label, &[repo_id]);
        Self {
            enc_key: derive(b"cairn unencrypted enc key"),
            id_key: derive(b"cairn unencrypted id key"),
            chunker_key: derive(b"cairn unencrypted chunker key"),
        }
    }

    pub fn to_bytes(&self) -> Zeroizing<[u8; MASTER_KEY_LEN]> {
        let mut out = Zeroizing::new([0u8; MASTER_KEY_LEN]);
        out[0] = MASTER_KEY_VERSION;
        out[1..33].copy_from_slice(&self.enc_key);
        out[33..65].copy_from_slice(&self.id_key);
        out[65..97].copy_from_slice(&self.chunker_key);
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != MASTER_KEY_LEN || b[0] != MASTER_KEY_VERSION {
            return Err(Error::corrupt(
                "key",
                "master key material has the wrong size or version",
            ));
        }
        let mut k = Self {
            enc_key: [0u8; 32],
            id_key: [0u8; 32],
            chunker_key: [0u8; 32],
        };
        k.enc_key.copy_from_slice(&b[1..33]);
        k.id_key.copy_from_slice(&b[33..65]);
        k.chunker_key.copy_from_slice(&b[65..97]);
        Ok(k)
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        self.enc_key.zeroize();
        self.id_key.zeroize();
        self.chunker_key.zeroize();
    }
}

impl ZeroizeOnDrop for MasterKey {}

/// Per-process crypto state: id MAC, this process's session cipher, the header mask, and a
/// cache of the ciphers of sessions read back.
pub struct Crypto {
    mode: EncryptionMode,
    suite: Suite,
    padding: Padding,
    buckets: buckets::Buckets,
    /// Generates packs' filler ([`Crypto::filler`]).
    filler: Aead,
    id_mac: IdMac,
    enc_key: [u8; 32],
    chunker_key: [u8; 32],
    header: Aes256,
    session_id: [u8; SESSION_ID_LEN],
    session: Aead,
    next_nonce: AtomicU64,
    readers: Mutex<HashMap<[u8; SESSION_ID_LEN], Aead>>,
}

/// The key that seals key files' labels (`crypto/keyfile.rs`): every holder of the master key
/// can read every key file's label, the host none.
pub fn label_key(enc_key: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    hkdf32(enc_key, &[b"cairn key file label v3"])
}

/// The key that seals lock objects' details (`lock/sealed.rs`): every client that takes a
/// lock holds it, the host does not.
pub fn lock_key(enc_key: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    hkdf32(enc_key, &[b"cairn lock details v2"])
}

fn hkdf32(ikm: &[u8; 32], info: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    let hk = hkdf::Hkdf::<Sha256>::new(None, ikm);
    let info: Vec<u8> = info.concat();
    let mut key = Zeroizing::new([0u8; 32]);
    hk.expand(&info, &mut key[..])
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    key
}

fn session_cipher(suite: Suite, enc_key: &[u8; 32], session_id: &[u8; SESSION_ID_LEN]) -> Aead {
    let key = hkdf32(enc_key, &[&suite.info(b"cairn session key v2"), session_id]);
    Aead::new(suite, &key)
}

fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&counter.to_le_bytes());
    n
}

impl Crypto {
    /// Encrypted with a fresh random key and no padding: for unit tests.
    #[cfg(test)]
    pub(crate) fn random_for_tests() -> Self {
        Self::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        )
    }

    /// The first suite's state (AES-256-GCM, HMAC-SHA256): see [`Crypto::of_suite`].
    pub fn new(mode: EncryptionMode, key: &MasterKey, padding: Padding) -> Self {
        Self::of_suite(mode, Suite::Aes256Gcm, key, padding)
    }

    /// A new session of a repository of `suite`.
    pub fn of_suite(mode: EncryptionMode, suite: Suite, key: &MasterKey, padding: Padding) -> Self {
        let mut session_id = [0u8; SESSION_ID_LEN];
        rand::rngs::OsRng.unwrap_err().fill_bytes(&mut session_id);
        Self::with_session(mode, suite, key, padding, session_id)
    }

    /// As `of_suite`, with a chosen session id (tests).
    pub fn with_session(
        mode: EncryptionMode,
        suite: Suite,
        key: &MasterKey,
        padding: Padding,
        session_id: [u8; SESSION_ID_LEN],
    ) -> Self {
        let header_key = hkdf32(&key.enc_key, &[b"cairn blob header key v2"]);
        let filler_key = hkdf32(&key.enc_key, &[&suite.info(b"cairn pack filler v3")]);
        Self {
            mode,
            suite,
            padding,
            buckets: buckets::Buckets::from_key(&key.enc_key),
            filler: Aead::new(suite, &filler_key),
            id_mac: IdMac::new(suite, &key.id_key),
            enc_key: key.enc_key,
            chunker_key: key.chunker_key,
            header: Aes256::new_from_slice(&header_key[..]).expect("a 32-byte key"),
            session_id,
            session: session_cipher(suite, &key.enc_key, &session_id),
            next_nonce: AtomicU64::new(0),
            readers: Mutex::new(HashMap::new()),
        }
    }

    pub fn mode(&self) -> EncryptionMode {
        self.mode
    }

    pub fn suite(&self) -> Suite {
        self.suite
    }

    pub fn padding(&self) -> Padding {
        self.padding
    }

    /// A hasher for a pack's name (SHA-256 or BLAKE3, as the suite says).
    pub fn pack_hasher(&self) -> PackHasher {
        PackHasher::new(self.suite)
    }

    /// The name-hash of a whole pack (or any bytes) in one call.
    pub fn pack_hash(&self, data: &[u8]) -> [u8; 32] {
        PackHasher::digest(self.suite, data)
    }

    /// The total that the packs of a session of `len` bytes are padded to.
    pub fn session_len(&self, len: u64) -> u64 {
        match self.padding {
            Padding::None => len,
            Padding::Buckets => self.buckets.session(len),
        }
    }

    /// The length a metadata object (fragment, archive, retirement record) of `len` bytes is
    /// padded to.
    pub fn object_len(&self, len: u64) -> u64 {
        match self.padding {
            Padding::None => len,
            Padding::Buckets => self.buckets.object(len),
        }
    }

    /// Fills `buf` with the filler of the pack whose blob area hashes to `data_hash`: the
    /// keystream of the suite's AEAD (AES-256-GCM or ChaCha20-Poly1305) under a key derived
    /// from the encryption key, with a nonce from that hash. It looks like ciphertext, so the
    /// host cannot tell where a pack's blobs end, and it is determined, so `check
    /// --verify-data` can tell that nothing is hidden in it.
    pub fn filler(&self, data_hash: &[u8; 32], buf: &mut [u8]) {
        buf.fill(0);
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&data_hash[..12]);
        let _tag = self.filler.seal(&nonce, b"", buf);
    }

    pub fn chunker_key(&self) -> &[u8; 32] {
        &self.chunker_key
    }

    /// The key of key files' labels ([`label_key`]).
    pub fn label_key(&self) -> Zeroizing<[u8; 32]> {
        label_key(&self.enc_key)
    }

    /// The key that seals this repository's lock objects ([`lock_key`]).
    pub fn lock_key(&self) -> Zeroizing<[u8; 32]> {
        lock_key(&self.enc_key)
    }

    /// The key that authenticates the client's record of verified packs
    /// (`ops/check/record.rs`): kept in the cache, it cannot be forged without the key.
    pub fn record_key(&self) -> Zeroizing<[u8; 32]> {
        hkdf32(&self.enc_key, &[b"cairn verification record v1"])
    }

    pub fn session_id(&self) -> [u8; SESSION_ID_LEN] {
        self.session_id
    }

    /// Keyed id of a plaintext: HMAC-SHA256(id key, data), or keyed BLAKE3 under a key
    /// derived from the id key.
    pub fn id_of(&self, data: &[u8]) -> ChunkId {
        ChunkId(self.id_mac.id(data))
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

    /// The 32-byte header of a blob sealed by this session with nonce counter `nonce`:
    /// AES-256-CBC with a zero IV, under the header key, of
    /// `counter (u64 LE) ‖ session id (16) ‖ 8 zero bytes`.
    ///
    /// The first block holds the counter and half the session id, so it is unique per blob;
    /// CBC carries that into the second block. Every header therefore looks random: the
    /// session id, which is the same for all blobs of a process, cannot be searched for to
    /// find where blobs begin (and so how long each one is).
    pub fn mask_header(&self, nonce: u64) -> [u8; MASKED_HEADER_LEN] {
        let mut b1 = [0u8; 16];
        b1[..8].copy_from_slice(&nonce.to_le_bytes());
        b1[8..].copy_from_slice(&self.session_id[..8]);
        let mut b2 = [0u8; 16];
        b2[..8].copy_from_slice(&self.session_id[8..]);
        let mut c1 = b1.into();
        self.header.encrypt_block(&mut c1);
        for (x, c) in b2.iter_mut().zip(c1.iter()) {
            *x ^= c;
        }
        let mut c2 = b2.into();
        self.header.encrypt_block(&mut c2);
        let mut out = [0u8; MASKED_HEADER_LEN];
        out[..16].copy_from_slice(&c1);
        out[16..].copy_from_slice(&c2);
        out
    }

    /// Reverses [`mask_header`](Self::mask_header): the session id and nonce counter, or
    /// `None` when the 8 check bytes are not zero (damage, or a blob of another key).
    pub fn unmask_header(&self, h: &[u8]) -> Option<([u8; SESSION_ID_LEN], u64)> {
        let h: &[u8; MASKED_HEADER_LEN] = h.get(..MASKED_HEADER_LEN)?.try_into().ok()?;
        let mut p1 = *aes::Block::from_slice(&h[..16]);
        self.header.decrypt_block(&mut p1);
        let mut p2 = *aes::Block::from_slice(&h[16..]);
        self.header.decrypt_block(&mut p2);
        for (x, c) in p2.iter_mut().zip(&h[..16]) {
            *x ^= c;
        }
        if p2[8..] != [0u8; 8] {
            return None;
        }
        let mut session = [0u8; SESSION_ID_LEN];
        session[..8].copy_from_slice(&p1[8..]);
        session[8..].copy_from_slice(&p2[..8]);
        let mut n = [0u8; 8];
        n.copy_from_slice(&p1[..8]);
        Some((session, u64::from_le_bytes(n)))
    }

    /// Encrypts `buf` in place under this session's key; returns the tag.
    pub fn seal_in_place(&self, nonce: u64, aad: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        self.session.seal(&nonce_bytes(nonce), aad, buf)
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
        if *session_id == self.session_id {
            return self.session.open(&nonce, aad, buf, tag);
        }
        let cipher = {
            let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            if readers.len() > 4096 {
                readers.clear();
            }
            readers
                .entry(*session_id)
                .or_insert_with(|| session_cipher(self.suite, &self.enc_key, session_id))
                .clone()
        };
        cipher.open(&nonce, aad, buf, tag)
    }
}

impl Drop for Crypto {
    fn drop(&mut self) {
        self.enc_key.zeroize();
        self.chunker_key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_material_is_wiped_on_drop() {
        fn wiped<T: ZeroizeOnDrop>() {}
        wiped::<MasterKey>();
        // AES-GCM's parts: the AES key schedule (and the GHASH key, through polyval's
        // "zeroize" feature, which has no marker trait to assert).
        wiped::<Aes256>();
        wiped::<Zeroizing<[u8; 32]>>();
    }

    fn crypto() -> Crypto {
        Crypto::random_for_tests()
    }

    #[test]
    fn master_key_round_trip() {
        let k = MasterKey::generate();
        let k2 = MasterKey::from_bytes(&k.to_bytes()[..]).unwrap();
        assert_eq!(k.enc_key, k2.enc_key);
        assert_eq!(k.id_key, k2.id_key);
        assert_eq!(k.chunker_key, k2.chunker_key);
        assert!(MasterKey::from_bytes(&k.to_bytes()[..10]).is_err());
        let mut v1 = k.to_bytes();
        v1[0] = 1;
        assert!(MasterKey::from_bytes(&v1[..]).is_err());
    }

    #[test]
    fn sessions_differ_and_read_each_other() {
        let k = MasterKey::generate();
        let a = Crypto::new(EncryptionMode::Repokey, &k, Padding::None);
        let b = Crypto::new(EncryptionMode::Repokey, &k, Padding::None);
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
        let (a, b) = (crypto(), crypto());
        assert_ne!(a.id_of(b"same data"), b.id_of(b"same data"));
        assert_eq!(a.id_of(b"same data"), a.id_of(b"same data"));
    }

    #[test]
    fn masked_headers_round_trip_and_share_nothing() {
        let k = MasterKey::generate();
        let a = Crypto::new(EncryptionMode::Repokey, &k, Padding::None);
        let b = Crypto::new(EncryptionMode::Repokey, &k, Padding::None);
        let headers: Vec<[u8; 32]> = (0..1000).map(|n| a.mask_header(n)).collect();
        for (n, h) in headers.iter().enumerate() {
            assert_eq!(b.unmask_header(h), Some((a.session_id(), n as u64)));
        }
        // No 8-byte string recurs at the same place in two headers: nothing marks a blob's
        // start (the session id would, in clear). (Random 8-byte strings repeat among 1,000
        // with a probability of about 3e-14.)
        for at in 0..=24 {
            let mut seen = std::collections::HashSet::new();
            for h in &headers {
                assert!(seen.insert(&h[at..at + 8]), "repeat at offset {at}");
            }
        }
        // Another key cannot unmask them; a flipped bit is noticed.
        let other = crypto();
        assert!(headers.iter().all(|h| other.unmask_header(h).is_none()));
        let mut bad = headers[0];
        bad[20] ^= 1;
        assert!(b.unmask_header(&bad).is_none());
    }

    #[test]
    fn filler_is_determined_by_key_and_pack_and_looks_random() {
        let k = MasterKey::generate();
        let a = Crypto::new(EncryptionMode::Repokey, &k, Padding::Buckets);
        let b = Crypto::new(EncryptionMode::Repokey, &k, Padding::Buckets);
        let (mut x, mut y, mut z) = (vec![1u8; 4096], vec![2u8; 4096], vec![0u8; 4096]);
        a.filler(&[5; 32], &mut x);
        b.filler(&[5; 32], &mut y);
        assert_eq!(
            x, y,
            "another session of the same key makes the same filler"
        );
        a.filler(&[6; 32], &mut z);
        assert_ne!(x, z, "another pack, another filler");
        let zeros = x.iter().filter(|b| **b == 0).count();
        assert!(zeros < 64, "{zeros} zero bytes in 4096");
        let other = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        );
        other.filler(&[5; 32], &mut z);
        assert_ne!(x, z, "another key, another filler");
    }
}
