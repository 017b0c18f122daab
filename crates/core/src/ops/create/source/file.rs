//! A regular file met by the walk: another name of an inode this run read, contents the
//! files cache vouches for (unchanged since the last backup: not read again), or opened,
//! checked to be the file listed, and read and chunked.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::io::Errno;

use super::{FileEnd, LinkKey, Source, Stamp, Step, Stop, Unit};
use crate::format::item::{Item, Timestamp};
use crate::ops::create::tree::Entry;
use crate::ops::create::CACHE_MIN_AGE_NS;
use crate::source::files_cache;
use crate::source::fsmeta::{self, Meta};
use crate::util::log::Warning;

impl Source<'_> {
    /// A regular file: another name of an inode already read, unchanged contents from the
    /// files cache, or read.
    pub(super) fn file(&mut self, entry: &Entry, item: Box<Item>) -> Step {
        let stamp = Stamp::of(&entry.meta);
        let link = (entry.meta.nlink > 1).then_some((stamp.dev, stamp.inode));
        if let Some(key) = link {
            if self.links_read.contains(&key) {
                return self.send(Unit::Hardlink { item, key, stamp });
            }
        }
        let cached = self.old_cache.get(&item.path).filter(|e| {
            e.matches(stamp.inode, stamp.size, stamp.mtime, stamp.ctime)
                && e.chunks.iter().all(|c| self.known.contains_key(&c.id))
        });
        if let Some(mut cached) = cached {
            // Unchanged contents. The attributes and flags too when the cache holds them as
            // this backup reads them (changing any of them changes the ctime, which
            // matched): the file is not even opened. Else they are read from the file.
            let known = self
                .old_cache
                .attrs(&cached, &self.opts.meta)
                .filter(|_| !self.opts.exclude_nodump)
                .cloned();
            let (inode_flags, xattrs, whole) = match known {
                Some(a) => (a.inode_flags, a.xattrs, true),
                None => self.attributes_unread(entry)?,
            };
            cached.attrs = whole.then(|| files_cache::Attrs {
                inode_flags,
                xattrs: xattrs.clone(),
            });
            if self.opts.exclude_nodump && inode_flags & fsmeta::FL_NODUMP != 0 {
                return Ok(());
            }
            let mut item = item;
            item.xattrs = xattrs;
            if self.opts.meta.flags {
                item.inode_flags = inode_flags;
            }
            if let Some(key) = link {
                self.links_read.insert(key);
            }
            return self.send(Unit::Cached {
                item,
                entry: cached,
                link,
            });
        }
        self.read(entry, stamp, link, item)
    }

    /// Reads a file whose contents are not in the files cache: opened as listed (`walked`),
    /// read and chunked, then checked for changes while it was read.
    fn read(
        &mut self,
        entry: &Entry,
        walked: Stamp,
        link: Option<LinkKey>,
        item: Box<Item>,
    ) -> Step {
        let path = entry.path.as_path();
        let Some((file, start)) = self.open_listed(entry, walked)? else {
            return Ok(());
        };
        let inode_flags = if self.opts.meta.flags || self.opts.exclude_nodump {
            fsmeta::read_flags(file.as_fd())
        } else {
            0
        };
        if self.opts.exclude_nodump && inode_flags & fsmeta::FL_NODUMP != 0 {
            return Ok(());
        }
        // The real clock: compared with the file system's times, never shifted.
        let read_at = Timestamp::from_system(crate::util::clock::now());
        self.send(Unit::FileStart(item))?;
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.chunks(path, &file, &mut buf);
        self.buf = buf;
        let Some(size) = result? else {
            return self.send(Unit::FileEnd(FileEnd::failed()));
        };
        let end = file.metadata().map(|m| Stamp::of(&Meta::of(&m))).ok();
        let changed = start != walked || end != Some(start) || size != start.size;
        if changed {
            self.warn(Warning::about(
                path,
                "changed",
                "file changed while it was read",
            ))?;
        }
        let (xattrs, attrs_known) =
            self.xattrs_read(path, fsmeta::read_xattrs_fd(&file, &self.opts.meta))?;
        let cacheable = !changed
            && start.ctime.max(start.mtime).as_nanos() < read_at.as_nanos() - CACHE_MIN_AGE_NS;
        if let Some(key) = link {
            self.links_read.insert(key);
        }
        self.send(Unit::FileEnd(FileEnd {
            ok: true,
            start: Some(start),
            size,
            changed,
            cacheable,
            link,
            xattrs,
            inode_flags: if self.opts.meta.flags { inode_flags } else { 0 },
            attrs_known,
        }))
    }

    /// The file `entry` names, opened (never through a symlink), and its stamp when opened;
    /// `None`, after a warning, when it cannot be opened or is no longer the regular file that
    /// was listed (`walked`).
    fn open_listed(
        &self,
        entry: &Entry,
        walked: Stamp,
    ) -> std::result::Result<Option<(File, Stamp)>, Stop> {
        let path = entry.path.as_path();
        let skipped = |w: Warning| self.warn(w).map(|()| None);
        let file = match entry.open() {
            Ok(f) => f,
            Err(e) if Errno::from_io_error(&e) == Some(Errno::LOOP) => {
                return skipped(Warning::about(
                    path,
                    "replaced",
                    "changed during backup (replaced by a symlink); skipped",
                ))
            }
            Err(e) => return skipped(Warning::io(path, "unreadable", "", &e)),
        };
        let start = match file.metadata() {
            Ok(m) if m.is_file() => Stamp::of(&Meta::of(&m)),
            Ok(_) => {
                return skipped(Warning::about(
                    path,
                    "replaced",
                    "was replaced by something that is not a file; skipped",
                ))
            }
            Err(e) => return skipped(Warning::io(path, "unreadable", "", &e)),
        };
        if (start.dev, start.inode) != (walked.dev, walked.inode) {
            // Not the file that was listed (a rename in its place): storing it under this
            // path and owner could expose someone else's data.
            return skipped(Warning::about(
                path,
                "replaced",
                "changed during backup (replaced between listing and reading); skipped",
            ));
        }
        Ok(Some((file, start)))
    }

    /// Reads and chunks one file, handing each chunk to the workers. `Ok(None)` after a read
    /// error (warned).
    fn chunks(
        &self,
        path: &Path,
        file: &File,
        buf: &mut Vec<u8>,
    ) -> std::result::Result<Option<u64>, Stop> {
        match self.chunks_of(file, buf)? {
            Ok(size) => Ok(Some(size)),
            Err(e) => {
                self.warn(Warning::io(path, "unreadable", "read error", &e))?;
                Ok(None)
            }
        }
    }

    /// The inode flags and extended attributes of a file that is not read (its contents come
    /// from the files cache), through a descriptor when it opens as the file listed; and
    /// whether they are known whole (not when read by name, without the flags, or when the
    /// attributes could not be read).
    fn attributes_unread(
        &self,
        entry: &Entry,
    ) -> std::result::Result<(u32, fsmeta::Xattrs, bool), Stop> {
        let opened = entry.open().ok().filter(|f| {
            f.metadata()
                .is_ok_and(|m| Meta::of(&m).identity() == entry.meta.identity())
        });
        let Some(file) = opened else {
            // Not readable by this process (or gone): its attributes by name, through its
            // directory's descriptor.
            let xattrs = fsmeta::read_xattrs(&entry.fd_path(), &self.opts.meta);
            return Ok((0, self.xattrs_read(&entry.path, xattrs)?.0, false));
        };
        let flags = if self.opts.meta.flags || self.opts.exclude_nodump {
            fsmeta::read_flags(file.as_fd())
        } else {
            0
        };
        let xattrs = fsmeta::read_xattrs_fd(&file, &self.opts.meta);
        let (xattrs, known) = self.xattrs_read(&entry.path, xattrs)?;
        Ok((flags, xattrs, known))
    }
}
