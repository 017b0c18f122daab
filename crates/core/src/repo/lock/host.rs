//! Who holds a lock: an identity that tells hosts, boots and containers apart.
//!
//! A hostname does not: containers share it with their host (`--network host`), cloned VMs
//! share it with each other. A PID means something only inside one PID namespace of one boot
//! of one machine, so the dead-PID rule applies only when all three match: the machine id
//! (`/etc/machine-id`), the boot id (`/proc/sys/kernel/random/boot_id`, new at every boot) and
//! the PID namespace (the inode of `/proc/self/ns/pid`). Any of them unknown: no match.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostId {
    #[serde(default)]
    pub machine: String,
    #[serde(default)]
    pub boot: String,
    #[serde(default)]
    pub pid_ns: String,
}

fn first_line(path: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_default()
}

impl HostId {
    /// This process's identity.
    pub fn current() -> Self {
        let mut machine = first_line("/etc/machine-id");
        if machine.is_empty() {
            machine = first_line("/var/lib/dbus/machine-id");
        }
        let pid_ns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            machine,
            boot: first_line("/proc/sys/kernel/random/boot_id"),
            pid_ns,
        }
    }

    /// Whether a PID of `other` names a process that this process can see: same machine,
    /// same boot, same PID namespace, all known.
    pub fn shares_pids_with(&self, other: &HostId) -> bool {
        !self.machine.is_empty()
            && !self.boot.is_empty()
            && !self.pid_ns.is_empty()
            && self == other
    }
}

impl HostId {
    /// A tag for lock object `name` and process `pid` that only a process of this machine,
    /// boot and PID namespace can recognise and read: the PID masked with 4 bytes of
    /// HMAC-SHA256 keyed with the three ids, then 16 bytes of the same HMAC over the masked
    /// PID (`None` when an id is unknown). Different for every lock name, so that it links
    /// nothing; the machine id, which every local user can read and no one else, is what makes
    /// it unforgeable from outside, and an altered PID no longer matches its tag.
    pub fn tag(&self, name: &str, pid: u32) -> Option<[u8; 20]> {
        let key = self.tag_key()?;
        let masked = (pid ^ mask(&key, name)).to_le_bytes();
        let mut out = [0u8; 20];
        out[..4].copy_from_slice(&masked);
        out[4..].copy_from_slice(&host_mac(&key, b"tag\0", &masked, name)[..16]);
        Some(out)
    }

    /// The PID in `tag`, if it was made by a process that shares PIDs with this one.
    pub fn pid_in(&self, name: &str, tag: &[u8]) -> Option<u32> {
        let key = self.tag_key()?;
        let (masked, got) = tag.split_at_checked(4)?;
        let masked: [u8; 4] = masked.try_into().ok()?;
        let want = host_mac(&key, b"tag\0", &masked, name);
        (got == &want[..16]).then(|| u32::from_le_bytes(masked) ^ mask(&key, name))
    }

    fn tag_key(&self) -> Option<String> {
        if self.machine.is_empty() || self.boot.is_empty() || self.pid_ns.is_empty() {
            return None;
        }
        Some([self.machine.as_str(), "\0", &self.boot, "\0", &self.pid_ns].concat())
    }
}

/// HMAC-SHA256(key, "cairn lock host v2\0" ‖ what ‖ more ‖ name).
fn host_mac(key: &str, what: &[u8], more: &[u8], name: &str) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key.as_bytes())
        .expect("hmac takes any key length");
    m.update(b"cairn lock host v2\0");
    m.update(what);
    m.update(more);
    m.update(name.as_bytes());
    m.finalize().into_bytes().into()
}

fn mask(key: &str, name: &str) -> u32 {
    let h = host_mac(key, b"pid\0", &[], name);
    u32::from_le_bytes([h[0], h[1], h[2], h[3]])
}

/// Whether process `pid` exists here.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(rustix::io::Errno::SRCH) => false,
        // EPERM: it exists but belongs to someone else.
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_needs_every_part_to_match() {
        let me = HostId::current();
        assert!(!me.boot.is_empty() && !me.pid_ns.is_empty(), "{me:?}");
        if !me.machine.is_empty() {
            assert!(me.shares_pids_with(&me.clone()));
        }
        let container = HostId {
            pid_ns: "pid:[1]".into(),
            ..me.clone()
        };
        assert!(!me.shares_pids_with(&container));
        let rebooted = HostId {
            boot: "other".into(),
            ..me.clone()
        };
        assert!(!me.shares_pids_with(&rebooted));
        let unknown = HostId::default();
        assert!(!unknown.shares_pids_with(&unknown.clone()));
    }

    #[test]
    fn a_tag_is_read_only_where_the_pids_are_shared() {
        let me = HostId {
            machine: "m".into(),
            boot: "b".into(),
            pid_ns: "p".into(),
        };
        let tag = me.tag("locks/aa", 4242).unwrap();
        assert_eq!(me.pid_in("locks/aa", &tag), Some(4242));
        assert_eq!(me.pid_in("locks/bb", &tag), None, "bound to the name");
        let container = HostId {
            pid_ns: "q".into(),
            ..me.clone()
        };
        assert_eq!(container.pid_in("locks/aa", &tag), None);
        assert_ne!(
            me.tag("locks/bb", 4242).unwrap()[4..],
            tag[4..],
            "unlinkable"
        );
        assert!(HostId::default().tag("locks/aa", 1).is_none());
        let mut altered = tag;
        altered[0] ^= 1;
        assert_eq!(
            me.pid_in("locks/aa", &altered),
            None,
            "the PID is bound to the tag"
        );
    }

    #[test]
    fn pids_that_cannot_exist_are_dead() {
        assert!(!process_alive(0));
        assert!(!process_alive(u32::MAX));
        assert!(process_alive(std::process::id()));
    }
}
