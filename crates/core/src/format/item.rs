//! One entry of an archive (file, directory, symlink, …) and its binary encoding.
//!
//! An item is a record: a u32 length, then the fields below in order. Readers ignore bytes
//! after the last field they know, so later versions can append fields.
//!
//! ```text
//! kind u8 · flags u8 · path bytes · mode u32 · uid u32 · gid u32 · user bytes · group bytes ·
//! mtime (i64 s, u32 ns) · ctime (i64 s, u32 ns) · inode u64 · size u64 · rdev u64 ·
//! link target bytes · hardlink id (u8 present, then 16 bytes if 1) ·
//! xattrs (u32 count, then name bytes · value bytes) ·
//! chunks (u32 count, then chunk id 32 · plaintext length u32)
//! ```
//! `bytes` is a u32 length and the raw bytes. Paths are stored as raw bytes (file names need
//! not be UTF-8), relative, with `/` between components.

use crate::error::{Error, Result};
use crate::util::id::ChunkId;
use crate::util::wire::{Decoder, Encoder};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    CharDev = 5,
    BlockDev = 6,
}

impl ItemKind {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => ItemKind::File,
            2 => ItemKind::Dir,
            3 => ItemKind::Symlink,
            4 => ItemKind::Fifo,
            5 => ItemKind::CharDev,
            6 => ItemKind::BlockDev,
            _ => return None,
        })
    }

    /// The `ls -l` type letter.
    pub fn letter(self) -> char {
        match self {
            ItemKind::File => '-',
            ItemKind::Dir => 'd',
            ItemKind::Symlink => 'l',
            ItemKind::Fifo => 'p',
            ItemKind::CharDev => 'c',
            ItemKind::BlockDev => 'b',
        }
    }

    /// The name scripts see (`list --json-lines`, `diff`).
    pub fn name(self) -> &'static str {
        match self {
            ItemKind::File => "file",
            ItemKind::Dir => "dir",
            ItemKind::Symlink => "symlink",
            ItemKind::Fifo => "fifo",
            ItemKind::CharDev => "chardev",
            ItemKind::BlockDev => "blockdev",
        }
    }
}

/// The file changed while it was read: its contents may be inconsistent.
pub const FLAG_CHANGED: u8 = 1;
/// Some of the file's chunks are missing from the repository (set by `check --repair`).
pub const FLAG_DAMAGED: u8 = 2;
/// In the encoding only: the record carries inode flags (after the hardlink id). Records
/// made before inode flags were kept never have it, and still decode.
const HAS_INODE_FLAGS: u8 = 0x80;

pub use crate::util::clock::Timestamp;

/// A chunk of a file: id and plaintext length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    pub id: ChunkId,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub kind: ItemKind,
    pub flags: u8,
    pub path: Vec<u8>,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub group: String,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub inode: u64,
    pub size: u64,
    pub rdev: u64,
    pub link_target: Vec<u8>,
    /// Files sharing an inode share this id; extract links them together.
    pub hardlink_id: Option<[u8; 16]>,
    /// Every extended attribute kept, ACLs and file capabilities among them, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Linux inode flags (`FS_IOC_GETFLAGS`, the ones `chattr` sets; see
    /// [`crate::source::fsmeta::KEPT_FLAGS`]).
    pub inode_flags: u32,
    pub chunks: Vec<ChunkRef>,
}

impl Item {
    pub fn new(kind: ItemKind, path: Vec<u8>) -> Self {
        Self {
            kind,
            flags: 0,
            path,
            mode: 0,
            uid: 0,
            gid: 0,
            user: String::new(),
            group: String::new(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            inode: 0,
            size: 0,
            rdev: 0,
            link_target: Vec::new(),
            hardlink_id: None,
            xattrs: Vec::new(),
            inode_flags: 0,
            chunks: Vec::new(),
        }
    }

    /// Appends the record (length-prefixed) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut e = Encoder::with_capacity(128 + self.path.len() + 36 * self.chunks.len());
        let marker = if self.inode_flags != 0 {
            HAS_INODE_FLAGS
        } else {
            0
        };
        e.u8(self.kind as u8)
            .u8(self.flags | marker)
            .bytes(&self.path)
            .u32(self.mode)
            .u32(self.uid)
            .u32(self.gid)
            .str(&self.user)
            .str(&self.group);
        self.mtime.encode(&mut e);
        self.ctime.encode(&mut e);
        e.u64(self.inode)
            .u64(self.size)
            .u64(self.rdev)
            .bytes(&self.link_target);
        match &self.hardlink_id {
            Some(h) => e.u8(1).raw(h),
            None => e.u8(0),
        };
        if self.inode_flags != 0 {
            e.u32(self.inode_flags);
        }
        e.u32(self.xattrs.len() as u32);
        for (k, v) in &self.xattrs {
            e.bytes(k).bytes(v);
        }
        e.u32(self.chunks.len() as u32);
        for c in &self.chunks {
            e.raw(&c.id.0).u32(c.len);
        }
        let body = e.finish();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
    }

    /// Decodes one record body (without its length prefix).
    pub fn decode(body: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(body, "archive item");
        let kind = ItemKind::from_byte(d.u8()?)
            .ok_or_else(|| Error::corrupt("archive item", "unknown item kind"))?;
        let flags = d.u8()?;
        let has_inode_flags = flags & HAS_INODE_FLAGS != 0;
        let flags = flags & !HAS_INODE_FLAGS;
        let path = d.bytes()?.to_vec();
        let mode = d.u32()?;
        let uid = d.u32()?;
        let gid = d.u32()?;
        let user = d.string()?;
        let group = d.string()?;
        let mtime = Timestamp::decode(&mut d)?;
        let ctime = Timestamp::decode(&mut d)?;
        let inode = d.u64()?;
        let size = d.u64()?;
        let rdev = d.u64()?;
        let link_target = d.bytes()?.to_vec();
        let hardlink_id = match d.u8()? {
            0 => None,
            1 => {
                let mut h = [0u8; 16];
                h.copy_from_slice(d.take(16)?);
                Some(h)
            }
            _ => return Err(Error::corrupt("archive item", "bad hardlink marker")),
        };
        let inode_flags = if has_inode_flags {
            match d.u32()? {
                0 => {
                    return Err(Error::corrupt(
                        "archive item",
                        "inode flags marked but none",
                    ))
                }
                f => f,
            }
        } else {
            0
        };
        let nx = d.count(8)?;
        let mut xattrs = Vec::with_capacity(nx);
        for _ in 0..nx {
            let k = d.bytes()?.to_vec();
            let v = d.bytes()?.to_vec();
            xattrs.push((k, v));
        }
        let nc = d.count(36)?;
        let mut chunks = Vec::with_capacity(nc);
        for _ in 0..nc {
            let id = ChunkId(d.id()?);
            let len = d.u32()?;
            chunks.push(ChunkRef { id, len });
        }
        Ok(Self {
            kind,
            flags,
            path,
            mode,
            uid,
            gid,
            user,
            group,
            mtime,
            ctime,
            inode,
            size,
            rdev,
            link_target,
            hardlink_id,
            xattrs,
            inode_flags,
            chunks,
        })
    }

    /// The path for people to read: bytes that are not UTF-8 shown as `\xHH`, control
    /// characters escaped (a newline in a name cannot break a listing or a message).
    pub fn display_path(&self) -> String {
        crate::util::text::printable_bytes(&self.path)
    }

    /// `-rw-r--r--` style mode string.
    pub fn mode_string(&self) -> String {
        let mut s = String::with_capacity(10);
        s.push(self.kind.letter());
        let m = self.mode;
        let bit = |b: u32, c: char| if m & b != 0 { c } else { '-' };
        s.push(bit(0o400, 'r'));
        s.push(bit(0o200, 'w'));
        s.push(match (m & 0o100 != 0, m & 0o4000 != 0) {
            (true, true) => 's',
            (false, true) => 'S',
            (true, false) => 'x',
            _ => '-',
        });
        s.push(bit(0o040, 'r'));
        s.push(bit(0o020, 'w'));
        s.push(match (m & 0o010 != 0, m & 0o2000 != 0) {
            (true, true) => 's',
            (false, true) => 'S',
            (true, false) => 'x',
            _ => '-',
        });
        s.push(bit(0o004, 'r'));
        s.push(bit(0o002, 'w'));
        s.push(match (m & 0o001 != 0, m & 0o1000 != 0) {
            (true, true) => 't',
            (false, true) => 'T',
            (true, false) => 'x',
            _ => '-',
        });
        s
    }
}

/// Paths in tree order: component by component, each compared as bytes, so a directory's
/// contents come right after it (`a`, `a/z`, `a-b`), as create writes an archive.
pub fn tree_order(x: &[u8], y: &[u8]) -> std::cmp::Ordering {
    match x.iter().zip(y).find(|(p, q)| p != q) {
        Some((b'/', _)) => std::cmp::Ordering::Less,
        Some((_, b'/')) => std::cmp::Ordering::Greater,
        Some((p, q)) => p.cmp(q),
        None => x.len().cmp(&y.len()),
    }
}

/// Decodes items from a stream's chunks, fetching each chunk when it is needed.
pub struct ItemReader<F> {
    fetch: F,
    chunks: std::vec::IntoIter<ChunkRef>,
    buf: Vec<u8>,
    pos: usize,
    /// Stream bytes dropped from the front of `buf`.
    dropped: u64,
    failed: bool,
}

impl<F: FnMut(&ChunkRef) -> Result<Vec<u8>>> ItemReader<F> {
    pub fn new(chunks: Vec<ChunkRef>, fetch: F) -> Self {
        Self {
            fetch,
            chunks: chunks.into_iter(),
            buf: Vec::new(),
            pos: 0,
            dropped: 0,
            failed: false,
        }
    }

    /// Where the next record starts in the stream, in bytes.
    pub fn offset(&self) -> u64 {
        self.dropped + self.pos as u64
    }

    /// Makes sure `n` bytes are buffered from `pos`; false at the end of the stream.
    fn want(&mut self, n: usize) -> Result<bool> {
        while self.buf.len() - self.pos < n {
            let Some(c) = self.chunks.next() else {
                return Ok(false);
            };
            let data = (self.fetch)(&c)?;
            if data.len() != c.len as usize {
                return Err(Error::corrupt(
                    "item stream",
                    "metadata chunk has the wrong length",
                ));
            }
            self.buf.drain(..self.pos);
            self.dropped += self.pos as u64;
            self.pos = 0;
            self.buf.extend_from_slice(&data);
        }
        Ok(true)
    }

    fn next_item(&mut self) -> Result<Option<Item>> {
        if !self.want(4)? {
            if self.buf.len() > self.pos {
                return Err(Error::corrupt("item stream", "truncated record length"));
            }
            return Ok(None);
        }
        let len = u32::from_le_bytes([
            self.buf[self.pos],
            self.buf[self.pos + 1],
            self.buf[self.pos + 2],
            self.buf[self.pos + 3],
        ]) as usize;
        if len > 64 * 1024 * 1024 {
            return Err(Error::corrupt("item stream", "record length out of range"));
        }
        if !self.want(4 + len)? {
            return Err(Error::corrupt("item stream", "truncated record"));
        }
        let item = Item::decode(&self.buf[self.pos + 4..self.pos + 4 + len])?;
        self.pos += 4 + len;
        Ok(Some(item))
    }
}

impl<F: FnMut(&ChunkRef) -> Result<Vec<u8>>> Iterator for ItemReader<F> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        if self.failed {
            return None;
        }
        match self.next_item() {
            Ok(Some(i)) => Some(Ok(i)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_order_puts_a_directory_s_contents_right_after_it() {
        let mut paths: Vec<&[u8]> = vec![b"a-b", b"a/z", b"a", b"a.txt", b"a/b/c", b"ab", b"a/b"];
        paths.sort_by(|x, y| tree_order(x, y));
        assert_eq!(
            paths,
            [&b"a"[..], b"a/b", b"a/b/c", b"a/z", b"a-b", b"a.txt", b"ab"]
        );
    }
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = ItemKind> {
        prop_oneof![
            Just(ItemKind::File),
            Just(ItemKind::Dir),
            Just(ItemKind::Symlink),
            Just(ItemKind::Fifo),
            Just(ItemKind::CharDev),
            Just(ItemKind::BlockDev)
        ]
    }

    prop_compose! {
        fn item()(kind in kind(), flags in 0u8..4, path in proptest::collection::vec(any::<u8>(), 1..40),
                  mode in 0u32..0o7777, uid in any::<u32>(), gid in any::<u32>(), user in "[a-z]{0,8}",
                  secs in any::<i64>(), nanos in 0u32..1_000_000_000, inode in any::<u64>(), size in any::<u64>(),
                  link in proptest::collection::vec(any::<u8>(), 0..20), hl in proptest::option::of(any::<[u8; 16]>()),
                  xattrs in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 1..10), proptest::collection::vec(any::<u8>(), 0..10)), 0..3),
                  inode_flags in prop_oneof![Just(0u32), any::<u32>()],
                  chunks in proptest::collection::vec((any::<[u8; 32]>(), any::<u32>()), 0..5)) -> Item {
            Item {
                kind, flags, path, mode, uid, gid, user: user.clone(), group: user,
                mtime: Timestamp { secs, nanos }, ctime: Timestamp { secs: secs / 2, nanos },
                inode, size, rdev: size / 3, link_target: link, hardlink_id: hl, xattrs, inode_flags,
                chunks: chunks.into_iter().map(|(id, len)| ChunkRef { id: ChunkId(id), len }).collect(),
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(it in item()) {
            let mut buf = Vec::new();
            it.encode_into(&mut buf);
            let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
            prop_assert_eq!(len, buf.len() - 4);
            prop_assert_eq!(Item::decode(&buf[4..]).unwrap(), it);
            for cut in 1..buf.len() - 4 {
                // A truncated record never decodes to a different item without error.
                if let Ok(other) = Item::decode(&buf[4..4 + cut]) { prop_assert!(false, "decoded {:?}", other); }
            }
        }
    }

    #[test]
    fn mode_strings() {
        let mut it = Item::new(ItemKind::Dir, b"d".to_vec());
        it.mode = 0o1755;
        assert_eq!(it.mode_string(), "drwxr-xr-t");
        it.kind = ItemKind::File;
        it.mode = 0o4644;
        assert_eq!(it.mode_string(), "-rwSr--r--");
    }

    #[test]
    fn timestamps_round_trip_through_system_time() {
        for t in [
            Timestamp { secs: 0, nanos: 5 },
            Timestamp {
                secs: -10,
                nanos: 250,
            },
            Timestamp {
                secs: 1_700_000_000,
                nanos: 999_999_999,
            },
        ] {
            assert_eq!(Timestamp::from_system(t.to_system()), t);
        }
    }
}
