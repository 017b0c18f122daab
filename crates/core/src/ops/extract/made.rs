//! What this restore made, known by device and inode: a node or directory it made is opened
//! again (to set its metadata through the descriptor) only if it is still that node.
//!
//! In a directory another user can write, the name of what the restore just made can be given
//! to something else between the `mkdirat`/`symlinkat`/`mknodat` and the open that follows
//! (issue 44): a link to a file of theirs (not this process's: refused), a device node an
//! earlier restore made (root's, one name, the same kind: it got the mode 0666 meant for
//! another device), or a directory this run made for another item (exchanged with
//! `renameat2`: a secret 0700 directory got the mode 0777 meant for the new one). So what
//! is opened must be of the kind made, this process's, with one name, the device asked for,
//! born no earlier than a moment before it was made (where the file system says), and not
//! anything this run made before.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime};

use rustix::fs::{FileType, Mode, OFlags};

use super::target::Node;

/// How much earlier than its making a node's birth time may read: file systems stamp with a
/// coarse clock that can lag the one read before the call.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

const REPLACED: &str = "it was replaced during the restore";

/// The nodes and directories this restore made.
#[derive(Default)]
pub(super) struct Made {
    seen: HashSet<(u64, u64)>,
}

/// The moment before a node is made.
pub(super) fn now() -> SystemTime {
    SystemTime::now()
}

impl Made {
    /// Opens what this run made at `name` in `parent` (with `O_PATH`), after checking it is
    /// what was made: `kind`, this process's, one name, `rdev` (a device), born no earlier
    /// than `since` (less the slack), and new to this run.
    pub fn open(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        kind: FileType,
        rdev: Option<u64>,
        since: SystemTime,
    ) -> Result<OwnedFd, String> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(parent, name, flags, Mode::empty())
            .map_err(|_| REPLACED.to_string())?;
        let node = Node::open(&fd).map_err(|e| e.to_string())?;
        let one_name = kind == FileType::Directory || node.nlink == 1;
        if node.kind != kind
            || node.uid != rustix::process::geteuid().as_raw()
            || !one_name
            || rdev.is_some_and(|r| node.rdev != r)
            || !born_since(&node, since)
            || !self.seen.insert((node.dev, node.ino))
        {
            return Err(REPLACED.to_string());
        }
        Ok(fd)
    }

    /// Counts a directory this run uses without having made it (it was there): it is not
    /// "made" by anything later in the run either.
    pub fn used(&mut self, node: &Node) {
        self.seen.insert((node.dev, node.ino));
    }
}

fn born_since(node: &Node, since: SystemTime) -> bool {
    let Some((secs, nanos)) = node.born else {
        return true;
    };
    let Ok(secs) = u64::try_from(secs) else {
        return false;
    };
    let born = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    born + CLOCK_SLACK >= since
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_fd(p: &std::path::Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn only_what_was_just_made_and_never_twice() {
        let t = tempfile::tempdir().unwrap();
        let old = t.path().join("old");
        std::fs::create_dir(&old).unwrap();
        // Born long ago, as far as the check can tell: a node of an earlier restore.
        let since = now() + Duration::from_secs(3600);
        let parent = dir_fd(t.path());
        let mut made = Made::default();
        assert!(made
            .open(&parent, b"old", FileType::Directory, None, since)
            .is_err());
        let since = now();
        std::fs::create_dir(t.path().join("new")).unwrap();
        assert!(made
            .open(&parent, b"new", FileType::Directory, None, since)
            .is_ok());
        // The same directory a second time (exchanged with another's name): refused.
        std::fs::rename(t.path().join("new"), t.path().join("again")).unwrap();
        assert!(made
            .open(&parent, b"again", FileType::Directory, None, since)
            .is_err());
        // Another kind than the one made: refused.
        std::fs::write(t.path().join("file"), b"x").unwrap();
        assert!(made
            .open(&parent, b"file", FileType::Fifo, None, since)
            .is_err());
    }
}
