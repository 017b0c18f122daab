//! 32-byte identifiers: chunk ids (keyed MAC of the plaintext), pack ids (sha256 of the pack),
//! archive ids (keyed MAC of the archive object). Each is its own type so they cannot be mixed.

use std::fmt;

use crate::error::{Error, Result};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            pub const LEN: usize = 32;

            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            pub fn from_hex(s: &str) -> Result<Self> {
                let mut out = [0u8; 32];
                hex::decode_to_slice(s, &mut out)
                    .map_err(|_| Error::invalid(format!("not a valid {} id: {s:?}", $what)))?;
                Ok(Self(out))
            }

            pub fn from_slice(b: &[u8]) -> Option<Self> {
                <[u8; 32]>::try_from(b).ok().map(Self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({}…)", stringify!($name), &self.to_hex()[..12])
            }
        }
    };
}

id_type!(
    /// HMAC-SHA256(id key, plaintext) of a chunk.
    ChunkId,
    "chunk"
);
id_type!(
    /// sha256 of a pack's bytes; also its name in the store.
    PackId,
    "pack"
);
id_type!(
    /// HMAC-SHA256(id key, plaintext) of an archive object.
    ArchiveId,
    "archive"
);

impl PackId {
    /// The pack's object name: `packs/<first two hex digits>/<64 hex digits>`.
    pub fn object_name(&self) -> String {
        let h = self.to_hex();
        format!("packs/{}/{}", &h[..2], h)
    }
}

impl ArchiveId {
    pub fn object_name(&self) -> String {
        format!("archives/{}", self.to_hex())
    }
}

/// sha256 of a byte string.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_names() {
        let id = PackId([0xab; 32]);
        assert_eq!(PackId::from_hex(&id.to_hex()).unwrap(), id);
        assert!(id.object_name().starts_with("packs/ab/abab"));
        assert!(ChunkId::from_hex("zz").is_err());
        assert!(ChunkId::from_hex(&"0".repeat(63)).is_err());
    }
}
