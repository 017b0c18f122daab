//! Pack layout: an 8-byte magic, then blobs back to back, each a self-describing
//! [blob envelope](crate::blob). The pack id (and object name) is the sha256 of all its bytes.
//!
//! ```text
//! offset size field
//!      0    8 magic "CAIRNPK" + version byte 0x01
//!      8    … blob, blob, …   (each: 72-byte header + payload)
//! ```
//!
//! [`walk`] lists a pack's blobs from their plaintext headers, without the key: this is what
//! rebuilds the chunk index from packs alone.

use crate::blob::{BlobHeader, BlobKind};
use crate::error::{Error, Result};
use crate::id::{sha256, ChunkId, PackId};

pub const MAGIC: [u8; 8] = *b"CAIRNPK\x01";
pub const HEADER_SIZE: usize = MAGIC.len();

/// One blob of a pack, as its header describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    pub id: ChunkId,
    pub kind: BlobKind,
    /// Offset of the blob (its header) in the pack.
    pub offset: u32,
    /// Header plus payload.
    pub len: u32,
    pub plain_len: u32,
}

/// Lists the blobs of a complete pack. Any malformation — bad magic, a damaged header, a blob
/// running past the end, trailing bytes — is an error naming `what`.
pub fn walk(pack: &[u8], what: &str) -> Result<Vec<PackEntry>> {
    if pack.len() > u32::MAX as usize {
        return Err(Error::corrupt(what, "pack larger than 4 GiB"));
    }
    match walk_prefix(pack, what) {
        (entries, None) => Ok(entries),
        (_, Some(e)) => Err(e),
    }
}

/// Like [`walk`], but keeps the blobs before the first malformation: what a repair can still
/// try to salvage from a damaged pack. Returns the entries and the error that stopped the walk.
pub fn walk_prefix(pack: &[u8], what: &str) -> (Vec<PackEntry>, Option<Error>) {
    if pack.len() < HEADER_SIZE || pack[..HEADER_SIZE] != MAGIC {
        return (
            Vec::new(),
            Some(Error::corrupt(what, "not a pack (bad magic)")),
        );
    }
    let mut entries = Vec::new();
    let mut pos = HEADER_SIZE;
    while pos < pack.len() {
        let h = match BlobHeader::decode(&pack[pos..], &format!("{what} at offset {pos}")) {
            Ok(h) => h,
            Err(e) => return (entries, Some(e)),
        };
        let len = h.total_len();
        if pack.len() - pos < len || pos + len > u32::MAX as usize {
            let e = Error::corrupt(
                what,
                format!("blob at offset {pos} runs past the end of the pack"),
            );
            return (entries, Some(e));
        }
        entries.push(PackEntry {
            id: ChunkId(h.id),
            kind: h.kind,
            offset: pos as u32,
            len: len as u32,
            plain_len: h.plain_len,
        });
        pos += len;
    }
    (entries, None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::seal_chunk;
    use crate::crypto::{Crypto, EncryptionMode, MasterKey};
    use proptest::prelude::*;

    fn build(chunks: &[Vec<u8>]) -> (Vec<u8>, Vec<ChunkId>) {
        let c = Crypto::new(EncryptionMode::Repokey, &MasterKey::generate());
        let mut pack = MAGIC.to_vec();
        let mut ids = Vec::new();
        for ch in chunks {
            let (id, blob) = seal_chunk(&c, ch).unwrap();
            pack.extend_from_slice(&blob);
            ids.push(id);
        }
        (pack, ids)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn walk_recovers_every_blob(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 0..12)) {
            let (pack, ids) = build(&chunks);
            let entries = walk(&pack, "p").unwrap();
            prop_assert_eq!(entries.len(), chunks.len());
            let mut end = HEADER_SIZE as u32;
            for ((e, id), ch) in entries.iter().zip(&ids).zip(&chunks) {
                prop_assert_eq!(e.id, *id);
                prop_assert_eq!(e.offset, end);
                prop_assert_eq!(e.plain_len as usize, ch.len());
                end += e.len;
            }
            prop_assert_eq!(end as usize, pack.len());
        }

        #[test]
        fn truncation_is_always_detected(cut in 1usize..400) {
            // A cut inside a blob fails the walk; a cut at a blob boundary leaves a valid
            // shorter pack, which only the name (sha256) check catches. Never both pass.
            let (pack, _) = build(&[vec![1u8; 300], vec![2u8; 50]]);
            let id = PackId(sha256(&pack));
            let cut = cut.min(pack.len() - 1);
            let short = &pack[..pack.len() - cut];
            prop_assert!(walk(short, "p").is_err() || verify_id(short, &id).is_err());
            prop_assert!(verify_id(short, &id).is_err());
        }
    }

    #[test]
    fn trailing_garbage_and_bad_magic() {
        let (mut pack, _) = build(&[b"abc".to_vec()]);
        assert!(walk(&pack, "p").is_ok());
        pack.push(0);
        assert!(walk(&pack, "p").is_err());
        assert!(walk(b"NOTAPACK", "p").is_err());
        let id = PackId(sha256(&pack));
        assert!(verify_id(&pack, &id).is_ok());
        pack[9] ^= 1;
        assert!(verify_id(&pack, &id).is_err());
    }
}
