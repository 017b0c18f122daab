//! Local-directory backend. Crash safety follows restic's local save: write a temporary file
//! in the target directory, check its length, fsync it, rename it over the final name, fsync
//! the directory. Directories created on the way are fsynced into their parents.
//!
//! Objects are private whatever the process's umask: files 0600, directories 0700 (set
//! explicitly after creation), so that no other local user can copy a key file and guess
//! passphrases offline.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> StoreResult<PathBuf> {
        validate_name(name)?;
        Ok(self.root.join(name))
    }

    fn temp_path(path: &Path) -> PathBuf {
        let base = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        path.with_file_name(format!(".{base}.tmp-{:016x}", rand::random::<u64>()))
    }

    /// Creates the missing directories between the root and `dir`, fsyncing each new one into
    /// its parent so that a later durable object is reachable after a crash.
    fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if !self.root.is_dir() {
            // Never recreate a vanished repository root (an unmounted disk would otherwise
            // fill the mount point).
            return Err(io::Error::other(format!(
                "repository directory {} does not exist",
                self.root.display()
            )));
        }
        if let Some(parent) = dir.parent() {
            if parent != self.root && parent.starts_with(&self.root) {
                self.ensure_dir(parent)?;
            }
        }
        match create_private_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }

    /// The first half of a put: `data` in a fresh temporary file beside the object, not yet
    /// synced. Returns the object's path, the temporary file's, and a descriptor to sync.
    fn write_unsynced(&self, name: &str, data: &[u8]) -> StoreResult<(PathBuf, PathBuf, File)> {
        let path = self.path(name)?;
        let (tmp, file) = self
            .write_temp_unsynced(&path, data)
            .map_err(|e| StoreError::from_io(name, e))?;
        Ok((path, tmp, file))
    }

    /// The second half: fsync the temporary file, rename it over the object, fsync the
    /// directory; on failure the temporary file is removed.
    fn commit(&self, name: &str, (path, tmp, file): (PathBuf, PathBuf, File)) -> StoreResult<()> {
        let finish = || -> io::Result<()> {
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            sync_dir(path.parent().unwrap_or(&self.root))
        };
        finish().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StoreError::from_io(name, e)
        })
    }

    /// Writes `data` to a fresh temporary file beside `path`, durable, and returns its name.
    fn write_temp(&self, path: &Path, data: &[u8]) -> io::Result<PathBuf> {
        let (tmp, file) = self.write_temp_unsynced(path, data)?;
        match file.sync_all() {
            Ok(()) => Ok(tmp),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Writes `data` to a fresh temporary file beside `path`, not yet synced: its name and an
    /// open descriptor to sync it with.
    fn write_temp_unsynced(&self, path: &Path, data: &[u8]) -> io::Result<(PathBuf, File)> {
        let dir = path.parent().unwrap_or(&self.root);
        self.ensure_dir(dir)?;
        let tmp = Self::temp_path(path);
        let mut result: io::Result<File> = Err(io::Error::other("not written"));
        if data.len() >= DIRECT_MIN {
            result = write_direct(&tmp, data);
            if result.is_err() {
                // O_DIRECT is not supported everywhere (tmpfs, some network file systems);
                // start over with a buffered write.
                let _ = fs::remove_file(&tmp);
            }
        }
        if result.is_err() {
            result = write_buffered(&tmp, data);
        }
        match result {
            Ok(file) => Ok((tmp, file)),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

/// File mode of every object.
pub const FILE_MODE: u16 = 0o600;
/// Mode of every directory cairn creates in a repository (and in its cache).
pub const DIR_MODE: u16 = 0o700;

/// Creates one directory with mode 0700, whatever the umask.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new().mode(DIR_MODE.into()).create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE.into()))
}

/// Creates a directory and its missing parents, each new one with mode 0700.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() {
            create_private_dir_all(parent)?;
        }
    }
    match create_private_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        r => r,
    }
}

/// Opens object `name` at `path` for reading, without waiting for a writer: a FIFO, a device
/// or a directory where an object goes (put there by someone, or another tool) is an error,
/// never a hang.
fn open_object(path: &Path, name: &str) -> StoreResult<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| StoreError::from_io(name, e))?;
    let meta = f.metadata().map_err(|e| StoreError::from_io(name, e))?;
    if !meta.is_file() {
        return Err(StoreError::from_io(
            name,
            io::Error::other(
                "not a regular file (a FIFO, device or directory is where the object goes)",
            ),
        ));
    }
    Ok(f)
}

/// Opens a new file for writing with mode 0600, whatever the umask.
fn create_private(path: &Path, custom_flags: i32) -> io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE.into())
        .custom_flags(custom_flags)
        .open(path)?;
    f.set_permissions(fs::Permissions::from_mode(FILE_MODE.into()))?;
    Ok(f)
}

/// Objects at least this large (packs) are written with O_DIRECT.
const DIRECT_MIN: usize = 1 << 20;
/// Alignment O_DIRECT needs for buffers, lengths and offsets (covers 512 and 4096-byte sectors).
const DIRECT_ALIGN: usize = 4096;
/// Bytes copied to the aligned buffer and written per system call (1 MiB writes a pack as fast
/// as 8 MiB did, and the buffer is part of `create`'s peak memory).
const DIRECT_PIECE: usize = 1 << 20;

/// Writes `data` to the new file `tmp` through the page cache; the caller syncs it.
fn write_buffered(tmp: &Path, data: &[u8]) -> io::Result<File> {
    let mut f = create_private(tmp, 0)?;
    f.write_all(data)?;
    check_len(&f, data.len())?;
    Ok(f)
}

fn check_len(f: &File, want: usize) -> io::Result<()> {
    let len = f.metadata()?.len();
    if len != want as u64 {
        return Err(io::Error::other(format!(
            "short write: {len} of {want} bytes"
        )));
    }
    Ok(())
}

/// Writes a large object bypassing the page cache: packs are written once and not read back
/// soon, and copying them into the cache costs more CPU than everything else a store does.
/// The aligned bulk goes through O_DIRECT from an aligned bounce buffer; the unaligned tail
/// through a normal descriptor, which is returned for the caller to sync.
fn write_direct(tmp: &Path, data: &[u8]) -> io::Result<File> {
    use std::os::unix::fs::FileExt;
    let f = create_private(tmp, rustix::fs::OFlags::DIRECT.bits() as i32)?;
    let bulk = data.len() / DIRECT_ALIGN * DIRECT_ALIGN;
    let mut scratch = vec![0u8; DIRECT_PIECE.min(bulk) + DIRECT_ALIGN];
    let off = scratch.as_ptr().align_offset(DIRECT_ALIGN);
    let buf = &mut scratch[off..off + DIRECT_PIECE.min(bulk)];
    let mut pos = 0;
    while pos < bulk {
        let n = DIRECT_PIECE.min(bulk - pos);
        buf[..n].copy_from_slice(&data[pos..pos + n]);
        let mut done = 0;
        while done < n {
            let w = f.write_at(&buf[done..n], (pos + done) as u64)?;
            if w == 0 || w % DIRECT_ALIGN != 0 && done + w < n {
                return Err(io::Error::other("short O_DIRECT write"));
            }
            done += w;
        }
        pos += n;
    }
    drop(f);
    let tail = OpenOptions::new().write(true).open(tmp)?;
    if bulk < data.len() {
        tail.write_all_at(&data[bulk..], bulk as u64)?;
    }
    check_len(&tail, data.len())?;
    Ok(tail)
}

/// fsync of a directory, which makes renames and creations in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Store for LocalStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        let written = self.write_unsynced(name, data)?;
        self.commit(name, written)
    }

    /// The bytes go back to the caller once they are in the file (O_DIRECT: on the device);
    /// the file's fsync, its rename and the directory's fsync follow, and only then is the
    /// object there under its name: the same steps and the same durability as `put`.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let written = self.write_unsynced(name, &data);
        release(data);
        self.commit(name, written?)
    }

    /// The temporary file is linked to the final name (`link` fails when the name exists),
    /// or, on a file system without hard links, renamed with `RENAME_NOREPLACE`.
    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        let path = self.path(name)?;
        let tmp = self
            .write_temp(&path, data)
            .map_err(|e| StoreError::from_io(name, e))?;
        let linked = fs::hard_link(&tmp, &path).or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Err(e);
            }
            // No hard links here (EPERM, EOPNOTSUPP, EMLINK…): a rename that never replaces.
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &tmp,
                rustix::fs::CWD,
                &path,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(io::Error::from)
        });
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => sync_dir(path.parent().unwrap_or(&self.root))
                .map_err(|e| StoreError::from_io(name, e)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(StoreError::Exists {
                name: name.to_string(),
            }),
            Err(e) => Err(StoreError::from_io(name, e)),
        }
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        let path = self.path(name)?;
        let f = open_object(&path, name)?;
        let size = f
            .metadata()
            .map_err(|e| StoreError::from_io(name, e))?
            .len();
        super::check_size(name, size, max)?;
        let mut buf = Vec::with_capacity(size as usize);
        // Never more than `max`, even if the file grows while it is read.
        f.take(max.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| StoreError::from_io(name, e))?;
        super::check_size(name, buf.len() as u64, max)?;
        Ok(buf)
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        let mut buf = Vec::new();
        self.get_into(name, range, &mut buf)?;
        Ok(buf)
    }

    fn get_into(&self, name: &str, range: Option<ByteRange>, buf: &mut Vec<u8>) -> StoreResult<()> {
        let path = self.path(name)?;
        let mut f = open_object(&path, name)?;
        match range {
            None => {
                buf.clear();
                f.read_to_end(buf)
                    .map_err(|e| StoreError::from_io(name, e))?;
                Ok(())
            }
            Some(r) => {
                let size = f
                    .metadata()
                    .map_err(|e| StoreError::from_io(name, e))?
                    .len();
                let end = r.offset.saturating_add(r.len);
                let short = || StoreError::Short {
                    name: name.to_string(),
                    wanted: end,
                    got: size,
                };
                if end > size {
                    return Err(short());
                }
                let len = usize::try_from(r.len).map_err(|_| short())?;
                // What `buf` held is read over: only what it lacks is zeroed first (a new
                // buffer comes zeroed from the allocator, without a pass over it).
                if buf.capacity() < len {
                    *buf = vec![0u8; len];
                } else {
                    buf.truncate(len);
                    buf.resize(len, 0);
                }
                f.read_exact_at(buf, r.offset).map_err(|e| {
                    if e.kind() == io::ErrorKind::UnexpectedEof {
                        short()
                    } else {
                        StoreError::from_io(name, e)
                    }
                })
            }
        }
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        let base = if prefix.is_empty() {
            self.root.clone()
        } else {
            self.root.join(prefix)
        };
        if !base.is_dir() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        // An object or directory removed while the listing runs (another client's lock
        // released, a pack compacted) is not in it, and is no error: a listing is a moment.
        let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
        for entry in walkdir::WalkDir::new(&base).min_depth(1) {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let e = e.into_io_error().unwrap_or(io::Error::other("walk"));
                    if gone(&e) {
                        continue;
                    }
                    return Err(StoreError::from_io(prefix, e));
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(&self.root) else {
                continue;
            };
            let Some(name) = rel.to_str().map(|s| s.replace('\\', "/")) else {
                continue;
            };
            // Temporary files and anything else that is not a valid object name are invisible.
            if validate_name(&name).is_err() {
                continue;
            }
            let size = match entry.metadata() {
                Ok(md) => md.len(),
                Err(e) => {
                    let e = e.into_io_error().unwrap_or(io::Error::other("stat"));
                    if gone(&e) {
                        continue;
                    }
                    return Err(StoreError::from_io(&name, e));
                }
            };
            out.push(ObjectInfo { name, size });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        let path = self.path(name)?;
        fs::remove_file(&path).map_err(|e| StoreError::from_io(name, e))?;
        sync_dir(path.parent().unwrap_or(&self.root)).map_err(|e| StoreError::from_io(name, e))
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        let path = self.path(name)?;
        let md = fs::metadata(&path).map_err(|e| StoreError::from_io(name, e))?;
        if !md.is_file() {
            return Err(StoreError::NotFound {
                name: name.to_string(),
            });
        }
        Ok(ObjectInfo {
            name: name.to_string(),
            size: md.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_leaves_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        s.put("packs/ab/abc", b"hello").unwrap();
        let names: Vec<_> = fs::read_dir(dir.path().join("packs/ab"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["abc"]);
    }

    /// The bytes come back once they are in the temporary file, before it has its name; the
    /// object has it, whole, when the put returns. A put that cannot write gives them back too.
    #[test]
    fn put_releasing_gives_the_bytes_back_before_the_object_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        for len in [5, (3 << 20) + 123] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut seen = Vec::new();
            let mut release = |bytes: Vec<u8>| {
                let listed: Vec<String> = fs::read_dir(dir.path().join("packs/ab"))
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                seen.push((bytes.len(), listed));
            };
            s.put_releasing("packs/ab/abc", data.clone(), &mut release)
                .unwrap();
            assert_eq!(seen.len(), 1, "released once");
            let (released, listed) = &seen[0];
            assert_eq!(*released, len);
            assert!(
                listed.iter().all(|n| n != "abc") && listed.iter().any(|n| n.contains(".tmp-")),
                "{listed:?}"
            );
            assert_eq!(s.get("packs/ab/abc", None).unwrap(), data);
            s.delete("packs/ab/abc").unwrap();
        }
        let gone = LocalStore::new(dir.path().join("missing"));
        let mut released = 0;
        let err = gone
            .put_releasing("packs/ab/abc", vec![1; 10], &mut |_| released += 1)
            .unwrap_err();
        assert_eq!(released, 1, "{err}");
    }

    #[test]
    fn large_objects_round_trip_whatever_their_alignment() {
        // Direct I/O on disk file systems, the buffered fallback elsewhere (tmpfs): the bytes
        // must be the same either way, for every tail length.
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        for len in [
            DIRECT_MIN,
            DIRECT_MIN + 1,
            DIRECT_MIN + 4095,
            3 * DIRECT_PIECE + 777,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            s.put("packs/aa/big", &data).unwrap();
            assert!(s.get("packs/aa/big", None).unwrap() == data, "length {len}");
        }
    }

    #[test]
    fn objects_removed_while_a_listing_runs_are_not_an_error() {
        // Another client releases its lock (or compact removes a pack) between the listing's
        // read of the directory and its stat of the entry: the object is simply gone.
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        s.put("locks/keep", b"k").unwrap();
        let locks = dir.path().join("locks");
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = locks.join(format!("l{}", i % 64));
                    let _ = fs::write(&p, b"x");
                    let _ = fs::remove_file(&p);
                    i += 1;
                }
            });
            for _ in 0..3000 {
                let l = s.list("locks");
                if l.is_err() {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                let l = l.unwrap();
                assert!(l.iter().any(|o| o.name == "locks/keep"));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    #[test]
    fn list_hides_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        s.put("index/aa", b"x").unwrap();
        fs::write(dir.path().join("index/.aa.tmp-1234"), b"partial").unwrap();
        let l = s.list("index").unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name, "index/aa");
    }

    #[test]
    fn names_cannot_escape_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        for bad in [
            "../x",
            "/etc/passwd",
            "a//b",
            "a/./b",
            ".hidden",
            "a/.tmp",
            "",
        ] {
            assert!(
                matches!(s.put(bad, b"x"), Err(StoreError::InvalidName { .. })),
                "{bad}"
            );
        }
    }
}
