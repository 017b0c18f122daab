//! Passphrase stretching with argon2id. Parameters are stored in the key file; on reading they
//! are bounded so that a hostile or damaged key file cannot make us allocate gigabytes or spin
//! for minutes before saying "wrong passphrase": at most 8 × the default's memory, and at
//! most 8 × its work (memory × passes), per key file and over all the key files one open
//! tries ([`KdfBudget`]).

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

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

/// How many times the default's memory and work a key file may ask for.
pub const MAX_FACTOR: u64 = 8;
/// Upper bounds accepted when reading a key file, so that a hostile key file can neither
/// exhaust memory nor keep cairn busy for long: 512 MiB, and memory × passes at most 8 × the
/// default's (so 512 MiB allows 3 passes, 64 MiB 24).
pub const MAX_MEMORY_KIB: u32 = MAX_FACTOR as u32 * DEFAULT_MEMORY_KIB;
pub const MAX_ITERATIONS: u32 = MAX_FACTOR as u32 * DEFAULT_ITERATIONS;
pub const MAX_PARALLELISM: u32 = 16;
/// Work of the default, in KiB × passes.
const DEFAULT_WORK: u64 = DEFAULT_MEMORY_KIB as u64 * DEFAULT_ITERATIONS as u64;

/// The KDF work one open may spend over all the key files it tries: 8 × the default's. A
/// repository normally has one key file; a hostile one with many costly key files gets no
/// more than this in total.
#[derive(Debug)]
pub struct KdfBudget {
    left: u64,
}

impl Default for KdfBudget {
    fn default() -> Self {
        Self {
            left: MAX_FACTOR * DEFAULT_WORK,
        }
    }
}

impl KdfBudget {
    /// Takes the work of `p` from the budget; refused (without any work) when it is spent.
    pub fn spend(&mut self, p: &KdfParams) -> Result<()> {
        let work = p.work();
        if work > self.left {
            return Err(Error::corrupt(
                "key files",
                format!(
                    "trying another key file would exceed {MAX_FACTOR} × the default key derivation work; \
                     refusing (a repository has one key file, two during a passphrase change)"
                ),
            ));
        }
        self.left -= work;
        Ok(())
    }
}

/// Whether `CAIRN_TEST_CHEAP_KDF=1` is honoured: only by builds with the `testing` feature
/// (which `cargo test` turns on), never by the cairn that is shipped.
pub const CHEAP_KDF_ALLOWED: bool = cfg!(feature = "testing");

impl KdfParams {
    /// Fresh parameters with a random salt. In test builds `CAIRN_TEST_CHEAP_KDF=1` selects
    /// tiny costs so that test suites do not spend their time in argon2; the shipped build
    /// ignores it.
    pub fn new_default() -> Self {
        let cheap =
            CHEAP_KDF_ALLOWED && std::env::var("CAIRN_TEST_CHEAP_KDF").is_ok_and(|v| v == "1");
        let salt: [u8; 16] = rand::random();
        Self {
            algorithm: "argon2id".into(),
            memory_kib: if cheap { 64 } else { DEFAULT_MEMORY_KIB },
            iterations: if cheap { 1 } else { DEFAULT_ITERATIONS },
            parallelism: 1,
            salt: hex::encode(salt),
        }
    }

    /// Memory × passes, in KiB.
    pub fn work(&self) -> u64 {
        u64::from(self.memory_kib) * u64::from(self.iterations)
    }

    /// Checks the parameters against the bounds (without any work); returns the salt.
    pub fn validate(&self) -> Result<Vec<u8>> {
        let bad = |r: String| Error::corrupt("key file", r);
        if self.algorithm != "argon2id" {
            return Err(bad(format!("unknown KDF {:?}", self.algorithm)));
        }
        if self.memory_kib > MAX_MEMORY_KIB
            || self.iterations == 0
            || self.iterations > MAX_ITERATIONS
            || self.work() > MAX_FACTOR * DEFAULT_WORK
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

    /// Derives the 32-byte key-wrapping key from a passphrase (wiped when dropped).
    pub fn derive(&self, passphrase: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        let salt = self.validate()?;
        let params =
            argon2::Params::new(self.memory_kib, self.iterations, self.parallelism, Some(32))
                .map_err(|e| Error::corrupt("key file", format!("KDF parameters: {e}")))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = Zeroizing::new([0u8; 32]);
        argon
            .hash_password_into(passphrase, &salt, &mut out[..])
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
        assert_eq!(*p.derive(b"a").unwrap(), *p.derive(b"a").unwrap());
        assert_ne!(*p.derive(b"a").unwrap(), *p.derive(b"b").unwrap());
    }

    #[test]
    fn absurd_parameters_are_refused_without_work() {
        // `validate` does no work by construction, and `derive` asks it first.
        for p in [
            KdfParams {
                memory_kib: u32::MAX,
                ..cheap()
            },
            // Within the old per-field bounds (1 GiB, 16 passes: 85 × the default's work).
            KdfParams {
                memory_kib: 1024 * 1024,
                iterations: 16,
                ..cheap()
            },
            // 8 × the memory, but with the default's 3 passes that is 8 × the work; 4 passes
            // exceed it.
            KdfParams {
                memory_kib: MAX_MEMORY_KIB,
                iterations: 4,
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
            assert!(p.validate().is_err(), "{p:?}");
            assert!(p.derive(b"x").is_err());
        }
    }

    #[test]
    fn the_bounds_are_eight_times_the_default() {
        let at = |memory_kib, iterations| KdfParams {
            memory_kib,
            iterations,
            ..cheap()
        };
        assert!(at(MAX_MEMORY_KIB, DEFAULT_ITERATIONS).validate().is_ok());
        assert!(at(DEFAULT_MEMORY_KIB, MAX_ITERATIONS).validate().is_ok());
        assert!(at(DEFAULT_MEMORY_KIB, MAX_ITERATIONS + 1)
            .validate()
            .is_err());
        assert_eq!(MAX_MEMORY_KIB, 512 * 1024);
        assert_eq!(MAX_ITERATIONS, 24);
        // One open: the default key file eight times, but not nine.
        let mut budget = KdfBudget::default();
        let default = at(DEFAULT_MEMORY_KIB, DEFAULT_ITERATIONS);
        for _ in 0..8 {
            budget.spend(&default).unwrap();
        }
        assert!(budget.spend(&default).is_err());
    }

    #[test]
    fn only_test_builds_honour_the_cheap_kdf() {
        std::env::set_var("CAIRN_TEST_CHEAP_KDF", "1");
        let p = KdfParams::new_default();
        // Tests are built with the testing feature; the shipped build never makes these.
        assert_eq!(CHEAP_KDF_ALLOWED, cfg!(feature = "testing"));
        assert_eq!(p.memory_kib == 64, CHEAP_KDF_ALLOWED);
    }
}
