//! The blob envelope: how one chunk (or one archive object) is stored.
//!
//! ```text
//! offset size field
//!      0    4 magic "CRNB"
//!      4    1 version (1)
//!      5    1 kind (1 chunk, 2 archive)
//!      6    1 compression (0 raw, 1 lz4 block)
//!      7    1 encryption (0 none, 1 AES-256-GCM)
//!      8   32 id (chunk id / archive id)
//!     40    4 plaintext length (u32 LE)
//!     44    4 payload length (u32 LE): bytes that follow the header
//!     48   16 session id (zero when unencrypted)
//!     64    8 nonce counter (u64 LE; zero when unencrypted)
//!     72    … payload: compressed data, then the 16-byte GCM tag when encrypted
//! ```
//!
//! The 72-byte header is the AEAD's associated data, so a blob cannot be moved under another
//! id, kind or length. Unencrypted blobs are verified by recomputing the id from the
//! plaintext. A blob that fails any check is an error naming the object, never garbage.

use crate::compress::{self, Compression};
use crate::crypto::{Crypto, EncryptionMode, SESSION_ID_LEN, TAG_LEN};
use crate::error::{Error, Result};
use crate::id::ChunkId;

pub const MAGIC: [u8; 4] = *b"CRNB";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 72;
/// Largest plaintext a blob may hold. Chunks are at most 8 MiB; archive objects are small.
pub const MAX_PLAIN_LEN: usize = 256 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    Chunk = 1,
    Archive = 2,
}

impl BlobKind {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(BlobKind::Chunk),
            2 => Some(BlobKind::Archive),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobHeader {
    pub kind: BlobKind,
    pub compression: Compression,
    pub encrypted: bool,
    pub id: [u8; 32],
    pub plain_len: u32,
    pub payload_len: u32,
    pub session: [u8; SESSION_ID_LEN],
    pub nonce: u64,
}

impl BlobHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = self.kind as u8;
        h[6] = self.compression as u8;
        h[7] = u8::from(self.encrypted);
        h[8..40].copy_from_slice(&self.id);
        h[40..44].copy_from_slice(&self.plain_len.to_le_bytes());
        h[44..48].copy_from_slice(&self.payload_len.to_le_bytes());
        h[48..64].copy_from_slice(&self.session);
        h[64..72].copy_from_slice(&self.nonce.to_le_bytes());
        h
    }

    /// Parses and sanity-checks a header; needs no key.
    pub fn decode(b: &[u8], what: &str) -> Result<Self> {
        let bad = |r: &str| Error::corrupt(what, format!("blob header: {r}"));
        if b.len() < HEADER_LEN {
            return Err(bad("truncated"));
        }
        if b[0..4] != MAGIC {
            return Err(bad("bad magic"));
        }
        if b[4] != VERSION {
            return Err(bad(&format!("unknown version {}", b[4])));
        }
        let kind = BlobKind::from_byte(b[5]).ok_or_else(|| bad("unknown kind"))?;
        let compression = Compression::from_byte(b[6]).ok_or_else(|| bad("unknown compression"))?;
        let encrypted = match b[7] {
            0 => false,
            1 => true,
            _ => return Err(bad("unknown encryption")),
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut id = [0u8; 32];
        id.copy_from_slice(&b[8..40]);
        let mut session = [0u8; SESSION_ID_LEN];
        session.copy_from_slice(&b[48..64]);
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&b[64..72]);
        let h = Self {
            kind,
            compression,
            encrypted,
            id,
            plain_len: u32_at(40),
            payload_len: u32_at(44),
            session,
            nonce: u64::from_le_bytes(nonce),
        };
        let tag = if encrypted { TAG_LEN } else { 0 };
        let body = (h.payload_len as usize)
            .checked_sub(tag)
            .ok_or_else(|| bad("payload shorter than its tag"))?;
        if h.plain_len as usize > MAX_PLAIN_LEN {
            return Err(bad("plaintext length out of range"));
        }
        let consistent = match compression {
            Compression::Raw => body == h.plain_len as usize,
            Compression::Lz4 => body <= compress::max_compressed_len(h.plain_len as usize),
        };
        if !consistent {
            return Err(bad("payload length does not match plaintext length"));
        }
        if !encrypted && (h.session != [0; SESSION_ID_LEN] || h.nonce != 0) {
            return Err(bad("unencrypted blob with a session"));
        }
        Ok(h)
    }

    /// Header plus payload.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }
}

/// Compresses and encrypts `plain` into a complete blob.
pub fn seal(crypto: &Crypto, kind: BlobKind, id: &[u8; 32], plain: &[u8]) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    seal_into(crypto, kind, id, plain, &mut buf)?;
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
    buf: &mut Vec<u8>,
) -> Result<u32> {
    if plain.len() > MAX_PLAIN_LEN {
        return Err(Error::invalid(format!(
            "blob of {} bytes is too large",
            plain.len()
        )));
    }
    let encrypted = crypto.mode() == EncryptionMode::Repokey;
    let tag_len = if encrypted { TAG_LEN } else { 0 };
    let max = compress::max_compressed_len(plain.len());
    buf.resize(HEADER_LEN + max + tag_len, 0);
    let (compression, clen) =
        compress::compress_into(plain, &mut buf[HEADER_LEN..HEADER_LEN + max]);
    let (session, nonce) = if encrypted {
        (crypto.session_id(), crypto.next_nonce()?)
    } else {
        ([0u8; SESSION_ID_LEN], 0)
    };
    let header = BlobHeader {
        kind,
        compression,
        encrypted,
        id: *id,
        plain_len: plain.len() as u32,
        payload_len: (clen + tag_len) as u32,
        session,
        nonce,
    }
    .encode();
    buf[..HEADER_LEN].copy_from_slice(&header);
    if encrypted {
        let tag = crypto.seal_in_place(nonce, &header, &mut buf[HEADER_LEN..HEADER_LEN + clen]);
        buf[HEADER_LEN + clen..HEADER_LEN + clen + TAG_LEN].copy_from_slice(&tag);
    }
    buf.truncate(HEADER_LEN + clen + tag_len);
    Ok(crc32fast::hash(buf))
}

/// What to check when opening a blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Authenticated decryption only (enough to know the blob is what the writer stored).
    Auth,
    /// Also recompute the id from the plaintext (check --verify-data).
    Id,
}

/// Verifies, decrypts and decompresses a complete blob that must be `expected` of `kind`.
/// `what` names the object in errors.
pub fn open(
    crypto: &Crypto,
    kind: BlobKind,
    expected: &[u8; 32],
    blob: &[u8],
    what: &str,
    verify: Verify,
) -> Result<Vec<u8>> {
    let h = BlobHeader::decode(blob, what)?;
    if h.kind != kind {
        return Err(Error::corrupt(what, "blob is of the wrong kind"));
    }
    if h.id != *expected {
        return Err(Error::corrupt(what, "blob carries another id"));
    }
    if blob.len() != h.total_len() {
        return Err(Error::corrupt(
            what,
            format!(
                "blob is {} bytes, its header says {}",
                blob.len(),
                h.total_len()
            ),
        ));
    }
    let encrypted = crypto.mode() == EncryptionMode::Repokey;
    if h.encrypted != encrypted {
        // An unencrypted blob in an encrypted repository would bypass authentication.
        return Err(Error::corrupt(
            what,
            "blob encryption does not match the repository",
        ));
    }
    let header = &blob[..HEADER_LEN];
    let plain = if encrypted {
        let body_end = blob.len() - TAG_LEN;
        let mut body = blob[HEADER_LEN..body_end].to_vec();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&blob[body_end..]);
        if !crypto.open_in_place(&h.session, h.nonce, header, &mut body, &tag) {
            return Err(Error::corrupt(
                what,
                "authentication failed (data damaged or forged)",
            ));
        }
        compress::decompress(h.compression, &body, h.plain_len as usize, what)?
    } else {
        compress::decompress(
            h.compression,
            &blob[HEADER_LEN..],
            h.plain_len as usize,
            what,
        )?
    };
    if (verify == Verify::Id || !encrypted) && crypto.id_of(&plain).0 != *expected {
        return Err(Error::corrupt(what, "content does not match its id"));
    }
    Ok(plain)
}

/// Seals a chunk, computing its id.
pub fn seal_chunk(crypto: &Crypto, plain: &[u8]) -> Result<(ChunkId, Vec<u8>)> {
    let id = crypto.id_of(plain);
    let blob = seal(crypto, BlobKind::Chunk, &id.0, plain)?;
    Ok((id, blob))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;
    use proptest::prelude::*;

    fn crypto(mode: EncryptionMode) -> Crypto {
        let key = match mode {
            EncryptionMode::Repokey => MasterKey::generate(),
            EncryptionMode::None => MasterKey::for_unencrypted(&[3; 32]),
        };
        Crypto::new(mode, &key)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn round_trip_and_every_bit_flip_is_caught(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            zeros in 0usize..3000,
            encrypted in any::<bool>(),
            flip in any::<proptest::sample::Index>(),
        ) {
            let mode = if encrypted { EncryptionMode::Repokey } else { EncryptionMode::None };
            let c = crypto(mode);
            let mut plain = data;
            plain.extend(std::iter::repeat_n(0u8, zeros));
            let (id, blob) = seal_chunk(&c, &plain).unwrap();
            prop_assert_eq!(open(&c, BlobKind::Chunk, &id.0, &blob, "b", Verify::Auth).unwrap(), plain.clone());
            let mut bad = blob.clone();
            let bit = flip.index(bad.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(open(&c, BlobKind::Chunk, &id.0, &bad, "b", Verify::Auth).is_err());
            prop_assert!(open(&c, BlobKind::Chunk, &id.0, &blob[..blob.len() - 1], "b", Verify::Auth).is_err());
            prop_assert!(open(&c, BlobKind::Archive, &id.0, &blob, "b", Verify::Auth).is_err());
        }
    }

    #[test]
    fn header_round_trip() {
        let c = crypto(EncryptionMode::Repokey);
        let (_, blob) = seal_chunk(&c, b"hello hello hello hello").unwrap();
        let h = BlobHeader::decode(&blob, "b").unwrap();
        assert_eq!(h.encode(), blob[..HEADER_LEN]);
        assert_eq!(h.total_len(), blob.len());
    }

    #[test]
    fn unencrypted_blob_is_refused_by_encrypted_repository() {
        let key = MasterKey::generate();
        let enc = Crypto::new(EncryptionMode::Repokey, &key);
        let plain = Crypto::new(EncryptionMode::None, &key);
        let (id, blob) = seal_chunk(&plain, b"forged").unwrap();
        assert!(open(&enc, BlobKind::Chunk, &id.0, &blob, "b", Verify::Auth).is_err());
    }
}
