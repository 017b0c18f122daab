//! Entry points for fuzzing the decoders of everything cairn reads from a repository. Each
//! takes arbitrary bytes and must neither panic nor hang nor allocate without bound; errors
//! are the expected outcome. Used by the cargo-fuzz targets in `fuzz/` and by the regression
//! test that replays saved crashers (`tests/engine/fuzz_regressions.rs`).

use std::sync::OnceLock;

use crate::archive::ArchiveMeta;
use crate::crypto::keyfile::KeyFile;
use crate::crypto::{Crypto, EncryptionMode, MasterKey, Padding, Suite};
use crate::format::blob::{self, BlobKind, NO_ID};
use crate::format::item::Item;
use crate::format::item::ItemReader;
use crate::index::fragment::IndexFragment;
use crate::pack::format;
use crate::repo::config::Config;
use crate::util::id::{sha256, ArchiveId};

/// The fixed key the fuzzers (and their seeds, `examples/fuzz_seeds.rs`) use.
pub fn key() -> MasterKey {
    MasterKey {
        enc_key: [7; 32],
        id_key: [9; 32],
        chunker_key: [1; 32],
    }
}

/// The fuzzers' crypto state: the fixed key in each cipher suite, unpadded and padded.
pub fn cryptos() -> &'static [Crypto; 4] {
    static C: OnceLock<[Crypto; 4]> = OnceLock::new();
    C.get_or_init(|| {
        let c = |suite, padding, session| {
            Crypto::with_session(EncryptionMode::Repokey, suite, &key(), padding, session)
        };
        [
            c(Suite::Aes256Gcm, Padding::None, [1; 16]),
            c(Suite::Aes256Gcm, Padding::Buckets, [2; 16]),
            c(Suite::ChaCha20Poly1305Blake3, Padding::None, [3; 16]),
            c(Suite::ChaCha20Poly1305Blake3, Padding::Buckets, [4; 16]),
        ]
    })
}

/// A pack: its clear framing, then opened whole under the key; and the bytes as a TOC
/// plaintext.
pub fn pack_toc(data: &[u8]) {
    let _ = format::check_framing(data, "fuzz");
    for c in cryptos() {
        let _ = format::parse(c, data, "fuzz");
    }
    let _ = format::decode_toc(data, data.len() as u64, "fuzz");
}

/// A blob, opened as every kind under the key (a chunk under the id its plaintext would
/// have if the fuzzer produced an authentic one: the seeds' id).
pub fn blob_open(data: &[u8]) {
    for c in cryptos() {
        for kind in [
            BlobKind::Chunk,
            BlobKind::Archive,
            BlobKind::IndexFragment,
            BlobKind::PackToc,
            BlobKind::Retirement,
        ] {
            let id = if kind == BlobKind::Chunk {
                c.id_of(b"hello hello hello hello fuzz").0
            } else {
                NO_ID
            };
            let _ = blob::open(c, kind, &id, data, "fuzz");
        }
    }
}

/// An index fragment: as a sealed object, and as a plaintext; and a retirement record, an
/// object of the same family (read by every writer).
pub fn index_fragment(data: &[u8]) {
    for c in cryptos() {
        let _ = IndexFragment::open(c, data, "fuzz");
        let _ = crate::repo::retire::open(c, &crate::repo::retire::object_name(data), data);
    }
    let _ = IndexFragment::decode(data, "fuzz");
}

/// An archive object (framing and sealed contents), an archive plaintext, and an item stream
/// (as one chunk, and split in two).
pub fn archive(data: &[u8]) {
    let id = ArchiveId(sha256(data));
    if crate::archive::check_object(&id, data).is_ok() {
        for c in cryptos() {
            let _ = blob::open(c, BlobKind::Archive, &NO_ID, &data[8..], "fuzz")
                .and_then(|plain| ArchiveMeta::decode(&plain, "fuzz"));
        }
    }
    let _ = ArchiveMeta::decode(data, "fuzz");
    let _ = Item::decode(data);
    let half = data.len() / 2;
    let chunks = [data[..half].to_vec(), data[half..].to_vec()];
    let refs = chunks
        .iter()
        .map(|c| crate::format::item::ChunkRef {
            id: crate::util::id::ChunkId([0; 32]),
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
            if let Ok((_, config)) = kf.unwrap_key(&[0; 32], b"fuzz") {
                let _ = Config::parse(&config);
            }
        }
    }
}
