//! Reliability: keys and nonces.
//!
//! 7. 1,000 wrong passphrases are all rejected, clearly; a key file with absurd KDF
//!    parameters is rejected at once; a truncated key file is rejected.
//! 8. Many sessions encrypting in parallel never reuse a (session, nonce) pair; the same data
//!    in two repositories gets different chunk ids.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use cairn::crypto::{Crypto, EncryptionMode, MasterKey, Padding};
use cairn::error::Error;
use cairn::format::blob::seal_chunk;
use cairn::repo::{InitOptions, Repository};
use cairn::store::mem::MemStore;
use common::{random_bytes, stderr, Repo};

fn cheap_repo() -> Arc<MemStore> {
    std::env::set_var("CAIRN_TEST_CHEAP_KDF", "1");
    let mem = Arc::new(MemStore::new());
    Repository::init(mem.clone(), &InitOptions::default(), || {
        Ok(b"the right one".to_vec())
    })
    .unwrap();
    mem
}

#[test]
fn a_thousand_wrong_passphrases_are_rejected() {
    let mem = cheap_repo();
    let mut rejected = 0;
    for i in 0..1000u32 {
        let wrong = format!("wrong {i}").into_bytes();
        match Repository::open(mem.clone(), || Ok(wrong)) {
            Err(Error::WrongPassphrase) => rejected += 1,
            Err(e) => panic!("attempt {i}: unexpected error {e}"),
            Ok(_) => panic!("attempt {i}: a wrong passphrase opened the repository"),
        }
    }
    // Near misses too: a prefix, an extra byte, another case.
    for near in [
        &b"the right on"[..],
        b"the right one ",
        b"The right one",
        b"",
    ] {
        assert!(matches!(
            Repository::open(mem.clone(), || Ok(near.to_vec())),
            Err(Error::WrongPassphrase)
        ));
    }
    assert!(Repository::open(mem, || Ok(b"the right one".to_vec())).is_ok());
    eprintln!("keys: {rejected} of 1000 wrong passphrases rejected (and 4 near misses)");
    // Through the binary the message is clear and the exit status 2.
    let repo = Repo::new();
    let o = repo.run_env(&["info"], &[("CAIRN_PASSPHRASE", "nope")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("wrong passphrase"), "{}", stderr(&o));
}

#[test]
fn absurd_kdf_parameters_are_rejected_at_once() {
    let repo = Repo::new();
    let key = std::fs::read_dir(repo.path.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&key).unwrap()).unwrap();
    // Each is refused by what it is, before any work (the KDF's own unit test shows that
    // the check does none).
    let range = "KDF parameters out of range";
    for (field, value, why) in [
        ("memory_kib", serde_json::json!(4_294_967_295u64), range),
        ("memory_kib", serde_json::json!(2_000_000_000u64), range),
        ("iterations", serde_json::json!(4_000_000_000u64), range),
        ("parallelism", serde_json::json!(1_000_000u64), range),
        ("memory_kib", serde_json::json!(-1), "key file"),
        ("salt", serde_json::json!(""), "KDF salt has a bad length"),
    ] {
        let mut k = original.clone();
        k["kdf"][field] = value.clone();
        std::fs::write(&key, serde_json::to_vec(&k).unwrap()).unwrap();
        let o = repo.run(&["info"]);
        assert_eq!(o.status.code(), Some(2), "{field}={value}");
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{field}={value}: {}", stderr(&o));
    }
    // Truncated key files: every length is rejected without a panic.
    let bytes = serde_json::to_vec(&original).unwrap();
    for cut in [0, 1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 2] {
        std::fs::write(&key, &bytes[..cut]).unwrap();
        let o = repo.run(&["info"]);
        assert_eq!(o.status.code(), Some(2), "cut at {cut}");
        assert!(!stderr(&o).contains("panicked"));
    }
    eprintln!("keys: 6 absurd KDF settings and 5 truncated key files rejected, each in under 2 s");
}

#[test]
fn nonces_never_repeat_across_parallel_sessions() {
    let key = MasterKey::generate();
    let mut seen = HashSet::new();
    let mut total = 0;
    for _ in 0..100 {
        let session = Arc::new(Crypto::new(EncryptionMode::Repokey, &key, Padding::None));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let s = session.clone();
                std::thread::spawn(move || {
                    (0..100u64)
                        .map(|i| {
                            let (_, blob) =
                                seal_chunk(&s, &random_bytes(t * 1000 + i, 64)).unwrap();
                            // The (session, nonce) the blob was sealed with, unmasked.
                            s.unmask_header(&blob).unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for pair in h.join().unwrap() {
                total += 1;
                assert!(seen.insert(pair), "(session, nonce) reused: {pair:?}");
            }
        }
    }
    eprintln!(
        "nonces: {total} blobs from 100 sessions × 4 threads, 0 repeated (session, nonce) pairs"
    );
}

#[test]
fn the_same_data_in_two_repositories_shares_no_chunk_id() {
    let a = cheap_repo();
    let b = cheap_repo();
    let ra = Repository::open(a.clone(), || Ok(b"the right one".to_vec())).unwrap();
    let rb = Repository::open(b.clone(), || Ok(b"the right one".to_vec())).unwrap();
    let data: Vec<Vec<u8>> = (0..200).map(|i| random_bytes(i, 1000)).collect();
    let ids_a: HashSet<_> = data.iter().map(|d| ra.crypto().id_of(d)).collect();
    let ids_b: HashSet<_> = data.iter().map(|d| rb.crypto().id_of(d)).collect();
    assert_eq!(ids_a.intersection(&ids_b).count(), 0);
    // And the chunkers, keyed too, cut the same data differently.
    let big = random_bytes(5, 20 << 20);
    let cuts = |r: &Repository| -> Vec<usize> {
        r.data_chunker()
            .unwrap()
            .split(&big)
            .map(|c| c.len())
            .collect()
    };
    assert_ne!(cuts(&ra), cuts(&rb));
    // Through the binary: the same tree in two repositories, indexes disjoint.
    let one = Repo::new();
    let two = Repo::new();
    let src = one.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..5 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(i, 200_000)).unwrap();
    }
    one.ok(&["create", "x", src.to_str().unwrap()]);
    two.ok(&["create", "x", src.to_str().unwrap()]);
    let ids = |r: &Repo| -> HashSet<cairn::util::id::ChunkId> {
        let store = Arc::new(cairn::store::local::LocalStore::new(&r.path));
        let repo = Repository::open(store, || Ok(common::PASSPHRASE.to_vec())).unwrap();
        let (index, _) = repo.load_index().unwrap();
        index.iter_stored().map(|(id, _, _)| id).collect()
    };
    assert_eq!(ids(&one).intersection(&ids(&two)).count(), 0);
    eprintln!("keyed ids: 200 chunks and one backed-up tree in two repositories, 0 shared ids");
}
