//! Entry points for fuzzing the decoders of everything cairn reads from a repository. Each
//! takes arbitrary bytes and must neither panic nor hang nor allocate without bound; errors
//! are the expected outcome. Used by the cargo-fuzz targets in `fuzz/` and by the regression
//! test that replays saved crashers (`tests/fuzz_regressions.rs`).

use std::sync::OnceLock;

use crate::archive::item::Item;
use crate::archive::stream::ItemReader;
use crate::archive::ArchiveMeta;
use crate::blob::{self, BlobHeader, BlobKind, Verify};
use crate::crypto::keyfile::KeyFile;
use crate::crypto::{Crypto, EncryptionMode, MasterKey};
use crate::index::fragment::IndexFragment;
use crate::pack::format;
use crate::repo::config::Config;

fn cryptos() -> &'static [Crypto; 2] {
    static C: OnceLock<[Crypto; 2]> = OnceLock::new();
    C.get_or_init(|| {
        let key = MasterKey {
            enc_key: [7; 32],
            id_key: [9; 32],
            chunker_seed: 1,
        };
        [
            Crypto::with_session(EncryptionMode::Repokey, &key, [1; 16]),
            Crypto::with_session(EncryptionMode::None, &key, [0; 16]),
        ]
    })
}

/// A pack, walked without the key.
pub fn pack_walk(data: &[u8]) {
    let _ = format::walk(data, "fuzz");
    let _ = format::walk_prefix(data, "fuzz");
}

/// A blob: header parsing, then authenticated opening under both encryption modes.
pub fn blob_open(data: &[u8]) {
    let Ok(h) = BlobHeader::decode(data, "fuzz") else {
        return;
    };
    for c in cryptos() {
        for kind in [BlobKind::Chunk, BlobKind::Archive] {
            let _ = blob::open(c, kind, &h.id, data, "fuzz", Verify::Id);
        }
    }
}

/// An index fragment.
pub fn index_fragment(data: &[u8]) {
    let _ = IndexFragment::decode(data, "fuzz");
}

/// An archive object's plaintext, and an item stream (as one chunk, and split in two).
pub fn archive(data: &[u8]) {
    let _ = ArchiveMeta::decode(data, "fuzz");
    let _ = Item::decode(data);
    let half = data.len() / 2;
    let chunks = [data[..half].to_vec(), data[half..].to_vec()];
    let refs = chunks
        .iter()
        .map(|c| crate::archive::item::ChunkRef {
            id: crate::id::ChunkId([0; 32]),
            len: c.len() as u32,
        })
        .collect();
    let mut next = 0;
    let reader = ItemReader::new(refs, |_| {
        next += 1;
        Ok(chunks[next - 1].clone())
    });
    for item in reader.take(100_000) {
        if item.is_err() {
            break;
        }
    }
}

/// A key file and a config object. The KDF runs only with small costs (the parameters are
/// bounded anyway; the fuzzer need not spend its time in argon2).
pub fn key_and_config(data: &[u8]) {
    let _ = Config::parse(data);
    if let Ok(kf) = KeyFile::parse(data, "fuzz") {
        if kf.kdf.memory_kib <= 64 && kf.kdf.iterations <= 1 {
            let _ = kf.unwrap_key(&[0; 32], b"fuzz");
        }
    }
}
