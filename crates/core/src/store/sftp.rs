//! SFTP backend, through the user's own ssh (its config, agent, known_hosts, ProxyJump), as
//! borg and restic do: cairn runs `ssh [-p PORT] [-l USER] HOST -s sftp` (or the command in
//! `CAIRN_RSH`, like `BORG_RSH`) and speaks SFTP over its pipes.
//!
//! A put writes a temporary `.<name>.tmp-<random>` beside the object, fsyncs it when the server
//! offers `fsync@openssh.com`, then renames it over the final name (`posix-rename@openssh.com`,
//! atomic). SFTP cannot fsync a directory; the rename's durability is the server's.
//!
//! A dropped connection is re-established and the operation retried, up to three times with a
//! growing pause (every operation is safe to repeat); errors the
//! server reports (no such file, permission denied, …) are not retried.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use openssh_sftp_client::error::{Error as SftpError, SftpErrorKind};
use openssh_sftp_client::file::File;
use openssh_sftp_client::metadata::Permissions;
use openssh_sftp_client::{Sftp, SftpOptions};
use tokio::io::AsyncSeekExt;

use crate::store::local::{DIR_MODE, FILE_MODE};
use crate::store::retry::{with_retries, Fail};
use crate::store::target::SftpTarget;

use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

/// Reads and writes are split into requests of this size (within every server's limit;
/// OpenSSH takes up to 255 KiB)…
const PIECE: usize = 128 << 10;
/// … and up to this many are outstanding at once, so a pack moves at the link's speed rather
/// than one round trip per request (32 × 128 KiB = 4 MiB in flight).
const WINDOW: usize = 32;
/// Directories listed at once (a listing of `packs` walks its 256 subdirectories).
const LIST_WINDOW: usize = 16;

/// Writes `data` at offset 0 of `file` with up to [`WINDOW`] write requests in flight.
async fn write_pipelined(file: &File, data: &[u8]) -> Result<(), SftpError> {
    let mut pending = futures::stream::iter(data.chunks(PIECE).enumerate().map(|(i, piece)| {
        let mut f = file.clone();
        async move {
            f.seek(std::io::SeekFrom::Start((i * PIECE) as u64)).await?;
            f.write_all(piece).await
        }
    }))
    .buffer_unordered(WINDOW);
    while let Some(r) = pending.next().await {
        r?;
    }
    Ok(())
}

/// Makes a freshly created `file` private, writes `data` into it and makes it durable: the
/// permissions go out just ahead of the first writes rather than a round trip before them
/// (OpenSSH serves one handle's requests in order; a server that does not, such as Go's
/// pkg/sftp, may write some bytes before the mode is set, inside a repository whose
/// directories are 0700; a server that refuses permissions leaves the file usable, as for
/// directories). The close's answer is waited for: storage that reports a late write error
/// only there (a FUSE file system without fsync, a mount that uploads on close) must fail the
/// put before the object is renamed into place.
async fn write_durably(mut file: File, data: &[u8]) -> Result<(), SftpError> {
    let mut perms = file.clone();
    let (_, written) = futures::join!(
        perms.set_permissions(Permissions::from(FILE_MODE)),
        write_pipelined(&file, data)
    );
    // `close` sends only from the last handle: every clone (the permissions', the writes')
    // must be gone before it, or it would return Ok without closing.
    drop(perms);
    written?;
    match file.sync_all().await {
        Ok(()) | Err(SftpError::UnsupportedExtension(_)) => {}
        Err(e) => return Err(e),
    }
    file.close().await
}

/// Reads `len` bytes from `offset` of `file` with up to [`WINDOW`] read requests in flight,
/// appended to `out` (which has room reserved for `reserve` more bytes: the rest grows with
/// what arrives). End of file before `len` bytes is an `UnexpectedEof` I/O error.
async fn read_pipelined(
    file: &File,
    offset: u64,
    len: usize,
    mut out: Vec<u8>,
    reserve: usize,
) -> Result<Vec<u8>, SftpError> {
    let pieces = (0..len).step_by(PIECE).map(|start| {
        let mut f = file.clone();
        let n = PIECE.min(len - start);
        async move {
            f.seek(std::io::SeekFrom::Start(offset + start as u64))
                .await?;
            f.read_all(n, BytesMut::with_capacity(n)).await
        }
    });
    out.reserve(reserve.min(len));
    let mut ordered = futures::stream::iter(pieces).buffered(WINDOW);
    while let Some(piece) = ordered.next().await {
        out.extend_from_slice(&piece?);
    }
    Ok(out)
}

/// What a read reserves ahead of its bytes when nothing bounds its length but the caller's
/// word (a range, or a whole object under no limit): beyond it, the buffer grows as they come.
const RESERVE_UNBOUNDED: usize = 64 << 20;
/// Directory levels a listing walks (cairn's deepest names are `packs/ab/<id>`): a deeper tree
/// (a stranger's, a hostile one, or a loop of links the server follows) is an error, not
/// walked further.
const LIST_DEPTH: usize = 4;

struct Conn {
    sftp: Sftp,
    _ssh: tokio::process::Child,
}

pub struct SftpStore {
    rt: tokio::runtime::Runtime,
    target: SftpTarget,
    rsh: Vec<String>,
    conn: Mutex<Option<Arc<Conn>>>,
}

fn classify(name: &str, e: SftpError) -> Fail {
    match e {
        SftpError::SftpError(kind, msg) => {
            let msg = msg.to_string();
            Fail::Store(match kind {
                SftpErrorKind::NoSuchFile => StoreError::NotFound {
                    name: name.to_string(),
                },
                _ if msg.contains("No space left") || msg.contains("Quota") => {
                    StoreError::NoSpace {
                        name: name.to_string(),
                    }
                }
                _ => StoreError::Io {
                    name: name.to_string(),
                    source: std::io::Error::other(format!("sftp: {kind:?}: {msg}")),
                },
            })
        }
        SftpError::UnsupportedExtension(ext) => Fail::Store(StoreError::Io {
            name: name.to_string(),
            source: std::io::Error::other(format!("the SFTP server lacks the {ext} extension")),
        }),
        other => Fail::Connection(other.to_string()),
    }
}

fn io_fail(name: &str, msg: impl Into<String>) -> Fail {
    Fail::Store(StoreError::Io {
        name: name.to_string(),
        source: std::io::Error::other(msg.into()),
    })
}

impl SftpStore {
    /// Connects (lazily, on first use) to `target`. `rsh` is the ssh command line as argv
    /// (`CAIRN_RSH` split into words, or `ssh`).
    pub fn new(target: SftpTarget, rsh: Vec<String>) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        Ok(Self {
            rt,
            target,
            rsh,
            conn: Mutex::new(None),
        })
    }

    fn full(&self, name: &str) -> PathBuf {
        if name.is_empty() {
            PathBuf::from(&self.target.path)
        } else {
            Path::new(&self.target.path).join(name)
        }
    }

    async fn connect(rsh: &[String], t: &SftpTarget) -> Result<Conn, String> {
        let argv = ssh_argv(rsh, t);
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        // ssh and whatever it runs (a ProxyCommand) have no business with a secret.
        for k in crate::util::secrets::present() {
            cmd.env_remove(k);
        }
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", rsh[0]))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("ssh started without pipes".into());
        };
        let sftp = Sftp::new(stdin, stdout, SftpOptions::new())
            .await
            .map_err(|e| format!("SFTP session to {} failed: {e}", t.host))?;
        Ok(Conn { sftp, _ssh: child })
    }

    fn conn(&self) -> Result<Arc<Conn>, String> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(self.rt.block_on(Self::connect(&self.rsh, &self.target))?);
        *slot = Some(Arc::clone(&c));
        Ok(c)
    }

    fn forget(&self, c: &Arc<Conn>) {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, c)) {
            *slot = None;
        }
    }

    /// Runs `op` on a connection; on a lost connection reconnects and tries again (when
    /// `repeatable`). `retried` tells `op` whether an earlier attempt may have done its work.
    fn run<T, F, Fut>(&self, name: &str, repeatable: bool, op: F) -> StoreResult<T>
    where
        F: Fn(Arc<Conn>, bool) -> Fut,
        Fut: std::future::Future<Output = Result<T, Fail>>,
    {
        let lost = |last: &str| format!("SFTP connection to {} lost: {last}", self.target.host);
        let mut attempt = |retried: bool| {
            let c = self.conn().map_err(Fail::Unconnected)?;
            match self.rt.block_on(op(Arc::clone(&c), retried)) {
                Err(Fail::Connection(e)) => {
                    self.forget(&c);
                    Err(Fail::Connection(e))
                }
                other => other,
            }
        };
        with_retries(
            name,
            repeatable,
            Duration::from_millis(500),
            &lost,
            &mut attempt,
        )
    }

    /// Creates the missing directories from the repository root down to `dir` (never the root
    /// itself: a vanished repository is not silently recreated).
    async fn ensure_dir(c: &Conn, root: &Path, dir: &Path, name: &str) -> Result<(), Fail> {
        // Most often only the object's own directory is missing (`index`, `packs/ab`): made
        // at once, without first asking whether it and the root are there. Its parent missing
        // (or anything else) takes the careful way, which never makes the root.
        let mut fs = c.sftp.fs();
        if dir != root && dir.starts_with(root) {
            let mut builder = fs.dir_builder();
            builder.permissions(Permissions::from(DIR_MODE));
            if builder.create(dir).await.is_ok() {
                Self::make_private(c, dir).await;
                return Ok(());
            }
        }
        if fs.metadata(dir).await.is_ok() {
            return Ok(());
        }
        if fs.metadata(root).await.is_err() {
            return Err(io_fail(
                name,
                format!("repository directory {} does not exist", root.display()),
            ));
        }
        let rel = dir.strip_prefix(root).unwrap_or(dir);
        let mut cur = root.to_path_buf();
        for comp in rel.components() {
            cur.push(comp);
            match fs.create_dir(&cur).await {
                Ok(()) => Self::make_private(c, &cur).await,
                // Someone else may have made it in the meantime.
                Err(e) => {
                    if fs.metadata(&cur).await.is_err() {
                        return Err(classify(name, e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes the directory `dir`, just made by this process, private whatever the server's
    /// umask (best effort: a server without permissions refuses, and the directory is still
    /// usable). A directory made by someone else is left as it is (a repository an
    /// administrator made read-only stays so).
    async fn make_private(c: &Conn, dir: &Path) {
        let _ = c
            .sftp
            .fs()
            .set_permissions(dir, Permissions::from(DIR_MODE))
            .await;
    }

    /// Writes `data` to a fresh temporary file beside `path`, fsynced; returns its path.
    async fn write_temp(
        c: &Conn,
        root: &Path,
        path: &Path,
        data: &[u8],
        name: &str,
    ) -> Result<PathBuf, Fail> {
        let dir = path.parent().unwrap_or(root);
        let base = path
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{base}.tmp-{:016x}", rand::random::<u64>()));
        let open = || async {
            c.sftp
                .options()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .await
        };
        let f = match open().await {
            Ok(f) => f,
            Err(SftpError::SftpError(SftpErrorKind::NoSuchFile, _)) => {
                Self::ensure_dir(c, root, dir, name).await?;
                match open().await {
                    Ok(f) => f,
                    Err(e) => return Err(Self::write_failure(c, root, name, e, data.len()).await),
                }
            }
            Err(e) => return Err(Self::write_failure(c, root, name, e, data.len()).await),
        };
        if let Err(e) = write_durably(f, data).await {
            let _ = c.sftp.fs().remove_file(&tmp).await;
            return Err(Self::write_failure(c, root, name, e, data.len()).await);
        }
        Ok(tmp)
    }

    /// A failed write, classified. SFTP v3 has no code for a full disk: OpenSSH answers
    /// ENOSPC with a bare "Failure". When the server offers `statvfs@openssh.com`, a failure
    /// while the file system has less room than the object needs is `NoSpace`, so that a full
    /// disk behind SFTP is told as one (and a command that frees space can use the
    /// repository's reserve).
    async fn write_failure(c: &Conn, root: &Path, name: &str, e: SftpError, len: usize) -> Fail {
        let generic = matches!(&e, SftpError::SftpError(SftpErrorKind::Failure, _));
        if generic && c.sftp.support_statvfs() {
            if let Ok(st) = c.sftp.fs().statvfs(root).await {
                let free = st.bavail.saturating_mul(st.frsize.max(1));
                if free < len as u64 + (64 << 10) {
                    return Fail::Store(StoreError::NoSpace {
                        name: name.to_string(),
                    });
                }
            }
        }
        classify(name, e)
    }

    /// Creates `path` with `SSH_FXF_EXCL` and writes `data` into it, fsynced. A failure says
    /// whether it came after the file was made (then the file is removed again).
    async fn write_exclusive(
        c: &Conn,
        root: &Path,
        path: &Path,
        data: &[u8],
        name: &str,
    ) -> Result<(), (SftpError, bool)> {
        let dir = path.parent().unwrap_or(root);
        if c.sftp.fs().metadata(dir).await.is_err() {
            // The error of the open below says what is wrong if this does not help.
            let _ = Self::ensure_dir(c, root, dir, name).await;
        }
        let opened = c
            .sftp
            .options()
            .write(true)
            .create_new(true)
            .open(path)
            .await;
        let f = opened.map_err(|e| (e, false))?;
        if let Err(e) = write_durably(f, data).await {
            // Made by this call and incomplete: not left to pass for an object (a lock) that
            // someone holds, nor to be told as one that was there before.
            let _ = c.sftp.fs().remove_file(path).await;
            return Err((e, true));
        }
        Ok(())
    }

    /// The objects in `dir` (named under `rel`) and its subdirectories, to be listed next. A
    /// directory that is not there (removed meanwhile, or never made) holds nothing.
    async fn list_dir(
        c: &Conn,
        dir: PathBuf,
        rel: String,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<(PathBuf, String)>), Fail> {
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        let d = match c.sftp.fs().open_dir(&dir).await {
            Ok(d) => d,
            Err(SftpError::SftpError(SftpErrorKind::NoSuchFile, _)) => return Ok((files, dirs)),
            Err(e) => return Err(classify(prefix, e)),
        };
        let entries: Vec<_> = d.read_dir().collect().await;
        for e in entries {
            let e = e.map_err(|e| classify(prefix, e))?;
            let fname = e.filename().to_string_lossy().into_owned();
            if fname.starts_with('.') {
                continue;
            }
            let name = if rel.is_empty() {
                fname.clone()
            } else {
                format!("{rel}/{fname}")
            };
            let md = e.metadata();
            if md.file_type().is_some_and(|t| t.is_dir()) {
                dirs.push((dir.join(&fname), name));
            } else if validate_name(&name).is_ok() {
                files.push(ObjectInfo {
                    name,
                    size: md.len().unwrap_or(0),
                });
            }
        }
        Ok((files, dirs))
    }

    /// Makes the repository directory (and its parents) for `init`.
    pub fn create_root(&self) -> StoreResult<()> {
        let root = self.full("");
        self.run("", true, |c, _| {
            let root = root.clone();
            async move {
                let mut fs = c.sftp.fs();
                let mut cur = PathBuf::new();
                for comp in root.components() {
                    cur.push(comp);
                    if cur.as_os_str().is_empty()
                        || cur == Path::new("/")
                        || fs.metadata(&cur).await.is_ok()
                    {
                        continue;
                    }
                    fs.create_dir(&cur)
                        .await
                        .map_err(|e| classify(&cur.to_string_lossy(), e))?;
                    let _ = fs.set_permissions(&cur, Permissions::from(DIR_MODE)).await;
                }
                Ok(())
            }
        })
    }
}

impl Store for SftpStore {
    /// The upload reads the bytes until it ends (a far store has no early point at which it
    /// is done with them): they come back when the put does.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let done = self.put(name, &data);
        release(data);
        done
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let (root, path) = (self.full(""), self.full(name));
        self.run(name, true, |c, _| {
            let (root, path) = (root.clone(), path.clone());
            async move {
                let tmp = Self::write_temp(&c, &root, &path, data, name).await?;
                if let Err(e) = c.sftp.fs().rename(&tmp, &path).await {
                    let _ = c.sftp.fs().remove_file(&tmp).await;
                    return Err(Self::write_failure(&c, &root, name, e, data.len()).await);
                }
                Ok(())
            }
        })
    }

    /// With `hardlink@openssh.com` (OpenSSH since 5.7): the temporary file is linked to the
    /// final name, which `link(2)` refuses when it exists. Without it: the final name is
    /// opened with `SSH_FXF_EXCL` and written there (a reader may then see the object before
    /// it is complete, which lock readers take as a lock they cannot read: a refusal, never a
    /// wrong judgement). SFTP v3 reports an existing target only as a failure: the name is
    /// looked up to tell.
    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let (root, path) = (self.full(""), self.full(name));
        self.run(name, true, |c, _| {
            let (root, path) = (root.clone(), path.clone());
            async move {
                let made = if c.sftp.support_hardlink() {
                    let tmp = Self::write_temp(&c, &root, &path, data, name).await?;
                    let linked = c.sftp.fs().hard_link(&tmp, &path).await;
                    let _ = c.sftp.fs().remove_file(&tmp).await;
                    linked.map_err(|e| (e, false))
                } else {
                    Self::write_exclusive(&c, &root, &path, data, name).await
                };
                let Err((e, written)) = made else {
                    return Ok(());
                };
                if written || c.sftp.fs().metadata(&path).await.is_err() {
                    return Err(Self::write_failure(&c, &root, name, e, data.len()).await);
                }
                Err(Fail::Store(StoreError::Exists {
                    name: name.to_string(),
                }))
            }
        })
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        self.read(name, range, u64::MAX)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        self.read(name, None, max)
    }
    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        let top = self.full(prefix);
        let mut out = self.run(prefix, true, |c, _| {
            let top = top.clone();
            async move {
                // Level by level, up to LIST_WINDOW directories at once: `packs` has 256.
                let mut out = Vec::new();
                let mut level = vec![(top, prefix.to_string())];
                let stop = std::cell::Cell::new(false);
                for depth in 1..=LIST_DEPTH {
                    let mut listed = futures::stream::iter(level.into_iter().map(|(dir, rel)| {
                        let stop = &stop;
                        let c = &c;
                        async move {
                            // After a failure, nothing more is started.
                            if stop.get() {
                                return Ok((Vec::new(), Vec::new()));
                            }
                            Self::list_dir(c, dir, rel, prefix).await
                        }
                    }))
                    .buffer_unordered(LIST_WINDOW);
                    let (mut next, mut failed) = (Vec::new(), None);
                    // Every request is answered before an error is returned: a directory
                    // opened behind the failed one is closed, not left open on the server.
                    while let Some(listing) = listed.next().await {
                        match listing {
                            Ok((files, dirs)) => {
                                out.extend(files);
                                next.extend(dirs);
                            }
                            Err(e) => {
                                stop.set(true);
                                failed.get_or_insert(e);
                            }
                        }
                    }
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    if next.is_empty() {
                        break;
                    }
                    if depth == LIST_DEPTH {
                        return Err(io_fail(
                            prefix,
                            format!(
                                "directories more than {LIST_DEPTH} levels deep under {} (cairn \
                                 makes none; not walked further)",
                                Path::new(&next[0].0).display()
                            ),
                        ));
                    }
                    level = next;
                }
                Ok(out)
            }
        })?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        let path = self.full(name);
        self.run(name, true, |c, retried| {
            let path = path.clone();
            async move {
                match c.sftp.fs().remove_file(&path).await {
                    Ok(()) => Ok(()),
                    // An earlier attempt may have removed it before the connection dropped.
                    Err(SftpError::SftpError(SftpErrorKind::NoSuchFile, _)) if retried => Ok(()),
                    Err(e) => Err(classify(name, e)),
                }
            }
        })
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        validate_name(name)?;
        let path = self.full(name);
        self.run(name, true, |c, _| {
            let path = path.clone();
            async move {
                let md = c
                    .sftp
                    .fs()
                    .metadata(&path)
                    .await
                    .map_err(|e| classify(name, e))?;
                if md.file_type().is_some_and(|t| t.is_dir()) {
                    return Err(Fail::Store(StoreError::NotFound {
                        name: name.to_string(),
                    }));
                }
                Ok(ObjectInfo {
                    name: name.to_string(),
                    size: md.len().unwrap_or(0),
                })
            }
        })
    }

    fn is_remote(&self) -> bool {
        true
    }

    /// A second ssh connection to the same server (opened at its first use): a lock's refresh
    /// is one small request, and on one connection it would wait behind every pack request
    /// queued before it (up to 4 MiB for each pack in flight).
    fn has_lane(&self) -> bool {
        true
    }
    fn lane(&self) -> Option<Arc<dyn Store>> {
        let lane = SftpStore::new(self.target.clone(), self.rsh.clone()).ok()?;
        Some(Arc::new(lane))
    }
}

/// The ssh command line: `CAIRN_RSH` (or `ssh`), `-p PORT`, `-l USER`, `-s`, `--`, the host and
/// the subsystem's name.
pub fn ssh_argv(rsh: &[String], t: &SftpTarget) -> Vec<String> {
    crate::store::ssh::ssh_argv(rsh, t, &["-s"], &["sftp"])
}

impl SftpStore {
    /// The size of the open `file`, as the server reports it.
    async fn size_of(file: &mut File, name: &str) -> Result<u64, Fail> {
        let md = file.metadata().await.map_err(|e| classify(name, e))?;
        Ok(md.len().unwrap_or(0))
    }

    /// `get`, refusing objects larger than `max` once their size is known (same request).
    fn read(&self, name: &str, range: Option<ByteRange>, max: u64) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let path = self.full(name);
        self.run(name, true, |c, _| {
            let path = path.clone();
            async move {
                let mut f = c.sftp.open(&path).await.map_err(|e| classify(name, e))?;
                // A range is read at once; the size is asked for only to refuse a whole object
                // that is too large, to say how short one is, or to place an empty range. The
                // handle's close is sent when it is dropped, answered in the background.
                let short = |wanted: u64, got: u64| {
                    Fail::Store(StoreError::Short {
                        name: name.to_string(),
                        wanted,
                        got,
                    })
                };
                let (offset, len, head, reserve) = match range {
                    Some(r) => {
                        let Some(end) = r.offset.checked_add(r.len) else {
                            return Err(short(u64::MAX, Self::size_of(&mut f, name).await?));
                        };
                        if r.len == 0 {
                            let size = Self::size_of(&mut f, name).await?;
                            return if end > size {
                                Err(short(end, size))
                            } else {
                                Ok(Vec::new())
                            };
                        }
                        (r.offset, r.len, Vec::new(), RESERVE_UNBOUNDED)
                    }
                    None => {
                        // The size and the first piece at once: a small object (a lock, the
                        // config, a key) is read in one round trip.
                        let mut first = f.clone();
                        let (size, head) = futures::join!(
                            Self::size_of(&mut f, name),
                            first.read(PIECE as u32, BytesMut::with_capacity(PIECE))
                        );
                        drop(first);
                        let size = size?;
                        super::check_size(name, size, max).map_err(Fail::Store)?;
                        let head = head.map_err(|e| classify(name, e))?.unwrap_or_default();
                        let size_len = usize::try_from(size).unwrap_or(usize::MAX);
                        let mut buf = Vec::with_capacity(size_len.min(PIECE));
                        buf.extend_from_slice(&head[..head.len().min(size_len)]);
                        // Within the caller's bound, the whole size at once; else as it comes.
                        let reserve = if max == u64::MAX {
                            RESERVE_UNBOUNDED
                        } else {
                            size_len
                        };
                        (buf.len() as u64, size - buf.len() as u64, buf, reserve)
                    }
                };
                let len = usize::try_from(len).map_err(|_| io_fail(name, "object too large"))?;
                match read_pipelined(&f, offset, len, head, reserve).await {
                    Ok(b) => Ok(b),
                    Err(SftpError::IOError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        Err(short(
                            offset + len as u64,
                            Self::size_of(&mut f, name).await?,
                        ))
                    }
                    Err(e) => Err(classify(name, e)),
                }
            }
        })
    }
}
