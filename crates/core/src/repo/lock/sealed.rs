//! Lock objects as stored: the kind in clear, everything else sealed.
//!
//! A lock says who holds it (host, user, PID, machine and boot ids, PID namespace, command,
//! times), which the lock protocol needs and the repository's host must not read: together
//! they name every client machine. So a lock object is
//!
//! ```text
//! {"lock":2,"kind":"shared"|"exclusive","here":HEX,"sealed":HEX}
//! ```
//!
//! `here` ([`HostId::tag`]) lets a process of the holder's machine, boot and PID namespace, and
//! only such a process, recognise the lock as one of its own machine's and read its PID, so a
//! lock whose process is gone is taken over at once even when its details are sealed from the
//! reader or absent; it is different for every lock name and links nothing.
//!
//! where `sealed` is nonce (12) ‖ AES-256-GCM(lock key, nonce, the holder's details as JSON
//! padded with spaces to 1 KiB, aad = "cairn lock v2" ‖ kind ‖ the object's name), and the
//! lock key is derived from the encryption key ([`crate::crypto::lock_key`]): every client that
//! takes a lock holds it. Every lock object therefore has the same size, and a lock's details
//! cannot be moved to another name or kind. The kind stays in clear so that the commands that
//! run without the key (`check --repository-only`, `key import`) still obey and take shared
//! and exclusive locks (`break-lock` takes none); their own locks carry no `sealed` part, and neither does a
//! lock written while the key is still being opened (it is sealed a second after the key
//! opens, or at its first refresh where store requests queue, if its command still runs:
//! [`super::LockTiming::seal_after`]). A lock whose `sealed` part does not open with this repository's key
//! was forged or altered: it is shown as such and stands for an exclusive lock judged only by
//! watching it, as any unreadable lock (it can delay others, never make them proceed).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::host::HostId;
use super::{LockInfo, LockKind};

/// The lock format written and read.
const VERSION: u32 = 2;
/// The holder's details are padded to a multiple of this, so that all locks look alike.
const DETAILS_LEN: usize = 1024;
const AAD_PREFIX: &[u8] = b"cairn lock v2";

/// The key that seals lock details.
pub struct LockSeal {
    key: Zeroizing<[u8; 32]>,
}

impl LockSeal {
    /// The seal of the locks of the repository `crypto` opens.
    pub fn of(crypto: &crate::crypto::Crypto) -> Self {
        Self::new(crypto.lock_key())
    }

    pub fn new(key: Zeroizing<[u8; 32]>) -> Self {
        Self { key }
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new_from_slice(&self.key[..]).expect("a 32-byte key")
    }
}

/// Where a lock taker finds the seal: filled once the key opens (the lock is taken while the
/// key is derived, to save the time of one), or never, for the commands that run without the
/// key.
#[derive(Default)]
pub struct SealSlot {
    seal: OnceLock<LockSeal>,
    keyless: bool,
}

impl SealSlot {
    /// A slot for a command that runs without the key: never filled.
    pub fn keyless() -> Arc<Self> {
        Arc::new(Self {
            seal: OnceLock::new(),
            keyless: true,
        })
    }

    /// A slot filled at once.
    pub fn with(seal: LockSeal) -> Arc<Self> {
        let slot = Self::default();
        let _ = slot.seal.set(seal);
        Arc::new(slot)
    }

    /// A slot to fill with [`SealSlot::fill`] once the key opens.
    pub fn pending() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn fill(&self, seal: LockSeal) {
        let _ = self.seal.set(seal);
    }

    pub fn get(&self) -> Option<&LockSeal> {
        self.seal.get()
    }

    /// Whether this command runs without the key (its lock will never be sealed).
    pub fn is_keyless(&self) -> bool {
        self.keyless
    }

    /// The seal, waiting for the key to open unless this command runs without one; `None`
    /// when there will be none or `give_up` was set (the key did not open).
    pub fn wait(&self, give_up: &std::sync::atomic::AtomicBool) -> Option<&LockSeal> {
        use std::sync::atomic::Ordering;
        loop {
            if let Some(s) = self.seal.get() {
                return Some(s);
            }
            if self.keyless || give_up.load(Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    lock: u32,
    kind: LockKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    here: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<String>,
    /// Taken by a command without the key, which writes no backup (shown so that `check`
    /// does not take it for a backup that may be running).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    keyless: bool,
}

fn aad(kind: LockKind, name: &str) -> Vec<u8> {
    let mut a = AAD_PREFIX.to_vec();
    a.push(match kind {
        LockKind::Shared => 1,
        LockKind::Exclusive => 2,
    });
    a.extend_from_slice(name.as_bytes());
    a
}

/// The bytes of lock object `name` holding `info`, as the command with seal slot `slot`
/// writes it: sealed once the key has opened; marked keyless for a command without the key.
pub fn encode_from(info: &LockInfo, name: &str, slot: &SealSlot) -> Vec<u8> {
    let seal = slot.get();
    encode_as(info, name, seal, seal.is_none() && slot.is_keyless())
}

/// The bytes of lock object `name` holding `info`: its details sealed when `seal` is given.
pub fn encode(info: &LockInfo, name: &str, seal: Option<&LockSeal>) -> Vec<u8> {
    encode_as(info, name, seal, false)
}

fn encode_as(info: &LockInfo, name: &str, seal: Option<&LockSeal>, keyless: bool) -> Vec<u8> {
    let sealed = seal.map(|seal| {
        let mut details = serde_json::to_vec(info).expect("lock details serialize");
        let padded = details.len().div_ceil(DETAILS_LEN).max(1) * DETAILS_LEN;
        details.resize(padded, b' ');
        let nonce: [u8; 12] = rand::random();
        let ct = seal
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &details,
                    aad: &aad(info.kind, name),
                },
            )
            .expect("AES-GCM encryption of a small buffer cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        hex::encode(out)
    });
    serde_json::to_vec(&Wire {
        lock: VERSION,
        kind: info.kind,
        here: info.host_id.tag(name, info.pid).map(hex::encode),
        sealed,
        keyless,
    })
    .expect("a lock serializes")
}

/// What a lock object says, as far as this reader can tell.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Sealed, and opened with this repository's key.
    Open(LockInfo),
    /// Sealed, and this reader has no key; the holder's PID when it shares this reader's PIDs.
    Sealed(LockKind, Option<u32>),
    /// No details: taken by a command in its first second, while it opened its key.
    Bare(LockKind, Option<u32>),
    /// No details: taken by a command without the key (which writes no backup).
    Keyless(LockKind, Option<u32>),
    /// Its details do not open with this repository's key: forged, altered or moved.
    Forged,
    /// Not a lock object.
    Unreadable,
}

/// Reads lock object `name`, as a process of `here`.
pub fn decode(bytes: &[u8], name: &str, seal: Option<&LockSeal>, here: &HostId) -> Read {
    let Ok(wire) = serde_json::from_slice::<Wire>(bytes) else {
        return Read::Unreadable;
    };
    if wire.lock != VERSION {
        return Read::Unreadable;
    }
    let local_pid = wire
        .here
        .as_deref()
        .and_then(|h| hex::decode(h).ok())
        .and_then(|tag| here.pid_in(name, &tag));
    let Some(sealed) = wire.sealed else {
        return if wire.keyless {
            Read::Keyless(wire.kind, local_pid)
        } else {
            Read::Bare(wire.kind, local_pid)
        };
    };
    let Some(seal) = seal else {
        return Read::Sealed(wire.kind, local_pid);
    };
    let opened = hex::decode(&sealed).ok().and_then(|b| {
        let (nonce, ct) = b.split_at_checked(12)?;
        seal.cipher()
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: &aad(wire.kind, name),
                },
            )
            .ok()
    });
    match opened.and_then(|d| serde_json::from_slice::<LockInfo>(&d).ok()) {
        Some(info) if info.kind == wire.kind => Read::Open(info),
        _ => Read::Forged,
    }
}

impl Read {
    /// What the lock protocol goes by: the details when they opened; else the kind with no
    /// holder (judged only by watching); a forged or unreadable object stands for an exclusive
    /// lock.
    pub fn info(self, name: &str, here: &HostId) -> LockInfo {
        let short = name.rsplit('/').next().unwrap_or(name);
        let a = |kind| match kind {
            LockKind::Shared => "a shared",
            LockKind::Exclusive => "an exclusive",
        };
        match self {
            Read::Open(info) => info,
            Read::Sealed(kind, pid) => local(
                LockInfo::without_details(
                    kind,
                    format!(
                        "{} lock {short}, its holder sealed (shown only with the repository's key)",
                        a(kind)
                    ),
                ),
                pid,
                here,
            ),
            Read::Bare(kind, pid) => local(
                LockInfo::without_details(
                    kind,
                    format!(
                        "{} lock {short} without details (its command started a moment ago)",
                        a(kind)
                    ),
                ),
                pid,
                here,
            ),
            Read::Keyless(kind, pid) => {
                let mut info = LockInfo::without_details(
                    kind,
                    format!(
                        "{} lock {short} of a command without the key (check --repository-only, key import or break-lock)",
                        a(kind)
                    ),
                );
                info.keyless = true;
                local(info, pid, here)
            }
            Read::Forged => LockInfo::unreadable(format!(
                "a forged or altered lock object {name}: its details do not open with this repository's key (remove it with cairn break-lock if no cairn runs)"
            )),
            Read::Unreadable => LockInfo::unreadable(format!(
                "an unreadable lock object {name} (remove it with cairn break-lock if no cairn runs)"
            )),
        }
    }
}

/// A lock without details that the tag shows to be of this machine, boot and PID namespace:
/// its holder's PID can be judged.
fn local(mut info: LockInfo, pid: Option<u32>, here: &HostId) -> LockInfo {
    if let Some(pid) = pid {
        info.pid = pid;
        info.host_id = here.clone();
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: LockKind) -> LockInfo {
        LockInfo {
            kind,
            host: "laptop.example".into(),
            pid: 4242,
            user: "alice".into(),
            command: "create".into(),
            created: 1,
            refreshed: 2,
            host_id: HostId {
                machine: "0123456789abcdef0123456789abcdef".into(),
                boot: "b00t".into(),
                pid_ns: "pid:[4026531836]".into(),
            },
            generation: 3,
            shown: None,
            keyless: false,
        }
    }

    fn dec(bytes: &[u8], name: &str, seal: Option<&LockSeal>) -> Read {
        decode(bytes, name, seal, &HostId::default())
    }

    fn seal(byte: u8) -> LockSeal {
        LockSeal::new(Zeroizing::new([byte; 32]))
    }

    #[test]
    fn sealed_round_trip_and_nothing_in_clear() {
        let i = info(LockKind::Shared);
        let bytes = encode(&i, "locks/aa", Some(&seal(1)));
        // Sealed and hashed fields are long runs of hex digits that may spell "4242" by
        // chance: the check is about what stands outside them.
        let text: String = String::from_utf8_lossy(&bytes)
            .split('"')
            .filter(|part| part.len() < 40 || !part.bytes().all(|b| b.is_ascii_hexdigit()))
            .collect::<Vec<_>>()
            .join("\"");
        for secret in [
            "laptop",
            "alice",
            "4242",
            "0123456789abcdef",
            "b00t",
            "create",
        ] {
            assert!(!text.contains(secret), "{secret} in clear: {text}");
        }
        assert_eq!(dec(&bytes, "locks/aa", Some(&seal(1))), Read::Open(i));
        assert_eq!(
            dec(&bytes, "locks/aa", None),
            Read::Sealed(LockKind::Shared, None)
        );
    }

    #[test]
    fn every_lock_has_the_same_size() {
        let mut long = info(LockKind::Exclusive);
        long.host = "h".repeat(200);
        let a = encode(&info(LockKind::Shared), "locks/aa", Some(&seal(1)));
        let b = encode(&long, "locks/bb", Some(&seal(1)));
        assert_eq!(a.len() + 3, b.len()); // "shared" is three letters shorter than "exclusive"
    }

    #[test]
    fn forged_moved_or_altered_locks_are_recognised() {
        let i = info(LockKind::Shared);
        let bytes = encode(&i, "locks/aa", Some(&seal(1)));
        // Another repository's key, another name, the kind changed in clear.
        assert_eq!(dec(&bytes, "locks/aa", Some(&seal(2))), Read::Forged);
        assert_eq!(dec(&bytes, "locks/bb", Some(&seal(1))), Read::Forged);
        let text = String::from_utf8(bytes.clone()).unwrap();
        let changed = text.replace("\"shared\"", "\"exclusive\"");
        assert_eq!(
            dec(changed.as_bytes(), "locks/aa", Some(&seal(1))),
            Read::Forged
        );
        // A flipped hex digit of the sealed part.
        let at = text.rfind('"').unwrap() - 3;
        let mut flipped = text.into_bytes();
        flipped[at] = if flipped[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(dec(&flipped, "locks/aa", Some(&seal(1))), Read::Forged);
        assert_eq!(dec(b"{}", "locks/aa", Some(&seal(1))), Read::Unreadable);
        assert!(matches!(
            Read::Forged.info("locks/aa", &HostId::default()).kind,
            LockKind::Exclusive
        ));
    }

    #[test]
    fn a_bare_lock_keeps_its_kind() {
        let bytes = encode(&info(LockKind::Shared), "locks/aa", None);
        assert_eq!(
            dec(&bytes, "locks/aa", Some(&seal(1))),
            Read::Bare(LockKind::Shared, None)
        );
        assert!(!String::from_utf8_lossy(&bytes).contains("alice"));
    }
}

#[cfg(test)]
mod keyless_tests {
    use super::*;

    /// A command without the key says so in its lock: `check` does not take it for a backup
    /// that may be running. A keyed command's lock before its key opens does not.
    #[test]
    fn a_keyless_lock_says_so_and_a_pending_one_does_not() {
        let info = LockInfo::without_details(LockKind::Shared, String::new());
        let here = HostId::default();
        let keyless = encode_from(&info, "locks/aa", &SealSlot::keyless());
        let read = decode(&keyless, "locks/aa", None, &here);
        assert_eq!(read, Read::Keyless(LockKind::Shared, None));
        let judged = read.info("locks/aa", &here);
        assert!(judged.keyless && judged.opaque());
        assert!(judged.describe().contains("without the key"));
        let pending = encode_from(&info, "locks/aa", &SealSlot::pending());
        let read = decode(&pending, "locks/aa", None, &here);
        assert_eq!(read, Read::Bare(LockKind::Shared, None));
        assert!(!read.info("locks/aa", &here).keyless);
        let with = SealSlot::with(LockSeal::new(Zeroizing::new([1; 32])));
        assert!(
            !String::from_utf8_lossy(&encode_from(&info, "locks/aa", &with)).contains("keyless")
        );
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;

    /// A lock without details, or sealed from the reader, is still recognised as one of this
    /// machine's, with its PID: a holder that is gone can be judged at once.
    #[test]
    fn the_holder_pid_is_known_on_its_own_machine_only() {
        let here = HostId {
            machine: "m".into(),
            boot: "b".into(),
            pid_ns: "p".into(),
        };
        let mut info = LockInfo::without_details(LockKind::Exclusive, String::new());
        info.shown = None;
        info.host_id = here.clone();
        info.pid = 77;
        let bytes = encode(&info, "locks/aa", None);
        assert_eq!(
            decode(&bytes, "locks/aa", None, &here),
            Read::Bare(LockKind::Exclusive, Some(77))
        );
        let judged = decode(&bytes, "locks/aa", None, &here).info("locks/aa", &here);
        assert!(judged.host_id.shares_pids_with(&here) && judged.pid == 77);
        let elsewhere = HostId {
            machine: "n".into(),
            ..here.clone()
        };
        assert_eq!(
            decode(&bytes, "locks/aa", None, &elsewhere),
            Read::Bare(LockKind::Exclusive, None)
        );
        // The PID read is the one its holder wrote: a PID altered in clear no longer matches.
        let text = String::from_utf8(bytes).unwrap();
        let at = text.find("\"here\":\"").unwrap() + 8;
        let mut altered = text.into_bytes();
        altered[at] = if altered[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            decode(&altered, "locks/aa", None, &here),
            Read::Bare(LockKind::Exclusive, None)
        );
    }
}
