//! The wire protocol of `cairn serve`: the store contract as framed requests and replies.
//!
//! A frame is a u32 length (little-endian) and that many bytes; no frame is longer than
//! [`MAX_FRAME`], and a reader refuses a longer length before it reads or allocates anything
//! (bytes are taken as they arrive, so a peer that announces a gigabyte and sends nothing costs
//! nothing). A request is `id (u64) · op (u8) · fields`; its reply is `id · status (u8) ·
//! fields`. Ids let the client keep several requests in flight; the server may answer them
//! in any order. The first request of a connection is `Hello`.

use std::io::{self, Read, Write};

use crate::error::{Error, Result};
use crate::store::{ByteRange, ObjectInfo, StoreError};
use crate::util::wire::{Decoder, Encoder};

/// The protocol's name and version, sent in `Hello`.
pub const PROTOCOL: &str = "cairn-serve-1";

/// The longest frame either side sends or accepts: 1280 MiB, more than the largest pack
/// (`pack::format::MAX_PACK_LEN`, 1104 MiB; a test above the store layer checks it).
pub const MAX_FRAME: u64 = 1280 << 20;

/// What the client asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The first request: the protocol and the repository (as the client names it).
    Hello {
        protocol: String,
        repo: String,
    },
    /// Create the repository's directory for `init` (missing parents too); refused when it
    /// exists and is not empty.
    Init,
    Put {
        name: String,
        data: Vec<u8>,
    },
    CreateNew {
        name: String,
        data: Vec<u8>,
    },
    Get {
        name: String,
        range: Option<ByteRange>,
    },
    GetBounded {
        name: String,
        max: u64,
    },
    List {
        prefix: String,
    },
    Delete {
        name: String,
    },
    Info {
        name: String,
    },
}

/// What the server answers, on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// To `Hello`: whether the connection is append-only, and the quota (0: none).
    Welcome {
        append_only: bool,
        quota: u64,
    },
    Done,
    Data(Vec<u8>),
    Listing(Vec<ObjectInfo>),
    Info(ObjectInfo),
}

pub struct Request {
    pub id: u64,
    pub op: Op,
}

pub struct Reply {
    pub id: u64,
    pub result: std::result::Result<Answer, StoreError>,
}

impl Op {
    /// The object the request is about, for error messages.
    pub fn name(&self) -> &str {
        match self {
            Op::Hello { repo, .. } => repo,
            Op::Init => "",
            Op::Put { name, .. }
            | Op::CreateNew { name, .. }
            | Op::Get { name, .. }
            | Op::GetBounded { name, .. }
            | Op::Delete { name }
            | Op::Info { name } => name,
            Op::List { prefix } => prefix,
        }
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u64(self.id);
        match &self.op {
            Op::Hello { protocol, repo } => e.u8(0).str(protocol).str(repo),
            Op::Init => e.u8(1),
            Op::Put { name, data } => e.u8(2).str(name).bytes(data),
            Op::CreateNew { name, data } => e.u8(3).str(name).bytes(data),
            Op::Get { name, range } => {
                e.u8(4).str(name);
                match range {
                    Some(r) => e.u8(1).u64(r.offset).u64(r.len),
                    None => e.u8(0),
                }
            }
            Op::GetBounded { name, max } => e.u8(5).str(name).u64(*max),
            Op::List { prefix } => e.u8(6).str(prefix),
            Op::Delete { name } => e.u8(7).str(name),
            Op::Info { name } => e.u8(8).str(name),
        };
        e.finish()
    }

    pub fn decode(frame: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(frame, "request");
        let id = d.u64()?;
        let op = match d.u8()? {
            0 => Op::Hello {
                protocol: d.string()?,
                repo: d.string()?,
            },
            1 => Op::Init,
            2 => Op::Put {
                name: d.string()?,
                data: d.bytes()?.to_vec(),
            },
            3 => Op::CreateNew {
                name: d.string()?,
                data: d.bytes()?.to_vec(),
            },
            4 => {
                let name = d.string()?;
                let range = match d.u8()? {
                    0 => None,
                    1 => Some(ByteRange::new(d.u64()?, d.u64()?)),
                    _ => return Err(d.invalid("bad range flag")),
                };
                Op::Get { name, range }
            }
            5 => Op::GetBounded {
                name: d.string()?,
                max: d.u64()?,
            },
            6 => Op::List {
                prefix: d.string()?,
            },
            7 => Op::Delete { name: d.string()? },
            8 => Op::Info { name: d.string()? },
            other => return Err(d.invalid(format!("unknown operation {other}"))),
        };
        d.expect_end()?;
        Ok(Request { id, op })
    }
}

const ERR_NOT_FOUND: u8 = 0;
const ERR_NO_SPACE: u8 = 1;
const ERR_SHORT: u8 = 2;
const ERR_EXISTS: u8 = 3;
const ERR_INVALID_NAME: u8 = 4;
const ERR_TOO_LARGE: u8 = 5;
const ERR_IO: u8 = 6;
const ERR_REFUSED: u8 = 7;

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.u64(self.id);
        match &self.result {
            Ok(answer) => {
                e.u8(0);
                match answer {
                    Answer::Welcome { append_only, quota } => {
                        e.u8(0).u8(u8::from(*append_only)).u64(*quota)
                    }
                    Answer::Done => e.u8(1),
                    Answer::Data(data) => e.u8(2).bytes(data),
                    Answer::Listing(list) => {
                        e.u8(3).u64(list.len() as u64);
                        for o in list {
                            e.str(&o.name).u64(o.size);
                        }
                        &mut e
                    }
                    Answer::Info(o) => e.u8(4).str(&o.name).u64(o.size),
                };
            }
            Err(err) => {
                e.u8(1);
                encode_error(&mut e, err);
            }
        }
        e.finish()
    }

    pub fn decode(frame: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(frame, "reply");
        let id = d.u64()?;
        let result = match d.u8()? {
            0 => Ok(match d.u8()? {
                0 => Answer::Welcome {
                    append_only: d.u8()? != 0,
                    quota: d.u64()?,
                },
                1 => Answer::Done,
                2 => Answer::Data(d.bytes()?.to_vec()),
                3 => {
                    // Each entry takes at least 12 bytes: a count the frame cannot hold is
                    // refused before anything is allocated for it.
                    let n = d.u64()?;
                    if n > d.remaining() as u64 / 12 {
                        return Err(d.invalid("listing longer than its frame"));
                    }
                    let mut list = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        list.push(ObjectInfo {
                            name: d.string()?,
                            size: d.u64()?,
                        });
                    }
                    Answer::Listing(list)
                }
                4 => Answer::Info(ObjectInfo {
                    name: d.string()?,
                    size: d.u64()?,
                }),
                other => return Err(d.invalid(format!("unknown answer {other}"))),
            }),
            1 => Err(decode_error(&mut d)?),
            other => return Err(d.invalid(format!("unknown status {other}"))),
        };
        d.expect_end()?;
        Ok(Reply { id, result })
    }
}

fn encode_error(e: &mut Encoder, err: &StoreError) {
    match err {
        StoreError::NotFound { name } => e.u8(ERR_NOT_FOUND).str(name),
        StoreError::NoSpace { name } => e.u8(ERR_NO_SPACE).str(name),
        StoreError::Short { name, wanted, got } => e.u8(ERR_SHORT).str(name).u64(*wanted).u64(*got),
        StoreError::Exists { name } => e.u8(ERR_EXISTS).str(name),
        StoreError::InvalidName { name } => e.u8(ERR_INVALID_NAME).str(name),
        StoreError::TooLarge { name, size, max } => {
            e.u8(ERR_TOO_LARGE).str(name).u64(*size).u64(*max)
        }
        StoreError::Io { name, source } => e.u8(ERR_IO).str(name).str(&source.to_string()),
        StoreError::Refused { name, why } => e.u8(ERR_REFUSED).str(name).str(why),
    };
}

fn decode_error(d: &mut Decoder<'_>) -> Result<StoreError> {
    let kind = d.u8()?;
    let name = d.string()?;
    Ok(match kind {
        ERR_NOT_FOUND => StoreError::NotFound { name },
        ERR_NO_SPACE => StoreError::NoSpace { name },
        ERR_SHORT => StoreError::Short {
            name,
            wanted: d.u64()?,
            got: d.u64()?,
        },
        ERR_EXISTS => StoreError::Exists { name },
        ERR_INVALID_NAME => StoreError::InvalidName { name },
        ERR_TOO_LARGE => StoreError::TooLarge {
            name,
            size: d.u64()?,
            max: d.u64()?,
        },
        ERR_IO => StoreError::Io {
            name,
            source: io::Error::other(format!("on the server: {}", d.string()?)),
        },
        ERR_REFUSED => StoreError::Refused {
            name,
            why: d.string()?,
        },
        other => return Err(d.invalid(format!("unknown error kind {other}"))),
    })
}

/// Reads one frame; `Ok(None)` at a clean end of the stream (before a frame begins). A length
/// over `max` is refused before anything more is read.
pub fn read_frame(r: &mut impl Read, max: u64) -> Result<Option<Vec<u8>>> {
    read_frame_admitting(r, max, &mut |_| {})
}

/// [`read_frame`], calling `admit` with the frame's length before its bytes are read (a
/// server waits there until it has room for them).
pub fn read_frame_admitting(
    r: &mut impl Read,
    max: u64,
    admit: &mut dyn FnMut(u64),
) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(frame_error("the stream ended inside a frame's length")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("(connection)", e)),
        }
    }
    let len = u64::from(u32::from_le_bytes(len));
    if len > max {
        return Err(frame_error(&format!(
            "a frame of {len} bytes, more than the {max} allowed"
        )));
    }
    admit(len);
    let mut frame = Vec::new();
    r.take(len)
        .read_to_end(&mut frame)
        .map_err(|e| Error::io("(connection)", e))?;
    if frame.len() as u64 != len {
        return Err(frame_error("the stream ended inside a frame"));
    }
    Ok(Some(frame))
}

/// Writes one frame and flushes it.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::other(format!("a frame of {} bytes", body.len())))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(body)?;
    w.flush()
}

fn frame_error(why: &str) -> Error {
    Error::corrupt("the serve protocol", why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(op: Op) {
        let r = Request { id: 7, op };
        let back = Request::decode(&r.encode()).unwrap();
        assert_eq!((back.id, back.op), (7, r.op));
    }

    #[test]
    fn requests_round_trip() {
        round_trip(Op::Hello {
            protocol: PROTOCOL.into(),
            repo: "/srv/r".into(),
        });
        round_trip(Op::Init);
        round_trip(Op::Put {
            name: "packs/ab/ab".into(),
            data: vec![1, 2, 3],
        });
        round_trip(Op::Get {
            name: "config".into(),
            range: Some(ByteRange::new(3, 9)),
        });
        round_trip(Op::Get {
            name: "config".into(),
            range: None,
        });
        round_trip(Op::List { prefix: "".into() });
    }

    #[test]
    fn replies_round_trip_with_their_errors() {
        for result in [
            Ok(Answer::Listing(vec![ObjectInfo {
                name: "a/b".into(),
                size: 4,
            }])),
            Ok(Answer::Welcome {
                append_only: true,
                quota: 5,
            }),
            Err(StoreError::Short {
                name: "x".into(),
                wanted: 9,
                got: 3,
            }),
            Err(StoreError::Refused {
                name: "archives/aa".into(),
                why: "append-only".into(),
            }),
        ] {
            let text = format!("{result:?}");
            let back = Reply::decode(&Reply { id: 3, result }.encode()).unwrap();
            assert_eq!(back.id, 3);
            assert_eq!(format!("{:?}", back.result), text);
        }
    }

    #[test]
    fn an_oversized_or_cut_frame_is_refused_before_it_is_read() {
        let mut big = (u32::MAX).to_le_bytes().to_vec();
        big.extend_from_slice(b"abc");
        let e = read_frame(&mut big.as_slice(), 1000).unwrap_err();
        assert!(e.to_string().contains("more than the 1000 allowed"), "{e}");
        let mut cut = 10u32.to_le_bytes().to_vec();
        cut.extend_from_slice(b"abc");
        assert!(read_frame(&mut cut.as_slice(), 1000).is_err());
        assert!(read_frame(&mut [].as_slice(), 1000).unwrap().is_none());
    }

    #[test]
    fn a_listing_count_beyond_its_frame_is_refused() {
        let mut e = Encoder::new();
        e.u64(1).u8(0).u8(3).u64(u64::MAX);
        assert!(Reply::decode(&e.finish()).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(n)).collect();
            let _ = Request::decode(&junk);
            let _ = Reply::decode(&junk);
        }
    }
}
