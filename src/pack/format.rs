//! Pack layout: an 8-byte magic, blobs back to back, then the pack's table of contents (TOC),
//! sealed like a blob, and its length. The pack id (and object name) is the sha256 of all its
//! bytes.
//!
//! ```text
//! offset    size  field
//!      0       8  magic "CAIRNPK" + version byte 0x02
//!      8       …  blob, blob, …            (each a sealed blob, see crate::blob)
//!      T       t  TOC, sealed (kind 4, no id)
//!  T + t       4  t (u32 LE)
//! ```
//!
//! TOC plaintext:
//!
//! ```text
//! magic "CAIRNTOC" · version u32 (1) · sha256 of the pack's bytes [0, T) (32) ·
//! count u32 · per blob, in pack order: kind u8 · id (32) · length u32 · plaintext length u32
//! ```
//!
//! Blob offsets are implied: the first blob starts at 8 and each follows the previous one, and
//! the last ends at T. Only the TOC's length is in clear, so without the key a pack shows its
//! size and (from the TOC's length) how many blobs it holds, but no blob's length or id. The
//! hash of the blob area inside the authenticated TOC binds the TOC to the blobs it lists: a
//! pack whose blobs were replaced fails [`parse`] even when renamed to its new sha256.

use sha2::Digest;

use crate::blob::{self, BlobKind, NO_ID};
use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::id::{sha256, ChunkId, PackId};
use crate::store::{ByteRange, Store};
use crate::wire::{Decoder, Encoder};

pub const MAGIC: [u8; 8] = *b"CAIRNPK\x02";
pub const HEADER_SIZE: usize = MAGIC.len();
pub const TRAILER_LEN: usize = 4;
const TOC_MAGIC: [u8; 8] = *b"CAIRNTOC";
const TOC_VERSION: u32 = 1;
/// TOC plaintext before the entries: magic, version, data hash, count.
const TOC_FIXED: usize = 8 + 4 + 32 + 4;
/// One TOC entry: kind, id, length, plaintext length.
pub const TOC_ENTRY_LEN: usize = 1 + 32 + 4 + 4;
/// The largest pack a reader accepts: the largest target (1 GiB, whose TOC counts towards
/// it), the one blob that crosses it, and room to spare. Larger objects under `packs/` are
/// refused before they are read.
pub const MAX_PACK_LEN: u64 = crate::pack::writer::MAX_PACK_SIZE as u64 + (64 << 20);
/// Bytes read from a pack's end to get its TOC in one request, in the common case.
const TAIL_READ: u64 = 64 * 1024;
/// The largest table of contents [`read_toc`] reads: 64 MiB, some 1.6 million blobs (a pack
/// of the largest size holds far fewer: chunks are at least 512 KiB but for metadata). A
/// length in a planted object's trailer cannot make a reader allocate more.
const MAX_TOC_READ: u64 = 64 << 20;

pub use crate::blob::PackEntry;

/// A pack's opened table of contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toc {
    /// sha256 of the pack's bytes before the TOC.
    pub data_hash: [u8; 32],
    pub entries: Vec<PackEntry>,
    /// Where the TOC starts (= where the blobs end).
    pub toc_start: u64,
}

/// The TOC plaintext of `entries`.
pub fn encode_toc(entries: &[PackEntry], data_hash: &[u8; 32]) -> Vec<u8> {
    let mut e = Encoder::with_capacity(TOC_FIXED + TOC_ENTRY_LEN * entries.len());
    e.raw(&TOC_MAGIC)
        .u32(TOC_VERSION)
        .raw(data_hash)
        .u32(entries.len() as u32);
    for x in entries {
        e.u8(x.kind as u8).raw(&x.id.0).u32(x.len).u32(x.plain_len);
    }
    e.finish()
}

/// Decodes a TOC plaintext for a pack whose blobs end at `toc_start`, checking that the
/// blobs tile `[8, toc_start)` exactly.
pub fn decode_toc(bytes: &[u8], toc_start: u64, what: &str) -> Result<Toc> {
    let bad = |r: &str| Error::corrupt(what, format!("table of contents: {r}"));
    let mut d = Decoder::new(bytes, what);
    if d.take(8)? != TOC_MAGIC {
        return Err(bad("bad magic"));
    }
    let version = d.u32()?;
    if version != TOC_VERSION {
        return Err(bad(&format!("unknown version {version}")));
    }
    let data_hash = d.id()?;
    let n = d.u32()? as usize;
    if n.saturating_mul(TOC_ENTRY_LEN) != d.remaining() {
        return Err(bad("length does not match the count"));
    }
    let mut entries = Vec::with_capacity(n);
    let mut at = HEADER_SIZE as u64;
    for _ in 0..n {
        let kind = BlobKind::from_byte(d.u8()?).ok_or_else(|| bad("unknown blob kind"))?;
        let id = ChunkId(d.id()?);
        let len = d.u32()?;
        let plain_len = d.u32()?;
        if (len as usize) < blob::OVERHEAD || plain_len as usize > blob::MAX_PLAIN_LEN {
            return Err(bad("blob length out of range"));
        }
        if at + u64::from(len) > toc_start {
            return Err(bad("blobs run past the table of contents"));
        }
        entries.push(PackEntry {
            id,
            kind,
            offset: at as u32,
            len,
            plain_len,
        });
        at += u64::from(len);
    }
    if at != toc_start {
        return Err(bad("blobs do not end where the table of contents starts"));
    }
    d.expect_end()?;
    Ok(Toc {
        data_hash,
        entries,
        toc_start,
    })
}

/// The sealed length of the TOC of `n` blobs (what the pack writer reserves room for).
pub fn sealed_toc_len(crypto: &Crypto, n: usize) -> usize {
    // A TOC is random ids and lengths: lz4 never shrinks it, so it is stored raw.
    blob::sealed_len(crypto, TOC_FIXED + TOC_ENTRY_LEN * n)
}

/// The size of a pack holding blobs whose sealed lengths add up to `blobs`, `n` of them.
pub fn pack_len(crypto: &Crypto, blobs: usize, n: usize) -> usize {
    HEADER_SIZE + blobs + sealed_toc_len(crypto, n) + TRAILER_LEN
}

/// The sizes of the packs that blobs of these sealed lengths make when added in this order to
/// a pack writer with this target: a pack is handed off as soon as it reaches the target, and
/// the last one holds the rest.
pub fn pack_sizes(
    crypto: &Crypto,
    target: usize,
    blob_lens: impl IntoIterator<Item = usize>,
) -> Vec<u64> {
    let mut sizes = Vec::new();
    let (mut blobs, mut n) = (0usize, 0usize);
    for len in blob_lens {
        blobs += len;
        n += 1;
        let size = pack_len(crypto, blobs, n);
        if size >= target {
            sizes.push(size as u64);
            (blobs, n) = (0, 0);
        }
    }
    if n > 0 {
        sizes.push(pack_len(crypto, blobs, n) as u64);
    }
    sizes
}

/// Appends the sealed TOC and its length to the blob area in `pack`, and returns the pack id.
/// `entries` must describe the blobs of `pack[8..]` in order.
pub fn finish(crypto: &Crypto, pack: &mut Vec<u8>, entries: &[PackEntry]) -> Result<PackId> {
    let mut h = sha2::Sha256::new();
    h.update(&pack[..]);
    let data_hash: [u8; 32] = h.clone().finalize().into();
    let toc = blob::seal(
        crypto,
        BlobKind::PackToc,
        &NO_ID,
        &encode_toc(entries, &data_hash),
    )?;
    let start = pack.len();
    pack.extend_from_slice(&toc);
    pack.extend_from_slice(&(toc.len() as u32).to_le_bytes());
    h.update(&pack[start..]);
    Ok(PackId(h.finalize().into()))
}

/// The TOC's length from the last 4 bytes of a pack of `size` bytes, checked against the size.
pub fn toc_len(trailer: &[u8], size: u64, what: &str) -> Result<usize> {
    let t: [u8; 4] = trailer
        .get(trailer.len().saturating_sub(TRAILER_LEN)..)
        .and_then(|t| t.try_into().ok())
        .ok_or_else(|| Error::corrupt(what, "too short to be a pack"))?;
    let len = u64::from(u32::from_le_bytes(t));
    let room = size.saturating_sub((HEADER_SIZE + TRAILER_LEN) as u64);
    if len < (blob::OVERHEAD + TOC_FIXED) as u64 || len > room {
        return Err(Error::corrupt(
            what,
            format!("table of contents length {len} does not fit a pack of {size} bytes"),
        ));
    }
    Ok(len as usize)
}

/// Checks what can be checked without the key: the magic and that the TOC's length fits.
pub fn check_framing(pack: &[u8], what: &str) -> Result<()> {
    if pack.len() < HEADER_SIZE || pack[..HEADER_SIZE] != MAGIC {
        return Err(bad_magic(pack, what));
    }
    toc_len(pack, pack.len() as u64, what).map(|_| ())
}

fn bad_magic(pack: &[u8], what: &str) -> Error {
    if pack.len() >= HEADER_SIZE && pack[..HEADER_SIZE - 1] == MAGIC[..HEADER_SIZE - 1] {
        return Error::corrupt(
            what,
            format!(
                "pack of format {} (this cairn reads format {})",
                pack[HEADER_SIZE - 1],
                MAGIC[HEADER_SIZE - 1]
            ),
        );
    }
    Error::corrupt(what, "not a pack (bad magic)")
}

/// Opens the TOC of a whole pack and checks it against the pack's bytes: magic, TOC
/// authenticity, tiling, and the hash of the blob area. (The pack's name is checked by
/// [`verify_id`], or by [`parse_and_hash`] in the same pass.)
pub fn parse(crypto: &Crypto, pack: &[u8], what: &str) -> Result<Toc> {
    parse_and_hash(crypto, pack, what).1
}

/// [`parse`], and the sha256 of the whole pack (its id, if it is named right), computed in
/// the same pass over the bytes as the blob area's hash.
pub fn parse_and_hash(crypto: &Crypto, pack: &[u8], what: &str) -> ([u8; 32], Result<Toc>) {
    let mut h = sha2::Sha256::new();
    let framed = frame(pack, what);
    let split = framed.as_ref().map_or(0, |(start, _)| *start);
    h.update(&pack[..split]);
    let data_hash: [u8; 32] = h.clone().finalize().into();
    h.update(&pack[split..]);
    let full: [u8; 32] = h.finalize().into();
    let toc = framed.and_then(|(start, t)| {
        let toc = open_toc(crypto, &pack[start..start + t], start as u64, what)?;
        if data_hash != toc.data_hash {
            return Err(Error::corrupt(
                what,
                "its blobs are not the ones its table of contents lists (damaged or forged)",
            ));
        }
        Ok(toc)
    });
    (full, toc)
}

/// Where a whole pack's TOC starts, and its length: magic and trailer checked.
fn frame(pack: &[u8], what: &str) -> Result<(usize, usize)> {
    if pack.len() > u32::MAX as usize {
        return Err(Error::corrupt(what, "pack larger than 4 GiB"));
    }
    if pack.len() < HEADER_SIZE || pack[..HEADER_SIZE] != MAGIC {
        return Err(bad_magic(pack, what));
    }
    let t = toc_len(pack, pack.len() as u64, what)?;
    Ok((pack.len() - TRAILER_LEN - t, t))
}

/// Authenticates and decodes a sealed TOC that starts at `toc_start` in its pack.
pub fn open_toc(crypto: &Crypto, sealed: &[u8], toc_start: u64, what: &str) -> Result<Toc> {
    let label = format!("{what}, table of contents");
    let plain = blob::open(crypto, BlobKind::PackToc, &NO_ID, sealed, &label)?;
    decode_toc(&plain, toc_start, what)
}

/// Reads only a pack's TOC (one ranged read of its tail, two when the TOC is large) and
/// authenticates it. `size` is the pack's size from the store's listing. The blobs are not
/// read, so their hash is not checked.
pub fn read_toc(store: &dyn Store, crypto: &Crypto, pack: &PackId, size: u64) -> Result<Toc> {
    let name = pack.object_name();
    crate::store::check_size(&name, size, MAX_PACK_LEN)?;
    let tail_len = size.min(TAIL_READ);
    let tail = store.get(&name, Some(ByteRange::new(size - tail_len, tail_len)))?;
    let t = toc_len(&tail, size, &name)? as u64;
    if t > MAX_TOC_READ {
        return Err(Error::corrupt(
            &name,
            format!("a table of contents of {t} bytes, more than cairn reads ({MAX_TOC_READ})"),
        ));
    }
    let toc_start = size - TRAILER_LEN as u64 - t;
    let sealed = if t + TRAILER_LEN as u64 <= tail_len {
        let from = (tail_len - TRAILER_LEN as u64 - t) as usize;
        tail[from..tail.len() - TRAILER_LEN].to_vec()
    } else {
        store.get(&name, Some(ByteRange::new(toc_start, t)))?
    };
    open_toc(crypto, &sealed, toc_start, &name)
}

/// Reads a whole pack, refusing one larger than any pack can be.
pub fn read_whole(store: &dyn Store, pack: &PackId) -> Result<Vec<u8>> {
    Ok(store.get_bounded(&pack.object_name(), MAX_PACK_LEN)?)
}

/// Checks that a pack's bytes hash to its id.
pub fn verify_id(pack: &[u8], id: &PackId) -> Result<()> {
    if sha256(pack) != id.0 {
        return Err(Error::corrupt(
            id.object_name(),
            "contents do not match the pack's name (sha256)",
        ));
    }
    Ok(())
}

/// Reads a whole pack, checks it against its name and its TOC, and lists its blobs.
pub fn read_verified_entries(
    store: &dyn Store,
    crypto: &Crypto,
    pack: &PackId,
) -> Result<Vec<PackEntry>> {
    let name = pack.object_name();
    let bytes = read_whole(store, pack)?;
    let (hash, toc) = parse_and_hash(crypto, &bytes, &name);
    if hash != pack.0 {
        return Err(Error::corrupt(
            &name,
            "contents do not match the pack's name (sha256)",
        ));
    }
    Ok(toc?.entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::seal_chunk;
    use crate::store::mem::MemStore;
    use proptest::prelude::*;

    fn crypto() -> Crypto {
        Crypto::random_for_tests()
    }

    fn build(c: &Crypto, chunks: &[Vec<u8>]) -> (Vec<u8>, Vec<ChunkId>, PackId) {
        let mut pack = MAGIC.to_vec();
        let mut ids = Vec::new();
        let mut entries = Vec::new();
        for ch in chunks {
            let (id, blob) = seal_chunk(c, ch).unwrap();
            entries.push(PackEntry {
                id,
                kind: BlobKind::Chunk,
                offset: pack.len() as u32,
                len: blob.len() as u32,
                plain_len: ch.len() as u32,
            });
            pack.extend_from_slice(&blob);
            ids.push(id);
        }
        let id = finish(c, &mut pack, &entries).unwrap();
        (pack, ids, id)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn toc_recovers_every_blob(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 0..12)) {
            let c = crypto();
            let (pack, ids, id) = build(&c, &chunks);
            prop_assert_eq!(PackId(sha256(&pack)), id);
            let toc = parse(&c, &pack, "p").unwrap();
            prop_assert_eq!(toc.entries.len(), chunks.len());
            let mut end = HEADER_SIZE as u32;
            for ((e, cid), ch) in toc.entries.iter().zip(&ids).zip(&chunks) {
                prop_assert_eq!(e.id, *cid);
                prop_assert_eq!(e.offset, end);
                prop_assert_eq!(e.plain_len as usize, ch.len());
                let blob = &pack[e.offset as usize..(e.offset + e.len) as usize];
                prop_assert_eq!(&blob::open(&c, BlobKind::Chunk, &e.id.0, blob, "b").unwrap(), ch);
                end += e.len;
            }
            prop_assert_eq!(u64::from(end), toc.toc_start);
            // The tail read gives the same TOC.
            let store = MemStore::new();
            store.put(&id.object_name(), &pack).unwrap();
            prop_assert_eq!(read_toc(&store, &c, &id, pack.len() as u64).unwrap(), toc);
        }

        #[test]
        fn any_change_is_detected(cut in 1usize..400, at in any::<proptest::sample::Index>()) {
            let c = crypto();
            let (pack, _, id) = build(&c, &[vec![1u8; 300], vec![2u8; 50]]);
            let short = &pack[..pack.len() - cut.min(pack.len() - 1)];
            prop_assert!(parse(&c, short, "p").is_err());
            prop_assert!(verify_id(short, &id).is_err());
            let mut flipped = pack.clone();
            let i = at.index(flipped.len());
            flipped[i] ^= 0x40;
            prop_assert!(parse(&c, &flipped, "p").is_err());
        }
    }

    #[test]
    fn large_tocs_are_read_in_two_requests() {
        let c = crypto();
        let chunks: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let (pack, _, id) = build(&c, &chunks);
        assert!(sealed_toc_len(&c, chunks.len()) as u64 > TAIL_READ);
        let store = MemStore::new();
        store.put(&id.object_name(), &pack).unwrap();
        let toc = read_toc(&store, &c, &id, pack.len() as u64).unwrap();
        assert_eq!(toc.entries.len(), 3000);
        assert_eq!(toc, parse(&c, &pack, "p").unwrap());
    }

    #[test]
    fn replaced_blobs_are_caught_by_the_toc_even_when_renamed() {
        let c = crypto();
        let (pack, _, _) = build(&c, &[vec![5u8; 500], vec![6u8; 700]]);
        let toc = parse(&c, &pack, "p").unwrap();
        let mut forged = pack.clone();
        for (i, b) in forged[..toc.toc_start as usize]
            .iter_mut()
            .enumerate()
            .skip(HEADER_SIZE)
        {
            *b = (i as u8).wrapping_mul(31);
        }
        let err = parse(&c, &forged, "p").unwrap_err().to_string();
        assert!(
            err.contains("not the ones its table of contents lists"),
            "{err}"
        );
    }

    #[test]
    fn framing_format_1_and_foreign_keys() {
        let c = crypto();
        let (mut pack, _, _) = build(&c, &[b"abc".to_vec()]);
        assert!(check_framing(&pack, "p").is_ok());
        assert!(parse(&crypto(), &pack, "p").is_err(), "another key");
        pack[7] = 1;
        let err = parse(&c, &pack, "p").unwrap_err().to_string();
        assert!(err.contains("format 1"), "{err}");
        assert!(check_framing(b"NOTAPACK", "p").is_err());
        assert!(toc_len(&[255, 255, 255, 255], 100, "p").is_err());
    }
}
