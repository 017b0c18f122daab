//! S3 backend (AWS S3, Garage, MinIO, Ceph, rclone…), through the `object_store` crate.
//!
//! `s3://[endpoint-host[:port]]/bucket/prefix`: credentials and region from the usual
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` (default `us-east-1`); the
//! endpoint from the URL, else `AWS_ENDPOINT_URL`, else AWS. Plain HTTP is used for loopback
//! endpoints, or anywhere with `CAIRN_S3_ALLOW_HTTP=yes`. Requests are path-style.
//!
//! An S3 PUT is atomic: a reader sees the whole object or nothing. Packs (≥ 8 MiB) go up as
//! multipart uploads. Reads are ranged GETs; listings paginate. Transient errors (5xx,
//! timeouts, dropped connections) are retried with exponential backoff by `object_store`, six
//! times (`CAIRN_S3_RETRIES`); client errors (denied, no space, not found) are not.
//!
//! Servers that answer a ranged GET with the whole object and status 200 (rclone's S3
//! server does) are detected on the first such answer; ranges are then cut from whole-object
//! reads, and the last four objects read are kept, so reading a pack's ranges in order fetches
//! it once. Threads that want an object another thread is reading wait for that read and
//! share its bytes, or its error.
//!
//! There is no create-only write: servers do not all honour `If-None-Match: *` (rclone's S3
//! server and Garage silently overwrite), and nothing in cairn needs one: see the lock
//! protocol in `src/lock.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart,
};

use crate::store::target::S3Target;

use super::{
    validate_name, validate_prefix, ByteRange, ObjectInfo, Release, Store, StoreError, StoreResult,
};

/// Objects at least this large are uploaded in parts of this size.
const PART: usize = 8 << 20;

/// How long one request may take in all. The client's own 30 s failed backups over slow
/// links: a part of 8 MiB, sharing a 20 Mbit/s uplink with the other packs in flight, took
/// longer, was sent again and again, and the backup failed after 120 s of retries. At
/// 1 Mbit/s with eight parts on the way, a part takes about 9 minutes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30 * 60);

pub struct S3Store {
    rt: tokio::runtime::Runtime,
    s3: Arc<AmazonS3>,
    prefix: String,
    /// The server ignores ranges (answers 200 with the whole object).
    no_ranges: AtomicBool,
    /// Whole objects recently read for a server that ignores ranges, and the ones being read.
    recent: Mutex<Recent>,
    /// Signalled when a whole object being read has arrived (or failed).
    arrived: std::sync::Condvar,
}

/// Whole objects kept for servers that ignore ranges…
#[derive(Default)]
struct Recent {
    kept: VecDeque<(String, Arc<bytes::Bytes>)>,
    /// …the reads under way: a thread that wants one of those objects waits for that read
    /// rather than reading it again (extract's workers read a pack's ranges at once: each
    /// read the whole pack, and twice the bytes crossed the link)…
    reading: Vec<Flight>,
    /// …and how reads ended, by read number, until each of their waiters has taken it: a
    /// failed read fails its waiters too, instead of each trying it again in turn (against a
    /// dead server, the time to an error grew with the number of waiting threads).
    ended: Vec<(u64, Ended, usize)>,
    /// The number of the next read.
    next: u64,
}

/// A whole-object read under way, and how many threads wait for it.
struct Flight {
    name: String,
    number: u64,
    waiters: usize,
}

/// How a whole-object read ended, for its waiters.
#[derive(Clone)]
enum Ended {
    Read(Arc<bytes::Bytes>),
    Failed(Failure),
}

/// A failed read's error, in a form each waiter can have a copy of.
#[derive(Clone)]
enum Failure {
    NotFound,
    NoSpace,
    Other(std::io::ErrorKind, String),
}

impl Failure {
    fn of(e: &StoreError) -> Self {
        match e {
            StoreError::NotFound { .. } => Failure::NotFound,
            StoreError::NoSpace { .. } => Failure::NoSpace,
            StoreError::Io { source, .. } => Failure::Other(source.kind(), source.to_string()),
            other => Failure::Other(std::io::ErrorKind::Other, other.to_string()),
        }
    }

    fn error(&self, name: &str) -> StoreError {
        let name = name.to_string();
        match self {
            Failure::NotFound => StoreError::NotFound { name },
            Failure::NoSpace => StoreError::NoSpace { name },
            Failure::Other(kind, msg) => StoreError::Io {
                name,
                source: std::io::Error::new(*kind, msg.clone()),
            },
        }
    }
}

/// Whole objects kept for servers that ignore ranges: as many as extract's workers read at
/// once (a pack of 16 MiB each).
const RECENT: usize = 4;

/// A whole-object read under way. However it ends (with bytes, an error, or a panic in the
/// read), dropping it takes its name off `reading`, records the end for its waiters and
/// wakes them: no waiter is left waiting for a read that is over.
struct InFlight<'a> {
    store: &'a S3Store,
    name: &'a str,
    number: u64,
    ended: Option<Ended>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let ended = self.ended.take().unwrap_or_else(|| {
            Ended::Failed(Failure::Other(
                std::io::ErrorKind::Other,
                "s3: the read was abandoned".to_string(),
            ))
        });
        let mut recent = self.store.recent.lock().unwrap_or_else(|p| p.into_inner());
        let mut waiters = 0;
        recent.reading.retain(|f| {
            if f.number == self.number {
                waiters = f.waiters;
            }
            f.number != self.number
        });
        if let Ended::Read(bytes) = &ended {
            recent
                .kept
                .push_back((self.name.to_string(), Arc::clone(bytes)));
            while recent.kept.len() > RECENT {
                recent.kept.pop_front();
            }
        }
        if waiters > 0 {
            recent.ended.push((self.number, ended, waiters));
        }
        drop(recent);
        self.store.arrived.notify_all();
    }
}

fn is_loopback(host: &str) -> bool {
    // A bare address ("::1", "127.0.0.1"), or a host with a port ("[::1]:9000", "localhost:9000").
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let h = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let h = h.trim_start_matches('[').trim_end_matches(']');
    match h.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => h == "localhost",
    }
}

fn map_err(name: &str, e: object_store::Error) -> StoreError {
    match e {
        object_store::Error::NotFound { .. } => StoreError::NotFound {
            name: name.to_string(),
        },
        other => {
            let msg = other.to_string();
            // Matched as the status line, never a bare "507": object names are hex and the
            // message carries them.
            if msg.contains("InsufficientStorage")
                || msg.contains("507 Insufficient Storage")
                || msg.contains("QuotaExceeded")
            {
                StoreError::NoSpace {
                    name: name.to_string(),
                }
            } else {
                StoreError::Io {
                    name: name.to_string(),
                    source: std::io::Error::other(format!("s3: {msg}")),
                }
            }
        }
    }
}

impl S3Store {
    /// `retries` on transient failures; `allow_http` permits plain HTTP to an endpoint that
    /// is not on this machine.
    pub fn new(target: &S3Target, retries: usize, allow_http: bool) -> Result<Self, String> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&target.bucket)
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(200),
                    max_backoff: Duration::from_secs(10),
                    base: 2.0,
                },
                max_retries: retries,
                retry_timeout: Duration::from_secs(120),
            })
            .with_client_options(ClientOptions::new().with_timeout(REQUEST_TIMEOUT));
        if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
            b = b.with_region("us-east-1");
        }
        let endpoint = target
            .endpoint
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
        if let Some(ep) = endpoint {
            let (url, host) = if let Some(rest) = ep.strip_prefix("http://") {
                (ep.clone(), rest.to_string())
            } else if let Some(rest) = ep.strip_prefix("https://") {
                (ep.clone(), rest.to_string())
            } else if is_loopback(&ep) || allow_http {
                (format!("http://{ep}"), ep.clone())
            } else {
                (format!("https://{ep}"), ep.clone())
            };
            if url.starts_with("http://") && !(is_loopback(&host) || allow_http) {
                return Err(format!(
                    "refusing plain HTTP to {host}: it is not a loopback address (set CAIRN_S3_ALLOW_HTTP=yes to allow it)"
                ));
            }
            b = b.with_endpoint(url).with_allow_http(true);
        }
        let s3 = b.build().map_err(|e| format!("S3 configuration: {e}"))?;
        Self::with_client(s3, target.prefix.trim_matches('/'))
    }

    fn with_client(s3: AmazonS3, prefix: &str) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            rt,
            s3: Arc::new(s3),
            prefix: prefix.to_string(),
            no_ranges: AtomicBool::new(false),
            recent: Mutex::new(Recent::default()),
            arrived: std::sync::Condvar::new(),
        })
    }

    fn key(&self, name: &str) -> ObjPath {
        if self.prefix.is_empty() {
            ObjPath::from(name)
        } else {
            ObjPath::from(format!("{}/{name}", self.prefix))
        }
    }

    /// The repository-relative name of a key, if it is below the prefix.
    fn name_of(&self, key: &ObjPath) -> Option<String> {
        let k = key.as_ref();
        if self.prefix.is_empty() {
            Some(k.to_string())
        } else {
            k.strip_prefix(&self.prefix)
                .and_then(|r| r.strip_prefix('/'))
                .map(String::from)
        }
    }

    /// A whole object, from the recent ones, another thread's read of it, or the server.
    fn whole(&self, name: &str) -> StoreResult<Arc<bytes::Bytes>> {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, b)) = recent.kept.iter().find(|(n, _)| n == name) {
            return Ok(Arc::clone(b));
        }
        if let Some(flight) = recent.reading.iter_mut().find(|f| f.name == name) {
            flight.waiters += 1;
            let number = flight.number;
            loop {
                recent = self.arrived.wait(recent).unwrap_or_else(|p| p.into_inner());
                if let Some(i) = recent.ended.iter().position(|(n, _, _)| *n == number) {
                    let ended = recent.ended[i].1.clone();
                    recent.ended[i].2 -= 1;
                    if recent.ended[i].2 == 0 {
                        recent.ended.swap_remove(i);
                    }
                    return match ended {
                        Ended::Read(b) => Ok(b),
                        Ended::Failed(f) => Err(f.error(name)),
                    };
                }
            }
        }
        let number = recent.next;
        recent.next += 1;
        recent.reading.push(Flight {
            name: name.to_string(),
            number,
            waiters: 0,
        });
        drop(recent);
        let mut flight = InFlight {
            store: self,
            name,
            number,
            ended: None,
        };
        // Only packs are read by ranges: a server that answers with more than the largest
        // pack is refused before the body is read, not held in memory.
        let read = self
            .fetch_bounded(name, super::MAX_RANGED_OBJECT)
            .map(Arc::new);
        flight.ended = Some(match &read {
            Ok(b) => Ended::Read(Arc::clone(b)),
            Err(e) => Ended::Failed(Failure::of(e)),
        });
        read
    }

    /// The whole object, refused before its body is read when the response's headers say it
    /// is larger than `max` (one request).
    fn fetch_bounded(&self, name: &str, max: u64) -> StoreResult<bytes::Bytes> {
        let key = self.key(name);
        let got = self
            .rt
            .block_on(async {
                let r = self.s3.get(&key).await?;
                #[allow(clippy::useless_conversion)]
                let size = u64::try_from(r.meta.size).unwrap_or(u64::MAX);
                if size > max {
                    return Ok(Err(size));
                }
                r.bytes().await.map(Ok)
            })
            .map_err(|e| map_err(name, e))?;
        match got {
            Ok(b) => {
                super::check_size(name, b.len() as u64, max)?;
                Ok(b)
            }
            Err(size) => Err(StoreError::TooLarge {
                name: name.to_string(),
                size,
                max,
            }),
        }
    }

    /// Drops a kept whole-object copy of `name`: the object is being replaced or removed.
    fn forget(&self, name: &str) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.kept.retain(|(n, _)| n != name);
    }

    fn head_size(&self, name: &str) -> StoreResult<u64> {
        let key = self.key(name);
        self.rt
            .block_on(self.s3.head(&key))
            .map(|m| m.size)
            .map_err(|e| map_err(name, e))
    }
}

impl Store for S3Store {
    /// The upload reads the bytes until it ends (a far store has no early point at which it
    /// is done with them): they come back when the put does.
    fn put_releasing(&self, name: &str, data: Vec<u8>, release: Release<'_>) -> StoreResult<()> {
        let done = self.put(name, &data);
        release(data);
        done
    }

    fn put(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        self.forget(name);
        let key = self.key(name);
        self.rt
            .block_on(async {
                if data.len() < PART {
                    self.s3
                        .put(&key, PutPayload::from(data.to_vec()))
                        .await
                        .map(|_| ())
                } else {
                    let upload = self.s3.put_multipart(&key).await?;
                    let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
                    w.write(data);
                    w.finish().await.map(|_| ())
                }
            })
            .map_err(|e| map_err(name, e))
    }

    /// A `PUT` with `If-None-Match: *`: the server refuses it (412) when the key exists. Some
    /// servers ignore the header and overwrite (see `docs/design.md`).
    fn create_new(&self, name: &str, data: &[u8]) -> StoreResult<()> {
        validate_name(name)?;
        self.forget(name);
        let key = self.key(name);
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        self.rt
            .block_on(
                self.s3
                    .put_opts(&key, PutPayload::from(data.to_vec()), opts),
            )
            .map(|_| ())
            .map_err(|e| match e {
                object_store::Error::AlreadyExists { .. } => StoreError::Exists {
                    name: name.to_string(),
                },
                e => map_err(name, e),
            })
    }

    fn get_bounded(&self, name: &str, max: u64) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        Ok(self.fetch_bounded(name, max)?.to_vec())
    }

    fn get(&self, name: &str, range: Option<ByteRange>) -> StoreResult<Vec<u8>> {
        validate_name(name)?;
        let key = self.key(name);
        match range {
            None => self
                .rt
                .block_on(async { self.s3.get(&key).await?.bytes().await })
                .map(|b| b.to_vec())
                .map_err(|e| map_err(name, e)),
            Some(r) if self.no_ranges.load(Ordering::Relaxed) => {
                let end = r.offset.saturating_add(r.len);
                let whole = self.whole(name)?;
                if end > whole.len() as u64 {
                    return Err(StoreError::Short {
                        name: name.to_string(),
                        wanted: end,
                        got: whole.len() as u64,
                    });
                }
                Ok(whole[r.offset as usize..end as usize].to_vec())
            }
            Some(r) => {
                let end = r.offset.saturating_add(r.len);
                if r.len == 0 {
                    let size = self.head_size(name)?;
                    if r.offset > size {
                        return Err(StoreError::Short {
                            name: name.to_string(),
                            wanted: end,
                            got: size,
                        });
                    }
                    return Ok(Vec::new());
                }
                match self.rt.block_on(self.s3.get_range(&key, r.offset..end)) {
                    Ok(b) if b.len() as u64 == r.len => Ok(b.to_vec()),
                    Ok(b) => Err(StoreError::Short {
                        name: name.to_string(),
                        wanted: end,
                        got: r.offset + b.len() as u64,
                    }),
                    Err(e) if e.to_string().contains("non-partial response") => {
                        self.no_ranges.store(true, Ordering::Relaxed);
                        self.get(name, range)
                    }
                    Err(e) => {
                        // A range past the end is an error from the server: say "short".
                        let size = self.head_size(name)?;
                        if end > size {
                            Err(StoreError::Short {
                                name: name.to_string(),
                                wanted: end,
                                got: size,
                            })
                        } else {
                            Err(map_err(name, e))
                        }
                    }
                }
            }
        }
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectInfo>> {
        validate_prefix(prefix)?;
        let dir = if prefix.is_empty() {
            if self.prefix.is_empty() {
                None
            } else {
                Some(ObjPath::from(self.prefix.clone()))
            }
        } else {
            Some(self.key(prefix))
        };
        let metas: Vec<_> = self.rt.block_on(self.s3.list(dir.as_ref()).collect());
        let mut out = Vec::new();
        for m in metas {
            let m = m.map_err(|e| map_err(prefix, e))?;
            let Some(name) = self.name_of(&m.location) else {
                continue;
            };
            if validate_name(&name).is_ok() {
                out.push(ObjectInfo { name, size: m.size });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete(&self, name: &str) -> StoreResult<()> {
        validate_name(name)?;
        // S3 deletes succeed on missing keys; the contract says NotFound.
        self.head_size(name)?;
        self.forget(name);
        let key = self.key(name);
        self.rt
            .block_on(self.s3.delete(&key))
            .map_err(|e| map_err(name, e))
    }

    fn info(&self, name: &str) -> StoreResult<ObjectInfo> {
        validate_name(name)?;
        Ok(ObjectInfo {
            name: name.to_string(),
            size: self.head_size(name)?,
        })
    }

    fn is_remote(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{is_loopback, map_err, S3Store};
    use crate::store::{ByteRange, Store, StoreError};
    use object_store::aws::AmazonS3Builder;
    use object_store::RetryConfig;
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// A local server that answers every request, after `delay`, with `answer`; and the
    /// number of GETs it has had.
    fn server(answer: &'static [u8], delay: Duration) -> (u16, Arc<AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let gets = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&gets);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let counted = Arc::clone(&counted);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line.starts_with("GET ") {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                        while line != "\r\n" {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                        }
                        std::thread::sleep(delay);
                        let _ = conn.write_all(answer);
                    }
                });
            }
        });
        (port, gets)
    }

    /// A store on the local server at `port`, which ignores ranges, without retries.
    fn store_at(port: u16) -> Arc<S3Store> {
        let s3 = AmazonS3Builder::new()
            .with_bucket_name("b")
            .with_region("us-east-1")
            .with_access_key_id("k")
            .with_secret_access_key("s")
            .with_endpoint(format!("http://127.0.0.1:{port}"))
            .with_allow_http(true)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .unwrap();
        let store = Arc::new(S3Store::with_client(s3, "").unwrap());
        store.no_ranges.store(true, Ordering::Relaxed);
        store
    }

    /// A host that answers a ranged read with a whole "object" larger than any pack is
    /// refused from its headers, before the body is read (it was read into memory whole,
    /// however large the host said it was).
    #[test]
    fn a_whole_object_larger_than_any_pack_is_refused_unread() {
        let (port, _) = server(
            b"HTTP/1.1 200 OK\r\nContent-Length: 40000000000\r\n\r\n",
            Duration::ZERO,
        );
        let store = store_at(port);
        let err = store
            .get("packs/00/00aa", Some(ByteRange { offset: 0, len: 10 }))
            .unwrap_err();
        assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
    }

    /// Threads that waited on another thread's whole-object read of a pack get that read's
    /// error: they do not each send the request again in turn (against a server that is
    /// down, the time to an error grew with the number of waiting threads).
    #[test]
    fn waiters_on_a_failed_whole_read_share_its_error() {
        // Slow enough for every thread to be waiting when it fails, even on a loaded
        // machine: whichever thread comes first reads, the others have 1.5 s to join it.
        let (port, gets) = server(
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            Duration::from_millis(1500),
        );
        let store = store_at(port);
        let readers: Vec<_> = (0..4u64)
            .map(|i| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(10 * i));
                    store.get(
                        "packs/00/00aa",
                        Some(ByteRange {
                            offset: i * 10,
                            len: 10,
                        }),
                    )
                })
            })
            .collect();
        for r in readers {
            let err = r.join().unwrap().unwrap_err();
            assert!(err.to_string().contains("packs/00/00aa"), "{err}");
        }
        assert_eq!(
            gets.load(Ordering::SeqCst),
            1,
            "one request for four readers"
        );
    }

    fn generic(msg: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::other(msg.to_string())),
        }
    }

    #[test]
    fn no_space_is_recognised_by_status_not_by_digits_in_names() {
        let full = generic("Server returned non-2xx status code: 507 Insufficient Storage");
        assert!(matches!(
            map_err("packs/ab/x", full),
            StoreError::NoSpace { .. }
        ));
        // A refusal that names an object whose hex id contains "507" is not a full disk.
        let denied = generic("Error performing PUT http://s3/b/packs/50/5071ab: 403 Forbidden");
        assert!(matches!(
            map_err("packs/50/5071ab", denied),
            StoreError::Io { .. }
        ));
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "127.0.0.1",
            "127.0.0.1:9000",
            "localhost:9000",
            "[::1]:9000",
            "::1",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["s3.amazonaws.com", "10.0.0.1:9000", "example.org"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
