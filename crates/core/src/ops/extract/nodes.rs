//! Directories, symlinks, FIFOs and device nodes: made relative to their parent's descriptor,
//! then given their metadata on the node this run made ([`super::made`]); a directory's only
//! after its contents ([`super::metadata`]).

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{failed, made, target, Outcome, Overwrite, Restorer};
use crate::format::item::{Item, ItemKind};

impl Restorer<'_> {
    pub(super) fn restore_dir(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        let mut made = true;
        let since = made::now();
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                let is_dir = |st: rustix::fs::Stat| {
                    FileType::from_raw_mode(st.st_mode) == FileType::Directory
                };
                // Left as it is, metadata included.
                if self.overwrite == Overwrite::Never
                    && rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(is_dir)
                {
                    return Outcome::Done;
                }
                match self.dir_there(parent, name, item) {
                    Ok(true) => made = false,
                    Ok(false) => {
                        if let Err(e) =
                            rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700))
                        {
                            return failed(e);
                        }
                    }
                    Err(outcome) => return outcome,
                }
            }
            Err(e) => return failed(e),
        }
        crate::util::pause::point("extract:dir-made");
        // Mode, owner and times are applied after the contents, deepest first, to this very
        // directory: one another user swapped in under its name meanwhile gets none of it.
        match self.dir_identity(parent, name, made, since) {
            Ok(id) => {
                self.dirs_to_finish.push((item.clone(), id));
                Outcome::Done
            }
            Err(why) => Outcome::Skipped(format!("{why}; its metadata is not set")),
        }
    }

    /// The device and inode of the directory at `name` in `parent`, which this run made
    /// (then it must be what it made: [`made::Made::open`]) or found and uses.
    fn dir_identity(
        &mut self,
        parent: &OwnedFd,
        name: &[u8],
        made: bool,
        since: std::time::SystemTime,
    ) -> std::result::Result<(u64, u64), String> {
        let fd = if made {
            self.made
                .open(parent, name, FileType::Directory, None, since)?
        } else {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            rustix::fs::openat(parent, name, flags, Mode::empty())
                .map_err(|_| "it was replaced during the restore".to_string())?
        };
        let node = target::Node::open(&fd).map_err(|e| e.to_string())?;
        if !made {
            self.made.used(&node);
        }
        Ok((node.dev, node.ino))
    }

    /// A symlink, FIFO or device node, made once room is made for it.
    pub(super) fn restore_node(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        if let Err(outcome) = self.make_room(parent, name, item) {
            return outcome;
        }
        match item.kind {
            ItemKind::Symlink => self.restore_symlink(parent, name, item),
            _ => self.restore_special(parent, name, item),
        }
    }

    fn restore_symlink(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        let since = made::now();
        if let Err(e) = rustix::fs::symlinkat(item.link_target.as_slice(), parent, name) {
            return failed(e);
        }
        crate::util::pause::point("extract:node-made");
        self.apply_at_metadata(parent, name, item, (FileType::Symlink, None), since);
        Outcome::Done
    }

    fn restore_special(&mut self, parent: &OwnedFd, name: &[u8], item: &Item) -> Outcome {
        let kind = match item.kind {
            ItemKind::Fifo => FileType::Fifo,
            _ if !self.is_root => {
                let msg = format!(
                    "{}: device files can only be restored by root; skipped",
                    item.display_path()
                );
                self.warn_at(&item.path, "skipped", msg);
                return Outcome::Done;
            }
            ItemKind::CharDev => FileType::CharacterDevice,
            _ => FileType::BlockDevice,
        };
        // Created owner-only; the final mode is set explicitly below (the process's umask is
        // never changed: it is shared with every thread, the lock refresher's too).
        let since = made::now();
        if let Err(e) =
            rustix::fs::mknodat(parent, name, kind, Mode::from_raw_mode(0o600), item.rdev)
        {
            return failed(e);
        }
        crate::util::pause::point("extract:node-made");
        let rdev = (kind != FileType::Fifo).then_some(item.rdev);
        self.apply_at_metadata(parent, name, item, (kind, rdev), since);
        Outcome::Done
    }
}
