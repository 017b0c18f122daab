//! Pack layout: an 8-byte magic, blobs back to back, filler, the pack's table of contents
//! (TOC) sealed like a blob, and a sealed locator that says how long the TOC is. The pack id
//! (and object name) is the pack hash of all its bytes: SHA-256 or BLAKE3, as the
//! repository's cipher suite says ([`crate::crypto::suite`]); "hash" below is that one.
//!
//! ```text
//! offset    size  field
//!      0       8  magic "CAIRNPK" + version byte 0x03
//!      8       …  blob, blob, …            (each a sealed blob, see crate::format::blob)
//!      B       f  filler: keystream of (filler key, hash of [0, B)), see Crypto::filler
//!      T       t  TOC, sealed (kind 4, no id)
//!  T + t      61  locator, sealed (kind 6, no id, raw): t (u32 LE)
//! ```
//!
//! TOC plaintext:
//!
//! ```text
//! magic "CAIRNTOC" · version u32 (2) · hash of the pack's bytes [0, B) (32) ·
//! filler length f u32 · count u32 ·
//! per blob, in pack order: kind u8 · id (32) · length u32 · plaintext length u32
//! ```
//!
//! Blob offsets are implied: the first blob starts at 8 and each follows the previous one; the
//! last ends at B, and the filler fills [B, T). Nothing is in clear but the magic: without
//! the key a pack shows its size only, and a full pack is exactly the pack size, so that is
//! the same for all of them. The hash of the blob area inside the authenticated TOC binds the
//! TOC to the blobs it lists (a pack whose blobs were replaced fails [`parse`] even when
//! renamed to its new hash), and the filler is determined by that hash and the key, so a
//! reader with the key checks every byte of it.

use crate::crypto::suite::PackHasher;
use crate::crypto::{Crypto, Suite};
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind, NO_ID};
use crate::format::compress::Codec;
use crate::store::{ByteRange, Store};
use crate::util::id::{ChunkId, PackId};
use crate::util::wire::{Decoder, Encoder};

pub const MAGIC: [u8; 8] = *b"CAIRNPK\x03";
pub const HEADER_SIZE: usize = MAGIC.len();
/// The sealed locator at a pack's end: a blob of 4 raw bytes.
pub const LOCATOR_LEN: usize = blob::OVERHEAD + 4;
const TOC_MAGIC: [u8; 8] = *b"CAIRNTOC";
const TOC_VERSION: u32 = 2;
/// TOC plaintext before the entries: magic, version, data hash, filler length, count.
const TOC_FIXED: usize = 8 + 4 + 32 + 4 + 4;
/// One TOC entry: kind, id, length, plaintext length.
pub const TOC_ENTRY_LEN: usize = 1 + 32 + 4 + 4;
/// The most a session's last pack grows beyond its contents to reach its bucket
/// ([`closing_len`]).
pub const CLOSING_EXTRA_MAX: usize = 64 << 20;
/// The largest pack a reader accepts: the largest target (1 GiB), the one blob that crosses
/// it, and the padding a session's last pack may add. Larger objects under `packs/` are
/// refused before they are read.
pub const MAX_PACK_LEN: u64 =
    crate::pack::writer::MAX_PACK_SIZE as u64 + (16 << 20) + CLOSING_EXTRA_MAX as u64;
// A store reads a pack whole, where a server ignores ranges, only up to its own bound.
const _: () = assert!(MAX_PACK_LEN <= crate::store::MAX_RANGED_OBJECT);
/// Bytes read from a pack's end to get its TOC in one request, in the common case.
const TAIL_READ: u64 = 64 * 1024;
/// The largest table of contents [`read_toc`] reads: 64 MiB, some 1.6 million blobs (a pack
/// of the largest size holds far fewer: chunks are at least 512 KiB but for metadata). A
/// length in a forged locator cannot make a reader allocate more.
const MAX_TOC_READ: u64 = 64 << 20;
/// The smallest pack: magic, an empty TOC and the locator.
pub const MIN_PACK_LEN: usize = HEADER_SIZE + blob::OVERHEAD + TOC_FIXED + LOCATOR_LEN;

pub use crate::format::blob::PackEntry;

/// A pack's opened table of contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toc {
    /// The pack hash of the pack's bytes before the filler.
    pub data_hash: [u8; 32],
    pub entries: Vec<PackEntry>,
    /// Where the blobs end (= where the filler starts).
    pub blobs_end: u64,
    /// Where the TOC starts (= where the filler ends).
    pub toc_start: u64,
}

impl Toc {
    /// Bytes of filler in the pack.
    pub fn filler_len(&self) -> u64 {
        self.toc_start - self.blobs_end
    }
}

/// The TOC plaintext of `entries`, followed in the pack by `filler` bytes of filler.
pub fn encode_toc(entries: &[PackEntry], data_hash: &[u8; 32], filler: u32) -> Vec<u8> {
    let mut e = Encoder::with_capacity(TOC_FIXED + TOC_ENTRY_LEN * entries.len());
    e.raw(&TOC_MAGIC)
        .u32(TOC_VERSION)
        .raw(data_hash)
        .u32(filler)
        .u32(entries.len() as u32);
    for x in entries {
        e.u8(x.kind as u8).raw(&x.id.0).u32(x.len).u32(x.plain_len);
    }
    e.finish()
}

/// Decodes a TOC plaintext for a pack whose TOC starts at `toc_start`, checking that the
/// blobs tile `[8, B)` exactly and the filler `[B, toc_start)`, as long as the TOC says.
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
    let filler = u64::from(d.u32()?);
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
    d.expect_end()?;
    if at + filler != toc_start {
        return Err(bad(
            "blobs and filler do not end where the table of contents starts",
        ));
    }
    if filler > CLOSING_EXTRA_MAX as u64 {
        return Err(bad(&format!(
            "{filler} bytes of filler, more than padding ever adds ({CLOSING_EXTRA_MAX})"
        )));
    }
    Ok(Toc {
        data_hash,
        entries,
        blobs_end: at,
        toc_start,
    })
}

/// The sealed length of the TOC of `n` blobs.
pub fn sealed_toc_len(n: usize) -> usize {
    // Sealed raw (see `finish`).
    blob::sealed_len(TOC_FIXED + TOC_ENTRY_LEN * n)
}

/// The size of a pack without filler, holding blobs whose sealed lengths add up to `blobs`,
/// `n` of them.
pub fn pack_len(blobs: usize, n: usize) -> usize {
    HEADER_SIZE + blobs + sealed_toc_len(n) + LOCATOR_LEN
}

/// The step of full packs' sizes beyond the target: 1/256 of it (64 KiB for 16 MiB packs).
pub fn full_step(target: usize) -> u64 {
    (target as u64 / 256).max(1)
}

/// The size of a pack handed off full: it reached the target with its last blob, and filler
/// rounds what that blob put beyond the target up to a [`full_step`]. Exactly the target
/// would leave the rest of the pack unused whenever the next blob does not fit — some 4% of
/// the space with chunks of about 1 MiB — while the step costs 0.2% and shows the host one
/// length per pack, the last blob's overshoot, to 64 KiB.
pub fn full_len(target: usize, natural: usize) -> u64 {
    let (target, natural) = (target as u64, natural as u64);
    if natural <= target {
        return target;
    }
    let step = full_step(target as usize);
    target + (natural - target).div_ceil(step) * step
}

/// The size of the last pack of a session (what a barrier stores), `natural` bytes without
/// filler, after `before` bytes of packs in the same session: the filler makes the session's
/// total reach its bucket ([`Crypto::session_len`]). It grows beyond its natural size by at
/// most the target or [`CLOSING_EXTRA_MAX`], whichever is less: a session of more than some
/// 33 packs is padded by that much at most, not by its whole bucket.
pub fn closing_len(crypto: &Crypto, target: usize, before: u64, natural: usize) -> u64 {
    let padded = crypto.session_len(before + natural as u64) - before;
    let extra = target.min(CLOSING_EXTRA_MAX) as u64;
    padded.min(natural as u64 + extra).min(MAX_PACK_LEN)
}

/// Whether a pack holding `blobs` bytes in `n` blobs takes another blob: it has not reached
/// `target` yet. (Its last blob may take it beyond; an empty pack takes any blob.)
pub fn has_room(target: usize, blobs: usize, n: usize) -> bool {
    n == 0 || pack_len(blobs, n) < target
}

/// The sizes of the packs that blobs of these sealed lengths make when added in this order to
/// a pack writer with this target and then flushed once: a pack is handed off full when a
/// blob comes after it reached the target, and the last one closes the session.
pub fn pack_sizes(
    crypto: &Crypto,
    target: usize,
    blob_lens: impl IntoIterator<Item = usize>,
) -> Vec<u64> {
    let mut sizes = Vec::new();
    let (mut blobs, mut n, mut before) = (0usize, 0usize, 0u64);
    for len in blob_lens {
        if !has_room(target, blobs, n) {
            let size = full_len(target, pack_len(blobs, n));
            sizes.push(size);
            before += size;
            (blobs, n) = (0, 0);
        }
        blobs += len;
        n += 1;
    }
    if n > 0 {
        sizes.push(closing_len(crypto, target, before, pack_len(blobs, n)));
    }
    sizes
}

/// Appends filler, the sealed TOC and the locator to the blob area in `pack`, so that the
/// pack is `total` bytes long, and returns the pack id. `entries` must describe the blobs of
/// `pack[8..]` in order, and `total` be at least the pack's size without filler.
pub fn finish(
    crypto: &Crypto,
    pack: &mut Vec<u8>,
    entries: &[PackEntry],
    total: u64,
) -> Result<PackId> {
    let mut h = crypto.pack_hasher();
    h.update(&pack[..]);
    finish_hashed(crypto, pack, entries, total, h)
}

/// [`finish`], with `h` the pack hasher that has already taken every byte of `pack` (the pack
/// writer hashes each blob as it appends it, so that the store thread, which the disk waits
/// for, does not).
pub fn finish_hashed(
    crypto: &Crypto,
    pack: &mut Vec<u8>,
    entries: &[PackEntry],
    total: u64,
    mut h: crate::crypto::suite::PackHasher,
) -> Result<PackId> {
    let natural = pack_len(pack.len() - HEADER_SIZE, entries.len()) as u64;
    if total < natural || total > MAX_PACK_LEN {
        return Err(Error::invalid(format!(
            "a pack of {natural} bytes cannot be made {total} bytes long"
        )));
    }
    let data_hash = h.clone().finalize();
    let start = pack.len();
    let filler = (total - natural) as usize;
    pack.resize(start + filler, 0);
    crypto.filler(&data_hash, &mut pack[start..]);
    // Stored raw, so that its length is the one planned for (ids do not compress anyway).
    let mut toc = Vec::with_capacity(sealed_toc_len(entries.len()));
    blob::seal_into(
        crypto,
        BlobKind::PackToc,
        &NO_ID,
        &encode_toc(entries, &data_hash, filler as u32),
        Codec::None,
        &mut toc,
    )?;
    pack.extend_from_slice(&toc);
    pack.extend_from_slice(&seal_locator(crypto, toc.len())?);
    debug_assert_eq!(pack.len() as u64, total);
    h.update(&pack[start..]);
    Ok(PackId(h.finalize()))
}

fn seal_locator(crypto: &Crypto, toc_len: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(LOCATOR_LEN);
    blob::seal_into(
        crypto,
        BlobKind::PackLocator,
        &NO_ID,
        &(toc_len as u32).to_le_bytes(),
        Codec::None,
        &mut out,
    )?;
    debug_assert_eq!(out.len(), LOCATOR_LEN);
    Ok(out)
}

/// The TOC's length, from the locator at the end of `tail` (the last bytes of a pack of
/// `size` bytes), checked against the size.
pub fn toc_len(crypto: &Crypto, tail: &[u8], size: u64, what: &str) -> Result<usize> {
    let locator = tail
        .get(tail.len().saturating_sub(LOCATOR_LEN)..)
        .filter(|l| l.len() == LOCATOR_LEN && size >= MIN_PACK_LEN as u64)
        .ok_or_else(|| Error::corrupt(what, "too short to be a pack"))?;
    let label = format!("{what}, locator");
    let plain = blob::open(crypto, BlobKind::PackLocator, &NO_ID, locator, &label)?;
    let t: [u8; 4] = plain
        .as_slice()
        .try_into()
        .map_err(|_| Error::corrupt(&label, "not 4 bytes"))?;
    let len = u64::from(u32::from_le_bytes(t));
    let room = size.saturating_sub((HEADER_SIZE + LOCATOR_LEN) as u64);
    if len < (blob::OVERHEAD + TOC_FIXED) as u64 || len > room {
        return Err(Error::corrupt(
            what,
            format!("table of contents length {len} does not fit a pack of {size} bytes"),
        ));
    }
    Ok(len as usize)
}

/// Checks what can be checked without the key: the magic, and that the pack is not smaller
/// than an empty one.
pub fn check_framing(pack: &[u8], what: &str) -> Result<()> {
    if pack.len() < HEADER_SIZE || pack[..HEADER_SIZE] != MAGIC {
        return Err(bad_magic(pack, what));
    }
    if pack.len() < MIN_PACK_LEN {
        return Err(Error::corrupt(what, "too short to be a pack"));
    }
    Ok(())
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

/// Opens the TOC of a whole pack and checks it against the pack's bytes: magic, locator and
/// TOC authenticity, tiling, the hash of the blob area and every byte of the filler. (The
/// pack's name is checked by [`verify_id`], or by [`parse_and_hash`] in the same pass.)
pub fn parse(crypto: &Crypto, pack: &[u8], what: &str) -> Result<Toc> {
    parse_and_hash(crypto, pack, what).1
}

/// [`parse`], and the pack hash of the whole pack (its id, if it is named right), computed in
/// the same pass over the bytes as the blob area's hash.
pub fn parse_and_hash(crypto: &Crypto, pack: &[u8], what: &str) -> ([u8; 32], Result<Toc>) {
    let toc = frame(crypto, pack, what)
        .and_then(|(start, t)| open_toc(crypto, &pack[start..start + t], start as u64, what));
    let split = toc.as_ref().map_or(0, |t| t.blobs_end as usize);
    let mut h = crypto.pack_hasher();
    h.update(&pack[..split]);
    let data_hash = h.clone().finalize();
    h.update(&pack[split..]);
    let full = h.finalize();
    let toc = toc.and_then(|toc| {
        if data_hash != toc.data_hash {
            return Err(Error::corrupt(
                what,
                "its blobs are not the ones its table of contents lists (damaged or forged)",
            ));
        }
        let filler = &pack[toc.blobs_end as usize..toc.toc_start as usize];
        let mut expected = vec![0u8; filler.len()];
        crypto.filler(&data_hash, &mut expected);
        if filler != expected.as_slice() {
            return Err(Error::corrupt(
                what,
                "its filler is not what the key makes of it (damaged, or data hidden in it)",
            ));
        }
        Ok(toc)
    });
    (full, toc)
}

/// Where a whole pack's TOC starts, and its length: magic and locator checked.
fn frame(crypto: &Crypto, pack: &[u8], what: &str) -> Result<(usize, usize)> {
    if pack.len() > u32::MAX as usize {
        return Err(Error::corrupt(what, "pack larger than 4 GiB"));
    }
    check_framing(pack, what)?;
    let t = toc_len(crypto, pack, pack.len() as u64, what)?;
    Ok((pack.len() - LOCATOR_LEN - t, t))
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
    let t = toc_len(crypto, &tail, size, &name)? as u64;
    if t > MAX_TOC_READ {
        return Err(Error::corrupt(
            &name,
            format!("a table of contents of {t} bytes, more than cairn reads ({MAX_TOC_READ})"),
        ));
    }
    let end = LOCATOR_LEN as u64;
    let toc_start = size - end - t;
    let sealed = if t + end <= tail_len {
        let from = (tail_len - end - t) as usize;
        tail[from..tail.len() - LOCATOR_LEN].to_vec()
    } else {
        store.get(&name, Some(ByteRange::new(toc_start, t)))?
    };
    open_toc(crypto, &sealed, toc_start, &name)
}

/// Reads a whole pack, refusing one larger than any pack can be.
pub fn read_whole(store: &dyn Store, pack: &PackId) -> Result<Vec<u8>> {
    Ok(store.get_bounded(&pack.object_name(), MAX_PACK_LEN)?)
}

/// Checks that a pack's bytes hash to its id (under the suite's pack hash).
pub fn verify_id(suite: Suite, pack: &[u8], id: &PackId) -> Result<()> {
    if PackHasher::digest(suite, pack) != id.0 {
        return Err(mismatch(suite, &id.object_name()));
    }
    Ok(())
}

/// The error of a pack whose bytes do not hash to its name.
pub fn mismatch(suite: Suite, name: &str) -> Error {
    Error::corrupt(
        name,
        format!(
            "contents do not match the pack's name ({})",
            suite.pack_hash_name()
        ),
    )
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
        return Err(mismatch(crypto.suite(), &name));
    }
    Ok(toc?.entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::blob::seal_chunk;
    use crate::store::mem::MemStore;
    use proptest::prelude::*;

    fn crypto() -> Crypto {
        Crypto::random_for_tests()
    }

    /// A repository's state in each cipher suite, by index (for property tests).
    fn crypto_of(suite: usize) -> Crypto {
        use crate::crypto::{EncryptionMode, MasterKey, Padding};
        let key = MasterKey::generate();
        Crypto::of_suite(
            EncryptionMode::Repokey,
            Suite::ALL[suite],
            &key,
            Padding::None,
        )
    }

    fn build(c: &Crypto, chunks: &[Vec<u8>]) -> (Vec<u8>, Vec<ChunkId>, PackId) {
        build_with_filler(c, chunks, 0)
    }

    fn build_with_filler(
        c: &Crypto,
        chunks: &[Vec<u8>],
        filler: u64,
    ) -> (Vec<u8>, Vec<ChunkId>, PackId) {
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
        let natural = pack_len(pack.len() - HEADER_SIZE, entries.len()) as u64;
        let id = finish(c, &mut pack, &entries, natural + filler).unwrap();
        assert_eq!(pack.len() as u64, natural + filler);
        (pack, ids, id)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn toc_recovers_every_blob(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 0..12), filler in 0u64..5000, suite in 0usize..2) {
            let c = crypto_of(suite);
            let (pack, ids, id) = build_with_filler(&c, &chunks, filler);
            prop_assert_eq!(PackId(c.pack_hash(&pack)), id);
            prop_assert!(verify_id(c.suite(), &pack, &id).is_ok());
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
            prop_assert_eq!(u64::from(end), toc.blobs_end);
            prop_assert_eq!(toc.filler_len(), filler);
            // The tail read gives the same TOC.
            let store = MemStore::new();
            store.put(&id.object_name(), &pack).unwrap();
            prop_assert_eq!(read_toc(&store, &c, &id, pack.len() as u64).unwrap(), toc);
        }

        #[test]
        fn any_change_is_detected(cut in 1usize..400, at in any::<proptest::sample::Index>(), filler in 0u64..700, suite in 0usize..2) {
            let c = crypto_of(suite);
            let (pack, _, id) = build_with_filler(&c, &[vec![1u8; 300], vec![2u8; 50]], filler);
            let short = &pack[..pack.len() - cut.min(pack.len() - 1)];
            prop_assert!(parse(&c, short, "p").is_err());
            prop_assert!(verify_id(c.suite(), short, &id).is_err());
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
        assert!(sealed_toc_len(chunks.len()) as u64 > TAIL_READ);
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
        pack[7] = 2;
        let err = parse(&c, &pack, "p").unwrap_err().to_string();
        assert!(err.contains("format 2"), "{err}");
        assert!(check_framing(b"NOTAPACK", "p").is_err());
        assert!(toc_len(&c, &[255; LOCATOR_LEN], 1000, "p").is_err());
    }

    #[test]
    fn the_toc_length_is_not_in_clear_and_filler_cannot_hide_data() {
        let c = crypto();
        let (pack, _, _) = build_with_filler(&c, &[vec![9u8; 1000], vec![8u8; 20]], 3000);
        let toc = parse(&c, &pack, "p").unwrap();
        let t = (pack.len() as u64 - LOCATOR_LEN as u64 - toc.toc_start) as u32;
        assert!(
            !pack.windows(4).any(|w| w == t.to_le_bytes()),
            "TOC length in clear"
        );
        // Whatever is written into the filler, even renamed to its new hash, is found.
        let mut hidden = pack.clone();
        hidden[toc.blobs_end as usize + 100] ^= 1;
        let err = parse(&c, &hidden, "p").unwrap_err().to_string();
        assert!(err.contains("filler"), "{err}");
        // A copy of the TOC and locator appended: the tail authenticates, but the filler it
        // implies is not the one the TOC names, so even a TOC-only read refuses it.
        let mut extended = pack.clone();
        extended.extend_from_slice(&pack[toc.toc_start as usize..]);
        let store = MemStore::new();
        let id = PackId(c.pack_hash(&extended));
        store.put(&id.object_name(), &extended).unwrap();
        let err = read_toc(&store, &c, &id, extended.len() as u64)
            .unwrap_err()
            .to_string();
        assert!(err.contains("do not end where"), "{err}");
        assert!(parse(&c, &extended, "p").is_err());
    }

    #[test]
    fn full_packs_are_the_target_in_steps_and_the_last_closes_the_session() {
        use crate::crypto::{EncryptionMode, MasterKey, Padding};
        let c = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::Buckets,
        );
        let target = 100_000;
        let lens: Vec<usize> = (0..200).map(|i| 1000 + (i * 7919) % 9000).collect();
        let sizes = pack_sizes(&c, target, lens.iter().copied());
        let (last, full) = sizes.split_last().unwrap();
        let step = full_step(target);
        assert!(
            full.iter()
                .all(|s| *s >= target as u64 && (*s - target as u64) % step == 0),
            "{sizes:?}"
        );
        let total: u64 = sizes.iter().sum();
        assert_eq!(
            c.session_len(total),
            total,
            "the session ends on its bucket"
        );
        assert!(*last <= 2 * target as u64);
        assert!(full.len() > 5);
        let none = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        );
        let plain = pack_sizes(&none, target, lens.iter().copied());
        assert_eq!(&plain[..plain.len() - 1], full);
        assert!(total - plain.iter().sum::<u64>() <= total * 3 / 100);
    }
}
