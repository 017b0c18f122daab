//! Archive items written as a POSIX (PAX) tar stream: `export-tar`, and `dump` of a directory.
//!
//! Each entry is a ustar header, preceded by a PAX extended header (`x`) for whatever ustar
//! cannot hold: nanosecond mtimes (`mtime`), names and link targets over 100 bytes (`path`,
//! `linkpath`), ids over 2,097,151 (`uid`, `gid`), long user and group names, sizes of 8 GiB
//! and more (`size`), extended attributes (`SCHILY.xattr.NAME`, raw bytes, as GNU tar and
//! libarchive write them) and ACLs (`SCHILY.acl.access`, `SCHILY.acl.default`, in the short
//! text form). A later name of a hardlinked file is a link entry (`1`) to the first name
//! written. GNU tar restores all of it (`tar --xattrs --acls -xpf`). Inode flags are
//! `SCHILY.fflags` (libarchive's names: bsdtar `--fflags` restores them), and a file with
//! holes is written sparse ([`sparse`]: PAX sparse format 1.0, which GNU tar and bsdtar
//! restore with its holes).

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use tar::{EntryType, Header};

use crate::archive::content::Contents;
use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemKind};
use crate::ops::extract::Selection;
use crate::source::fsmeta;
use crate::util::id::ChunkId;

mod sparse;

/// Largest value of an 8-byte octal field (uid, gid, mode).
const MAX_OCTAL_8: u64 = 0o7_777_777;
/// Largest value of a 12-byte octal field (size, mtime).
const MAX_OCTAL_12: u64 = 0o77_777_777_777;

/// Writes items to `out` as tar entries.
pub struct TarWriter<'a, W: Write> {
    out: W,
    /// Names `out` in errors ("<stdout>", a file's path).
    sink: String,
    contents: Contents<'a>,
    /// The first name written of each hardlinked inode.
    first_names: HashMap<[u8; 16], Vec<u8>>,
    /// The id of a chunk of zeros of the largest size (a hole), once a file may have one.
    hole: Option<ChunkId>,
    pub entries: u64,
    pub bytes: u64,
}

impl<'a, W: Write> TarWriter<'a, W> {
    pub fn new(out: W, sink: &str, contents: Contents<'a>) -> Self {
        Self {
            out,
            sink: sink.to_string(),
            contents,
            first_names: HashMap::new(),
            hole: None,
            entries: 0,
            bytes: 0,
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.sink, e))
    }

    /// Writes `items` under their stored paths, each small file's contents read and decrypted
    /// ahead on the contents' threads while the ones before it are written (one thread read
    /// and decrypted 20,000 files of 4 KiB one after another: 2.4 times the time the machine
    /// needs). A file left out is said on stderr and added to `skipped`.
    fn append_batch(&mut self, items: &[Item], skipped: &mut Vec<String>) -> Result<()> {
        let wanted = self.read_ahead(items);
        let groups = groups(items, &wanted);
        let contents = Contents {
            threads: 1,
            ..self.contents
        };
        let threads = self.contents.threads.min(READ_AHEAD_THREADS);
        let read = |g: &Group| read_group(&contents, &items[g.clone()], &wanted[g.clone()]);
        let mut next = items.iter();
        crate::util::parallel::in_order(&groups, threads, read, |group| -> Result<()> {
            for piece in &group.pieces {
                let Some(item) = next.next() else {
                    return Ok(());
                };
                let data = piece.clone().map(|r| &group.bytes[r]);
                if let Some(why) = self.append_read(item, &item.path, data)? {
                    crate::say!("warning: {why}");
                    skipped.push(why);
                }
            }
            Ok(())
        })
    }

    /// Which of `items` are read ahead: small regular files whose chunks the repository has
    /// (a file with one missing is left out when its turn comes), each inode once (a later
    /// name of a hardlinked file is written as a link to the first, without its contents).
    fn read_ahead(&self, items: &[Item]) -> Vec<bool> {
        let mut seen = std::collections::HashSet::new();
        items
            .iter()
            .map(|item| {
                if item.kind != ItemKind::File {
                    return false;
                }
                let later = item
                    .hardlink_id
                    .is_some_and(|h| self.first_names.contains_key(&h) || !seen.insert(h));
                !later
                    && item.size <= SMALL_FILE
                    && !item.chunks.is_empty()
                    && item
                        .chunks
                        .iter()
                        .all(|c| self.contents.index.stored(&c.id).is_some())
            })
            .collect()
    }

    /// Writes one item, under `name` (its stored path, or a shorter one with
    /// `--strip-components`). A file some of whose chunks the repository does not have (say,
    /// marked damaged by `check --repair`) is left out, before anything of it is written:
    /// `Ok(Some(why))`.
    pub fn append(&mut self, item: &Item, name: &[u8]) -> Result<Option<String>> {
        self.append_read(item, name, None)
    }

    /// [`append`](Self::append), with a regular file's contents already read when `read`
    /// holds them.
    fn append_read(
        &mut self,
        item: &Item,
        name: &[u8],
        read: Option<&[u8]>,
    ) -> Result<Option<String>> {
        if let Some(why) = self.missing_chunk(item) {
            return Ok(Some(why));
        }
        let link_to = self.first_name_of(item, name);
        let mut pax: Vec<(String, Vec<u8>)> = Vec::new();
        let mut header = Header::new_ustar();
        let mut full_name = name.to_vec();
        if item.kind == ItemKind::Dir {
            full_name.push(b'/');
        }
        let (kind, mut size) = entry_type(&mut header, item, link_to.as_deref(), &mut pax);
        let holes = match kind {
            EntryType::Regular => self.sparse_plan(item)?,
            _ => None,
        };
        let header_name = match &holes {
            Some(plan) => {
                let data: u64 = plan.segments.iter().map(|(_, len)| len).sum();
                size = sparse::map(&plan.segments).len() as u64 + data;
                pax.push(("GNU.sparse.major".into(), b"1".to_vec()));
                pax.push(("GNU.sparse.minor".into(), b"0".to_vec()));
                pax.push(("GNU.sparse.name".into(), full_name.clone()));
                let real = item.size.to_string().into_bytes();
                pax.push(("GNU.sparse.realsize".into(), real));
                sparse::stand_in_name(&full_name)
            }
            None => full_name.clone(),
        };
        set_bytes(&mut header, Field::Name, &header_name, "path", &mut pax);
        header.set_entry_type(kind);
        header.set_mode(item.mode & 0o7777);
        numeric(&mut header, Numeric::Uid, u64::from(item.uid), &mut pax);
        numeric(&mut header, Numeric::Gid, u64::from(item.gid), &mut pax);
        numeric(&mut header, Numeric::Size, size, &mut pax);
        set_time_and_names(&mut header, item, &mut pax);
        if matches!(kind, EntryType::Char | EntryType::Block) {
            set_device(&mut header, item)?;
        }
        pax.extend(xattr_records(item));
        if let Some(flags) = fsmeta::fflags_text(item.inode_flags) {
            pax.push(("SCHILY.fflags".into(), flags.into_bytes()));
        }
        if !pax.is_empty() {
            self.write_pax(&full_name, &pax)?;
        }
        header.set_cksum();
        self.write(header.as_bytes())?;
        if kind == EntryType::Regular {
            self.write_contents(item, holes, read)?;
        }
        self.entries += 1;
        Ok(None)
    }

    /// Why a file cannot be exported: a chunk of it is missing from the repository.
    fn missing_chunk(&self, item: &Item) -> Option<String> {
        if item.kind != ItemKind::File {
            return None;
        }
        let c = item
            .chunks
            .iter()
            .find(|c| self.contents.index.stored(&c.id).is_none())?;
        Some(format!(
            "{}: not exported: chunk {} is missing from the repository",
            item.display_path(),
            c.id
        ))
    }

    /// For a later name of a hardlinked file, its first name; the first one is remembered.
    fn first_name_of(&mut self, item: &Item, name: &[u8]) -> Option<Vec<u8>> {
        let h = item.hardlink_id.filter(|_| item.kind == ItemKind::File)?;
        match self.first_names.get(&h) {
            Some(first) => Some(first.clone()),
            None => {
                self.first_names.insert(h, name.to_vec());
                None
            }
        }
    }

    /// A regular file's contents, checked against its size, and the padding after them; for
    /// a sparse file, the map of its segments and their bytes.
    fn write_contents(
        &mut self,
        item: &Item,
        holes: Option<SparsePlan>,
        read: Option<&[u8]>,
    ) -> Result<()> {
        let sink = self.sink.clone();
        let written = match holes {
            Some(plan) => {
                let map = sparse::map(&plan.segments);
                self.write(&map)?;
                let data = match plan.held {
                    Some(bytes) => {
                        self.write(&bytes)?;
                        bytes.len() as u64
                    }
                    None => self.contents.write_to(&plan.chunks, &mut self.out, &sink)?,
                };
                map.len() as u64 + data
            }
            None => match read {
                Some(data) => {
                    self.write(data)?;
                    data.len() as u64
                }
                None => self.contents.write_to(&item.chunks, &mut self.out, &sink)?,
            },
        };
        self.pad(written)?;
        self.bytes += item.size;
        Ok(())
    }

    /// How a file with holes is written (see [`sparse`]); `None` for a file without.
    fn sparse_plan(&mut self, item: &Item) -> Result<Option<SparsePlan>> {
        let stored: u64 = item.chunks.iter().map(|c| u64::from(c.len)).sum();
        if stored != item.size {
            return Err(Error::corrupt(
                format!("item {}", item.display_path()),
                format!("its chunks hold {stored} bytes, its size is {}", item.size),
            ));
        }
        let max = self.contents.repo.config().chunker.params.max_size;
        if !item.chunks.iter().any(|c| c.len == max) {
            return Ok(None);
        }
        let crypto = self.contents.repo.crypto();
        let hole = *self
            .hole
            .get_or_insert_with(|| crypto.id_of(&vec![0u8; max as usize]));
        let Some(coarse) = sparse::segments(&item.chunks, &hole) else {
            return Ok(None);
        };
        let chunks = sparse::data_chunks(&item.chunks, &hole);
        let data_len: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
        if data_len > sparse::READ_AHEAD {
            return Ok(Some(SparsePlan {
                segments: coarse,
                chunks,
                held: None,
            }));
        }
        let mut data = Vec::with_capacity(data_len as usize);
        self.contents.write_to(&chunks, &mut data, "memory")?;
        let pieces = sparse::refine(&coarse, &data, item.size);
        let mut held = Vec::new();
        for &(_, len, pos) in &pieces {
            held.extend_from_slice(&data[pos..pos + len as usize]);
        }
        Ok(Some(SparsePlan {
            segments: pieces.iter().map(|&(o, l, _)| (o, l)).collect(),
            chunks,
            held: Some(held),
        }))
    }

    /// An extended header (`x`) holding `records`, for the entry named `name`.
    fn write_pax(&mut self, name: &[u8], records: &[(String, Vec<u8>)]) -> Result<()> {
        let mut body = Vec::new();
        for (key, value) in records {
            body.extend_from_slice(&pax_record(key, value));
        }
        let mut h = Header::new_ustar();
        // As GNU tar names them: the entry's directory, "PaxHeaders", its name.
        let base = name
            .strip_suffix(b"/")
            .unwrap_or(name)
            .rsplit(|b| *b == b'/')
            .next()
            .unwrap_or(b"");
        let mut xname = b"PaxHeaders/".to_vec();
        xname.extend_from_slice(base);
        xname.truncate(100);
        if let Some(u) = h.as_ustar_mut() {
            u.name[..xname.len()].copy_from_slice(&xname);
        }
        h.set_entry_type(EntryType::XHeader);
        h.set_mode(0o644);
        h.set_size(body.len() as u64);
        h.set_mtime(0);
        h.set_cksum();
        self.write(h.as_bytes())?;
        self.write(&body)?;
        self.pad(body.len() as u64)
    }

    /// Zeros up to the next 512-byte block.
    fn pad(&mut self, len: u64) -> Result<()> {
        let rest = (512 - len % 512) % 512;
        self.write(&[0u8; 512][..rest as usize])
    }

    /// The two zero blocks that end a tar stream; returns the writer.
    pub fn finish(mut self) -> Result<W> {
        self.write(&[0u8; 1024])?;
        self.out.flush().map_err(|e| Error::io(&self.sink, e))?;
        Ok(self.out)
    }
}

/// A sparse file's entry: its data segments, the chunks that hold them, and their bytes when
/// they were read ahead.
struct SparsePlan {
    segments: Vec<(u64, u64)>,
    chunks: Vec<crate::format::item::ChunkRef>,
    held: Option<Vec<u8>>,
}

#[derive(Clone, Copy)]
enum Field {
    Name,
    Link,
}

/// Puts `value` in the header's name or link field, or, when it is longer than 100 bytes, a
/// truncated copy there and the whole in a PAX record.
fn set_bytes(
    header: &mut Header,
    field: Field,
    value: &[u8],
    key: &str,
    pax: &mut Vec<(String, Vec<u8>)>,
) {
    let Some(u) = header.as_ustar_mut() else {
        return;
    };
    let slot = match field {
        Field::Name => &mut u.name,
        Field::Link => &mut u.linkname,
    };
    let n = value.len().min(slot.len());
    slot[..n].copy_from_slice(&value[..n]);
    if value.len() > slot.len() {
        pax.push((key.into(), value.to_vec()));
    }
}

#[derive(Clone, Copy)]
enum Numeric {
    Uid,
    Gid,
    Size,
}

/// Sets a numeric field, or, when it does not fit in octal, a PAX record (and 0 in the field).
fn numeric(header: &mut Header, field: Numeric, value: u64, pax: &mut Vec<(String, Vec<u8>)>) {
    let (max, key) = match field {
        Numeric::Uid => (MAX_OCTAL_8, "uid"),
        Numeric::Gid => (MAX_OCTAL_8, "gid"),
        Numeric::Size => (MAX_OCTAL_12, "size"),
    };
    let fits = value <= max;
    if !fits {
        pax.push((key.into(), value.to_string().into_bytes()));
    }
    let v = if fits { value } else { 0 };
    match field {
        Numeric::Uid => header.set_uid(v),
        Numeric::Gid => header.set_gid(v),
        Numeric::Size => header.set_size(v),
    }
}

/// `secs.nanos` as PAX writes times (negative times count down from the epoch).
fn pax_time(secs: i64, nanos: u32) -> String {
    if nanos == 0 {
        return secs.to_string();
    }
    if secs >= 0 {
        format!("{secs}.{nanos:09}")
    } else {
        // -1.25 s is secs -2, nanos 750,000,000.
        let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        let abs = total.unsigned_abs();
        format!("-{}.{:09}", abs / 1_000_000_000, abs % 1_000_000_000)
    }
}

/// One PAX record: `LEN KEY=VALUE\n`, where LEN counts the whole record, itself included.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    let mut out = format!("{len} {key}=").into_bytes();
    out.extend_from_slice(value);
    out.push(b'\n');
    out
}

/// What a tar stream held.
pub struct Written {
    pub entries: u64,
    pub bytes: u64,
    pub unmatched: Vec<String>,
    /// Files left out (their data is missing), with why; already said on stderr.
    pub skipped: Vec<String>,
}

/// Items read ahead and written together: the small files among them are read and decrypted
/// on the contents' threads, a few files ahead of the one being written.
const BATCH: usize = 1024;

/// Files up to this size are read ahead whole (a large one's runs are spread over the threads
/// by [`Contents::write_to`] itself).
const SMALL_FILE: u64 = 1 << 20;

/// Small files read together: a group ends after this many…
const GROUP_FILES: usize = 64;
/// …or before it would hold more than this many bytes of them.
const GROUP_BYTES: u64 = 1 << 20;

/// Threads that read ahead at most, whatever `--threads` says: each may be two groups ahead
/// of what is written, so this bounds what waits in memory (about 16 MiB).
const READ_AHEAD_THREADS: usize = 8;

/// A run of consecutive items of a batch, read ahead together.
type Group = std::ops::Range<usize>;

/// The batch cut into groups: consecutive items holding up to [`GROUP_FILES`] files read
/// ahead, of [`GROUP_BYTES`] together (whatever else lies among them rides along).
fn groups(items: &[Item], wanted: &[bool]) -> Vec<Group> {
    let mut groups = Vec::new();
    let (mut start, mut files, mut bytes) = (0, 0, 0u64);
    for (i, item) in items.iter().enumerate() {
        if !wanted[i] {
            continue;
        }
        if files == GROUP_FILES || (files > 0 && bytes + item.size > GROUP_BYTES) {
            groups.push(start..i);
            (start, files, bytes) = (i, 0, 0);
        }
        files += 1;
        bytes += item.size;
    }
    if start < items.len() {
        groups.push(start..items.len());
    }
    groups
}

/// What a group's reading gave: the contents of the files read, one after another, and for
/// each item of the group where its contents lie (`None`: not read ahead, so read when its
/// turn comes).
struct GroupRead {
    bytes: Vec<u8>,
    pieces: Vec<Option<std::ops::Range<usize>>>,
}

/// Reads the files of `group` that are `wanted`, with as few ranged reads as their chunks
/// allow (consecutive files lie together in a pack). When that fails, each file is read on
/// its own, and one that fails is left to be read when its turn comes: it then writes what
/// it can and fails there, as it would have without reading ahead.
fn read_group(contents: &Contents<'_>, group: &[Item], wanted: &[bool]) -> GroupRead {
    let chunks: Vec<ChunkRef> = group
        .iter()
        .zip(wanted)
        .filter(|(_, w)| **w)
        .flat_map(|(i, _)| i.chunks.iter().copied())
        .collect();
    let total: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
    let mut bytes = Vec::with_capacity(total as usize);
    let together = contents.write_to(&chunks, &mut bytes, "memory").is_ok();
    if !together {
        bytes.clear();
    }
    let mut at = 0usize;
    let pieces = group
        .iter()
        .zip(wanted)
        .map(|(item, wanted)| {
            if !*wanted {
                return None;
            }
            let start = if together { at } else { bytes.len() };
            let len: usize = item.chunks.iter().map(|c| c.len as usize).sum();
            if together {
                at += len;
            } else if contents
                .write_to(&item.chunks, &mut bytes, "memory")
                .is_err()
            {
                bytes.truncate(start);
                return None;
            }
            Some(start..start + len)
        })
        .collect();
    GroupRead { bytes, pieces }
}

/// Writes the items `selection` picks (export-tar, dump) as tar entries to `out`, and the end of the stream.
pub fn write_selected(
    contents: Contents<'_>,
    items: impl Iterator<Item = Result<Item>>,
    mut selection: Selection,
    out: impl Write,
    sink: &str,
) -> Result<Written> {
    let mut tar = TarWriter::new(BufWriter::with_capacity(1 << 20, out), sink, contents);
    let mut skipped = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut items = items.peekable();
    while items.peek().is_some() {
        // A batch of the items picked, and the first error reading them, if any: the items
        // before it are written first, as they were when each was written as it came.
        let mut failed = None;
        for item in items.by_ref() {
            match item {
                Ok(item) => batch.extend(selection.pick(item)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            if batch.len() == BATCH {
                break;
            }
        }
        tar.append_batch(&batch, &mut skipped)?;
        batch.clear();
        if let Some(e) = failed {
            return Err(e);
        }
    }
    let (entries, bytes) = (tar.entries, tar.bytes);
    tar.finish()?;
    Ok(Written {
        entries,
        bytes,
        unmatched: selection.unmatched(),
        skipped,
    })
}

/// The entry type and the data size of an item (a later name of a hardlinked file is a link
/// to its first, with no data), with the link's target set.
fn entry_type(
    header: &mut Header,
    item: &Item,
    link_to: Option<&[u8]>,
    pax: &mut Vec<(String, Vec<u8>)>,
) -> (EntryType, u64) {
    match (item.kind, link_to) {
        (ItemKind::File, Some(first)) => {
            set_bytes(header, Field::Link, first, "linkpath", pax);
            (EntryType::Link, 0)
        }
        (ItemKind::File, None) => (EntryType::Regular, item.size),
        (ItemKind::Dir, _) => (EntryType::Directory, 0),
        (ItemKind::Symlink, _) => {
            set_bytes(header, Field::Link, &item.link_target, "linkpath", pax);
            (EntryType::Symlink, 0)
        }
        (ItemKind::Fifo, _) => (EntryType::Fifo, 0),
        (ItemKind::CharDev, _) => (EntryType::Char, 0),
        (ItemKind::BlockDev, _) => (EntryType::Block, 0),
    }
}

/// The modification time (to the nanosecond in a PAX record when the header cannot hold it)
/// and the owners' names (in PAX records when too long).
fn set_time_and_names(header: &mut Header, item: &Item, pax: &mut Vec<(String, Vec<u8>)>) {
    let mtime = item.mtime;
    let whole = u64::try_from(mtime.secs)
        .ok()
        .filter(|s| *s <= MAX_OCTAL_12);
    header.set_mtime(whole.unwrap_or(0));
    if mtime.nanos != 0 || whole.is_none() {
        pax.push((
            "mtime".into(),
            pax_time(mtime.secs, mtime.nanos).into_bytes(),
        ));
    }
    for (name, key) in [(&item.user, "uname"), (&item.group, "gname")] {
        if name.is_empty() {
            continue;
        }
        let fits = if key == "uname" {
            header.set_username(name)
        } else {
            header.set_groupname(name)
        };
        if fits.is_err() {
            pax.push((key.into(), name.as_bytes().to_vec()));
        }
    }
}

/// A device's major and minor numbers; one that does not fit in the header is an error.
fn set_device(header: &mut Header, item: &Item) -> Result<()> {
    let (major, minor) = (rustix::fs::major(item.rdev), rustix::fs::minor(item.rdev));
    if u64::from(major) > MAX_OCTAL_8 || u64::from(minor) > MAX_OCTAL_8 {
        return Err(Error::invalid(format!(
            "{}: device number {major}:{minor} does not fit in a tar header",
            item.display_path()
        )));
    }
    header
        .set_device_major(major)
        .and_then(|()| header.set_device_minor(minor))
        .map_err(|e| Error::invalid(format!("{}: {e}", item.display_path())))
}

/// ACLs as `SCHILY.acl.*` records, every other extended attribute as `SCHILY.xattr.NAME`.
fn xattr_records(item: &Item) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (key, value) in &item.xattrs {
        let acl = match key.as_slice() {
            fsmeta::ACL_ACCESS => "SCHILY.acl.access",
            fsmeta::ACL_DEFAULT => "SCHILY.acl.default",
            _ => {
                out.push((
                    format!("SCHILY.xattr.{}", String::from_utf8_lossy(key)),
                    value.clone(),
                ));
                continue;
            }
        };
        if let Some(text) = fsmeta::acl_text(value) {
            out.push((acl.into(), text.into_bytes()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_records_count_their_own_length() {
        for n in [0usize, 1, 5, 90, 91, 92, 95, 96, 97, 990, 995, 996, 10_000] {
            let value = vec![b'a'; n];
            let r = pax_record("path", &value);
            let (len, _) = std::str::from_utf8(&r[..r.iter().position(|b| *b == b' ').unwrap()])
                .map(|s| (s.parse::<usize>().unwrap(), ()))
                .unwrap();
            assert_eq!(len, r.len(), "value of {n} bytes");
        }
    }

    #[test]
    fn pax_times() {
        assert_eq!(pax_time(5, 0), "5");
        assert_eq!(pax_time(1_700_000_000, 123), "1700000000.000000123");
        assert_eq!(pax_time(-2, 750_000_000), "-1.250000000");
    }
}
