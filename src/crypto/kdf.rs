//! Passphrase stretching with argon2id. Parameters are stored in the key file; on reading they
//! are bounded so that a hostile or damaged key file cannot make us allocate gigabytes or spin
//! for minutes before saying "wrong passphrase".

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    pub algorithm: String,
    pub memory_kib: u32,
    pub iterations: u32,
    pub parallelism: u32,
    /// hex
    pub salt: String,
}

/// The shipped default: 64 MiB, 3 passes (about a third of a second on one core).
pub const DEFAULT_MEMORY_KIB: u32 = 64 * 1024;
pub const DEFAULT_ITERATIONS: u32 = 3;

/// Upper bounds accepted when reading a key file (16× the default cost at most), so a hostile
/// key file can neither exhaust memory nor keep cairn busy for minutes.
pub const MAX_MEMORY_KIB: u32 = 1024 * 1024;
pub const MAX_ITERATIONS: u32 = 16;
pub const MAX_PARALLELISM: u32 = 16;

impl KdfParams {
    /// Fresh parameters with a random salt. `CAIRN_TEST_CHEAP_KDF=1` selects tiny costs so that
    /// test suites do not spend their time in argon2; never use it for real repositories.
    pub fn new_default() -> Self {
        let cheap = std::env::var("CAIRN_TEST_CHEAP_KDF").is_ok_and(|v| v == "1");
        let salt: [u8; 16] = rand::random();
        Self {
            algorithm: "argon2id".into(),
            memory_kib: if cheap { 64 } else { DEFAULT_MEMORY_KIB },
            iterations: if cheap { 1 } else { DEFAULT_ITERATIONS },
            parallelism: 1,
            salt: hex::encode(salt),
        }
    }

    fn check(&self) -> Result<Vec<u8>> {
        let bad = |r: String| Error::corrupt("key file", r);
        if self.algorithm != "argon2id" {
            return Err(bad(format!("unknown KDF {:?}", self.algorithm)));
        }
        if self.memory_kib > MAX_MEMORY_KIB
            || self.iterations == 0
            || self.iterations > MAX_ITERATIONS
            || self.parallelism == 0
            || self.parallelism > MAX_PARALLELISM
            || self.memory_kib < 8 * self.parallelism
        {
            return Err(bad(format!(
                "KDF parameters out of range (memory {} KiB, {} iterations, parallelism {})",
                self.memory_kib, self.iterations, self.parallelism
            )));
        }
        let salt = hex::decode(&self.salt).map_err(|_| bad("KDF salt is not hex".into()))?;
        if !(8..=64).contains(&salt.len()) {
            return Err(bad("KDF salt has a bad length".into()));
        }
        Ok(salt)
    }

    /// Derives the 32-byte key-wrapping key from a passphrase.
    pub fn derive(&self, passphrase: &[u8]) -> Result<[u8; 32]> {
        let salt = self.check()?;
        let params =
            argon2::Params::new(self.memory_kib, self.iterations, self.parallelism, Some(32))
                .map_err(|e| Error::corrupt("key file", format!("KDF parameters: {e}")))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = [0u8; 32];
        argon
            .hash_password_into(passphrase, &salt, &mut out)
            .map_err(|e| Error::corrupt("key file", format!("KDF: {e}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cheap() -> KdfParams {
        KdfParams {
            algorithm: "argon2id".into(),
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
            salt: "00112233445566778899aabbccddeeff".into(),
        }
    }

    #[test]
    fn deterministic_and_passphrase_dependent() {
        let p = cheap();
        assert_eq!(p.derive(b"a").unwrap(), p.derive(b"a").unwrap());
        assert_ne!(p.derive(b"a").unwrap(), p.derive(b"b").unwrap());
    }

    #[test]
    fn absurd_parameters_are_refused_without_work() {
        let start = std::time::Instant::now();
        for p in [
            KdfParams {
                memory_kib: u32::MAX,
                ..cheap()
            },
            KdfParams {
                iterations: 1_000_000,
                ..cheap()
            },
            KdfParams {
                parallelism: 0,
                ..cheap()
            },
            KdfParams {
                algorithm: "scrypt".into(),
                ..cheap()
            },
            KdfParams {
                salt: "zz".into(),
                ..cheap()
            },
            KdfParams {
                salt: "00".into(),
                ..cheap()
            },
        ] {
            assert!(p.derive(b"x").is_err());
        }
        assert!(start.elapsed().as_secs() < 1);
    }
}
