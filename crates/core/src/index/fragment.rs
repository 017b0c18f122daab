//! Index fragments: immutable, content-addressed pieces of the chunk index, stored as
//! `index/<sha256 of the object's bytes>`. The union of all fragments is the index.
//!
//! The object is `"CAIRNIX" 0x03` followed by the fragment sealed as a blob (kind 3, no id):
//! encrypted and authenticated, so the host can neither read which chunks a pack holds nor
//! forge an entry, and padded so that the object's length is a point of the objects' grid
//! ([`crate::crypto::buckets`]): it does not count entries. The sealed plaintext:
//!
//! ```text
//! offset   size    field
//!      0      8    magic "CAIRNIDX"
//!      8      4    version (u32 LE, 1)
//!     12      4    P: number of packs (u32 LE)
//!     16      4    E: number of entries (u32 LE)
//!     20   32·P    pack ids, ascending
//!      …   48·E    entries, ascending by chunk id:
//!                    chunk id (32) · pack number (u32, into the list above) ·
//!                    offset (u32) · length (u32) · plaintext length (u32)
//! ```

use crate::crypto::Crypto;
use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind, NO_ID};
use crate::index::StoredLoc;
use crate::util::id::{sha256, ChunkId, PackId};
use crate::util::wire::{Decoder, Encoder};

pub const MAGIC: [u8; 8] = *b"CAIRNIDX";
/// The largest fragment object a reader accepts (1 GiB of plaintext: some 20 million chunks).
pub const MAX_OBJECT_LEN: u64 = blob::MAX_PLAIN_LEN as u64 + (1 << 20);
/// The clear prefix of a fragment object.
pub const OBJECT_MAGIC: [u8; 8] = *b"CAIRNIX\x03";
pub const VERSION: u32 = 1;
const ENTRY_LEN: usize = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentEntry {
    pub id: ChunkId,
    /// Position in [`IndexFragment::packs`].
    pub pack: u32,
    pub offset: u32,
    pub len: u32,
    pub plain_len: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexFragment {
    pub packs: Vec<PackId>,
    pub entries: Vec<FragmentEntry>,
}

impl IndexFragment {
    /// Builds a fragment from stored locations only (a pending entry has no such value).
    pub fn from_entries(entries: impl IntoIterator<Item = (ChunkId, PackId, StoredLoc)>) -> Self {
        let mut raw: Vec<(ChunkId, PackId, StoredLoc)> = entries.into_iter().collect();
        raw.sort_by_key(|e| e.0);
        let mut packs: Vec<PackId> = raw.iter().map(|e| e.1).collect();
        packs.sort();
        packs.dedup();
        let entries = raw
            .iter()
            .map(|(id, pack, loc)| FragmentEntry {
                id: *id,
                pack: packs.binary_search(pack).unwrap_or(0) as u32,
                offset: loc.offset,
                len: loc.len,
                plain_len: loc.plain_len,
            })
            .collect();
        Self { packs, entries }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e =
            Encoder::with_capacity(20 + 32 * self.packs.len() + ENTRY_LEN * self.entries.len());
        e.raw(&MAGIC)
            .u32(VERSION)
            .u32(self.packs.len() as u32)
            .u32(self.entries.len() as u32);
        for p in &self.packs {
            e.raw(&p.0);
        }
        for x in &self.entries {
            e.raw(&x.id.0)
                .u32(x.pack)
                .u32(x.offset)
                .u32(x.len)
                .u32(x.plain_len);
        }
        e.finish()
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<Self> {
        let mut d = Decoder::new(bytes, what);
        d.magic(&MAGIC, "an index fragment")?;
        d.version(VERSION, "index")?;
        let np = d.u32()? as usize;
        let ne = d.u32()? as usize;
        if np
            .saturating_mul(32)
            .saturating_add(ne.saturating_mul(ENTRY_LEN))
            != d.remaining()
        {
            return Err(Error::corrupt(what, "length does not match the counts"));
        }
        let mut packs = Vec::with_capacity(np);
        for _ in 0..np {
            packs.push(PackId(d.id()?));
        }
        let mut entries = Vec::with_capacity(ne);
        for _ in 0..ne {
            let entry = FragmentEntry {
                id: ChunkId(d.id()?),
                pack: d.u32()?,
                offset: d.u32()?,
                len: d.u32()?,
                plain_len: d.u32()?,
            };
            if entry.pack as usize >= np {
                return Err(Error::corrupt(
                    what,
                    "entry names a pack outside the fragment",
                ));
            }
            entries.push(entry);
        }
        d.expect_end()?;
        Ok(Self { packs, entries })
    }

    /// The sealed object: clear magic, then the encoded fragment as a blob.
    pub fn seal(&self, crypto: &Crypto) -> Result<Vec<u8>> {
        let mut out = OBJECT_MAGIC.to_vec();
        out.extend_from_slice(&blob::seal_object(
            crypto,
            BlobKind::IndexFragment,
            &self.encode(),
            OBJECT_MAGIC.len(),
        )?);
        Ok(out)
    }

    /// Authenticates and decodes a fragment object.
    pub fn open(crypto: &Crypto, bytes: &[u8], what: &str) -> Result<Self> {
        check_object_magic(bytes, what)?;
        let plain = blob::open(
            crypto,
            BlobKind::IndexFragment,
            &NO_ID,
            &bytes[OBJECT_MAGIC.len()..],
            what,
        )?;
        Self::decode(&plain, what)
    }

    /// The object name of sealed bytes: `index/<sha256>`.
    pub fn object_name(bytes: &[u8]) -> String {
        format!("index/{}", hex::encode(sha256(bytes)))
    }
}

/// The clear framing of a fragment object (what can be checked without the key).
pub fn check_object_magic(bytes: &[u8], what: &str) -> Result<()> {
    if bytes.len() < OBJECT_MAGIC.len() + blob::OVERHEAD {
        return Err(Error::corrupt(what, "too short to be an index fragment"));
    }
    if bytes[..8] != OBJECT_MAGIC {
        if bytes[..8] == MAGIC {
            return Err(Error::corrupt(
                what,
                "an index fragment of format 1 (this cairn reads format 3)",
            ));
        }
        if bytes[..7] == OBJECT_MAGIC[..7] {
            return Err(Error::corrupt(
                what,
                format!(
                    "an index fragment of format {} (this cairn reads format 3)",
                    bytes[7]
                ),
            ));
        }
        return Err(Error::corrupt(what, "not an index fragment (bad magic)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(raw in proptest::collection::vec((any::<[u8; 32]>(), 0u8..4, any::<u32>(), any::<u32>(), any::<u32>()), 0..50)) {
            let frag = IndexFragment::from_entries(raw.iter().map(|(id, p, o, l, pl)| {
                (ChunkId(*id), PackId([*p; 32]), StoredLoc { pack: 0, offset: *o, len: *l, plain_len: *pl })
            }));
            let bytes = frag.encode();
            let back = IndexFragment::decode(&bytes, "f").unwrap();
            prop_assert_eq!(&back, &frag);
            for cut in [1usize, 7, 32, 48] {
                if cut <= bytes.len() {
                    prop_assert!(IndexFragment::decode(&bytes[..bytes.len() - cut], "f").is_err());
                }
            }
            let c = Crypto::random_for_tests();
            let sealed = frag.seal(&c).unwrap();
            prop_assert_eq!(&IndexFragment::open(&c, &sealed, "f").unwrap(), &frag);
            let mut flipped = sealed.clone();
            let at = sealed.len() / 2;
            flipped[at] ^= 4;
            prop_assert!(IndexFragment::open(&c, &flipped, "f").is_err());
            // No chunk id is readable in the object.
            for e in &frag.entries {
                prop_assert!(!sealed.windows(32).any(|w| w == e.id.0));
            }
        }
    }
}
