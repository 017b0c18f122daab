//! The client of `cairn serve`: `ssh://[user@]host[:port]/path` repositories. cairn runs
//! `ssh [-p PORT] [-l USER] -- HOST cairn serve` (the ssh command from `CAIRN_RSH`, the remote
//! program from `CAIRN_REMOTE_PATH`; a forced command in the server's `authorized_keys`
//! replaces whatever is asked) and speaks [`crate::store::ssh::frame`] over its pipes: the hello
//! names the repository, then each store operation is one request. Requests carry ids, so
//! every thread of the client keeps its own in flight on the one connection.
//!
//! A lost connection is re-established and the operation tried again, up to three times, as
//! for SFTP; what the server answers (a refusal, a missing object) is final. A hostile server
//! can answer anything, as any store can, within the frame bound: the client's bounded,
//! authenticated reads hold here as everywhere.

pub mod frame;

use std::collections::HashMap;
use std::io::{BufReader, BufWriter};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::store::retry::{with_retries, Fail};
use crate::store::ssh::frame::{
    read_frame, write_frame, Answer, Op, Reply, Request, MAX_FRAME, PROTOCOL,
};
use crate::store::target::SftpTarget;

use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

type Waiter = mpsc::Sender<Result<Reply, String>>;

/// Replies not yet received, by request id; once the connection is lost, why.
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Waiter>,
    lost: Option<String>,
}

struct Conn {
    stdin: Mutex<BufWriter<ChildStdin>>,
    pending: Arc<Mutex<Pending>>,
    next: AtomicU64,
    child: Mutex<Child>,
    append_only: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Conn {
    fn open(rsh: &[String], remote: &[String], t: &SftpTarget) -> Result<Self, Fail> {
        let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
        let argv = ssh_argv(rsh, t, &[], &remote);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        // ssh and whatever it runs have no business with a secret.
        for k in crate::util::secrets::present() {
            cmd.env_remove(k);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .map_err(|e| Fail::Connection(format!("cannot run {}: {e}", argv[0])))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(Fail::Connection("ssh started without pipes".into()));
        };
        let pending = Arc::new(Mutex::new(Pending::default()));
        let reader_pending = Arc::clone(&pending);
        std::thread::Builder::new()
            .name("cairn-ssh-replies".into())
            .spawn(move || read_replies(BufReader::with_capacity(1 << 20, stdout), &reader_pending))
            .map_err(|e| Fail::Connection(format!("cannot start a thread: {e}")))?;
        let mut conn = Conn {
            stdin: Mutex::new(BufWriter::with_capacity(1 << 20, stdin)),
            pending,
            next: AtomicU64::new(0),
            child: Mutex::new(child),
            append_only: false,
        };
        let hello = Op::Hello {
            protocol: PROTOCOL.into(),
            repo: t.path.clone(),
        };
        match conn.call(hello)? {
            Ok(Answer::Welcome { append_only, .. }) => conn.append_only = append_only,
            Ok(other) => return Err(Fail::Store(unexpected("", &other))),
            Err(e) => return Err(Fail::Store(e)),
        }
        Ok(conn)
    }

    /// Sends `op` and waits for its reply.
    fn call(&self, op: Op) -> Result<StoreResult<Answer>, Fail> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        {
            let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(why) = &p.lost {
                return Err(Fail::Connection(why.clone()));
            }
            p.waiting.insert(id, tx);
        }
        let body = Request { id, op }.encode();
        let written = {
            let mut w = self.stdin.lock().unwrap_or_else(|p| p.into_inner());
            write_frame(&mut *w, &body)
        };
        drop(body);
        if let Err(e) = written {
            let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            p.waiting.remove(&id);
            return Err(Fail::Connection(format!("cannot send to the server: {e}")));
        }
        match rx.recv() {
            Ok(Ok(reply)) => Ok(reply.result),
            Ok(Err(why)) => Err(Fail::Connection(why)),
            Err(_) => Err(Fail::Connection("the connection was closed".into())),
        }
    }
}

/// The reader thread: hands each reply to the request that waits for it; at the end of the
/// stream (or a malformed frame) fails every request still waiting.
fn read_replies(mut r: impl std::io::Read, pending: &Mutex<Pending>) {
    let why = loop {
        let frame = match read_frame(&mut r, MAX_FRAME) {
            Ok(Some(f)) => f,
            Ok(None) => break "the server closed the connection".to_string(),
            Err(e) => break format!("the connection failed: {e}"),
        };
        let reply = match Reply::decode(&frame) {
            Ok(r) => r,
            Err(e) => break format!("the server sent a malformed reply: {e}"),
        };
        let waiter = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiting
            .remove(&reply.id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(reply));
            }
            None => {
                break format!(
                    "the server answered request {} that was not asked",
                    reply.id
                )
            }
        }
    };
    let mut p = pending.lock().unwrap_or_else(|p| p.into_inner());
    p.lost = Some(why.clone());
    for (_, w) in p.waiting.drain() {
        let _ = w.send(Err(why.clone()));
    }
}

/// The ssh command line: `rsh [-p PORT] [-l USER] OPTIONS -- HOST REMOTE...`. The `--` ends
/// ssh's options, so that nothing after it, the host above all, is ever read as one
/// (`sftp://-oProxyCommand=…` must not reach ssh as an option).
pub fn ssh_argv(rsh: &[String], t: &SftpTarget, options: &[&str], remote: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = rsh.to_vec();
    if let Some(p) = t.port {
        argv.push("-p".into());
        argv.push(p.to_string());
    }
    if let Some(u) = &t.user {
        argv.push("-l".into());
        argv.push(u.clone());
    }
    argv.extend(options.iter().map(|o| o.to_string()));
    argv.extend(["--".into(), t.host.clone()]);
    argv.extend(remote.iter().map(|r| r.to_string()));
    argv
}

pub struct SshStore {
    target: SftpTarget,
    rsh: Vec<String>,
    /// The program and arguments asked of the server (`cairn serve`).
    remote: Vec<String>,
    conn: Mutex<Option<Arc<Conn>>>,
}

impl SshStore {
    /// Connects lazily, on first use.
    pub fn new(target: SftpTarget, rsh: Vec<String>, remote_path: &str) -> Self {
        Self {
            target,
            rsh,
            remote: vec![remote_path.to_string(), "serve".to_string()],
            conn: Mutex::new(None),
        }
    }

    fn conn(&self) -> Result<Arc<Conn>, Fail> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(Conn::open(&self.rsh, &self.remote, &self.target)?);
        *slot = Some(Arc::clone(&c));
        Ok(c)
    }

    fn forget(&self, c: &Arc<Conn>) {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, c)) {
            *slot = None;
        }
    }

    /// Runs `op` (made anew for each try); on a lost connection reconnects and tries again
    /// when `repeatable`. `op` learns whether this is a retry.
    fn run(
        &self,
        name: &str,
        repeatable: bool,
        op: &mut dyn FnMut(bool) -> Op,
    ) -> StoreResult<Answer> {
        let lost = |last: &str| {
            format!(
                "connection to the cairn server on {} lost: {last}",
                self.target.host
            )
        };
        let mut attempt = |retried: bool| {
            let c = match self.conn() {
                Err(Fail::Connection(e)) => return Err(Fail::Unconnected(e)),
                other => other?,
            };
            match c.call(op(retried)) {
                Ok(answer) => answer.map_err(Fail::Store),
                Err(Fail::Connection(e)) => {
                    self.forget(&c);
                    Err(Fail::Connection(e))
                }
                Err(other) => Err(other),
            }
        };
        with_retries(
            name,
            repeatable,
            Duration::from_millis(250),
            &lost,
            &mut attempt,
        )
    }

    fn ask(&self, name: &str, repeatable: bool, op: Op) -> StoreResult<Answer> {
        self.run(name, repeatable, &mut |_| op.clone())
    }

    /// Creates the repository's directory (for `init`): refused when it holds anything.
    pub fn create_root(&self) -> StoreResult<()> {
        expect_done("", self.ask("", true, Op::Init)?)
    }
}

fn unexpected(name: &str, answer: &Answer) -> StoreError {
    let kind = match answer {
        Answer::Welcome { .. } => "a welcome",
        Answer::Done => "a bare acknowledgement",
        Answer::Data(_) => "data",
        Answer::Listing(_) => "a listing",
        Answer::Info(_) => "an object's size",
    };
    StoreError::Io {
        name: name.to_string(),
        source: std::io::Error::other(format!(
            "the server answered with {kind}, which is not an answer to this request"
        )),
    }
}

fn expect_done(name: &str, a: Answer) -> StoreResult<()> {
    match a {
        Answer::Done => Ok(()),
        other => Err(unexpected(name, &other)),
    }
}

fn expect_data(name: &str, a: Answer) -> StoreResult<Vec<u8>> {
    match a {
        Answer::Data(d) => Ok(d),
        other => Err(unexpected(name, &other)),
    }
}

impl Store for SshStore {
    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let mut op = |_| Op::Put {
            name: name.to_string(),
            data: data.to_vec(),
        };
        expect_done(name, self.run(name, true, &mut op)?)
    }

    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let done = self.put(name, &data);
        release(data);
        done
    }

    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        let op = |_| Op::CreateNew {
            name: name.to_string(),
            data: data.to_vec(),
        };
        let mut retried = false;
        let mut op = |retry: bool| {
            retried |= retry;
            op(retry)
        };
        match self.run(name, true, &mut op) {
            Ok(a) => expect_done(name, a),
            // A try whose reply was lost may have created it: ours if it holds our bytes.
            Err(StoreError::Exists { .. })
                if retried && self.get(name, None).is_ok_and(|d| d == data) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let op = Op::Get {
            name: name.to_string(),
            range,
        };
        let data = expect_data(name, self.ask(name, true, op)?)?;
        if let Some(r) = range {
            if data.len() as u64 != r.len {
                return Err(StoreError::Short {
                    name: name.to_string(),
                    wanted: r.offset.saturating_add(r.len),
                    got: r.offset.saturating_add(data.len() as u64),
                });
            }
        }
        Ok(data)
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let op = Op::GetBounded {
            name: name.to_string(),
            max,
        };
        let data = expect_data(name, self.ask(name, true, op)?)?;
        super::check_size(name, data.len() as u64, max)?;
        Ok(data)
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        let op = Op::List {
            prefix: prefix.to_string(),
        };
        match self.ask(prefix, true, op)? {
            Answer::Listing(mut all) => {
                // What the contract promises, whatever the server sent.
                all.retain(|o| {
                    validate_name(&o.name).is_ok()
                        && (prefix.is_empty()
                            || o.name
                                .strip_prefix(prefix)
                                .is_some_and(|rest| rest.starts_with('/')))
                });
                all.sort_by(|a, b| a.name.cmp(&b.name));
                all.dedup_by(|a, b| a.name == b.name);
                Ok(all)
            }
            other => Err(unexpected(prefix, &other)),
        }
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        let mut retried = false;
        let mut op = |retry: bool| {
            retried |= retry;
            Op::Delete {
                name: name.to_string(),
            }
        };
        match self.run(name, true, &mut op) {
            Ok(a) => expect_done(name, a),
            // A try whose reply was lost may have deleted it.
            Err(StoreError::NotFound { .. }) if retried => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        validate_name(name)?;
        let op = Op::Info {
            name: name.to_string(),
        };
        match self.ask(name, true, op)? {
            Answer::Info(o) => Ok(o),
            other => Err(unexpected(name, &other)),
        }
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn has_lane(&self) -> bool {
        true
    }

    fn lane(&self) -> Option<Arc<dyn Store>> {
        Some(Arc::new(SshStore {
            target: self.target.clone(),
            rsh: self.rsh.clone(),
            remote: self.remote.clone(),
            conn: Mutex::new(None),
        }))
    }

    fn append_only(&self) -> bool {
        self.conn().is_ok_and(|c| c.append_only)
    }
}
