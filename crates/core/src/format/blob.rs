//! The blob envelope: how one chunk, archive object, index fragment or pack table of contents
//! is sealed.
//!
//! ```text
//! offset size field
//!      0   32 masked header: AES-256-CBC(header key, zero IV) of
//!             nonce counter (u64 LE) ‖ session id (16) ‖ 8 zero bytes
//!     32    n AES-256-GCM ciphertext (session key, nonce = counter ‖ 0u32) of:
//!                 0  1 compression (0 raw, 1 lz4 block, 2 zstd frame)
//!                 1  4 plaintext length (u32 LE)
//!                 5  4 body length (u32 LE): compressed bytes that follow
//!                 9  … body, then zero bytes of padding up to the blob's padded length
//!   32+n   16 GCM tag
//! ```
//!
//! Nothing about the blob is in clear: its kind, id, compression and lengths are either
//! associated data the reader already knows (`"cairn blob v2" ‖ kind ‖ id`) or inside the
//! ciphertext, and the masked header looks random (see [`Crypto::mask_header`]), so blob
//! boundaries cannot be found in a pack without the key. A blob moved under another id or
//! kind fails to authenticate; a chunk's id is recomputed from its plaintext on every read.
//! A blob that fails any check is an error naming the object, never garbage.

use crate::crypto::{Crypto, MASKED_HEADER_LEN, TAG_LEN};
use crate::error::{Error, Result};
use crate::format::compress::{self, Codec, Compression};
use crate::util::id::ChunkId;

/// Length of the inner header (compression, plaintext length, body length).
pub const INNER_LEN: usize = 9;
/// Bytes a blob adds to its compressed contents (without padding).
pub const OVERHEAD: usize = MASKED_HEADER_LEN + INNER_LEN + TAG_LEN;
/// Largest plaintext a blob may hold. Chunks are at most 8 MiB; metadata objects are small,
/// but an index fragment of a large repository can be hundreds of megabytes.
pub const MAX_PLAIN_LEN: usize = 1 << 30;

const AAD_LABEL: &[u8; 13] = b"cairn blob v3";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlobKind {
    Chunk = 1,
    Archive = 2,
    IndexFragment = 3,
    PackToc = 4,
    Retirement = 5,
    /// A pack's last bytes: where its table of contents starts.
    PackLocator = 6,
}

impl BlobKind {
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(BlobKind::Chunk),
            2 => Some(BlobKind::Archive),
            3 => Some(BlobKind::IndexFragment),
            4 => Some(BlobKind::PackToc),
            5 => Some(BlobKind::Retirement),
            6 => Some(BlobKind::PackLocator),
            _ => None,
        }
    }
}

/// The id bound into objects that are not chunks (they are named by the sha256 of their
/// sealed bytes instead; kind alone keeps them apart).
pub const NO_ID: [u8; 32] = [0; 32];

fn aad(kind: BlobKind, id: &[u8; 32]) -> [u8; 46] {
    let mut a = [0u8; 46];
    a[..13].copy_from_slice(AAD_LABEL);
    a[13] = kind as u8;
    a[14..].copy_from_slice(id);
    a
}

/// The sealed length of a blob whose compressed body is `body_len` bytes. Blobs are not
/// padded one by one: whole objects are (packs, fragments, archives; see
/// [`crate::crypto::buckets`]).
pub fn sealed_len(body_len: usize) -> usize {
    OVERHEAD + body_len
}

/// Compresses (lz4) and encrypts `plain` into a complete blob.
pub fn seal(crypto: &Crypto, kind: BlobKind, id: &[u8; 32], plain: &[u8]) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    seal_into(crypto, kind, id, plain, Codec::Lz4, &mut buf)?;
    Ok(buf)
}

/// Like [`seal`], writing into `buf`, whose allocation is reused: only growth beyond its
/// current length is zeroed, so a recycled buffer costs neither page faults nor a memset.
/// Returns the CRC-32 of the finished blob, taken right after encryption, for the pack
/// writer's check before the blob is stored.
pub fn seal_into(
    crypto: &Crypto,
    kind: BlobKind,
    id: &[u8; 32],
    plain: &[u8],
    codec: Codec,
    buf: &mut Vec<u8>,
) -> Result<u32> {
    let (compression, clen) = compress_for_sealing(plain, codec, buf)?;
    let total = OVERHEAD + clen;
    finish_sealing(crypto, kind, id, compression, plain.len(), clen, total, buf)
}

/// Compresses `plain` into `buf` after the room for the headers (reusing `buf`'s allocation,
/// with room for the worst case and the tag, so nothing reallocates while sealing): returns
/// the compression used and the compressed length.
fn compress_for_sealing(
    plain: &[u8],
    codec: Codec,
    buf: &mut Vec<u8>,
) -> Result<(Compression, usize)> {
    if plain.len() > MAX_PLAIN_LEN {
        return Err(Error::invalid(format!(
            "blob of {} bytes is too large",
            plain.len()
        )));
    }
    const BODY: usize = MASKED_HEADER_LEN + INNER_LEN;
    let max = compress::max_compressed_len(plain.len());
    let room = OVERHEAD + max;
    if buf.capacity() < room {
        buf.reserve_exact(room.saturating_sub(buf.len()));
    }
    buf.resize(BODY + max, 0);
    Ok(compress::compress_into(
        plain,
        &mut buf[BODY..BODY + max],
        codec,
    ))
}

/// Seals a metadata object's contents (`kind` without an id) after a clear prefix of
/// `prefix` bytes, with zero padding inside the ciphertext so that the whole object is as
/// long as [`Crypto::object_len`] says: its length tells the host a bucket, not a count.
pub fn seal_object(
    crypto: &Crypto,
    kind: BlobKind,
    plain: &[u8],
    prefix: usize,
) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let (compression, clen) = compress_for_sealing(plain, Codec::Lz4, &mut buf)?;
    let total = crypto.object_len((prefix + OVERHEAD + clen) as u64) as usize - prefix;
    finish_sealing(
        crypto,
        kind,
        &NO_ID,
        compression,
        plain.len(),
        clen,
        total,
        &mut buf,
    )?;
    Ok(buf)
}

/// Seals a body compressed elsewhere (a chunk opened with [`open_compressed`] in another
/// repository, for `copy`): encrypted under this repository's keys, not compressed again.
pub fn seal_compressed_into(
    crypto: &Crypto,
    kind: BlobKind,
    id: &[u8; 32],
    opened: &Opened,
    buf: &mut Vec<u8>,
) -> Result<u32> {
    let body = opened.body();
    if opened.plain.len() > MAX_PLAIN_LEN || body.len() > MAX_PLAIN_LEN {
        return Err(Error::invalid(format!(
            "blob of {} bytes is too large",
            opened.plain.len()
        )));
    }
    const BODY: usize = MASKED_HEADER_LEN + INNER_LEN;
    buf.clear();
    buf.reserve_exact(sealed_len(body.len()));
    buf.resize(BODY, 0);
    buf.extend_from_slice(body);
    let compression = opened.compression;
    finish_sealing(
        crypto,
        kind,
        id,
        compression,
        opened.plain.len(),
        body.len(),
        OVERHEAD + body.len(),
        buf,
    )
}

/// Completes a blob whose compressed body of `clen` bytes follows the header's room in `buf`:
/// pads with zeros to `total` bytes in all, writes the inner header, encrypts and appends the
/// tag. Returns the blob's CRC-32.
#[allow(clippy::too_many_arguments)]
fn finish_sealing(
    crypto: &Crypto,
    kind: BlobKind,
    id: &[u8; 32],
    compression: Compression,
    plain_len: usize,
    clen: usize,
    total: usize,
    buf: &mut Vec<u8>,
) -> Result<u32> {
    const BODY: usize = MASKED_HEADER_LEN + INNER_LEN;
    debug_assert!(total >= OVERHEAD + clen);
    buf.truncate(BODY + clen);
    buf.resize(total - TAG_LEN, 0);
    buf[MASKED_HEADER_LEN] = compression as u8;
    buf[MASKED_HEADER_LEN + 1..MASKED_HEADER_LEN + 5]
        .copy_from_slice(&(plain_len as u32).to_le_bytes());
    buf[MASKED_HEADER_LEN + 5..BODY].copy_from_slice(&(clen as u32).to_le_bytes());
    let nonce = crypto.next_nonce()?;
    buf[..MASKED_HEADER_LEN].copy_from_slice(&crypto.mask_header(nonce));
    let tag = crypto.seal_in_place(nonce, &aad(kind, id), &mut buf[MASKED_HEADER_LEN..]);
    buf.extend_from_slice(&tag);
    Ok(crc32fast::hash(buf))
}

/// Verifies, decrypts and decompresses a complete blob that must be `expected` of `kind`;
/// a chunk's id is recomputed from the plaintext. `what` names the object in errors.
pub fn open(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
) -> Result<Vec<u8>> {
    // The decrypted body goes into this thread's scratch buffer, used again by its next blob:
    // a fresh one for each blob had the kernel map and zero its pages every time. (Taken out
    // while in use, so that a nested call would only find it empty.)
    let mut body = SCRATCH.take();
    let opened = decrypt_into(crypto, kind, expected, blob, what, &mut body);
    let plain = match opened {
        // A raw body is the plaintext. When it fills most of the buffer, the buffer itself
        // is handed out, as before the scratch buffer (a copy would double the memory of a
        // large raw blob, such as an index fragment), and the thread's next blob starts a new
        // one; otherwise it is copied out, so that a small chunk does not come back holding
        // the capacity of the largest body decrypted before it (a cache that counts lengths
        // would hold far more than it counts).
        Ok((Compression::Raw, _, end)) if body.capacity() <= 2 * end => {
            body.truncate(end);
            body.drain(..INNER_LEN);
            Ok(body)
        }
        Ok((Compression::Raw, _, end)) => {
            let plain = body[INNER_LEN..end].to_vec();
            if body.capacity() <= MAX_SCRATCH {
                SCRATCH.set(body);
            }
            Ok(plain)
        }
        Ok((compression, plain_len, end)) => {
            let plain = compress::decompress(compression, &body[INNER_LEN..end], plain_len, what);
            if body.capacity() <= MAX_SCRATCH {
                SCRATCH.set(body);
            }
            plain
        }
        Err(e) => {
            if body.capacity() <= MAX_SCRATCH {
                SCRATCH.set(body);
            }
            Err(e)
        }
    };
    let plain = plain?;
    check_chunk_id(crypto, kind, expected, &plain, what)?;
    Ok(plain)
}

/// [`open`] into `out` at `at`: the blob's plaintext, which must be `len` bytes long (the
/// item says how long each chunk is), replaces `out[at..at + len]`; `out` grows to hold it
/// only once the blob is authenticated and says that length, so that an item that lies about
/// lengths costs no memory. On an error that range holds nothing of use.
pub fn open_into(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
    (out, at, len): (&mut Vec<u8>, usize, usize),
) -> Result<()> {
    let mut body = SCRATCH.take();
    let opened = decrypt_into(crypto, kind, expected, blob, what, &mut body).and_then(
        |(compression, plain_len, end)| {
            if plain_len != len {
                return Err(Error::corrupt(
                    what,
                    format!("has {plain_len} bytes, the item says {len}"),
                ));
            }
            let range = at..at + len;
            if out.len() < range.end {
                out.resize(range.end, 0);
            }
            compress::decompress_into(compression, &body[INNER_LEN..end], &mut out[range], what)
        },
    );
    if body.capacity() <= MAX_SCRATCH {
        SCRATCH.set(body);
    }
    opened?;
    check_chunk_id(crypto, kind, expected, &out[at..at + len], what)
}

thread_local! {
    /// A thread's buffer for decrypted blob bodies ([`open`]).
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The largest scratch buffer a thread keeps between blobs: a chunk's body (chunks are at most
/// a few MiB); a larger one, say a big metadata blob's, is freed.
const MAX_SCRATCH: usize = 32 << 20;

/// A blob opened with its compressed body kept, so that it can be sealed again under other
/// keys without compressing it again ([`seal_compressed_into`]).
pub struct Opened {
    pub plain: Vec<u8>,
    pub compression: Compression,
    /// The decrypted body: the inner header, then the compressed bytes up to `end`.
    body: Vec<u8>,
    end: usize,
}

impl Opened {
    /// The compressed bytes (the plaintext itself when stored raw).
    pub fn body(&self) -> &[u8] {
        &self.body[INNER_LEN..self.end]
    }
}

/// Like [`open`], keeping the compressed body beside the plaintext.
pub fn open_compressed(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
) -> Result<Opened> {
    let (compression, plain_len, body, end) = decrypt(crypto, kind, expected, blob, what)?;
    let plain = match compression {
        Compression::Raw => body[INNER_LEN..end].to_vec(),
        Compression::Lz4 | Compression::Zstd => {
            compress::decompress(compression, &body[INNER_LEN..end], plain_len, what)?
        }
    };
    check_chunk_id(crypto, kind, expected, &plain, what)?;
    Ok(Opened {
        plain,
        compression,
        body,
        end,
    })
}

/// Authenticates and decrypts a blob and checks its inner header: returns the compression,
/// the plaintext length, the decrypted body (inner header first) and where its compressed
/// bytes end.
fn decrypt(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
) -> Result<(Compression, usize, Vec<u8>, usize)> {
    let mut body = Vec::new();
    let (compression, plain_len, end) =
        decrypt_into(crypto, kind, expected, blob, what, &mut body)?;
    Ok((compression, plain_len, body, end))
}

/// Authenticates and decrypts `blob` into `body` (its contents replaced): the inner header,
/// then the compressed bytes up to the `end` returned, then zeros. Returns the compression and
/// the plaintext's length too.
fn decrypt_into(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
    body: &mut Vec<u8>,
) -> Result<(Compression, usize, usize)> {
    let bad = |r: &str| Error::corrupt(what, r.to_string());
    if blob.len() < OVERHEAD {
        return Err(bad("too short to be a blob"));
    }
    let (session, nonce) = crypto
        .unmask_header(blob)
        .ok_or_else(|| bad("blob header does not decode (damaged, or not of this repository)"))?;
    let body_end = blob.len() - TAG_LEN;
    body.clear();
    body.extend_from_slice(&blob[MASKED_HEADER_LEN..body_end]);
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&blob[body_end..]);
    if !crypto.open_in_place(&session, nonce, &aad(kind, expected), body, &tag) {
        return Err(bad("authentication failed (data damaged or forged)"));
    }
    let u32_at = |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
    let compression = Compression::from_byte(body[0]).ok_or_else(|| bad("unknown compression"))?;
    let plain_len = u32_at(1) as usize;
    let clen = u32_at(5) as usize;
    if plain_len > MAX_PLAIN_LEN {
        return Err(bad("plaintext length out of range"));
    }
    let end = INNER_LEN
        .checked_add(clen)
        .filter(|e| *e <= body.len())
        .ok_or_else(|| bad("body longer than the blob"))?;
    if body[end..].iter().any(|b| *b != 0) {
        return Err(bad("padding is not zero"));
    }
    if compression == Compression::Raw && clen != plain_len {
        return Err(bad("raw body has the wrong length"));
    }
    Ok((compression, plain_len, end))
}

fn check_chunk_id(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    plain: &[u8],
    what: &str,
) -> Result<()> {
    if kind == BlobKind::Chunk && crypto.id_of(plain).0 != *expected {
        return Err(Error::corrupt(what, "content does not match its id"));
    }
    Ok(())
}

/// Seals a chunk, computing its id.
pub fn seal_chunk(crypto: &Crypto, plain: &[u8]) -> Result<(ChunkId, Vec<u8>)> {
    let id = crypto.id_of(plain);
    let blob = seal(crypto, BlobKind::Chunk, &id.0, plain)?;
    Ok((id, blob))
}

/// One blob of a pack, as its TOC describes it (and as the index settles it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    pub id: ChunkId,
    pub kind: BlobKind,
    /// Offset of the blob in the pack.
    pub offset: u32,
    /// Sealed length.
    pub len: u32,
    pub plain_len: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{EncryptionMode, MasterKey, Padding};
    use proptest::prelude::*;

    fn crypto(padding: Padding) -> Crypto {
        Crypto::new(EncryptionMode::Repokey, &MasterKey::generate(), padding)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// `open_into` writes exactly what `open` returns, at the offset given, into a buffer
        /// that held other bytes, and nothing else of the buffer changes; the same blob
        /// opened again by `open` (after the scratch buffer was used) reads the same.
        #[test]
        fn opened_into_a_used_buffer_reads_as_opened(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            zeros in 0usize..3000,
            codec in 0usize..3,
            at in 0usize..100,
            held in 0usize..8000,
        ) {
            let c = crypto(Padding::Buckets);
            let mut plain = data;
            plain.extend(std::iter::repeat_n(0u8, zeros));
            let codec = [Codec::None, Codec::Lz4, Codec::Zstd(3)][codec];
            let id = c.id_of(&plain);
            let mut sealed = Vec::new();
            seal_into(&c, BlobKind::Chunk, &id.0, &plain, codec, &mut sealed).unwrap();
            let mut out = vec![0x5a; held];
            open_into(&c, BlobKind::Chunk, &id.0, &sealed, "b", (&mut out, at, plain.len())).unwrap();
            prop_assert_eq!(out.len(), held.max(at + plain.len()));
            prop_assert_eq!(&out[at..at + plain.len()], &plain[..]);
            prop_assert!(out[..at.min(held)].iter().all(|b| *b == 0x5a));
            prop_assert!(out.get(at + plain.len()..).unwrap_or(&[]).iter().all(|b| *b == 0x5a));
            prop_assert_eq!(open(&c, BlobKind::Chunk, &id.0, &sealed, "b").unwrap(), plain);
        }
    }

    /// A small raw chunk opened after a large body comes back with about its own capacity,
    /// not the scratch buffer's (a cache that counts lengths must not hold more than it counts).
    #[test]
    fn a_small_raw_chunk_does_not_keep_a_large_buffer() {
        let c = crypto(Padding::None);
        let big: Vec<u8> = (0..4u32 << 20).map(|i| (i % 7) as u8).collect();
        let big_id = c.id_of(&big);
        let mut sealed = Vec::new();
        seal_into(
            &c,
            BlobKind::Chunk,
            &big_id.0,
            &big,
            Codec::Lz4,
            &mut sealed,
        )
        .unwrap();
        assert_eq!(
            open(&c, BlobKind::Chunk, &big_id.0, &sealed, "b").unwrap(),
            big
        );
        let small: Vec<u8> = (0..2000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let small_id = c.id_of(&small);
        let mut raw = Vec::new();
        seal_into(
            &c,
            BlobKind::Chunk,
            &small_id.0,
            &small,
            Codec::None,
            &mut raw,
        )
        .unwrap();
        let plain = open(&c, BlobKind::Chunk, &small_id.0, &raw, "b").unwrap();
        assert_eq!(plain, small);
        assert!(plain.capacity() < 4 * small.len(), "{}", plain.capacity());
    }

    /// A length the item gives that the blob does not have is refused before `out` grows: an
    /// item that lies about lengths costs no memory. A damaged blob is refused too.
    #[test]
    fn open_into_refuses_another_length_before_it_allocates() {
        let c = crypto(Padding::None);
        let plain = vec![3u8; 5000];
        let id = c.id_of(&plain);
        let mut sealed = Vec::new();
        seal_into(&c, BlobKind::Chunk, &id.0, &plain, Codec::Lz4, &mut sealed).unwrap();
        for len in [0, 4999, 5001, u32::MAX as usize] {
            let mut out = Vec::new();
            let got = open_into(&c, BlobKind::Chunk, &id.0, &sealed, "b", (&mut out, 0, len));
            assert!(got.is_err(), "{len}");
            assert_eq!(out.capacity(), 0, "{len}: nothing allocated");
        }
        let mut bad = sealed.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 1;
        let mut out = Vec::new();
        assert!(open_into(&c, BlobKind::Chunk, &id.0, &bad, "b", (&mut out, 0, 5000)).is_err());
        assert_eq!(out.capacity(), 0);
        // A blob whose plaintext is not what its id says fails the id check.
        let other = c.id_of(b"other");
        assert!(open_into(
            &c,
            BlobKind::Chunk,
            &other.0,
            &sealed,
            "b",
            (&mut out, 0, 5000)
        )
        .is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// What `copy` does: a chunk opened under one repository's keys and sealed under
        /// another's keeps its compressed bytes, reads back the same, and only under the new
        /// keys.
        #[test]
        fn resealed_under_other_keys_reads_back(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            zeros in 0usize..3000,
            codec in 0usize..3,
            buckets in any::<bool>(),
        ) {
            let (from, to) = (crypto(Padding::Buckets), crypto(if buckets { Padding::Buckets } else { Padding::None }));
            let mut plain = data;
            plain.extend(std::iter::repeat_n(0u8, zeros));
            let codec = [Codec::None, Codec::Lz4, Codec::Zstd(3)][codec];
            let id = from.id_of(&plain);
            let mut sealed = Vec::new();
            seal_into(&from, BlobKind::Chunk, &id.0, &plain, codec, &mut sealed).unwrap();
            let opened = open_compressed(&from, BlobKind::Chunk, &id.0, &sealed, "b").unwrap();
            prop_assert_eq!(&opened.plain, &plain);
            let new_id = to.id_of(&plain);
            let mut again = Vec::new();
            let crc = seal_compressed_into(&to, BlobKind::Chunk, &new_id.0, &opened, &mut again).unwrap();
            prop_assert_eq!(crc, crc32fast::hash(&again));
            prop_assert_eq!(again.len(), OVERHEAD + opened.body().len());
            prop_assert_eq!(open(&to, BlobKind::Chunk, &new_id.0, &again, "b").unwrap(), plain.clone());
            let reopened = open_compressed(&to, BlobKind::Chunk, &new_id.0, &again, "b").unwrap();
            prop_assert_eq!(reopened.compression, opened.compression);
            prop_assert_eq!(reopened.body(), opened.body());
            prop_assert!(open(&from, BlobKind::Chunk, &id.0, &again, "b").is_err());
        }

        #[test]
        fn round_trip_and_every_bit_flip_is_caught(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            zeros in 0usize..3000,
            buckets in any::<bool>(),
            flip in any::<proptest::sample::Index>(),
        ) {
            let c = crypto(if buckets { Padding::Buckets } else { Padding::None });
            let mut plain = data;
            plain.extend(std::iter::repeat_n(0u8, zeros));
            let (id, blob) = seal_chunk(&c, &plain).unwrap();
            prop_assert_eq!(open(&c, BlobKind::Chunk, &id.0, &blob, "b").unwrap(), plain.clone());
            let mut bad = blob.clone();
            let bit = flip.index(bad.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(open(&c, BlobKind::Chunk, &id.0, &bad, "b").is_err());
            prop_assert!(open(&c, BlobKind::Chunk, &id.0, &blob[..blob.len() - 1], "b").is_err());
            prop_assert!(open(&c, BlobKind::Archive, &id.0, &blob, "b").is_err());
            let mut other = id.0;
            other[0] ^= 1;
            prop_assert!(open(&c, BlobKind::Chunk, &other, &blob, "b").is_err());
        }
    }

    #[test]
    fn lengths_are_not_in_clear() {
        // A 6-byte chunk and a 1000-byte one: neither length, nor the id, appears anywhere
        // in the sealed bytes.
        let c = crypto(Padding::None);
        for len in [6usize, 1000] {
            let plain = vec![7u8; len];
            let (id, blob) = seal_chunk(&c, &plain).unwrap();
            let le = (len as u32).to_le_bytes();
            assert!(!blob.windows(4).any(|w| w == le), "length {len} in clear");
            assert!(!blob.windows(8).any(|w| w == &id.0[..8]));
        }
    }

    #[test]
    fn a_blob_of_another_key_or_session_state_is_refused() {
        let a = crypto(Padding::None);
        let b = crypto(Padding::None);
        let (id, blob) = seal_chunk(&a, b"forged?").unwrap();
        assert!(open(&b, BlobKind::Chunk, &id.0, &blob, "b").is_err());
        // Headers swapped between two blobs of one session: both refused.
        let (id1, b1) = seal_chunk(&a, b"first blob").unwrap();
        let (id2, b2) = seal_chunk(&a, b"other blob").unwrap();
        let mut x = b1.clone();
        x[..32].copy_from_slice(&b2[..32]);
        let mut y = b2.clone();
        y[..32].copy_from_slice(&b1[..32]);
        assert!(open(&a, BlobKind::Chunk, &id1.0, &x, "b").is_err());
        assert!(open(&a, BlobKind::Chunk, &id2.0, &y, "b").is_err());
    }

    #[test]
    fn unencrypted_mode_is_the_same_format_under_public_keys() {
        let repo = [3u8; 32];
        let a = Crypto::new(
            EncryptionMode::None,
            &MasterKey::for_unencrypted(&repo),
            Padding::None,
        );
        let b = Crypto::new(
            EncryptionMode::None,
            &MasterKey::for_unencrypted(&repo),
            Padding::None,
        );
        let (id, blob) = seal_chunk(&a, b"plain enough").unwrap();
        assert_eq!(
            open(&b, BlobKind::Chunk, &id.0, &blob, "b").unwrap(),
            b"plain enough"
        );
    }

    #[test]
    fn objects_are_padded_to_their_bucket_and_stay_readable() {
        let plain: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
        let none = crypto(Padding::None);
        let sealed = seal_object(&none, BlobKind::Archive, &plain, 8).unwrap();
        assert_eq!(sealed.len(), OVERHEAD + plain.len(), "no padding");
        let c = crypto(Padding::Buckets);
        for prefix in [0, 8] {
            let sealed = seal_object(&c, BlobKind::Archive, &plain, prefix).unwrap();
            let whole = (sealed.len() + prefix) as u64;
            assert!(sealed.len() >= plain.len() + OVERHEAD);
            assert_eq!(c.object_len(whole), whole, "a bucket's point");
            assert_eq!(
                open(&c, BlobKind::Archive, &NO_ID, &sealed, "b").unwrap(),
                plain
            );
            // The padding is authenticated: a byte of it changed is refused.
            let mut bad = sealed.clone();
            let at = bad.len() - TAG_LEN - 1;
            bad[at] ^= 1;
            assert!(open(&c, BlobKind::Archive, &NO_ID, &bad, "b").is_err());
        }
    }
}
