//! The plaintext `config` object: what a reader must know before it has the key. No secrets.
//!
//! ```json
//! {"format": "cairn", "version": 3, "id": "<64 lowercase hex>",
//!  "encryption": "repokey-aes256gcm",          (or "repokey-chacha20poly1305-blake3", "none")
//!  "chunker": {"algorithm": "fastcdc-v2020-keyed", "min_size": 524288, "avg_size": 1048576,
//!              "max_size": 8388608},
//!  "pack_size": 16777216, "padding": "none"}
//! ```
//!
//! The key file holds an authenticated copy of this object (see
//! [`crate::crypto::keyfile`]); every open compares the two field by field
//! ([`Config::differences`]), so an edit of the plaintext config is refused, naming the field.

use serde::{Deserialize, Serialize};

use crate::chunker::ChunkerParams;
use crate::crypto::{EncryptionMode, Padding, Suite};
use crate::error::{Error, Result};

pub const FORMAT: &str = "cairn";
pub const VERSION: u32 = 3;
pub const NAME: &str = "config";
pub const CHUNKER: &str = "fastcdc-v2020-keyed";
/// A config is a few hundred bytes; anything much bigger is not one.
pub const MAX_LEN: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkerConfig {
    pub algorithm: String,
    #[serde(flatten)]
    pub params: ChunkerParams,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub format: String,
    pub version: u32,
    pub id: String,
    pub encryption: String,
    pub chunker: ChunkerConfig,
    pub pack_size: u64,
    pub padding: String,
}

/// Only what is needed to refuse an old format by name before parsing the rest.
#[derive(Deserialize)]
struct Version {
    format: String,
    version: u32,
}

impl Config {
    pub fn new(
        id: [u8; 32],
        encryption: EncryptionMode,
        suite: Suite,
        pack_size: u64,
        padding: Padding,
    ) -> Self {
        Self {
            format: FORMAT.into(),
            version: VERSION,
            id: hex::encode(id),
            encryption: encryption.name(suite),
            chunker: ChunkerConfig {
                algorithm: CHUNKER.into(),
                params: ChunkerParams::DATA,
            },
            pack_size,
            padding: padding.as_str().into(),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("config serializes");
        v.push(b'\n');
        v
    }

    /// Parses and validates a config object.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        if bytes.len() > MAX_LEN {
            return Err(Error::corrupt(
                NAME,
                format!("{} bytes is too large for a config", bytes.len()),
            ));
        }
        let v: Version = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(NAME, format!("not a cairn repository config: {e}")))?;
        if v.format != FORMAT {
            return Err(Error::corrupt(NAME, "not a cairn repository config"));
        }
        if v.version == 1 || v.version == 2 {
            let why = if v.version == 1 {
                "keeps blob lengths, the index and the config away from the host"
            } else {
                "pads whole packs, index fragments and archives, so that their sizes do not \
                 give away what they hold"
            };
            return Err(Error::invalid(format!(
                "this repository has format {}, which this cairn no longer reads (it reads format \
                 {VERSION}, which {why}). Make a new repository with cairn init and back up into \
                 it.",
                v.version
            )));
        }
        if v.version != VERSION {
            return Err(Error::invalid(format!(
                "repository format version {} is not supported by this cairn (it reads version {VERSION})",
                v.version
            )));
        }
        let c: Config = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(NAME, format!("not a cairn repository config: {e}")))?;
        c.repo_id()?;
        c.mode()?;
        c.padding()?;
        if c.chunker.algorithm != CHUNKER {
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

    /// The repository id. Only one spelling is accepted (64 lowercase hex digits), so the
    /// id cannot be written two ways that decode alike but name different cache directories.
    pub fn repo_id(&self) -> Result<[u8; 32]> {
        let canonical = self.id.len() == 64
            && self
                .id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let mut id = [0u8; 32];
        if !canonical || hex::decode_to_slice(&self.id, &mut id).is_err() {
            return Err(Error::corrupt(
                NAME,
                "the repository id must be 64 lowercase hexadecimal digits",
            ));
        }
        Ok(id)
    }

    pub fn padding(&self) -> Result<Padding> {
        Padding::parse(&self.padding)
            .ok_or_else(|| Error::corrupt(NAME, format!("unknown padding {:?}", self.padding)))
    }

    /// The fields in which this config differs from `authentic` (the copy in the key file),
    /// as "field: this → authentic".
    pub fn differences(&self, authentic: &Config) -> Vec<String> {
        let mut d = Vec::new();
        let mut cmp = |field: &str, ours: String, theirs: String| {
            if ours != theirs {
                d.push(format!("{field} is {ours} here but {theirs} in the key"));
            }
        };
        cmp("format", self.format.clone(), authentic.format.clone());
        cmp(
            "version",
            self.version.to_string(),
            authentic.version.to_string(),
        );
        cmp("id", self.id.clone(), authentic.id.clone());
        cmp(
            "encryption",
            self.encryption.clone(),
            authentic.encryption.clone(),
        );
        cmp(
            "chunker algorithm",
            self.chunker.algorithm.clone(),
            authentic.chunker.algorithm.clone(),
        );
        let (p, q) = (self.chunker.params, authentic.chunker.params);
        cmp(
            "chunker min_size",
            p.min_size.to_string(),
            q.min_size.to_string(),
        );
        cmp(
            "chunker avg_size",
            p.avg_size.to_string(),
            q.avg_size.to_string(),
        );
        cmp(
            "chunker max_size",
            p.max_size.to_string(),
            q.max_size.to_string(),
        );
        cmp(
            "pack_size",
            self.pack_size.to_string(),
            authentic.pack_size.to_string(),
        );
        cmp("padding", self.padding.clone(), authentic.padding.clone());
        d
    }

    pub fn mode(&self) -> Result<EncryptionMode> {
        Ok(self.encryption()?.0)
    }

    /// The cipher suite (the first one for an unencrypted repository).
    pub fn suite(&self) -> Result<Suite> {
        Ok(self.encryption()?.1)
    }

    fn encryption(&self) -> Result<(EncryptionMode, Suite)> {
        EncryptionMode::parse_with_suite(&self.encryption).ok_or_else(|| {
            Error::corrupt(NAME, format!("unknown encryption {:?}", self.encryption))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::new(
            [0xab; 32],
            EncryptionMode::Repokey,
            Suite::Aes256Gcm,
            1_000_000,
            Padding::None,
        )
    }

    #[test]
    fn round_trip_and_canonical_id() {
        let c = config();
        assert_eq!(Config::parse(&c.to_bytes()).unwrap(), c);
        let upper = Config {
            id: c.id.to_uppercase(),
            ..c.clone()
        };
        let err = Config::parse(&upper.to_bytes()).unwrap_err().to_string();
        assert!(err.contains("lowercase"), "{err}");
    }

    #[test]
    fn formats_1_and_2_are_refused_by_name() {
        let v1 = br#"{"format":"cairn","version":1,"id":"00","encryption":"none","chunker":{},"pack_size":1}"#;
        let err = Config::parse(v1).unwrap_err().to_string();
        assert!(err.contains("format 1"), "{err}");
        let v2 = br#"{"format":"cairn","version":2,"id":"00","encryption":"none","chunker":{},"pack_size":1,"padding":"padme"}"#;
        let err = Config::parse(v2).unwrap_err().to_string();
        assert!(
            err.contains("format 2") && err.contains("reads format 3"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_and_differences_are_named() {
        let mut v: serde_json::Value = serde_json::from_slice(&config().to_bytes()).unwrap();
        v["extra"] = serde_json::json!(1);
        assert!(Config::parse(&serde_json::to_vec(&v).unwrap()).is_err());
        let edited = Config {
            pack_size: 1000,
            ..config()
        };
        let d = edited.differences(&config());
        assert_eq!(
            d,
            vec!["pack_size is 1000 here but 1000000 in the key".to_string()]
        );
        assert!(config().differences(&config()).is_empty());
    }
}
