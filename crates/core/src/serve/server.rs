//! One connection of `cairn serve`: the hello, then requests read one at a time and carried
//! out by a few workers, each reply written whole as soon as it is ready.
//!
//! What a client can make the server hold is bounded: a frame is refused past
//! [`MAX_FRAME`] before it is read; the bytes of requests being carried out, and those of
//! replies being read or sent, are each held within [`BUDGET`] (or one larger than that
//! alone, as the largest pack may be): the reader waits for room before it reads a frame's
//! bytes, a worker before it reads an object for a reply, so a client that stops reading its
//! replies stops the server from reading more.

use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::serve::policy::{Guarded, Rules};
use crate::serve::root::{self, Restrictions};
use crate::store::ssh::frame::{
    read_frame, read_frame_admitting, write_frame, Answer, Op, Reply, Request, MAX_FRAME, PROTOCOL,
};
use crate::store::StoreError;
use crate::util::parallel::Budget;

/// Requests carried out at once (a client keeps a few packs in flight, and reads several
/// objects at a time).
pub const WORKERS: usize = 4;
/// Bytes of requests, and of replies, a connection holds at once (each beyond one larger than
/// this).
pub const BUDGET: usize = 256 << 20;
// The largest pack fits in a frame, with room for the request around it (checked here, above
// both the store layer that defines frames and the pack layer).
const _: () = assert!(crate::pack::format::MAX_PACK_LEN + (1 << 20) <= MAX_FRAME);

/// The hello is small.
const HELLO_MAX: u64 = 64 << 10;

/// How the server was started.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub restrictions: Restrictions,
    pub rules: Rules,
}

/// Serves one connection on `input` and `output` until the client closes it. An error ends
/// the connection (a refused hello, a malformed or oversized frame, a lost peer).
pub fn serve(opts: &Options, input: impl Read, output: impl Write + Send) -> Result<()> {
    let mut input = BufReader::with_capacity(1 << 20, input);
    let out = Mutex::new(BufWriter::with_capacity(1 << 20, output));
    let Some(guarded) = hello(opts, &mut input, &out)? else {
        return Ok(());
    };
    // Two budgets, so that a worker waiting for room for a reply never waits on the reader,
    // which may be waiting for a free worker.
    let (requests, replies) = (Budget::new(BUDGET), Budget::new(BUDGET));
    let (tx, rx) = mpsc::sync_channel::<(Request, usize)>(0);
    let rx = Mutex::new(rx);
    let lost: Mutex<Option<Error>> = Mutex::new(None);
    let gone = AtomicBool::new(false);
    #[cfg(feature = "testing")]
    let die_at = testing::DieAt::from_env();
    let read_result = std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok((req, len)) = next else { break };
                if gone.load(Ordering::SeqCst) {
                    // The client is gone: what the reader still hands on is dropped, so that
                    // it never waits for a worker (the process would outlive its client).
                    continue;
                }
                // A reply's bytes are admitted before the object is read; a request's go
                // once it is carried out.
                let reply = guarded.reply_size(&req.op);
                if let Some(n) = reply {
                    requests.release(len);
                    replies.acquire(n);
                }
                // A bug met by one request is that request's error, not a worker lost.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    guarded.handle(req.op)
                }))
                .unwrap_or_else(|_| {
                    Err(StoreError::Io {
                        name: String::new(),
                        source: std::io::Error::other("the server failed on this request"),
                    })
                });
                if reply.is_none() {
                    requests.release(len);
                }
                #[cfg(feature = "testing")]
                if let Some(d) = &die_at {
                    d.after_request();
                }
                let sent = send(&out, &Reply { id: req.id, result });
                if let Some(n) = reply {
                    replies.release(n);
                }
                if let Err(e) = sent {
                    let mut slot = lost.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(Error::io("(connection)", e));
                    gone.store(true, Ordering::SeqCst);
                    requests.close();
                    replies.close();
                }
            });
        }
        let mut read = || -> Result<()> {
            let mut admit = |len: u64| {
                requests.acquire(len as usize);
            };
            while let Some(frame) = read_frame_admitting(&mut input, MAX_FRAME, &mut admit)? {
                let len = frame.len();
                let req = Request::decode(&frame)?;
                drop(frame);
                if gone.load(Ordering::SeqCst) || tx.send((req, len)).is_err() {
                    break;
                }
            }
            Ok(())
        };
        let r = read();
        drop(tx);
        r
    });
    read_result?;
    match lost.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Reads the hello and answers it: the repository opened behind its rules, or a refusal
/// (sent to the client, and returned).
fn hello(
    opts: &Options,
    input: &mut impl Read,
    out: &Mutex<impl Write>,
) -> Result<Option<Guarded>> {
    let not_a_client = |e: Error| {
        Error::invalid(format!(
            "this is not a cairn client ({e}): cairn serve is started by cairn itself through ssh, for an ssh:// repository"
        ))
    };
    let Some(frame) = read_frame(input, HELLO_MAX).map_err(not_a_client)? else {
        return Ok(None);
    };
    let req = Request::decode(&frame).map_err(not_a_client)?;
    let opened = match req.op {
        Op::Hello { protocol, .. } if protocol != PROTOCOL => Err(Error::invalid(format!(
            "the client speaks {protocol:?}; this server speaks {PROTOCOL:?} (are both the same version of cairn?)"
        ))),
        Op::Hello { repo, .. } => opts
            .restrictions
            .allow(&repo)
            .and_then(|root| root::servable(&root).map(|()| root)),
        _ => Err(Error::invalid("the connection did not begin with a hello")),
    };
    let result = match &opened {
        Ok(_) => Ok(Answer::Welcome {
            append_only: opts.rules.append_only,
            quota: opts.rules.quota.unwrap_or(0),
        }),
        Err(e) => Err(StoreError::Refused {
            name: String::new(),
            why: e.to_string(),
        }),
    };
    send(out, &Reply { id: req.id, result }).map_err(|e| Error::io("(connection)", e))?;
    Ok(Some(Guarded::new(opened?, opts.rules)))
}

#[cfg(feature = "testing")]
mod testing {
    use std::io::Write;

    /// `CAIRN_TEST_SERVE_DIE_AT=N:FILE`: the server processes of a test count the requests
    /// they carried out in FILE (a byte each), and the one that carries out the Nth exits
    /// before its reply leaves: the connection lost at the worst moment for the client,
    /// once, whichever connection it falls on.
    pub struct DieAt {
        n: u64,
        count: std::path::PathBuf,
    }

    impl DieAt {
        pub fn from_env() -> Option<Self> {
            let v = std::env::var("CAIRN_TEST_SERVE_DIE_AT").ok()?;
            let (n, count) = v.split_once(':')?;
            Some(Self {
                n: n.parse().ok()?,
                count: count.into(),
            })
        }

        pub fn after_request(&self) {
            let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.count)
            else {
                return;
            };
            let _ = f.write_all(b".");
            if f.metadata().is_ok_and(|m| m.len() == self.n) {
                std::process::exit(3);
            }
        }
    }
}

fn send(out: &Mutex<impl Write>, reply: &Reply) -> std::io::Result<()> {
    let body = reply.encode();
    let mut w = out.lock().unwrap_or_else(|p| p.into_inner());
    write_frame(&mut *w, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(reqs: &[Request]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for r in reqs {
            write_frame(&mut bytes, &r.encode()).unwrap();
        }
        bytes
    }

    fn replies(mut bytes: &[u8]) -> Vec<Reply> {
        let mut out = Vec::new();
        while let Some(f) = read_frame(&mut bytes, MAX_FRAME).unwrap() {
            out.push(Reply::decode(&f).unwrap());
        }
        out.sort_by_key(|r| r.id);
        out
    }

    fn hello_for(repo: &std::path::Path) -> Request {
        Request {
            id: 0,
            op: Op::Hello {
                protocol: PROTOCOL.into(),
                repo: repo.display().to_string(),
            },
        }
    }

    /// A client that goes away with more requests on their way than there are workers: each
    /// worker failed to send and quit, the reader waited for a worker for ever, and the server
    /// process outlived its client holding what it had read.
    #[test]
    fn a_client_gone_with_many_requests_in_flight_ends_the_server() {
        struct Gone(usize);
        impl Write for Gone {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                self.0 -= 1;
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("r");
        std::fs::create_dir(&repo).unwrap();
        std::fs::write(repo.join("config"), b"c").unwrap();
        let mut reqs = vec![hello_for(&repo)];
        for id in 1..=16 {
            reqs.push(Request {
                id,
                op: Op::Get {
                    name: "config".into(),
                    range: None,
                },
            });
        }
        let input = frames(&reqs);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = serve(&Options::default(), input.as_slice(), Gone(2));
            let _ = tx.send(r.is_err());
        });
        let failed = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the server ends when its client is gone");
        assert!(failed, "a lost client is an error");
    }

    #[test]
    fn a_session_answers_each_request_by_its_id() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("r");
        // (Made already: the workers may carry out the put before the init.)
        std::fs::create_dir(&repo).unwrap();
        let input = frames(&[
            hello_for(&repo),
            Request {
                id: 1,
                op: Op::Init,
            },
            Request {
                id: 2,
                op: Op::Put {
                    name: "config".into(),
                    data: b"c".to_vec(),
                },
            },
        ]);
        let mut out = Vec::new();
        serve(&Options::default(), input.as_slice(), &mut out).unwrap();
        let r = replies(&out);
        assert_eq!(r.len(), 3);
        assert!(matches!(r[0].result, Ok(Answer::Welcome { .. })));
        assert!(matches!(r[2].result, Ok(Answer::Done)));
        assert_eq!(std::fs::read(repo.join("config")).unwrap(), b"c");
    }

    #[test]
    fn a_repository_outside_the_restriction_is_refused_before_anything_is_read() {
        let d = tempfile::tempdir().unwrap();
        let allowed = d.path().join("allowed");
        std::fs::create_dir(&allowed).unwrap();
        let opts = Options {
            restrictions: Restrictions::new(&[allowed], &[]).unwrap(),
            rules: Rules::default(),
        };
        let input = frames(&[
            hello_for(&d.path().join("elsewhere")),
            Request {
                id: 1,
                op: Op::Init,
            },
        ]);
        let mut out = Vec::new();
        let e = serve(&opts, input.as_slice(), &mut out).unwrap_err();
        assert!(e.to_string().contains("restricted to"), "{e}");
        let r = replies(&out);
        assert_eq!(r.len(), 1);
        assert!(matches!(r[0].result, Err(StoreError::Refused { .. })));
        assert!(!d.path().join("elsewhere").exists());
    }

    #[test]
    fn an_oversized_frame_ends_the_connection_unread() {
        let d = tempfile::tempdir().unwrap();
        let mut input = frames(&[hello_for(&d.path().join("r"))]);
        input.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut out = Vec::new();
        let e = serve(&Options::default(), input.as_slice(), &mut out).unwrap_err();
        assert!(e.to_string().contains("allowed"), "{e}");
    }
}
