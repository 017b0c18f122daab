//! The two cipher suites a repository is made with (`init --encryption`), and the three bulk
//! primitives each gives: the keyed chunk id, the AEAD that seals blobs, and the hash that
//! names packs.
//!
//! | suite | chunk id | blobs, filler | pack names, TOC data hash |
//! |---|---|---|---|
//! | `aes256gcm` | HMAC-SHA256 | AES-256-GCM | SHA-256 |
//! | `chacha20poly1305-blake3` | keyed BLAKE3 | ChaCha20-Poly1305 | BLAKE3 |
//!
//! The second is faster on every x86-64 CPU with AVX2 (this one has AES and SHA
//! instructions, and it still seals 1.44× as fast) and on CPUs without AES or SHA
//! instructions (most laptops before 2019–2021, the Raspberry Pi 4); the first on ARMv8 CPUs
//! with their crypto extensions and on x86-64 ones with AES and SHA but no AVX2:
//! [`Suite::fastest_here`]. Everything else is the same in both and not bulk work:
//! HKDF-SHA256 derives every key, the blob header is masked with two AES blocks, metadata
//! objects are named by SHA-256, key files and locks are sealed with AES-256-GCM.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use chacha20poly1305::ChaCha20Poly1305;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Which primitives a repository uses for its bulk work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// HMAC-SHA256 ids, AES-256-GCM, SHA-256 pack names.
    Aes256Gcm,
    /// Keyed BLAKE3 ids, ChaCha20-Poly1305, BLAKE3 pack names.
    ChaCha20Poly1305Blake3,
}

impl Suite {
    pub const ALL: [Suite; 2] = [Suite::Aes256Gcm, Suite::ChaCha20Poly1305Blake3];

    /// The name in the config's `encryption` field, after `repokey-`.
    pub fn as_str(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "aes256gcm",
            Suite::ChaCha20Poly1305Blake3 => "chacha20poly1305-blake3",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Suite::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The suite that runs faster on this CPU, by what it has (detected at run time):
    ///
    /// - x86-64 with AVX2: ChaCha20-Poly1305 and BLAKE3, even beside AES and SHA
    ///   instructions. BLAKE3 hashes 8 blocks at once (3.8 GiB/s here against SHA-NI's
    ///   1.4) and ChaCha20-Poly1305 in AVX2 outruns this AES-GCM, whose GHASH multiplies one
    ///   block at a time (1.32 against 1.07 GiB/s): 1.44× the sealing speed on this
    ///   machine (docs/benchmarks.md, "Cipher suites").
    /// - other x86-64, and ARMv8: AES-256-GCM with HMAC-SHA256 when the CPU has AES,
    ///   carry-less multiply and SHA-256 instructions (SIMD BLAKE3 and ChaCha20 are narrower
    ///   there, the instructions are not); otherwise ChaCha20-Poly1305 and BLAKE3 (software
    ///   AES is several times slower than ChaCha20, software SHA-256 a third of BLAKE3).
    pub fn fastest_here() -> Self {
        match cpu() {
            Cpu::Wide => Suite::ChaCha20Poly1305Blake3,
            Cpu::AesSha => Suite::Aes256Gcm,
            Cpu::Plain => Suite::ChaCha20Poly1305Blake3,
        }
    }

    /// The words `init` uses to say why it chose [`fastest_here`](Self::fastest_here).
    pub fn why_here() -> &'static str {
        match cpu() {
            Cpu::Wide => "this CPU has AVX2, where BLAKE3 and ChaCha20 outrun SHA-256 and AES-GCM",
            Cpu::AesSha => "this CPU has AES and SHA instructions and no AVX2",
            Cpu::Plain => "this CPU lacks AES or SHA instructions",
        }
    }

    /// The name of the hash that names packs, for messages.
    pub fn pack_hash_name(self) -> &'static str {
        match self {
            Suite::Aes256Gcm => "sha256",
            Suite::ChaCha20Poly1305Blake3 => "blake3",
        }
    }

    /// A label for key derivations, so that no key of one suite is ever a key of the other.
    fn label(self) -> &'static [u8] {
        match self {
            // The labels of the first suite are the ones it always had.
            Suite::Aes256Gcm => b"",
            Suite::ChaCha20Poly1305Blake3 => b" chacha20poly1305-blake3",
        }
    }

    /// `base` with this suite's label appended.
    pub fn info(self, base: &[u8]) -> Vec<u8> {
        [base, self.label()].concat()
    }
}

/// What decides [`Suite::fastest_here`].
enum Cpu {
    /// AVX2 (x86-64).
    Wide,
    /// AES, carry-less multiply and SHA-256 instructions, no AVX2.
    AesSha,
    /// Neither.
    Plain,
}

#[cfg(target_arch = "x86_64")]
fn cpu() -> Cpu {
    use std::arch::is_x86_feature_detected as has;
    if has!("avx2") {
        Cpu::Wide
    } else if has!("aes") && has!("pclmulqdq") && has!("sha") {
        Cpu::AesSha
    } else {
        Cpu::Plain
    }
}

#[cfg(target_arch = "aarch64")]
fn cpu() -> Cpu {
    use std::arch::is_aarch64_feature_detected as has;
    if has!("aes") && has!("pmull") && has!("sha2") {
        Cpu::AesSha
    } else {
        Cpu::Plain
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn cpu() -> Cpu {
    Cpu::Plain
}

/// A blob cipher: 32-byte key, 12-byte nonce, 16-byte tag, in both suites.
#[derive(Clone)]
pub enum Aead {
    Gcm(Box<Aes256Gcm>),
    ChaCha(Box<ChaCha20Poly1305>),
}

impl Aead {
    pub fn new(suite: Suite, key: &[u8; 32]) -> Self {
        match suite {
            Suite::Aes256Gcm => Aead::Gcm(Box::new(Aes256Gcm::new(key.into()))),
            Suite::ChaCha20Poly1305Blake3 => {
                Aead::ChaCha(Box::new(ChaCha20Poly1305::new(key.into())))
            }
        }
    }

    /// Encrypts `buf` in place; returns the tag. Inputs are at most a pack (≤ 1 GiB +
    /// 64 MiB), far below either cipher's limit (64 GiB for GCM, 256 GiB for ChaCha20).
    pub fn seal(&self, nonce: &[u8; 12], aad: &[u8], buf: &mut [u8]) -> [u8; 16] {
        let nonce = Nonce::from_slice(nonce);
        let tag = match self {
            Aead::Gcm(c) => c.encrypt_in_place_detached(nonce, aad, buf),
            Aead::ChaCha(c) => c.encrypt_in_place_detached(nonce, aad, buf),
        };
        tag.expect("AEAD encryption fails only for inputs over 64 GiB")
            .into()
    }

    /// Decrypts `buf` in place; `false` when the tag does not verify.
    pub fn open(&self, nonce: &[u8; 12], aad: &[u8], buf: &mut [u8], tag: &[u8; 16]) -> bool {
        let (nonce, tag) = (Nonce::from_slice(nonce), Tag::from_slice(tag));
        match self {
            Aead::Gcm(c) => c.decrypt_in_place_detached(nonce, aad, buf, tag),
            Aead::ChaCha(c) => c.decrypt_in_place_detached(nonce, aad, buf, tag),
        }
        .is_ok()
    }
}

/// The keyed chunk id: HMAC-SHA256 or keyed BLAKE3, 32 bytes either way.
#[derive(Clone)]
pub enum IdMac {
    Hmac(Box<Hmac<Sha256>>),
    Blake3(Box<blake3::Hasher>),
}

impl IdMac {
    /// The id MAC of `suite` under `id_key`. BLAKE3's key is derived from the id key
    /// (`derive_key`), never the id key itself, so the two suites share no key.
    pub fn new(suite: Suite, id_key: &[u8; 32]) -> Self {
        match suite {
            Suite::Aes256Gcm => IdMac::Hmac(Box::new(
                <Hmac<Sha256> as Mac>::new_from_slice(id_key).expect("hmac takes any key length"),
            )),
            Suite::ChaCha20Poly1305Blake3 => {
                let mut key = blake3::derive_key("cairn chunk id v1", id_key);
                let h = blake3::Hasher::new_keyed(&key);
                zeroize::Zeroize::zeroize(&mut key);
                IdMac::Blake3(Box::new(h))
            }
        }
    }

    pub fn id(&self, data: &[u8]) -> [u8; 32] {
        match self {
            IdMac::Hmac(m) => {
                let mut m = (**m).clone();
                m.update(data);
                m.finalize().into_bytes().into()
            }
            IdMac::Blake3(h) => {
                let mut h = (**h).clone();
                h.update(data);
                h.finalize().into()
            }
        }
    }
}

impl Drop for IdMac {
    /// The keyed BLAKE3 state holds its key in the clear: wiped, as the AES key schedules are
    /// (blake3's "zeroize" feature).
    fn drop(&mut self) {
        if let IdMac::Blake3(h) = self {
            zeroize::Zeroize::zeroize(&mut **h);
        }
    }
}

/// The hash that names packs (and the TOC's hash of the blob area): SHA-256 or BLAKE3. Not
/// keyed: a pack's name is its content's address, which anyone holding the bytes can check.
#[derive(Clone)]
pub enum PackHasher {
    Sha256(Sha256),
    Blake3(Box<blake3::Hasher>),
}

impl PackHasher {
    pub fn new(suite: Suite) -> Self {
        match suite {
            Suite::Aes256Gcm => PackHasher::Sha256(Sha256::new()),
            Suite::ChaCha20Poly1305Blake3 => PackHasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            PackHasher::Sha256(h) => h.update(data),
            PackHasher::Blake3(h) => {
                h.update(data);
            }
        }
    }

    pub fn finalize(self) -> [u8; 32] {
        match self {
            PackHasher::Sha256(h) => h.finalize().into(),
            PackHasher::Blake3(h) => h.finalize().into(),
        }
    }

    /// The hash of `data` in one call.
    pub fn digest(suite: Suite, data: &[u8]) -> [u8; 32] {
        let mut h = Self::new(suite);
        h.update(data);
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Suite::ALL {
            assert_eq!(Suite::parse(s.as_str()), Some(s));
        }
        assert_eq!(Suite::parse("rot13"), None);
    }

    #[test]
    fn the_suites_share_no_primitive() {
        let key = [7u8; 32];
        let data = b"the same bytes";
        let ids: Vec<_> = Suite::ALL.map(|s| IdMac::new(s, &key).id(data)).into();
        assert_ne!(ids[0], ids[1]);
        // Keyed: another key, another id.
        for s in Suite::ALL {
            assert_ne!(
                IdMac::new(s, &key).id(data),
                IdMac::new(s, &[8; 32]).id(data)
            );
        }
        // Known answers: HMAC-SHA256 and BLAKE3 as their references compute them.
        assert_eq!(
            hex::encode(PackHasher::digest(Suite::Aes256Gcm, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex::encode(PackHasher::digest(Suite::ChaCha20Poly1305Blake3, b"")),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        let nonce = [1u8; 12];
        let mut a = *b"sixteen bytes!!!";
        let mut b = a;
        let ta = Aead::new(Suite::Aes256Gcm, &key).seal(&nonce, b"", &mut a);
        let tb = Aead::new(Suite::ChaCha20Poly1305Blake3, &key).seal(&nonce, b"", &mut b);
        assert_ne!(a, b);
        // Each opens its own and refuses the other's.
        for (s, buf, tag, other) in [
            (Suite::Aes256Gcm, a, ta, tb),
            (Suite::ChaCha20Poly1305Blake3, b, tb, ta),
        ] {
            let c = Aead::new(s, &key);
            let mut x = buf;
            assert!(c.open(&nonce, b"", &mut x, &tag));
            assert_eq!(&x, b"sixteen bytes!!!");
            let mut y = buf;
            assert!(!c.open(&nonce, b"", &mut y, &other));
        }
    }
}
