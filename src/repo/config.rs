//! The plaintext `config` object: what a reader must know before it has the key. No secrets.
//!
//! ```json
//! {"format": "cairn", "version": 1, "id": "<64 hex>", "encryption": "repokey-aes256gcm",
//!  "chunker": {"algorithm": "fastcdc-v2020", "min_size": 524288, "avg_size": 1048576,
//!              "max_size": 8388608},
//!  "pack_size": 50000000}
//! ```

use serde::{Deserialize, Serialize};

use crate::chunker::ChunkerParams;
use crate::crypto::EncryptionMode;
use crate::error::{Error, Result};

pub const FORMAT: &str = "cairn";
pub const VERSION: u32 = 1;
pub const NAME: &str = "config";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkerConfig {
    pub algorithm: String,
    #[serde(flatten)]
    pub params: ChunkerParams,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub format: String,
    pub version: u32,
    pub id: String,
    pub encryption: String,
    pub chunker: ChunkerConfig,
    pub pack_size: u64,
}

impl Config {
    pub fn new(id: [u8; 32], encryption: EncryptionMode, pack_size: u64) -> Self {
        Self {
            format: FORMAT.into(),
            version: VERSION,
            id: hex::encode(id),
            encryption: encryption.as_str().into(),
            chunker: ChunkerConfig {
                algorithm: "fastcdc-v2020".into(),
                params: ChunkerParams::DATA,
            },
            pack_size,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("config serializes");
        v.push(b'\n');
        v
    }

    /// Parses and validates a config object.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let c: Config = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(NAME, format!("not a cairn repository config: {e}")))?;
        if c.format != FORMAT {
            return Err(Error::corrupt(NAME, "not a cairn repository config"));
        }
        if c.version != VERSION {
            return Err(Error::invalid(format!(
                "repository format version {} is not supported by this cairn (it reads version {VERSION})",
                c.version
            )));
        }
        c.repo_id()?;
        c.mode()?;
        if c.chunker.algorithm != "fastcdc-v2020" {
            return Err(Error::corrupt(
                NAME,
                format!("unknown chunker {:?}", c.chunker.algorithm),
            ));
        }
        c.chunker.params.validate()?;
        if c.pack_size == 0 || c.pack_size > crate::pack::writer::MAX_PACK_SIZE as u64 {
            return Err(Error::corrupt(NAME, "pack size out of range"));
        }
        Ok(c)
    }

    pub fn repo_id(&self) -> Result<[u8; 32]> {
        let mut id = [0u8; 32];
        hex::decode_to_slice(&self.id, &mut id)
            .map_err(|_| Error::corrupt(NAME, "bad repository id"))?;
        Ok(id)
    }

    pub fn mode(&self) -> Result<EncryptionMode> {
        EncryptionMode::parse(&self.encryption).ok_or_else(|| {
            Error::corrupt(NAME, format!("unknown encryption {:?}", self.encryption))
        })
    }
}
