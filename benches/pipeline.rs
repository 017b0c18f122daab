//! Micro-benchmarks of the write pipeline's stages.
//!
//! - `chunker`: FastCDC over 2:1-compressible data, with format 2's keyed gear table and, for
//!   comparison, format 1's (the crate's table XORed with a seed): the same `cut_gear`, so
//!   the two must run at the same speed.
//! - `envelope`: id (HMAC-SHA256) + lz4 + AES-256-GCM of a 1 MiB chunk, and opening it (which
//!   always recomputes the id).
//! - `packwriter_balanced`: the seed's synthetic case. Eight packs, each built from chunks
//!   whose "assembly" takes as long in total as storing the pack (an emulated slow store),
//!   written synchronously and with the store thread. The limit for one pack in flight is
//!   2 × for many packs, (2n)/(n+1) = 1.78 × for n = 8.

use std::sync::Arc;
use std::time::Duration;

use cairn::chunker::{ChunkReader, Chunker, ChunkerParams};
use cairn::crypto::{Crypto, EncryptionMode, MasterKey, Padding, Suite};
use cairn::format::blob::{open, seal_chunk, BlobKind};
use cairn::format::compress::{compress_into, literal_entropy, max_compressed_len, Codec};
use cairn::index::ChunkIndex;
use cairn::pack::writer::{PackOptions, PackWriter, Trace};
use cairn::store::mem::MemStore;
use cairn::store::slow::SlowStore;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// 4 KiB of pseudo-random bytes, 4 KiB of zeros, repeated.
fn mixed(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = seed | 1;
    for (i, block) in v.chunks_mut(4096).enumerate() {
        if i % 2 == 0 {
            for b in block.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
    }
    v
}

fn chunker(c: &mut Criterion) {
    let data = mixed(64 << 20, 1);
    let keyed = Chunker::new(ChunkerParams::DATA, &[0x5a; 32]).unwrap();
    let (gear, gear_ls) = fastcdc::v2020::get_gear_with_seed(0x1234_5678_9abc_def0);
    let seeded = Chunker::with_tables(ChunkerParams::DATA, gear, gear_ls).unwrap();
    let mut g = c.benchmark_group("chunker");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(10);
    for (name, ch) in [
        ("fastcdc_keyed_64MiB", &keyed),
        ("fastcdc_seeded_format1_64MiB", &seeded),
    ] {
        g.bench_function(name, |b| {
            let mut buf = Vec::new();
            b.iter(|| {
                let mut r = ChunkReader::new(ch, &data[..], &mut buf);
                let mut n = 0;
                while let Some(c) = r.next_chunk().unwrap() {
                    n += c.len();
                }
                assert_eq!(n, data.len());
            })
        });
    }
    g.finish();
}

fn envelope(c: &mut Criterion) {
    let data = mixed(1 << 20, 2);
    let mut g = c.benchmark_group("envelope");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for suite in Suite::ALL {
        let crypto = Crypto::of_suite(
            EncryptionMode::Repokey,
            suite,
            &MasterKey::generate(),
            Padding::None,
        );
        let (id, blob) = seal_chunk(&crypto, &data).unwrap();
        let s = suite.as_str();
        g.bench_function(format!("{s}/seal_1MiB (id+lz4+aead)"), |b| {
            b.iter(|| seal_chunk(&crypto, &data).unwrap())
        });
        g.bench_function(format!("{s}/open_1MiB (aead+lz4+id)"), |b| {
            b.iter(|| open(&crypto, BlobKind::Chunk, &id.0, &blob, "b").unwrap())
        });
        g.bench_function(format!("{s}/id_1MiB"), |b| b.iter(|| crypto.id_of(&data)));
        g.bench_function(format!("{s}/pack_hash_1MiB"), |b| {
            b.iter(|| crypto.pack_hash(&data))
        });
        let mut buf = data.clone();
        g.bench_function(format!("{s}/aead_1MiB"), |b| {
            b.iter(|| crypto.seal_in_place(0, b"", &mut buf))
        });
    }
    g.finish();
}

const PACKS: usize = 8;
const CHUNKS_PER_PACK: usize = 10;
const CHUNK: usize = 20_000;
/// Assembly per chunk; ten of them take as long as one pack's store.
const ASSEMBLY: Duration = Duration::from_millis(4);
const STORE: Duration = Duration::from_millis(40);

fn packwriter_balanced(c: &mut Criterion) {
    let crypto = Arc::new(Crypto::new(
        EncryptionMode::None,
        &MasterKey::for_unencrypted(&[0; 32]),
        Padding::None,
    ));
    let blobs: Vec<_> = (0..PACKS * CHUNKS_PER_PACK)
        .map(|i| seal_chunk(&crypto, &mixed(CHUNK, 2 * i as u64 + 11)).unwrap())
        .collect();
    let pack_size = blobs[..CHUNKS_PER_PACK]
        .iter()
        .map(|(_, b)| b.len())
        .sum::<usize>()
        - 10;
    let mut g = c.benchmark_group("packwriter_balanced");
    g.sample_size(10);
    for async_store in [false, true] {
        let name = if async_store { "async" } else { "sync" };
        g.bench_function(name, |b| {
            b.iter(|| {
                let store = Arc::new(SlowStore::new(Arc::new(MemStore::new()), STORE, None));
                let opts = PackOptions {
                    target_size: pack_size,
                    async_store,
                    max_in_flight: 1,
                    max_buffers: None,
                    paced: false,
                    trace: Trace::Off,
                };
                let mut w = PackWriter::new(store, crypto.clone(), ChunkIndex::new(), opts);
                for (id, blob) in &blobs {
                    std::thread::sleep(ASSEMBLY);
                    w.add(*id, CHUNK as u32, blob).unwrap();
                }
                w.flush().unwrap();
                assert_eq!(w.stats().packs, PACKS as u64);
            })
        });
    }
    g.finish();
}

/// Real text: this crate's own sources and documents, concatenated, cut to `len`.
fn text(len: usize) -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    for dir in ["src", "docs", "tests"] {
        for e in walkdir::WalkDir::new(root.join(dir)).sort_by_file_name() {
            let e = e.unwrap();
            if e.file_type().is_file() {
                v.extend(std::fs::read(e.path()).unwrap());
            }
        }
    }
    assert!(v.len() >= len, "only {} bytes of text", v.len());
    v.truncate(len);
    v
}

fn compress(c: &mut Criterion) {
    let mut random = vec![0u8; 1 << 20];
    let mut x = 7u64;
    for b in random.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut small = mixed(4096, 5);
    small[2048..].fill(0);
    let sets = [
        ("mixed_1MiB", mixed(1 << 20, 3)),
        ("small_4KiB", small),
        ("random_1MiB", random),
        ("text_1MiB", text(1 << 20)),
        ("text_16KiB", text(16 << 10)),
    ];
    let mut g = c.benchmark_group("compress");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for (name, data) in &sets {
        g.throughput(Throughput::Bytes(data.len() as u64));
        let mut out = vec![0u8; max_compressed_len(data.len())];
        for codec in [
            Codec::Lz4,
            Codec::Zstd(1),
            Codec::Zstd(2),
            Codec::Zstd(3),
            Codec::Auto(1),
        ] {
            let (_, n) = compress_into(data, &mut out, codec);
            eprintln!("{name} {codec}: {n} bytes");
            g.bench_function(format!("{name}/{codec}"), |b| {
                b.iter(|| compress_into(data, &mut out, codec))
            });
        }
        g.bench_function(format!("{name}/estimate"), |b| {
            b.iter(|| literal_entropy(data))
        });
        eprintln!("{name}: estimate {:?} bits", literal_entropy(data));
    }
    g.finish();
}

criterion_group!(benches, chunker, envelope, packwriter_balanced, compress);
criterion_main!(benches);
