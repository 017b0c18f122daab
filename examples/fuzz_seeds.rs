//! Writes valid objects as seeds for the fuzzers: `cargo run --example fuzz_seeds -- DIR`
//! creates DIR/<target>/seed-* (a pack, blobs, an index fragment, an archive plaintext and an
//! item stream, a key file and a config).

use std::fs;
use std::path::Path;

use cairn::archive::item::{ChunkRef, Item, ItemKind, Timestamp};
use cairn::archive::{ArchiveMeta, ArchiveStats};
use cairn::blob::seal_chunk;
use cairn::crypto::kdf::KdfParams;
use cairn::crypto::keyfile::KeyFile;
use cairn::crypto::{Crypto, EncryptionMode, MasterKey};
use cairn::id::{ChunkId, PackId};
use cairn::index::fragment::IndexFragment;
use cairn::index::StoredLoc;
use cairn::pack::format::MAGIC;
use cairn::repo::config::Config;

fn write(dir: &Path, target: &str, name: &str, data: &[u8]) {
    let d = dir.join(target);
    fs::create_dir_all(&d).expect("mkdir");
    fs::write(d.join(format!("seed-{name}")), data).expect("write");
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    let dir = Path::new(&dir);
    let key = MasterKey {
        enc_key: [7; 32],
        id_key: [9; 32],
        chunker_seed: 1,
    };
    let mut pack = MAGIC.to_vec();
    for (i, mode) in [EncryptionMode::Repokey, EncryptionMode::None]
        .into_iter()
        .enumerate()
    {
        let c = Crypto::with_session(mode, &key, [1; 16]);
        let (_, blob) = seal_chunk(&c, b"hello hello hello hello fuzz").expect("seal");
        write(dir, "blob_open", &format!("blob{i}"), &blob);
        pack.extend_from_slice(&blob);
    }
    write(dir, "pack_walk", "pack", &pack);
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
    };
    write(dir, "archive", "meta", &meta.encode());
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
    let kdf = KdfParams {
        memory_kib: 64,
        iterations: 1,
        ..KdfParams::new_default()
    };
    let kf = KeyFile::wrap(&key, &[0; 32], b"fuzz", kdf).expect("wrap");
    write(dir, "key_and_config", "key", &kf.to_bytes());
    write(
        dir,
        "key_and_config",
        "config",
        &Config::new([0; 32], EncryptionMode::Repokey, 50_000_000).to_bytes(),
    );
}
