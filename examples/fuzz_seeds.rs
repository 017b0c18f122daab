//! Writes valid objects as seeds for the fuzzers: `cargo run --example fuzz_seeds -- DIR`
//! creates DIR/<target>/seed-* (a pack and a TOC plaintext, blobs, an index fragment sealed
//! and in plaintext, an archive object, its plaintext and an item stream, a key file and a
//! config), sealed under the fuzzers' fixed key so that the fuzzers start past the
//! authentication.

use std::fs;
use std::path::Path;

use cairn::archive::{ArchiveMeta, ArchiveStats};
use cairn::crypto::kdf::KdfParams;
use cairn::crypto::keyfile::KeyFile;
use cairn::crypto::{Crypto, EncryptionMode, Padding};
use cairn::format::blob::{self, seal_chunk, BlobKind, NO_ID};
use cairn::format::item::{ChunkRef, Item, ItemKind, Timestamp};
use cairn::fuzzing::{cryptos, key};
use cairn::index::fragment::IndexFragment;
use cairn::index::StoredLoc;
use cairn::pack::format::{self, PackEntry, MAGIC};
use cairn::repo::config::Config;
use cairn::util::id::{ChunkId, PackId};

fn write(dir: &Path, target: &str, name: &str, data: &[u8]) {
    let d = dir.join(target);
    fs::create_dir_all(&d).expect("mkdir");
    fs::write(d.join(format!("seed-{name}")), data).expect("write");
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    let dir = Path::new(&dir);
    packs_and_blobs(dir);
    let c = &cryptos()[0];
    index_fragment(dir, c);
    archive_object(dir, c);
    item_stream(dir);
    key_and_config(dir);
}

/// A pack of two chunks and its TOC's plaintext, and the chunks' blobs, under each of the
/// fuzzers' cryptos.
fn packs_and_blobs(dir: &Path) {
    for (i, c) in cryptos().iter().enumerate() {
        let mut pack = MAGIC.to_vec();
        let mut entries = Vec::new();
        for text in [&b"hello hello hello hello fuzz"[..], b"a second chunk"] {
            let (id, blob) = seal_chunk(c, text).expect("seal");
            write(
                dir,
                "blob_open",
                &format!("blob{i}-{}", entries.len()),
                &blob,
            );
            entries.push(PackEntry {
                id,
                kind: BlobKind::Chunk,
                offset: pack.len() as u32,
                len: blob.len() as u32,
                plain_len: text.len() as u32,
            });
            pack.extend_from_slice(&blob);
        }
        let blobs_end = pack.len() as u64;
        let natural = format::pack_len(pack.len() - format::HEADER_SIZE, entries.len());
        format::finish(c, &mut pack, &entries, natural as u64 + 100).expect("pack");
        write(dir, "pack_toc", &format!("pack{i}"), &pack);
        let toc = format::parse(c, &pack, "seed").expect("toc");
        assert_eq!(toc.blobs_end, blobs_end);
        write(
            dir,
            "pack_toc",
            &format!("toc{i}"),
            &format::encode_toc(&toc.entries, &toc.data_hash, toc.filler_len() as u32),
        );
    }
}

/// An index fragment, in plaintext and sealed.
fn index_fragment(dir: &Path, c: &Crypto) {
    let frag = IndexFragment::from_entries((0..3u8).map(|i| {
        (
            ChunkId([i; 32]),
            PackId([i % 2; 32]),
            StoredLoc {
                pack: 0,
                offset: 8 + u32::from(i) * 100,
                len: 100,
                plain_len: 80,
            },
        )
    }));
    write(dir, "index_fragment", "fragment", &frag.encode());
    write(
        dir,
        "index_fragment",
        "sealed",
        &frag.seal(c).expect("seal"),
    );
}

/// An archive's metadata, and the archive object that seals it.
fn archive_object(dir: &Path, c: &Crypto) {
    let meta = ArchiveMeta {
        name: "seed".into(),
        comment: "c".into(),
        hostname: "h".into(),
        username: "u".into(),
        start: Timestamp { secs: 1, nanos: 2 },
        end: Timestamp { secs: 3, nanos: 4 },
        command_line: vec!["cairn".into()],
        items: vec![ChunkRef {
            id: ChunkId([5; 32]),
            len: 10,
        }],
        stats: ArchiveStats::default(),
        copied_from: Some(cairn::util::id::ArchiveId([6; 32])),
        replaces: Some(cairn::util::id::ArchiveId([5; 32])),
        tags: Vec::new(),
    };
    write(dir, "archive", "meta", &meta.encode());
    let mut object = cairn::archive::OBJECT_MAGIC.to_vec();
    object.extend_from_slice(
        &blob::seal(c, BlobKind::Archive, &NO_ID, &meta.encode()).expect("seal"),
    );
    write(dir, "archive", "object", &object);
}

/// An item stream: a directory, a file and a symlink.
fn item_stream(dir: &Path) {
    let mut stream = Vec::new();
    for (k, p) in [
        (ItemKind::Dir, "d"),
        (ItemKind::File, "d/f"),
        (ItemKind::Symlink, "d/l"),
    ] {
        let mut it = Item::new(k, p.as_bytes().to_vec());
        it.chunks = vec![ChunkRef {
            id: ChunkId([3; 32]),
            len: 5,
        }];
        it.xattrs = vec![(b"user.a".to_vec(), b"b".to_vec())];
        it.encode_into(&mut stream);
    }
    write(dir, "archive", "items", &stream);
}

/// A key file and the config it authenticates.
fn key_and_config(dir: &Path) {
    let kdf = KdfParams {
        memory_kib: 64,
        iterations: 1,
        ..KdfParams::new_default()
    };
    let config = Config::new(
        [0; 32],
        EncryptionMode::Repokey,
        cairn::crypto::Suite::Aes256Gcm,
        50_000_000,
        Padding::None,
    )
    .to_bytes();
    let kf = KeyFile::wrap(&key(), &config, &[0; 32], b"fuzz", kdf).expect("wrap");
    write(dir, "key_and_config", "key", &kf.to_bytes());
    write(dir, "key_and_config", "config", &config);
}
