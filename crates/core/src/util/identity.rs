//! Who and where this process is, and the names of users and groups: what archives, locks
//! and key files record, asked one way everywhere. The user database is read through nix
//! (rustix does not read it); the rest of the OS through rustix.

use std::path::PathBuf;

use nix::unistd::{Gid, Group, Uid, User};

/// This machine's host name (empty when it has none that is UTF-8).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_str()
        .map(str::to_string)
        .unwrap_or_default()
}

/// The user this process runs as: the name of its effective uid in the user database, else
/// `$USER`, else the uid as a number. (Under cron or systemd `$USER` is often unset, and it
/// is the uid that holds a lock and owns a backup's files anyway.)
pub fn user_name() -> String {
    let uid = rustix::process::geteuid().as_raw();
    Some(user_name_of(uid))
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| uid.to_string())
}

/// The name of `uid` in the user database, or empty.
pub fn user_name_of(uid: u32) -> String {
    let user = User::from_uid(Uid::from_raw(uid));
    user.ok().flatten().map(|u| u.name).unwrap_or_default()
}

/// The name of `gid` in the group database, or empty.
pub fn group_name_of(gid: u32) -> String {
    let group = Group::from_gid(Gid::from_raw(gid));
    group.ok().flatten().map(|g| g.name).unwrap_or_default()
}

/// The uid of a user name, if it exists here.
pub fn uid_of(name: &str) -> Option<u32> {
    let user = User::from_name(name).ok().flatten()?;
    Some(user.uid.as_raw())
}

/// The gid of a group name, if it exists here.
pub fn gid_of(name: &str) -> Option<u32> {
    let group = Group::from_name(name).ok().flatten()?;
    Some(group.gid.as_raw())
}

/// The home directory of `uid` in the user database.
pub fn home_of(uid: u32) -> Option<PathBuf> {
    Some(User::from_uid(Uid::from_raw(uid)).ok().flatten()?.dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_user_and_root_has_a_name() {
        assert!(!user_name().is_empty());
        assert_eq!(user_name_of(0), "root");
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(gid_of(&group_name_of(0)), Some(0));
        assert_eq!(uid_of("no such user, surely"), None);
        assert_eq!(
            hostname(),
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim()
        );
    }
}
