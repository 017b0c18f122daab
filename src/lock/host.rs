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

/// The user this process runs as: the name of its effective uid in the user database, else
/// `$USER`, else the uid as a number. (Under cron or systemd `$USER` is often unset, and it
/// is the uid that holds the lock anyway.)
pub fn user_name() -> String {
    let uid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| uid.as_raw().to_string())
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

/// Whether process `pid` exists here.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
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
    fn pids_that_cannot_exist_are_dead() {
        assert!(!process_alive(0));
        assert!(!process_alive(u32::MAX));
        assert!(process_alive(std::process::id()));
    }
}
